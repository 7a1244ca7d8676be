"""Helpers for the tests that drive real playbooks over real SSH against the testbed's node containers."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
INVENTORY = ROOT / "inventory" / "testbed"
#: Node containers of the testbed, by inventory name.
NODE_CONTAINERS = {"node1": "mtt-node-1", "node2": "mtt-node-2"}
_RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def env() -> dict[str, str]:
    return dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}",
    )


def playbook(path: str, *extra: str, inventory: Path | str = INVENTORY, timeout: int = 900):
    """Run ansible-playbook from the project root; returns the CompletedProcess (stdout+stderr in .stdout)."""
    cmd = [str(BIN / "ansible-playbook"), "-i", str(inventory), path, *extra]
    return subprocess.run(
        cmd, cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout
    )


def recap(output: str) -> dict[str, dict[str, int]]:
    """The last PLAY RECAP: host -> {ok, changed, unreachable, failed}."""
    result = {}
    for host, ok, changed, unreachable, failed in _RECAP.findall(output.split("PLAY RECAP")[-1]):
        result[host] = {"ok": int(ok), "changed": int(changed), "unreachable": int(unreachable), "failed": int(failed)}
    return result


def docker(*args: str, check: bool = True, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check, timeout=timeout)


def in_node(node: str, command: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run a shell command on a node (through the controller's engine, for inspection only)."""
    return docker("exec", NODE_CONTAINERS[node], "sh", "-c", command, check=check)


def in_container(node: str, command: str, container: str = "train", check: bool = True):
    """Run a shell command in a node's training container."""
    return docker("exec", NODE_CONTAINERS[node], "docker", "exec", container, "sh", "-c", command, check=check)
