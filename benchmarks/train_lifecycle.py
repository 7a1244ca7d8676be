"""How much train.yml adds to a job's own start-up, and how long stop.yml takes, on the 2-node testbed.

    . .venv/bin/activate; make testbed-up; ansible-playbook -i inventory/testbed provision.yml
    python benchmarks/train_lifecycle.py [--repeat 3]

For each repetition, in one run (so that the ratios compare like with like):

* ``job alone``: torchrun started directly in both training containers (docker exec, no Ansible), from the start
  to the first iteration line of the last rank;
* ``train.yml``: from the start of ``ansible-playbook train.yml -e wait=false`` to the first iteration line of
  the last rank (its log is polled in the container every 0.2 s);
* ``stop.yml``: wall time of ``ansible-playbook stop.yml`` with that job running.

The playbook overhead is ``train.yml - job alone``. Targets (issue 4): overhead <= 15 s, stop <= 15 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
NODES = {"node1": "mtt-node-1", "node2": "mtt-node-2"}
SMOKE = ["--train-iters", "100000", "--global-batch-size", "8", "--seq-length", "128"]
SMOKE += ["--data-path", "/data/datasets/testbed_text_document", "--backend", "gloo"]


def env() -> dict[str, str]:
    return dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), PATH=f"{BIN}:{os.environ['PATH']}")


def in_container(node: str, command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["docker", "exec", NODES[node], "docker", "exec", "train", "sh", "-c", command],
        capture_output=True,
        text=True,
        timeout=120,
    )


def wait_for_iteration(log_glob: str, started: float, timeout: float = 300) -> float:
    """Seconds from ``started`` until the last rank's log (on node2) holds an iteration line."""
    while time.monotonic() - started < timeout:
        if in_container("node2", f"grep -qs ' iteration ' {log_glob}").returncode == 0:
            return time.monotonic() - started
        time.sleep(0.2)
    raise SystemExit(f"no iteration line in {log_glob} after {timeout} s")


def job_alone(round_: int) -> float:
    """torchrun on both nodes by hand, as the runbook did; returns the seconds to the first iteration line."""
    log_dir = f"/tmp/bench-alone-{round_}"
    in_container("node1", "cat > /dev/null")  # warm the exec path
    script = ROOT / "plugins" / "module_utils" / "trainops" / "node" / "smoke_train.py"
    for node in NODES:
        subprocess.run(
            ["docker", "exec", "-i", NODES[node], "docker", "exec", "-i", "train", "sh", "-c", "cat > /tmp/smoke.py"],
            input=script.read_bytes(),
            check=True,
            timeout=60,
        )
    started = time.monotonic()
    for rank, node in enumerate(NODES):
        torchrun = (
            f"rm -rf {log_dir}; setsid -f nohup torchrun --nnodes 2 --nproc_per_node 2 --node_rank {rank} "
            f"--master_addr 172.30.0.11 --master_port 14399 --rdzv_id alone{round_} --max_restarts 0 "
            f"--log_dir {log_dir} --redirects 3 /tmp/smoke.py {' '.join(SMOKE)} > /dev/null 2>&1 < /dev/null"
        )
        in_container(node, torchrun)
    seconds = wait_for_iteration(f"{log_dir}/*/attempt_0/1/stdout.log", started)
    for node in NODES:
        in_container(node, "pkill -f /tmp/smoke.py; true")
    time.sleep(2)
    return seconds


def playbook(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "inventory/testbed", *args],
        cwd=ROOT,
        env=env(),
        capture_output=True,
        text=True,
        timeout=900,
    )


def with_train_yml(round_: int) -> tuple[float, float]:
    """train.yml -e wait=false to the first iteration line; then stop.yml's wall time."""
    exp = f"bench-{round_}"
    in_container("node2", f"rm -rf /data/mtt-train-ops/runs/{exp} /data/mtt-train-ops/checkpoints/{exp}")
    started = time.monotonic()
    result = playbook(
        "train.yml", "-e", "tp=1", "-e", "pp=1", "-e", "train_iters=100000", "-e", "wait=false", "-e", f"exp={exp}"
    )
    if result.returncode != 0:
        raise SystemExit(result.stdout[-3000:])
    seconds = wait_for_iteration(f"/data/mtt-train-ops/runs/{exp}/*/logs/node2/*/attempt_0/1/stdout.log", started)
    begun = time.monotonic()
    stopped = playbook("stop.yml")
    if stopped.returncode != 0:
        raise SystemExit(stopped.stdout[-3000:])
    return seconds, time.monotonic() - begun


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if playbook("stop.yml").returncode != 0:
        raise SystemExit("stop.yml failed: is the testbed provisioned?")
    rows = []
    for round_ in range(args.repeat):
        alone = job_alone(round_)
        train, stop = with_train_yml(round_)
        rows.append((alone, train, stop))
        print(
            f"round {round_ + 1}: job alone {alone:5.1f} s | train.yml {train:5.1f} s | "
            f"overhead {train - alone:5.1f} s | stop.yml {stop:5.1f} s",
            flush=True,
        )
    alone, train, stop = (statistics.median(col) for col in zip(*rows, strict=True))
    print(
        f"median : job alone {alone:5.1f} s | train.yml {train:5.1f} s | overhead {train - alone:5.1f} s "
        f"(target <= 15) | stop.yml {stop:5.1f} s (target <= 15)"
    )


if __name__ == "__main__":
    main()
