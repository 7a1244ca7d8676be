"""Hangs: when a run counts as stuck, and which rank or node holds the others up.

The watcher suspects a hang when no new iteration line has appeared for the hang timeout (:func:`hang_limit`).
It then reads every rank on every node in one pass (``rank_probe.py``: process state, kernel wait channel, CPU
use, ``py-spy dump`` stack) and :func:`diagnose` names the culprit the way published production systems do
from outside a job: a rank in a state that explains the stall by itself (stopped, zombie, in disk wait, gone),
a node that stopped answering, or else the ranks whose stacks differ from the majority's, the majority being
the ranks waiting in a collective for them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .cluster import node_ranks
from .megatron_log import _stats

#: The floor of the computed hang timeout, and its factor over the p90 interval between iteration lines.
MIN_HANG_TIMEOUT_S = 300.0
HANG_FACTOR = 10.0
#: Before the first iteration line (start-up: data indexes, model build, checkpoint load) and while a
#: checkpoint is being saved, the limit is at least this.
FIRST_ITERATION_TIMEOUT_S = 1800.0
CHECKPOINT_TIMEOUT_S = 1800.0

#: Functions of torch.distributed (and its backends' Python wrappers) in which a rank waits for its peers.
COLLECTIVES = frozenset(
    {
        "all_reduce",
        "all_gather",
        "all_gather_into_tensor",
        "_all_gather_base",
        "all_gather_object",
        "all_to_all",
        "all_to_all_single",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "_reduce_scatter_base",
        "reduce",
        "broadcast",
        "broadcast_object_list",
        "gather",
        "gather_object",
        "scatter",
        "barrier",
        "monitored_barrier",
        "send",
        "recv",
        "isend",
        "irecv",
        "batch_isend_irecv",
        "wait",
        "synchronize",
    }
)
_DISTRIBUTED_FILE = re.compile(r"torch/distributed/|torch/nn/parallel/distributed\.py|megatron/core/.*(p2p|comm)")
_THREAD = re.compile(r'^Thread (\S+) \(([^)]*)\)(?::\s*"(.*)")?\s*$')
_FRAME = re.compile(r"^\s{2,}(.+?) \((.+?)\)\s*$")
_STATES = {
    "T": "stopped by a signal (SIGSTOP, SIGTSTP) or a debugger: it will not move until SIGCONT",
    "t": "stopped under a tracer (a debugger holds it)",
    "Z": "a zombie: the process exited and its parent has not reaped it",
    "X": "dead",
    "D": "in uninterruptible sleep (disk or device wait)",
}


def hang_limit(
    line_intervals_s: Sequence[float],
    configured: float | None = None,
    *,
    started: bool = True,
    saving: bool = False,
) -> float:
    """Seconds without a new iteration line after which a run is suspected hung.

    ``configured`` (``-e hang_timeout``) wins when given; else ``max(10 x p90 of the intervals between
    iteration lines, 300 s)``. Before the first iteration line, and while a checkpoint is saved, the limit is
    at least 1,800 s: start-up and saves are slow and print nothing, and are not hangs.
    """
    if configured:
        limit = float(configured)
    elif line_intervals_s:
        limit = max(HANG_FACTOR * _stats(list(line_intervals_s))["p90"], MIN_HANG_TIMEOUT_S)
    else:
        limit = MIN_HANG_TIMEOUT_S
    if not started:
        limit = max(limit, FIRST_ITERATION_TIMEOUT_S)
    if saving:
        limit = max(limit, CHECKPOINT_TIMEOUT_S)
    return limit


def line_interval_s(previous: Mapping[str, Any] | None, record: Mapping[str, Any]) -> float | None:
    """Seconds between two iteration lines from Megatron's own figures (ms per iteration x iterations)."""
    ms = record.get("elapsed_ms")
    if previous is None or not isinstance(ms, (int, float)) or ms <= 0:
        return None
    steps = record["iteration"] - previous["iteration"]
    return ms * steps / 1000 if steps > 0 else None


_SAVE_START = re.compile(r"\bsaving checkpoint at iteration\s+(\d+)")
_SAVE_DONE = re.compile(r"\bsuccessfully saved checkpoint (?:from|at) iteration\s+(\d+)")


