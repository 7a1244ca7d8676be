"""All-reduce check and bandwidth over torch.distributed, run under torchrun on every node.

mtt-train-ops runs it on the CPU backend (gloo) in place of nccl-tests: every rank
first checks one all-reduce for correctness, then times ``--rounds`` rounds of
``--iters`` all-reduces of ``--bytes``. Rank 0 prints one JSON line: world size,
message size, time per all-reduce (the slowest rank's, in the fastest round),
algorithm and bus bandwidth (nccl-tests' definition: busbw = algbw * 2 * (n - 1) / n)
and the number of wrong elements.

The fastest round is what the node's links can do: a moment of contention from a
neighbour (another container on the host, the other node's check at the same time)
slows one round, while a node that is slow (a CPU quota, a bad link) is slow in
every round.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bytes", type=int, default=16 * 2**20)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--timeout", type=int, default=120)
    opts = parser.parse_args()

    dist.init_process_group(opts.backend, timeout=timedelta(seconds=opts.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    elements = max(1, opts.bytes // 4)

    check = torch.full((elements,), float(rank + 1))
    dist.all_reduce(check)
    expected = world * (world + 1) / 2
    wrong = torch.tensor([int((check != expected).sum())])
    dist.all_reduce(wrong)

    data = torch.ones(elements)
    for _ in range(opts.warmup):
        dist.all_reduce(data)
    rounds = []
    for _ in range(max(1, opts.rounds)):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(opts.iters):
            dist.all_reduce(data)
        elapsed = torch.tensor([(time.perf_counter() - start) / opts.iters])
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # a round takes as long as its slowest rank
        rounds.append(float(elapsed))

    seconds = min(rounds)
    algbw = elements * 4 / seconds / 1e9
    if rank == 0:
        print(
            json.dumps(
                {
                    "backend": opts.backend,
                    "world": world,
                    "bytes": elements * 4,
                    "rounds": len(rounds),
                    "time_us": round(seconds * 1e6, 1),
                    "algbw_gbps": round(algbw, 4),
                    "busbw_gbps": round(algbw * 2 * (world - 1) / world, 4),
                    "wrong": int(wrong),
                }
            ),
            flush=True,
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
