"""The health check on the testbed, with real faults (docs/health.md): a node whose card replays a recorded bad
output, a node whose Megatron-LM tree differs from the other's, and a full file system where checkpoints go (a
small tmpfs mounted in the training container's own mount namespace). Every verdict comes from health.yml or
train.yml's own check over SSH."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
from pathlib import Path

import pytest

from testbed import (
    ROOT,
    SMALL,
    clean_experiment,
    docker,
    has_megatron,
    in_container,
    in_node,
    inventory_copy,
    latest_run,
    playbook,
    rank_pid,
    train_in_background,
    wait_for_iterations,
)

pytestmark = pytest.mark.testbed
FIXTURES = ROOT / "tests" / "fixtures"
REPLAY_DIR = "/etc/mtt-testbed-standin"


def newest_record(health_dir: Path) -> dict:
    records = sorted(health_dir.glob("*/health.json"))
    assert records, f"no health record under {health_dir}"
    return json.loads(records[-1].read_text())


def replay(node: str, name: str, text: str) -> None:
    """Make the node's device tool stand-in print ``text`` (a recorded output) instead of the image's."""
    in_container(node, f"mkdir -p {REPLAY_DIR} && printf '%s' {shlex.quote(text)} > {REPLAY_DIR}/{name}")


@pytest.fixture
def replays():
    yield
    for node in ("node1", "node2"):
        in_container(node, f"rm -f {REPLAY_DIR}/*.txt", check=False)


def test_health_yml_gives_every_node_a_verdict_and_records_it(provisioned, tmp_path):
    result = playbook("playbooks/health.yml", "-e", f"health_dir={tmp_path}")
    assert result.returncode == 0, result.stdout[-4000:]
    record = newest_record(tmp_path)
    assert set(record["verdicts"]) == {"node1", "node2"} and record["level"] == "quick"
    for node, verdict in record["verdicts"].items():
        assert verdict["verdict"] == "healthy", verdict
        checks = {c["check"]: c["status"] for c in verdict["checks"]}
        # the cpu backend has no device tool; the stack and the disk are checked
        assert (checks["cards"], checks["stack"], checks["disk"]) == ("skipped", "ok", "ok")
        assert record["facts"][node]["stack"]["torch"]
        assert f"{node}  healthy" in result.stdout


def test_a_replayed_row_remap_waiting_for_a_reset_makes_its_node_sick_naming_the_field(provisioned, replays, tmp_path):
    # the cuda backend's device tool on the testbed: the stand-in replays a recorded 8 x H100 nvidia-smi -q on
    # node1, and on node2 a recorded 4 x A100 one whose GPU 00000000:9E:00.0 has a row remap pending
    replay("node2", "nvidia-smi-q.txt", (FIXTURES / "nvidia-smi" / "a100x4-remap-pending-555.42.02.txt").read_text())
    result = playbook("playbooks/health.yml", "-e", "accelerator=cuda", "-e", f"health_dir={tmp_path}")
    assert result.returncode != 0
    assert "health.yml (-e level=quick): sick: node2 " in result.stdout
    node2 = newest_record(tmp_path)["verdicts"]["node2"]
    ecc = next(c for c in node2["checks"] if c["check"] == "ecc")
    assert (node2["verdict"], ecc["status"]) == ("sick", "sick")
    assert ecc["field"] == "GPU 00000000:9E:00.0/Remapped Rows/Pending"
    assert "card 1 (00000000:9e:00.0): a row remap waits for a reset" in ecc["detail"]
    stack = next(c for c in node2["checks"] if c["check"] == "stack")
    assert "driver 555.42.02 here, 565.57.01 on node1" in stack["detail"]
    assert newest_record(tmp_path)["verdicts"]["node1"]["verdict"] == "healthy"
    # the failed check is in the site's incident record, with the health record as its evidence
    incidents = [json.loads(line) for line in (ROOT / "runs" / "incidents.jsonl").read_text().splitlines()]
    assert [(i["node"], i["kind"]) for i in incidents] == [("node2", "health")]
    assert incidents[0]["evidence"].startswith(str(tmp_path))
    # the card is "repaired" (the image's healthy output again): -e clear=node2 clears its incident, then checks
    in_container("node2", f"rm -f {REPLAY_DIR}/nvidia-smi-q.txt")
    again = playbook(
        "playbooks/health.yml", "-e", "accelerator=cuda", "-e", f"health_dir={tmp_path}", "-e", "clear=node2"
    )
    assert again.returncode == 0, again.stdout[-3000:]
    assert "cleared      node2: its incidents so far no longer count" in again.stdout
    assert "node2  healthy" in again.stdout
    last = json.loads((ROOT / "runs" / "incidents.jsonl").read_text().splitlines()[-1])
    assert (last["node"], last["kind"]) == ("node2", "cleared")


def test_a_replayed_table_with_a_card_missing_makes_its_node_sick(provisioned, replays, tmp_path):
    table = (FIXTURES / "mthreads-gmi" / "s5000-x8-gmi2.4.1.txt").read_text()
    rule = "+-------------------------------------------------------------------+\n"
    blocks = table.split(rule)
    # the recorded 8-card table with cards 1 to 7 cut out: one card left for the node's two slots
    one_card = rule.join(blocks[:2] + blocks[-1:])
    replay("node2", "mthreads-gmi.txt", one_card)
    result = playbook("playbooks/health.yml", "-e", "accelerator=musa", "-e", f"health_dir={tmp_path}")
    assert result.returncode != 0
    cards = next(c for c in newest_record(tmp_path)["verdicts"]["node2"]["checks"] if c["check"] == "cards")
    assert cards["status"] == "sick"
    assert "mthreads-gmi lists 1 card(s) (0 (00000000:18:00.0)), slots=2 asks for 2" in cards["detail"]
    # the table has no ECC counters: node1 is not called healthy on what it could not see
    assert newest_record(tmp_path)["verdicts"]["node1"]["verdict"] == "unknown"


MEGATRON_INIT = "/home/Megatron-LM/megatron/core/__init__.py"


@contextlib.contextmanager
def megatron_tree_changed(node: str):
    """A real difference in the node's Megatron-LM tree (a line appended to one of its files), undone after."""
    in_container(node, f"cp {MEGATRON_INIT} /tmp/megatron-init.orig && echo '# changed on {node}' >> {MEGATRON_INIT}")
    try:
        yield
    finally:
        in_container(node, f"cp /tmp/megatron-init.orig {MEGATRON_INIT}")


