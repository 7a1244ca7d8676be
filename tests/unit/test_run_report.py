"""run_report: the progress line, the failure of a run across its nodes, and the report files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from presets import load_preset, make_plan
from trainops.megatron_log import parse_lines
from trainops.run_report import (
    build_report,
    card_peak_tflops,
    failure_text,
    is_consequence,
    plot,
    progress_line,
    ranks_of,
    root_cause,
    summary_table,
    write_report,
)

RUN_ID = "20261130-060020"
PROGRAM = f"/data/mtt-train-ops/runs/kill-a-rank/{RUN_ID}/smoke_train.py"
CPU_HOSTS = [
    {"name": "node1", "ansible_host": "172.30.0.11", "slots": 2, "accelerator": "cpu"},
    {"name": "node2", "ansible_host": "172.30.0.12", "slots": 2, "accelerator": "cpu"},
]
MUSA_HOSTS = [dict(host, accelerator="musa") for host in CPU_HOSTS]
LAYOUT = {"train_iters": 10, "seq_length": 256, "gbs": 8, "precision": "bf16"}
PNG = b"\x89PNG\r\n\x1a\n"

#: Step times of iterations 1..10: three warm-up iterations (left out), then 100..112 ms except the skipped one.
STEP_MS = [900.0, 500.0, 300.0, 100.0, 102.0, 104.0, 106.0, 108.0, 110.0, 112.0]
#: Iteration 7's gradient was not finite: no loss, no grad norm, skipped and NaN counted (as smoke_train prints).
NONFINITE_ITERATION = 7


def make(hosts, **kwargs):
    kwargs.setdefault("layout", LAYOUT)
    return make_plan(model=load_preset("tiny"), hosts=hosts, run_id=RUN_ID, exp_name="kill-a-rank", **kwargs)


@pytest.fixture(scope="module")
def cpu_plan():
    return make(CPU_HOSTS, smoke=True)  # the smoke job: the cpu backend's default job


@pytest.fixture(scope="module")
def musa_plan():
    return make(MUSA_HOSTS)


def iteration_line(i, total=10, ms=None, loss=None, tflops=0.012345):
    """One iteration line exactly as trainops/node/smoke_train.py (Megatron's format) prints it."""
    ms = STEP_MS[i - 1] if ms is None else ms
    finite = i != NONFINITE_ITERATION
    loss = (8.3 - 0.1 * i) if loss is None else loss
    loss_text = f" lm loss: {loss:.6E} |" if finite else ""
    grad_text = " grad norm: 0.353 |" if finite else ""
    return (
        f"[2026-11-30 06:00:{20 + i:02d}.457] iteration {i:8d}/{total:8d} | consumed samples: {8 * i:12d} |"
        f" elapsed time per iteration (ms): {ms:.1f} |"
        f" throughput per GPU (TFLOP/s/GPU): {tflops:.6f} | learning rate: {3e-3:.6E} |"
        f" global batch size: {8:5d} |{loss_text} loss scale: 1.0 |{grad_text}"
        f" number of skipped iterations: {int(not finite):3d} |"
        f" number of nan iterations: {int(not finite):3d} |\n"
    )


def memory_line(rank, after, reserved):
    return (
        f"[Rank {rank}] (after {after} iterations) memory (MB) | allocated: {reserved / 2} | max allocated: "
        f"{reserved * 0.75} | reserved: {reserved} | max reserved: {reserved}\n"
    )


def child_failed(host, time, root, other):
    """torchrun's ChildFailedError summary; ``root``/``other``: (rank, local_rank, exitcode, pid, traceback)."""

    def entry(index, rank, local_rank, exitcode, pid, traceback):
        signal = {-9: "  (SIGKILL)", -15: "  (SIGTERM)"}.get(exitcode, " ")
        return (
            f"[{index}]:\n  time      : {time}\n  host      : {host}\n  rank      : {rank} (local_rank: {local_rank})\n"
            f"  exitcode  : {exitcode} (pid: {pid}){signal}\n  error_file: <N/A>\n  traceback : {traceback}\n"
        )

    return (
        f"E1130 06:00:43.507000 2245 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: "
        f"{root[2]}) local_rank: {root[1]} (pid: {root[3]}) of binary: /usr/bin/python3\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/local/bin/torchrun", line 8, in <module>\n'
        "    sys.exit(main())\n"
        '  File "/usr/local/lib/python3.11/dist-packages/torch/distributed/launcher/api.py", line 383, '
        "in launch_agent\n"
        "    raise ChildFailedError(\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "============================================================\n"
        f"{PROGRAM} FAILED\n"
        "------------------------------------------------------------\n"
        "Failures:\n" + entry(1, *other) + "------------------------------------------------------------\n"
        "Root Cause (first observed failure):\n"
        + entry(0, *root)
        + "============================================================\n"
    )


#: node2's torchrun after rank 3 was SIGKILLed (it then SIGTERMed rank 2).
NODE2_LAUNCH = child_failed(
    "node2",
    "2026-11-30_06:00:43",
    (3, 1, -9, 2267, "Signal 9 (SIGKILL) received by PID 2267"),
    (2, 0, -15, 2266, "Signal 15 (SIGTERM) received by PID 2266"),
)
#: node1's torchrun: its rank 0 lost its connection to node2 (same second: only the cause tells them apart).
NODE1_LAUNCH = child_failed(
    "node1",
    "2026-11-30_06:00:43",
    (0, 0, 1, 3433, "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"),
    (1, 1, -15, 3434, "Signal 15 (SIGTERM) received by PID 3434"),
)
GLOO_RESET = (
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [172.30.0.12]:56512: "
    "Connection reset by peer"
)
NODE1_RANK0_STDERR = (
    "[rank0]: Traceback (most recent call last):\n"
    f'[rank0]:   File "{PROGRAM}", line 248, in <module>\n'
    "[rank0]:     main()\n"
    f'[rank0]:   File "{PROGRAM}", line 201, in main\n'
    "[rank0]:     dist.all_reduce(loss_sum)\n"
    '[rank0]:   File "/usr/local/lib/python3.11/dist-packages/torch/distributed/distributed_c10d.py", line 2501, '
    "in all_reduce\n"
    "[rank0]:     work.wait()\n"
    f"[rank0]: {GLOO_RESET}\n"
)
OOM_STDERR = (
    "Traceback (most recent call last):\n"
    f'  File "{PROGRAM}", line 196, in main\n'
    "    (loss / accumulation).backward()\n"
    "torch.OutOfMemoryError: MUSA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.98 GiB\n"
)


def put(root: Path, node: str, local_rank: int, stream: str, text: str) -> None:
    path = root / node / f"{RUN_ID}_abc" / "attempt_0" / str(local_rank) / f"{stream}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def collect(root: Path, node: str, launch: str = "", ranks: dict | None = None) -> None:
    """A node's collected logs: torchrun's tree (every local rank's stdout and stderr) and launch.out."""
    for local_rank in range(2):
        for stream in ("stdout", "stderr"):
            put(root, node, local_rank, stream, (ranks or {}).get((local_rank, stream), ""))
    (root / node / "launch.out").write_text(launch)


def iterations_text(last=10, total=10):
    return "[smoke] world 4: all-reduce checked in every group (tp=1 pp=1 dp=4)\n" + "".join(
        iteration_line(i, total) for i in range(1, last + 1)
    )


def kill_a_rank(root: Path) -> None:
    """The kill-a-rank run: rank 3 (node2 local 1) SIGKILLed after iteration 6; node1 only lost its peer."""
    collect(root, "node1", NODE1_LAUNCH, {(0, "stderr"): NODE1_RANK0_STDERR})
    collect(root, "node2", NODE2_LAUNCH, {(1, "stdout"): iterations_text(last=6, total=10)})


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# --- small functions -----------------------------------------------------------------------------------------
def test_ranks_of_follows_rank_order(cpu_plan):
    assert ranks_of(cpu_plan, "node1") == [0, 1]
    assert ranks_of(cpu_plan, "node2") == [2, 3]
    assert ranks_of(cpu_plan, "node9") == []


def test_card_peak_is_none_on_a_cpu(cpu_plan, musa_plan):
    assert cpu_plan["peak_tflops_per_card"] is None  # the testbed's nominal card has no peak
    assert card_peak_tflops(cpu_plan) is None
    assert musa_plan["card"] == "S5000"
    assert card_peak_tflops(musa_plan) is None  # no public dense peak for the S5000
    assert musa_plan["peak_source"] == "unknown peak for S5000 bf16 (set -e accelerator_peak_tflops=...)"
    assert card_peak_tflops(make(MUSA_HOSTS, accelerator_peak_tflops=465)) == 465.0


def test_an_unknown_peak_is_said_not_guessed(tmp_path, musa_plan):
    finished_run(tmp_path)
    summary = write_report(str(tmp_path), musa_plan)
    assert summary["model_tflops_per_card"]["mfu"] is None
    assert "MFU          - (unknown peak for S5000 bf16 (set -e accelerator_peak_tflops=...))" in summary["table"]


def test_the_report_counts_the_runs_tensorboard_files_oldest_first_and_says_how_to_view_them(tmp_path, musa_plan):
    finished_run(tmp_path)
    assert write_report(str(tmp_path), musa_plan)["tensorboard"] == []
    board = tmp_path / "tensorboard"
    board.mkdir()
    for name in ("events.out.tfevents.1764990000.node2.81.0", "events.out.tfevents.1764980000.node2.44.0", "README"):
        (board / name).write_bytes(b"")
    summary = write_report(str(tmp_path), musa_plan)
    assert summary["tensorboard"] == ["events.out.tfevents.1764980000.node2.44.0",
                                      "events.out.tfevents.1764990000.node2.81.0"]  # fmt: skip
    assert f"tensorboard  2 event file(s), every attempt's: tensorboard --logdir {board}" in summary["table"]


def test_printed_tflops_are_labelled_by_their_convention(tmp_path):
    full = make(MUSA_HOSTS, printed_flops_convention="full", smoke=False, accelerator_peak_tflops=465)
    finished_run(tmp_path)
    summary = write_report(str(tmp_path), full)
    assert summary["tflops_per_gpu"]["convention"] == "full attention, as this backend's Megatron counts"
    line = next(x for x in summary["table"] if x.startswith("TFLOP/s"))
    assert "as the job prints it (full attention, as this backend's Megatron counts)" in line
    assert "from the plan's model FLOPs (model FLOPs of the plan's preset, causal attention)" in line


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        ({"error": GLOO_RESET}, True),
        ({"error": "Signal 15 (SIGTERM) received by PID 2266"}, True),
        ({"message": "rank 0 exitcode 1"}, False),
        ({"message": "x FAILED: rank 2 (local_rank 0) on node2: exitcode -15 (pid: 1)"}, True),
        ({"error": "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5)"}, True),
        ({"error": "Signal 9 (SIGKILL) received by PID 2267"}, False),
        ({"error": "torch.OutOfMemoryError: MUSA out of memory. Tried to allocate 2.00 GiB"}, False),
        ({}, False),
        (None, False),
    ],
)
def test_is_consequence(failure, expected):
    assert is_consequence(failure) is expected


