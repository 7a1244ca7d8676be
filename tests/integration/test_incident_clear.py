"""incidents.yml and health.yml's ``-e clear=NODE`` on the controller: a refused clear says why once (no Ansible
deprecation warning with it, the record's bad lines still named), and changes nothing; a clear where there is no
record (a misspelt -e runs_dir) is refused, writing nothing; a clear of a recorded node appends its line.

Real ansible-playbook runs against a loopback inventory (port 1: nothing answers), each with its own -e runs_dir;
a clear refused before reach.yml contacts no node. No testbed needed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import nodes_contacted

pytestmark = pytest.mark.playbook

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
INVENTORY = """\
all:
  vars: {accelerator: musa, ansible_user: root, ansible_port: 1}
  children:
    nodes:
      hosts:
        node1: {ansible_host: 127.0.0.1, slots: 8, master: true}
        node2: {ansible_host: 127.0.0.2, slots: 8}
"""
#: A record with an incident of node2 and a line that cannot be read (a warning names it).
RECORD = '{"node": "node2", "kind": "hang", "time": 1.0, "run": "r1", "attempt": 0}\nnot json\n'


def _run(tmp_path: Path, playbook: str, *extra: str) -> subprocess.CompletedProcess:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(INVENTORY)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", PATH=f"{BIN}{os.pathsep}{env['PATH']}")
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inventory), playbook, *extra],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("playbook", ["playbooks/incidents.yml", "playbooks/health.yml"])
def test_a_refused_clear_warns_without_a_deprecation(tmp_path, playbook):
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "incidents.jsonl").write_text(RECORD)
    result = _run(tmp_path, playbook, "-e", f"runs_dir={runs}", "-e", "clear=node9")
    output = result.stdout
    assert result.returncode != 0, output
    assert output.count("-e clear=node9: no such node in the inventory (node1, node2)") == 1, output
    assert f"{runs}/incidents.jsonl line 2 is not JSON; skipped" in output, output
    assert "DEPRECATION" not in output and "deprecat" not in output, output
    assert (runs / "incidents.jsonl").read_text() == RECORD
    assert not nodes_contacted(output), output


@pytest.mark.parametrize("playbook", ["playbooks/incidents.yml", "playbooks/health.yml"])
def test_a_clear_without_a_record_is_refused_writing_nothing(tmp_path, playbook):
    runs = tmp_path / "nosuchdir"
    result = _run(tmp_path, playbook, "-e", f"runs_dir={runs}", "-e", "clear=node1")
    output = result.stdout
    assert result.returncode != 0, output
    said = f"-e clear=node1: there is no incident record at {runs}/incidents.jsonl, so node1 has no incident"
    assert output.count(said) == 1, output
    assert "-e runs_dir must name the runs directory that holds incidents.jsonl" in output, output
    assert "cleared " not in output and not runs.exists(), output
    assert not nodes_contacted(output), output


def test_a_clear_of_a_recorded_node_appends_its_line(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "incidents.jsonl").write_text(RECORD)
    result = _run(tmp_path, "playbooks/incidents.yml", "-e", f"runs_dir={runs}", "-e", "clear=node2")
    assert result.returncode == 0, result.stdout
    assert "cleared      node2: its incidents so far no longer count" in result.stdout, result.stdout
    last = (runs / "incidents.jsonl").read_text().splitlines()[-1]
    assert '"node": "node2"' in last and '"kind": "cleared"' in last, last
