"""The run's supervisor on the testbed: the watch of an attempt runs in the master's training container, and the
controller only follows it, so that a fault of the controller's own path to the nodes is not a fault of the run.

The fault is real: every SSH packet from this machine (the controller) to the nodes is answered with a TCP reset by
iptables (what a laptop that changes network, or a VPN that reconnects, does to open connections), for 20 s in the
middle of a run. Before the supervisor, train.yml called the master lost, ended a healthy run ``failed`` and
recorded ``lost`` incidents against both nodes while their ranks trained on unwatched.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import time

import pytest

from testbed import ROOT, clean_experiment, in_container, latest_run, playbook, train_in_background

pytestmark = pytest.mark.testbed

#: The controller's SSH to the nodes (inventory/testbed: ansible_host 172.30.0.1N, port 22), and nothing else:
#: the nodes' own traffic to each other, and the tests' docker exec, do not pass this machine's OUTPUT chain.
CONTROLLER_SSH = ["OUTPUT", "-p", "tcp", "-d", "172.30.0.0/24", "--dport", "22", "-j", "REJECT",
                  "--reject-with", "tcp-reset"]  # fmt: skip


@contextlib.contextmanager
def controller_ssh_reset():
    subprocess.run(["iptables", "-I", *CONTROLLER_SSH], check=True)
    try:
        yield
    finally:
        subprocess.run(["iptables", "-D", *CONTROLLER_SSH], check=True)


def test_the_controllers_ssh_reset_for_20_s_mid_run_stops_nothing_and_blames_no_node(provisioned, tmp_path):
    exp = "controller-reset"
    clean_experiment(exp)
    log = tmp_path / "train.out"
    # Defaults overridden, and why: train_wait (default 86,400 s) bounds how long this terminal follows the run, a
    # run of 100,000 iterations that goes on after it; max_restarts=1 (default 0) so that a wrongly failed attempt
    # would be restarted, and the single attempt asserted below proves none was. Every default as rendered runs in
    # test_megatron_defaults.py.
    job = train_in_background("-e", "train_iters=100000", "-e", "train_wait=70", "-e", "max_restarts=1",
                              "-e", f"exp={exp}", output=log)  # fmt: skip
    try:
        # mid-run: the supervisor watches and this terminal follows it (its first progress line is printed)
        deadline = time.monotonic() + 240
        while not re.search(r"iteration \d+/100000", log.read_text()) and time.monotonic() < deadline:
            assert job.poll() is None, log.read_text()[-4000:]
            time.sleep(1)
        with controller_ssh_reset():
            # the reset is real: the controller's own SSH to node1 is refused meanwhile
            refused = playbook("playbooks/status.yml", timeout=120)
            assert refused.returncode != 0 and "node1" in refused.stdout, refused.stdout[-3000:]
            time.sleep(20)
        job.wait(timeout=300)
        output = log.read_text()
        assert job.returncode == 0, output[-5000:]
        lost = output.index("no answer from the master's container")
        again = re.search(r"node1: the master answers again, after \d+ s", output)
        assert again and again.start() > lost, output[-5000:]
        # the ranks trained on through the reset, watched on the cluster: progress after contact came back
        before = [int(n) for n in re.findall(r"iteration (\d+)/100000", output[:lost])]
        after = [int(n) for n in re.findall(r"iteration (\d+)/100000", output[again.end() :])]
        assert before and after and min(after) > max(before), output[-5000:]
        # no restart, no failure: one attempt, still running when this terminal stopped following it
        attempts = json.loads((latest_run(exp) / "attempts.json").read_text())
        assert attempts["current"]["number"] == 1 and attempts["current"]["outcome"]["state"] == "running", attempts
        assert attempts["records"] == [] and "attempt 2" not in output
        assert not (ROOT / "runs" / "incidents.jsonl").exists() or not (ROOT / "runs" / "incidents.jsonl").read_text()
        # the supervisor watches on after train.yml returned; the ranks are still training
        supervised = in_container("node1", f"cat /data/mtt-train-ops/runs/{exp}/*/supervisor/watch-1.pid").stdout
        assert in_container("node1", f"test -d /proc/{supervised.strip()}", check=False).returncode == 0
    finally:
        job.kill()
        stop = playbook("stop.yml")
        assert stop.returncode == 0, stop.stdout[-3000:]
