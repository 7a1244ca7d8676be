"""Shared by the tests of what the run serves and says (run metrics, card metrics, notifications): a two-node
testbed-like cluster, a real Megatron iteration line and a watch that read it, and the docs' metric tables."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOSTS = [
    {"name": "node1", "ansible_host": "127.0.0.1", "slots": 2, "accelerator": "cpu"},
    {"name": "node2", "ansible_host": "127.0.0.2", "slots": 2, "accelerator": "cpu"},
]
LINE = (
    "[2026-11-30 06:00:42.457] iteration       12/      20 | consumed samples:           96 | elapsed time per "
    "iteration (ms): 250.0 | throughput per GPU (TFLOP/s/GPU): 0.5 | learning rate: 3.000000E-03 | global "
    "batch size:     8 | lm loss: 5.520555E+00 | loss scale: 1.0 | grad norm: 0.353 | number of skipped "
    "iterations:   0 | number of nan iterations:   0 |\n"
)


def watched(plan: dict) -> dict:
    """A watch's result after one probe that read :data:`LINE` (iteration 12 of 20) from rank 3's log."""
    from trainops.watch import Watcher, WatchRequest

    watcher = Watcher(WatchRequest(plan=plan, probe="/w/probe.sh", programs="/w"), started=0.0)
    size = len(LINE.encode())
    nodes = "node\tnode1\trunning\t11\nnode\tnode2\trunning\t12\n"
    watcher.on_probe({"rc": 0, "stdout": f"{nodes}log\t/w/logs/rank3.log\t{size}\t{size}\t0\t0\n{LINE}"}, now=30.0)
    return watcher.result(40.0)


def documented_labels(name: str, kind: str) -> list[str] | None:
    """The labels docs/monitoring.md's table lists for metric ``name`` of type ``kind`` (None: no such row)."""
    docs = (ROOT / "docs" / "monitoring.md").read_text()
    row = re.search(rf"^\| `{name}` \| {kind} \| ([^|]+) \|", docs, re.M)
    return [label.strip(" `") for label in row.group(1).split(",")] if row else None
