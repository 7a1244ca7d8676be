"""Wall time of provision.yml on the testbed: cold and warm, 2 and 4 nodes, and what pipelining and
ControlPersist each save.

    .venv/bin/python benchmarks/provision_walltime.py [--sizes 2 4] [--repeat 3]     # as root

For each size: the testbed is rebuilt from scratch (testbed/down.yml, testbed/up.yml: fresh node engines, so
the first provision.yml loads the image into every node: "cold"), then provision.yml runs again ("warm", the
median of --repeat runs, each after the machine has settled), then warm again with the collective checks forced
(-e recheck=true: by default a passing result recorded in the container is reused for an hour), with SSH
pipelining off, and with ControlPersist off. Image building is timed separately (it is cached by recipe hash;
`testbed/build-images.sh --force` rebuilds). Timings are noisy on a 2-core machine: compare the ratios within
one run. Beside each cold and warm time it prints the busy CPU seconds of the whole machine (every node shares
its cores): wall time can not fall below CPU seconds / cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


#: CPU seconds (all cores, every process of the machine: the controller, the node containers and their
#: engines share one kernel) spent during the last timed command.
CPU = {"last": 0.0}


def busy_cpu_seconds() -> float:
    """Seconds of CPU time the whole machine has spent busy (not idle or waiting for I/O) since boot."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def timed(cmd: list[str], extra_env: dict[str, str] | None = None) -> float:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), PATH=f"{BIN}:{os.environ['PATH']}")
    env.update(extra_env or {})
    cpu_start, start = busy_cpu_seconds(), time.perf_counter()
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    CPU["last"] = busy_cpu_seconds() - cpu_start
    if result.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-2000:]}")
    return elapsed


def settle(limit_s: float = 90.0) -> None:
    """Flush the page cache and wait until the machine is quiet (under 15 % busy for a second): a cold run leaves
    gigabytes of image layers to write back, which would otherwise be charged to the next measurement."""
    os.sync()
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        before = busy_cpu_seconds()
        time.sleep(1.0)
        if (busy_cpu_seconds() - before) / (os.cpu_count() or 1) < 0.15:
            return


def median_of(repeat: int, cmd: list[str], extra_env: dict[str, str] | None = None) -> tuple[float, float]:
    """Median wall time and busy CPU seconds of `repeat` runs, each after the machine settled."""
    runs = []
    for _ in range(repeat):
        settle()
        runs.append((timed(cmd, extra_env), CPU["last"]))
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--repeat", type=int, default=3, help="warm runs of each kind (the median is reported)")
    opts = parser.parse_args()
    playbook = [str(BIN / "ansible-playbook"), "-i", "inventory/testbed", "provision.yml"]
    print(f"image build (cached): {timed(['testbed/build-images.sh']):.1f} s")
    rows = []
    for size in opts.sizes:
        timed([str(BIN / "ansible-playbook"), "testbed/down.yml"])
        up = timed([str(BIN / "ansible-playbook"), "testbed/up.yml", "-e", f"testbed_nodes={size}"])
        settle()
        cold = timed(playbook)
        cold_cpu = CPU["last"]
        warm, warm_cpu = median_of(opts.repeat, playbook)
        recheck, _ = median_of(opts.repeat, playbook + ["-e", "recheck=true"])
        no_pipelining, _ = median_of(opts.repeat, playbook, {"ANSIBLE_PIPELINING": "False"})
        no_persist, _ = median_of(opts.repeat, playbook, {"ANSIBLE_SSH_ARGS": "-o ControlMaster=no"})
        rows.append((size, up, cold, warm, recheck, no_pipelining, no_persist, cold_cpu, warm_cpu))
        print(
            f"{size} nodes: up {up:.1f} s, cold {cold:.1f} s ({cold_cpu:.0f} CPU s), warm {warm:.1f} s "
            f"({warm_cpu:.0f} CPU s), "
            f"warm without pipelining {no_pipelining:.1f} s, warm without ControlPersist {no_persist:.1f} s",
            flush=True,
        )
    print()
    print(
        "| nodes | testbed up | provision cold | warm | warm/cold | warm, recheck=true | warm, no pipelining |"
        " warm, no ControlPersist | CPU s cold / warm |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    cores = os.cpu_count()
    for size, up, cold, warm, recheck, nop, nocp, cold_cpu, warm_cpu in rows:
        print(
            f"| {size} | {up:.1f} s | {cold:.1f} s | {warm:.1f} s | {warm / cold:.0%} | {recheck:.1f} s | {nop:.1f} s"
            f" | {nocp:.1f} s | {cold_cpu:.0f} / {warm_cpu:.0f} |"
        )
    print(f"\n(CPU s: busy CPU seconds of the whole machine during the run, {cores} cores)")
    if len(rows) >= 2:
        print(
            f"\n{rows[1][0]} nodes / {rows[0][0]} nodes: cold {rows[1][2] / rows[0][2]:.2f}x, "
            f"warm {rows[1][3] / rows[0][3]:.2f}x"
        )
    timed([str(BIN / "ansible-playbook"), "testbed/up.yml", "-e", "testbed_nodes=2"])


if __name__ == "__main__":
    main()
