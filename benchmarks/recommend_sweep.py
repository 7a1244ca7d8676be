"""Time the recommend sweep (every valid tp/pp/vpp/mbs layout, ranked) on 16 and 1024 cards.

    python benchmarks/recommend_sweep.py [--repeat 5]

Prints the best of N wall times per case and the number of layouts ranked; the
issue's target is under 1 s per sweep. Results are recorded in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

from trainops.backend import load_profiles  # noqa: E402
from trainops.cluster import uniform_cluster  # noqa: E402
from trainops.layout import LayoutRequest, split_stages  # noqa: E402
from trainops.model import model_from_dict  # noqa: E402
from trainops.recommend import recommend  # noqa: E402

CASES = [
    ("llama3-8b", 2, 8, 1024),
    ("llama3-8b", 128, 8, 4096),
    ("llama3-70b", 128, 8, 4096),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{'model':<11} {'cards':>5} {'gbs':>5} {'layouts':>7} {'fit':>5} {'best s':>8} {'cold s':>8}")
    for name, nodes, slots, gbs in CASES:
        model = model_from_dict(yaml.safe_load((ROOT / "models" / f"{name}.yml").read_text()))
        cluster = uniform_cluster(nodes, slots, load_profiles(str(ROOT / "backends")))
        times = []
        for i in range(args.repeat):
            if i == 0:
                split_stages.cache_clear()  # the first run pays for every stage split
            start = time.perf_counter()
            ranked = recommend(model, cluster, LayoutRequest(), gbs)
            times.append(time.perf_counter() - start)
        fit = sum(r.fits for r in ranked)
        print(
            f"{name:<11} {cluster.world_size:>5} {gbs:>5} {len(ranked):>7} {fit:>5} {min(times):>8.3f} {times[0]:>8.3f}"
        )


if __name__ == "__main__":
    main()
