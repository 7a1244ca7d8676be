"""Helpers for the tests that drive real playbooks over real SSH against the testbed's node containers."""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

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


def nodes_contacted(output: str) -> set[str]:
    """The hosts other than the controller that a run's PLAY RECAP lists: none when it stopped before any node."""
    return set(recap(output)) - {"localhost"}


def docker(*args: str, check: bool = True, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check, timeout=timeout)


#: One check per node, inside its engine: the training container runs, its sshd runs (a container restarted with
#: its node has none until provision.yml starts it), and no rank of this bundle's runs is left in it.
_FIT = (
    "docker inspect -f '{{.State.Running}}' train 2>/dev/null | grep -qx true "
    "|| { echo 'train container down'; exit; }; "
    "docker exec train sh -c 'pgrep -x sshd >/dev/null || echo sshd down; "
    'ps -eo args | grep -E "[s]moke_train.py|[p]retrain_gpt.py|[t]orchrun" >/dev/null && echo rank left\''
)


def unfit() -> list[str]:
    """What keeps the testbed from being provisioned and idle, node by node (empty: fit)."""
    problems = []
    for node, container in NODE_CONTAINERS.items():
        done = docker("exec", container, "sh", "-c", _FIT, check=False)
        problems += [f"{node}: {line}" for line in (done.stdout + done.stderr).split("\n") if line.strip()]
    return problems


def node_container(node: str) -> str:
    """The node container of an inventory name: node1 is mtt-node-1 (a third node, node3, is mtt-node-3)."""
    return NODE_CONTAINERS.get(node) or f"mtt-node-{node.removeprefix('node')}"