def test_failure_text():
    assert failure_text(None) == ""
    assert (
        failure_text(
            {"node": "node2", "rank": 3, "local_rank": 1, "error": "boom", "signal": "SIGKILL", "file": "a", "line": 9}
        )
        == "node2 rank 3 (local rank 1): boom [SIGKILL] (a:9)"
    )
    assert failure_text({"node": None, "rank": None, "message": "gone"}) == "unknown node: gone"
    assert failure_text({"node": "node1", "signal": "SIGKILL", "error": "Signal 9 (SIGKILL)"}) == (
        "node1: Signal 9 (SIGKILL)"
    )


def test_root_cause_prefers_the_rank_whose_error_is_not_a_consequence():
    node1 = parse_lines(NODE1_LAUNCH, source="node1/launch.out").failures
    node2 = parse_lines(NODE2_LAUNCH, source="node2/launch.out").failures
    rank0 = parse_lines(NODE1_RANK0_STDERR, source="node1/x/attempt_0/0/stderr.log").failures
    for node in (node1, node2):
        for failure in node:
            failure["node"] = failure["file"].split("/")[0]
    for failures in ([*node1, *rank0, *node2], [*node2, *node1, *rank0]):
        chosen = root_cause(failures)
        assert (chosen["node"], chosen["rank"], chosen["signal"]) == ("node2", 3, "SIGKILL")
    # Without node2's summary, node1's rank 0 is all there is, and its own error says it only lost a peer.
    alone = root_cause([*node1, *rank0])
    assert (alone["node"], alone["rank"]) == ("node1", 0)
    assert "Connection reset by peer" in alone["error"]
    assert is_consequence(alone)
    assert root_cause([]) is None


