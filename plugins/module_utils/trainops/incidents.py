"""The site's incident record: which node failed a run, when, how, and where the evidence is.

One JSON line per incident in ``<runs_dir>/incidents.jsonl`` on the controller, beside the runs, appended and never
rewritten: a hang's culprit, a rank that died (the culprit the report names, not a rank that only lost its peer), a
node lost during a run. A node implicated ``limit`` times within ``window_days`` (2 in 14 days by default) is left
out of the next plan (:func:`implicated`) until it is cleared (:func:`clear`, which appends a ``cleared`` line: the
history stays). A clear covers every incident of the node above it in the record, whatever time the incident
says (a node's clock that ran ahead does not keep it out). Recording a run again adds nothing: an incident is keyed by
its run, attempt, node and kind. A run's incidents are recorded by the terminal that follows it to its end: the
train.yml that launched it, or status.yml -e follow=true (a run launched with -e wait=false, or whose train.yml was
killed); report.yml records none (a node it cannot reach then is not a node the run lost). :mod:`.records`' helpers
write and read the file; a damaged line is named and skipped.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from . import records as records_io
from .invocation import command

#: The incidents of the run supervisor's health checks after an attempt, in the run's state (trainops.lifecycle);
#: train.yml's report adds them to the site's record when it collects the run.
HEALTH_FILE = "health-incidents.jsonl"
FILE_NAME = "incidents.jsonl"
DEFAULT_WINDOW_DAYS = 14.0
DEFAULT_LIMIT = 2
#: What a rank's failure says when the device failed it (not the program): an attempt that ends with one isolates
#: the node, as a hang's culprit does. Only messages the vendors' runtimes print.
DEVICE_ERROR = re.compile(
    r"uncorrectable ECC error|ECC error encountered|Xid\b|GPU is lost|fallen off the bus|unspecified launch failure|"
    r"MUSA error: (?:uncorrectable|hardware)",
    re.IGNORECASE,
)


#: Attempt outcomes (the watcher's and Slurm's kinds) that can be a node's fault; a stop, a launch that failed, a
#: time limit or a cancel are not.
NODE_FAULTS = ("hang", "lost", "exited", "killed", "node_fail")
#: A rank killed by a signal (torchrun's "Signal 9 (SIGKILL) received by PID", "exitcode: -11"): from outside the
#: program (the kernel's OOM killer, a bus error, a person), so it counts against its node.
_SIGNALLED = re.compile(r"\bSignal \d+|\bSIG(?:KILL|SEGV|BUS|ILL|ABRT)\b|exitcode: -\d+")


def path_in(runs_dir: str) -> str:
    return os.path.join(runs_dir, FILE_NAME)


def _problem(record: Mapping[str, Any]) -> str | None:
    """What an incident line lacks to be read, or None."""
    for key in ("node", "kind"):
        if not isinstance(record.get(key), str) or not record[key]:
            return f"has no {key!r} (a name)"
    time = record.get("time")
    if time is not None and (isinstance(time, bool) or not isinstance(time, (int, float))):
        return f"has a time that is not a number ({time!r:.40})"
    return None


def read(path: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Every good line of the record, in file order, and a warning naming the file and line of each bad one (not
    JSON, not UTF-8, cut short by a crash, not an object, no node or kind): :func:`.records.read_jsonl`."""
    return records_io.read_jsonl(path, _problem)


def _append(path: str, records: Iterable[Mapping[str, Any]]) -> list[str]:
    return records_io.append_jsonl(path, records)


def suspect(record: Mapping[str, Any]) -> str | None:
    """Why an attempt's culprit node should be kept out of the next attempt, or None: a hang's culprit (the rank
    that stopped answering), or a rank that a device error failed. A rank that crashed in the program, or was
    killed, fails the same way on any node: restarting it elsewhere helps nothing, and its node is not suspect."""
    if record.get("state") != "failed" or not record.get("node"):
        return None
    if record.get("kind") == "hang":
        return f"the hang's culprit in attempt {record['attempt']} ({record.get('cause') or 'no cause'})"
    text = f"{record.get('cause') or ''} {record.get('exception') or ''}"
    if DEVICE_ERROR.search(text):
        return f"a device error in attempt {record['attempt']} ({record.get('cause')})"
    return None


