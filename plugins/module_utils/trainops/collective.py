"""Parse the output of nccl-tests' ``all_reduce_perf`` (and MCCL's port of it).

Handles every variant seen: the current table (``redop``, ``root``, ``#wrong``),
old builds without ``root`` or ``redop`` and with an ``error`` float column,
``#wrong`` printed as ``N/A`` (``-c 0``), ``cputime`` (``-C 1``), a trailing
timestamp (``-S 1``), MPI launcher prefixes (``[1,0]<stdout>:``) and NCCL/MCCL
debug lines interleaved with the rows. Health is judged on the bus bandwidth
of the largest message size (the average is dragged down by small sizes).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

_MPI_PREFIX = re.compile(r"^\[\d+,\d+\]<\w+>:")
_FOOTER_OOB = re.compile(r"#\s*Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)?")
_FOOTER_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)")
_TIME_LABELS = ("time", "cputime")


class CollectiveParseError(ValueError):
    """The text holds no all_reduce_perf result table."""


def _number(token: str) -> float | None:
    if token.upper() == "N/A":
        return None
    return float(token)


def _header_columns(line: str) -> list[str] | None:
    tokens = line.lstrip("#").split()
    if tokens[:2] == ["size", "count"] and "busbw" in tokens:
        return tokens
    return None


def parse_allreduce_perf(text: str) -> dict[str, Any]:
    """Rows, average and largest-size bus bandwidth, wrong-element and out-of-bounds counts."""
    if not isinstance(text, str):
        raise CollectiveParseError(f"expected the tool's text output, got {type(text).__name__}")
    columns: list[str] | None = None
    rows: list[dict[str, Any]] = []
    out_of_bounds = avg_busbw = None
    oob_ok = None
    for raw in text.splitlines():
        line = _MPI_PREFIX.sub("", raw).strip()
        if not line:
            continue
        if line.startswith("#"):
            columns = _header_columns(line) or columns
            if match := _FOOTER_OOB.match(line):
                out_of_bounds, oob_ok = int(match.group(1)), match.group(2) != "FAILED"
            if match := _FOOTER_AVG.match(line):
                avg_busbw = float(match.group(1))
            continue
        if columns is None:
            continue
        tokens = line.split()
        if len(tokens) < len(columns) or not (tokens[0].isdigit() and tokens[1].isdigit()):
            continue  # a debug line, a timestamp-only line, or a truncated row
        try:
            rows.append(_row(columns, tokens))
        except ValueError:
            continue
    if not rows:
        first = text.strip().splitlines()[0][:120] if text.strip() else "(empty)"
        raise CollectiveParseError(f"no all_reduce_perf result rows found; output starts with: {first!r}")
    largest = max(rows, key=lambda r: r["size"])
    busbws = [b for r in rows for b in (r["out_of_place"]["busbw_gbps"], r["in_place"]["busbw_gbps"])]
    wrong_counts = [w for r in rows for w in (r["out_of_place"]["wrong"], r["in_place"]["wrong"]) if w is not None]
    return {
        "rows": rows,
        "avg_busbw_gbps": avg_busbw if avg_busbw is not None else sum(busbws) / len(busbws),
        "largest_size_bytes": largest["size"],
        "largest_busbw_gbps": max(largest["out_of_place"]["busbw_gbps"], largest["in_place"]["busbw_gbps"]),
        "wrong": int(sum(wrong_counts)) if wrong_counts else None,
        "checked": bool(wrong_counts),
        "out_of_bounds": out_of_bounds,
        "out_of_bounds_ok": oob_ok,
    }


def _row(columns: list[str], tokens: list[str]) -> dict[str, Any]:
    times = [i for i, c in enumerate(columns) if c in _TIME_LABELS]
    if len(times) != 2:
        raise ValueError("header without two time columns")
    row: dict[str, Any] = {
        "size": int(tokens[0]),
        "count": int(tokens[1]),
        "type": tokens[columns.index("type")] if "type" in columns else None,
        "redop": tokens[columns.index("redop")] if "redop" in columns else None,
        "root": int(tokens[columns.index("root")]) if "root" in columns else None,
    }
    for name, start in (("out_of_place", times[0]), ("in_place", times[1])):
        check = columns[start + 3]
        value = _number(tokens[start + 3])
        if check == "error":  # old builds: an error magnitude; count a nonzero one as a wrong result
            wrong = None if value is None else int(value != 0)
        else:
            wrong = None if value is None else int(value)
        row[name] = {
            "time_us": float(tokens[start]),
            "algbw_gbps": float(tokens[start + 1]),
            "busbw_gbps": float(tokens[start + 2]),
            "wrong": wrong,
        }
    return row


def records_reusable(nodes: Sequence[Mapping[str, Any]], now_epoch: float, max_age_s: float) -> bool:
    """Whether every node's recorded passing result still holds: ``collective_record`` (the record kept in its
    container: ``signature``, ``epoch``) matches its ``collective_signature`` (same container, cluster and test)
    and is younger than ``max_age_s``."""
    for node in nodes:
        record = node.get("collective_record") or {}
        if not record.get("signature") or record.get("signature") != node.get("collective_signature"):
            return False
        if now_epoch - float(record.get("epoch") or 0) > float(max_age_s):
            return False
    return True