# --- progress line -------------------------------------------------------------------------------------------
def test_progress_line_cpu(cpu_plan):
    record = parse_lines(iteration_line(5, total=20, ms=110.0, loss=7.3)).iterations[0]
    assert progress_line(record, cpu_plan) == (
        "iteration 5/20 (25%) | lm loss 7.3 | 110 ms/it | 4,655 tokens/s/card | 0.0123 TFLOP/s/card | "
        "mem n/a (cpu) | ETA 0:02"
    )


def test_progress_line_card_memory_and_hours(musa_plan):
    line = (
        "[2024-03-30 20:02:40] iteration       10/  500000 | consumed samples:         1280 | elapsed time per "
        "iteration (ms): 9496.4 | throughput per GPU (TFLOP/s/GPU): 137.5 | learning rate: 2.000E-06 | global "
        "batch size:   128 | lm loss: 2.092005E-01 | loss scale: 1.0 | grad norm: 51.010 | num zeros: 0.0 | "
        "number of skipped iterations:   0 | number of nan iterations:   0 |"
    )
    log = parse_lines([line, memory_line(3, 10, 12288.0)])
    record, memory = log.iterations[0], log.memory[0]
    # 499990 iterations left at 9.4964 s: 4,748,105 s = 1318:55:05; 128 * 256 tokens / 9.4964 s / 4 cards = 863.
    assert progress_line(record, musa_plan, memory) == (
        "iteration 10/500000 (0%) | lm loss 0.2092 | 9,496 ms/it | 863 tokens/s/card | 138 TFLOP/s/card | "
        "mem 12.0 GiB max reserved (rank 3) | ETA 1318:55:05"
    )