def checkpoint_events(lines: Iterable[str]) -> list[tuple[str, int]]:
    """``("start"|"done", iteration)`` for Megatron's (and the smoke job's) checkpoint save lines, in order."""
    events = []
    for line in lines:
        if "checkpoint" not in line:
            continue
        if match := _SAVE_START.search(line):
            events.append(("start", int(match.group(1))))
        elif match := _SAVE_DONE.search(line):
            events.append(("done", int(match.group(1))))
    return events


# --- py-spy ---------------------------------------------------------------------------------------------------


def parse_dump(text: str) -> list[dict[str, Any]]:
    """The threads of a ``py-spy dump``: id, status (idle, active, active+gil), name, frames innermost first.

    A frame is ``{"function", "where", "native"}``: ``where`` is ``file:line`` for Python frames, the library
    for native ones (``--native``).
    """
    threads: list[dict[str, Any]] = []
    for line in text.splitlines():
        if line.startswith("Thread "):
            match = _THREAD.match(line)
            if match:
                threads.append({"id": match.group(1), "status": match.group(2), "name": match.group(3), "frames": []})
            continue
        if threads and (match := _FRAME.match(line)):
            function, where = match.group(1), match.group(2)
            threads[-1]["frames"].append({"function": function, "where": where, "native": not _is_python(where)})
    return threads


def _is_python(where: str) -> bool:
    return bool(re.search(r"(\.py|<[^>]+>):\d+$", where))


