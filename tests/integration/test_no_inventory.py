"""No default cluster: every playbook run without -i is refused on the controller before any node is contacted,
saying how to give an inventory; the example cluster is used only when named, and said to be the example; a
printed follow-up command carries the -i and the site options the run was given. No testbed needed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import nodes_contacted

pytestmark = pytest.mark.playbook

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
#: Every playbook a user runs (each imports playbooks/inputs.yml first).
PLAYBOOKS = [
    "provision.yml",
    "train.yml",
    "stop.yml",
    "playbooks/plan.yml",
    "playbooks/status.yml",
    "playbooks/report.yml",
    "playbooks/data.yml",
    "playbooks/health.yml",
    "playbooks/incidents.yml",
    "playbooks/export.yml",
    "playbooks/monitoring.yml",
]


def ansible_playbook(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("ANSIBLE_INVENTORY", "ANSIBLE_HOSTS")}
    env.update(ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", PATH=f"{BIN}{os.pathsep}{env['PATH']}")
    return subprocess.run(
        [str(BIN / "ansible-playbook"), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_every_playbook_is_a_user_playbook_here():
    """A new playbook that imports the input check belongs in PLAYBOOKS."""
    found = {"provision.yml", "train.yml", "stop.yml"} | {
        f"playbooks/{p.name}" for p in (ROOT / "playbooks").glob("*.yml") if "inputs.yml" in p.read_text()
    }
    assert found - {"playbooks/provision.yml", "playbooks/train.yml", "playbooks/stop.yml"} == set(PLAYBOOKS)


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_a_run_without_inventory_is_refused_before_any_node(playbook):
    result = ansible_playbook(playbook, "-e", "tp=1", "-e", "run=runs/x/y")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert f"no inventory given (-i): {playbook} needs your cluster's inventory" in output, output
    assert f"ansible-playbook -i inventory/<site> {playbook}" in output and "docs/inventory.md" in output
    assert "nothing was changed and no node was contacted" in output
    assert not nodes_contacted(output), "a node was contacted"
    assert "10.10.142.13" not in output, "the example cluster was used"


def test_plan_on_the_example_says_it_is_the_example(tmp_path):
    result = ansible_playbook(
        "-i", "inventory/example", "playbooks/plan.yml", "-e", "tp=1", "-e", "pp=2", "-e", f"plan_dir={tmp_path / 'p'}"
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "inventory/example is the example cluster" in output and "this plan is the example's" in output
    assert (tmp_path / "p" / "hostfile").read_text().startswith("10.10.142.133 slots=8")


FOLLOW_UP = """
- name: Check every input
  ansible.builtin.import_playbook: {root}/playbooks/inputs.yml
  vars:
    inputs_playbook: stop

- name: Print the follow-ups
  hosts: localhost
  connection: local
  gather_facts: false
  vars:
    ansible_python_interpreter: "{{{{ ansible_playbook_python }}}}"
  roles:
    - role: trainops_defaults
  tasks:
    - name: Print them
      trainops_show:
        msg: "FOLLOW {{{{ trainops_invocation | trainops_command('status') }}}} | {{{{ trainops_invocation
          | trainops_command('report', {{'run': '/r/e/a b'}}) }}}}"
"""


@pytest.mark.parametrize("inside", [True, False], ids=["inventory-in-project", "inventory-elsewhere"])
def test_a_printed_follow_up_carries_the_inventory_and_the_site_options(tmp_path, inside):
    """The run's own invocation (the input check's fact) through the trainops_command filter, as train.yml's
    "follow it / stop it / report" lines and the busy-node refusal print it."""
    (tmp_path / "follow.yml").write_text(FOLLOW_UP.format(root=ROOT))
    if inside:
        inventory, shown = str(ROOT / "inventory" / "example"), "inventory/example"
    else:
        site = tmp_path / "my site"
        site.mkdir()
        (site / "hosts.yml").write_text(
            "all:\n  children:\n    nodes:\n      hosts:\n        node1: {ansible_host: 127.0.0.1, slots: 8}\n"
        )
        inventory = shown = str(site / "hosts.yml")
    result = ansible_playbook(
        "-i",
        inventory,
        str(tmp_path / "follow.yml"),
        "-e",
        json.dumps({"work_home": "/srv/w x"}),
        "-e",
        "container_name=c2",
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    quoted = f"'{shown}'" if " " in shown else shown
    assert (
        f"FOLLOW ansible-playbook -i {quoted} playbooks/status.yml -e work_home='/srv/w x' -e container_name=c2 | "
        f"ansible-playbook -i {quoted} playbooks/report.yml -e container_name=c2 -e run='/r/e/a b'"
    ) in output.replace("\\'", "'"), output
    assert not nodes_contacted(output)


@pytest.mark.parametrize("playbook", ["stop.yml", "train.yml", "playbooks/health.yml"])
def test_a_limit_without_localhost_is_refused_before_any_node(playbook, tmp_path):
    """--limit node2 would skip the input check (a play on localhost) and go on to the nodes: refused, with the
    --limit that keeps the check (issue 38: stop.yml exited 0 having stopped nothing, a bad value unrefused)."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  vars: {accelerator: cpu, ansible_port: 1}\n  children:\n    nodes:\n      hosts:\n"
        "        node1: {ansible_host: 127.0.0.1, slots: 2}\n        node2: {ansible_host: 127.0.0.2, slots: 2}\n"
    )
    result = ansible_playbook("-i", str(inventory), playbook, "--limit", "node2", "-e", "stop_grace=-5")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    name = playbook.rsplit("/", 1)[-1]
    assert f"--limit node2 leaves out localhost, where {name} checks every input" in output, output[-3000:]
    assert "--limit 'node2,localhost'" in output and "unreachable=1" not in output
    kept = ansible_playbook("-i", str(inventory), playbook, "--limit", "node2,localhost", "-e", "stop_grace=-5")
    assert "leaves out localhost" not in kept.stdout and "Check every option and the inventory" in kept.stdout