def test_progress_line_without_times_or_total(musa_plan):
    record = {"iteration": 3, "train_iters": None, "losses": {"lm loss": 5.5}, "elapsed_ms": None}
    plan = dict(musa_plan, train_iters=None)
    assert progress_line(record, plan) == "iteration 3/0 | lm loss 5.5"


# --- the report ----------------------------------------------------------------------------------------------
def test_write_report_names_the_killed_rank_not_the_node_that_lost_it(tmp_path, cpu_plan):
    kill_a_rank(tmp_path)
    summary = write_report(str(tmp_path), cpu_plan)
    failure = summary["failure"]
    assert summary["state"] == "failed"
    assert (failure["node"], failure["rank"], failure["local_rank"]) == ("node2", 3, 1)
    assert (failure["exitcode"], failure["signal"]) == (-9, "SIGKILL")
    assert failure["file"] == "node2/launch.out"
    assert summary["failure_text"].startswith("node2 rank 3 (local rank 1): Signal 9 (SIGKILL) received by PID 2267")
    assert "node1" not in summary["failure_text"]
    assert summary["table"][-1] == f"failure      {summary['failure_text']}"
    assert summary["nodes_collected"] == ["node1", "node2"] and summary["nodes_missing"] == []
    assert summary["last_iteration"] == 6
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written["failure_text"] == summary["failure_text"]


def test_write_report_watcher_lost_a_node(tmp_path, cpu_plan):
    """The watcher lost node2 and its logs are gone: node1's closed connections are not the cause."""
    collect(tmp_path, "node1", NODE1_LAUNCH, {(0, "stderr"): NODE1_RANK0_STDERR})
    incident = {"state": "failed", "kind": "lost", "node": "node2", "reason": "node2 does not answer"}
    summary = write_report(str(tmp_path), cpu_plan, incident)
    failure = summary["failure"]
    assert (summary["state"], failure["kind"], failure["node"], failure["ranks"]) == ("failed", "node", "node2", [2, 3])
    assert summary["failure_text"].startswith("node2: ")
    assert "ranks 2, 3" in summary["failure_text"]
    assert summary["incident"] == incident
    assert summary["nodes_missing"] == ["node2"]
    assert "missing      no logs from node2 (not collected)" in summary["table"]


def test_lost_node_with_logs_but_no_error_of_its_own(tmp_path, cpu_plan):
    collect(tmp_path, "node1", NODE1_LAUNCH, {(0, "stderr"): NODE1_RANK0_STDERR})
    collect(tmp_path, "node2", "", {(1, "stdout"): iterations_text(last=4)})
    incident = {"state": "failed", "kind": "lost", "node": "node2", "reason": "node2 stopped answering"}
    summary = write_report(str(tmp_path), cpu_plan, incident)
    assert summary["failure"]["node"] == "node2"
    assert summary["failure_text"] == "node2: node2 stopped answering (its ranks 2, 3)"


