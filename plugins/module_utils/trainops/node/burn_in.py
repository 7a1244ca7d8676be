"""The full health check's burn-in (mtt-train-ops, role health_burn_in); run in the training container.

    python3 burn_in.py --backend cuda|musa|cpu --cards N --precision bf16 --seconds S

One process per card, all at once (a node's cards share its power, cooling and host, as in a run): each multiplies
square matrices in the run's precision for S seconds after a warm-up, and its TFLOP/s (2 n^3 per product, the
device synchronised before the clock is read) is printed as JSON: ``{"precision", "dtype", "seconds", "cards":
[{"card", "tflops", "products"}]}``; a card whose process failed has ``error`` instead of ``tflops``. On the cpu
backend a card is one core's worth (torch with one thread per process): the testbed's stand-in for a card. fp8 is
measured in bf16 (the burn-in compares cards with each other, not with the card's peak).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from queue import Empty

SIZE = {"cpu": 256, "cuda": 8192, "musa": 8192}
DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp8": "bfloat16"}


def _device(torch, backend: str, card: int):
    if backend == "cpu":
        torch.set_num_threads(1)
        return torch.device("cpu"), lambda: None
    if backend == "musa":
        import torch_musa  # noqa: F401  (registers the musa device)

        torch.musa.set_device(card)
        return torch.device("musa", card), torch.musa.synchronize
    torch.cuda.set_device(card)
    return torch.device("cuda", card), torch.cuda.synchronize


def one_card(backend: str, card: int, dtype_name: str, seconds: float, out) -> None:
    try:
        import torch

        device, sync = _device(torch, backend, card)
        dtype = getattr(torch, dtype_name)
        n = SIZE[backend]
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        for _ in range(3):  # warm-up: kernels chosen, clocks up
            a @ b
        sync()
        products, start = 0, time.perf_counter()
        while True:
            for _ in range(4):
                a @ b
            products += 4
            sync()
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
        out.put({"card": card, "tflops": round(2 * n**3 * products / elapsed / 1e12, 4), "products": products})
    except Exception as exc:  # noqa: BLE001  (any failure is this card's evidence)
        out.put({"card": card, "error": f"{type(exc).__name__}: {exc}"[:300]})


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=sorted(SIZE), required=True)
    parser.add_argument("--cards", type=int, required=True)
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args(argv)
    dtype = DTYPES.get(args.precision, "bfloat16")
    # fork: no re-import of this script in each child (as spawn would), and this parent never touches a device
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    workers = [
        context.Process(target=one_card, args=(args.backend, card, dtype, args.seconds, queue))
        for card in range(args.cards)
    ]
    for worker in workers:
        worker.start()
    results = {}
    deadline = time.monotonic() + args.seconds * 3 + 120
    while len(results) < args.cards and time.monotonic() < deadline:
        try:
            item = queue.get(timeout=max(0.1, deadline - time.monotonic()))
        except Empty:  # the deadline passed
            break
        results[item["card"]] = item
    for worker in workers:
        worker.join(timeout=5)
        if worker.is_alive():
            worker.kill()
    hung = {"error": "no result before the deadline (hung)"}
    cards = [results.get(card, dict(hung, card=card)) for card in range(args.cards)]
    print(json.dumps({"precision": args.precision, "dtype": dtype, "seconds": args.seconds, "cards": cards}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
