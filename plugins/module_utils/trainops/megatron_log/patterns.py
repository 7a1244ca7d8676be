"""The line patterns of Megatron-LM's logs and the parser's constants: record keys, log file suffixes, the
fast path's full-line pattern, the general path's patterns, the field tables and the conversion of field values."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from typing import Any

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
#: The prefix torch's own logging (glog style) puts on each line of a torchrun agent's message: level, date, time,
#: pid, file:line (``E1205 08:41:29.381000 2529 torch/distributed/elastic/agent/server/api.py:1008] ``).
_AGENT_PREFIX = re.compile(r"[EWIF]\d{4} \d\d:\d\d:\d\d\.\d+ +(\d+) \S+:\d+\] ")
#: What torchrun's agent logs when the exit barrier after its workers succeeded fails (another node's agent, which
#: serves the store, exited first): teardown, not a failure of the run.
_EXIT_BARRIER = "Error waiting on exit barrier"
_MEMORY = re.compile(r"\[Rank\s+(\d+)\]\s*\(after\s+(\d+)\s+iterations?\)\s*memory\s*\(MB\)\s*(.*)$")
_VALIDATION = re.compile(r"\b(validation|test)\s+loss\s+at\s+iteration\s+(\d+)\b[^|]*\|(.*)$")
_NUMBER = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
#: Megatron's checkpoint lines (rank 0): "successfully saved checkpoint from iteration      20 to DIR [ t 1/1, p 1/2 ]",
#: "successfully loaded checkpoint from DIR [ t 1/1, p 1/2 ] at iteration 10"; and the save's stall as the last
#: rank's timer prints it ("    save-checkpoint ....: (236.95, 237.04)": min and max over the ranks, ms).
_SAVED = re.compile(r"successfully saved checkpoint from iteration\s+(\d+) to (\S+)")
_LOADED = re.compile(r"successfully loaded checkpoint from (\S+) .*?at iteration (\d+)")
_SAVE_TIMER = re.compile(r"^\s*save-checkpoint \.+: \(" + _NUMBER + r", " + _NUMBER + r"\)")
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


# --- field values ----------------------------------------------------------------------------------------------
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
