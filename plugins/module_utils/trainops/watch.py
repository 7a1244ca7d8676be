"""The watcher's options, checked on the controller before a run starts, and the output of its probes.

train.yml reads these ``-e`` options (or inventory variables); :func:`watch_options` turns them into numbers and
refuses a bad one naming the option, the value and what is accepted, before any node is touched.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from .errors import PlanError
from .straggler import DEFAULT_RATIO

#: name -> (default, minimum, meaning) of the numeric options, in seconds unless said otherwise.
_SECONDS = {
    "train_wait": (86400.0, 0.0, "seconds to watch before returning while the run goes on"),
    "poll_interval": (5.0, 1.0, "seconds between probes"),
    "progress_interval": (30.0, 0.0, "seconds between progress lines"),
    "start_timeout": (120.0, 1.0, "seconds a node may take to start its launch"),
}
ON_HANG = ("stop", "warn")
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def _number(name: str, value: Any, minimum: float, problems: list[str], above: bool = False) -> float | None:
    text = str(value).strip() if value is not None else ""
    if isinstance(value, bool) or text == "":
        problems.append(f"-e {name}= is empty or not a number ({value!r}): give a number, or leave it out")
        return None
    try:
        number = float(text)
    except ValueError:
        problems.append(f"-e {name}={value!r} is not a number")
        return None
    if not math.isfinite(number) or (number <= minimum if above else number < minimum):
        bound = f"above {minimum:g}" if above else f"at least {minimum:g}"
        problems.append(f"-e {name}={value!r} must be {bound}")
        return None
    return number


def _boolean(name: str, value: Any, problems: list[str]) -> bool | None:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    problems.append(f"-e {name}={value!r} must be true or false")
    return None


def watch_options(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Every option of the watcher, checked and converted; raises :class:`PlanError` listing each bad one.

    ``hang_timeout``: ``auto`` (default: ``max(10 x p90 time between iteration lines, 300 s)``) or seconds > 0;
    ``on_hang``: ``stop`` (default) or ``warn``; ``straggler_ratio``: > 1 (default 1.2); ``wait``: a boolean;
    ``fresh``: a boolean; ``train_wait``, ``poll_interval``, ``progress_interval``, ``start_timeout``: seconds;
    ``max_restarts``: a whole number >= 0 (default 0: a failed run is not launched again), which needs ``wait``;
    ``elastic``: a boolean (re-plan on the nodes that remain at a restart; needs ``max_restarts``); ``min_nodes``:
    the fewest nodes such a re-plan may use (>= 1).
    """
    problems: list[str] = []
    out: dict[str, Any] = {}
    for name, (default, minimum, _) in _SECONDS.items():
        value = raw.get(name, default)
        out[name] = _number(name, value, minimum, problems) if value is not None else default
    out["wait"] = _boolean("wait", raw.get("wait", True), problems)
    out["fresh"] = _boolean("fresh", raw.get("fresh", False), problems)
    hang = raw.get("hang_timeout", "auto")
    if isinstance(hang, str) and hang.strip().lower() == "auto":
        out["hang_timeout"] = None
    else:
        number = _number("hang_timeout", hang, 0.0, problems, above=True)
        out["hang_timeout"] = number
        if number is not None and "poll_interval" in out and out["poll_interval"] and number < out["poll_interval"]:
            problems.append(
                f"-e hang_timeout={hang!r} is shorter than poll_interval ({out['poll_interval']:g} s): "
                "a hang could not be seen that fast"
            )
    on_hang = str(raw.get("on_hang", "stop")).strip().lower()
    if on_hang not in ON_HANG:
        problems.append(f"-e on_hang={raw.get('on_hang')!r} must be one of {', '.join(ON_HANG)}")
    out["on_hang"] = on_hang
    out["straggler_ratio"] = _number(
        "straggler_ratio", raw.get("straggler_ratio", DEFAULT_RATIO), 1.0, problems, above=True
    )
    restarts = raw.get("max_restarts", 0)
    text = str(restarts).strip()
    if isinstance(restarts, bool) or not (text.isascii() and text.isdigit()):
        problems.append(f"-e max_restarts={restarts!r} must be a whole number >= 0 (0: no restart)")
        out["max_restarts"] = 0
    else:
        out["max_restarts"] = int(text)
    out["elastic"] = _boolean("elastic", raw.get("elastic", False), problems)
    nodes = raw.get("min_nodes", 1)
    text = str(nodes).strip()
    if isinstance(nodes, bool) or not (text.isascii() and text.isdigit() and int(text) >= 1):
        problems.append(f"-e min_nodes={nodes!r} must be a whole number >= 1")
        out["min_nodes"] = 1
    else:
        out["min_nodes"] = int(text)
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
