"""Megatron log parser (trainops.megatron_log) and the megatron_log module.

The fixtures in tests/fixtures/megatron-logs/ are real logs; the inline samples follow the formats of
shared/reference/megatron.md ("Log lines") and of torch.distributed.elastic, one per variant.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import trainops.megatron_log as megatron_log
from hypothesis import given, settings
from hypothesis import strategies as st
from trainops.megatron_log import (
    ITERATION_KEYS,
    MEMORY_KEYS,
    LogPathError,
    MegatronLogParser,
    parse_lines,
    parse_path,
    summarize,
)

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "megatron-logs"
BIN = Path(sys.executable).parent


def fixture(name: str) -> Path:
    return FIXTURES / name


def only_iteration(line: str) -> dict:
    log = parse_lines([line])
    assert log.rejected == {}
    (rec,) = log.iterations
    assert tuple(rec) == ITERATION_KEYS
    return rec


def general_path(line: str) -> dict:
    """The record of the general (split) path, which the fast full-line pattern must reproduce exactly."""
    parser = MegatronLogParser()
    parser.begin_source("x")
    text = line.rstrip()
    parser._iteration(text, megatron_log.patterns._ITER.search(text))
    (rec,) = parser.iterations
    return rec


def iteration_line(i: int, elapsed: float = 1000.0, *, gbs: int = 8, loss: float = 5.0, ts: str = "") -> str:
    stamp = f" [{ts}]" if ts else ""
    return (
        f"{stamp} iteration {i:8d}/{100:8d} | consumed samples: {i * gbs:12d} | elapsed time per iteration (ms): "
        f"{elapsed:.1f} | learning rate: 1.000000E-04 | global batch size: {gbs:5d} | lm loss: {loss:.6E} | "
        "loss scale: 1.0 | grad norm: 1.000 | number of skipped iterations:   0 | number of nan iterations:   0 |"
    )


# --- the real logs -----------------------------------------------------------------------------------------------
def test_bridge_core_0_14_with_memory_line():
    log = parse_path(fixture("bridge-core0.14-memory.log"))
    assert log.iterations == [
        {
            "iteration": 10,
            "train_iters": 10,
            "consumed_samples": 5120,
            "elapsed_ms": 4647.8,
            "tflops_per_gpu": None,
            "learning_rate": 1.5e-06,
            "global_batch_size": 512,
            "losses": {"lm loss": 9.763827},
            "loss_scale": 1.0,
            "grad_norm": 33.055,
            "num_zeros": None,
            "skipped_iterations": 0,
            "nan_iterations": 0,
            "timestamp": "2025-10-06 03:27:07",
            "extra": {},
        }
    ]
    assert log.memory == [
        {
            "rank": 0,
            "after_iteration": 10,
            "allocated_mb": 9554.87939453125,
            "max_allocated_mb": 12003.60400390625,
            "reserved_mb": 12232.0,
            "max_reserved_mb": 12232.0,
            "extra": {},
            "file": str(fixture("bridge-core0.14-memory.log")),
        }
    ]
    assert tuple(log.memory[0]) == MEMORY_KEYS
    assert [(t["weight_and_optimizer_mb"], t["activation_mb"], t["total_mb"]) for t in log.theoretical_memory] == [
        (8839.72, None, None)
    ]
    assert [(e["label"], e["datetime"]) for e in log.events] == [("after training is done", "2025-10-06 03:27:07")]
    assert log.failures == [] and log.validation == [] and log.rejected == {}
    assert log.counts == {
        "lines": 4,
        "iterations_total": 1,
        "iterations_returned": 1,
        "memory_total": 1,
        "memory_returned": 1,
        "failures_omitted": 0,
    }
    (described,) = log.files
    assert (described["lines"], described["iterations"], described["memory"], described["rank"]) == (4, 1, 1, 0)
    s = log.summary
    assert (s["state"], s["training_done"], s["last_iteration"], s["train_iters"], s["progress"]) == (
        "finished",
        True,
        10,
        10,
        1.0,
    )
    # The only record is warm-up (the first of its segment): the statistics use it and say so.
    assert s["step_time_ms"] == {
        "count": 1,
        "median": 4647.8,
        "p90": 4647.8,
        "mean": 4647.8,
        "min": 4647.8,
        "max": 4647.8,
        "warmup_iterations": 10,
        "warmup_records_excluded": 0,
        "all_warmup": True,
    }
    assert s["losses"] == {
        "lm loss": {"first": 9.763827, "first_iteration": 10, "last": 9.763827, "last_iteration": 10}
    }
    assert s["max_reserved_mb_by_rank"] == {"0": 12232.0} and s["max_reserved_mb"] == 12232.0
    assert s["max_allocated_mb_by_rank"] == {"0": 12003.60400390625}
    assert s["theoretical_memory"]["weight_and_optimizer_mb"] == 8839.72
    assert s["failure"] is None and s["tflops_per_gpu"] is None and s["tokens_per_second_per_gpu"] is None


def test_gpt345m_fp16_skipped_steps_and_validation():
    log = parse_path(fixture("gpt345m-fp16-skips-validation.log"), seq_length=1024, world_size=8)
    its = log.iterations
    assert [r["iteration"] for r in its] == [10, 20, 30, 40, 50]
    first = its[0]  # every step of the interval skipped (fp16 loss-scale search): no loss, no grad norm
    assert first["losses"] == {} and first["grad_norm"] is None and first["num_zeros"] is None
    assert (first["learning_rate"], first["loss_scale"], first["skipped_iterations"]) == (0.0, 8388608.0, 10)
    assert (its[1]["losses"], its[1]["grad_norm"], its[1]["num_zeros"], its[1]["skipped_iterations"]) == (
        {"lm loss": 10.72453},
        3.874,
        71.0,
        6,
    )
    assert (its[2]["grad_norm"], its[2]["num_zeros"], its[2]["loss_scale"]) == (None, None, 4096.0)
    assert (its[3]["learning_rate"], its[4]["num_zeros"], its[4]["timestamp"]) == (
        9.998165e-05,
        1894.0,
        "2025-04-13 23:41:46",
    )
    assert log.validation == [
        {
            "iteration": 50,
            "split": "validation",
            "losses": {"lm loss": 8.88954},
            "ppl": {"lm loss": 7255.679},
            "extra": {},
            "file": str(fixture("gpt345m-fp16-skips-validation.log")),
        }
    ]
    assert log.parameters == {
        "transformer block": 0.08,
        "embedding layers": 0.04,
        "total": 0.12,
        "most loaded shard": 0.1236,
    }
    assert log.theoretical_memory[0]["weight_and_optimizer_mb"] == 2121.85
    assert [(m["rank"], m["after_iteration"], m["max_reserved_mb"]) for m in log.memory] == [(0, 10, 1576.0)]
    assert log.failures == []
    s = log.summary
    assert (s["state"], s["last_iteration"], s["train_iters"], s["consumed_samples"]) == ("running", 50, 1000, 800)
    assert (s["skipped_iterations"], s["nan_iterations"]) == (21, 0)
    assert s["losses"]["lm loss"] == {"first": 10.72453, "first_iteration": 20, "last": 9.236888, "last_iteration": 50}
    step = s["step_time_ms"]  # iteration 10 (the first record) is warm-up
    assert (step["count"], step["warmup_records_excluded"], step["all_warmup"]) == (4, 1, False)
    assert (step["median"], step["min"], step["max"]) == (pytest.approx(835.8), 820.7, 904.5)
    assert step["p90"] == pytest.approx(849.8 + 0.7 * (904.5 - 849.8))
    assert step["mean"] == pytest.approx((820.7 + 821.8 + 849.8 + 904.5) / 4)
    tokens = s["tokens_per_second_per_gpu"]  # 16 sequences x 1024 tokens per iteration over 8 GPUs
    per_gpu = [16 * 1024 / (ms / 1000) / 8 for ms in (820.7, 821.8, 849.8, 904.5)]
    assert tokens["median"] == pytest.approx((per_gpu[1] + per_gpu[2]) / 2)
    assert (tokens["max"], tokens["min"]) == (pytest.approx(per_gpu[0]), pytest.approx(per_gpu[3]))
    assert tokens["overall"] == pytest.approx(4 * 16 * 1024 / ((820.7 + 821.8 + 849.8 + 904.5) / 1000) / 8)
    assert s["last_validation"]["losses"] == {"lm loss": 8.88954}


def test_mixtral_throughput_and_old_learning_rate_format():
    log = parse_path(fixture("mixtral-16xh100-lr3e.log"), peak_tflops=989.0)
    assert [(r["iteration"], r["learning_rate"], r["tflops_per_gpu"]) for r in log.iterations] == [
        (10, 2.0e-06, 137.5),
        (11, 2.2e-06, 130.1),
        (12, 2.4e-06, 128.1),
    ]
    assert log.iterations[2]["losses"] == {"lm loss": 0.7243721}
    assert [r["train_iters"] for r in log.iterations] == [500000] * 3
    s = log.summary
    tflops = s["tflops_per_gpu"]
    assert (tflops["median"], tflops["min"], tflops["max"], tflops["count"]) == (130.1, 128.1, 137.5, 3)
    assert tflops["mfu"] == pytest.approx(130.1 / 989.0)
    assert s["step_time_ms"]["all_warmup"] is True  # a log excerpt starting at iteration 10, interval 1
    assert s["progress"] == pytest.approx(12 / 500000)
    assert s["memory_records"] == 0 and s["max_reserved_mb"] is None


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*.log")))
def test_fast_and_general_paths_agree_on_every_fixture_line(name):
    lines = [ln for ln in fixture(name).read_text().splitlines() if megatron_log.patterns._ITER.search(ln)]
    assert lines
    for line in lines:
        assert megatron_log.patterns._FAST_MATCH(line) is not None, line  # upstream lines take the fast path
        assert only_iteration(line) == general_path(line)


def test_the_pattern_without_possessive_quantifiers_matches_the_same():
    plain = megatron_log.patterns._FAST_ITERATION.pattern.replace("++", "+").replace("*+", "*")
    older = re.compile(plain, re.ASCII)  # what Python < 3.11 compiles
    lines = [ln for p in FIXTURES.glob("*.log") for ln in p.read_text().splitlines() if "iteration" in ln]
    for line in [*lines, OLD, FRACTIONAL, MOE, OPTIONAL_FIELDS, FORK_BEFORE]:
        fast, slow = megatron_log.patterns._FAST_MATCH(line), older.match(line)
        assert (fast and fast.groups()) == (slow and slow.groups()), line


# --- every variant of the iteration line -------------------------------------------------------------------
OLD = (
    " iteration      100/  500000 | consumed samples:        12800 | elapsed time per iteration (ms): 1234.5 |"
    " learning rate: 1.500E-04 | global batch size:   128 | lm loss: 6.543210E+00 | loss scale: 65536.0 |"
    " grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |"
)
FRACTIONAL = (
    " [2025-11-30 10:15:00.123456] iteration     2000/  100000 | consumed samples:      2048000 |"
    " elapsed time per iteration (ms): 4400.1 | throughput per GPU (TFLOP/s/GPU): 412.3 |"
    " learning rate: 1.499873E-05 | global batch size:  1024 | lm loss: 2.345678E+00 | loss scale: 1.0 |"
    " grad norm: 0.812 | num zeros: 0.0 | number of skipped iterations:   0 | number of nan iterations:   0 |"
)
MOE = (
    " [2025-11-30 10:15:00] iteration      300/    1000 | consumed samples:        76800 |"
    " elapsed time per iteration (ms): 8123.4 | throughput per GPU (TFLOP/s/GPU): 201.7 |"
    " learning rate: 3.000000E-04 | global batch size:   256 | lm loss: 3.210000E+00 |"
    " load_balancing_loss: 1.012345E+00 | z_loss: 4.500000E-03 | mtp_1 loss: 3.400000E+00 | loss scale: 1.0 |"
    " grad norm: 0.950 | number of skipped iterations:   0 | number of nan iterations:   0 |"
)
OPTIONAL_FIELDS = (
    " [2025-11-30 10:15:00] iteration      400/    1000 | consumed samples:       102400 |"
    " skipped samples:          128 | elapsed time per iteration (ms): 2000.0 | learning rate: 1.000000E-04 |"
    " decoupled learning rate: 1.000000E-05 | global batch size:   256 | lm loss: 3.000000E+00 |"
    " loss scale: 1.0 | grad norm: 0.500 | num zeros: 12.0 | params norm: 245.678 |"
    " number of skipped iterations:   0 | number of nan iterations:   0 |"
)
FORK_BEFORE = (
    " [2025-10-06 03:27:07] tokens_per_gpu_per_second: 2345.67 /s | mfu: 0.4123 | iteration       10/     100 |"
    " consumed samples:         5120 | elapsed time per iteration (ms): 4647.8 |"
    " throughput per GPU (TFLOP/s/GPU): 191.7 | learning rate: 1.500000E-06 | global batch size:   512 |"
    " lm loss: 9.763827E+00 | loss scale: 1.0 | grad norm: 33.055 | number of skipped iterations:   0 |"
    " number of nan iterations:   0 |"
)
FORK_ITERATION_TIME = (
    " iteration       20/     100 | consumed samples:        10240 | iteration time: 4.650 s samples/sec: 110.1 |"
    " learning rate: 3.000000E-06 | global batch size:   512 | lm loss: 9.123456E+00 | loss scale: 1.0 |"
    " number of skipped iterations:   0 | number of nan iterations:   0 |"
)


def test_old_version_without_timestamp_and_3e_learning_rate():
    assert only_iteration(OLD) == {
        "iteration": 100,
        "train_iters": 500000,
        "consumed_samples": 12800,
        "elapsed_ms": 1234.5,
        "tflops_per_gpu": None,
        "learning_rate": 1.5e-04,
        "global_batch_size": 128,
        "losses": {"lm loss": 6.54321},
        "loss_scale": 65536.0,
        "grad_norm": 1.234,
        "num_zeros": None,
        "skipped_iterations": 0,
        "nan_iterations": 0,
        "timestamp": None,
        "extra": {},
    }


def test_fractional_seconds_throughput_and_num_zeros():
    rec = only_iteration(FRACTIONAL)
    assert rec["timestamp"] == "2025-11-30 10:15:00.123456"
    assert (rec["tflops_per_gpu"], rec["learning_rate"], rec["num_zeros"], rec["consumed_samples"]) == (
        412.3,
        1.499873e-05,
        0.0,
        2048000,
    )
    assert rec == general_path(FRACTIONAL)


def test_every_loss_name_is_a_loss():
    rec = only_iteration(MOE)
    assert rec["losses"] == {
        "lm loss": 3.21,
        "load_balancing_loss": 1.012345,
        "z_loss": 4.5e-03,
        "mtp_1 loss": 3.4,
    }
    assert rec["loss_scale"] == 1.0 and rec["extra"] == {}
    assert rec == general_path(MOE)


def test_optional_and_unknown_fields_are_kept_in_extra():
    rec = only_iteration(OPTIONAL_FIELDS)
    assert rec["extra"] == {"skipped samples": 128.0, "decoupled learning rate": 1.0e-05, "params norm": 245.678}
    assert (rec["learning_rate"], rec["num_zeros"], rec["grad_norm"], rec["elapsed_ms"]) == (1e-04, 12.0, 0.5, 2000.0)
    assert megatron_log.patterns._FAST_MATCH(OPTIONAL_FIELDS) is None  # the general path took it


def test_fork_fields_before_iteration():
    rec = only_iteration(FORK_BEFORE)
    assert rec["extra"] == {"tokens_per_gpu_per_second": 2345.67, "mfu": 0.4123}
    assert (rec["iteration"], rec["timestamp"], rec["tflops_per_gpu"], rec["losses"]) == (
        10,
        "2025-10-06 03:27:07",
        191.7,
        {"lm loss": 9.763827},
    )


def test_fork_iteration_time_and_samples_per_second():
    rec = only_iteration(FORK_ITERATION_TIME)
    assert rec["elapsed_ms"] is None  # absent from the line
    assert rec["extra"] == {"iteration time (s)": 4.65, "samples/sec": 110.1}
    assert rec["grad_norm"] is None and rec["tflops_per_gpu"] is None
    # The summary takes the step time from the fork's field when elapsed time is absent.
    log = parse_lines([FORK_ITERATION_TIME], warmup_iterations=0)
    assert log.summary["step_time_ms"]["median"] == pytest.approx(4650.0)


def test_unparseable_values_and_fields_without_a_name():
    line = (
        " iteration        5/      10 | consumed samples:           40 | elapsed time per iteration (ms): 10.0 |"
        " learning rate: 1.000000E-04 | global batch size:     8 | lm loss: 4.000000E+00 | loss scale: 1.0 |"
        " grad norm: n/a | data loader: ready | something odd | number of skipped iterations:   0 |"
        " number of nan iterations:   0 |"
    )
    rec = only_iteration(line)
    assert rec["grad_norm"] is None
    assert rec["extra"] == {"grad norm": "n/a", "data loader": "ready", "unparsed": ["something odd"]}


def test_other_spacing_takes_the_general_path_with_the_same_meaning():
    squeezed = OLD.replace(" | ", "|").replace("  ", " ")
    assert megatron_log.patterns._FAST_MATCH(squeezed) is None
    assert only_iteration(squeezed) == only_iteration(OLD)


def test_torchrun_line_prefixes_are_stripped():
    line = " [2025-10-06 03:27:07]" + OLD
    plain = only_iteration(line)
    assert only_iteration("[rank15]:" + line) == plain == only_iteration("[default7]: " + line.lstrip())
    assert plain["timestamp"] == "2025-10-06 03:27:07"
    log = parse_lines(["[rank15]:" + line, "[rank15]: " + memory_line(15, 100, 5.0)], source="console.log")
    assert log.files[0]["rank"] == 15 and log.memory[0]["rank"] == 15


def test_truncated_last_line_of_a_live_log():
    rec = only_iteration(" [2025-10-06 03:27:07] iteration       11/     100 | consumed samples:         5632 | elaps")
    assert (rec["iteration"], rec["consumed_samples"], rec["elapsed_ms"], rec["losses"]) == (11, 5632, None, {})
    assert rec["extra"] == {"unparsed": ["elaps"]}


def test_nan_loss_and_nan_iterations_are_reported_once_per_file():
    lines = [
        iteration_line(1),
        iteration_line(2)
        .replace("lm loss: 5.000000E+00", "lm loss: NAN")
        .replace("grad norm: 1.000", "grad norm: nan"),
        iteration_line(3).replace("number of nan iterations:   0", "number of nan iterations:   2"),
    ]
    log = parse_lines(lines, source="rank15.log", rank=15)
    assert math.isnan(log.iterations[1]["losses"]["lm loss"]) and math.isnan(log.iterations[1]["grad_norm"])
    (failure,) = log.failures
    assert failure["kind"] == "nan" and failure["message"] == "iteration 2: lm loss, grad norm not finite"
    assert (failure["iteration"], failure["line"], failure["rank"], failure["file"]) == (2, 2, 15, "rank15.log")
    assert log.summary["nan_iterations"] == 2 and log.summary["nan_reports"] == 1
    assert log.summary["state"] == "running"  # NaN alone does not end a run
    only_count = parse_lines([lines[2]])
    assert only_count.failures[0]["message"] == "iteration 3: number of nan iterations: 2"


def test_megatron_deepspeed_lines_are_rejected():
    deepspeed = [
        " iteration        1/  317892 | consumed samples:           96 | consumed tokens:       393216 |"
        " elapsed time per iteration (ms): 25849.1 | learning rate: 3.000E-04 | global batch size:    96 |"
        " lm loss: 1.117136E+01 | loss scale: 1.0 | actual seqlen:  4096 | number of skipped iterations:   0 |"
        " number of nan iterations:   0 | samples per second: 3.714 | tokens per gpu per second(tgs): 633.832 |"
        " TFLOPs: 38.61 |",
        " iteration        2/   95367 | consumed samples:         4096 | consumed tokens:      8388608 |"
        " elapsed time per iteration (s): 769.99 | learning rate: 3.787E-06 | global batch size:  2048 |"
        " lm loss: 6.384045E+01 | loss scale: 4096.0 | grad norm: 15906.210 | num zeros: 0.0 |"
        " number of skipped iterations:   0 | number of nan iterations:   0 | samples per second: 2.660 |"
        " TFLOPs: 108.47 |",
        " [default7]: iteration    12695/  115311 | consumed samples:      9841584 | consumed tokens:  20155564032 |"
        " elapsed time per iteration (s): 105.22 | learning rate: 5.969E-05 | global batch size:  2048 |"
        " lm loss: 2.463556E+00 | grad norm: 0.174 | num zeros: 0.0 | number of skipped iterations:   0 |"
        " number of nan iterations:   0 | samples per second: 19.463 | TFLOPs: 149.02 |",
        " iteration     1665/    5000 | consumed samples:      3409920 | elapsed time per iteration (ms): 23205.2 |"
        " learning rate: 7.762E-05 | global batch size:  2048 | lm loss: 1.993132E+00 | loss scale: 16384.0 |"
        " grad norm: 2.486 | number of skipped iterations:   0 | number of nan iterations:   0 |"
        " samples per second: 88.256 | TFLOPs: 148.25 |",
    ]
    log = parse_lines([*deepspeed[:2], OLD, *deepspeed[2:]], source="ds.log")
    assert [r["iteration"] for r in log.iterations] == [100]
    assert log.rejected == {"megatron-deepspeed": {"count": 4, "first": {"file": "ds.log", "line": 1}}}
    assert log.summary["rejected_lines"] == {"megatron-deepspeed": 4}
    assert log.summary["iterations_parsed"] == 1


def test_deepspeed_engine_and_other_tools_lines_are_ignored():
    lines = [
        "[2024-04-04 09:09:53,313] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=0, lr=[0.0003],"
        " mom=[(0.9, 0.95)]",
        "steps: 10 loss: 10.1234 iter time (s): 1.234 samples/sec: 12.345",
        "Epoch 0: 100%|██████████| 50/50 [31:51<00:00, reduced_train_loss=6.130, global_step=50.0]",
        "step 12, loss: 3.27",
    ]
    log = parse_lines(lines)
    assert log.iterations == [] and log.failures == [] and log.memory == []


# --- memory, validation, theoretical memory, parameters, events -------------------------------------------------
def test_memory_line_two_decimals_with_total_device_memory():
    line = (
        "[Rank 7] (after 100 iterations) memory (MB) | allocated: 20480.50 | max allocated: 30720.25 |"
        " reserved: 32768.00 | max reserved: 34816.00 | total device memory used: 40000.00"
    )
    log = parse_lines([line, line.replace("after 100", "after 200").replace("34816.00", "36864.00")])
    assert log.memory[0] == {
        "rank": 7,
        "after_iteration": 100,
        "allocated_mb": 20480.5,
        "max_allocated_mb": 30720.25,
        "reserved_mb": 32768.0,
        "max_reserved_mb": 34816.0,
        "extra": {"total device memory used": 40000.0},
        "file": None,
    }
    assert log.summary["max_reserved_mb_by_rank"] == {"7": 36864.0}
    assert log.files == [] and log.summary["memory_records"] == 2


def test_memory_of_several_ranks_keeps_the_maximum_per_rank():
    lines = [
        f"[Rank {r}] (after {k} iterations) memory (MB) | allocated: 1.0 | max allocated: 2.0 | reserved: 3.0 |"
        f" max reserved: {mx}"
        for r, k, mx in [(0, 10, 100.0), (8, 10, 150.0), (0, 20, 120.0), (8, 20, 140.0)]
    ]
    s = parse_lines(lines).summary
    assert s["max_reserved_mb_by_rank"] == {"0": 120.0, "8": 150.0} and s["max_reserved_mb"] == 150.0


def test_validation_and_test_lines_of_every_version():
    lines = [
        " validation loss at iteration 100 | lm loss value: 2.500000E+00 | lm loss PPL: 1.218249E+01 | ",
        " validation loss at iteration 200 on validation set | lm loss value: 2.400000E+00 |"
        " lm loss PPL: 1.102318E+01 | load_balancing_loss value: 1.010000E+00 |"
        " load_balancing_loss PPL: 2.745601E+00 |",
        " test loss at iteration 300 on test set | lm loss value: 2.300000E+00 | lm loss PPL: 9.974182E+00 | ",
    ]
    log = parse_lines(lines)
    assert [(v["split"], v["iteration"], v["losses"], v["ppl"]) for v in log.validation] == [
        ("validation", 100, {"lm loss": 2.5}, {"lm loss": 12.18249}),
        (
            "validation",
            200,
            {"lm loss": 2.4, "load_balancing_loss": 1.01},
            {"lm loss": 11.02318, "load_balancing_loss": 2.745601},
        ),
        ("test", 300, {"lm loss": 2.3}, {"lm loss": 9.974182}),
    ]
    assert log.iterations == []
    assert log.summary["last_validation"]["iteration"] == 300


def test_theoretical_memory_parameters_and_events():
    lines = [
        "Theoretical memory footprints: weight and optimizer=8839.72 MB, activation=12345.67 MB, total=21185.39 MB",
        " > number of parameters on (tensor, pipeline) model parallel rank (0, 1): 4016017408",
        "Number of parameters in transformer block in billions:  6.98",
        "Number of parameters in embedding layers in billions: 1.05",
        "Total number of parameters in billions: 8.03",
        "Number of parameters in most loaded shard in billions: 4.0160",
        "[before the start of training step] datetime: 2025-11-30 10:15:00 ",
        "[after training is done] datetime: 2025-11-30 12:00:00 ",
    ]
    log = parse_lines(lines, source="rank0.log")
    assert log.theoretical_memory == [
        {"weight_and_optimizer_mb": 8839.72, "activation_mb": 12345.67, "total_mb": 21185.39, "file": "rank0.log"}
    ]
    assert log.parameters == {
        "transformer block": 6.98,
        "embedding layers": 1.05,
        "total": 8.03,
        "most loaded shard": 4.016,
    }
    assert [(e["label"], e["datetime"]) for e in log.events] == [
        ("before the start of training step", "2025-11-30 10:15:00"),
        ("after training is done", "2025-11-30 12:00:00"),
    ]
    assert log.summary["training_done"] is True and log.summary["state"] == "finished"


# --- failures ------------------------------------------------------------------------------------------------------
CUDA_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79.11"
    " GiB of which 1.05 GiB is free. Including non-PyTorch memory, this process has 78.05 GiB memory in use."
)
OOM_TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/workspace/Megatron-LM/pretrain_gpt.py", line 285, in <module>',
    "    pretrain(",
    '  File "/workspace/Megatron-LM/megatron/training/training.py", line 386, in pretrain',
    "    iteration, num_floating_point_operations_so_far = train(",
    '  File "/usr/local/lib/python3.10/dist-packages/torch/nn/modules/module.py", line 1553, in _call_impl',
    "    return forward_call(*args, **kwargs)",
    "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    CUDA_OOM,
]


def test_python_traceback_with_its_frames_and_exception():
    lines = [
        "some output",
        "Traceback (most recent call last):",
        '  File "/workspace/Megatron-LM/pretrain_gpt.py", line 10, in <module>',
        "    from megatron.core import mpu",
        "ModuleNotFoundError: No module named 'megatron.core'",
        " [2025-10-06 03:27:07] next output",
    ]
    log = parse_lines(lines, source="stderr.log", rank=3)
    (failure,) = log.failures
    assert failure == {
        "kind": "traceback",
        "message": "ModuleNotFoundError: No module named 'megatron.core'",
        "exception": "ModuleNotFoundError",
        "file": "stderr.log",
        "line": 2,
        "rank": 3,
        "local_rank": None,
        "node": None,
        "attempt": None,
        "iteration": None,
        "traceback": lines[1:5],
        "details": {},
    }
    s = log.summary
    assert s["state"] == "failed"
    assert (s["failure"]["kind"], s["failure"]["error"], s["failure"]["rank"], s["failure"]["file"]) == (
        "traceback",
        "ModuleNotFoundError: No module named 'megatron.core'",
        3,
        "stderr.log",
    )


def test_chained_traceback_is_one_failure():
    lines = [
        "Traceback (most recent call last):",
        '  File "a.py", line 1, in f',
        "    open(path)",
        "FileNotFoundError: [Errno 2] No such file or directory: '/data/llama3_text_document.idx'",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "a.py", line 3, in g',
        "    raise RuntimeError('dataset missing')",
        "RuntimeError: dataset missing",
    ]
    (failure,) = parse_lines(lines).failures
    assert (failure["exception"], failure["message"]) == ("RuntimeError", "RuntimeError: dataset missing")
    assert failure["traceback"] == [line for line in lines if line]  # blank separators dropped


def test_two_tracebacks_one_after_the_other_are_two_failures():
    tb = ["Traceback (most recent call last):", '  File "a.py", line 1, in f', "    g()", "ValueError: bad"]
    failures = parse_lines([*tb, "", *tb]).failures
    assert [(f["line"], f["message"]) for f in failures] == [(1, "ValueError: bad"), (6, "ValueError: bad")]


def test_traceback_cut_at_the_end_of_the_file():
    (failure,) = parse_lines(["Traceback (most recent call last):", '  File "a.py", line 1, in f']).failures
    assert failure["message"] == "(traceback without a final exception line)" and failure["exception"] is None


def test_out_of_memory_traceback_is_an_oom():
    (failure,) = parse_lines(OOM_TRACEBACK, source="stderr.log", rank=3).failures
    assert (failure["kind"], failure["exception"], failure["message"]) == ("oom", "torch.OutOfMemoryError", CUDA_OOM)
    assert failure["traceback"] == OOM_TRACEBACK


def test_musa_out_of_memory_line_without_traceback():
    line = (
        "[2025-11-30 10:15:00] RuntimeError: MUSA out of memory. Tried to allocate 1.50 GiB (GPU 0; 79.98 GiB total"
        " capacity; 76.12 GiB already allocated; 1.02 GiB free; 77.50 GiB reserved in total by PyTorch)"
    )
    (failure,) = parse_lines(["loading checkpoint", line], rank=5).failures
    assert (failure["kind"], failure["rank"], failure["line"], failure["message"]) == ("oom", 5, 2, line)


def test_nan_messages_with_rank_and_node():
    lines = [
        "Traceback (most recent call last):",
        '  File "/workspace/Megatron-LM/megatron/core/distributed/param_and_grad_buffer.py", line 143, in check',
        "    assert not norm_is_nan, (",
        "AssertionError: Rank 9: found NaN in local grad norm in backward pass before data-parallel communication"
        " collective. Device: 1, node: node-1",
        "NaN detected in loss at iteration 1234, skipping",
        "Unexpected result nan (message='found NaN in local forward loss calculation')",
        "the nanoseconds counter says 1234 ns",
    ]
    failures = parse_lines(lines).failures
    assert [(f["kind"], f["rank"], f["node"], f["line"]) for f in failures] == [
        ("nan", 9, "node-1", 1),
        ("nan", None, None, 5),
        ("nan", None, None, 6),
    ]
    assert failures[0]["exception"] == "AssertionError"


def test_interleaved_tracebacks_of_prefixed_ranks_stay_apart():
    lines = [
        "[rank3]: Traceback (most recent call last):",
        "[rank5]: Traceback (most recent call last):",
        '[rank3]:   File "/workspace/Megatron-LM/pretrain_gpt.py", line 285, in <module>',
        '[rank5]:   File "/workspace/Megatron-LM/pretrain_gpt.py", line 285, in <module>',
        "[rank3]:     pretrain(",
        f"[rank3]: {CUDA_OOM}",
        "[rank5]:     pretrain(",
        "[rank5]: torch.distributed.DistBackendError: [Rank 5] Watchdog caught collective operation timeout:"
        " WorkNCCL(SeqNum=2043, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.",
        "[default1]: iteration and more unrelated text",
    ]
    log = parse_lines(lines, source="launcher.log")
    by_rank = {f["rank"]: f for f in log.failures}
    assert set(by_rank) == {3, 5}
    assert by_rank[3]["kind"] == "oom" and by_rank[3]["line"] == 1 and len(by_rank[3]["traceback"]) == 4
    assert by_rank[5]["kind"] == "traceback" and by_rank[5]["exception"] == "torch.distributed.DistBackendError"
    assert by_rank[3]["traceback"][-1] == CUDA_OOM
    assert log.summary["failure"]["rank"] == 3  # the OOM, not the watchdog timeout it caused


def test_secondary_errors_rank_after_the_cause():
    timeout = [
        "Traceback (most recent call last):",
        '  File "a.py", line 1, in f',
        "    x",
        "RuntimeError: Socket Timeout",
    ]
    illegal = [
        "Traceback (most recent call last):",
        '  File "b.py", line 2, in g',
        "    y",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
    ]
    s = parse_lines([*timeout, *illegal]).summary
    assert s["failure"]["error"] == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert s["failures_by_kind"] == {"traceback": 2}


CHILD_FAILED = [
    "Traceback (most recent call last):",
    '  File "/usr/local/bin/torchrun", line 8, in <module>',
    "    sys.exit(main())",
    '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/launcher/api.py", line 263, in launch_agent',
    "    raise ChildFailedError(",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "============================================================",
    "pretrain_gpt.py FAILED",
    "------------------------------------------------------------",
    "Failures:",
    "[1]:",
    "  time      : 2025-11-30_10:20:05",
    "  host      : node-1",
    "  rank      : 9 (local_rank: 1)",
    "  exitcode  : -15 (pid: 23457)",
    "  error_file: <N/A>",
    "  traceback : Signal 15 (SIGTERM) received by PID 23457",
    "------------------------------------------------------------",
    "Root Cause (first observed failure):",
    "[0]:",
    "  time      : 2025-11-30_10:20:03",
    "  host      : node-1",
    "  rank      : 8 (local_rank: 0)",
    "  exitcode  : 1 (pid: 23456)",
    "  error_file: <N/A>",
    "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
    "============================================================",
]


def test_elastic_child_failed_summary():
    log = parse_lines(["launching", *CHILD_FAILED, "after"], source="launch-node-0.log")
    (failure,) = log.failures  # torchrun's own traceback is not a second failure
    assert (failure["kind"], failure["rank"], failure["local_rank"], failure["node"], failure["line"]) == (
        "child_failed",
        8,
        0,
        "node-1",
        7,
    )
    assert failure["message"] == "pretrain_gpt.py FAILED: rank 8 (local_rank 0) on node-1: exitcode 1"
    details = failure["details"]
    assert details["program"] == "pretrain_gpt.py"
    assert details["root_cause"] == {
        "time": "2025-11-30_10:20:03",
        "host": "node-1",
        "rank": 8,
        "local_rank": 0,
        "exitcode": 1,
        "pid": 23456,
        "error_file": None,
        "traceback": "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
        "error": None,
        "signal": None,
    }
    (other,) = details["other_failures"]
    assert (other["rank"], other["local_rank"], other["exitcode"], other["signal"]) == (9, 1, -15, "SIGTERM")
    s = log.summary
    assert s["state"] == "failed"
    assert {k: s["failure"][k] for k in ("kind", "rank", "local_rank", "node", "exitcode", "file")} == {
        "kind": "child_failed",
        "rank": 8,
        "local_rank": 0,
        "node": "node-1",
        "exitcode": 1,
        "file": "launch-node-0.log",
    }


def test_child_failed_with_a_recorded_traceback_and_with_a_signal():
    recorded = [
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "============================================================",
        "pretrain_gpt.py FAILED",
        "------------------------------------------------------------",
        "Failures:",
        "  <NO_OTHER_FAILURES>",
        "------------------------------------------------------------",
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2025-11-30_10:20:03",
        "  host      : worker-2",
        "  rank      : 15 (local_rank: 7)",
        "  exitcode  : 1 (pid: 777)",
        "  error_file: /tmp/torchelastic_x/none_ab/attempt_0/7/error.json",
        "  traceback : Traceback (most recent call last):",
        '    File "/usr/lib/python3/dist-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py",'
        " line 355, in wrapper",
        "      return f(*args, **kwargs)",
        "  RuntimeError: MCCL error in: ProcessGroupMCCL.cpp:1335, unhandled system error",
        "  ",
        "============================================================",
    ]
    (failure,) = parse_lines(recorded).failures
    root = failure["details"]["root_cause"]
    assert (root["rank"], root["local_rank"], root["host"]) == (15, 7, "worker-2")
    assert root["error_file"] == "/tmp/torchelastic_x/none_ab/attempt_0/7/error.json"
    assert root["error"] == "RuntimeError: MCCL error in: ProcessGroupMCCL.cpp:1335, unhandled system error"
    assert root["traceback"].splitlines()[0] == "Traceback (most recent call last):"
    assert failure["message"] == (
        "pretrain_gpt.py FAILED: rank 15 (local_rank 7) on worker-2: RuntimeError: MCCL error in:"
        " ProcessGroupMCCL.cpp:1335, unhandled system error (exitcode 1)"
    )
    killed = [
        "E0813 08:21:22.980000 1245483 torch/distributed/elastic/multiprocessing/api.py:984] failed (exitcode: -9)"
        " local_rank: 6 (pid: 1246013) of binary: /usr/bin/python3",
        "",
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2026-08-13_08:21:19",
        "  host      : zkrh-58",
        "  rank      : 6 (local_rank: 6)",
        "  exitcode  : -9 (pid: 1246013)",
        "  error_file: <N/A>",
        "  traceback : Signal 9 (SIGKILL) received by PID 1246013",
    ]
    log = parse_lines(killed)
    assert [f["kind"] for f in log.failures] == ["worker_exit", "child_failed"]
    assert log.failures[0]["details"] == {"exitcode": -9, "pid": 1246013, "binary": "/usr/bin/python3"}
    assert log.failures[0]["local_rank"] == 6
    failure = log.summary["failure"]
    assert (failure["kind"], failure["signal"], failure["exitcode"], failure["rank"]) == (
        "child_failed",
        "SIGKILL",
        -9,
        6,
    )
    assert failure["error"] == "Signal 9 (SIGKILL) received by PID 1246013"


def test_torchrun_worker_failed_lines_of_both_logging_formats():
    lines = [
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 3 (pid: 4321) of"
        " binary: /usr/bin/python3",
        "E1130 10:15:02.123000 140 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -6)"
        " local_rank: 0 (pid: 4318) of binary: /usr/bin/python3",
    ]
    failures = parse_lines(lines).failures
    assert [(f["kind"], f["local_rank"], f["details"]["exitcode"], f["rank"]) for f in failures] == [
        ("worker_exit", 3, 1, None),
        ("worker_exit", 0, -6, None),
    ]
    assert parse_lines(lines).summary["failure"]["exitcode"] == 1


def test_failure_records_are_capped(monkeypatch):
    monkeypatch.setattr(megatron_log.failures, "MAX_FAILURES", 3)
    log = parse_lines([f"RuntimeError: CUDA out of memory ({i})" for i in range(5)])
    assert len(log.failures) == 3 and log.counts["failures_omitted"] == 2 and log.summary["failures_omitted"] == 2


# --- garbage -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "lines",
    [
        [],
        [""],
        ["\x00\x01\x02 binary \xff\xfe", "    ", "|||:::|||"],
        ["iteration", "iteration 10 |", "iteration 10/ | x", "iteration / 100 |", "[Rank x] memory (MB) | ..."],
        ["validation loss at iteration | nonsense", "Theoretical memory footprints: weight and optimizer=?? MB"],
        ["Number of parameters in billions: many", "[after training is done] datetime:"],
        ["Theoretical memory footprints: weight and optimizer=. MB", "Number of parameters in x in billions: e"],
        ["Root Cause (first observed failure):", "garbage"],
        ["=" * 60, "pretrain_gpt.py FAILED"],
    ],
)
def test_garbage_gives_no_records_and_no_crash(lines):
    log = parse_lines(lines)
    assert log.iterations == [] and log.memory == [] and log.validation == []
    assert log.summary["state"] in ("empty", "failed")
    assert log.summary["step_time_ms"] is None and log.summary["last_iteration"] is None


FRAGMENTS = [
    OLD,
    FRACTIONAL,
    MOE,
    OPTIONAL_FIELDS,
    FORK_BEFORE,
    FORK_ITERATION_TIME,
    *OOM_TRACEBACK,
    *CHILD_FAILED,
    "[Rank 7] (after 100 iterations) memory (MB) | allocated: 1.0 | max allocated: 2.0 | reserved: 3.0",
    " validation loss at iteration 100 | lm loss value: 2.500000E+00 | lm loss PPL: 1.218249E+01 | ",
    "Theoretical memory footprints: weight and optimizer=8839.72 MB, activation=12345.67 MB, total=21185.39 MB",
    "Number of parameters in transformer block in billions:  6.98",
    "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 3 (pid: 4321) of binary: x",
]


CUT = st.integers(0, 400)
PIECE = st.tuples(st.sampled_from(FRAGMENTS), CUT, CUT, st.sampled_from(["", "[rank3]:"]))
NOISE = st.tuples(st.text(max_size=80), st.just(0), st.just(400), st.just(""))


@settings(max_examples=300, deadline=None)
@given(st.lists(PIECE | NOISE, max_size=25))
def test_cut_and_spliced_real_lines_never_break_the_parser(pieces):
    """Lines cut anywhere (a live log, a truncated copy) and spliced: records keep their shape, nothing raises."""
    lines = [prefix + text[start:stop] for text, start, stop, prefix in pieces]
    log = parse_lines(lines, seq_length=4096, world_size=16)
    assert all(tuple(rec) == ITERATION_KEYS for rec in log.iterations)
    assert all(tuple(rec) == MEMORY_KEYS for rec in log.memory)
    assert log.summary["iterations_parsed"] == len(log.iterations)
    json.dumps(log.to_dict(), default=str)


def test_a_root_cause_without_entries_is_reported_as_truncated():
    (failure,) = parse_lines(["Root Cause (first observed failure):", "garbage"]).failures
    assert failure["kind"] == "child_failed" and "truncated" in failure["message"]


def test_non_utf8_bytes_in_a_file(tmp_path):
    path = tmp_path / "stdout.log"
    path.write_bytes(b"\xff\xfe\x00 junk\n" + OLD.encode() + b"\n\xc3\x28 more junk\n")
    log = parse_path(path)
    assert [r["iteration"] for r in log.iterations] == [100] and log.counts["lines"] == 3


# --- the summary ---------------------------------------------------------------------------------------------------
def test_warm_up_is_per_segment_and_a_restart_starts_a_segment():
    first_run = [iteration_line(i, 5000.0 if i <= 2 else 1000.0 + i) for i in range(1, 21)]
    rerun = [iteration_line(i, 9000.0 if i == 1 else 2000.0) for i in range(1, 16)]  # restarted from scratch
    log = parse_lines(first_run + rerun, seq_length=512, world_size=4)
    step = log.summary["step_time_ms"]
    # kept: iterations 11..20 of the first run (1011..1020 ms) and 11..15 of the rerun (2000 ms)
    assert (step["count"], step["warmup_records_excluded"]) == (15, 20)
    kept = sorted([1000.0 + i for i in range(11, 21)] + [2000.0] * 5)
    assert (step["min"], step["max"], step["median"]) == (1011.0, 2000.0, kept[7])
    assert step["p90"] == pytest.approx(kept[12] + 0.6 * (kept[13] - kept[12]))
    assert log.summary["last_iteration"] == 15
    assert summarize(log, warmup_iterations=0)["step_time_ms"]["count"] == 35
    assert summarize(log, warmup_iterations=15)["step_time_ms"]["count"] == 5
    tokens = log.summary["tokens_per_second_per_gpu"]  # 8 x 512 tokens per iteration over 4 GPUs
    assert tokens["median"] == pytest.approx(8 * 512 / (kept[7] / 1000) / 4)
    assert tokens["min"] == pytest.approx(8 * 512 / 2.0 / 4) and tokens["count"] == 15
    assert tokens["overall"] == pytest.approx(15 * 8 * 512 / (sum(kept) / 1000) / 4)


def test_tokens_with_a_changing_batch_size():
    lines = [iteration_line(i, 1000.0, gbs=8 if i <= 15 else 16) for i in range(1, 21)]
    tokens = parse_lines(lines, seq_length=100, world_size=2).summary["tokens_per_second_per_gpu"]
    values = sorted([8 * 100 / 1.0 / 2] * 5 + [16 * 100 / 1.0 / 2] * 5)
    assert (tokens["count"], tokens["min"], tokens["max"]) == (10, 400.0, 800.0)
    assert tokens["median"] == pytest.approx(600.0) and tokens["mean"] == pytest.approx(sum(values) / 10)
    assert tokens["overall"] == pytest.approx((5 * 800 + 5 * 1600) / 10.0 / 2)


def test_summary_of_a_long_run_with_few_distinct_step_times():
    # More than a thousand records: order statistics come from counted distinct values; same answer as sorting.
    elapsed = [float(f"{1000.0 + (i * 7919) % 50 / 10:.1f}") for i in range(1, 3001)]
    log = parse_lines([iteration_line(i, e) for i, e in enumerate(elapsed, 1)], seq_length=1000, world_size=8)
    kept = sorted(elapsed[10:])
    n = len(kept)
    step = log.summary["step_time_ms"]
    assert (step["count"], step["min"], step["max"]) == (n, kept[0], kept[-1])
    assert step["median"] == pytest.approx((kept[n // 2 - 1] + kept[n // 2]) / 2)
    pos = 0.9 * (n - 1)
    assert step["p90"] == pytest.approx(kept[int(pos)] + (pos - int(pos)) * (kept[int(pos) + 1] - kept[int(pos)]))
    assert step["mean"] == pytest.approx(sum(kept) / n)
    tokens = sorted(8 * 1000 / (e / 1000) / 8 for e in kept)
    got = log.summary["tokens_per_second_per_gpu"]
    assert got["median"] == pytest.approx((tokens[n // 2 - 1] + tokens[n // 2]) / 2)
    assert got["p90"] == pytest.approx(tokens[int(pos)] + (pos - int(pos)) * (tokens[int(pos) + 1] - tokens[int(pos)]))
    assert got["mean"] == pytest.approx(sum(tokens) / n) and got["max"] == pytest.approx(tokens[-1])


def test_summarize_from_records_matches_the_parse():
    log = parse_path(fixture("gpt345m-fp16-skips-validation.log"), seq_length=1024, world_size=8)
    again = summarize(log.iterations, memory=log.memory, seq_length=1024, world_size=8)
    for key in ("last_iteration", "step_time_ms", "tokens_per_second_per_gpu", "losses", "skipped_iterations"):
        assert again[key] == log.summary[key], key
    assert again["max_reserved_mb_by_rank"] == {"0": 1576.0}
    assert summarize([])["state"] == "empty"


def test_capped_records_keep_the_most_recent_and_the_summary_covers_all():
    log = parse_path(fixture("gpt345m-fp16-skips-validation.log"), max_records=2)
    assert [r["iteration"] for r in log.iterations] == [40, 50]
    assert (log.counts["iterations_total"], log.counts["iterations_returned"]) == (5, 2)
    assert log.summary["losses"]["lm loss"]["first_iteration"] == 20 and log.summary["skipped_iterations"] == 21


# --- files, directories, streaming -----------------------------------------------------------------------------------
def write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))
    return path


def memory_line(rank: int, k: int, reserved: float) -> str:
    return (
        f"[Rank {rank}] (after {k} iterations) memory (MB) | allocated: 100.0 | max allocated: 200.0 |"
        f" reserved: {reserved} | max reserved: {reserved}"
    )


def test_torchrun_log_dir_of_two_nodes_and_two_attempts(tmp_path):
    root = tmp_path / "run"
    n0, n1 = root / "node-0" / "none_ab12cd", root / "node-1" / "none_ef34gh"
    for local in (0, 1):
        write(n0 / "attempt_0" / str(local) / "stdout.log", [memory_line(local, 1, 1000.0 + local)])
        write(n0 / "attempt_0" / str(local) / "stderr.log", [])
    write(n1 / "attempt_0" / "0" / "stdout.log", [memory_line(2, 1, 3000.0)])
    oom = write(n1 / "attempt_0" / "0" / "stderr.log", ["warming up", *OOM_TRACEBACK])
    write(n1 / "attempt_0" / "1" / "stdout.log", [iteration_line(i, 1000.0) for i in range(1, 4)])
    write(n1 / "attempt_1" / "1" / "stdout.log", [iteration_line(i, 900.0) for i in range(1, 6)])
    child = [line.replace("rank      : 8 (local_rank: 0)", "rank      : 2 (local_rank: 0)") for line in CHILD_FAILED]
    launcher = write(root / "node-0" / "launch.log", ["starting", *child])
    gz = root / "node-1" / "launch.log.gz"
    with gzip.open(gz, "wt") as out:
        out.write("torchrun started\n")

    log = parse_path(root)
    by_path = {f["path"]: f for f in log.files}
    assert set(by_path) == {
        str(launcher),
        str(gz),
        *(str(p) for p in root.rglob("*.log") if "attempt_" in str(p)),
    }
    assert by_path[str(launcher)]["node"] == "node-0" and by_path[str(launcher)]["attempt"] is None
    described = by_path[str(oom)]
    assert {k: described[k] for k in ("node", "attempt", "local_rank", "stream", "rank", "failures")} == {
        "node": "node-1",
        "attempt": 0,
        "local_rank": 0,
        "stream": "stderr",
        "rank": 2,
        "failures": 1,
    }
    assert log.attempts == [0, 1] and log.summary["attempts"] == [0, 1]
    # launcher logs first, then attempt 0's files, then attempt 1's
    assert [r["elapsed_ms"] for r in log.iterations] == [1000.0] * 3 + [900.0] * 5
    assert log.summary["last_iteration"] == 5
    assert log.summary["max_reserved_mb_by_rank"] == {"0": 1000.0, "1": 1001.0, "2": 3000.0}
    oom_failure = next(f for f in log.failures if f["kind"] == "oom")
    assert {k: oom_failure[k] for k in ("rank", "local_rank", "node", "attempt", "file", "line")} == {
        "rank": 2,  # learned from the same rank's stdout ([Rank 2] memory line)
        "local_rank": 0,
        "node": "node-1",
        "attempt": 0,
        "file": str(oom),
        "line": 2,
    }
    failure = log.summary["failure"]
    assert (failure["kind"], failure["rank"], failure["local_rank"], failure["node"]) == (
        "child_failed",
        2,
        0,
        "node-1",
    )
    assert failure["file"] == str(launcher) and failure["exitcode"] == 1
    assert failure["error"] == CUDA_OOM  # the root cause only says "To enable traceback": the rank's own error
    assert failure["error_source"] == {"file": str(oom), "line": 2, "kind": "oom"}
    # each attempt is its own segment: the first record of each is warm-up
    step = log.summary["step_time_ms"]
    assert step["all_warmup"] is True and step["count"] == 8  # every record is within 10 iterations of its start
    assert summarize(log, warmup_iterations=1)["step_time_ms"]["count"] == 6


def test_single_node_log_dir_without_node_level(tmp_path):
    path = write(tmp_path / "none_x1" / "attempt_0" / "3" / "stderr.log", OOM_TRACEBACK)
    log = parse_path(tmp_path)
    (failure,) = log.failures
    assert (failure["node"], failure["attempt"], failure["local_rank"], failure["rank"]) == (None, 0, 3, None)
    assert log.files[0]["path"] == str(path) and log.files[0]["stream"] == "stderr"


def test_a_combined_log_of_many_ranks_gives_no_file_rank(tmp_path):
    path = write(tmp_path / "console.log", [memory_line(0, 10, 5.0), memory_line(8, 10, 6.0), *OOM_TRACEBACK])
    log = parse_path(path)
    assert log.files[0]["rank"] is None and log.failures[0]["rank"] is None
    alone = parse_path(write(tmp_path / "one.log", [memory_line(8, 10, 6.0), *OOM_TRACEBACK]))
    assert alone.files[0]["rank"] == 8 and alone.failures[0]["rank"] == 8


def test_a_single_torchrun_file_keeps_attempt_and_local_rank_from_its_path(tmp_path):
    path = write(tmp_path / "none_ab" / "attempt_2" / "5" / "stderr.log", OOM_TRACEBACK)
    log = parse_path(path)
    assert {k: log.files[0][k] for k in ("node", "attempt", "local_rank", "stream")} == {
        "node": None,
        "attempt": 2,
        "local_rank": 5,
        "stream": "stderr",
    }
    assert (log.failures[0]["attempt"], log.failures[0]["local_rank"]) == (2, 5)


def test_other_files_of_a_run_dir_are_not_read(tmp_path):
    write(tmp_path / "plan" / "plan.json", ['{"iteration": 1}'])
    write(tmp_path / "plan" / "launch-node-0.sh", ["echo iteration"])
    write(tmp_path / "metrics.jsonl", ['{"iteration": 1}'])
    log = parse_path(tmp_path)
    assert log.files == [] and log.summary["state"] == "empty"


def test_a_gzipped_log_and_a_single_file_rank(tmp_path):
    path = tmp_path / "rank15.log.gz"
    with gzip.open(path, "wt") as out:
        out.write(OLD + "\n" + "RuntimeError: CUDA error: out of memory\n")
    log = parse_path(path, rank=15)
    assert [r["iteration"] for r in log.iterations] == [100]
    assert log.failures[0]["kind"] == "oom" and log.failures[0]["rank"] == 15


def test_missing_path_is_a_clear_error(tmp_path):
    with pytest.raises(LogPathError, match="no such file or directory"):
        parse_path(tmp_path / "nope.log")


def test_files_are_streamed_line_by_line(tmp_path, monkeypatch):
    path = write(tmp_path / "stdout.log", [iteration_line(i) for i in range(1, 6)])

    class LinesOnly:
        """A file that can only be iterated: read()/readlines() of the whole file are refused."""

        def __init__(self, name: str) -> None:
            self.handle = open(name, encoding="utf-8")

        def __iter__(self):
            return iter(self.handle)

        def read(self, *args):
            raise AssertionError("the whole file was read")

        readlines = read

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

    monkeypatch.setattr(megatron_log.paths, "_open", LinesOnly)
    assert [r["iteration"] for r in parse_path(path).iterations] == [1, 2, 3, 4, 5]

    consumed = []

    def lines():
        for i in range(1, 4):
            consumed.append(i)
            yield iteration_line(i)

    assert parse_lines(lines()).summary["last_iteration"] == 3 and consumed == [1, 2, 3]


def test_feed_and_feed_lines_agree():
    lines = [OLD, FRACTIONAL, *OOM_TRACEBACK, MOE, *CHILD_FAILED, FORK_BEFORE, memory_line(1, 2, 3.0)]
    one = MegatronLogParser()
    one.begin_source("f")
    for line in lines:
        one.feed(line)
    many = MegatronLogParser()
    many.begin_source("f")
    many.feed_lines(lines)
    a, b = one.result(), many.result()
    assert a.iterations == b.iterations and a.failures == b.failures and a.memory == b.memory
    assert [f["line"] for f in a.failures] == [3, 18]


# --- the module and the benchmark -----------------------------------------------------------------------------------
def run_module(args: str, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    env.update(ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    return subprocess.run(
        [str(BIN / "ansible"), "localhost", "-m", "megatron_log", "-a", args, *extra],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def module_result(proc: subprocess.CompletedProcess) -> dict:
    data = json.loads(proc.stdout)
    return data["plays"][0]["tasks"][0]["hosts"]["localhost"]


@pytest.mark.playbook
def test_module_on_a_fixture_in_check_mode():
    proc = run_module(
        "path=tests/fixtures/megatron-logs/gpt345m-fp16-skips-validation.log seq_length=1024 world_size=8"
        " max_iterations_returned=3",
        "--check",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = module_result(proc)
    assert result["changed"] is False
    assert [r["iteration"] for r in result["iterations"]] == [30, 40, 50]
    assert result["counts"]["iterations_total"] == 5 and result["summary"]["skipped_iterations"] == 21
    assert result["memory"][0]["max_reserved_mb"] == 1576.0 and result["failures"] == []
    assert result["summary"]["step_time_ms"]["median"] == pytest.approx(835.8)
    assert "attempts" not in result  # a task result's "attempts" belongs to until/retries


@pytest.mark.playbook
def test_module_missing_path_fails_clearly():
    proc = run_module("path=/nonexistent/megatron.log")
    assert proc.returncode != 0
    result = module_result(proc)
    assert result["failed"] is True
    assert result["msg"] == "cannot parse Megatron logs: /nonexistent/megatron.log: no such file or directory"


@pytest.mark.playbook
def test_module_returns_nan_as_a_string(tmp_path):
    path = write(tmp_path / "nan.log", [iteration_line(1).replace("lm loss: 5.000000E+00", "lm loss: nan")])
    proc = run_module(f"path={path}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = module_result(proc)
    assert result["iterations"][0]["losses"] == {"lm loss": "nan"}
    assert result["failures"][0]["kind"] == "nan"


@pytest.mark.playbook
def test_ansible_doc_shows_the_module():
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(
        [str(BIN / "ansible-doc"), "megatron_log"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "max_iterations_returned" in proc.stdout and "RETURN VALUES" in proc.stdout and "EXAMPLES" in proc.stdout


def test_benchmark_script_runs_on_a_small_log():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "megatron_log_parse.py"), "--lines", "60000"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "iteration lines/s" in proc.stdout and "60,000 iteration lines" in proc.stdout  # no timing asserted


def test_a_real_testbed_log_resumed_from_a_checkpoint():
    """Megatron core_v0.14.0's pretrain_gpt.py on the CPU testbed (tp1 pp2, fp32): the second attempt of an elastic
    run, as torchrun wrote it (rank 0: its argument dump and checkpoint lines; rank 1, the last: iterations and
    timers). It loaded iteration 10, saved 20 and 30, and the timers give each save's stall."""
    log = parse_path(FIXTURES / "testbed-cpu-tp1pp2-resumed")
    s = log.summary
    assert (s["state"], s["last_iteration"], s["train_iters"], s["iterations_parsed"]) == ("finished", 30, 30, 20)
    assert s["losses"]["lm loss"] == {"first": 8.329462, "first_iteration": 11, "last": 8.310482, "last_iteration": 30}
    directory = "/data/mtt-train-ops/checkpoints/megatron-elastic"
    assert s["checkpoints"]["loaded"] == [{"iteration": 10, "dir": directory}]
    # each save with the stall Megatron's save-checkpoint timer logged right after it (the slowest rank)
    assert s["checkpoints"]["saved"] == [
        {"iteration": 20, "dir": directory, "stall_ms": 2387.4},
        {"iteration": 30, "dir": directory, "stall_ms": 237.04},
    ]
    assert (s["checkpoints"]["save_ms"]["count"], s["checkpoints"]["save_ms"]["max"]) == (2, 2387.4)
    assert s["failure"] is None and log.failures == []