@contextlib.contextmanager
def checkpoints_full(node: str, exp: str):
    """A 1 MiB tmpfs over the experiment's checkpoint directory, in the node's training container only (its own
    mount namespace, entered from the node): not one checkpoint fits there."""
    where = f"/data/mtt-train-ops/checkpoints/{exp}"
    pid = in_node(node, "docker inspect -f '{{.State.Pid}}' train").stdout.strip()
    in_node(node, f"nsenter -t {pid} -m sh -c 'mkdir -p {where} && mount -t tmpfs -o size=1m tmpfs {where}'")
    try:
        yield where
    finally:
        in_node(node, f"nsenter -t {pid} -m umount {where}", check=False)


@pytest.mark.skipif(not has_megatron(), reason="the stand-in has no Megatron-LM tree (make megatron-src)")
def test_a_node_whose_megatron_tree_differs_is_left_out_and_the_run_goes_on_without_it(provisioned, tmp_path):
    exp = "health-tree"
    with megatron_tree_changed("node2"):
        result = playbook("train.yml", *SMALL, "-e", f"exp={exp}", "-e", f"health_dir={tmp_path}", "-e", "fresh=true")
    assert result.returncode == 0, result.stdout[-5000:]
    assert "node2: left out, its health check says sick (stack: Megatron-LM tree " in result.stdout
    stack = next(c for c in newest_record(tmp_path)["verdicts"]["node2"]["checks"] if c["check"] == "stack")
    here, there = stack["detail"].split(" here, ")
    assert here.startswith("Megatron-LM tree ") and there.endswith(" on node1") and here[17:] != there[:-9]
    run = latest_run(exp)
    plan = json.loads((run / "plan" / "plan.json").read_text())
    # planned on node1 alone, with the global batch of the two-node plan (4 ranks x 2 micro-batches)
    assert ([n["name"] for n in plan["nodes"]], plan["world_size"], plan["global_batch_size"]) == (["node1"], 2, 8)
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["state"], summary["nodes_collected"]) == ("finished", ["node1"])


