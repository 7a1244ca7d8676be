"""train.yml's recovery on the testbed (-e max_restarts): real faults (a rank SIGKILLed, a node's engine stopped,
stop.yml between attempts) and a real resume from the smoke job's checkpoint through its own --load. Marked
`testbed`. A rank killed after a checkpoint, restarted and resumed to the end, is test_megatron_train.py's, with
Megatron's own checkpoint."""

from __future__ import annotations

import json
import re
import time

import pytest

from testbed import clean_experiment as _clean
from testbed import docker, heal_node2, in_container, playbook, wait_for_checkpoint
from testbed import latest_run as _latest_run
from testbed import no_rank_left as _no_rank_left
from testbed import train_in_background as _train_in_background
from testbed import wait_for_iterations as _wait_for_iterations

pytestmark = pytest.mark.testbed
#: Checkpoints every 5 iterations, so a restart has one to resume from.
SAVE_EVERY_5 = ("-e", json.dumps({"training": {"save_interval": 5}}))
#: Long enough (about 10 s of iterations here) that the fault lands before the end, short enough to finish.
ITERS = 400
KILL_RANK_3 = "kill -9 $(pgrep -n -f 'python3 -u .*smoke_trai[n].py')"  # the newest rank on node2: global rank 3


def _wait_for_attempt(exp: str, attempt: int, timeout: float = 240) -> None:
    """Until attempt ``attempt`` runs: the earlier one's logs are set aside on node2 and new iterations come."""
    deadline = time.monotonic() + timeout
    aside = f"/data/mtt-train-ops/runs/{exp}/*/attempt-{attempt - 1}/logs/node2"
    while time.monotonic() < deadline:
        if in_container("node2", f"ls -d {aside} 2>/dev/null", check=False).stdout.strip():
            _wait_for_iterations(exp, count=2, timeout=max(1.0, deadline - time.monotonic()))
            return
        time.sleep(1)
    raise AssertionError(f"attempt {attempt} of {exp} did not start in time")


def test_a_failure_that_repeats_ends_after_max_restarts_with_every_attempt_reported(provisioned):
    exp = "restart-repeats"
    _clean(exp)
    job = _train_in_background("-e", "train_iters=100000", "-e", f"exp={exp}", "-e", "max_restarts=1", *SAVE_EVERY_5)
    try:
        wait_for_checkpoint(exp, 5)
        in_container("node2", KILL_RANK_3)
        _wait_for_attempt(exp, 2)
        in_container("node2", KILL_RANK_3)
        output, _ = job.communicate(timeout=600)
    finally:
        job.kill()
    assert job.returncode != 0, output[-4000:]
    assert "Not restarted: max_restarts=1 reached: 2 attempts failed." in " ".join(output.split()), output[-6000:]
    summary = json.loads((_latest_run(exp) / "summary.json").read_text())
    assert summary["state"] == "failed" and [a["attempt"] for a in summary["attempts"]] == [1, 2]
    assert all(a["state"] == "failed" for a in summary["attempts"])
    _no_rank_left()


def test_stop_yml_during_the_restarts_ends_them(provisioned):
    exp = "restart-stopped"
    _clean(exp)
    job = _train_in_background("-e", "train_iters=100000", "-e", f"exp={exp}", "-e", "max_restarts=3", *SAVE_EVERY_5)
    try:
        wait_for_checkpoint(exp, 5)
        in_container("node2", KILL_RANK_3)
        deadline = time.monotonic() + 240  # the first attempt is set aside: train.yml is between attempts
        aside = f"/data/mtt-train-ops/runs/{exp}/*/attempt-1"
        while not in_container("node1", f"ls -d {aside} 2>/dev/null", check=False).stdout.strip():
            assert time.monotonic() < deadline, "attempt 1 was not set aside in time"
            time.sleep(0.5)
        stopped = playbook("stop.yml")
        output, _ = job.communicate(timeout=600)
    finally:
        job.kill()
    assert stopped.returncode == 0, stopped.stdout[-4000:]
    assert "restarts cancelled (train.yml starts no new attempt)" in stopped.stdout, stopped.stdout[-3000:]
    assert job.returncode != 0, output[-4000:]
    assert "stop.yml stopped the run: no new attempt" in " ".join(output.split()), output[-6000:]
    assert "starting attempt 3" not in output
    _no_rank_left()
    run_dir = _latest_run(exp)
    assert not (run_dir / "attempt-3").exists()


def test_a_node_lost_without_elastic_ends_the_run_naming_it(provisioned):
    exp = "restart-lost-node"
    _clean(exp)
    job = _train_in_background("-e", "train_iters=100000", "-e", f"exp={exp}", "-e", "max_restarts=1", *SAVE_EVERY_5)
    try:
        wait_for_checkpoint(exp, 5)
        docker("stop", "-t", "1", "mtt-node-2")
        output, _ = job.communicate(timeout=600)
    finally:
        job.kill()
        docker("start", "mtt-node-2")
    try:
        assert job.returncode != 0, output[-4000:]
        failure = re.search(r"Not restarted: (.*)", " ".join(output.split()))
        assert failure, output[-6000:]
        assert "node2" in failure.group(1) and "-e elastic=true" in failure.group(1), failure.group(1)
        assert "smoke_train.py" not in in_container("node1", "ps -eo args").stdout
    finally:
        heal_node2()


def test_a_node_lost_with_elastic_goes_on_on_the_nodes_that_remain(provisioned):
    exp = "restart-elastic"
    _clean(exp)
    job = _train_in_background(
        "-e", f"train_iters={ITERS}", "-e", f"exp={exp}", "-e", "max_restarts=1", "-e", "elastic=true", *SAVE_EVERY_5
    )  # fmt: skip
    try:
        wait_for_checkpoint(exp, 5)
        docker("stop", "-t", "1", "mtt-node-2")
        output, _ = job.communicate(timeout=900)
    finally:
        job.kill()
        docker("start", "mtt-node-2")
    try:
        assert job.returncode == 0, output[-6000:]
        change = re.search(
            r"re-planned without node2 \(-e elastic=true\): (.*?); starting attempt 2", " ".join(output.split())
        )
        assert change, output[-6000:]
        assert change.group(1).startswith(
            "nodes 2 -> 1, dp 4 -> 2, micro-batches 2 -> 4, global batch 8 unchanged, node2 left out: "
        ), change.group(1)
        run_dir = _latest_run(exp)
        plan = json.loads((run_dir / "plan" / "plan.json").read_text())
        assert [n["name"] for n in plan["nodes"]] == ["node1"]
        assert (plan["dp"], plan["num_microbatches"], plan["global_batch_size"]) == (2, 4, 8)
        first = json.loads((run_dir / "attempt-1" / "plan.json").read_text())
        assert (first["dp"], first["num_microbatches"], first["global_batch_size"]) == (4, 2, 8)
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["state"] == "finished" and summary["last_iteration"] == ITERS
        assert [a["attempt"] for a in summary["attempts"]] == [1, 2]
        # the smoke job's checkpoint of dp 4 loaded on dp 2 (its own --load, as Megatron's)
        assert any("successfully loaded checkpoint" in p.read_text() for p in (run_dir / "node1").rglob("stdout.log"))
    finally:
        heal_node2()