def test_lost_node_with_its_own_error_names_that_error(tmp_path, cpu_plan):
    collect(tmp_path, "node1", NODE1_LAUNCH, {(0, "stderr"): NODE1_RANK0_STDERR})
    collect(tmp_path, "node2", "", {(0, "stderr"): OOM_STDERR})
    incident = {"state": "failed", "kind": "lost", "node": "node2", "reason": "node2 stopped answering"}
    summary = write_report(str(tmp_path), cpu_plan, incident)
    assert (summary["failure"]["node"], summary["failure"]["rank"]) == ("node2", 2)
    assert "MUSA out of memory" in summary["failure_text"]


def test_missing_node_with_only_consequences_elsewhere_went_first(tmp_path, cpu_plan):
    collect(tmp_path, "node1", NODE1_LAUNCH, {(0, "stderr"): NODE1_RANK0_STDERR})
    summary = write_report(str(tmp_path), cpu_plan)  # no incident: the logs alone say failed
    failure = summary["failure"]
    assert (summary["state"], failure["node"], failure["ranks"]) == ("failed", "node2", [2, 3])
    assert "(ranks 2, 3) was lost during the run" in summary["failure_text"]
    assert "Connection reset by peer" in summary["failure_text"]  # what the ranks elsewhere saw


def test_missing_node_does_not_hide_a_real_error_elsewhere(tmp_path, cpu_plan):
    collect(tmp_path, "node1", "", {(1, "stderr"): OOM_STDERR})
    summary = write_report(str(tmp_path), cpu_plan)
    assert summary["state"] == "failed"
    assert (summary["failure"]["node"], summary["failure"]["rank"]) == ("node1", 1)
    assert summary["failure_text"].startswith("node1 rank 1 (local rank 1): torch.OutOfMemoryError")


def test_no_logs_at_all_and_the_master_lost(tmp_path, cpu_plan):
    incident = {"state": "failed", "kind": "lost", "node": "node1", "reason": "the master does not answer"}
    summary = write_report(str(tmp_path), cpu_plan, incident)
    assert summary["state"] == "failed"
    assert summary["failure"]["ranks"] == [0, 1]
    assert summary["nodes_missing"] == ["node1", "node2"]
    assert (tmp_path / "metrics.jsonl").read_text() == ""
    assert summary["plots"] == []


def test_watch_incident_without_errors_in_the_logs(tmp_path, cpu_plan):
    collect(tmp_path, "node1")
    collect(tmp_path, "node2", "", {(1, "stdout"): iterations_text(last=4)})
    incident = {"state": "failed", "kind": "killed", "node": "node1", "reason": "the launch on node1 is gone"}
    summary = write_report(str(tmp_path), cpu_plan, incident)
    assert summary["state"] == "failed"
    assert summary["failure"]["kind"] == "watch"
    assert summary["failure_text"] == "node1: the launch on node1 is gone"


def finished_run(root: Path) -> None:
    """A whole run: rank 3 prints the iterations; every rank on a card prints its memory."""
    memory = {}
    for node, first in (("node1", 0), ("node2", 2)):
        for local_rank in range(2):
            rank = first + local_rank
            memory[(node, local_rank)] = memory_line(rank, 10, 10000.0 + 1000 * rank)
    collect(root, "node1", "", {(i, "stdout"): memory[("node1", i)] for i in range(2)})
    stdout = iterations_text() + memory[("node2", 1)] + "[after training is done] datetime: 2026-11-30 06:00:31\n"
    collect(root, "node2", "", {(0, "stdout"): memory[("node2", 0)], (1, "stdout"): stdout})


