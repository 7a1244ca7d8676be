"""Stream-parse Megatron-LM training logs: iterations, memory, failures, validation, summary.

Lines recognised (the variants of Megatron-LM's own log lines seen in public logs; real excerpts are under
``tests/fixtures/megatron-logs/``):

* the **iteration line** printed by the last global rank::

      [2025-10-06 03:27:07] iteration       10/      10 | consumed samples:         5120 | elapsed time per
      iteration (ms): 4647.8 | [throughput per GPU (TFLOP/s/GPU): 137.5 |] learning rate: 1.500000E-06 |
      global batch size:   512 | lm loss: 9.763827E+00 | loss scale: 1.0 | [grad norm: 33.055 |]
      [num zeros: 0.0 |] number of skipped iterations:   0 | number of nan iterations:   0 |

  with or without the ``[timestamp]`` prefix (fractional seconds or not), padded numbers, ``.3E`` or ``.6E``
  learning rates, any loss name (a field whose name ends in ``loss``: ``lm loss``, ``load_balancing_loss``,
  ``mtp_1 loss``), optional fields, and forks' extra fields before or after ``iteration I/N``
  (``tokens_per_gpu_per_second: X /s | mfu: Y |``, ``iteration time: X s samples/sec: Y``). Unknown fields land
  in ``extra`` under their printed name; a known field absent from the line is ``None``;
* the **memory line** ``[Rank R] (after K iterations) memory (MB) | allocated: A | max allocated: B |
  reserved: C | max reserved: D [| total device memory used: X]``;
* ``validation loss at iteration I [on validation set] | lm loss value: V | lm loss PPL: P |`` (and ``test``);
* ``Theoretical memory footprints: weight and optimizer=X MB[, activation=Y MB, total=Z MB]``;
* ``Number of parameters in ... in billions: X`` and ``Total number of parameters in billions: X``;
* ``[after training is done] datetime: ...`` and the other ``[label] datetime: ...`` markers;
* the **straggler report** of ``--log-straggler`` (``| MnRtt/Rnk: 3453.08ms/8 | MxRtt/Rnk: ...`` and its
  ``^^^^ Bottom/Top N Ranks with ... Etpt(TF):`` lines), parsed by :mod:`.straggler` into ``stragglers``;
* **failures**: Python tracebacks (the frames and the final exception line, chained tracebacks kept together),
  ``torch.distributed.elastic`` ``ChildFailedError`` summaries (the root cause's rank, local rank, host,
  exit code, error file and traceback, and the other failures), out-of-memory errors (CUDA, MUSA, ...), NaN
  reports (``found NaN in local grad norm``, ``NaN detected``, a ``nan`` loss, ``number of nan iterations`` > 0)
  and torchrun's ``failed (exitcode: N) local_rank: L`` line.

torchrun's per-line prefixes (``[rank3]:`` = global rank, ``[default3]:`` = local rank) are stripped and give
the rank; tracebacks of different prefixed ranks interleaved in one file are kept apart.

Megatron-DeepSpeed (and its AscendSpeed/ModelLink descendants) prints a similar-looking iteration line
(``consumed tokens``, ``samples per second``, ``TFLOPs``, elapsed time in seconds): such lines are **rejected**,
counted in ``rejected["megatron-deepspeed"]``, never taken as Megatron iterations.

Everything streams: files are read line by line, the summary is accumulated as lines arrive (compact arrays,
not the records), and ``max_records`` bounds the iteration and memory lists kept (the most recent ones).

Public API: :func:`parse_lines`, :func:`parse_path`, :func:`summarize`, :class:`MegatronLogParser`,
:class:`MegatronLog`, :class:`LogPathError`. No Ansible imports.
"""

from __future__ import annotations

import gc
import gzip
import math
import os
import re
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import accumulate
from typing import IO, Any

from .straggler import parse_ranked_line, parse_report_line

