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
  ``^^^^ Bottom/Top N Ranks with ... Etpt(TF):`` lines), parsed by :mod:`trainops.straggler` into ``stragglers``;
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

Modules: :mod:`.patterns` (line patterns, record keys, field tables and values), :mod:`.parser` (the streaming
parser and :func:`parse_lines`), :mod:`.failures` (tracebacks, elastic summaries, failure records, the first root
cause), :mod:`.statistics` (order statistics and the summary's accumulator), :mod:`.result` (:class:`MegatronLog`
and :func:`summarize`), :mod:`.paths` (log files, :func:`parse_path`). The names other modules and the tests import
are re-exported here.
"""

from __future__ import annotations

from .failures import _primary_failure as _primary_failure
from .parser import MegatronLogParser, parse_lines
from .paths import LogPathError, find_log_files, parse_path
from .patterns import _SECONDARY as _SECONDARY
from .patterns import DEFAULT_WARMUP_ITERATIONS, ITERATION_KEYS, LOG_SUFFIXES, MEMORY_KEYS
from .result import MegatronLog, summarize
from .statistics import _stats as _stats

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
