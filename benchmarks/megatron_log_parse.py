"""Time the Megatron log parser on 1,000,000 realistic iteration lines (issue #4: under 10 s).

    python benchmarks/megatron_log_parse.py [--lines 1000000] [--repeat 1] [--keep FILE]

Writes a log as the project's Llama3-8B runs print it (Megatron core 0.14 with ``--log-throughput``: timestamp,
TFLOP/s, ``.6E`` learning rate, ``lm loss``, grad norm), with one line in a hundred in a newer MoE variant
(fractional seconds, ``load_balancing_loss``, num zeros), a memory line every 1,000 iterations, a validation block
every 10,000 and, every 50,000 lines, one line of an old version (no timestamp, ``.3E``, a skipped step without
grad norm) and one fork line (``tokens_per_gpu_per_second ... | mfu`` before ``iteration``), so that the
general path is exercised too. Then times :func:`parse_path` on it (records kept, summary computed with seq_length and
world_size) and prints lines/s; the parse is checked against what was written. Record the figures in
benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

import yaml  # noqa: E402
from trainops.flops import flops_per_token  # noqa: E402
from trainops.layout import padded_vocab_size  # noqa: E402
from trainops.megatron_log import parse_path  # noqa: E402
from trainops.model import model_from_dict  # noqa: E402

SEQ_LENGTH = 4096
WORLD_SIZE = 16
GBS = 64
#: Llama3-8B at seq 4096, forward and backward, causal attention (Megatron's count): about 48.3e9.
_LLAMA3_8B = model_from_dict(yaml.safe_load((ROOT / "models" / "llama3-8b.yml").read_text()))
FLOPS_PER_TOKEN = flops_per_token(_LLAMA3_8B, SEQ_LENGTH, padded_vocab_size(_LLAMA3_8B.vocab_size, 1))


def write_log(path: str, iterations: int, seed: int = 7) -> int:
    """Write ``iterations`` iteration lines (plus memory and validation lines); returns the lines written."""
    rng = random.Random(seed)
    written = 0
    loss = 11.0
    with open(path, "w", encoding="utf-8") as out:
        for i in range(1, iterations + 1):
            loss = max(1.5, loss * 0.99999 + rng.uniform(-0.002, 0.002))
            elapsed = 4600.0 + rng.uniform(0.0, 120.0) + (30000.0 if i <= 2 else 0.0)
            tflops = GBS * SEQ_LENGTH * FLOPS_PER_TOKEN / (elapsed / 1000.0) / WORLD_SIZE / 1e12
            lr = 1.5e-4 * min(1.0, i / 2000)
            stamp = f"2026-11-30 {10 + (i // 3600) % 14:02d}:{(i // 60) % 60:02d}:{i % 60:02d}"
            if i % 50_000 == 25_000:  # an old version: no timestamp, .3E, a skipped step (no grad norm)
                line = (
                    f" iteration {i:8d}/{iterations:8d} | consumed samples: {i * GBS:12d} | elapsed time per "
                    f"iteration (ms): {elapsed:.1f} | learning rate: {lr:.3E} | global batch size: {GBS:5d} | "
                    f"lm loss: {loss:.6E} | loss scale: 1.0 | number of skipped iterations:   1 | "
                    "number of nan iterations:   0 |"
                )
            elif i % 50_000 == 0:  # a fork's fields before "iteration"
                tokens = GBS * SEQ_LENGTH / (elapsed / 1000.0) / WORLD_SIZE
                line = (
                    f" [{stamp}] tokens_per_gpu_per_second: {tokens:.2f} /s | mfu: {tflops / 465:.4f} | iteration "
                    f"{i:8d}/{iterations:8d} | consumed samples: {i * GBS:12d} | elapsed time per iteration (ms): "
                    f"{elapsed:.1f} | throughput per GPU (TFLOP/s/GPU): {tflops:.1f} | learning rate: {lr:.6E} | "
                    f"global batch size: {GBS:5d} | lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: "
                    f"{rng.uniform(0.2, 2.0):.3f} | number of skipped iterations:   0 | number of nan iterations:   0 |"
                )
            elif i % 100 == 50:  # a newer version with an MoE model: fractional seconds, two losses, num zeros
                line = (
                    f" [{stamp}.{i % 1000:03d}] iteration {i:8d}/{iterations:8d} | consumed samples: {i * GBS:12d} | "
                    f"elapsed time per iteration (ms): {elapsed:.1f} | throughput per GPU (TFLOP/s/GPU): "
                    f"{tflops:.1f} | learning rate: {lr:.6E} | global batch size: {GBS:5d} | lm loss: {loss:.6E} | "
                    f"load_balancing_loss: {1.0 + rng.uniform(0, 0.05):.6E} | loss scale: 1.0 | grad norm: "
                    f"{rng.uniform(0.2, 2.0):.3f} | num zeros: 0.0 | number of skipped iterations:   0 | "
                    "number of nan iterations:   0 |"
                )
            else:  # Megatron core 0.14 with --log-throughput, as the vendor's Llama3-8B runs print it
                line = (
                    f" [{stamp}] iteration {i:8d}/{iterations:8d} | consumed samples: {i * GBS:12d} | "
                    f"elapsed time per iteration (ms): {elapsed:.1f} | throughput per GPU (TFLOP/s/GPU): "
                    f"{tflops:.1f} | learning rate: {lr:.6E} | global batch size: {GBS:5d} | lm loss: {loss:.6E} | "
                    f"loss scale: 1.0 | grad norm: {rng.uniform(0.2, 2.0):.3f} | number of skipped iterations:   0 | "
                    "number of nan iterations:   0 |"
                )
            out.write(line + "\n")
            written += 1
            if i % 1000 == 0:
                out.write(
                    f"[Rank {WORLD_SIZE - 1}] (after {i} iterations) memory (MB) | allocated: "
                    f"{52000 + rng.uniform(0, 100):.2f} | max allocated: 61234.50 | reserved: 65536.00 | "
                    "max reserved: 65536.00\n"
                )
                written += 1
            if i % 10_000 == 0:
                out.write("-" * 100 + "\n")
                out.write(
                    f" validation loss at iteration {i} on validation set | lm loss value: {loss:.6E} | "
                    f"lm loss PPL: {2.718281828**loss:.6E} | \n"
                )
                out.write("-" * 100 + "\n")
                written += 3
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=1_000_000, help="iteration lines to generate")
    parser.add_argument("--repeat", type=int, default=1, help="parse this many times and report the best")
    parser.add_argument("--keep", help="write the generated log here and keep it")
    args = parser.parse_args()

    directory = tempfile.mkdtemp(prefix="megatron-log-bench-")
    path = args.keep or os.path.join(directory, "stdout.log")
    start = time.perf_counter()
    total_lines = write_log(path, args.lines)
    print(f"generated {args.lines:,} iteration lines ({total_lines:,} lines, "
          f"{os.path.getsize(path) / 1e6:.0f} MB) in {time.perf_counter() - start:.1f} s")  # fmt: skip
    try:
        best = best_cpu = float("inf")
        for _ in range(max(1, args.repeat)):
            start, start_cpu = time.perf_counter(), time.process_time()
            log = parse_path(path, seq_length=SEQ_LENGTH, world_size=WORLD_SIZE)
            best = min(best, time.perf_counter() - start)
            best_cpu = min(best_cpu, time.process_time() - start_cpu)
            if len(log.iterations) != args.lines or log.summary["last_iteration"] != args.lines:
                raise SystemExit(f"parse mismatch: {len(log.iterations)} records, expected {args.lines}")
            summary = log.summary
            del log
    finally:
        if not args.keep:
            os.remove(path)
            os.rmdir(directory)
    rate, all_rate = args.lines / best, total_lines / best
    print(f"parse_path: {best:.2f} s wall ({best_cpu:.2f} s CPU) for {args.lines:,} iteration lines "
          f"({total_lines:,} lines): {rate:,.0f} iteration lines/s, {all_rate:,.0f} lines/s")  # fmt: skip
    step = summary["step_time_ms"]
    tokens = summary["tokens_per_second_per_gpu"]
    print(f"summary: median step {step['median']:.1f} ms, p90 {step['p90']:.1f} ms, "
          f"tokens/s/GPU {tokens['median']:.0f}, memory records {summary['memory_records']}")  # fmt: skip


if __name__ == "__main__":
    main()