#: A finished run's node2/launch.out on the testbed (2026-12-05): the master's torchrun left first, so this node's
#: agent could not wait on the exit barrier, and logged it as an error with a traceback, under torch's own prefix.
EXIT_BARRIER = [
    "E1205 08:41:29.381000 2529 torch/distributed/elastic/agent/server/api.py:1008] Error waiting on exit barrier. "
    "Elapsed: 0.09031248092651367 seconds",
    "E1205 08:41:29.381000 2529 torch/distributed/elastic/agent/server/api.py:1008] Traceback (most recent call last):",
    'E1205 08:41:29.381000 2529 torch/distributed/elastic/agent/server/api.py:1008]   File "/usr/local/lib/python3.11/'
    'dist-packages/torch/distributed/elastic/agent/server/api.py", line 994, in _exit_barrier',
    "E1205 08:41:29.381000 2529 torch/distributed/elastic/agent/server/api.py:1008]     store_util.barrier(",
    'E1205 08:41:29.381000 2529 torch/distributed/elastic/agent/server/api.py:1008]   File "/usr/local/lib/python3.11/'
    'dist-packages/torch/distributed/elastic/utils/store.py", line 201, in barrier',
    "E1205 08:41:29.381000 2529 torch/distributed/elastic/agent/server/api.py:1008]     store.wait([last_member_key])",
    "E1205 08:41:29.381000 2529 torch/distributed/elastic/agent/server/api.py:1008] "
    "torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was likely closed. Did the remote "
    "server shutdown or crash?",
]


def test_torchruns_exit_barrier_at_teardown_is_not_the_runs_failure():
    log = parse_lines(EXIT_BARRIER, source="node2/launch.out")
    assert log.failures == [] and log.summary["failure"] is None
    # a traceback of the same agent that is not the exit barrier's, and one after it, are failures as before
    other = [line.replace("Error waiting on exit barrier", "Error in the rendezvous") for line in EXIT_BARRIER]
    assert parse_lines(other).summary["failure"] is not None
    after = [*EXIT_BARRIER, "Traceback (most recent call last):", '  File "x.py", line 1, in <module>', "ValueError: x"]
    assert parse_lines(after).summary["failure"]["message"] == "ValueError: x"
