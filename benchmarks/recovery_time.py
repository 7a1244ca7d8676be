"""Time to recover on the 2-node testbed: a rank SIGKILLed mid-run to the first iteration of the next attempt, with
no controller: the run's supervisor on the cluster restarts it.

    . .venv/bin/activate; make testbed-up; ansible-playbook -i inventory/testbed provision.yml
    python benchmarks/recovery_time.py [--repeat 3]

For each repetition, in one run (so the numbers compare like with like):

* ``job alone``: the smoke job's own start-up, torchrun started by hand in both containers to the first iteration
  line of the last rank (as benchmarks/train_lifecycle.py measures it);
* ``recovery``: train.yml with ``-e wait=false -e max_restarts=1`` and a checkpoint every 5 iterations (the
  controller returns once the supervisor has launched the run: nothing of the controller takes part); once
  checkpoint 5 is written, rank 3 (node2) is killed with SIGKILL; from the kill to the first iteration line of
  attempt 2's last rank (its log is polled in the container every 0.2 s);
* the supervisor's own part of it, from its events' timestamps (the containers share this machine's clock):
  ``to noticed``, the kill to its line ``supervisor: attempt 1 ended failed`` (the watch's verdict: torchrun's
  own exit after its rank's death, then the next probe, every ``poll_interval``, 5 s); ``to relaunch``, the kill
  to its line ``attempt 2 begins`` (noticing, the stop of what is left, gathering the logs, the health check, the
  judgement, the resume choice, setting the attempt aside); ``torchrun's exit``, the kill to node2's exit status
  file (torchrun noticing its rank's death: the launcher's, not the bundle's); the supervisor's part is from that
  exit to its relaunch (the next probe, every ``poll_interval``, 5 s, and the steps after a failure); the rest is
  the fan-out and the job's own start-up.

Targets (issue 35 item 7): the bundle's part (``to relaunch``) 5 s or less; issue 11: the whole, less the job's own
start-up, under 60 s.
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


def _events(runs: str) -> list[dict]:
    """The run's supervisor's events (its master is node1), each ``{"t": wall clock, "line": text}``."""
    found = in_container("node1", f"cat {runs}/*/supervisor/events").stdout
    return [json.loads(row) for row in found.splitlines() if row.startswith('{"t"')]


def _said(events: list[dict], start: str) -> float:
    """When the supervisor said the first line that starts with ``start``."""
    found = [event["t"] for event in events if event["line"].startswith(start)]
    if not found:
        raise SystemExit(f"the supervisor did not say '{start}...' after the kill: {[e['line'] for e in events][:20]}")
    return found[0]


def recovery(round_: int) -> tuple[float, float, float, float]:
    """Seconds from the SIGKILL of a rank to: torchrun's exit on node2, the supervisor's verdict, its launch of
    attempt 2, attempt 2's first iteration line."""
    exp = f"bench-recover-{round_}-{int(time.time())}"
    runs = f"/data/mtt-train-ops/runs/{exp}"
    tracker = f"/data/mtt-train-ops/checkpoints/{exp}/latest_checkpointed_iteration.txt"
    job = subprocess.Popen(
        [str(BIN / "ansible-playbook"), "-i", "inventory/testbed", "train.yml", "-e", "tp=1", "-e", "pp=1",
         "-e", "train_iters=100000", "-e", f"exp={exp}", "-e", "max_restarts=1", "-e", "wait=false",
         "-e", json.dumps({"training": {"save_interval": 5}})],
        cwd=ROOT, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        _wait(lambda: in_container("node1", f"grep -qs . {tracker}").returncode == 0, "checkpoint 5")
        if job.wait(timeout=300) != 0:
            raise SystemExit("train.yml -e wait=false failed")
        in_container("node2", "kill -9 $(pgrep -n -f 'python3 -u .*smoke_trai[n].py')")
        killed, killed_at = time.monotonic(), time.time()
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
        # torchrun's exit on node2: its exit status file (set aside with attempt 1's files, its time kept)
        status = f"{runs}/*/attempt-1/exit/node2.rc"
        exited = float(in_container("node2", f"stat -c %.3Y {status}").stdout.split()[0]) - killed_at
        events = [event for event in _events(runs) if event["t"] >= killed_at]
        noticed = _said(events, "supervisor: attempt 1 ended failed") - killed_at
        relaunched = _said(events, "attempt 2 begins") - killed_at
        return exited, noticed, relaunched, first - killed
    finally:
        playbook("stop.yml")
        job.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if playbook("stop.yml").returncode != 0:
        raise SystemExit("stop.yml failed: is the testbed provisioned?")
    rows = []
    for round_ in range(args.repeat):
        alone = job_alone(round_)
        exited, noticed, relaunched, recovered = recovery(round_)
        rows.append((alone, exited, noticed, relaunched, relaunched - exited, recovered, recovered - alone))
        print(
            f"round {round_ + 1}: job alone {alone:5.1f} s | kill to: torchrun's exit {exited:5.1f} s, noticed "
            f"{noticed:5.1f} s, relaunch {relaunched:5.1f} s, attempt 2's first iteration {recovered:5.1f} s | "
            f"the supervisor's part (exit to relaunch) {relaunched - exited:5.1f} s | less the job alone "
            f"{recovered - alone:5.1f} s",
            flush=True,
        )
    medians = [statistics.median(col) for col in zip(*rows, strict=True)]
    alone, exited, noticed, relaunched, bundle, recovered, added = medians
    print(
        f"median : job alone {alone:5.1f} s | torchrun's exit {exited:5.1f} s | noticed {noticed:5.1f} s | relaunch "
        f"{relaunched:5.1f} s | the supervisor's part {bundle:5.1f} s (target <= 5) | first iteration "
        f"{recovered:5.1f} s | less the job alone {added:5.1f} s (target < 60)"
    )


if __name__ == "__main__":
    main()
