"""The site's incident record: which node failed a run, when, how, and where the evidence is.

One JSON line per incident in ``<runs_dir>/incidents.jsonl`` on the controller, beside the runs, appended and never
rewritten: a hang's culprit, a rank that died (the culprit the report names, not a rank that only lost its peer), a
node lost during a run. A node implicated ``limit`` times within ``window_days`` (2 in 14 days by default) is left
out of the next plan (:func:`implicated`) until it is cleared (:func:`clear`, which appends a ``cleared`` line: the
history stays). Recording a run again (report.yml rewrites a report) adds nothing: an incident is keyed by its run,
attempt, node and kind.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .invocation import command

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


def read(path: str) -> list[dict[str, Any]]:
    """Every line of the record (a line that is not JSON, such as one cut short by a full disk, is skipped)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    records = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("node"):
            records.append(record)
    return records


def _append(path: str, records: Iterable[Mapping[str, Any]]) -> None:
    text = "".join(json.dumps(dict(r), sort_keys=True) + "\n" for r in records)
    if text:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            f.write(text)


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


def record(path: str, incidents: Sequence[Mapping[str, Any]], now: float) -> list[dict[str, Any]]:
    """Append the incidents not yet in the record (by run, attempt, node and kind); returns those appended."""
    seen = {(r.get("run"), r.get("attempt"), r.get("node"), r.get("kind")) for r in read(path)}
    new = []
    for incident in incidents:
        key = (incident["run"], incident["attempt"], incident["node"], incident["kind"])
        if key not in seen:
            seen.add(key)
            new.append(dict(incident, time=incident.get("time") or round(now, 1)))
    _append(path, new)
    return new


def clear(path: str, node: str, now: float, why: str = "") -> dict[str, Any]:
    """Clear a node's incidents so far (after a repair): a ``cleared`` line; the incidents before it stay."""
    line = {"node": node, "kind": "cleared", "time": round(now, 1), "cause": why or "cleared by hand"}
    _append(path, [line])
    return line


def recent(records: Sequence[Mapping[str, Any]], now: float, window_days: float) -> dict[str, list[dict[str, Any]]]:
    """Each node's incidents within ``window_days`` before ``now`` and since its last ``cleared`` line, oldest
    first."""
    since = now - window_days * 86400
    cleared: dict[str, float] = {}
    for r in records:
        if r.get("kind") == "cleared":
            cleared[r["node"]] = max(cleared.get(r["node"], 0.0), float(r.get("time") or 0))
    found: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        time = float(r.get("time") or 0)
        if r.get("kind") != "cleared" and time >= since and time > cleared.get(r["node"], -1.0):
            found.setdefault(r["node"], []).append(dict(r))
    return {node: sorted(rows, key=lambda r: float(r.get("time") or 0)) for node, rows in found.items()}


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
    told = "; ".join(f"{r['kind']} in {r.get('run')} attempt {r.get('attempt')}: {r.get('cause')}"[:240] for r in found)
    return (
        f"{node} left out: implicated {len(found)} times in {window_days:g} days ({told}); after a repair, "
        f"{command(given, 'incidents', {'clear': node})}"
    )


def line(incident: Mapping[str, Any]) -> str:
    """``incident     node2: hang, attempt 1 of exp/run (counts against it): <cause>``, as train.yml prints it."""
    counted = "counts against it" if incident.get("counts", True) else "recorded, does not count against it"
    return (
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
        lines.append(f"{node}: {len(rows[node])} incident(s) in {window_days:g} days, {verdict} (limit {limit})")
        lines += ["  " + line(r)[len("incident     ") :] for r in rows[node]]
    return lines
