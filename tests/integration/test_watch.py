"""Hung and slow ranks on the testbed, with real faults: a rank frozen by SIGSTOP, a rank stuck in its own code
(the smoke job's fault drill) while its peers wait in a collective, and a node throttled to 0.3 CPU by
`docker update`. The detection itself is the bundle's: the watcher's probes, diagnose.sh, rank_probe.py with
py-spy on every node. Marked `testbed`."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from testbed import (
    ROOT,
    docker,
    in_container,
    latest_run,
    playbook,
    rank_pid,
    train_in_background,
    wait_for_iterations,
)
from testbed import clean_experiment as _clean
from testbed import no_rank_left as _no_rank_left

pytestmark = pytest.mark.testbed

#: The hang tests' own -e hang_timeout: the smoke job prints an iteration every few hundredths of a second, and its
#: ranks start in a few seconds, so 15 s without one is a hang (the testbed inventory's 30 s would cost each test
#: 15 s more of waiting). 10 s was tried: on a loaded machine the on_hang=warn run was diagnosed a second time just as
#: its stopped rank was continued, and that second look (every rank back in its all-reduce) became the run's finding.
#: A SIGSTOPped rank under the default on_hang (the run ends, the culprit named by its state) is
#: test_megatron_train.py's, on Megatron's own ranks.
HANG_TIMEOUT = 15
HANG_LIMIT = ("-e", f"hang_timeout={HANG_TIMEOUT}")


def _evidence(run_dir: Path) -> dict[int, str]:
    """Every rank's evidence file, by global rank."""
    files = {}
    for path in (run_dir / "hang").glob("node*/rank-*.txt"):
        files[int(path.stem.split("-")[1])] = path.read_text()
    return files


def _run_with_fault(exp: str, inject: Callable[[], object]) -> tuple[str, int, float]:
    """A long smoke run with a fault injected once it iterates: (output, exit status, seconds after the fault)."""
    _clean(exp)
    job = train_in_background("-e", "train_iters=100000", "-e", f"exp={exp}", *HANG_LIMIT)
    try:
        wait_for_iterations(exp)
        inject()
        injected = time.monotonic()
        output, _ = job.communicate(timeout=300)
        return output, job.returncode, time.monotonic() - injected
    finally:
        job.kill()


def test_the_rank_outside_the_collective_is_the_odd_one_out(provisioned):
    exp = "hang-drill"
    # the smoke job's fault drill: rank 1 (node1) stops at its next iteration, outside any collective
    drill = f"d=$(ls -d /data/mtt-train-ops/runs/{exp}/*/); mkdir -p $d/drill && touch $d/drill/hang-rank-1"
    output, returncode, took = _run_with_fault(exp, lambda: in_container("node1", drill))
    assert returncode != 0, output[-4000:]
    # generous: the bound catches a run left to the job's own 10-minute timeout, not a slow machine
    assert took < HANG_TIMEOUT + 90, f"{took:.0f} s from the drill to the end of train.yml"
    failure = re.search(r"Run hang-drill/\S+ failed: (.*)", output)
    assert failure, output[-5000:]
    assert failure.group(1).startswith(
        "node1 rank 1 (local rank 1): hung: not in a collective (at hold_for_drill (trainops/node/smoke_train.py:"
    ), failure.group(1)
    assert "while 3 rank(s) wait in barrier" in failure.group(1)
    run_dir = latest_run(exp)
    summary = json.loads((run_dir / "summary.json").read_text())
    finding = summary["hang"]
    assert finding["confidence"] == "medium" and finding["last_iteration"] >= 3
    assert HANG_TIMEOUT <= finding["seconds_since_progress"] < HANG_TIMEOUT + 15
    assert summary["failure"]["kind"] == "hang" and summary["failure"]["node"] == "node1"
    assert json.loads((run_dir / "hang" / "diagnosis.json").read_text())["culprits"] == finding["culprits"]
    assert finding["groups"][0] == {
        "collective": "barrier",
        "ranks": [0, 2, 3],
        "signature": "waits in barrier from main (smoke_train.py)",
    }
    evidence = _evidence(run_dir)
    assert sorted(evidence) == [0, 1, 2, 3]
    assert all("Thread " in text and "smoke_train.py" in text for text in evidence.values()), evidence
    for rank in (0, 2, 3):  # the peers are shown waiting in the collective
        assert re.search(r"^    barrier \(torch/distributed/distributed_c10d\.py:\d+\)$", evidence[rank], re.M)
    assert "hold_for_drill (trainops/node/smoke_train.py:" in evidence[1] and "state       S (sleeping)" in evidence[1]
    _no_rank_left()


