"""What a node's card exporter costs (issue 36 item 9): the CPU it takes beside the training, and a scrape's time.

    .venv/bin/python benchmarks/card_exporter_cost.py [--seconds 60] [--scrapes 200]

The exporter (node/card_exporter.py, as provision.yml starts it) runs here, on this machine, with a device tool
that replays a recorded output, for each tool form: mthreads-gmi's table (an 8 x S5000 server) and nvidia-smi's
full query with its process listing (an 8 x H100 server: the largest recorded output, the most to parse). For
``--seconds`` it reads the tool every ``--interval`` seconds (10, its default) while this script scrapes it
``--scrapes`` times, each whole request timed; then the exporter's own CPU seconds (user + system, from
/proc/<pid>/stat) are divided by the wall time. The device tool's own time is not the exporter's: a real
mthreads-gmi or nvidia-smi takes what it takes on any node, with or without the exporter.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXPORTER = ROOT / "plugins" / "module_utils" / "trainops" / "node" / "card_exporter.py"
FIXTURES = ROOT / "tests" / "fixtures"
#: Each tool form: the replay stand-in's script (it prints a recorded output for each argument list the exporter
#: runs).
H100 = FIXTURES / "nvidia-smi" / "h100x8-healthy-565.57.01.txt"
#: The same server's --query-gpu rows: its cards' bus ids as its -q lists them.
H100_ROWS = "\n".join(
    f"{i}, NVIDIA H100 80GB HBM3, {bus}, 81559, 1, 0"
    for i, bus in enumerate(line.split()[1] for line in H100.read_text().splitlines() if line.startswith("GPU 0"))
)
TOOLS = {
    "mthreads-gmi": f'[ "$#" -eq 0 ] && exec cat {FIXTURES}/mthreads-gmi/s5000-x8-gmi2.4.1.txt\nexit 2\n',
    "nvidia-smi": f'case "$1" in -q) exec cat {H100} ;;\n  --query-gpu*) echo "{H100_ROWS}" ;;\n  *) exit 0 ;;\nesac\n',
}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def measure(tool: str, seconds: float, scrapes: int, interval: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        bin_dir = Path(tmp) / "bin"
        bin_dir.mkdir()
        (bin_dir / tool).write_text("#!/bin/sh\n" + TOOLS[tool])
        (bin_dir / tool).chmod(0o755)
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
        port = free_port()
        argv = [sys.executable, str(EXPORTER), "ensure", "--dir", f"{tmp}/state", "--node", "node1",
                "--device-tool", tool, "--port", str(port), "--interval", str(interval)]  # fmt: skip
        answer = json.loads(subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout)
        pid, times = answer["pid"], []
        try:
            start_cpu, start = cpu_seconds(pid), time.monotonic()
            gap = seconds / max(scrapes, 1)
            while time.monotonic() - start < seconds:
                began = time.perf_counter()
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
                if len(times) < scrapes:
                    times.append(time.perf_counter() - began)
                time.sleep(gap)
            wall, used = time.monotonic() - start, cpu_seconds(pid) - start_cpu
        finally:
            subprocess.run([*argv[:-4], "--port", "0"], env=env, capture_output=True, check=False)
        series = sum(1 for line in text.splitlines() if line.startswith("trainops_card_") and "_process_" not in line)
    ms = sorted(t * 1000 for t in times)
    return {"tool": tool, "cards": answer["cards"], "series": series, "cpu_share_of_one_core": used / wall,
            "scrapes": len(ms), "scrape_ms_median": statistics.median(ms),
            "scrape_ms_p99": ms[min(len(ms) - 1, round(0.99 * len(ms)))], "scrape_ms_max": ms[-1]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--scrapes", type=int, default=200)
    parser.add_argument("--interval", type=float, default=10.0)
    args = parser.parse_args()
    for tool in TOOLS:
        print(json.dumps(measure(tool, args.seconds, args.scrapes, args.interval)), flush=True)


if __name__ == "__main__":
    main()
