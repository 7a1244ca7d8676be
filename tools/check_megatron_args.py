"""Check plan.json files against Megatron-LM's own argument parser and formulas.

    python tools/check_megatron_args.py --megatron /path/to/Megatron-LM PLAN_JSON [PLAN_JSON ...]

Needs a Python with torch (CPU is enough), ``numpy<2``, ``packaging``, ``six``,
``regex`` and ``pyyaml``, and a checkout of Megatron-LM at the version you run
(e.g. tag core_v0.14.0). Megatron-LM is not on PyPI and is not part of this
project. For every plan it runs, with ``WORLD_SIZE`` from the plan:

1. ``parse_args`` + ``validate_args`` as ``initialize_megatron`` calls them;
2. Megatron's ``ConstantNumMicroBatchesCalculator`` (the global batch rule);
3. ``core_transformer_config_from_args`` (the TransformerConfig rules: heads and
   query groups vs TP, uneven pipeline stages, recompute);
4. ``theoretical_memory_usage`` and ``num_floating_point_operations``;

then compares Megatron's derived values with the plan's. Exit status 1 if any
plan fails. CPU-only adjustments, each printed when used: the GPU architecture
query is answered with 9 (Hopper), and a TransformerConfig refusal that only
says Transformer Engine's fused RoPE is missing is retried without RoPE fusion.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import os
import sys


def check(plan_path: str, megatron: str) -> list[str]:
    """Problems found for one plan (empty when Megatron agrees with it)."""
    with open(plan_path) as handle:
        plan = json.load(handle)
    os.environ.update(WORLD_SIZE=str(plan["world_size"]), RANK="0", LOCAL_RANK="0", CUDA_DEVICE_MAX_CONNECTIONS="1")
    import megatron.training.arguments as margs
    from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator
    from megatron.training import theoretical_memory_usage as tmu
    from megatron.training.training import num_floating_point_operations

    margs.get_device_arch_version = lambda: 9  # CPU: no device to ask
    sys.argv = ["pretrain_gpt.py", *plan["megatron_args"]]
    with contextlib.redirect_stdout(io.StringIO()):
        args = margs.parse_args(None, False)
        margs.validate_args(args, {"tokenizer_type": "GPT2BPETokenizer"})  # as pretrain_gpt.py passes
        calc = ConstantNumMicroBatchesCalculator(
            args.global_batch_size, args.micro_batch_size, args.data_parallel_size, False, 1
        )
        try:
            margs.core_transformer_config_from_args(copy.copy(args))
        except ValueError as exc:
            if "apply_rope_fusion" not in str(exc):
                raise
            relaxed = copy.copy(args)
            relaxed.apply_rope_fusion = False
            margs.core_transformer_config_from_args(relaxed)
            print("  note: Transformer Engine absent; TransformerConfig checked without RoPE fusion", file=sys.stderr)

    expected = {
        "data_parallel_size": plan["dp"],
        "global_batch_size": plan["global_batch_size"],
        "micro_batch_size": plan["micro_batch_size"],
        "decoder_first_pipeline_num_layers": plan["decoder_first_pipeline_num_layers"],
        "decoder_last_pipeline_num_layers": plan["decoder_last_pipeline_num_layers"],
        "virtual_pipeline_model_parallel_size": plan["vpp"],
        "sequence_parallel": plan["sequence_parallel"],
    }
    problems = [
        f"{key}: Megatron {getattr(args, key)!r}, plan {value!r}"
        for key, value in expected.items()
        if getattr(args, key) != value
    ]
    if calc.num_micro_batches != plan["num_microbatches"]:
        problems.append(f"micro-batches: Megatron {calc.num_micro_batches}, plan {plan['num_microbatches']}")

    args.padded_vocab_size = plan["padded_vocab_size"]
    weights = tmu.compute_weight_and_optimizer_memory(copy.copy(args)) / 1024**3
    activations = tmu.compute_activation_memory(copy.copy(args), plan["num_microbatches"]) / 1024**3
    flops = num_floating_point_operations(copy.copy(args), args.global_batch_size)
    ours = plan["memory_gib"]["megatron_theoretical"]
    for label, theirs, mine in (
        ("weights+optimizer GiB", weights, ours["weights_and_optimizer"]),
        ("activations GiB (SP+selective formula)", activations, ours["activations_selective_sp"]),
        ("FLOPs/iteration", flops, plan["flops_per_iteration"]),
    ):
        if abs(theirs - mine) > 0.01 * abs(theirs) + 1e-3:
            problems.append(f"{label}: Megatron {theirs:.6g}, plan {mine:.6g}")
    print(
        f"  Megatron: dp={args.data_parallel_size} gbs={args.global_batch_size} micro-batches={calc.num_micro_batches}"
        f" first/last={args.decoder_first_pipeline_num_layers}/{args.decoder_last_pipeline_num_layers}"
        f" vpp={args.virtual_pipeline_model_parallel_size} weights+opt={weights:.2f} GiB flops={flops:.4g}"
    )
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megatron", required=True, help="Megatron-LM checkout (e.g. tag core_v0.14.0)")
    parser.add_argument("plans", nargs="+", help="plan.json files written by plan.yml")
    opts = parser.parse_args()
    sys.path.insert(0, os.path.abspath(opts.megatron))
    failed = 0
    for path in opts.plans:
        print(path)
        try:
            problems = check(path, opts.megatron)
        except (AssertionError, ValueError, SystemExit) as exc:
            problems = [f"Megatron refused it: {type(exc).__name__}: {exc}"]
        for problem in problems:
            print(f"  FAIL {problem}")
        if not problems:
            print("  OK: accepted by Megatron, derived values agree")
        failed += bool(problems)
    print(f"{len(opts.plans) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