def _files(top: Path) -> dict[str, float]:
    """Every file under ``top`` with its modification time."""
    return {str(path): path.stat().st_mtime for path in top.rglob("*") if path.is_file()}


def test_on_hang_warn_shows_the_diagnosis_keeps_watching_and_status_names_the_culprit(provisioned, tmp_path):
    """One hung run proves both: train.yml's on_hang=warn prints the diagnosis and watches on, and status.yml,
    run meanwhile from another shell, names the same culprit and writes nothing."""
    exp = "hang-warn"
    _clean(exp)
    log = tmp_path / "train.out"
    job = train_in_background(
        "-e", "train_iters=400", "-e", f"exp={exp}", "-e", "on_hang=warn", *HANG_LIMIT, output=log
    )
    try:
        wait_for_iterations(exp)
        pid = rank_pid("node2", exp, 3)
        in_container("node2", f"kill -STOP {pid}")
        deadline = time.monotonic() + HANG_TIMEOUT + 90
        while "hang suspected" not in log.read_text() and time.monotonic() < deadline:
            assert job.poll() is None, log.read_text()[-4000:]
            time.sleep(2)
        warned = log.read_text()
        assert "hang suspected" in warned, warned[-4000:]
        assert job.poll() is None, "on_hang=warn ended the run"
        # status.yml, while the rank is still stopped: the culprit named, nothing written outside the watcher's
        # own evidence (train.yml's watcher, still running, may diagnose again into its run's hang/)
        before = _files(ROOT / "runs")
        status = playbook("playbooks/status.yml", *HANG_LIMIT)
        assert status.returncode == 0, status.stdout[-4000:]
        assert re.search(r"hang     high confidence: node2 rank 3 \(local rank 1\): state T", status.stdout), (
            status.stdout[-4000:]
        )
        written = {f for f, mtime in _files(ROOT / "runs").items() if before.get(f) != mtime}
        assert not {f for f in written if f"/runs/{exp}/" not in f or "/hang/" not in f}, written
        in_container("node2", f"kill -CONT {pid}")
        job.wait(timeout=600)
    finally:
        job.kill()
    output = log.read_text()
    assert job.returncode == 0, output[-5000:]
    assert re.search(r"culprit node2 rank 3 \(local rank 1\): state T: stopped by a signal", output), output[-5000:]
    assert "on_hang=warn: watching goes on" in output
    assert re.search(r"iteration 400/400 \(100%\)", output)
    summary = json.loads((latest_run(exp) / "summary.json").read_text())
    assert summary["state"] == "finished" and summary["last_iteration"] == 400
    assert summary["hang"]["culprits"][0]["rank"] == 3 and summary["failure"] is None
    assert any(line.startswith("hang         no iteration for") for line in summary["table"])


def test_a_throttled_node_is_named_straggler_and_not_hung(provisioned):
    # (that an untouched run of as many iterations names no straggler: test_train.py's resumed run)
    exp = "straggler-throttled"
    _clean(exp)
    # about 250 throttled iterations: the progress line's window (the last 200 reports) is all throttled before the
    # end, and the run's verdict (each rank's compute time summed over the run) is dominated by them
    job = train_in_background("-e", "train_iters=300", "-e", f"exp={exp}")
    try:
        wait_for_iterations(exp, count=50)
        docker("update", "--cpus", "0.3", "mtt-node-2")  # real CPU throttling of node2 (its container included)
        output, _ = job.communicate(timeout=900)
    finally:
        job.kill()
        docker("update", "--cpus", str(os.cpu_count()), "mtt-node-2")
    assert job.returncode == 0, output[-5000:]
    run_dir = latest_run(exp)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["state"] == "finished" and summary["hang"] is None
    slow = {(s["node"], s["rank"]) for s in summary["stragglers"]}
    assert slow == {("node2", 2), ("node2", 3)}, summary["stragglers"]
    assert all(s["ratio"] >= 1.2 for s in summary["stragglers"])
    assert re.search(r"\| straggler node2 rank [23] \(\d+\.\dx\), node2 rank [23]", output), output[-5000:]
    assert re.search(r"straggler    node2 rank 2 \(local rank 0\): compute \d+\.\d\dx the median", output)
    assert (run_dir / "throughput.png").read_bytes()[:4] == b"\x89PNG"