__all__ = [
    "DEFAULT_WARMUP_ITERATIONS",
    "ITERATION_KEYS",
    "LOG_SUFFIXES",
    "MEMORY_KEYS",
    "LogPathError",
    "MegatronLog",
    "MegatronLogParser",
    "find_log_files",
    "parse_lines",
    "parse_path",
    "summarize",
]

#: Records logged within this many iterations of the start of a segment (a file, an attempt, or a restart
#: inside a file, i.e. an iteration number that does not increase) are warm-up and left out of the step-time,
#: throughput and TFLOP/s statistics. The first record of a segment is therefore always warm-up: it carries
#: start-up, compilation and first allocations.
DEFAULT_WARMUP_ITERATIONS = 10

#: Keys of every iteration record, in order.
ITERATION_KEYS = (
    "iteration",
    "train_iters",
    "consumed_samples",
    "elapsed_ms",
    "tflops_per_gpu",
    "learning_rate",
    "global_batch_size",
    "losses",
    "loss_scale",
    "grad_norm",
    "num_zeros",
    "skipped_iterations",
    "nan_iterations",
    "timestamp",
    "extra",
)

#: Keys of every memory record, in order.
MEMORY_KEYS = (
    "rank",
    "after_iteration",
    "allocated_mb",
    "max_allocated_mb",
    "reserved_mb",
    "max_reserved_mb",
    "extra",
    "file",
)

#: File names taken from a log directory (also with ``.gz``); ``stdout.log``/``stderr.log`` of torchrun included.
LOG_SUFFIXES = (".log", ".out", ".err", ".txt")

#: At most this many failure records are kept; the rest are only counted (``summary.failures_omitted``).
MAX_FAILURES = 1000
_TB_HEAD = 20  # lines kept from the start of a long traceback
_TB_TAIL = 180  # and from its end

