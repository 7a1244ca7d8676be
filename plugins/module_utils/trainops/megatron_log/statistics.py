"""Order statistics (:class:`_Distribution`, :func:`_stats`) and the streaming accumulator of the summary
(:class:`_Stats`, filled as lines arrive, or by :func:`_from_records` from iteration and memory records)."""

from __future__ import annotations

import math
from array import array
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Mapping
from itertools import accumulate
from typing import Any


class _Distribution:
    """Order statistics of numbers. Megatron prints step times and TFLOP/s with one decimal, so a long run has
    few distinct values: they are counted (in C) and only the distinct values sorted; otherwise the list is
    sorted in place. Percentiles interpolate linearly between closest ranks (NumPy's default)."""

    def __init__(self, values: list[float]) -> None:
        self.n = len(values)
        counts = Counter(values) if self.n > 1000 else None
        if counts is not None and len(counts) * 4 <= self.n:
            self.keys = sorted(counts)
            self.cumulative: list[int] | None = list(accumulate(counts[k] for k in self.keys))
            self.counts: Mapping[float, int] = counts
        else:
            values.sort()
            self.keys, self.cumulative, self.counts = values, None, {}

    def at(self, position: int) -> float:
        """The value at a 0-based position of the sorted numbers."""
        if self.cumulative is None:
            return self.keys[position]
        return self.keys[bisect_right(self.cumulative, position)]

    def summary(self, factor: float | None = None) -> dict[str, float | int] | None:
        """Count, median, p90, mean, min, max of the numbers, or of ``factor / x`` for each when given."""
        n = self.n
        if not n:
            return None
        if factor is None:
            value = self.at
            total = sum(self.keys) if self.cumulative is None else math.fsum(k * c for k, c in self.counts.items())
        else:  # factor / x decreases with x: ascending position p is the value at n - 1 - p
            value = lambda p: factor / self.at(n - 1 - p)  # noqa: E731
            total = (
                sum(map(factor.__truediv__, self.keys))
                if self.cumulative is None
                else math.fsum(factor / k * c for k, c in self.counts.items())
            )

        def percentile(q: float) -> float:
            pos = q * (n - 1)
            low = math.floor(pos)
            high = min(low + 1, n - 1)
            a, b = value(low), value(high)
            return a + (b - a) * (pos - low)

        return {
            "count": n,
            "median": percentile(0.5),
            "p90": percentile(0.9),
            "mean": total / n,
            "min": value(0),
            "max": value(n - 1),
        }


def _stats(values: list[float]) -> dict[str, float | int] | None:
    """Count, median, p90, mean, min, max (``values`` may be reordered)."""
    return _Distribution(values).summary()


def _is_nonfinite(value: Any) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


# --- streaming accumulator for the summary -------------------------------------------------------------------
class _Stats:
    """What the summary needs, kept as lines arrive, in compact arrays (8 bytes per value per record)."""

    def __init__(self) -> None:
        self.iters = array("q")  # iteration numbers
        self.segments: list[tuple[int, int]] = []  # (index of the first record, its iteration) per segment
        self.elapsed = array("d")  # ms, NaN when unknown
        self.gbs = array("d")
        self.tflops = array("d")
        self.count = 0
        self.first: dict | None = None
        self.last: dict | None = None
        self.losses: dict[str, dict[str, Any]] = {}
        self.nan_iterations = 0
        self.skipped_iterations = 0
        self.max_reserved: dict[int, float] = {}
        self.max_allocated: dict[int, float] = {}
        self.memory_count = 0
        self._segment_first: int | None = None
        self._previous: int | None = None

    def new_segment(self) -> None:
        self._segment_first = None

    def add_record(self, rec: Mapping[str, Any]) -> None:
        """Account one iteration record."""
        elapsed = rec["elapsed_ms"]
        if elapsed is None:
            seconds = rec["extra"].get("iteration time (s)")
            elapsed = seconds * 1000.0 if isinstance(seconds, float) else None
        self.add(
            rec,
            rec["iteration"],
            elapsed,
            rec["global_batch_size"],
            rec["tflops_per_gpu"],
            rec["losses"],
            rec["nan_iterations"],
            rec["skipped_iterations"],
        )

    def add(
        self,
        rec: Mapping[str, Any],
        it: int,
        elapsed: float | None,
        gbs: int | None,
        tflops: float | None,
        losses: Mapping[str, float],
        nans: int | None,
        skipped: int | None,
    ) -> None:
        """Account one iteration record whose values the caller already holds (the hot path)."""
        if self._segment_first is None or it <= self._previous:  # type: ignore[operator]
            self._segment_first = it
            self.segments.append((self.count, it))
        self._previous = it
        self.iters.append(it)
        self.elapsed.append(math.nan if elapsed is None else elapsed)
        self.gbs.append(math.nan if gbs is None else gbs)
        self.tflops.append(math.nan if tflops is None else tflops)
        self.count += 1
        if self.first is None:
            self.first = {"iteration": it, "timestamp": rec["timestamp"]}
        self.last = rec
        if losses:
            seen = self.losses
            for name, value in losses.items():
                entry = seen.get(name)
                if entry is None:
                    seen[name] = {"first": value, "first_iteration": it, "last": value, "last_iteration": it}
                else:
                    entry["last"] = value
                    entry["last_iteration"] = it
        if nans:
            self.nan_iterations += nans
        if skipped:
            self.skipped_iterations += skipped

    def add_memory(self, rec: Mapping[str, Any]) -> None:
        self.memory_count += 1
        rank = rec["rank"]
        for source, target in (("max_reserved_mb", self.max_reserved), ("max_allocated_mb", self.max_allocated)):
            value = rec[source]
            if value is not None and (rank not in target or value > target[rank]):
                target[rank] = value


def _from_records(iterations: Iterable[Mapping[str, Any]], memory: Iterable[Mapping[str, Any]]) -> _Stats:
    stats = _Stats()
    for rec in iterations:
        stats.add_record(rec)
    for rec in memory:
        stats.add_memory(rec)
    return stats
