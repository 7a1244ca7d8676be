"""What verifying each checkpoint costs a Megatron run on the 2-node testbed, and how soon a save gets its verdict
(issue 23 item 7).

    . .venv/bin/activate; make megatron-src MEGATRON_TARBALL=...; make testbed-up
    ansible-playbook -i inventory/testbed provision.yml
    python benchmarks/checkpoint_verify.py [--rounds 4] [--iters 60]

Megatron-LM's pretrain_gpt.py, the tiny preset on mock data, tp1 pp2 dp2, a torch_dist save every 5 iterations,
run through train.yml with ``-e verify_checkpoints=true`` and ``false`` in turn (alternating, so that a drift of
the machine's speed falls on both). Per run: Megatron's own median step time (summary.json, after the warm-up
iterations) and, with verification, each save's time from its files' mtime to the watcher's verdict
(``checkpoint_ledger``: ``judged_at - mtime``). The figure to read is the ratio of the medians, measured in one run
of this script; timings on these machines are noisy.
"""

from __future__ import annotations

import argparse
import json
import statistics

from train_lifecycle import ROOT, in_container, playbook

EXP = "bench-ckpt-verify"
MEGATRON = (
    "-e", "smoke=false", "-e", "model=tiny", "-e", "data_path=mock", "-e", "seq_length=128", "-e", "gbs=8",
    "-e", "mbs=2", "-e", "num_microbatches=none", "-e", "tp=1", "-e", "pp=2", "-e", f"exp={EXP}",
    "-e", json.dumps({"training": {"save_interval": 5, "eval_iters": 0}}),
)  # fmt: skip


def one_run(verify: bool, iters: int) -> dict:
    in_container("node1", f"rm -rf /data/mtt-train-ops/checkpoints/{EXP}")
    result = playbook("train.yml", *MEGATRON, "-e", f"train_iters={iters}", "-e", f"verify_checkpoints={verify}")
    if result.returncode != 0:
        raise SystemExit(f"train.yml failed:\n{result.stdout[-4000:]}")
    run = max((ROOT / "runs" / EXP).iterdir(), key=lambda p: p.name)
    summary = json.loads((run / "summary.json").read_text())
    saves = ((summary.get("checkpoint_ledger") or {}).get("saves")) or []
    lags = [s["judged_at"] - s["mtime"] for s in saves if s.get("judged_at") and s.get("mtime")]
    return {
        "verify": verify,
        "step_ms": summary["step_time_ms"]["median"],
        "saves": len(summary["checkpoints"]["saved"]),
        "bytes": max((s["bytes"] for s in saves), default=0),
        "lags": lags,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=4, help="runs with and without verification, each")
    parser.add_argument("--iters", type=int, default=60, help="train_iters of each run")
    args = parser.parse_args()
    runs = []
    for k in range(args.rounds):
        for verify in (True, False) if k % 2 == 0 else (False, True):
            run = one_run(verify, args.iters)
            runs.append(run)
            print(f"round {k + 1} verify={str(verify).lower():<5} step {run['step_ms']:.1f} ms, {run['saves']} saves")
    on = [r["step_ms"] for r in runs if r["verify"]]
    off = [r["step_ms"] for r in runs if not r["verify"]]
    lags = [lag for r in runs for lag in r["lags"]]
    size = max(r["bytes"] for r in runs) / 2**20
    print(f"median step time: {statistics.median(on):.1f} ms verifying, {statistics.median(off):.1f} ms not, "
          f"ratio {statistics.median(on) / statistics.median(off):.3f}")  # fmt: skip
    print(f"  spread without verification {min(off):.1f}-{max(off):.1f} ms, with {min(on):.1f}-{max(on):.1f} ms")
    if lags:
        print(f"save to verdict: median {statistics.median(lags):.1f} s, max {max(lags):.1f} s over {len(lags)} saves "
              f"of {size:.2f} MiB")  # fmt: skip


if __name__ == "__main__":
    main()