# --- line patterns ---------------------------------------------------------------------------------------
_ITER = re.compile(r"\biteration\s+(\d+)\s*/\s*(\d+)\s*\|")
# The canonical upstream line, exactly as Megatron formats it (single spaces, padded integers), every optional
# field in its place: one C-level match instead of a split. Any other line that holds "iteration I/ N |"
# (forks' fields, params norm, skipped samples, other spacing, ...) goes through the general path, which gives
# the same record for the canonical line (tested).
# Possessive quantifiers (Python 3.11+) spare the engine its backtracking bookkeeping where giving characters
# back can never help; older Pythons get the same pattern with plain quantifiers (same matches).
_PLUS, _STAR = ("++", "*+") if sys.version_info >= (3, 11) else ("+", "*")
_INT = r" " + _PLUS + r"(\d" + _PLUS + r")"  # a padded integer
_VALUE = r" ([^ |\n]" + _PLUS + r")"  # a value up to the next " |"
_FAST_ITERATION = re.compile(
    r" ?(?:\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)\] )?"
    r"iteration" + _INT + r"/ " + _STAR + r"(\d" + _PLUS + r") \|"
    r" consumed samples:" + _INT + r" \|"
    r" elapsed time per iteration \(ms\):" + _VALUE + r" \|"
    r"(?: throughput per GPU \(TFLOP/s/GPU\):" + _VALUE + r" \|)?"
    r" learning rate:" + _VALUE + r" \|"
    r" global batch size:" + _INT + r" \|"
    r"(?: ([^|:\n]*loss):" + _VALUE + r" \|((?: [^|:\n]*loss: [^ |\n]+ \|)*))?"
    r" loss scale:" + _VALUE + r" \|"
    r"(?: grad norm:" + _VALUE + r" \|)?"
    r"(?: num zeros:" + _VALUE + r" \|)?"
    r" number of skipped iterations:" + _INT + r" \|"
    r" number of nan iterations:" + _INT + r" \|[ \t\r]*$",
    re.ASCII,
)
_FAST_MATCH = _FAST_ITERATION.match
_TIMESTAMP = re.compile(r"\[\s*(\d{4}-\d\d-\d\d[ T_]\d\d:\d\d:\d\d(?:[.,]\d+)?)\s*\]")
_TORCH_PREFIX = re.compile(r"\[(rank|default)(\d+)\]:\s?")
_MEMORY = re.compile(r"\[Rank\s+(\d+)\]\s*\(after\s+(\d+)\s+iterations?\)\s*memory\s*\(MB\)\s*(.*)$")
_VALIDATION = re.compile(r"\b(validation|test)\s+loss\s+at\s+iteration\s+(\d+)\b[^|]*\|(.*)$")
_NUMBER = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
_THEORETICAL = re.compile(
    r"Theoretical memory footprints:\s*weight and optimizer\s*=\s*" + _NUMBER + r"\s*MB"
    r"(?:\s*,\s*activation\s*=\s*" + _NUMBER + r"\s*MB)?(?:\s*,\s*total\s*=\s*" + _NUMBER + r"\s*MB)?"
)
_PARAMETERS = re.compile(r"\b(Total number|Number) of parameters (?:in (.+?) )?in billions:\s*" + _NUMBER)
_EVENT = re.compile(r"\[([A-Za-z][^\]]*)\]\s*datetime:\s*(.+?)\s*$")
_WORKER_EXIT = re.compile(
    r"failed \(exitcode:\s*(-?\d+)\)\s*local_rank:\s*(\d+)\s*\(pid:\s*(\d+)\)(?:\s*of binary:\s*(\S+))?"
)
_OOM = re.compile(r"out of memory|OutOfMemoryError", re.IGNORECASE)
_NAN = re.compile(
    r"\bnan detected\b|\bfound (?:nan|inf) in\b|\bunexpected result nan\b|\bnan or inf found\b|"
    r"\bloss (?:is|=|:)\s*nan\b|\bnon-finite\b",
    re.IGNORECASE,
)
_RANK_IN_TEXT = re.compile(r"\b[Rr]ank[ :=]\s*(\d+)\b")
_NODE_IN_TEXT = re.compile(r"\bnode:\s*([\w.-]+)")
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$")
_SECONDARY = re.compile(  # errors that are usually the consequence of another rank's failure
    r"watchdog caught collective|communicator was aborted|connection reset|broken pipe|socket timeout|"
    r"DistNetworkError|SignalException|got signal|connection closed by peer|timed out|Timeout",
    re.IGNORECASE,
)
_ITER_TIME_SAMPLES = re.compile(r"^\s*" + _NUMBER + r"\s*s\s+samples/sec:\s*" + _NUMBER)
_ATTEMPT_DIR = re.compile(r"^attempt_(\d+)$")
_CHILD_FIELD = re.compile(r"^\s{1,4}(time|host|rank|exitcode|error_file|traceback)\s*:\s?(.*)$")
_CHILD_ENTRY = re.compile(r"^\s*\[(\d+)\]:\s*$")

# Markers of Megatron-DeepSpeed's iteration line (and AscendSpeed/ModelLink, which inherit it).
_DEEPSPEED_MARKERS = ("consumed tokens", "samples per second", "| TFLOPs:", "elapsed time per iteration (s)")

_KNOWN_FIELDS: dict[str, tuple[str, type]] = {
    "consumed samples": ("consumed_samples", int),
    "elapsed time per iteration (ms)": ("elapsed_ms", float),
    "throughput per GPU (TFLOP/s/GPU)": ("tflops_per_gpu", float),
    "learning rate": ("learning_rate", float),
    "global batch size": ("global_batch_size", int),
    "loss scale": ("loss_scale", float),
    "grad norm": ("grad_norm", float),
    "num zeros": ("num_zeros", float),
    "number of skipped iterations": ("skipped_iterations", int),
    "number of nan iterations": ("nan_iterations", int),
}
_MEMORY_FIELDS = {
    "allocated": "allocated_mb",
    "max allocated": "max_allocated_mb",
    "reserved": "reserved_mb",
    "max reserved": "max_reserved_mb",
}
_FAILURE_PRIORITY = {"child_failed": 0, "oom": 1, "traceback": 2, "worker_exit": 3, "nan": 4}
_FATAL_KINDS = ("child_failed", "oom", "traceback", "worker_exit")