def counts(record: Mapping[str, Any], kind: str) -> bool:
    """Whether an incident counts against its node (towards leaving it out): a hang, a lost node, a device error,
    or a rank killed by a signal; not a rank that raised in the program (a missing file, an out-of-memory error),
    which fails the same way on any node."""
    text = f"{record.get('cause') or ''} {record.get('exception') or ''}"
    if kind in ("hang", "lost") or DEVICE_ERROR.search(text):
        return True
    return record.get("failure_kind") not in ("oom", "traceback") and bool(_SIGNALLED.search(text))


def from_run(
    run: str, attempts: Sequence[Mapping[str, Any]], summary: Mapping[str, Any], nodes_lost: Sequence[str]
) -> list[dict[str, Any]]:
    """The incidents of one run: each failed attempt's culprit (``attempts``: the run's attempt records), or, for a
    run without restarts, the report's failure; and every node lost during it. ``run``: ``<exp>/<run_id>``."""
    found = []
    records = list(attempts)
    if not records and summary.get("state") == "failed":
        failure = summary.get("failure") or {}
        incident = summary.get("incident") or {}
        records = [{
            "attempt": 1, "state": "failed", "kind": incident.get("kind"), "node": failure.get("node"),
            "rank": failure.get("rank"), "cause": summary.get("failure_text") or failure.get("message"),
            "exception": " ".join(str(failure.get(k)) for k in ("exception", "error") if failure.get(k)),
            "failure_kind": (failure.get("error_source") or {}).get("kind") or failure.get("kind"), "ended_at": None,
        }]  # fmt: skip
    for record in records:
        if record.get("state") != "failed" or not record.get("node") or record.get("kind") not in NODE_FAULTS:
            continue
        if record.get("save_failure"):
            continue  # the save it resumed from is to blame (trainops.recovery.save_failure), not a node
        kind = {"hang": "hang", "lost": "lost", "node_fail": "lost"}.get(record["kind"], "dead_rank")
        # the attempt's record (attempt-<k>/attempt.json) and, once set aside, its logs and hang evidence
        evidence = f"{run}/attempt-{record['attempt']}" if attempts else run
        found.append({
            "run": run, "attempt": record["attempt"], "node": record["node"], "kind": kind,
            "rank": record.get("rank"), "cause": record.get("cause") or "", "time": record.get("ended_at"),
            "evidence": evidence, "counts": counts(record, kind),
        })  # fmt: skip
    named = {(i["attempt"], i["node"]) for i in found if i["kind"] == "lost"}
    for node in nodes_lost:
        last = records[-1]["attempt"] if records else 1
        if (last, node) not in named:
            found.append({
                "run": run, "attempt": last, "node": node, "kind": "lost", "rank": None,
                "cause": f"{node} was lost during the run (its logs could not be collected)",
                "time": records[-1].get("ended_at") if records else None, "evidence": run, "counts": True,
            })  # fmt: skip
    return found


def record(path: str, incidents: Sequence[Mapping[str, Any]], now: float) -> tuple[list[dict[str, Any]], list[str]]:
    """Append the incidents not yet in the record (by run, attempt, node and kind); returns those appended, and
    the warnings of reading and writing the record.

    A run is recorded by the terminal that follows it to its end, which may come after its node was repaired and
    cleared (a run launched with -e wait=false, followed days later): an incident dated before its node's last
    ``cleared`` line is still appended, for the history, but does not count (``counts`` false,
    ``recorded_after_clear``: the clear's time). One with no time of its own is dated now, and counts."""
    found, warnings = read(path)
    seen = {(r.get("run"), r.get("attempt"), r.get("node"), r.get("kind")) for r in found}
    cleared = {r["node"]: _time(r) for r in found if r["kind"] == "cleared"}  # each node's last clear, by position
    new = []
    for incident in incidents:
        key = (incident["run"], incident["attempt"], incident["node"], incident["kind"])
        if key in seen:
            continue
        seen.add(key)
        incident = dict(incident, time=incident.get("time") or round(now, 1))
        if incident["node"] in cleared and _time(incident) < cleared[incident["node"]]:
            incident.update(counts=False, recorded_after_clear=cleared[incident["node"]])
        new.append(incident)
    return new, warnings + _append(path, new)


