"""What the run's metrics endpoint costs (issue 36 item 9), on the 2-node testbed.

    . .venv/bin/activate; make testbed-up; ansible-playbook -i inventory/testbed provision.yml
    python benchmarks/metrics_cost.py [--rounds 3] [--iterations 3000] [--scrapes 200]

Each round runs the smoke job (tp=1 pp=1, the testbed's default job) twice through train.yml, in turn: once with
the default ``metrics_port`` (9465: the supervisor serves the endpoint) and once with ``-e metrics_port=0`` (none).
While the first runs, this machine (the controller, as a Prometheus server would) scrapes the endpoint
``--scrapes`` times, 0.1 s apart, and times each whole request. The step time of each run is the median
``elapsed time per iteration`` of its report (summary.json), so the ratio with/without compares the training
itself, measured in the same round on the same machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import urllib.request

from train_lifecycle import ROOT, playbook

URL = "http://172.30.0.11:9465/metrics"


def scrape_while_running(count: int, times: list[float], stop: threading.Event) -> None:
    """Scrape the endpoint ``count`` times once it answers, each whole request timed (seconds)."""
    while not stop.is_set() and len(times) < count:
        started = time.perf_counter()
        try:
            text = urllib.request.urlopen(URL, timeout=5).read().decode()
        except OSError:
            time.sleep(0.5)  # not up yet (the supervisor starts with the launch), or already gone
            continue
        if "trainops_iteration{" in text:
            times.append(time.perf_counter() - started)
        time.sleep(0.1)


def run(exp: str, iterations: int, *extra: str) -> float:
    """One smoke run to its end; its median step time in ms, from its report."""
    done = playbook("train.yml", "-e", "tp=1", "-e", "pp=1", "-e", f"train_iters={iterations}", "-e", f"exp={exp}",
                    *extra)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(done.stdout[-3000:])
    runs = sorted((ROOT / "runs" / exp).iterdir())
    summary = json.loads((runs[-1] / "summary.json").read_text())
    return float(summary["step_time_ms"]["median"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=3000)
    parser.add_argument("--scrapes", type=int, default=200)
    args = parser.parse_args()
    if playbook("stop.yml").returncode != 0:
        raise SystemExit("stop.yml failed: is the testbed provisioned?")
    ratios, scrapes, stamp = [], [], int(time.time())
    for round_ in range(args.rounds):
        times: list[float] = []
        stop = threading.Event()
        scraper = threading.Thread(target=scrape_while_running, args=(args.scrapes, times, stop))
        scraper.start()
        try:
            served = run(f"bench-metrics-on-{stamp}-{round_}", args.iterations)
        finally:
            stop.set()
            scraper.join()
        silent = run(f"bench-metrics-off-{stamp}-{round_}", args.iterations, "-e", "metrics_port=0")
        ratios.append(served / silent)
        scrapes += times
        print(json.dumps({"round": round_ + 1, "step_ms_with": served, "step_ms_without": silent,
                          "ratio": round(served / silent, 3), "scrapes": len(times),
                          "scrape_ms_median": round(statistics.median(times) * 1000, 1) if times else None}),
              flush=True)  # fmt: skip
    scrapes.sort()
    print(f"\nstep time with / without the endpoint, per round: {', '.join(f'{r:.3f}' for r in ratios)}; "
          f"median {statistics.median(ratios):.3f}")  # fmt: skip
    if scrapes:
        p99 = scrapes[min(len(scrapes) - 1, int(len(scrapes) * 0.99))]
        print(f"scrapes: {len(scrapes)}, median {statistics.median(scrapes) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, "
              f"max {scrapes[-1] * 1000:.1f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
