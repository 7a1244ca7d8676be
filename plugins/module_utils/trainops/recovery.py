"""Recovery without a person: whether a failed attempt is launched again, and what the attempts cost.

train.yml records one attempt per launch (:func:`attempt_record`): when it started and ended, the checkpoint it
resumed from and the one it left, the last iteration it reached, how it ended and why. After a failure,
:func:`retry_decision` says whether another attempt starts, from Megatron's own ``--load`` of the latest
checkpoint. :func:`goodput` sums the attempts up for the report.

Some failures are never retried, because a new attempt would fail the same way: a failure before the first
iteration (start-up: arguments, files, data, the first allocation), out of memory, and a missing file or module.
Progress is checked as nvidia-resiliency-ext's restart policy does: two attempts in a row that leave no checkpoint
beyond the one they resumed from end the run.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from . import kinds, records

#: Failure kinds of the log parser that a restart does not cure (:data:`.kinds.KINDS`).
NEVER_RETRIED_KINDS = kinds.NEVER_RESTARTED
#: Exceptions of the failing rank that a restart does not cure.
_NEVER_RETRIED_EXCEPTION = re.compile(r"\b(FileNotFoundError|ModuleNotFoundError|ImportError|NotADirectoryError)\b")
#: Outcomes (kinds) that may be retried: a rank or node that exited, was killed or lost, a hang.
RETRIED_OUTCOMES = kinds.RESTARTED
#: Why a run ends when stop.yml stops it (asks its supervisor, or removes its restart mark).
STOPPED = "stop.yml stopped the run: no new attempt"


#: A NaN this many iterations or fewer after the resume blames the save resumed from.
NAN_AFTER_RESUME = 10
#: Outcomes that say nothing of the save resumed from: a node lost, Slurm's limit or cancel, stop.yml.
_NOT_THE_SAVE = ("lost", "timeout", "cancelled", "node_fail", "stopped")


def save_failure(outcome: Mapping[str, Any], summary: Mapping[str, Any] | None, resumed_from: int | None) -> str | None:
    """Why the save an attempt resumed from is to blame for its failure, or None: the attempt did not load it (no
    rank said ``successfully loaded checkpoint ... at iteration N`` and no iteration came after it), or went NaN
    within :data:`NAN_AFTER_RESUME` iterations of it. A save the scan verified can still hold bytes that load into
    garbage or not at all; the next attempt then falls back to the save before."""
    if resumed_from is None or outcome.get("state") != "failed" or outcome.get("kind") in _NOT_THE_SAVE:
        return None
    summary = summary or {}
    last = summary.get("last_iteration")
    loaded = {entry.get("iteration") for entry in (summary.get("checkpoints") or {}).get("loaded") or []}
    if resumed_from not in loaded and (last is None or last <= resumed_from):
        return (
            f"did not load iteration {resumed_from}'s save (no rank said it loaded it, and no iteration came after "
            f"it): {summary.get('failure_text') or outcome.get('reason') or 'no error named'}"
        )
    nan = summary.get("first_nan")
    seen = nan and (nan.get("iteration") if nan.get("iteration") is not None else last)
    if nan and (seen is None or seen <= resumed_from + NAN_AFTER_RESUME):
        return (
            f"went NaN within {NAN_AFTER_RESUME} iterations of resuming from iteration {resumed_from}'s save "
            f"({nan.get('message')})"
        )
    return None


def attempt_record(
    attempt: int,
    started_at: float,
    ended_at: float,
    outcome: Mapping[str, Any],
    summary: Mapping[str, Any] | None,
    resumed_from: int | None,
    checkpoint_at_end: int | None,
) -> dict[str, Any]:
    """One attempt: ``outcome`` is the watcher's (state, kind, node, reason, first_iteration_s), ``summary`` the
    report's summary of its logs (``last_iteration``, ``failure`` with the kind of the error torchrun's summary
    points at), iterations as Megatron counts them.

    ``node`` and ``cause`` name the culprit: the report's failure (a hang's culprit, a lost node, the rank whose
    error explains the others), not the first node the watcher saw exit, which may only have lost its peers (a
    rank SIGKILLed on node2 makes node1's torchrun exit too, and sooner). What the watcher saw is kept in
    ``seen_first``."""
    summary = summary or {}
    failure = summary.get("failure") or {}
    last = summary.get("last_iteration")
    if last is None:  # the last rank's logs were not collected (its node is gone): what the watcher read of them
        last = (outcome.get("last_iteration") or {}).get("iteration")
    if checkpoint_at_end is not None and (last is None or last < checkpoint_at_end):
        last = checkpoint_at_end  # a checkpoint at N is saved after iteration N: the attempt got that far at least
    # torchrun's summary (child_failed) names the rank; the error it points at says what went wrong
    source = failure.get("error_source") or {}
    first_s = outcome.get("first_iteration_s")
    return {
        "attempt": attempt,
        "started_at": round(started_at, 1),
        "ended_at": round(ended_at, 1),
        "state": outcome.get("state"),
        "kind": outcome.get("kind"),
        "node": failure.get("node") or outcome.get("node"),
        "rank": failure.get("rank"),
        "cause": summary.get("failure_text") or outcome.get("reason") or failure.get("message") or "",
        "seen_first": outcome.get("reason"),
        "failure_kind": source.get("kind") or failure.get("kind"),
        "exception": " ".join(str(failure.get(k)) for k in ("exception", "error") if failure.get(k)) or None,
        "resumed_from": resumed_from,
        "last_iteration": last,
        "checkpoint_at_end": checkpoint_at_end,
        "first_iteration_at": None if first_s is None else round(started_at + float(first_s), 1),
        "save_failure": save_failure(outcome, summary, resumed_from),
    }


def retry_decision(
    attempts: Sequence[Mapping[str, Any]],
    max_restarts: int,
    stop_requested: bool = False,
    lost: Mapping[str, str] | None = None,
    elastic: bool = False,
    min_nodes: int = 1,
    plan_nodes: int = 0,
) -> dict:
    """``{"retry": bool, "reason": str}`` after the last of ``attempts`` ended; ``lost``: the plan's nodes that
    cannot take part in another attempt (node -> why); with ``elastic`` the next attempt is re-planned on the
    ``plan_nodes - len(lost)`` nodes that remain, when they are at least ``min_nodes``.

    An attempt whose record blames the save it resumed from (``save_failure``: it did not load, or went NaN just
    after the resume) is retried from the save before it, although it failed before its first iteration; when the
    attempt before failed the same way on another save, the cause is not the save and the run ends."""
    last = attempts[-1]
    k = last["attempt"]
    if last["state"] != "failed":
        return {"retry": False, "reason": f"attempt {k} {last['state']}"}
    if stop_requested:
        return {"retry": False, "reason": STOPPED}
    if max_restarts <= 0:
        return {"retry": False, "reason": "max_restarts=0: no restart (-e max_restarts=N restarts after a failure)"}
    if len(attempts) > max_restarts:
        return {"retry": False, "reason": f"max_restarts={max_restarts} reached: {len(attempts)} attempts failed"}
    named = "; ".join(f"{node}: {why}" for node, why in (lost or {}).items())
    if lost and elastic:
        remain = plan_nodes - len(lost)
        if remain < max(1, min_nodes):
            return {
                "retry": False,
                "reason": f"{named}. {remain} node(s) remain, fewer than min_nodes={min_nodes}: no re-plan",
            }
    elif lost:
        return {
            "retry": False,
            "reason": f"{named}. The run cannot go on without {', '.join(lost)}: bring it back and run train.yml "
            "again (it resumes from the last checkpoint), or re-plan on the nodes that remain (-e elastic=true)",
        }
    if last.get("save_failure"):
        before = attempts[-2] if len(attempts) >= 2 else {}
        if before.get("save_failure") and before.get("resumed_from") == last.get("resumed_from"):
            return {
                "retry": False,
                "reason": f"iteration {last['resumed_from']}'s save failed twice ({last['save_failure']}): "
                "no more attempts on it (-e verify_checkpoints=false does not set a save aside)",
            }
        if before.get("save_failure"):
            return {
                "retry": False,
                "reason": f"attempts {k - 1} and {k} failed the same way on two saves (iteration "
                f"{before['resumed_from']}: {before['save_failure']}; iteration {last['resumed_from']}: "
                f"{last['save_failure']}): the cause is not the save",
            }
        reason = (
            f"attempt {k} {last['save_failure']}; that save is set aside and the next attempt falls back to the "
            f"verified save before it (restart {len(attempts)} of {max_restarts})"
        )
        return {"retry": True, "reason": reason, "replan": bool(lost), "fallback": last["resumed_from"]}
    if last["kind"] not in RETRIED_OUTCOMES:
        return {"retry": False, "reason": f"attempt {k} failed ({last['kind'] or 'unknown'}): not one a restart cures"}
    if last["last_iteration"] is None or (
        last["resumed_from"] is not None and last["last_iteration"] <= last["resumed_from"]
    ):
        return {
            "retry": False,
            "reason": f"attempt {k} failed before its first iteration: a start-up failure (arguments, files, data, "
            "memory) fails the same way again",
        }
    if last["failure_kind"] in NEVER_RETRIED_KINDS:
        return {"retry": False, "reason": f"attempt {k}: {NEVER_RETRIED_KINDS[last['failure_kind']]}"}
    if _NEVER_RETRIED_EXCEPTION.search(last.get("exception") or ""):
        return {"retry": False, "reason": f"attempt {k}: {last['exception']}: a missing file fails the same way again"}
    stalled = [a for a in attempts[-2:] if not _progressed(a)]
    if len(attempts) >= 2 and len(stalled) == 2:
        mark = last["checkpoint_at_end"]
        where = f"checkpoint {mark}" if mark is not None else "a first checkpoint"
        return {
            "retry": False,
            "reason": f"attempts {k - 1} and {k} made no progress beyond {where}: the failure repeats before the next "
            "save (lower training.save_interval, or find the cause)",
        }
    reason = f"attempt {k} failed ({last['kind']}): restart {len(attempts)} of {max_restarts}"
    if lost:
        reason += f", re-planned without {', '.join(lost)} (-e elastic=true)"
    return {"retry": True, "reason": reason, "replan": bool(lost)}


def replan_note(old: Mapping[str, Any], new: Mapping[str, Any], lost: Mapping[str, str]) -> str:
    """What an elastic re-plan changed, as ``nodes 2 -> 1, world size 16 -> 8 ranks, dp 4 -> 2, micro-batches
    2 -> 4, global batch 8 unchanged, node2 left out: <why>``; a spare that takes a place with other slots than
    the node it replaces is named with them (the world size then changes, though the node count does not)."""
    parts = [f"nodes {len(old['nodes'])} -> {len(new['nodes'])}"]
    parts += [
        f"{label} {old[key]} -> {new[key]}{unit}"
        for label, key, unit in (("world size", "world_size", " ranks"), ("dp", "dp", ""),
                                 ("micro-batches", "num_microbatches", ""), ("global batch", "global_batch_size", ""))
        if old.get(key) != new.get(key)
    ]  # fmt: skip
    if old.get("global_batch_size") == new.get("global_batch_size"):
        parts.append(f"global batch {new.get('global_batch_size')} unchanged")
    parts += [f"{node} left out: {why}" for node, why in lost.items()]
    before = {n["name"] for n in old["nodes"]}
    fresh = iter(n for n in new["nodes"] if n["name"] not in before)  # in rank order: each in a lost node's place
    spares = [(was, next(fresh, None)) for was in old["nodes"] if was["name"] in lost]
    spares += [({}, n) for n in fresh]
    for was, node in spares:
        if node is None:
            continue
        other = node.get("slots") is not None and was.get("slots") not in (None, node.get("slots"))
        slots = f" with {node['slots']} slot(s) for {was['name']}'s {was['slots']}" if other else ""
        parts.append(f"{node['name']} (a spare) takes a place{slots}")
    return ", ".join(parts)


def lost_nodes(plan: Mapping[str, Any], answering: Sequence[str], reach: Mapping[str, Any]) -> dict[str, str]:
    """The plan's nodes that cannot take part in another attempt: out of the play (a task failed or the node
    became unreachable) or unreachable now (``reach``: node -> its ping result), each with why."""
    lost = {}
    for node in plan["nodes"]:
        name = node["name"]
        result = reach.get(name) or {}
        if name not in answering:
            lost[name] = "left the play (unreachable, or a task on it failed)"
        elif result.get("unreachable"):
            lost[name] = f"unreachable ({' '.join(str(result.get('msg') or 'no answer').split())[:200]})"
    return lost


def _progressed(attempt: Mapping[str, Any]) -> bool:
    """Whether the attempt left a checkpoint beyond the one it resumed from."""
    end = attempt.get("checkpoint_at_end")
    start = attempt.get("resumed_from")
    return end is not None and (start is None or end > start)


def goodput(attempts: Sequence[Mapping[str, Any]], seconds_per_iteration: float | None) -> dict[str, Any]:
    """The attempts summed up: iterations lost (run again after a restart), time to recover (failure detected to
    the next attempt's first iteration), and goodput: the time of the iterations that count over the wall time."""
    if not attempts:
        return {}
    lost = 0
    recover = []
    for before, after in zip(attempts, attempts[1:], strict=False):
        # the work after the save the next attempt resumed from is lost (a fall back to an older save loses more)
        kept = after.get("resumed_from") if after.get("resumed_from") is not None else before.get("checkpoint_at_end")
        if before.get("last_iteration") is not None:
            lost += max(0, before["last_iteration"] - (kept if kept is not None else 0))
        if after.get("first_iteration_at") is not None:
            recover.append(round(after["first_iteration_at"] - before["ended_at"], 1))
    wall = attempts[-1]["ended_at"] - attempts[0]["started_at"]
    start = attempts[0].get("resumed_from") or 0
    final = attempts[-1].get("last_iteration")
    counted = max(0, (final if final is not None else start) - start)
    productive = counted * seconds_per_iteration if seconds_per_iteration else None
    return {
        "attempts": len(attempts),
        "restarts": len(attempts) - 1,
        "iterations_lost": lost,
        "time_to_recover_s": recover,
        "wall_s": round(wall, 1),
        "productive_s": None if productive is None else round(productive, 1),
        "goodput": None if productive is None or wall <= 0 else round(min(1.0, productive / wall), 3),
    }


#: Directory of one attempt in a run's controller directory (``runs/<exp>/<run_id>/attempt-<k>/``).
ATTEMPT_PREFIX = "attempt-"
#: What stays in the run's directory when an attempt is set aside: the plan, the attempts' state, the earlier attempts.
#: The run's attempts state (trainops.attempts), kept in the run directory.
STATE_FILE = "attempts.json"
#: What an attempt's set-aside leaves in the run's directory: the plan, the attempts' state, and the run's record
#: and its events (trainops.run_record), which every attempt of the run reads and changes.
_KEPT = ("plan", STATE_FILE, "run.json", "events.jsonl", "health-incidents.jsonl")
_KEPT_PREFIXES = ("attempts-",)


def attempt_dir(run_dir: str, attempt: int) -> str:
    return os.path.join(run_dir, f"{ATTEMPT_PREFIX}{attempt}")


def attempt_dirs(run_dir: str) -> list[str]:
    """The names of the run's attempt directories, in attempt order."""
    if not os.path.isdir(run_dir):
        return []
    names = [n for n in os.listdir(run_dir) if n.startswith(ATTEMPT_PREFIX) and n[len(ATTEMPT_PREFIX) :].isdigit()]
    return sorted(names, key=lambda n: int(n[len(ATTEMPT_PREFIX) :]))


def write_attempt(
    run_dir: str, record: Mapping[str, Any], set_aside: bool, plan: Mapping[str, Any] | None = None
) -> str:
    """Write ``attempt-<k>/attempt.json`` (and the attempt's ``plan.json``, which an elastic re-plan replaces in
    ``plan/``); with ``set_aside`` first move everything the attempt left in the run's directory (each node's
    logs, its report, its hang evidence) into ``attempt-<k>/``, so the next attempt starts with a clean directory.
    Returns the attempt's directory."""
    target = attempt_dir(run_dir, int(record["attempt"]))
    os.makedirs(target, exist_ok=True)
    if set_aside:
        for name in sorted(os.listdir(run_dir)):
            if name in _KEPT or name.startswith((ATTEMPT_PREFIX, ".", *_KEPT_PREFIXES)):
                continue
            os.replace(os.path.join(run_dir, name), os.path.join(target, name))
    for name, content in (("attempt.json", record), ("plan.json", plan)):
        if content is not None:
            records.write_json(os.path.join(target, name), dict(content))
    return target


def read_attempts(run_dir: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Every attempt's record (``attempt-<k>/attempt.json``) in attempt order ([] for a run of one attempt), and
    a warning for each that cannot be read (it is left out: naming the file and the fix)."""
    found, warnings = [], []
    fix = "the report leaves this attempt out (restore it from a copy, or move it away to silence this)"
    for name in attempt_dirs(run_dir):
        path = os.path.join(run_dir, name, "attempt.json")
        try:
            record = records.read_json(path, "attempt record", fix)
        except records.RecordError as exc:
            warnings.append(str(exc))
            continue
        if record is None:
            continue
        numbers = [record.get(k) for k in ("attempt", "started_at", "ended_at")]
        if all(isinstance(n, (int, float)) and not isinstance(n, bool) for n in numbers):
            found.append(record)
        else:
            warnings.append(records.printable(f"{path} lacks a number for attempt, started_at or ended_at; {fix}"))
    return found, warnings


def attempts_table(attempts: Sequence[Mapping[str, Any]], recovery: Mapping[str, Any]) -> list[str]:
    """The report's lines on the attempts and goodput."""
    if len(attempts) < 2 and not recovery.get("restarts"):
        return []
    lines = []
    for a in attempts:
        resumed = "a fresh start" if a.get("resumed_from") is None else f"checkpoint {a['resumed_from']}"
        reached = "-" if a.get("last_iteration") is None else a["last_iteration"]
        ending = a.get("state") or "?"
        if a.get("state") == "failed":
            ending = f"failed ({a.get('kind') or '?'}{', ' + a['node'] if a.get('node') else ''}): {a.get('cause')}"
        if a.get("save_failure"):
            ending = f"failed on its save, set aside: {a['save_failure']}"
        lines.append(
            f"attempt {a['attempt']:<4} from {resumed}, reached iteration {reached}, "
            f"{round(a['ended_at'] - a['started_at'])} s, {ending}"
        )
    recover = ", ".join(f"{s:g} s" for s in recovery.get("time_to_recover_s") or []) or "-"
    goodput = recovery.get("goodput")
    lines.append(
        f"recovery     {recovery.get('restarts', 0)} restart(s), {recovery.get('iterations_lost', 0)} iteration(s) "
        f"lost, time to recover {recover}, goodput {'-' if goodput is None else format(goodput, '.1%')}"
    )
    return lines
