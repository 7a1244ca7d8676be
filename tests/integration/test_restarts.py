"""train.yml's recovery on the testbed (-e max_restarts): real faults (a rank SIGKILLed, a node's engine stopped,
stop.yml between attempts) and a real resume from the smoke job's checkpoint through its own --load, and the
site's incident record leaving a node out of the next run until it is cleared. Marked `testbed`. A rank killed
after a checkpoint, restarted and resumed to the end, and a node lost with elastic=true, are
test_megatron_train.py's, with Megatron's own checkpoint; a hung rank's node isolated by an elastic restart, with
a spare in its place, is test_three_nodes.py's."""

from __future__ import annotations

import json
import re
import time

import pytest

from testbed import ROOT, SMALL, docker, heal_node2, in_container, playbook, wait_for_checkpoint
from testbed import clean_experiment as _clean
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


def _incidents() -> list[dict]:
    record = ROOT / "runs" / "incidents.jsonl"
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


def test_a_failure_that_repeats_ends_after_max_restarts_and_leaves_its_node_out_of_the_next_run(provisioned):
    """Rank 3 (node2) SIGKILLed in both attempts of a run with -e max_restarts=1: the run ends with both attempts
    reported, and the site's incident record holds node2 twice, so the next train.yml plans on node1 alone and says
    why; incidents.yml -e clear=node2 brings it back for the run after."""
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

    recorded = [(i["attempt"], i["node"], i["kind"], i["rank"], i["counts"]) for i in _incidents()]
    assert recorded == [(1, "node2", "dead_rank", 3, True), (2, "node2", "dead_rank", 3, True)], recorded
    assert "incident     node2: dead_rank, attempt 2 of restart-repeats/" in output
    listed = playbook("playbooks/incidents.yml")
    assert "node2: 2 incident(s) in 14 days, LEFT OUT of the next run (limit 2)" in listed.stdout, listed.stdout[-3000:]
    _clean("incidents-left-out")
    left = playbook("train.yml", "-e", "train_iters=20", "-e", "exp=incidents-left-out", *SMALL)
    assert left.returncode == 0, left.stdout[-6000:]
    said = " ".join(left.stdout.split())
    assert "node2 left out: implicated 2 times in 14 days (dead_rank in restart-repeats/" in said, said[-4000:]
    assert "incidents.yml -e clear=node2" in said and "layout       tp=1 pp=1 cp=1 vpp=- dp=2" in left.stdout
    plan = json.loads((_latest_run("incidents-left-out") / "plan" / "plan.json").read_text())
    assert [n["name"] for n in plan["nodes"]] == ["node1"]

    # (a clear of a node the inventory does not name is refused: test_incident_clear.py)
    cleared = playbook("playbooks/incidents.yml", "-e", "clear=node2")
    assert cleared.returncode == 0 and "cleared      node2: its incidents so far no longer count" in cleared.stdout
    # cleared: node2 is planned on again (plan.yml leaves out what train.yml leaves out, by the same filters:
    # test_spares.py; the run that launched without node2 is above)
    back = playbook("playbooks/plan.yml", "-e", "exp=incidents-back", *SMALL)
    assert back.returncode == 0 and "node2 left out" not in back.stdout, back.stdout[-4000:]
    assert "layout       tp=1 pp=1 cp=1 vpp=- dp=4" in back.stdout
    assert len(_incidents()) == 3  # the two incidents and the clearing: nothing is deleted


def test_stop_yml_during_the_restarts_ends_them(provisioned):
    """stop.yml while the run's supervisor restarts it: stop.yml asks the supervisor, which stops what runs and
    starts no new attempt."""
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
    # stop.yml asked the run's supervisor, which stopped the run on both nodes and ended its restarts
    assert re.search(r"node1: run restart-stopped/\S+: stopped by its supervisor \(pid \d+\): attempt \d ended, no new "
                     r"attempt", stopped.stdout), stopped.stdout[-3000:]  # fmt: skip
    assert job.returncode != 0, output[-4000:]
    assert "stop.yml stopped the run: no new attempt" in " ".join(output.split()), output[-6000:]
    assert "starting attempt 3" not in output
    _no_rank_left()
    run_dir = _latest_run(exp)
    assert not (run_dir / "attempt-3").exists()


def test_a_node_lost_without_elastic_ends_the_run_naming_it(provisioned):
    """node2's engine stopped mid-run (-e max_restarts=1, no elastic): the loss is noticed, node2 and its ranks are
    named, node1's ranks are stopped, and the run is not restarted on the node that is gone."""
    exp = "restart-lost-node"
    _clean(exp)
    job = _train_in_background("-e", "train_iters=100000", "-e", f"exp={exp}", "-e", "max_restarts=1", *SAVE_EVERY_5)
    try:
        wait_for_checkpoint(exp, 5)
        docker("stop", "-t", "1", "mtt-node-2")
        lost = time.monotonic()
        output, _ = job.communicate(timeout=600)
        noticed = time.monotonic() - lost
    finally:
        job.kill()
        docker("start", "mtt-node-2")
    try:
        assert job.returncode != 0, output[-4000:]
        assert noticed < 150, noticed
        said = " ".join(output.split())
        failure = re.search(rf"Run {exp}/\S+ failed: (.*)", said)
        assert failure and "node2" in failure.group(1) and "ranks 2, 3" in failure.group(1), said[-6000:]
        not_restarted = re.search(r"Not restarted: (.*)", said)
        assert not_restarted, said[-6000:]
        assert "node2" in not_restarted.group(1) and "-e elastic=true" in not_restarted.group(1), not_restarted.group(1)
        assert "smoke_train.py" not in in_container("node1", "ps -eo args").stdout
        summary = json.loads((_latest_run(exp) / "summary.json").read_text())
        assert summary["failure"]["node"] == "node2" and summary["nodes_missing"] == ["node2"]
    finally:
        heal_node2()