class _NoGC:
    """Pause the cyclic garbage collector while records are built: they hold no cycles, and the collector's
    repeated scans of a million fresh dicts would otherwise cost a third of the parse time."""

    def __enter__(self) -> None:
        self.enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            gc.enable()


class LogPathError(ValueError):
    """The path given to :func:`parse_path` does not exist or cannot be read."""


# --- small helpers -------------------------------------------------------------------------------------------
def _value(text: str) -> float | str | None:
    """A field's value: a number (a trailing unit such as ``/s`` is dropped), else the stripped text."""
    try:
        return float(text)
    except ValueError:
        pass
    stripped = text.strip()
    if not stripped:
        return None
    head = stripped.split(None, 1)[0]
    try:
        return float(head)
    except ValueError:
        return stripped


def _fields(text: str) -> Iterator[tuple[str, Any]]:
    """(name, value) of every ``name: value`` field of a ``|``-separated line part."""
    for part in text.split("|"):
        name, colon, value = part.partition(":")
        if colon:
            yield name.strip(), _value(value)


def _convert(text: str, kind: type) -> float | int:
    try:
        return kind(text)
    except ValueError:
        number = float(text)  # "5120.0" for an int field; a ValueError here is handled by the caller
        return int(number) if kind is int and number.is_integer() else number


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


# --- failure assembly ----------------------------------------------------------------------------------------
class _Traceback:
    """A Python traceback being collected (chained tracebacks stay in one record)."""

    __slots__ = ("line", "head", "tail", "omitted", "state", "exception_line")

    def __init__(self, line: int, first: str) -> None:
        self.line = line
        self.head: list[str] = [first]
        self.tail: deque[str] = deque(maxlen=_TB_TAIL)
        self.omitted = 0
        self.state = "frames"  # frames -> after (the exception line seen) -> chain -> frames ...
        self.exception_line: str | None = None

    def append(self, text: str) -> None:
        if len(self.head) < _TB_HEAD:
            self.head.append(text)
            return
        if len(self.tail) == self.tail.maxlen:
            self.omitted += 1
        self.tail.append(text)

    def lines(self) -> list[str]:
        middle = [f"... {self.omitted} line(s) omitted ..."] if self.omitted else []
        return self.head + middle + list(self.tail)


class _ChildFailed:
    """A torch.distributed.elastic ChildFailedError summary block being collected."""

    __slots__ = ("line", "program", "section", "entries", "current", "field", "borders")

    def __init__(self, line: int) -> None:
        self.line = line
        self.program: str | None = None
        self.section = "header"
        self.entries: dict[str, list[dict[str, Any]]] = {"other": [], "root": []}
        self.current: dict[str, Any] | None = None
        self.field: str | None = None
        self.borders = 0

    def feed(self, text: str) -> bool | None:
        """Consume one line: True (part of the block), False (not: the block ended before it), None (ended)."""
        stripped = text.strip()
        if not stripped:
            return True
        if stripped.startswith("==") and not stripped.strip("="):
            self.borders += 1
            return None if self.entries["root"] else True
        if stripped.startswith("--") and not stripped.strip("-"):
            self.field = None
            return True
        if stripped == "Failures:":
            self.section, self.field = "other", None
            return True
        if stripped.startswith("Root Cause"):
            self.section, self.field = "root", None
            return True
        if stripped == "<NO_OTHER_FAILURES>":
            return True
        if match := _CHILD_ENTRY.match(text):
            self.current = {"index": int(match.group(1))}
            self.entries["root" if self.section == "root" else "other"].append(self.current)
            self.field = None
            return True
        if self.current is not None and (match := _CHILD_FIELD.match(text)):
            self.field = match.group(1)
            self.current[self.field] = match.group(2).rstrip()
            return True
        if self.field == "traceback" and self.current is not None and text.startswith("  "):
            self.current["traceback"] += "\n" + text[2:].rstrip()
            return True
        if self.program is None and self.section == "header" and stripped.endswith(" FAILED"):
            self.program = stripped[: -len(" FAILED")]
            return True
        return False

    @staticmethod
    def entry(raw: Mapping[str, Any]) -> dict[str, Any]:
        """One failure of the summary with typed fields."""
        out: dict[str, Any] = {
            "time": raw.get("time"),
            "host": raw.get("host"),
            "rank": None,
            "local_rank": None,
            "exitcode": None,
            "pid": None,
            "error_file": None,
            "traceback": None,
            "error": None,
            "signal": None,
        }
        if match := re.match(r"\s*(-?\d+)(?:\s*\(local_rank:\s*(\d+)\))?", raw.get("rank", "")):
            out["rank"] = int(match.group(1))
            out["local_rank"] = int(match.group(2)) if match.group(2) else None
        if match := re.match(r"\s*(-?\d+)(?:\s*\(pid:\s*(\d+)\))?", raw.get("exitcode", "")):
            out["exitcode"] = int(match.group(1))
            out["pid"] = int(match.group(2)) if match.group(2) else None
        error_file = raw.get("error_file")
        out["error_file"] = None if error_file in (None, "", "<N/A>") else error_file
        tb = raw.get("traceback")
        if tb:
            out["traceback"] = tb
            if match := re.search(r"Signal (\d+) \((\w+)\) received", tb):
                out["signal"] = match.group(2)
                out["error"] = tb.strip()
            elif "To enable traceback" not in tb:
                last = [ln.strip() for ln in tb.splitlines() if ln.strip()]
                out["error"] = last[-1] if last else None
        return out