def test_write_report_files_of_a_finished_run_on_cards(tmp_path):
    musa_plan = make(MUSA_HOSTS, accelerator_peak_tflops=465)  # a site that knows its card's peak
    finished_run(tmp_path)
    summary = write_report(str(tmp_path), musa_plan)

    metrics = read_jsonl(tmp_path / "metrics.jsonl")
    assert [m["iteration"] for m in metrics] == list(range(1, 11))
    assert [m["elapsed_ms"] for m in metrics] == STEP_MS
    assert metrics[0]["losses"] == {"lm loss": pytest.approx(8.2)}
    assert metrics[NONFINITE_ITERATION - 1]["nan_iterations"] == 1
    memory = read_jsonl(tmp_path / "memory.jsonl")
    assert sorted((m["rank"], m["after_iteration"], m["max_reserved_mb"]) for m in memory) == [
        (0, 10, 10000.0),
        (1, 10, 11000.0),
        (2, 10, 12000.0),
        (3, 10, 13000.0),
    ]

    written = json.loads((tmp_path / "summary.json").read_text())
    assert written["state"] == "finished"
    # The NaN iteration is reported, but does not fail a run that reached its last iteration.
    assert written["failure"]["kind"] == "nan" and written["failure"]["iteration"] == NONFINITE_ITERATION
    assert written["last_iteration"] == 10
    step = written["step_time_ms"]
    # Iterations 4..10 after 3 of warm-up: 100, 102, ..., 112; p90 interpolates 110 and 112 at 0.4.
    assert (step["count"], step["median"], step["p90"]) == (7, 106.0, pytest.approx(110.8))
    assert written["tokens_per_second_per_gpu"]["median"] == pytest.approx(8 * 256 / 0.106 / 4)
    model = written["model_tflops_per_card"]
    expected = musa_plan["flops_per_iteration"] / 0.106 / 4 / 1e12
    assert model["median"] == pytest.approx(expected)
    assert model["peak_tflops"] == 465.0
    assert model["mfu"] == pytest.approx(expected / 465.0)
    assert written["tflops_per_gpu"]["mfu"] == pytest.approx(0.012345 / 465.0)
    assert written["losses"]["lm loss"] == {
        "first": pytest.approx(8.2),
        "first_iteration": 1,
        "last": pytest.approx(7.3),
        "last_iteration": 10,
    }
    assert (written["nan_iterations"], written["skipped_iterations"]) == (1, 1)
    assert written["max_reserved_mb_by_rank"] == {"0": 10000.0, "1": 11000.0, "2": 12000.0, "3": 13000.0}
    assert (written["job"], written["world_size"], written["exp_name"]) == ("megatron", 4, "kill-a-rank")
    assert "note" not in model
    assert any(line.startswith("MFU          ") and " %" in line for line in written["table"])
    assert "memory       max reserved 12.70 GiB (rank 3); 4 rank(s)" in written["table"]

    assert summary["plots"] == ["loss.png", "throughput.png"]
    for name in summary["plots"]:
        assert (tmp_path / name).read_bytes()[:8] == PNG


def test_cpu_run_has_no_mfu(tmp_path, cpu_plan):
    collect(tmp_path, "node1")
    collect(tmp_path, "node2", "", {(1, "stdout"): iterations_text()})
    summary = write_report(str(tmp_path), cpu_plan)
    model = summary["model_tflops_per_card"]
    assert summary["job"] == "smoke"
    assert model["median"] is None  # the smoke job's model is not the preset's
    assert model["mfu"] is None and model["peak_tflops"] is None
    assert "smoke job" in model["note"]
    assert summary["tflops_per_gpu"]["mfu"] is None
    assert "MFU          - (no peak on a CPU (an MFU would mean nothing))" in summary["table"]
    assert "memory       no device-memory lines (a CPU run, or Megatron's memory report is off)" in summary["table"]
    assert (tmp_path / "memory.jsonl").read_text() == ""


def test_summary_table_of_a_built_report(cpu_plan, tmp_path):
    log = parse_lines(iterations_text(), seq_length=256, world_size=4, warmup_iterations=3)
    summary = build_report(log, cpu_plan, str(tmp_path))
    table = summary_table(summary)
    assert table[0] == f"run          kill-a-rank / {RUN_ID} (smoke): finished"
    assert table[1] == "iterations   10/10"
    assert table[2] == "step time    median 106.0 ms, p90 110.8 ms (7 iterations after 3 of warm-up)"
    assert "loss         lm loss: 8.2 (iteration 1) -> 7.3 (iteration 10)" in table
    assert "anomalies    1 NaN iteration(s), 1 skipped iteration(s)" in table


def test_plot_without_iterations_writes_nothing(tmp_path, cpu_plan):
    assert plot(str(tmp_path), [], cpu_plan) == []
    assert list(tmp_path.iterdir()) == []


def test_relative_run_dir_gives_the_same_failure(tmp_path, cpu_plan, monkeypatch):
    kill_a_rank(tmp_path / "run")
    absolute = write_report(str(tmp_path / "run"), cpu_plan)
    monkeypatch.chdir(tmp_path)
    relative = write_report("run", cpu_plan)
    assert relative["failure"]["file"] == absolute["failure"]["file"] == "node2/launch.out"
    assert relative["failure_text"] == absolute["failure_text"]
