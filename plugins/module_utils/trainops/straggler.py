"""Stragglers: the ranks whose own compute is slower than the others', from Megatron's straggler report.

Megatron-LM (core_v0.14.0, ``megatron/core/utils.py``, ``StragglerDetector.report``) prints, from global rank 0
at every log interval when ``--log-straggler`` is on::

    [2024-03-14 23:07:56] | MnRtt/Rnk: 3453.08ms/8 | MxRtt/Rnk: 3468.20ms/0 | MnPwr/Rnk: 601796W/8 | ...
        | MnEtpt/Rnk: 296.02TF/0 | MxEtpt/Rnk: 297.32TF/8
    ^^^^ Bottom 3 Ranks with lowest  Etpt(TF): 296.02/0, 296.17/5, 296.30/2,
    ^^^^ Top    3 Ranks with highest Etpt(TF): 297.01/1, 297.20/4, 297.32/8,

Each ``Mn``/``Mx`` field is ``<value><unit>/<rank>``: Rtt is the time a rank spent in the timed (compute) part of
an iteration, Etpt its estimated throughput (the iteration's FLOPs over that time). The Bottom/Top lines appear
when ``--straggler-minmax-count`` is above 1 and below the world size; with ``world - 1`` they list every rank.
The smoke job prints the same lines from its own measurements (the Rtt, DRtt and Etpt fields only: a CPU has no
power, temperature, utilisation or clock to report).

A rank is a **straggler** when its compute time, summed over a span of reports (the run, or the watcher's last
200) with its slowest 2 % of them left out, is at least ``ratio`` times the median of the other ranks' sums
(:func:`assess`). Every rank does the same FLOPs per iteration, so a rank's time is proportional to
``1 / Etpt``. Where a report names only the
fastest and the slowest rank (no Bottom/Top lines), a rank is a straggler when it is the slowest at ``ratio``
times the fastest in at least half of the reports.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: The default threshold: a rank 20 % slower than the median of the others is a straggler.
DEFAULT_RATIO = 1.2
#: Reports needed for a verdict. One report's times are noisy: on the CPU testbed (4 ranks on 2 cores, a few ms
#: of compute per iteration) the scheduler alone makes some rank 1.2x slower than the others in a third of the
#: reports, and a verdict over 19 reports named a healthy rank in 11 of 63 windows, over 50 in 1 of 23, over 100
#: in none (benchmarks/RESULTS.md). Megatron's reports average a whole log interval each, so they are steadier.
MIN_REPORTS = 100
#: The share of a rank's slowest reports its sum leaves out (at least one). One stalled report is no straggler:
#: on a CI run's untouched testbed, rank 0 took 74x the others' time in one report of 149 (something stalled
#: its process once), which alone lifted its sum to 1.4x the others'. A throttled node is slow in many reports, so
#: leaving out a few of them keeps its verdict.
TRIMMED_SHARE = 0.02

_FIELD = re.compile(r"\b(Mn|Mx)([A-Za-z]+)/Rnk:\s*([-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)([A-Za-z%]*)/(\d+)")
_RANKED = re.compile(r"\^\^\^\^\s+(Bottom|Top)\s+\d+\s+Ranks with (?:lowest|highest)\s+Etpt\(TF\):(.*)$")
_ENTRY = re.compile(r"([-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)(?:TF)?/(\d+)")
_TIME = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\]")


def parse_report_line(line: str) -> dict[str, Any] | None:
    """The fields of a ``MnRtt/Rnk: ...`` line: ``{"time", "fields": {"Rtt": {"min": [v, unit, rank], ...}}}``."""
    if "/Rnk:" not in line:
        return None
    fields: dict[str, dict[str, list[Any]]] = {}
    for side, name, value, unit, rank in _FIELD.findall(line):
        fields.setdefault(name, {})["min" if side == "Mn" else "max"] = [float(value), unit, int(rank)]
    if "Rtt" not in fields and "Etpt" not in fields:
        return None
    stamp = _TIME.search(line)
    return {"time": stamp.group(1) if stamp else None, "fields": fields, "etpt": {}}


def parse_ranked_line(line: str) -> dict[int, float] | None:
    """``{rank: Etpt}`` of a ``^^^^ Bottom/Top N Ranks with ... Etpt(TF): v/r, ...`` line."""
    if "^^^^" not in line:
        return None
    match = _RANKED.search(line)
    if match is None:
        return None
    return {int(rank): float(value) for value, rank in _ENTRY.findall(match.group(2))}


def report_etpt(report: Mapping[str, Any]) -> dict[int, float]:
    """Every rank's Etpt a report gives: the ranked lines, and the fastest and slowest of the main line."""
    out = {int(rank): value for rank, value in (report.get("etpt") or {}).items()}
    for side in ("min", "max"):
        entry = (report["fields"].get("Etpt") or {}).get(side)
        if entry:
            out.setdefault(entry[2], entry[0])
    return out


def slow_ranks(report: Mapping[str, Any], ratio: float = DEFAULT_RATIO) -> dict[int, float]:
    """``{rank: compute time over the median of the others'}`` for every rank at or above ``ratio``."""
    etpt = {rank: value for rank, value in report_etpt(report).items() if value > 0}
    flagged: dict[int, float] = {}
    if len(etpt) >= 3:
        for rank, value in etpt.items():
            others = [v for r, v in etpt.items() if r != rank]
            slowdown = statistics.median(others) / value
            if slowdown >= ratio:
                flagged[rank] = slowdown
        return flagged
    rtt = report["fields"].get("Rtt") or {}
    if rtt.get("min") and rtt.get("max") and rtt["min"][0] > 0 and rtt["min"][2] != rtt["max"][2]:
        slowdown = rtt["max"][0] / rtt["min"][0]
        if slowdown >= ratio:
            flagged[rtt["max"][2]] = slowdown
    return flagged


