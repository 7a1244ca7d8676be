"""Time to recover on the 2-node testbed: a rank SIGKILLed mid-run to the first iteration of the next attempt.

    . .venv/bin/activate; make testbed-up; ansible-playbook -i inventory/testbed provision.yml
    python benchmarks/recovery_time.py [--repeat 3]

For each repetition, in one run (so the numbers compare like with like):

* ``job alone``: the smoke job's own start-up, torchrun started by hand in both containers to the first iteration
  line of the last rank (as benchmarks/train_lifecycle.py measures it);
* ``recovery``: train.yml with ``-e max_restarts=1`` and a checkpoint every 5 iterations; once checkpoint 5 is
  written, rank 3 (node2) is killed with SIGKILL; from the kill to the first iteration line of attempt 2's last
  rank (its log is polled in the container every 0.2 s). It includes noticing the failure, stopping what is left,
  collecting and parsing the logs, deciding, checking the nodes, the launch, and the job's own start-up.

``recovery - job alone`` is what train.yml adds. Target (issue 11): under 60 s, excluding the job's own start-up.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time

from train_lifecycle import BIN, ROOT, env, in_container, job_alone, playbook


def _wait(check, what: str, timeout: float = 300) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic()
        time.sleep(0.2)
    raise SystemExit(f"{what}: not after {timeout} s")


def recovery(round_: int) -> float:
    """Seconds from the SIGKILL of a rank to attempt 2's first iteration line."""
    exp = f"bench-recover-{round_}-{int(time.time())}"
    runs = f"/data/mtt-train-ops/runs/{exp}"
    tracker = f"/data/mtt-train-ops/checkpoints/{exp}/latest_checkpointed_iteration.txt"
    job = subprocess.Popen(
        [str(BIN / "ansible-playbook"), "-i", "inventory/testbed", "train.yml", "-e", "tp=1", "-e", "pp=1",
         "-e", "train_iters=100000", "-e", f"exp={exp}", "-e", "max_restarts=1",
         "-e", json.dumps({"training": {"save_interval": 5}})],
        cwd=ROOT, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        _wait(lambda: in_container("node1", f"grep -qs . {tracker}").returncode == 0, "checkpoint 5")
        in_container("node2", "kill -9 $(pgrep -n -f 'python3 -u .*smoke_trai[n].py')")
        killed = time.monotonic()
        log = f"{runs}/*/logs/node2/*/attempt_0/1/stdout.log"
        first = _wait(
            lambda: (
                in_container(
                    "node2", f"ls -d {runs}/*/attempt-1 >/dev/null 2>&1 && grep -qs ' iteration ' {log}"
                ).returncode
                == 0
            ),
            "attempt 2's first iteration",
        )
        return first - killed
    finally:
        playbook("stop.yml")
        job.wait(timeout=600)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if playbook("stop.yml").returncode != 0:
        raise SystemExit("stop.yml failed: is the testbed provisioned?")
    rows = []
    for round_ in range(args.repeat):
        alone = job_alone(round_)
        recovered = recovery(round_)
        rows.append((alone, recovered))
        print(
            f"round {round_ + 1}: job alone {alone:5.1f} s | kill to attempt 2's first iteration {recovered:5.1f} s | "
            f"added by train.yml {recovered - alone:5.1f} s",
            flush=True,
        )
    alone, recovered = (statistics.median(col) for col in zip(*rows, strict=True))
    print(
        f"median : job alone {alone:5.1f} s | recovery {recovered:5.1f} s | added by train.yml "
        f"{recovered - alone:5.1f} s (target < 60)"
    )


if __name__ == "__main__":
    main()