def _classify(message: str) -> str | None:
    if _OOM.search(message):
        return "oom"
    if _NAN.search(message):
        return "nan"
    return None


# --- the parser ----------------------------------------------------------------------------------------------
@dataclass
class MegatronLog:
    """Everything parsed from one log or a log directory. ``to_dict()`` gives plain JSON-ready data."""

    iterations: list[dict[str, Any]] = field(default_factory=list)
    memory: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    validation: list[dict[str, Any]] = field(default_factory=list)
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


class MegatronLogParser:
    """Feed lines one at a time (:meth:`feed`), one source after another (:meth:`begin_source`).

    ``max_records`` keeps only the most recent N iteration and memory records (the summary still covers every
    line); ``None`` keeps all.
    """

    def __init__(self, *, max_records: int | None = None) -> None:
        keep = max_records if max_records and max_records > 0 else None
        self.iterations: list[dict] | deque[dict] = deque(maxlen=keep) if keep else []
        self.memory: list[dict] | deque[dict] = deque(maxlen=keep) if keep else []
        self.failures: list[dict[str, Any]] = []
        self.failures_omitted = 0
        self.validation: list[dict[str, Any]] = []
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

    # -- failures -------------------------------------------------------------------------------------------
    def _rank_of(self, key: tuple[str, int] | None) -> tuple[int | None, int | None]:
        rank, local_rank = self._rank, self._local_rank
        if key is not None:
            if key[0] == "rank":
                rank = key[1]
            else:
                local_rank = key[1]
        return rank, local_rank

    def _add_failure(
        self,
        kind: str,
        message: str,
        key: tuple[str, int] | None,
        *,
        line: int | None = None,
        exception: str | None = None,
        traceback: list[str] | None = None,
        iteration: int | None = None,
        rank: int | None = None,
        local_rank: int | None = None,
        node: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        if len(self.failures) >= MAX_FAILURES:
            self.failures_omitted += 1
            return
        key_rank, key_local = self._rank_of(key)
        if rank is None:
            rank = key_rank
            if rank is None and (match := _RANK_IN_TEXT.search(message)):
                rank = int(match.group(1))
        if node is None and (match := _NODE_IN_TEXT.search(message)):
            node = match.group(1)
        self.failures.append(
            {
                "kind": kind,
                "message": message,
                "exception": exception,
                "file": self._source,
                "line": line if line is not None else self._lineno,
                "rank": rank,
                "local_rank": local_rank if local_rank is not None else key_local,
                "node": node if node is not None else self._node,
                "attempt": self._attempt,
                "iteration": iteration,
                "traceback": traceback,
                "details": details or {},
            }
        )

    def _continue(self, key: tuple[str, int] | None, line: str) -> bool:
        """Give the line to the block pending for this prefix; False when the block ended before it."""
        block = self._pending[key]
        if isinstance(block, _ChildFailed):
            consumed = block.feed(line)
            if consumed is None:
                self._finish(key)
                return True
            if not consumed:
                self._finish(key)
            return consumed
        if block.state == "frames":
            if line[:1] in (" ", "\t") and not (_ITER.search(line) if "iteration" in line else None):
                block.append(line)
                return True
            if _EXCEPTION_LINE.match(line):
                block.append(line)
                block.exception_line = line
                block.state = "after"
                if "ChildFailedError" in line:  # torchrun's own traceback: its summary block follows
                    del self._pending[key]
                    self._pending[key] = _ChildFailed(self._lineno)
                return True
            self._finish(key)
            return False
        # after the exception line: a chained traceback may follow
        stripped = line.strip()
        if not stripped:
            return True
        if stripped.startswith(("The above exception was the direct cause", "During handling of the above")):
            block.append(line)
            block.state = "chain"
            return True
        if block.state == "chain" and stripped.startswith("Traceback (most recent call last)"):
            block.append(line)
            block.state = "frames"
            return True
        self._finish(key)
        return False

    def _finish(self, key: tuple[str, int] | None) -> None:
        block = self._pending.pop(key, None)
        if block is None:
            return
        if isinstance(block, _ChildFailed):
            self._child_failed(block, key)
            return
        exc_line = block.exception_line
        exception = None
        if exc_line and (match := _EXCEPTION_LINE.match(exc_line)):
            exception = match.group(1)
        message = exc_line if exc_line else "(traceback without a final exception line)"
        kind = _classify(message) or "traceback"
        self._add_failure(kind, message, key, line=block.line, exception=exception, traceback=block.lines())

    def _child_failed(self, block: _ChildFailed, key: tuple[str, int] | None) -> None:
        roots = [_ChildFailed.entry(e) for e in block.entries["root"]]
        others = [_ChildFailed.entry(e) for e in block.entries["other"]]
        root = roots[0] if roots else None
        program = block.program or "the training program"
        if root is None:
            message = f"{program} FAILED (summary truncated: no root cause)"
        else:
            where = f"rank {root['rank']} (local_rank {root['local_rank']}) on {root['host']}"
            cause = root["error"] or (f"exitcode {root['exitcode']}" if root["exitcode"] is not None else "unknown")
            message = f"{program} FAILED: {where}: {cause}"
            if root["error"] and root["exitcode"] is not None and not root["signal"]:
                message += f" (exitcode {root['exitcode']})"
        self._add_failure(
            "child_failed",
            message,
            key,
            line=block.line,
            exception="torch.distributed.elastic.multiprocessing.errors.ChildFailedError",
            rank=root["rank"] if root else None,
            local_rank=root["local_rank"] if root else None,
            node=root["host"] if root else None,
            details={"program": block.program, "root_cause": root, "other_failures": others},
        )

    # -- result ---------------------------------------------------------------------------------------------
    def result(self) -> MegatronLog:
        self.end_source()
        return MegatronLog(
            iterations=list(self.iterations),
            memory=list(self.memory),
            failures=self.failures,
            validation=self.validation,
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


# --- summary ---------------------------------------------------------------------------------------------------
def _primary_failure(failures: list[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The first root cause. By kind: the elastic summary's root cause (torch's own verdict: the earliest
    error), else an out-of-memory error, else a traceback, else a worker's exit, else a NaN report; within a kind,
    errors that are usually consequences of another rank's failure (collective timeouts, aborted communicators,
    closed connections, signals) come last; then the earliest attempt, then the order of the input."""
    if not failures:
        return None

    def order(item: tuple[int, Mapping[str, Any]]) -> tuple[int, int, int, int]:
        index, failure = item
        secondary = int(bool(_SECONDARY.search(failure["message"] or "")))
        attempt = failure.get("attempt")
        return (_FAILURE_PRIORITY.get(failure["kind"], 9), secondary, -1 if attempt is None else attempt, index)

    _, chosen = min(enumerate(failures), key=order)
    out = {
        "kind": chosen["kind"],
        "message": chosen["message"],
        "exception": chosen["exception"],
        "node": chosen["node"],
        "file": chosen["file"],
        "line": chosen["line"],
        "rank": chosen["rank"],
        "local_rank": chosen["local_rank"],
        "attempt": chosen.get("attempt"),
        "iteration": chosen.get("iteration"),
        "exitcode": None,
        "signal": None,
        "error": None,
        "error_file": None,
        "error_source": None,
    }
    if chosen["kind"] == "child_failed":
        root = chosen["details"].get("root_cause") or {}
        for name in ("exitcode", "signal", "error", "error_file"):
            out[name] = root.get(name)
        # The root cause often says only "To enable traceback see ...": find the failing rank's own error.
        for other in failures:
            if other["kind"] not in ("oom", "traceback", "nan"):
                continue
            same_rank = out["rank"] is not None and other["rank"] == out["rank"]
            same_local = (
                other["rank"] is None
                and out["local_rank"] is not None
                and other["local_rank"] == out["local_rank"]
                and other["node"] in (None, out["node"])
            )
            if same_rank or same_local:
                if out["error"] is None:
                    out["error"] = other["message"]
                out["error_source"] = {"file": other["file"], "line": other["line"], "kind": other["kind"]}
                break
    elif chosen["kind"] == "worker_exit":
        out["exitcode"] = chosen["details"].get("exitcode")
    else:
        out["error"] = chosen["message"]
    return out


def _from_records(iterations: Iterable[Mapping[str, Any]], memory: Iterable[Mapping[str, Any]]) -> _Stats:
    stats = _Stats()
    for rec in iterations:
        stats.add_record(rec)
    for rec in memory:
        stats.add_memory(rec)
    return stats


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
        theoretical = log.theoretical_memory
        events = log.events
        attempts = log.attempts
        rejected = log.rejected
        omitted = log.counts.get("failures_omitted", 0)
    else:
        stats = _from_records(log, memory)
        failures_list = list(failures)
        validation, theoretical, events, attempts, rejected, omitted = [], [], [], [], {}, 0

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
        "theoretical_memory": theoretical[-1] if theoretical else None,
        "failure": failure,
        "failures_by_kind": by_kind,
        "failures_omitted": omitted,
        "attempts": list(attempts),
        "rejected_lines": {name: v["count"] for name, v in rejected.items()},
    }


# --- entry points ----------------------------------------------------------------------------------------------
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


def _open(path: str) -> IO[str]:
    if path.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")  # closed by the caller's with


def _describe(root: str, path: str) -> dict[str, Any]:
    """Node, attempt, local rank and stream of a file from its place in a torchrun log tree.

    torchrun writes ``<log_dir>/<run_id>_<random>/attempt_N/<local_rank>/{stdout,stderr}.log``; several nodes'
    log dirs may be copied under one root, whose first level then names the node. A single file given directly
    still gets its attempt and local rank from its path, but no node (nothing says which part would name it).
    """
    single = not os.path.isdir(root)
    parts = os.path.normpath(path if single else os.path.relpath(path, root)).split(os.sep)
    info: dict[str, Any] = {"path": path, "node": None, "attempt": None, "local_rank": None, "stream": None}
    name = parts[-1]
    base = name[:-3] if name.endswith(".gz") else name
    if base in ("stdout.log", "stderr.log"):
        info["stream"] = base[:-4]
    for i, part in enumerate(parts[:-1]):
        match = _ATTEMPT_DIR.match(part)
        if match is None:
            continue
        info["attempt"] = int(match.group(1))
        if i + 1 < len(parts) - 1 and parts[i + 1].isdigit():
            info["local_rank"] = int(parts[i + 1])
        node_parts = parts[: max(i - 1, 0)]  # what lies above <run_id>_<random>
        info["node"] = "/".join(node_parts) if node_parts and not single else None
        break
    else:
        if len(parts) > 1 and not single:
            info["node"] = parts[0]
    return info


def find_log_files(root: str) -> list[dict[str, Any]]:
    """Every log file under ``root`` (see :data:`LOG_SUFFIXES`), described and in a stable order.

    Order: files outside torchrun's tree first (launcher logs), then by attempt, node, local rank, stdout before
    stderr, path; so each attempt's iterations come after the previous attempt's.
    """
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            base = name[:-3] if name.endswith(".gz") else name
            if base.endswith(LOG_SUFFIXES):
                found.append(_describe(root, os.path.join(dirpath, name)))

    def order(info: dict[str, Any]) -> tuple:
        return (
            -1 if info["attempt"] is None else info["attempt"],
            info["node"] or "",
            -1 if info["local_rank"] is None else info["local_rank"],
            {"stdout": 0, "stderr": 1}.get(info["stream"] or "", 2),
            info["path"],
        )

    return sorted(found, key=order)


def _read(parser: MegatronLogParser, path: str) -> None:
    """Stream one file into the parser, line by line."""
    with _open(path) as handle:
        parser.feed_lines(handle)


def parse_path(
    path: str | os.PathLike[str],
    *,
    rank: int | None = None,
    seq_length: int | None = None,
    world_size: int | None = None,
    warmup_iterations: int = DEFAULT_WARMUP_ITERATIONS,
    peak_tflops: float | None = None,
    max_records: int | None = None,
) -> MegatronLog:
    """Parse a log file, or every log file of a directory (a torchrun ``--log_dir``, or several nodes' copies).

    Each file is streamed line by line. For torchrun's tree the attempt, local rank and node come from the path
    and every attempt is read (``attempts`` lists them; every failure names its attempt); the global rank of a
    rank's files is learned from its content (``[Rank R]`` memory lines, ``[rankN]:`` prefixes) and given to the
    failures of both its stdout and stderr. ``rank`` applies to a single file.
    """
    root = os.fspath(path)
    if not os.path.exists(root):
        raise LogPathError(f"{root}: no such file or directory")
    if os.path.isdir(root):
        files = find_log_files(root)
    elif os.path.isfile(root):
        files = [_describe(root, root)]
    else:
        raise LogPathError(f"{root}: not a regular file or directory")
    parser = MegatronLogParser(max_records=max_records)
    described: list[dict[str, Any]] = []
    groups: dict[tuple, list[tuple[int, dict[str, Any]]]] = {}
    for info in files:
        start = len(parser.failures)
        parser.begin_source(
            info["path"],
            rank=rank if len(files) == 1 else None,
            local_rank=info["local_rank"],
            node=info["node"],
            attempt=info["attempt"],
        )
        try:
            with _NoGC():
                _read(parser, info["path"])
        except OSError as exc:
            raise LogPathError(f"{info['path']}: cannot be read: {exc}") from exc
        result = parser.end_source()
        entry = {**info, **result}
        described.append(entry)
        if info["local_rank"] is not None:
            group = (info["node"], info["attempt"], info["local_rank"])
            groups.setdefault(group, []).append((start, entry))
    for members in groups.values():  # stdout's [Rank R] gives stderr's traceback its rank
        learned = next((e["rank"] for _, e in members if e["rank"] is not None), None)
        if learned is None:
            continue
        for start, entry in members:
            end = start + entry["failures"]
            for failure in parser.failures[start:end]:
                if failure["rank"] is None and failure["kind"] != "child_failed":
                    failure["rank"] = learned
            entry["rank"] = learned
    if len(files) == 1 and rank is None and described and described[0]["rank"] is not None:
        parser.fill_rank(0, described[0]["rank"])
    log = parser.result()
    log.files = described
    log.attempts = sorted({f["attempt"] for f in described if f["attempt"] is not None})
    log.summary = summarize(
        log, seq_length=seq_length, world_size=world_size, warmup_iterations=warmup_iterations, peak_tflops=peak_tflops
    )
    return log
