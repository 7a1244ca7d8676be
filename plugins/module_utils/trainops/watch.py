"""The watcher's options, checked on the controller before a run starts, and the output of its probes.

train.yml reads these ``-e`` options (or inventory variables); :func:`watch_options` turns them into numbers and
refuses a bad one naming the option, the value and what is accepted, before any node is touched.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .errors import PlanError
from .options import OPTIONS, OptionError, convert

#: The watcher's options (their types, ranges and defaults are :data:`.options.OPTIONS`').
NAMES = (
    "train_wait", "poll_interval", "progress_interval", "start_timeout", "wait", "fresh", "hang_timeout", "on_hang",
    "straggler_ratio", "max_restarts", "elastic", "min_nodes",
)  # fmt: skip


def watch_options(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Every option of the watcher, checked and converted; raises :class:`PlanError` listing each bad one.

    Each value is judged by its entry in :data:`.options.OPTIONS` (a missing one takes its default; ``hang_timeout``
    ``auto`` becomes None: ``max(10 x p90 time between iteration lines, 300 s)``). The rules between them:
    ``hang_timeout`` at least ``poll_interval``; ``max_restarts`` needs ``wait``; ``elastic`` needs ``max_restarts``.
    """
    problems: list[str] = []
    out: dict[str, Any] = {}
    for name in NAMES:
        option = OPTIONS[name]
        try:
            out[name] = convert(option, raw.get(name, option.default))
        except OptionError as exc:
            problems.append(str(exc))
            out[name] = None if name == "hang_timeout" else option.default
    if out["hang_timeout"] == "auto":
        out["hang_timeout"] = None
    hang, poll = out["hang_timeout"], out["poll_interval"]
    if hang is not None and poll and hang < poll:
        problems.append(
            f"-e hang_timeout={raw.get('hang_timeout')!r} is shorter than poll_interval ({poll:g} s): "
            "a hang could not be seen that fast"
        )
    if out["elastic"] and not out["max_restarts"]:
        problems.append("-e elastic=true re-plans at a restart: give -e max_restarts=N (N >= 1) too")
    if out["max_restarts"] and out["wait"] is False:
        problems.append(
            f"-e max_restarts={out['max_restarts']} needs the watcher: drop -e wait=false (train.yml restarts a run "
            "it watches)"
        )
    if problems:
        raise PlanError(problems)
    return out


def parse_diagnosis(text: str, node_names: list[str]) -> dict[str, dict[str, Any]]:
    """``diagnose.sh``'s output: node -> rank_probe.py's report with ``reachable``, or why it is missing."""
    reports: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        fields = line.split("\t", 3)
        if len(fields) < 4 or fields[0] != "diag":
            continue
        name, verdict, detail = fields[1], fields[2], fields[3]
        if verdict == "ok":
            try:
                report = json.loads(detail)
            except ValueError:
                reports[name] = {"reachable": True, "probe_error": f"unreadable probe output: {detail[:200]}"}
                continue
            reports[name] = dict(report, reachable=True)
        elif verdict == "unreachable":
            reports[name] = {"reachable": False, "error": detail.strip() or "no answer"}
        else:
            reports[name] = {"reachable": True, "probe_error": detail.strip() or "the probe failed"}
    for name in node_names:
        reports.setdefault(name, {"reachable": True, "probe_error": "diagnose.sh printed nothing for this node"})
    return reports
