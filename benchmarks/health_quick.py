"""Wall time of the health check on the testbed, as the nodes grow (issue 22: the quick level under 10 s on the
testbed, growing less than linearly with the nodes; and the full level's).

    . .venv/bin/activate; make testbed-up; ansible-playbook -i inventory/testbed provision.yml
    python benchmarks/health_quick.py [--repeat 5] [--level full [--burn-in-s 10]]

On the testbed as it stands (its node count is whatever testbed/up.yml made: TESTBED_NODES=4 make testbed-up,
then provision.yml, for four): the whole of playbooks/health.yml as a user runs it (the input check, reaching
every node, the facts in one pass per node, the verdicts on the controller), once to warm up and then
``--repeat`` times, each recorded in a scratch ``-e health_dir`` (every node must have a verdict). It prints the
median, the spread and the time per node: a check that grows less than linearly has a falling time per node as
nodes are added.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from train_lifecycle import playbook


def one_check(health_dir: str, level: str, burn_in_s: float) -> tuple[float, int]:
    started = time.monotonic()
    extra = ("-e", f"level={level}", "-e", f"health_burn_in_s={burn_in_s}") if level == "full" else ()
    done = playbook("playbooks/health.yml", "-e", f"health_dir={health_dir}", *extra)
    took = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"health.yml failed:\n{done.stdout[-3000:]}")
    record = json.loads(sorted(Path(health_dir).glob("*/health.json"))[-1].read_text())
    return took, len(record["verdicts"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--level", choices=("quick", "full"), default="quick")
    parser.add_argument("--burn-in-s", type=float, default=10.0, help="each card's burn-in at the full level")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as health_dir:
        one_check(health_dir, args.level, args.burn_in_s)  # warm: ssh control masters, the controller's caches
        runs = [one_check(health_dir, args.level, args.burn_in_s) for _ in range(args.repeat)]
    times = [t for t, _ in runs]
    nodes = runs[0][1]
    median = statistics.median(times)
    print(
        f"nodes {nodes}: health.yml -e level={args.level} median {median:.1f} s (min {min(times):.1f}, "
        f"max {max(times):.1f}, {args.repeat} runs), {median / nodes:.2f} s per node"
    )


if __name__ == "__main__":
    main()
