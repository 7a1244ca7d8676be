"""mtt-train-ops smoke job: a real launch path with a program of the project's own.

Run under torchrun on every node, in place of Megatron's pretrain_gpt.py: on the CPU testbed, and on a GPU
cluster as a one-minute check before a long run. It

1. initialises torch.distributed (gloo on the CPU; the backend's own, e.g. nccl/mccl, on cards);
2. builds megatron-core's parallel groups for the planned tp/pp/cp (``parallel_state``), and checks an
   all-reduce in every tensor-, pipeline- and data-parallel group: each must sum to its group's size;
3. trains a small real model (token embedding, two MLP blocks, output layer) with data parallelism over
   every rank (DistributedDataParallel), on the Megatron dataset given by ``--data-path`` when megatron-core
   can read it, else on a fixed synthetic sequence;
4. prints, from the last rank as Megatron does, one line per iteration in Megatron's format with measured
   values: elapsed time, throughput (model FLOPs, 6 x parameters x tokens), learning rate, global batch,
   lm loss, loss scale, grad norm, skipped and NaN counts. Device memory lines are printed only on cards
   (a CPU has no allocator statistics to report);
5. saves a checkpoint (``--save``, Megatron's ``iter_NNNNNNN/`` and ``latest_checkpointed_iteration.txt``)
   every ``--save-interval`` iterations and at the end, and resumes from the latest one in ``--load``, so
   that train.yml's auto-resume runs end to end;
6. measures each rank's own compute time per iteration (forward and backward of every micro-batch, without
   the gradient all-reduce, which is done apart and after it), gathers them, and prints from rank 0 Megatron's
   straggler report (``--log-straggler``'s ``MnRtt/Rnk`` line and, with three ranks or more, its ``^^^^
   Bottom/Top`` lines listing every rank's estimated throughput), so that a slow rank is named as in Megatron.

Fault drill: a file ``<run dir>/drill/hang-rank-<R>`` makes global rank R stop making progress at the start
of the next iteration (it sleeps outside any collective, as a rank stuck in its own code would), while the other
ranks wait for it in the iteration's barrier. It exists to rehearse hang detection (``docs/train.md``).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import math
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def _import_parallel_state():
    """megatron.core's own ``parallel_state``, without running the package's ``__init__``: that imports the whole
    model stack (tensor_parallel, transformer, distributed), about 2.8 s of CPU per rank on the testbed's stand-in
    (``python3 -X importtime``), which this job never uses. The package is registered unexecuted, so that its
    submodules (parallel_state, utils, datasets) import from its directory as usual."""
    if "megatron.core" not in sys.modules:
        spec = importlib.util.find_spec("megatron.core")
        if spec is None:
            raise ModuleNotFoundError("No module named 'megatron.core' (the smoke job needs megatron-core)")
        sys.modules["megatron.core"] = importlib.util.module_from_spec(spec)
    from megatron.core import parallel_state  # noqa: PLC0415 - after the package is registered

    return parallel_state


parallel_state = _import_parallel_state()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--pp", type=int, default=1)
    parser.add_argument("--cp", type=int, default=1)
    parser.add_argument("--train-iters", type=int, default=20)
    parser.add_argument("--micro-batch-size", type=int, default=1)
    parser.add_argument("--global-batch-size", type=int, default=0, help="default: mbs x data-parallel size")
    parser.add_argument("--seq-length", type=int, default=128)
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--vocab-size", type=int, default=257)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--data-path", default="", help="Megatron data prefix (.bin/.idx)")
    parser.add_argument("--backend", default="", help="default: gloo on CPU, nccl on cards")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--save", default="", help="checkpoint directory (Megatron's layout: iter_NNNNNNN/)")
    parser.add_argument("--load", default="", help="resume from the latest checkpoint here, when there is one")
    parser.add_argument("--save-interval", type=int, default=0, help="0: only at the end")
    parser.add_argument(
        "--distributed-timeout-minutes", type=float, default=10, help="collective timeout (Megatron's default)"
    )
    return parser.parse_args()


def pick_device(backend: str) -> torch.device:
    """The rank's device: the CPU with gloo, else its card (LOCAL_RANK) through torch.cuda or torch_musa."""
    if backend == "gloo":
        return torch.device("cpu")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if backend == "mccl":
        import torch_musa  # noqa: F401  (registers torch.musa and the mccl backend)

        torch.musa.set_device(local_rank)
        return torch.device("musa", local_rank)
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def check_groups(tp: int, pp: int, cp: int, device: torch.device) -> dict[str, int]:
    """Build Megatron's groups and prove each one with an all-reduce; returns the group sizes."""
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, context_parallel_size=cp
    )
    groups = {
        "tp": parallel_state.get_tensor_model_parallel_group(),
        "pp": parallel_state.get_pipeline_model_parallel_group(),
        "dp": parallel_state.get_data_parallel_group(),
    }
    sizes = {}
    for name, group in groups.items():
        size = dist.get_world_size(group=group)
        probe = torch.ones(1, device=device)
        dist.all_reduce(probe, group=group)
        if int(probe.item()) != size:
            raise RuntimeError(f"all-reduce in the {name} group gave {probe.item()}, expected {size}")
        sizes[name] = size
    return sizes


