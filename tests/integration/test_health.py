"""The health check on the testbed, with real faults (docs/health.md): a node whose card replays a recorded bad
output, a node whose Megatron-LM tree differs from the other's, and a full file system where checkpoints go (a
small tmpfs mounted in the training container's own mount namespace). Every verdict comes from health.yml or
train.yml's own check over SSH."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest

from testbed import ROOT, SMALL, has_megatron, in_container, in_node, latest_run, playbook

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


@pytest.mark.skipif(not has_megatron(), reason="the stand-in has no Megatron-LM tree (make megatron-src)")
def test_a_node_whose_megatron_tree_differs_is_left_out_and_the_run_goes_on_without_it(provisioned, tmp_path):
    changed = "/home/Megatron-LM/megatron/core/__init__.py"
    in_container("node2", f"cp {changed} /tmp/megatron-init.orig && echo '# changed on node2' >> {changed}")
    try:
        exp = "health-tree"
        result = playbook("train.yml", *SMALL, "-e", f"exp={exp}", "-e", f"health_dir={tmp_path}", "-e", "fresh=true")
    finally:
        in_container("node2", f"cp /tmp/megatron-init.orig {changed}")
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


def test_a_full_file_system_where_checkpoints_go_is_named_before_the_launch(provisioned, tmp_path):
    exp = "health-disk"
    shutil.rmtree(ROOT / "runs" / exp, ignore_errors=True)
    where = f"/data/mtt-train-ops/checkpoints/{exp}"
    pid = in_node("node2", "docker inspect -f '{{.State.Pid}}' train").stdout.strip()
    mount = f"nsenter -t {pid} -m sh -c 'mkdir -p {where} && mount -t tmpfs -o size=1m tmpfs {where}'"
    in_node("node2", mount)
    try:
        # pp=4 needs both nodes' four ranks: without node2 the run cannot be planned, and is refused
        result = playbook("train.yml", *SMALL, "-e", "pp=4", "-e", f"exp={exp}", "-e", f"health_dir={tmp_path}")
    finally:
        in_node("node2", f"nsenter -t {pid} -m umount {where}", check=False)
    assert result.returncode != 0
    disk = next(c for c in newest_record(tmp_path)["verdicts"]["node2"]["checks"] if c["check"] == "disk")
    assert disk["status"] == "sick"
    assert f"1.00 MiB free at {where}, a checkpoint of this plan takes " in disk["detail"]
    assert "not one checkpoint fits" in disk["detail"]
    assert "train.yml: the health check leaves out node2; the nodes that remain (node1) cannot hold the run" in (
        result.stdout
    )
    assert "Nothing was started" in result.stdout
    assert not (ROOT / "runs" / exp).exists()  # refused before the plan was rendered
