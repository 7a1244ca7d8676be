"""The streaming parser (:class:`MegatronLogParser`: a fast path for the canonical iteration line, a general path
for every other line) and :func:`parse_lines`."""

from __future__ import annotations

import gc
import re
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from ..straggler import parse_ranked_line, parse_report_line
from .failures import _ChildFailed, _FailureAssembly, _Traceback
from .patterns import (
    _AGENT_PREFIX,
    _DEEPSPEED_MARKERS,
    _EVENT,
    _EXIT_BARRIER,
    _FAST_MATCH,
    _ITER,
    _ITER_TIME_SAMPLES,
    _KNOWN_FIELDS,
    _LOADED,
    _MEMORY,
    _MEMORY_FIELDS,
    _NAN,
    _OOM,
    _PARAMETERS,
    _SAVE_TIMER,
    _SAVED,
    _THEORETICAL,
    _TIMESTAMP,
    _TORCH_PREFIX,
    _VALIDATION,
    _WORKER_EXIT,
    DEFAULT_WARMUP_ITERATIONS,
    _convert,
    _fields,
    _value,
)
from .result import MegatronLog, summarize
from .statistics import _is_nonfinite, _Stats


class _NoGC:
    """Pause the cyclic garbage collector while records are built: they hold no cycles, and the collector's
    repeated scans of a million fresh dicts would otherwise cost a third of the parse time."""

    def __enter__(self) -> None:
        self.enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            gc.enable()