class TinyLM(torch.nn.Module):
    def __init__(self, vocab: int, hidden: int):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, hidden)
        self.blocks = torch.nn.Sequential(
            torch.nn.Linear(hidden, 4 * hidden),
            torch.nn.GELU(),
            torch.nn.Linear(4 * hidden, hidden),
            torch.nn.Linear(hidden, 4 * hidden),
            torch.nn.GELU(),
            torch.nn.Linear(4 * hidden, hidden),
        )
        self.out = torch.nn.Linear(hidden, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(self.blocks(self.embed(tokens)))


def token_source(data_path: str, vocab: int, seed: int):
    """Yield token tensors of any length: from a Megatron dataset when possible, else synthetic."""
    tokens = None
    if data_path:
        from megatron.core.datasets.indexed_dataset import IndexedDataset

        dataset = IndexedDataset(data_path)
        tokens = torch.cat([torch.from_numpy(dataset[i].astype("int64")) for i in range(len(dataset))])
        tokens = tokens.clamp(max=vocab - 1)
    if tokens is None:
        generator = torch.Generator().manual_seed(seed)
        tokens = torch.randint(0, vocab, (1 << 16,), generator=generator)
    return tokens


TRACKER = "latest_checkpointed_iteration.txt"  # Megatron's name for the latest iteration's marker


def load_checkpoint(directory: str, rank: int) -> dict | None:
    """Rank 0 reads the latest checkpoint (when there is one) and broadcasts it to every rank."""
    state = [None]
    if rank == 0 and directory and os.path.isfile(os.path.join(directory, TRACKER)):
        with open(os.path.join(directory, TRACKER)) as handle:
            iteration = int(handle.read().strip())
        path = os.path.join(directory, f"iter_{iteration:07d}", "smoke.pt")
        print(f" loading checkpoint from {directory} at iteration {iteration}", flush=True)
        state[0] = torch.load(path, map_location="cpu", weights_only=False)
    dist.broadcast_object_list(state, src=0)
    return state[0]


def save_checkpoint(directory: str, iteration: int, consumed: int, model, optimizer) -> None:
    """Rank 0 writes iter_NNNNNNN/smoke.pt, then the tracker (so a half-written checkpoint is never the latest)."""
    target = os.path.join(directory, f"iter_{iteration:07d}")
    print(f"saving checkpoint at iteration {iteration:7d} to {directory} in torch format", flush=True)
    os.makedirs(target, exist_ok=True)
    state = {
        "iteration": iteration,
        "consumed": consumed,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
    }
    torch.save(state, os.path.join(target, "smoke.pt.tmp"))
    os.replace(os.path.join(target, "smoke.pt.tmp"), os.path.join(target, "smoke.pt"))
    with open(os.path.join(directory, TRACKER + ".tmp"), "w") as handle:
        handle.write(f"{iteration}\n")
    os.replace(os.path.join(directory, TRACKER + ".tmp"), os.path.join(directory, TRACKER))
    print(f"  successfully saved checkpoint from iteration {iteration:7d} to {directory}", flush=True)


def hold_for_drill(path: str, rank: int, iteration: int) -> None:
    """The fault drill: this rank stops making progress, outside any collective, until it is killed."""
    print(f"[smoke] drill: rank {rank} holds before iteration {iteration} ({path} exists)", file=sys.stderr, flush=True)
    while True:
        time.sleep(60)


def straggler_report(times_ms: list[float], flops_per_rank: float) -> list[str]:
    """Megatron's straggler report lines (StragglerDetector.report) from every rank's compute time."""
    world = len(times_ms)
    etpt = [(flops_per_rank / (ms / 1000) / 1e12 if ms > 0 else 0.0, rank) for rank, ms in enumerate(times_ms)]
    fastest = min(range(world), key=lambda r: times_ms[r])
    slowest = max(range(world), key=lambda r: times_ms[r])
    ranked = sorted(etpt)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    lines = [
        f"[{stamp}] | MnRtt/Rnk: {times_ms[fastest]:.2f}ms/{fastest} | MxRtt/Rnk: {times_ms[slowest]:.2f}ms/{slowest}"
        f" | MnEtpt/Rnk: {ranked[0][0]:.6g}TF/{ranked[0][1]} | MxEtpt/Rnk: {ranked[-1][0]:.6g}TF/{ranked[-1][1]}"
    ]
    count = world - 1  # as --straggler-minmax-count world-1: the two lines list every rank
    if 1 < count < world:
        lines.append(
            f"^^^^ Bottom {count} Ranks with lowest  Etpt(TF):" + "".join(f" {v:.6g}/{r}," for v, r in ranked[:count])
        )
        lines.append(
            f"^^^^ Top    {count} Ranks with highest Etpt(TF):" + "".join(f" {v:.6g}/{r}," for v, r in ranked[-count:])
        )
    return lines


def main() -> None:
    args = parse_args()
    backend = args.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    device = pick_device(backend)
    timeout = datetime.timedelta(minutes=args.distributed_timeout_minutes)
    dist.init_process_group(backend, timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    last = rank == world - 1
    torch.manual_seed(args.seed)
    sizes = check_groups(args.tp, args.pp, args.cp, device)
    if last:
        print(
            f"[smoke] world {world}: all-reduce checked in every group "
            f"(tp={sizes['tp']} pp={sizes['pp']} dp={sizes['dp']})",
            flush=True,
        )

    # As in Megatron, the global batch is split over the data-parallel replicas only: the ranks of one model-parallel
    # group (tp x pp x cp of them, one dp rank) read the same micro-batches. Each rank holds the whole small model,
    # so the gradient all-reduce runs over the world, and ranks with the same data add the same gradient.
    dp, dp_rank = sizes["dp"], parallel_state.get_data_parallel_rank()
    gbs = args.global_batch_size or args.micro_batch_size * dp
    if gbs % (args.micro_batch_size * dp):
        raise SystemExit(f"global batch {gbs} is not divisible by mbs x dp = {args.micro_batch_size * dp}")
    accumulation = gbs // (args.micro_batch_size * dp)
    card = device.type != "cpu"
    model = TinyLM(args.vocab_size, args.hidden_size).to(device)
    model = DistributedDataParallel(model, device_ids=[device.index] if card else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    parameters = sum(p.numel() for p in model.parameters())
    tokens = token_source(args.data_path, args.vocab_size, args.seed).to(device)
    span = args.seq_length + 1
    consumed, start_iteration = 0, 1
    checkpoint = load_checkpoint(args.load, rank)
    if checkpoint is not None:
        model.module.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        consumed, start_iteration = checkpoint["consumed"], checkpoint["iteration"] + 1
        if rank == 0:
            print(
                f"  successfully loaded checkpoint from {args.load} [ t 1/1, p 1/1 ] at iteration "
                f"{checkpoint['iteration']}",
                flush=True,
            )

    drill = os.path.join(os.environ.get("MTT_TRAIN_OPS_RUN", os.getcwd()), "drill", f"hang-rank-{rank}")
    flops_per_rank = 6 * parameters * accumulation * args.micro_batch_size * args.seq_length
    for iteration in range(start_iteration, args.train_iters + 1):
        if os.path.exists(drill):
            hold_for_drill(drill, rank, iteration)
        dist.barrier()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss_sum = torch.zeros(1, device=device)
        with model.no_sync():  # this rank's own compute: the gradient all-reduce follows, timed apart
            for micro in range(accumulation):
                rows = []
                for row in range(args.micro_batch_size):
                    sample = (consumed + (dp_rank * accumulation + micro) * args.micro_batch_size + row) * span
                    offset = sample % (tokens.numel() - span)
                    rows.append(tokens[offset : offset + span])
                batch = torch.stack(rows)
                logits = model(batch[:, :-1])
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, args.vocab_size), batch[:, 1:].reshape(-1))
                (loss / accumulation).backward()
                loss_sum += loss.detach() / accumulation
        if card:
            getattr(torch, device.type).synchronize()
        compute_ms = (time.perf_counter() - start) * 1000
        grads = [p.grad for p in model.parameters()]
        flat = torch._utils._flatten_dense_tensors(grads)
        dist.all_reduce(flat)
        flat.div_(world)
        for grad, synced in zip(grads, torch._utils._unflatten_dense_tensors(flat, grads), strict=True):
            grad.copy_(synced)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        finite = bool(torch.isfinite(grad_norm))
        if finite:  # like Megatron: a step with a non-finite gradient is skipped and counted
            optimizer.step()
        dist.all_reduce(loss_sum)
        if card:
            getattr(torch, device.type).synchronize()
        elapsed = torch.tensor([time.perf_counter() - start], device=device)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        computes = [torch.zeros(1, device=device) for _ in range(world)]
        dist.all_gather(computes, torch.tensor([compute_ms], device=device))
        if rank == 0:
            for line in straggler_report([float(t) for t in computes], flops_per_rank):
                print(line, flush=True)
        consumed += gbs
        seconds = float(elapsed)
        tflops = 6 * parameters * gbs * args.seq_length / seconds / world / 1e12
        if last:
            loss_value = float(loss_sum) / world
            stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
            loss_text = f" lm loss: {loss_value:.6E} |" if math.isfinite(loss_value) else ""
            grad_text = f" grad norm: {float(grad_norm):.3f} |" if finite else ""
            print(
                f"[{stamp}] iteration {iteration:8d}/{args.train_iters:8d} | consumed samples: {consumed:12d} |"
                f" elapsed time per iteration (ms): {seconds * 1000:.1f} |"
                f" throughput per GPU (TFLOP/s/GPU): {tflops:.6f} | learning rate: {args.lr:.6E} |"
                f" global batch size: {gbs:5d} |{loss_text} loss scale: 1.0 |{grad_text}"
                f" number of skipped iterations: {int(not finite):3d} |"
                f" number of nan iterations: {int(not finite):3d} |",
                flush=True,
            )
            if card:
                mib, accel = 1024 * 1024, getattr(torch, device.type)  # torch.cuda or torch.musa
                print(
                    f"[Rank {rank}] (after {iteration} iterations) memory (MB) | allocated: "
                    f"{accel.memory_allocated() / mib} | max allocated: {accel.max_memory_allocated() / mib}"
                    f" | reserved: {accel.memory_reserved() / mib} | max reserved: "
                    f"{accel.max_memory_reserved() / mib}",
                    flush=True,
                )
        if args.save and rank == 0 and args.save_interval and iteration % args.save_interval == 0:
            save_checkpoint(args.save, iteration, consumed, model.module, optimizer)
    if (
        args.save
        and rank == 0
        and start_iteration <= args.train_iters
        and (not args.save_interval or args.train_iters % args.save_interval)
    ):
        save_checkpoint(args.save, args.train_iters, consumed, model.module, optimizer)
    dist.barrier()
    if last:
        print(f"[after training is done] datetime: {datetime.datetime.now():%Y-%m-%d %H:%M:%S}", flush=True)
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # Every line is flushed and the process group is gone: leave without the interpreter's teardown, which takes
    # megatron.core's module graph a second and more of CPU per rank (measured on the testbed's stand-in), time
    # in which torchrun and the watcher can only wait.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
