"""report.yml never writes history (issue 38, point 2), on the controller alone: nodes at closed ports of the
loopback (127.0.0.x, port 1) do not answer, so nothing real is contacted. A report adds no incident, names the
nodes it could not reach and keeps what was collected; a run planned for other nodes is refused before any SSH.
No testbed needed."""

from __future__ import annotations

import json
import sys

import pytest
import yaml

from testbed import ROOT, nodes_contacted, playbook

sys.path.insert(0, str(ROOT / "tests"))
from presets import load_preset, make_plan  # noqa: E402

pytestmark = pytest.mark.playbook

PLANNED = {"node1": "127.0.0.1", "node2": "127.0.0.2"}


def _inventory(path, nodes):
    hosts = {name: {"ansible_host": addr, "ansible_port": 1, "slots": 2} for name, addr in nodes.items()}
    inventory = {"all": {"vars": {"accelerator": "cpu"}, "children": {"nodes": {"hosts": hosts}}}}
    path.write_text(yaml.safe_dump(inventory))
    return path


@pytest.fixture
def run(tmp_path):
    """A run of node1 and node2 whose node1 logs were collected before, beside a site record with one incident."""
    hosts = [{"name": n, "ansible_host": a, "slots": 2, "accelerator": "cpu"} for n, a in PLANNED.items()]
    layout = {"train_iters": 10, "seq_length": 128, "gbs": 4, "precision": "bf16"}
    plan = make_plan(model=load_preset("tiny"), hosts=hosts, layout=layout, run_id="r1", exp_name="gone")
    run_dir = tmp_path / "runs" / "gone" / "r1"
    (run_dir / "plan").mkdir(parents=True)
    (run_dir / "plan" / "plan.json").write_text(json.dumps(plan))
    (run_dir / "node1").mkdir()
    (run_dir / "node1" / "collected-before.log").write_text("the logs of an earlier collection\n")
    (tmp_path / "runs" / "incidents.jsonl").write_text(
        json.dumps({"node": "node2", "kind": "hang", "run": "gone/r0", "attempt": 1, "time": 1.0}) + "\n"
    )
    return run_dir


def _report(inventory, run_dir):
    runs = run_dir.parents[1]
    return playbook("playbooks/report.yml", "-e", f"runs_dir={runs}", "-e", f"run={run_dir}", inventory=inventory)


def test_a_report_of_nodes_that_do_not_answer_adds_no_incident_and_keeps_what_was_collected(tmp_path, run):
    record = tmp_path / "runs" / "incidents.jsonl"
    before = record.read_bytes()
    result = _report(_inventory(tmp_path / "hosts.yml", PLANNED), run)
    assert result.returncode == 0, result.stdout[-4000:]
    assert record.read_bytes() == before, "report.yml wrote history"
    assert "incident     " not in result.stdout
    said = result.stdout[result.stdout.index("node1 (127.0.0.1) could not be reached") :]
    assert "node2 (127.0.0.2) could not be reached" in said and "adds no incident" in said
    assert (run / "node1" / "collected-before.log").read_text() == "the logs of an earlier collection\n"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["nodes_collected"] == ["node1"] and summary["nodes_missing"] == ["node2"]


@pytest.mark.parametrize(
    ("nodes", "wrong"),
    [
        ({"node1": "127.0.0.1", "node2": "127.0.0.3"}, "node2 is at 127.0.0.3 in it, at 127.0.0.2 in the plan"),
        ({"node1": "127.0.0.1", "node3": "127.0.0.2"}, "node2 (127.0.0.2) is not in it"),
    ],
    ids=["other-address", "other-name"],
)
def test_a_run_planned_for_other_nodes_is_refused_before_any_ssh(tmp_path, run, nodes, wrong):
    result = _report(_inventory(tmp_path / "other.yml", nodes), run)
    assert result.returncode != 0
    assert f"{run} was planned for other nodes than this inventory's (node1, node2): {wrong}." in result.stdout
    assert "No node was contacted and nothing was changed." in result.stdout
    assert not nodes_contacted(result.stdout), "a node was contacted"
    assert not (run / "summary.json").exists()