def test_the_full_level_names_a_throttled_node_slow_against_its_peers_and_train_plans_without_it(provisioned, tmp_path):
    full = ("playbooks/health.yml", "-e", "level=full", "-e", "health_burn_in_s=3", "-e", f"health_dir={tmp_path}")
    docker("update", "--cpus", "0.3", "mtt-node-2")  # real CPU throttling of node2 (its containers included)
    try:
        slow = playbook(*full)
    finally:
        docker("update", "--cpus", str(os.cpu_count()), "mtt-node-2")
    assert slow.returncode != 0 and "health.yml (-e level=full): sick: node2 " in slow.stdout, slow.stdout[-4000:]
    record = newest_record(tmp_path)
    assert record["level"] == "full"
    checks = {node: {c["check"]: c for c in v["checks"]} for node, v in record["verdicts"].items()}
    # every card's burn-in, and the all-reduce among each node's own two ranks, against the other node's
    for name in ("burn_in", "node_collective"):
        assert (checks["node1"][name]["status"], checks["node2"][name]["status"]) == ("ok", "sick"), checks
    assert "bf16 TFLOP/s card 0 " in checks["node2"]["burn_in"]["detail"]
    assert "x the other nodes' median card" in checks["node2"]["burn_in"]["detail"]
    assert "gloo among 2 cards: " in checks["node2"]["node_collective"]["detail"]
    assert all(card["tflops"] > 0 for card in record["facts"]["node2"]["burn_in"]["cards"])

    # its quota back, node2 passes train.yml's own quick check, but the full check's verdict stands (health_max_age)
    exp = "health-full"
    clean_experiment(exp)
    run = playbook("train.yml", *SMALL, "-e", "train_iters=5", "-e", f"exp={exp}", "-e", f"health_dir={tmp_path}")
    assert run.returncode == 0, run.stdout[-5000:]
    assert "node2: left out, its health check says sick (burn_in: bf16 TFLOP/s card 0 " in run.stdout
    assert "(the full check of " in run.stdout
    plan = json.loads((latest_run(exp) / "plan" / "plan.json").read_text())
    assert [n["name"] for n in plan["nodes"]] == ["node1"]

    # after the repair a new full check finds node2 well, and the quick check carries that instead
    well = playbook(*full)
    assert well.returncode == 0, well.stdout[-4000:]
    quick = playbook("playbooks/health.yml", "-e", f"health_dir={tmp_path}")
    assert quick.returncode == 0, quick.stdout[-4000:]
    carried = {c["check"]: c["status"] for c in newest_record(tmp_path)["verdicts"]["node2"]["checks"]}
    # not sick (two containers sharing two cores can put one of them under 0.8x now and then: degraded at worst)
    assert carried["burn_in"] != "sick" and carried["node_collective"] != "sick", carried


def test_a_full_file_system_where_checkpoints_go_is_named_before_the_launch(provisioned, tmp_path):
    exp = "health-disk"
    shutil.rmtree(ROOT / "runs" / exp, ignore_errors=True)
    with checkpoints_full("node2", exp) as where:
        # pp=4 needs both nodes' four ranks: without node2 the run cannot be planned, and is refused
        result = playbook("train.yml", *SMALL, "-e", "pp=4", "-e", f"exp={exp}", "-e", f"health_dir={tmp_path}")
    assert result.returncode != 0
    disk = next(c for c in newest_record(tmp_path)["verdicts"]["node2"]["checks"] if c["check"] == "disk")
    assert disk["status"] == "sick"
    assert f"1.00 MiB free at {where}, a checkpoint of this plan takes " in disk["detail"]
    assert "not one checkpoint fits" in disk["detail"]
    assert "train.yml: the health check leaves out node2; the nodes that remain (node1) cannot hold the run" in (
        result.stdout
    )
    assert "Nothing was started" in result.stdout
    assert not list((ROOT / "runs" / exp).glob("*/plan"))  # refused before the plan was rendered (its id claimed)


def test_a_spare_takes_the_place_of_a_sick_node_with_its_rank(provisioned, tmp_path):
    """node2 is a spare (spare: true): the run is planned on node1 alone, until node1's check finds it sick (its
    checkpoint directory is full); then node2 takes its place as node rank 0, and the layout and the global batch
    are the one-node plan's."""
    inventory = inventory_copy(tmp_path, node2={"spare": True})
    exp = "health-spare"
    shutil.rmtree(ROOT / "runs" / exp, ignore_errors=True)
    with checkpoints_full("node1", exp):
        result = playbook("train.yml", *SMALL, "-e", f"exp={exp}", "-e", f"health_dir={tmp_path / 'health'}",
                          inventory=inventory)  # fmt: skip
    assert result.returncode == 0, result.stdout[-5000:]
    assert "spare        node2 takes the place of node1 (node rank 0): the layout stays as planned" in result.stdout
    plan = json.loads((latest_run(exp) / "plan" / "plan.json").read_text())
    assert ([n["name"] for n in plan["nodes"]], plan["world_size"], plan["global_batch_size"]) == (["node2"], 2, 4)
    assert plan["master"] == "node2"


def test_a_node_found_sick_after_a_failure_gets_no_rank_in_another_attempt(provisioned, tmp_path):
    """Rank 3 (node2) is killed while node2's checkpoint directory has filled up: the quick check after the failure
    finds node2 sick, and without elastic the run ends naming it instead of relaunching on it."""
    exp = "health-restart"
    clean_experiment(exp)
    output = tmp_path / "train.out"
    job = train_in_background("-e", "train_iters=100000", "-e", f"exp={exp}", "-e", "max_restarts=1",
                              "-e", f"health_dir={tmp_path / 'health'}", "-e", "fresh=true", output=output)  # fmt: skip
    try:
        wait_for_iterations(exp, 3)
        with checkpoints_full("node2", exp):
            in_container("node2", f"kill -9 {rank_pid('node2', exp, 3)}")
            job.wait(timeout=600)
    finally:
        job.kill()
    text = output.read_text()
    assert job.returncode != 0, text[-4000:]
    assert "node2: sick in the health check before the next attempt (disk: 1.00 MiB free at " in text
    assert "The run cannot go on without node2" in text
    attempts = json.loads((latest_run(exp) / "attempts.json").read_text())
    assert len(attempts["records"]) == 1  # no second attempt
