"""What a parse returns (:class:`MegatronLog`) and the run's summary (:func:`summarize`)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .failures import _FATAL_KINDS, _primary_failure
from .patterns import DEFAULT_WARMUP_ITERATIONS
from .statistics import _Distribution, _from_records, _Stats, _stats


@dataclass
class MegatronLog:
    """Everything parsed from one log or a log directory. ``to_dict()`` gives plain JSON-ready data."""

    iterations: list[dict[str, Any]] = field(default_factory=list)
    memory: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    validation: list[dict[str, Any]] = field(default_factory=list)
    #: Megatron's checkpoint lines: ``saved`` and ``loaded`` (iteration, dir) and ``save_time`` (min/max ms).
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    theoretical_memory: list[dict[str, Any]] = field(default_factory=list)
    parameters: dict[str, float] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    stragglers: list[dict[str, Any]] = field(default_factory=list)
    files: list[dict[str, Any]] = field(default_factory=list)
    attempts: list[int] = field(default_factory=list)
    rejected: dict[str, Any] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    stats: _Stats = field(default_factory=_Stats, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "iterations": list(self.iterations),
            "memory": list(self.memory),
            "failures": list(self.failures),
            "validation": list(self.validation),
            "checkpoints": list(self.checkpoints),
            "theoretical_memory": list(self.theoretical_memory),
            "parameters": dict(self.parameters),
            "events": list(self.events),
            "stragglers": list(self.stragglers),
            "files": list(self.files),
            "attempts": list(self.attempts),
            "rejected": dict(self.rejected),
            "counts": dict(self.counts),
            "summary": self.summary,
        }


def _checkpoints(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Megatron's saves and loads, in log order, and each save's stall (the slowest rank's save-checkpoint timer)."""
    records = list(records)
    saves = [r["max_ms"] for r in records if r["event"] == "save_time"]
    saved = [{"iteration": r["iteration"], "dir": r["dir"]} for r in records if r["event"] == "saved"]
    if len(saves) == len(saved):  # Megatron logs the save's timer right after each save: the stall it cost the run
        saved = [dict(entry, stall_ms=ms) for entry, ms in zip(saved, saves, strict=True)]
    return {
        "saved": saved,
        "loaded": [{"iteration": r["iteration"], "dir": r["dir"]} for r in records if r["event"] == "loaded"],
        "save_ms": _Distribution(saves).summary(),
    }