def clear_refusal(path: str, node: str, nodes: Sequence[str], found: Sequence[Mapping[str, Any]]) -> str | None:
    """Why clearing ``node`` in the record at ``path`` is refused, changing nothing, or None: a name that is
    neither one of the inventory's ``nodes`` nor in the record (``found``: its lines), or no record at ``path`` at
    all (a misspelt -e runs_dir would otherwise start a new record holding only the clear, and say "cleared" of a
    node whose incidents are elsewhere). A record that cannot be written to (a directory in its place) is refused
    when the clear is appended."""
    if node not in set(nodes) | {r["node"] for r in found}:
        return (
            f"-e clear={node}: no such node in the inventory ({', '.join(nodes) or 'none'}) and no incident of it in "
            f"{path}. Nothing was changed."
        )
    if not os.path.lexists(path):
        return (
            f"-e clear={node}: there is no incident record at {path}, so {node} has no incident recorded there to "
            f"clear. -e runs_dir must name the runs directory that holds {FILE_NAME} (train.yml and health.yml "
            "write it there). Nothing was written."
        )
    return None


def clear(path: str, node: str, now: float, why: str = "") -> tuple[dict[str, Any], list[str]]:
    """Clear a node's incidents so far (after a repair): a ``cleared`` line, and what writing it said; the
    incidents before it stay."""
    line = {"node": node, "kind": "cleared", "time": round(now, 1), "cause": why or "cleared by hand"}
    return line, _append(path, [line])


def _time(record: Mapping[str, Any]) -> float:
    return float(record.get("time") or 0)


def recent(records: Sequence[Mapping[str, Any]], now: float, window_days: float) -> dict[str, list[dict[str, Any]]]:
    """Each node's incidents within ``window_days`` before ``now`` and after its last ``cleared`` line, oldest
    first. After, by position in the record, not by time: a clear covers every incident above it, even one a
    clock ahead dated after the clear."""
    since = now - window_days * 86400
    found: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r["kind"] == "cleared":
            found.pop(r["node"], None)
        elif _time(r) >= since:
            found.setdefault(r["node"], []).append(dict(r))
    return {node: sorted(rows, key=_time) for node, rows in found.items()}


def implicated(
    records: Sequence[Mapping[str, Any]], now: float, window_days: float = DEFAULT_WINDOW_DAYS,
    limit: int = DEFAULT_LIMIT,
) -> dict[str, list[dict[str, Any]]]:  # fmt: skip
    """Nodes with at least ``limit`` recent incidents (:func:`recent`) that count (:func:`counts`), with those
    incidents; ``limit`` 0: none."""
    if limit <= 0:
        return {}
    counted = {
        node: [r for r in rows if r.get("counts", True)] for node, rows in recent(records, now, window_days).items()
    }
    return {node: rows for node, rows in counted.items() if len(rows) >= limit}


def exclusion_text(
    node: str, found: Sequence[Mapping[str, Any]], window_days: float, given: Mapping[str, Any] | None = None
) -> str:
    """``node2 left out: implicated 2 times in 14 days (hang in exp/run attempt 1: ...; ...)``; the command that
    clears it carries this run's -i and site options (``given``: :func:`.invocation.invocation`)."""
    told = "; ".join(
        records_io.printable(f"{r['kind']} in {r.get('run')} attempt {r.get('attempt')}: {r.get('cause')}")[:240]
        for r in found
    )
    return (
        f"{records_io.printable(node)} left out: implicated {len(found)} times in {window_days:g} days ({told}); "
        f"after a repair, {command(given, 'incidents', {'clear': node})}"
    )


def line(incident: Mapping[str, Any]) -> str:
    """``incident     node2: hang, attempt 1 of exp/run (counts against it): <cause>``, as train.yml prints it (a
    control character in the record, such as a terminal's escape code, printed escaped: ``\\x1b``)."""
    if incident.get("recorded_after_clear"):
        counted = "recorded after the node was cleared, does not count against it"
    elif incident.get("counts", True):
        counted = "counts against it"
    else:
        counted = "recorded, does not count against it"
    return records_io.printable(
        f"incident     {incident['node']}: {incident['kind']}, attempt {incident.get('attempt')} of "
        f"{incident.get('run')} ({counted}): {incident.get('cause')}"
    )


def table(records: Sequence[Mapping[str, Any]], now: float, window_days: float, limit: int) -> list[str]:
    """incidents.yml's listing: every node with incidents in the window since its last clearing, and whether the
    next run leaves it out."""
    out = implicated(records, now, window_days, limit)
    rows = recent(records, now, window_days)
    if not rows:
        return [f"no incident in the last {window_days:g} days"]
    lines = []
    for node in sorted(rows):
        verdict = "LEFT OUT of the next run" if node in out else "kept"
        told = f"{len(rows[node])} incident(s) in {window_days:g} days, {verdict} (limit {limit})"
        lines.append(f"{records_io.printable(node)}: {told}")
        lines += ["  " + line(r)[len("incident     ") :] for r in rows[node]]
    return lines