class MegatronLogParser(_FailureAssembly):
    """Feed lines one at a time (:meth:`feed`), one source after another (:meth:`begin_source`).

    ``max_records`` keeps only the most recent N iteration and memory records (the summary still covers every
    line); ``None`` keeps all. The failure records are assembled by the base class (:mod:`.failures`).
    """

    def __init__(self, *, max_records: int | None = None) -> None:
        keep = max_records if max_records and max_records > 0 else None
        self.iterations: list[dict] | deque[dict] = deque(maxlen=keep) if keep else []
        self.memory: list[dict] | deque[dict] = deque(maxlen=keep) if keep else []
        self.failures: list[dict[str, Any]] = []
        self.failures_omitted = 0
        self.validation: list[dict[str, Any]] = []
        self.checkpoints: list[dict[str, Any]] = []
        self.theoretical_memory: list[dict[str, Any]] = []
        self.parameters: dict[str, float] = {}
        self.events: list[dict[str, Any]] = []
        self.stragglers: list[dict[str, Any]] = []
        self.rejected: dict[str, Any] = {}
        self.stats = _Stats()
        self._int_cache: dict[str, int] = {}
        self._float_cache: dict[str, float] = {}
        self._append_iteration = self.iterations.append
        self._add_stats = self.stats.add
        self.lines = 0  # lines of the sources already ended
        self._source: str | None = None
        self._rank: int | None = None
        self._local_rank: int | None = None
        self._node: str | None = None
        self._attempt: int | None = None
        self._lineno = 0
        self._lines_counted = 0
        self._pending: dict[tuple[str, int] | None, _Traceback | _ChildFailed] = {}
        self._teardown_pid: str | None = None  # the torchrun agent whose exit-barrier message is being read
        self._nan_reported = False
        self._ranks_seen: set[int] = set()  # global ranks this source's content names ([Rank R], [rankN]:)
        self._source_start = 0
        self._source_counts = {"iterations": 0, "memory": 0}
        self._first_iteration: int | None = None

    # -- sources --------------------------------------------------------------------------------------------
    def begin_source(
        self,
        source: str | None = None,
        *,
        rank: int | None = None,
        local_rank: int | None = None,
        node: str | None = None,
        attempt: int | None = None,
    ) -> None:
        """Start a new stream (a file): flush what is pending and start a new warm-up segment."""
        self.end_source()
        self._source, self._rank, self._local_rank, self._node, self._attempt = (
            source,
            rank,
            local_rank,
            node,
            attempt,
        )
        self._lineno = self._lines_counted = 0
        self._nan_reported = False
        self._ranks_seen = set()
        self._source_start = len(self.failures)
        self._source_counts = {"iterations": self.stats.count, "memory": self.stats.memory_count}
        self._first_iteration = None
        self.stats.new_segment()

    def end_source(self) -> dict[str, Any]:
        """Flush pending tracebacks; returns what this source held (counts, rank learned from its content)."""
        for key in list(self._pending):
            self._finish(key)
        self.lines += self._lineno - self._lines_counted
        self._lines_counted = self._lineno
        return {
            "lines": self._lineno,
            "iterations": self.stats.count - self._source_counts["iterations"],
            "memory": self.stats.memory_count - self._source_counts["memory"],
            "failures": len(self.failures) - self._source_start,
            "first_iteration": self._first_iteration,
            "last_iteration": self.stats.last["iteration"] if self._first_iteration is not None else None,
            # the source's own rank when its content names a single one (not a combined log of many ranks)
            "rank": self._rank if self._rank is not None else self._single_rank(),
        }

    def _single_rank(self) -> int | None:
        return next(iter(self._ranks_seen)) if len(self._ranks_seen) == 1 else None

    def fill_rank(self, start: int, rank: int) -> None:
        """Give ``rank`` to the failures from index ``start`` on that have none (same process, other stream)."""
        for failure in self.failures[start:]:
            if failure["rank"] is None and failure["kind"] != "child_failed":
                failure["rank"] = rank

    # -- lines ----------------------------------------------------------------------------------------------
    def feed(self, raw: str) -> None:
        """Parse one line (with or without its newline)."""
        self._lineno += 1
        if not self._pending and "iteration" in raw:
            match = _FAST_MATCH(raw)
            if match is not None and (taken := self._fast_iteration(match)):
                if taken == 2:
                    self._report_nan(self.stats.last)  # type: ignore[arg-type]
                return
        self._general(raw)

    def feed_lines(self, lines: Iterable[str]) -> None:
        """Parse many lines: :meth:`feed` with the per-line call of the hot path taken out of the loop."""
        fast = self._fast_iteration
        general = self._general
        match_line = _FAST_MATCH
        pending = self._pending  # the same dict all along: its truth tells whether a block is open
        lineno = start = self._lineno
        for lineno, line in enumerate(lines, start + 1):  # noqa: B007 - lineno is read after the loop
            if "iteration" in line and not pending:
                match = match_line(line)
                if match is not None and (taken := fast(match)):
                    if taken == 2:
                        self._lineno = lineno
                        self._report_nan(self.stats.last)  # type: ignore[arg-type]
                    continue
            self._lineno = lineno
            general(line)
        self._lineno = lineno

    def _general(self, raw: str) -> None:
        line = raw
        key: tuple[str, int] | None = None
        if line.startswith(("[rank", "[default")):
            match = _TORCH_PREFIX.match(line)
            if match:
                key = (match.group(1), int(match.group(2)))
                line = line[match.end() :]
                if key[0] == "rank":
                    self._ranks_seen.add(key[1])
        elif self._teardown_pid is not None or _EXIT_BARRIER in line:
            # torchrun's agent logs its exit barrier's failure, after its workers succeeded, as an error with a
            # traceback, a line each under its own prefix: teardown (another node's agent left first), skipped
            match = _AGENT_PREFIX.match(line)
            if match and (match.group(1) == self._teardown_pid or line[match.end() :].startswith(_EXIT_BARRIER)):
                self._teardown_pid = match.group(1)
                return
            self._teardown_pid = None
        if self._pending and key in self._pending and self._continue(key, line.rstrip()):
            return
        if "iteration" in line:
            if (match := _FAST_MATCH(line)) is not None and (taken := self._fast_iteration(match)):
                if taken == 2:
                    self._report_nan(self.stats.last)  # type: ignore[arg-type]
                return
            line = line.rstrip()
            match = _ITER.search(line)
            if match is not None:
                self._iteration(line, match)
                return
            if "loss at iteration" in line and (match := _VALIDATION.search(line)):
                self._validation(match)
                return
            if "checkpoint" in line and (match := _SAVED.search(line) or _LOADED.search(line)):
                self._checkpoint(match)
                return
        else:
            line = line.rstrip()
        if "Traceback (most recent call last)" in line:
            self._finish(key)
            self._pending[key] = _Traceback(self._lineno, line)
            return
        if "memory (MB)" in line and (match := _MEMORY.search(line)):
            self._memory(match, key)
            return
        if "Root Cause (first observed failure)" in line:
            block = _ChildFailed(self._lineno)
            block.section = "root"
            self._finish(key)
            self._pending[key] = block
            return
        if "ChildFailedError" in line and line.rstrip().endswith(":"):
            self._finish(key)
            self._pending[key] = _ChildFailed(self._lineno)
            return
        if "save-checkpoint" in line and (match := _SAVE_TIMER.match(line)):
            self.checkpoints.append(
                {
                    "event": "save_time",
                    "min_ms": float(match.group(1)),
                    "max_ms": float(match.group(2)),
                    "file": self._source,
                }  # fmt: skip
            )
            return
        if "Theoretical memory" in line and (match := _THEORETICAL.search(line)):
            self.theoretical_memory.append(
                {
                    "weight_and_optimizer_mb": float(match.group(1)),
                    "activation_mb": float(match.group(2)) if match.group(2) else None,
                    "total_mb": float(match.group(3)) if match.group(3) else None,
                    "file": self._source,
                }
            )
            return
        if "in billions" in line and (match := _PARAMETERS.search(line)):
            label = match.group(2) or ""
            name = "total" + (f" {label}" if label else "") if match.group(1).startswith("Total") else label
            self.parameters[name or "model"] = float(match.group(3))
            return
        if "/Rnk:" in line and (report := parse_report_line(line)) is not None:
            report["file"] = self._source
            self.stragglers.append(report)
            return
        if "^^^^" in line and self.stragglers and (ranked := parse_ranked_line(line)) is not None:
            self.stragglers[-1]["etpt"].update(ranked)
            return
        if "datetime:" in line and (match := _EVENT.search(line)):
            self.events.append({"label": match.group(1).strip(), "datetime": match.group(2), "file": self._source})
            return
        if "exitcode" in line and (match := _WORKER_EXIT.search(line)):
            exitcode, local_rank = int(match.group(1)), int(match.group(2))
            self._add_failure(
                "worker_exit",
                line.strip(),
                key,
                local_rank=local_rank,
                details={"exitcode": exitcode, "pid": int(match.group(3)), "binary": match.group(4)},
            )
            return
        if ("emory" in line or "EMORY" in line) and _OOM.search(line):
            self._add_failure("oom", line.strip(), key)
            return
        if ("nan" in line or "NaN" in line or "NAN" in line or "finite" in line) and _NAN.search(line):
            self._add_failure("nan", line.strip(), key)

    # -- line kinds -----------------------------------------------------------------------------------------
    def _fast_iteration(self, match: re.Match[str]) -> int:
        """The canonical line: 1 when taken, 2 when taken and NaN is to be reported, 0 when a value does not
        convert (the general path then takes the line)."""
        (ts, it, n, consumed, elapsed, tflops, lr, gbs, loss_name, loss_value, more_losses, scale, grad, zeros, skipped,
         nans) = match.groups()  # fmt: skip
        try:
            losses = {loss_name.strip(): float(loss_value)} if loss_name is not None else {}
            if more_losses:
                for text in more_losses.split("|"):
                    name, colon, value = text.partition(":")
                    if colon:
                        losses[name.strip()] = float(value)
            # Fields that rarely change from line to line are converted once and their objects shared.
            ints = self._int_cache
            iteration = int(it)
            elapsed_ms = float(elapsed)
            batch = ints.get(gbs)
            if batch is None:
                batch = self._remember(ints, gbs, int)
            skipped_count = ints.get(skipped)
            if skipped_count is None:
                skipped_count = self._remember(ints, skipped, int)
            nan_count = ints.get(nans)
            if nan_count is None:
                nan_count = self._remember(ints, nans, int)
            train_iters = ints.get(n)
            if train_iters is None:
                train_iters = self._remember(ints, n, int)
            loss_scale = self._float_cache.get(scale)
            if loss_scale is None:
                loss_scale = self._remember(self._float_cache, scale, float)
            throughput = None if tflops is None else float(tflops)
            grad_norm = None if grad is None else float(grad)
            rec = {
                "iteration": iteration,
                "train_iters": train_iters,
                "consumed_samples": int(consumed),
                "elapsed_ms": elapsed_ms,
                "tflops_per_gpu": throughput,
                "learning_rate": float(lr),
                "global_batch_size": batch,
                "losses": losses,
                "loss_scale": loss_scale,
                "grad_norm": grad_norm,
                "num_zeros": None if zeros is None else float(zeros),
                "skipped_iterations": skipped_count,
                "nan_iterations": nan_count,
                "timestamp": ts,
                "extra": {},
            }
        except ValueError:
            return 0
        self._append_iteration(rec)
        self._add_stats(rec, iteration, elapsed_ms, batch, throughput, losses, nan_count, skipped_count)
        if self._first_iteration is None:
            self._first_iteration = iteration
        total = sum(losses.values()) if losses else 0.0
        if grad_norm is not None:
            total += grad_norm
        if (nan_count or total - total) and not self._nan_reported:  # x - x is NaN for NaN and inf
            return 2  # the caller reports it, knowing the line number
        return 1

    @staticmethod
    def _remember(cache: dict[str, Any], text: str, kind: type) -> Any:
        """Convert a value not yet in ``cache`` and keep it there (the cache stays small whatever the log)."""
        if len(cache) >= 4096:
            cache.clear()
        value = cache[text] = kind(text)
        return value

    def _iteration(self, line: str, match: re.Match[str]) -> None:
        for marker in _DEEPSPEED_MARKERS:
            if marker in line:
                entry = self.rejected.setdefault("megatron-deepspeed", {"count": 0, "first": None})
                entry["count"] += 1
                if entry["first"] is None:
                    entry["first"] = {"file": self._source, "line": self._lineno}
                return
        head = line[: match.start()]
        timestamp = None
        fields = line[match.end() :].split("|")
        if head and not head.isspace():
            stamp = _TIMESTAMP.search(head)
            if stamp is not None:
                timestamp = stamp.group(1)
                head = head[: stamp.start()] + head[stamp.end() :]
            if "|" in head or ":" in head:
                fields = head.split("|") + fields
        rec: dict[str, Any] = {
            "iteration": int(match.group(1)),
            "train_iters": int(match.group(2)),
            "consumed_samples": None,
            "elapsed_ms": None,
            "tflops_per_gpu": None,
            "learning_rate": None,
            "global_batch_size": None,
            "losses": {},
            "loss_scale": None,
            "grad_norm": None,
            "num_zeros": None,
            "skipped_iterations": None,
            "nan_iterations": None,
            "timestamp": timestamp,
            "extra": {},
        }
        losses = rec["losses"]
        extra = rec["extra"]
        known = _KNOWN_FIELDS
        for text in fields:
            name, colon, value = text.partition(":")
            if not colon:
                if text.strip():
                    extra.setdefault("unparsed", []).append(text.strip())
                continue
            name = name.strip()
            target = known.get(name)
            try:
                if target is not None:
                    rec[target[0]] = _convert(value, target[1])
                elif name[-4:].lower() == "loss":
                    losses[name] = float(value)
                elif name == "iteration time" and (timing := _ITER_TIME_SAMPLES.match(value)):
                    extra["iteration time (s)"] = float(timing.group(1))
                    extra["samples/sec"] = float(timing.group(2))
                else:
                    extra[name] = _value(value)
            except ValueError:
                extra[name] = value.strip()
        self._add_iteration(rec)

    def _add_iteration(self, rec: dict[str, Any]) -> None:
        self._append_iteration(rec)
        self.stats.add_record(rec)
        if self._first_iteration is None:
            self._first_iteration = rec["iteration"]
        losses = rec["losses"]
        total = sum(losses.values()) if losses else 0.0
        if rec["grad_norm"] is not None:
            total += rec["grad_norm"]
        if (rec["nan_iterations"] or total - total) and not self._nan_reported:  # x - x is NaN for NaN and inf
            self._report_nan(rec)

    def _report_nan(self, rec: Mapping[str, Any]) -> None:
        """The first iteration line of a source with a NaN/inf loss or grad norm, or nan iterations > 0."""
        self._nan_reported = True
        bad = [n for n, v in rec["losses"].items() if _is_nonfinite(v)]
        if _is_nonfinite(rec["grad_norm"]):
            bad.append("grad norm")
        what = f"{', '.join(bad)} not finite" if bad else f"number of nan iterations: {rec['nan_iterations']}"
        self._add_failure("nan", f"iteration {rec['iteration']}: {what}", None, iteration=rec["iteration"])

    def _memory(self, match: re.Match[str], key: tuple[str, int] | None) -> None:
        rank = int(match.group(1))
        rec: dict[str, Any] = {
            "rank": rank,
            "after_iteration": int(match.group(2)),
            "allocated_mb": None,
            "max_allocated_mb": None,
            "reserved_mb": None,
            "max_reserved_mb": None,
            "extra": {},
            "file": self._source,
        }
        for name, number in _fields(match.group(3)):
            target = _MEMORY_FIELDS.get(name)
            if target is not None and isinstance(number, float):
                rec[target] = number
            else:
                rec["extra"][name] = number
        self._ranks_seen.add(rank)
        self.memory.append(rec)
        self.stats.add_memory(rec)

    def _checkpoint(self, match: re.Match[str]) -> None:
        if match.re is _SAVED:
            rec = {"event": "saved", "iteration": int(match.group(1)), "dir": match.group(2)}
        else:
            rec = {"event": "loaded", "iteration": int(match.group(2)), "dir": match.group(1)}
        rec["file"] = self._source
        self.checkpoints.append(rec)

    def _validation(self, match: re.Match[str]) -> None:
        rec: dict[str, Any] = {
            "iteration": int(match.group(2)),
            "split": match.group(1),
            "losses": {},
            "ppl": {},
            "extra": {},
            "file": self._source,
        }
        for name, number in _fields(match.group(3)):
            if name.endswith(" value"):
                rec["losses"][name[: -len(" value")]] = number
            elif name.endswith(" PPL"):
                rec["ppl"][name[: -len(" PPL")]] = number
            else:
                rec["extra"][name] = number
        self.validation.append(rec)

    # -- result ---------------------------------------------------------------------------------------------
    def result(self) -> MegatronLog:
        self.end_source()
        return MegatronLog(
            iterations=list(self.iterations),
            memory=list(self.memory),
            failures=self.failures,
            validation=self.validation,
            checkpoints=self.checkpoints,
            theoretical_memory=self.theoretical_memory,
            parameters=self.parameters,
            events=self.events,
            stragglers=self.stragglers,
            rejected=self.rejected,
            counts={
                "lines": self.lines,
                "iterations_total": self.stats.count,
                "iterations_returned": len(self.iterations),
                "memory_total": self.stats.memory_count,
                "memory_returned": len(self.memory),
                "failures_omitted": self.failures_omitted,
            },
            stats=self.stats,
        )


# --- entry point -----------------------------------------------------------------------------------------------
def parse_lines(
    lines: Iterable[str],
    source: str | None = None,
    rank: int | None = None,
    *,
    seq_length: int | None = None,
    world_size: int | None = None,
    warmup_iterations: int = DEFAULT_WARMUP_ITERATIONS,
    peak_tflops: float | None = None,
    max_records: int | None = None,
) -> MegatronLog:
    """Parse an iterable of lines (a file object streams); ``source`` names the file in records.

    ``rank`` is the global rank of the process that wrote the lines, when the caller knows it.
    """
    if isinstance(lines, str):
        lines = lines.splitlines()
    parser = MegatronLogParser(max_records=max_records)
    parser.begin_source(source, rank=rank)
    with _NoGC():
        parser.feed_lines(lines)
    info = parser.end_source()
    if rank is None and info["rank"] is not None:
        parser.fill_rank(0, info["rank"])
    log = parser.result()
    if source is not None:
        log.files = [{"path": source, "node": None, "attempt": None, "local_rank": None, "stream": None, **info}]
    log.summary = summarize(
        log, seq_length=seq_length, world_size=world_size, warmup_iterations=warmup_iterations, peak_tflops=peak_tflops
    )
    return log
