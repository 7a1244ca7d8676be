"""One meaning of a spare (issue 38, point 4), end to end on the controller: plan.yml plans on the nodes train.yml
starts on (a spare gets no rank), a master that is a spare and an inventory of spares only are refused before any
node, a spare with fewer slots says how the world size changes, and with launcher=slurm a spare is kept out of
the job and what Slurm cannot honour is refused naming the option.

The inventory's hosts are on loopback at port 9 (nothing listens there): train.yml gets as far as reaching them
and stops there. No testbed needed.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from testbed import nodes_contacted
from testbed import playbook as run_playbook

pytestmark = pytest.mark.playbook

SMALL = ("-e", "model=tiny", "-e", "seq_length=128")


def _inventory(tmp_path: Path, hosts: dict[str, str], login: bool = False) -> Path:
    lines = "".join(f"        {name}: {{{fields}}}\n" for name, fields in hosts.items())
    slurm = "    slurm_login:\n      hosts:\n        login1: {ansible_host: 127.0.0.9}\n" if login else ""
    path = tmp_path / "inventory.yml"
    path.write_text(f"all:\n  vars:\n    ansible_port: 9\n  children:\n    nodes:\n      hosts:\n{lines}{slurm}")
    return path


def _run(tmp_path: Path, playbook: str, inventory: Path, *extra: str) -> str:
    writes = ("-e", f"runs_dir={tmp_path / 'runs'}", "-e", f"health_dir={tmp_path / 'health'}")
    if playbook.endswith("plan.yml"):
        writes = ("-e", f"plan_dir={tmp_path / 'plan'}")
    output = run_playbook(playbook, *SMALL, *writes, *extra, inventory=inventory, timeout=300).stdout
    assert "Traceback" not in output, output[-3000:]
    return output


def _cluster(output: str) -> str:
    return re.search(r"^cluster .*$", output, re.M).group(0)


SPARE = {
    "node1": "ansible_host: 127.0.0.1, slots: 8",
    "node2": "ansible_host: 127.0.0.2, slots: 8, spare: true",
    "node3": "ansible_host: 127.0.0.3, slots: 8",
}


def test_plan_yml_plans_on_the_nodes_train_yml_starts_on(tmp_path):
    inventory = _inventory(tmp_path, SPARE)
    planned = _run(tmp_path, "playbooks/plan.yml", inventory)
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert [n["name"] for n in plan["nodes"]] == ["node1", "node3"], planned[-3000:]
    assert not (tmp_path / "plan" / "launch-node2.sh").exists()
    # train.yml plans on the controller first, then stops at the unreachable nodes
    trained = _run(tmp_path, "train.yml", inventory)
    assert "is unreachable" in trained, trained[-3000:]
    assert (
        _cluster(planned)
        == _cluster(trained)
        == ("cluster      2 node(s) [node1=127.0.0.1x8, node3=127.0.0.3x8], 16 x S5000; master node1 127.0.0.1:14388")
    )


def test_plan_yml_leaves_out_what_train_yml_leaves_out(tmp_path):
    """The incident record and -e exclude_nodes leave a node out of plan.yml's plan as of train.yml's, a spare in
    its place, and plan.yml says so as train.yml does."""
    (tmp_path / "runs").mkdir()
    hang = {"node": "node1", "kind": "hang", "time": time.time() - 3600, "run": "exp/r1", "attempt": 1, "cause": "x"}
    (tmp_path / "runs" / "incidents.jsonl").write_text((json.dumps(hang) + "\n") * 2)
    inventory = _inventory(tmp_path, SPARE)
    planned = _run(tmp_path, "playbooks/plan.yml", inventory, "-e", f"runs_dir={tmp_path / 'runs'}")
    assert "node1 left out: implicated 2 times in 14 days (hang in exp/r1 attempt 1: x" in planned, planned[-3000:]
    trained = _run(tmp_path, "train.yml", inventory)
    assert _cluster(planned) == _cluster(trained) and _cluster(planned).startswith(
        "cluster      2 node(s) [node2=127.0.0.2x8, node3=127.0.0.3x8]"
    )
    excluded = _run(tmp_path, "playbooks/plan.yml", inventory, "-e", "exclude_nodes=node2", "-e", "incident_limit=0")
    assert "node2: left out by -e exclude_nodes" in excluded, excluded[-3000:]
    assert _cluster(excluded).startswith("cluster      2 node(s) [node1=127.0.0.1x8, node3=127.0.0.3x8]")


def test_a_spare_listed_first_is_not_the_master(tmp_path):
    hosts = {"node0": "ansible_host: 127.0.0.4, slots: 8, spare: true", **SPARE}
    output = _run(tmp_path, "playbooks/plan.yml", _inventory(tmp_path, hosts))
    assert _cluster(output).endswith("; master node1 127.0.0.1:14388"), output[-3000:]


@pytest.mark.parametrize("playbook", ["playbooks/plan.yml", "train.yml", "provision.yml"])
def test_a_master_that_is_a_spare_is_refused_before_any_node(tmp_path, playbook):
    hosts = dict(SPARE, node2="ansible_host: 127.0.0.2, slots: 8, spare: true, master: true")
    output = _run(tmp_path, playbook, _inventory(tmp_path, hosts))
    assert "inventory node2: master: true and spare: true: the master has node rank 0" in output, output[-3000:]
    assert not nodes_contacted(output)


@pytest.mark.parametrize("playbook", ["playbooks/plan.yml", "train.yml"])
def test_an_inventory_of_spares_only_is_named_before_any_node(tmp_path, playbook):
    hosts = {name: f"ansible_host: 127.0.0.{i + 1}, slots: 8, spare: true" for i, name in enumerate(SPARE)}
    output = _run(tmp_path, playbook, _inventory(tmp_path, hosts))
    assert "inventory: every node is a spare (spare: true on node1, node2, node3)" in output, output[-3000:]
    assert "left out ()" not in output
    assert not nodes_contacted(output)
    assert not (tmp_path / "plan").exists() and not (tmp_path / "runs").exists()


def test_a_spare_with_fewer_slots_says_the_world_size_it_makes(tmp_path):
    hosts = dict(SPARE, node2="ansible_host: 127.0.0.2, slots: 4, spare: true")
    output = _run(tmp_path, "train.yml", _inventory(tmp_path, hosts), "-e", "exclude_nodes=node3")
    assert (
        "spare        node2 takes the place of node3 (node rank 1) with 4 slot(s) for its 8: the world size goes "
        "from 16 to 12 ranks, so the layout is not the one planned for 16"
    ) in output, output[-3000:]
    assert "the layout stays as planned" not in output
    assert _cluster(output).startswith("cluster      2 node(s) [node1=127.0.0.1x8, node2=127.0.0.2x4], 12 x S5000")


def test_with_slurm_a_spare_gets_no_rank_and_what_slurm_cannot_honour_is_refused(tmp_path):
    inventory = _inventory(tmp_path, SPARE, login=True)
    refused = _run(tmp_path, "train.yml", inventory, "-e", "launcher=slurm", "-e", "exclude_nodes=node3",
                   "-e", "use_nodes=node1", "-e", "health=exclude")  # fmt: skip
    for name in ("exclude_nodes=node3", "use_nodes=node1", "health=exclude"):
        assert f"-e {name} is not honoured with -e launcher=slurm" in refused, refused[-3000:]
    assert not nodes_contacted(refused)
    # the first plan (before Slurm's allocation) is made on the nodes that are not spares
    planned = _run(tmp_path, "train.yml", inventory, "-e", "launcher=slurm")
    assert "is unreachable" in planned, planned[-3000:]
    assert _cluster(planned).startswith("cluster      2 node(s) [node1=127.0.0.1x8, node3=127.0.0.3x8]")
