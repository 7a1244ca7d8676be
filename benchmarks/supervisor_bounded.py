"""The run's supervisor over a long run on the 2-node testbed: its memory and its files, per 10,000 iterations.

    . .venv/bin/activate; make testbed-up; ansible-playbook -i inventory/testbed provision.yml
    python benchmarks/supervisor_bounded.py [--iterations 30000] [--every 20]

train.yml starts the smoke job (tp=1 pp=1, the testbed's default job) for ``--iterations`` iterations with
``-e wait=false``: the supervisor is started in node1's training container and nothing on the controller follows.
Every ``--every`` seconds this samples, from the container: the supervisor's resident memory (VmRSS in
/proc/PID/status), the bytes of each of its files (``<run_dir>/supervisor/``), and the last iteration of its
snapshot. The options the watch runs with are the defaults a user gets (progress_interval 30 s, poll_interval 5 s,
verify_checkpoints true), so its events grow as a real run's would per hour; per 10,000 iterations they depend on
the step time (the smoke job's is milliseconds; Llama3-8B's is seconds), which is why both rates are printed.

The growth is the slope of a least-squares line through the samples after the first minute (start-up and the
first checkpoint scan allocate once), per 10,000 iterations and per hour.
"""

from __future__ import annotations

import argparse
import json
import time

from train_lifecycle import in_container, playbook


def sample(run_dir: str) -> dict[str, float] | None:
    """One look at the supervisor in node1's container; None once it has no live process."""
    script = (
        f"d={run_dir}/supervisor; pid=$(cat $d/pid 2>/dev/null) || exit 3; "
        "grep VmRSS /proc/$pid/status || exit 3; stat -c '%n %s' $d/* $d/run/attempts.json; "
        'python3 -c \'import json,sys; print("progress", (json.load(open(sys.argv[1])).get("last_iteration") '
        'or {}).get("iteration"))\' '
        "$d/snapshot.json 2>/dev/null || echo progress None"
    )
    done = in_container("node1", script)
    if done.returncode != 0:
        return None
    found = {"t": time.monotonic()}
    for line in done.stdout.splitlines():
        parts = line.split()
        if parts[0] == "VmRSS:":
            found["rss_kib"] = float(parts[1])
        elif parts[0] == "progress":
            found["iteration"] = float(parts[1]) if parts[1] != "None" else 0.0
        elif len(parts) == 2:
            found[parts[0].rsplit("/", 1)[1]] = float(parts[1])
    found["files_bytes"] = sum(v for k, v in found.items() if k not in ("t", "rss_kib", "iteration", "run"))
    return found


def slope(xs: list[float], ys: list[float]) -> float:
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread if spread else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=30000)
    parser.add_argument("--every", type=float, default=20.0)
    args = parser.parse_args()
    if playbook("stop.yml").returncode != 0:
        raise SystemExit("stop.yml failed: is the testbed provisioned?")
    exp = f"bench-bounded-{int(time.time())}"
    started = playbook("train.yml", "-e", "tp=1", "-e", "pp=1", "-e", f"train_iters={args.iterations}",
                       "-e", f"exp={exp}", "-e", "wait=false")  # fmt: skip
    if started.returncode != 0:
        raise SystemExit(started.stdout[-3000:])
    run_dir = in_container("node1", f"ls -d /data/mtt-train-ops/runs/{exp}/*").stdout.strip()
    samples: list[dict[str, float]] = []
    try:
        deadline = time.monotonic() + 120  # the supervisor's first sample: it starts with the launch
        while True:
            seen = sample(run_dir)
            if seen is None and not samples and time.monotonic() < deadline:
                time.sleep(2)
                continue
            if seen is None:
                break
            samples.append(seen)
            print(json.dumps({k: round(v, 1) for k, v in seen.items() if k != "t"}), flush=True)
            time.sleep(args.every)
    finally:
        playbook("stop.yml")
    t0 = samples[0]["t"]
    steady = [s for s in samples if s["t"] - t0 >= 60 and s.get("iteration")]
    if len(steady) < 3:
        raise SystemExit(f"too few samples after the first minute: {len(steady)}")
    iterations = [s["iteration"] for s in steady]
    hours = [(s["t"] - t0) / 3600 for s in steady]
    names = ["rss_kib", "files_bytes"] + sorted(
        k for k in steady[-1] if k not in ("t", "rss_kib", "iteration", "run", "files_bytes")
    )
    print(f"\n{len(samples)} samples over {(samples[-1]['t'] - t0) / 60:.1f} min, iterations "
          f"{iterations[0]:.0f} to {iterations[-1]:.0f}")  # fmt: skip
    print(f"{'what':<26} {'first':>12} {'last':>12} {'per 10k it':>12} {'per hour':>12}")
    for name in names:
        values = [s.get(name, 0.0) for s in steady]
        print(f"{name:<26} {values[0]:>12.0f} {values[-1]:>12.0f} {slope(iterations, values) * 10_000:>12.0f} "
              f"{slope(hours, values):>12.0f}")  # fmt: skip
    rates = [b["iteration"] - a["iteration"] for a, b in zip(steady, steady[1:], strict=False)]
    seconds = [b["t"] - a["t"] for a, b in zip(steady, steady[1:], strict=False)]
    print(f"iterations per second: {sum(rates) / sum(seconds):.1f}")
    print("rss in KiB, files in bytes")


if __name__ == "__main__":
    main()
