"""The rendered argument vector: every flag from the layout, none typed by hand."""

from __future__ import annotations

from trainops.layout import LayoutRequest, plan_layout
from trainops.megatron_args import RunPaths, build_megatron_args

PATHS = RunPaths("/data/d", "/data/tok/vocab.json", "TikTokenizer", "/w/ck", "/w/tb")


def value_of(args, flag):
    return args[args.index(flag) + 1]


def test_runbook_values(llama8b, two_nodes):
    args = build_megatron_args(llama8b, plan_layout(llama8b, two_nodes, LayoutRequest(tp=1, pp=2)), PATHS)
    assert value_of(args, "--global-batch-size") == "1024"
    assert value_of(args, "--pipeline-model-parallel-size") == "2"
    assert value_of(args, "--decoder-last-pipeline-num-layers") == "15"
    assert value_of(args, "--num-query-groups") == "8"
    for flag in ("--use-distributed-optimizer", "--use-flash-attn", "--fp8-param-gather", "--swiglu"):
        assert flag in args
    assert value_of(args, "--fp8-format") == "hybrid"
    assert value_of(args, "--tokenizer-type") == "TikTokenizer"
    assert value_of(args, "--tiktoken-pattern") == "v2"
    assert "--sequence-parallel" not in args  # tp=1


def test_pp1_has_no_stage_flags_and_bf16_has_no_fp8(llama8b, one_node):
    lay = plan_layout(llama8b, one_node, LayoutRequest(tp=2, pp=1, precision="bf16", recompute="selective"))
    args = build_megatron_args(llama8b, lay, PATHS)
    assert not [a for a in args if "pipeline-num-layers" in a]
    assert not [a for a in args if a.startswith("--fp8")]
    assert value_of(args, "--transformer-impl") == "local"
    assert "--sequence-parallel" in args
    assert value_of(args, "--recompute-granularity") == "selective"
    assert "--recompute-method" not in args


def test_vpp_uses_virtual_stages_flag(llama8b, two_nodes):
    lay = plan_layout(llama8b, two_nodes, LayoutRequest(tp=2, pp=4, vpp=2))
    args = build_megatron_args(llama8b, lay, PATHS)
    assert value_of(args, "--num-virtual-stages-per-pipeline-rank") == "2"


def test_short_runs_cap_the_warmup(tiny, one_node):
    lay = plan_layout(tiny, one_node, LayoutRequest(train_iters=50, seq_length=256))
    args = build_megatron_args(tiny, lay, PATHS)
    assert value_of(args, "--lr-warmup-iters") == "5"
    assert all(isinstance(a, str) for a in args)