def in_node(node: str, command: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run a shell command on a node (through the controller's engine, for inspection only)."""
    return docker("exec", node_container(node), "sh", "-c", command, check=check)


def in_container(node: str, command: str, container: str = "train", check: bool = True):
    """Run a shell command in a node's training container."""
    return docker("exec", node_container(node), "docker", "exec", container, "sh", "-c", command, check=check)


def clean_experiment(exp: str) -> None:
    """No run or checkpoint of ``exp`` left in the containers from an earlier test (the log globs would find it), and
    no record of one on the controller (train.yml compares a resume with the records of the runs that saved)."""
    for node in ("node1", "node2"):
        in_container(node, f"rm -rf /data/mtt-train-ops/runs/{exp} /data/mtt-train-ops/checkpoints/{exp}")
    shutil.rmtree(ROOT / "runs" / exp, ignore_errors=True)


def no_rank_left() -> None:
    """No rank of the smoke job or of Megatron runs in either training container."""
    for node in ("node1", "node2"):
        running = in_container(node, "ps -eo args").stdout
        assert "smoke_train.py" not in running and "pretrain_gpt.py" not in running, f"ranks left on {node}"


#: A small, quick run of the smoke job: 2 nodes x 2 ranks, tp=1 pp=1 dp=4, gbs 8, seq 128.
SMALL = ("-e", "model=tiny", "-e", "seq_length=128", "-e", "num_microbatches=2", "-e", "progress_interval=2")


def images() -> dict:
    """The testbed's image tags, the stand-in's archive and its Megatron-LM tree (build-images.sh --print)."""
    printed = subprocess.run([str(ROOT / "testbed" / "build-images.sh"), "--print"], capture_output=True, text=True)
    return json.loads(printed.stdout)


def has_megatron() -> bool:
    """Whether the testbed's stand-in image holds a Megatron-LM tree (make megatron-src)."""
    return bool(images().get("standin_megatron_tree"))


def latest_run(exp: str) -> Path:
    """The newest run directory of an experiment on the controller (run ids begin with their UTC start time)."""
    runs = sorted((ROOT / "runs" / exp).glob("2*"))
    assert runs, f"no run of {exp!r} on the controller"
    return runs[-1]


def train_in_background(*extra: str, output: Path | None = None, inventory: Path | str = INVENTORY) -> subprocess.Popen:
    """train.yml with the SMALL run, in the background; its output to ``output`` (a file) or a pipe."""
    sink = open(output, "w") if output else subprocess.PIPE  # noqa: SIM115 - the child owns it until it ends
    return subprocess.Popen(
        [str(BIN / "ansible-playbook"), "-i", str(inventory), "train.yml", *SMALL, *extra],
        cwd=ROOT,
        env=env(),
        stdout=sink,
        stderr=subprocess.STDOUT,
        text=True,
    )


#: The controller's SSH to the nodes (inventory/testbed: ansible_host 172.30.0.1N, port 22), and nothing else:
#: the nodes' own traffic to each other, and the tests' docker exec, do not pass this machine's OUTPUT chain.
CONTROLLER_SSH = ["OUTPUT", "-p", "tcp", "-d", "172.30.0.0/24", "--dport", "22", "-j"]
#: Every packet of it answered with a TCP reset (a laptop that changes network, a VPN that reconnects).
RESET = ["REJECT", "--reject-with", "tcp-reset"]


@contextlib.contextmanager
def controller_ssh(verdict: list[str]):
    """The controller's SSH to the nodes met with ``verdict`` (RESET, or ["DROP"]) while the block runs."""
    subprocess.run(["iptables", "-I", *CONTROLLER_SSH, *verdict], check=True)
    try:
        yield
    finally:
        subprocess.run(["iptables", "-D", *CONTROLLER_SSH, *verdict], check=True)


def kill_controller(job: subprocess.Popen) -> None:
    """SIGKILL to train.yml and every process under it (Ansible's workers, their ssh): a controller that dies, not
    only its main process (a worker left alive would go on following, and starting the supervisor again)."""
    family, look = [job.pid], [job.pid]
    while look:
        found = subprocess.run(["pgrep", "-P", str(look.pop())], capture_output=True, text=True).stdout.split()
        family += [int(pid) for pid in found]
        look += [int(pid) for pid in found]
    for pid in family:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    job.wait(timeout=30)


def _wait_for_count(node: str, command: str, count: int, timeout: float, interval: float, failure: str) -> None:
    """Until ``command`` in ``node``'s training container prints a number >= ``count``; else ``failure``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = in_container(node, command, check=False).stdout.strip()
        if found.isdigit() and int(found) >= count:
            return
        time.sleep(interval)
    raise AssertionError(failure)


def wait_for_iterations(exp: str, count: int = 3, timeout: float = 180) -> None:
    """Until the last rank of the experiment's run (node2, local rank 1) has printed ``count`` iteration lines."""
    log = f"/data/mtt-train-ops/runs/{exp}/*/logs/node2/*/attempt_0/1/stdout.log"
    command = f"cat {log} 2>/dev/null | grep -c iteration"
    failure = f"the smoke job printed fewer than {count} iterations in time"
    _wait_for_count("node2", command, count, timeout, 1.0, failure)


def wait_for_checkpoint(exp: str, iteration: int, timeout: float = 180) -> None:
    """Until the experiment's checkpoint tracker (Megatron's latest_checkpointed_iteration.txt, on the checkpoint
    volume the nodes share) says ``iteration`` or later."""
    tracker = f"/data/mtt-train-ops/checkpoints/{exp}/latest_checkpointed_iteration.txt"
    failure = f"no checkpoint of {exp} at iteration {iteration} in time"
    _wait_for_count("node1", f"cat {tracker} 2>/dev/null", iteration, timeout, 0.5, failure)


def rank_pid(node: str, exp: str, rank: int) -> int:
    """The pid, inside its node's training container, of the experiment's rank ``rank`` (by torchrun's RANK)."""
    script = (
        "for p in /proc/[0-9]*; do "
        f"tr '\\0' '\\n' < $p/environ 2>/dev/null | grep -qx 'RANK={rank}' && "
        f"tr '\\0' '\\n' < $p/environ | grep -q '^MTT_TRAIN_OPS_RUN=.*/runs/{exp}/' && "
        "echo ${p#/proc/}; done | sort -n | head -n 1"
    )
    found = in_container(node, script).stdout.strip()
    assert found.isdigit(), f"no process of rank {rank} of {exp} on {node}"
    return int(found)


def wait_for_ssh(address: str, timeout: float = 90) -> None:
    """Until the sshd at ``address`` (a node's, port 22) greets."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((address, 22), timeout=2) as conn:
                if conn.recv(16).startswith(b"SSH-"):
                    return
        except OSError:
            time.sleep(1)
    raise AssertionError(f"{address}:22 did not come back in {timeout} s")


def heal_node2() -> None:
    """Provision once node2, restarted, answers SSH again, and until provision.yml passes (its engine restarts its
    containers on its own time)."""
    wait_for_ssh("172.30.0.12")
    last = None
    for attempt in range(6):
        if attempt:
            time.sleep(5)
        last = playbook("provision.yml")
        if last.returncode == 0:
            return
    raise AssertionError(last.stdout[-4000:])


def inventory_copy(tmp_path: Path, **host_vars: dict) -> Path:
    """A copy of the testbed's inventory with ``host_vars/<host>.yml`` for each host given (the same directory name:
    the same cluster key)."""
    inventory = tmp_path / "testbed"
    shutil.copytree(INVENTORY, inventory, ignore=shutil.ignore_patterns(".ssh"))
    (inventory / "host_vars").mkdir(exist_ok=True)
    for host, values in host_vars.items():
        (inventory / "host_vars" / f"{host}.yml").write_text(yaml.safe_dump(values))
    return inventory


#: Megatron-LM's pretrain_gpt.py on the testbed's real dataset and tokenizer (the plan's defaults there): the tiny
#: preset (grouped-query attention, SwiGLU, untied embeddings) at tp=2 pp=2 over the two nodes' four ranks, 15
#: iterations, validation (2 batches) and a save every 5, retention keeping the newest two (iteration 5 removed).
TP2_PP2_EXP = "megatron-tp2pp2"
TP2_PP2 = (
    "-e", "smoke=false", "-e", "model=tiny", "-e", "seq_length=128", "-e", "gbs=8", "-e", "mbs=2",
    "-e", "num_microbatches=none",  # the inventory's 2 is the smoke job's: the global batch is given here
    "-e", "progress_interval=2", "-e", "tp=2", "-e", "pp=2", "-e", "train_iters=15", "-e", "keep_checkpoints=2",
    "-e", json.dumps({"training": {"save_interval": 5, "eval_interval": 5, "eval_iters": 2}}),
    "-e", f"exp={TP2_PP2_EXP}",
)  # fmt: skip


@functools.cache
def tp2_pp2_run() -> tuple[subprocess.CompletedProcess, Path]:
    """The tp=2 pp=2 run, once per session, and its run directory on the controller: test_export.py exports its
    newest verified save, test_megatron_train.py checks the run end to end."""
    clean_experiment(TP2_PP2_EXP)
    result = playbook("train.yml", *TP2_PP2)
    return result, latest_run(TP2_PP2_EXP) if result.returncode == 0 else ROOT / "runs" / TP2_PP2_EXP


class Webhook(http.server.ThreadingHTTPServer):
    """A JSON webhook receiver (Alertmanager's on loopback; the supervisor's notifications, through Apprise's
    json://, on the testbed network's gateway, which the node containers reach): every notice, as posted."""

    def __init__(self, address: str = "127.0.0.1") -> None:
        self.notices: list[dict] = []
        received = self.notices

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        super().__init__((address, 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()