def summarize(
    log: MegatronLog | Iterable[Mapping[str, Any]],
    *,
    memory: Iterable[Mapping[str, Any]] = (),
    failures: Iterable[Mapping[str, Any]] = (),
    seq_length: int | None = None,
    world_size: int | None = None,
    warmup_iterations: int = DEFAULT_WARMUP_ITERATIONS,
    peak_tflops: float | None = None,
) -> dict[str, Any]:
    """The run's summary, from a :class:`MegatronLog` or from iteration records (then ``memory``/``failures``).

    * ``step_time_ms``: count, median, p90 (linear interpolation), mean, min, max of ``elapsed_ms`` (or a fork's
      ``iteration time (s)``) over the records that are not warm-up (see :data:`DEFAULT_WARMUP_ITERATIONS`).
      When every record is warm-up (a very short run), all records are used and ``all_warmup`` is true.
    * ``tokens_per_second_per_gpu`` (needs ``seq_length`` and ``world_size``): per record
      ``global_batch_size * seq_length / step_time / world_size``; median, p90, and ``overall`` = all tokens
      over all time.
    * ``tflops_per_gpu``: Megatron's own ``throughput per GPU (TFLOP/s/GPU)`` figures (its
      ``num_floating_point_operations`` convention), the same records; ``mfu`` = median / ``peak_tflops``.
    * ``losses``: first and last value of every loss name, with their iterations.
    * ``nan_iterations`` / ``skipped_iterations``: sums of the per-interval counts of every iteration line.
    * ``max_reserved_mb_by_rank`` (keys are the ranks as strings, as in JSON), ``max_reserved_mb``.
    * ``failure``: the first root cause (see :func:`_primary_failure`) with node, file, rank, or ``None``.
    * ``state``: ``failed``, ``finished``, ``running`` (iterations but no end) or ``empty``.
    """
    if isinstance(log, MegatronLog):
        stats = log.stats
        failures_list = list(log.failures)
        validation = log.validation
        checkpoints = log.checkpoints
        theoretical = log.theoretical_memory
        events = log.events
        attempts = log.attempts
        rejected = log.rejected
        omitted = log.counts.get("failures_omitted", 0)
    else:
        stats = _from_records(log, memory)
        failures_list = list(failures)
        validation, theoretical, events, attempts, rejected, omitted = [], [], [], [], {}, 0
        checkpoints = []

    warmup = max(0, int(warmup_iterations))
    # Iterations increase within a segment, so its warm-up records are a prefix of it: one bisection each.
    bounds = [start for start, _ in stats.segments[1:]] + ([stats.count] if stats.segments else [])
    segments = [(start, first, bounds[k]) for k, (start, first) in enumerate(stats.segments)]
    steady = [(bisect_left(stats.iters, first + warmup, start, end), end) for start, first, end in segments]
    kept = sum(end - cut for cut, end in steady)
    all_warmup = kept == 0 and stats.count > 0
    if all_warmup:
        steady = [(start, end) for start, _, end in segments]
    elapsed_ms = [x for a, b in steady for x in stats.elapsed[a:b] if x > 0]  # NaN > 0 is false
    elapsed_distribution = _Distribution(elapsed_ms)
    step = elapsed_distribution.summary()
    if step is not None:
        step["warmup_iterations"] = warmup
        step["warmup_records_excluded"] = 0 if all_warmup else stats.count - kept
        step["all_warmup"] = all_warmup

    tokens = None
    if seq_length and world_size:
        batches: set[float] = set()
        for a, b in steady:
            batches.update(stats.gbs[a:b])
        if len(batches) == 1 and next(iter(batches)) > 0:
            # One batch size: tokens/s per GPU of a record is K / its step time, taken from the step times'
            # distribution (no second list of a million values).
            factor = next(iter(batches)) * seq_length * 1000.0 / world_size
            tokens = elapsed_distribution.summary(factor)
            if tokens is not None:
                tokens["overall"] = factor / step["mean"]  # type: ignore[index]
        else:
            per_iteration = [
                (stats.gbs[k], stats.elapsed[k])
                for a, b in steady
                for k in range(a, b)
                if stats.gbs[k] > 0 and stats.elapsed[k] > 0  # NaN (unknown) > 0 is false
            ]
            tokens = _stats([g * seq_length * 1000.0 / world_size / e for g, e in per_iteration])
            if tokens is not None:
                total_tokens = sum(g for g, _ in per_iteration) * seq_length
                tokens["overall"] = total_tokens * 1000.0 / sum(e for _, e in per_iteration) / world_size
        if tokens is not None:
            tokens["seq_length"] = seq_length
            tokens["world_size"] = world_size
    tflops = _stats([x for a, b in steady for x in stats.tflops[a:b] if x == x])  # x == x drops NaN
    if tflops is not None:
        tflops["convention"] = "as printed by Megatron (num_floating_point_operations)"
        tflops["peak_tflops"] = peak_tflops
        tflops["mfu"] = tflops["median"] / peak_tflops if peak_tflops else None

    last = stats.last
    failure = _primary_failure(failures_list)
    by_kind: dict[str, int] = {}
    for item in failures_list:
        by_kind[item["kind"]] = by_kind.get(item["kind"], 0) + 1
    done = any(e["label"] == "after training is done" for e in events)
    if last is not None and last["iteration"] >= last["train_iters"] > 0:
        done = True
    fatal = any(item["kind"] in _FATAL_KINDS for item in failures_list)
    if by_kind.get("child_failed") or (fatal and not done):
        state = "failed"
    elif done:
        state = "finished"
    elif stats.count:
        state = "running"
    else:
        state = "empty"

    return {
        "state": state,
        "iterations_parsed": stats.count,
        "last_iteration": last["iteration"] if last else None,
        "train_iters": last["train_iters"] if last else None,
        "progress": (last["iteration"] / last["train_iters"]) if last and last["train_iters"] else None,
        "consumed_samples": last["consumed_samples"] if last else None,
        "first_timestamp": stats.first["timestamp"] if stats.first else None,
        "last_timestamp": last["timestamp"] if last else None,
        "training_done": done,
        "step_time_ms": step,
        "tokens_per_second_per_gpu": tokens,
        "tflops_per_gpu": tflops,
        "losses": {name: dict(v) for name, v in stats.losses.items()},
        "nan_iterations": stats.nan_iterations,
        "skipped_iterations": stats.skipped_iterations,
        "nan_reports": by_kind.get("nan", 0),
        "max_reserved_mb_by_rank": {str(r): v for r, v in sorted(stats.max_reserved.items())},
        "max_reserved_mb": max(stats.max_reserved.values()) if stats.max_reserved else None,
        "max_allocated_mb_by_rank": {str(r): v for r, v in sorted(stats.max_allocated.items())},
        "memory_records": stats.memory_count,
        "last_validation": validation[-1] if validation else None,
        "checkpoints": _checkpoints(checkpoints),
        "theoretical_memory": theoretical[-1] if theoretical else None,
        "failure": failure,
        "failures_by_kind": by_kind,
        "failures_omitted": omitted,
        "attempts": list(attempts),
        "rejected_lines": {name: v["count"] for name, v in rejected.items()},
    }