def rolling_ratios(
    reports: Sequence[Mapping[str, Any]], world: int, window: int = MIN_REPORTS, points: int = 400
) -> tuple[list[int], dict[int, list[float]]]:
    """Each rank's compute time over the last ``window`` reports relative to the median of the other ranks'
    (the measure :func:`assess` judges), at up to ``points`` report numbers, for the plot. Empty when the
    reports do not cover every rank."""
    times = [report_times(r, world) for r in reports]
    if not times or not all(times):
        return [], {}
    window = max(1, min(window, len(times)))
    step = max(1, len(times) // points)
    xs, out = [], {rank: [] for rank in sorted(times[0])}
    for end in range(window, len(times) + 1, step):
        totals = span_totals(times[end - window : end])
        xs.append(end)
        for rank in out:
            others = [v for r, v in totals.items() if r != rank]
            out[rank].append(totals.get(rank, 0.0) / statistics.median(others) if others else 1.0)
    return xs, out


def report_times(report: Mapping[str, Any], world: int) -> dict[int, float]:
    """Every rank's compute time in one report, in a unit common to the report's ranks; empty unless the report
    covers every rank: ``1 / Etpt`` from a full listing (the same FLOPs on every rank), or the two Rtt values
    when the world has two ranks."""
    etpt = {rank: value for rank, value in report_etpt(report).items() if value > 0}
    if len(etpt) == world and world >= 2:
        return {rank: 1.0 / value for rank, value in etpt.items()}
    rtt = report["fields"].get("Rtt") or {}
    if world == 2 and rtt.get("min") and rtt.get("max") and rtt["min"][2] != rtt["max"][2]:
        return {rtt["min"][2]: rtt["min"][0], rtt["max"][2]: rtt["max"][0]}
    return {}


def span_totals(rows: Sequence[Mapping[int, float]]) -> dict[int, float]:
    """Each rank's compute time summed over ``rows`` (one ``{rank: time}`` per report), its slowest
    :data:`TRIMMED_SHARE` of them (at least one when there are two or more) left out."""
    leave_out = max(1, int(len(rows) * TRIMMED_SHARE)) if len(rows) >= 2 else 0
    per_rank: dict[int, list[float]] = {}
    for row in rows:
        for rank, value in row.items():
            per_rank.setdefault(rank, []).append(value)
    return {rank: sum(sorted(values)[: len(values) - leave_out]) for rank, values in per_rank.items()}


def assess(
    reports: Sequence[Mapping[str, Any]],
    world: int,
    ratio: float = DEFAULT_RATIO,
    node_of: Mapping[int, tuple[str, int]] | None = None,
    skip: int = 1,
    min_reports: int = MIN_REPORTS,
) -> list[dict[str, Any]]:
    """The stragglers over a span of reports (the first ``skip`` left out as warm-up).

    When the reports cover every rank, a rank's compute time summed over the span (:func:`span_totals`) is
    compared with the median of the other ranks' sums: a sum, not a median of per-report ratios, because a
    throttled node (a CPU quota, a card that clocks down now and then) is slow in bursts. Otherwise (only the
    fastest and slowest listed) a rank is a straggler when it is the slowest at ``ratio`` or more in at least
    half of the reports.
    Each straggler: rank, node, local rank, ratio, worst single report, reports flagged and reports used. Fewer
    than ``min_reports`` reports give no verdict (an empty list).
    """
    used = list(reports[skip:]) if len(reports) > skip else list(reports)
    if len(used) < max(1, min_reports):
        return []
    rows = [report_times(report, world) for report in used]
    flagged: dict[int, list[float]] = {}
    for report in used:
        for rank, slowdown in slow_ranks(report, ratio).items():
            flagged.setdefault(rank, []).append(slowdown)
    found: dict[int, float] = {}
    totals = span_totals(rows) if all(rows) else {}
    if len(totals) >= 2:
        for rank, total in totals.items():
            others = [v for r, v in totals.items() if r != rank]
            if total / statistics.median(others) >= ratio:
                found[rank] = total / statistics.median(others)
    else:
        for rank, slowdowns in flagged.items():
            if len(slowdowns) * 2 >= len(used):
                found[rank] = statistics.median(slowdowns)
    out = []
    for rank, value in sorted(found.items()):
        node, local = (node_of or {}).get(rank, (None, None))
        out.append(
            {
                "rank": rank,
                "node": node,
                "local_rank": local,
                "ratio": round(value, 3),
                "worst": round(max(flagged.get(rank, [value])), 3),
                "reports_flagged": len(flagged.get(rank, [])),
                "reports": len(used),
            }
        )
    return out


def describe(flagged: Mapping[int, float], node_of: Mapping[int, tuple[str, int]]) -> str:
    """``straggler node2 rank 2 (1.9x), node2 rank 3 (1.8x)`` for a report's slow ranks; empty when none."""
    if not flagged:
        return ""
    parts = []
    for rank, slowdown in sorted(flagged.items(), key=lambda kv: -kv[1]):
        node = node_of.get(rank, ("?", None))[0]
        parts.append(f"{node} rank {rank} ({slowdown:.1f}x)")
    return "straggler " + ", ".join(parts)


def reports_from_lines(lines: Iterable[str]) -> list[dict[str, Any]]:
    """Straggler reports from log lines, each with its ranked (Bottom/Top) lines attached."""
    reports: list[dict[str, Any]] = []
    for line in lines:
        report = parse_report_line(line)
        if report is not None:
            reports.append(report)
            continue
        ranked = parse_ranked_line(line)
        if ranked is not None and reports:
            reports[-1]["etpt"].update(ranked)
    return reports
