"""The rendered argument vector: every flag from the layout, none typed by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest
from trainops.errors import PlanError
from trainops.layout import LayoutRequest, keeps_attention_scores, plan_layout, stage_memory
from trainops.megatron_args import RunPaths, TrainingConfig, build_megatron_args, check_training

PATHS = RunPaths("/data/d", "/data/tok/vocab.json", "TikTokenizer", "/w/ck", "/w/tb")


def value_of(args, flag):
    return args[args.index(flag) + 1]


def test_runbook_values(llama8b, two_nodes):
    args = build_megatron_args(llama8b, plan_layout(llama8b, two_nodes, LayoutRequest(tp=1, pp=2)), PATHS)
    assert value_of(args, "--global-batch-size") == "1024"
    assert value_of(args, "--pipeline-model-parallel-size") == "2"
    assert value_of(args, "--decoder-last-pipeline-num-layers") == "15"
    assert value_of(args, "--num-query-groups") == "8"
    for flag in ("--use-distributed-optimizer", "--fp8-param-gather", "--swiglu"):
        assert flag in args
    # flash attention through Transformer Engine; --use-flash-attn only reaches Megatron's legacy model
    assert value_of(args, "--attention-backend") == "auto" and "--use-flash-attn" not in args
    assert value_of(args, "--fp8-format") == "hybrid"
    assert value_of(args, "--tokenizer-type") == "TikTokenizer"
    assert value_of(args, "--tiktoken-pattern") == "v2"
    assert "--sequence-parallel" not in args  # tp=1


def test_pp1_has_no_stage_flags_and_bf16_has_no_fp8(llama8b, one_node):
    lay = plan_layout(llama8b, one_node, LayoutRequest(tp=2, pp=1, precision="bf16", recompute="selective"))
    args = build_megatron_args(llama8b, lay, PATHS)
    assert not [a for a in args if "pipeline-num-layers" in a]
    assert not [a for a in args if a.startswith("--fp8")]
    assert value_of(args, "--transformer-impl") == "transformer_engine"  # bf16 too: its fused attention
    assert "--sequence-parallel" in args
    assert value_of(args, "--recompute-granularity") == "selective"
    assert "--recompute-method" not in args


def test_fp32_is_megatrons_default_without_bf16_or_fp8(tiny, one_node):
    request = LayoutRequest(precision="fp32", transformer_impl="local", flash_attention=False, seq_length=128)
    lay = plan_layout(tiny, one_node, request)
    args = build_megatron_args(tiny, lay, PATHS)
    assert "--bf16" not in args and "--accumulate-allreduce-grads-in-fp32" not in args
    assert not [a for a in args if a.startswith("--fp8")]
    bf16 = build_megatron_args(tiny, plan_layout(tiny, one_node, replace(lay.request, precision="bf16")), PATHS)
    assert [a for a in bf16 if a not in args] == ["--bf16", "--accumulate-allreduce-grads-in-fp32"]


def test_an_unknown_precision_names_the_three(llama8b, two_nodes):
    with pytest.raises(PlanError, match="precision 'fp16' is unknown; use one of bf16, fp8, fp32"):
        plan_layout(llama8b, two_nodes, LayoutRequest(precision="fp16"))


def test_vpp_uses_virtual_stages_flag(llama8b, two_nodes):
    lay = plan_layout(llama8b, two_nodes, LayoutRequest(tp=2, pp=4, vpp=2))
    args = build_megatron_args(llama8b, lay, PATHS)
    assert value_of(args, "--num-virtual-stages-per-pipeline-rank") == "2"


def test_short_runs_cap_the_warmup(tiny, one_node):
    lay = plan_layout(tiny, one_node, LayoutRequest(train_iters=50, seq_length=256))
    args = build_megatron_args(tiny, lay, PATHS)
    assert value_of(args, "--lr-warmup-iters") == "5"
    assert all(isinstance(a, str) for a in args)


@pytest.mark.parametrize(
    ("precision", "impl", "flash", "backend", "scores"),
    [
        ("fp8", "transformer_engine", True, "auto", False),
        ("fp8", "transformer_engine", False, "unfused", True),
        ("bf16", "transformer_engine", True, "auto", False),
        ("bf16", "transformer_engine", False, "unfused", True),
        ("bf16", "local", True, None, True),
        ("bf16", "local", False, None, True),
    ],
)
def test_the_attention_rendered_is_the_one_the_memory_estimate_assumes(
    llama8b, two_nodes, precision, impl, flash, backend, scores
):
    request = LayoutRequest(
        tp=1, pp=2, precision=precision, transformer_impl=impl, flash_attention=flash, recompute="none"
    )
    lay = plan_layout(llama8b, two_nodes, request)
    args = build_megatron_args(llama8b, lay, PATHS)
    assert value_of(args, "--transformer-impl") == impl
    assert (value_of(args, "--attention-backend") if "--attention-backend" in args else None) == backend
    assert keeps_attention_scores(request) is scores
    # the estimate's activations grow by the s x s scores exactly when the rendered attention keeps them
    fused = stage_memory(
        llama8b, replace(lay, request=replace(request, transformer_impl="transformer_engine", flash_attention=True))
    )
    counted = stage_memory(llama8b, lay)
    s, a = lay.seq_length, llama8b.num_attention_heads
    extra = counted[0].activations - fused[0].activations
    per_layer_and_microbatch = 5 * a * s * s * lay.micro_batch_size
    in_flight = min(lay.pp, lay.num_microbatches)
    assert extra == (pytest.approx(per_layer_and_microbatch * lay.stage_layers[0] * in_flight) if scores else 0)
    assert ("flash attention does not apply" in " ".join(lay.warnings)) is (impl == "local" and flash)


def test_fp8_needs_transformer_engine(llama8b, two_nodes):
    with pytest.raises(PlanError, match="precision=fp8 runs in Transformer Engine"):
        plan_layout(llama8b, two_nodes, LayoutRequest(precision="fp8", transformer_impl="local"))
    with pytest.raises(PlanError, match="transformer_impl 'te' is unknown"):
        plan_layout(llama8b, two_nodes, LayoutRequest(precision="bf16", transformer_impl="te"))


def test_mock_data_no_checkpoints_and_no_fused_kernels(llama8b, one_node):
    lay = plan_layout(llama8b, one_node, LayoutRequest(precision="bf16", transformer_impl="local"))
    paths = RunPaths("mock", "", "NullTokenizer", "/w/ck", "/w/tb")
    training = TrainingConfig(save_interval=0, fused_kernels=False)
    args = build_megatron_args(llama8b, lay, paths, training)
    assert "--mock-data" in args and "--data-path" not in args and "--tokenizer-model" not in args
    assert value_of(args, "--tokenizer-type") == "NullTokenizer"
    assert value_of(args, "--vocab-size") == str(llama8b.vocab_size - 1)  # NullTokenizer adds its eod
    assert not {"--save", "--load", "--save-interval"} & set(args)
    assert {"--no-gradient-accumulation-fusion", "--no-rope-fusion"} <= set(args)
    default = build_megatron_args(llama8b, lay, PATHS)
    assert value_of(default, "--save") == "/w/ck" and "--no-rope-fusion" not in default
    assert check_training(TrainingConfig(save_interval=-1), 100) == [
        "save_interval must be a whole number of iterations >= 0 (0: no checkpoints), got -1"
    ]


def test_the_sample_indexes_go_where_every_node_sees_them(tiny, one_node):
    """Megatron's rank 0 writes them and the other data ranks read them: not beside a node's own dataset copy."""
    lay = plan_layout(tiny, one_node, LayoutRequest(seq_length=128))
    args = build_megatron_args(tiny, lay, PATHS)
    assert value_of(args, "--data-cache-path") == "/w/ck/data-cache"
    mock = build_megatron_args(tiny, lay, replace(PATHS, data_path="mock"))
    assert "--data-cache-path" not in mock and "--mock-data" in mock