def main_thread(threads: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The thread that runs the training loop: MainThread when named, else the first listed."""
    for thread in threads:
        if thread.get("name") == "MainThread":
            return thread
    return threads[0] if threads else None


def python_frames(thread: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    return [f for f in (thread or {}).get("frames", []) if not f["native"]]


def collective_of(frames: Sequence[Mapping[str, Any]]) -> str | None:
    """The torch.distributed call a rank waits in (the innermost one), or None."""
    for frame in frames:
        name = frame["function"].rsplit(".", 1)[-1]
        if name in COLLECTIVES and _DISTRIBUTED_FILE.search(frame["where"].replace("\\", "/")):
            return name
    return None


def _strip_line(where: str) -> str:
    path, _, line = where.rpartition(":")
    return (path if line.isdigit() else where).rsplit("/", 1)[-1]


def signature(frames: Sequence[Mapping[str, Any]], depth: int = 4) -> str:
    """What a rank is doing, for grouping: its innermost Python frames by function and file, without lines.

    Inside a collective, the collective and the call site in the caller's code count, not the wrapper frames.
    """
    if not frames:
        return "(no Python frame)"
    collective = collective_of(frames)
    if collective:
        callers = [f for f in frames if not _DISTRIBUTED_FILE.search(f["where"])]
        caller = f"{callers[0]['function']} ({_strip_line(callers[0]['where'])})" if callers else "?"
        return f"waits in {collective} from {caller}"
    return " < ".join(f"{f['function']} ({_strip_line(f['where'])})" for f in frames[:depth])


def innermost(frames: Sequence[Mapping[str, Any]]) -> str:
    return f"{frames[0]['function']} ({frames[0]['where']})" if frames else "-"


# --- the diagnosis --------------------------------------------------------------------------------------------


def _rank_rows(plan: Mapping[str, Any], reports: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for rank, (name, local) in node_ranks(plan).items():
        report = reports.get(name) or {}
        probe = next((r for r in report.get("ranks", []) if r["rank"] == rank), None)
        row = {"node": name, "rank": rank, "local_rank": local}
        if not report.get("reachable", False):
            row.update(state="unreachable", reason=report.get("error") or "no answer")
        elif report.get("probe_error"):
            row.update(state="unknown", reason=f"the node answered but its probe failed: {report['probe_error']}")
        elif probe is None:
            row.update(state="gone", reason="no process of this rank: it exited or was killed")
        else:
            threads = parse_dump(probe["stack"]) if probe.get("stack") else []
            frames = python_frames(main_thread(threads))
            row.update(
                state=probe["state"],
                state_text=probe.get("state_text"),
                pid=probe.get("pid"),
                wchan=probe.get("wchan"),
                cpu_percent=probe.get("cpu_percent"),
                stack=probe.get("stack"),
                stack_error=probe.get("stack_error"),
                has_stack=bool(threads),
                where=innermost(frames),
                collective=collective_of(frames),
                signature=signature(frames) if threads else None,
            )
        rows.append(row)
    return rows


def diagnose(plan: Mapping[str, Any], reports: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Name the culprit of a suspected hang from every node's ``rank_probe.py`` report.

    ``reports`` maps each node to its report plus ``reachable`` (and ``error`` when not). Returns
    ``{"culprits": [...], "confidence": "high"|"medium"|"low", "finding": str, "groups": [...], "ranks": [...]}``
    where each culprit has node, rank, local_rank, state and a one-line reason.
    """
    rows = _rank_rows(plan, reports)
    culprits: list[dict[str, Any]] = []
    lost_nodes = []
    for name in [n["name"] for n in plan["nodes"]]:
        report = reports.get(name) or {}
        if not report.get("reachable", False):
            lost_nodes.append(name)
            culprits.append(
                {
                    "node": name,
                    "rank": None,
                    "local_rank": None,
                    "ranks": [r["rank"] for r in rows if r["node"] == name],
                    "state": "unreachable",
                    "reason": f"the node does not answer: {report.get('error') or 'no answer'}",
                }
            )
    for row in rows:
        if row["node"] in lost_nodes:
            continue
        if row["state"] == "gone":
            culprits.append(_culprit(row, row["reason"]))
        elif row["state"] in _STATES:
            wchan = f", kernel wait {row['wchan']}" if row.get("wchan") and row["state"] == "D" else ""
            culprits.append(_culprit(row, f"state {row['state']}: {_STATES[row['state']]}{wchan}"))
    groups = _groups(rows)
    if culprits:
        confidence = "high"
        finding = "; ".join(culprit_text(c) for c in culprits)
    else:
        culprits, confidence, finding = _by_stacks(rows, groups)
    waiting = [r for r in rows if r.get("collective") and not any(_same(r, c) for c in culprits)]
    if culprits and waiting:
        calls = sorted({r["collective"] for r in waiting})
        finding += f" ({len(waiting)} other rank(s) wait in {', '.join(calls)})"
    return {
        "culprits": culprits,
        "confidence": confidence,
        "finding": finding,
        "groups": groups,
        "ranks": [{k: v for k, v in r.items() if k != "stack"} for r in rows],
        "stacks": {str(r["rank"]): r.get("stack") for r in rows},
    }


def _same(row: Mapping[str, Any], culprit: Mapping[str, Any]) -> bool:
    return culprit.get("rank") == row["rank"] or (culprit.get("rank") is None and culprit["node"] == row["node"])


def _culprit(row: Mapping[str, Any], reason: str) -> dict[str, Any]:
    return {
        "node": row["node"],
        "rank": row["rank"],
        "local_rank": row["local_rank"],
        "state": row["state"],
        "reason": reason,
        "where": row.get("where"),
    }


def culprit_text(culprit: Mapping[str, Any]) -> str:
    if culprit.get("rank") is None:
        ranks = ", ".join(map(str, culprit.get("ranks") or []))
        return f"{culprit['node']} (ranks {ranks}): {culprit['reason']}"
    where = f" at {culprit['where']}" if culprit.get("where") not in (None, "-") else ""
    return f"{culprit['node']} rank {culprit['rank']} (local rank {culprit['local_rank']}): {culprit['reason']}{where}"


def _groups(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Ranks with a stack, grouped by what they do, the largest group first."""
    by: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        if row.get("signature"):
            by.setdefault(row["signature"], []).append(row)
    groups = [
        {
            "signature": sig,
            "ranks": [r["rank"] for r in members],
            "collective": members[0].get("collective"),
        }
        for sig, members in by.items()
    ]
    return sorted(groups, key=lambda g: (-len(g["ranks"]), g["ranks"][0]))


def _by_stacks(
    rows: Sequence[Mapping[str, Any]], groups: Sequence[Mapping[str, Any]]
) -> tuple[list[dict[str, Any]], str, str]:
    """Culprits from stacks alone: the minority groups, when a larger group waits for them."""
    by_rank = {r["rank"]: r for r in rows}
    if not groups:
        return _by_cpu(rows)
    if len(groups) == 1:
        only = groups[0]
        what = f"wait in {only['collective']}" if only["collective"] else f"are at {only['signature']}"
        return (
            [],
            "low",
            f"no rank stands out: all {len(only['ranks'])} ranks with a stack {what}; suspect the network or the "
            "collective library (rerun with NCCL_DEBUG=INFO or MCCL_DEBUG=INFO), or a rank without a stack",
        )
    largest = groups[0]
    if len(groups[1]["ranks"]) == len(largest["ranks"]):
        sizes = " vs ".join(f"{len(g['ranks'])} at {g['signature']}" for g in groups)
        return [], "low", f"no majority among the ranks' stacks ({sizes}): look at every rank's stack"
    suspects = [by_rank[rank] for group in groups[1:] for rank in group["ranks"]]
    majority = f"{len(largest['ranks'])} rank(s) " + (
        f"wait in {largest['collective']}" if largest["collective"] else f"are at {largest['signature']}"
    )
    culprits = []
    for row in suspects:
        if largest["collective"] and not row.get("collective"):
            reason = f"not in a collective (at {row['where']}) while {majority}"
        else:
            reason = f"at {row['signature']} while {majority}"
        culprits.append(_culprit(row, reason))
    sure = "medium" if largest["collective"] and not any(r.get("collective") for r in suspects) else "low"
    return culprits, sure, "; ".join(culprit_text(c) for c in culprits)


def _by_cpu(rows: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], str, str]:
    """Without stacks: a minority of ranks busy on the CPU while the rest sleep."""
    measured = [r for r in rows if isinstance(r.get("cpu_percent"), (int, float))]
    busy = [r for r in measured if r["cpu_percent"] >= 50]
    idle = [r for r in measured if r["cpu_percent"] < 5]
    note = f"no stacks ({next((r['stack_error'] for r in rows if r.get('stack_error')), 'py-spy gave none')})"
    if busy and len(busy) < len(idle):
        culprits = [
            _culprit(r, f"busy on the CPU ({r['cpu_percent']:.0f} %) while {len(idle)} rank(s) sleep") for r in busy
        ]
        return culprits, "low", f"{note}; " + "; ".join(culprit_text(c) for c in culprits)
    return [], "low", f"{note}; every rank looks alike by state and CPU use: no rank stands out"


def rank_evidence(row: Mapping[str, Any], stack: str | None, finding: Mapping[str, Any]) -> str:
    """The text kept for one rank under ``hang/<node>/rank-<rank>.txt``."""
    culprit = next((c for c in finding["culprits"] if _same(row, c)), None)
    lines = [
        f"node        {row['node']}",
        f"rank        {row['rank']} (local rank {row['local_rank']})",
        f"verdict     {'CULPRIT: ' + culprit['reason'] if culprit else 'not suspected'}",
        f"state       {row['state']}" + (f" ({row['state_text']})" if row.get("state_text") else ""),
    ]
    if row.get("pid") is not None:
        lines.append(f"pid         {row['pid']}")
    if row.get("wchan"):
        lines.append(f"wchan       {row['wchan']}")
    if row.get("cpu_percent") is not None:
        lines.append(f"cpu         {row['cpu_percent']} % over the probe's sample")
    if row.get("signature"):
        lines.append(f"doing       {row['signature']}")
    if row.get("reason") and row["state"] in ("gone", "unreachable", "unknown"):
        lines.append(f"note        {row['reason']}")
    lines.append("")
    if stack:
        lines.append(stack.rstrip())
    else:
        lines.append(f"no stack: {row.get('stack_error') or 'the rank could not be read'}")
    return "\n".join(lines) + "\n"


def summary_text(finding: Mapping[str, Any], seconds: float, last_iteration: int | None) -> str:
    """One paragraph for the console."""
    progress = f"iteration {last_iteration}" if last_iteration is not None else "the start (no iteration yet)"
    return (
        f"hang suspected: no new iteration for {seconds:.0f} s after {progress}; "
        f"{finding['confidence']} confidence: {finding['finding']}"
    )
