"""How fast a frozen rank is named, and what watching costs a healthy run, on the 2-node testbed.

    . .venv/bin/activate; make testbed-up; ansible-playbook -i inventory/testbed provision.yml
    python benchmarks/hang_detection.py [--repeat 3] [--iters 1500]

1. **Detection latency** (``--repeat`` rounds): train.yml runs the smoke job (the testbed inventory's
   ``hang_timeout`` is 30 s); once the last rank has printed 20 iterations, global rank 2 (node2, local rank 0)
   gets SIGSTOP. Two latencies, by the controller's clock: from that signal to the watcher's
   ``hang/diagnosis.json`` on the controller (the culprit named, its evidence written, and printed at once: the
   output must name node2 rank 2 before the first stop task), and from the signal to train.yml's exit (failed).
2. **Cost of watching**: the same smoke job of ``--iters`` iterations, in alternating rounds, watched
   (``train.yml``: a probe every 5 s, straggler and hang checks) and not (``train.yml -e wait=false``, the run
   left alone until its torchruns exit, then ``report.yml``). Each round's median step time (after warm-up)
   comes from its summary.json; the cost is the ratio of the medians of the rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from testbed import BIN, INVENTORY, SMALL, env, in_container, latest_run, rank_pid  # noqa: E402

NODES = ("node1", "node2")


def playbook(*args: str, wait: bool = True, out=subprocess.DEVNULL) -> subprocess.Popen | subprocess.CompletedProcess:
    cmd = [str(BIN / "ansible-playbook"), "-i", str(INVENTORY), *args]
    if not wait:
        return subprocess.Popen(cmd, cwd=ROOT, env=env(), stdout=out, stderr=subprocess.STDOUT)
    return subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=3600)


def iterations(exp: str) -> int:
    log = f"/data/mtt-train-ops/runs/{exp}/*/logs/node2/*/attempt_0/1/stdout.log"
    out = in_container("node2", f"cat {log} 2>/dev/null | grep -c ' iteration '", check=False).stdout.strip()
    return int(out) if out.isdigit() else 0


def detection(round_: int, output: Path) -> tuple[float, float]:
    """Seconds from the SIGSTOP to the culprit named, and to train.yml's exit."""
    exp = f"bench-hang-{round_}-{int(time.time())}"  # a new experiment: no earlier run's logs or checkpoints
    with output.open("w") as out:
        job = playbook(
            "train.yml", *SMALL, "-e", "train_iters=100000", "-e", f"exp={exp}", "-e", "fresh=true", wait=False, out=out
        )
        try:
            while iterations(exp) < 20:
                time.sleep(0.5)
            pid = rank_pid("node2", exp, 2)
            in_container("node2", f"kill -STOP {pid}")
            frozen = time.time()
            rc = job.wait(timeout=600)
            ended = time.time()
        finally:
            job.kill()
    if rc == 0:
        raise SystemExit(f"round {round_}: train.yml did not fail on the frozen rank (see {output})")
    diagnosis = latest_run(exp) / "hang" / "diagnosis.json"
    culprit = json.loads(diagnosis.read_text())["culprits"][0]
    if (culprit["node"], culprit["rank"]) != ("node2", 2):
        raise SystemExit(f"round {round_}: the wrong culprit was named: {culprit}")
    text = output.read_text()
    printed, stop = text.find("culprit node2 rank 2"), text.find("Stop what is left")
    if printed < 0 or (stop >= 0 and stop < printed):
        raise SystemExit(f"round {round_}: the culprit was not printed before the stop (see {output})")
    return diagnosis.stat().st_mtime - frozen, ended - frozen


def step_median(exp: str, watched: bool, iters: int) -> float:
    extra = ["-e", f"train_iters={iters}", "-e", f"exp={exp}", "-e", "fresh=true"]  # a rerun starts at 1
    if watched:
        done = playbook("train.yml", *SMALL, *extra)
        if done.returncode:
            raise SystemExit(done.stdout[-3000:])
    else:
        started = playbook("train.yml", *SMALL, *extra, "-e", "wait=false")
        if started.returncode:
            raise SystemExit(started.stdout[-3000:])
        run = f"/data/mtt-train-ops/runs/{exp}/{latest_run(exp).name}/exit"  # this run, not an earlier one
        while any(in_container(n, f"ls {run}/{n}.rc", check=False).returncode for n in NODES):
            time.sleep(1)
        rebuilt = playbook("playbooks/report.yml", "-e", json.dumps({"run": str(latest_run(exp))}))
        if rebuilt.returncode:
            raise SystemExit(rebuilt.stdout[-3000:])
    summary = json.loads((latest_run(exp) / "summary.json").read_text())
    return summary["step_time_ms"]["median"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--iters", type=int, default=1500)
    parser.add_argument("--only", choices=("detection", "watching"), help="run one of the two measurements")
    args = parser.parse_args()
    if args.only != "watching":
        latencies, failures = [], []
        for round_ in range(1, args.repeat + 1):
            named, failed = detection(round_, Path(f"/tmp/hang-detection-{round_}.log"))
            latencies.append(named)
            failures.append(failed)
            print(
                f"detection round {round_}: {named:.1f} s from SIGSTOP to the culprit named and printed, "
                f"{failed:.1f} s to train.yml's failure",
                flush=True,
            )
        print(
            f"detection median: {statistics.median(latencies):.1f} s to the culprit, "
            f"{statistics.median(failures):.1f} s to the failure (hang_timeout 30 s)",
            flush=True,
        )
    if args.only == "detection":
        return
    watched, alone = [], []
    for round_ in range(1, args.repeat + 1):
        for is_watched, into in ((True, watched), (False, alone)):
            exp = f"bench-watch-{'on' if is_watched else 'off'}-{round_}"
            into.append(step_median(exp, is_watched, args.iters))
            print(f"round {round_} {'watched' if is_watched else 'alone  '}: median step {into[-1]:.2f} ms", flush=True)
    on, off = statistics.median(watched), statistics.median(alone)
    ratios = [w / a for w, a in zip(watched, alone, strict=True)]  # each round's pair ran back to back
    print(f"median step time: watched {on:.2f} ms, alone {off:.2f} ms, ratio {on / off:.3f}")
    print(f"per-round ratios {', '.join(f'{r:.3f}' for r in ratios)}; mean {statistics.mean(ratios):.3f}")


if __name__ == "__main__":
    main()
