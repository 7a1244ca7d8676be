"""Memory and FLOPs against Megatron-LM's own formulas.

The expected bytes below were computed by Megatron-LM core_v0.14.0's own
megatron/training/theoretical_memory_usage.py (compute_weight_and_optimizer_memory
and compute_activation_memory), run on a fetched copy with the same arguments;
see docs/cost-model.md for the command. They are kept here so the check runs
without Megatron-LM.
"""

from __future__ import annotations

import pytest
from trainops.flops import flops_per_iteration, flops_per_token
from trainops.layout import padded_vocab_size
from trainops.memory import GIB, estimate_stages, megatron_theoretical

# model, tp, pp, vpp, dp, mbs, seq, distributed optimizer, micro-batches, weight+optimizer B, activation B
COLUMNS = ("name", "tp", "pp", "vpp", "dp", "mbs", "seq", "distopt", "nmb", "weights", "act")
MEGATRON_0_14 = [
    ("llama3-8b", 1, 1, None, 16, 1, 4096, True, 128, 54206060544.0, 19365134336.0),
    ("llama3-8b", 1, 2, None, 8, 1, 4096, True, 128, 30114478080.0, 17213489152.0),
    ("llama3-8b", 2, 4, 2, 2, 1, 4096, True, 128, 13621800960.0, 11857387520.0),
    ("llama3-8b", 4, 1, None, 2, 2, 8192, False, 64, 36146810880.0, 19369328640.0),
    ("llama3-8b", 1, 4, None, 4, 1, 4096, True, 2, 20432701440.0, 8623554560.0),
    ("llama3-70b", 8, 4, None, 4, 1, 8192, True, 128, 20441682432.0, 21508423680.0),
    ("llama3-70b", 4, 8, 5, 32, 1, 4096, True, 64, 15315109056.0, 25311862784.0),
]


@pytest.mark.parametrize(
    ("name", "tp", "pp", "vpp", "dp", "mbs", "seq", "distopt", "nmb", "weights", "act"), MEGATRON_0_14
)
def test_megatron_theoretical_matches_megatron(request, name, tp, pp, vpp, dp, mbs, seq, distopt, nmb, weights, act):
    model = request.getfixturevalue({"llama3-8b": "llama8b", "llama3-70b": "llama70b"}[name])
    got = megatron_theoretical(
        model,
        tp=tp,
        pp=pp,
        vpp=vpp,
        dp=dp,
        micro_batch_size=mbs,
        seq_length=seq,
        padded_vocab=padded_vocab_size(model.vocab_size, tp),
        num_microbatches=nmb,
        distributed_optimizer=distopt,
    )
    assert got["weight_and_optimizer"] == pytest.approx(weights, rel=1e-9)
    assert got["activation"] == pytest.approx(act, rel=1e-9)


@pytest.mark.parametrize(
    ("name", "tp", "pp", "vpp", "dp", "mbs", "seq", "distopt", "nmb", "weights", "act"), MEGATRON_0_14
)
def test_stage_estimate_within_one_percent_of_megatron(
    request, name, tp, pp, vpp, dp, mbs, seq, distopt, nmb, weights, act
):
    """With an even split, sequence parallel and selective recompute, the per-stage
    estimate of the most loaded (first) stage is Megatron's own number."""
    model = request.getfixturevalue({"llama3-8b": "llama8b", "llama3-70b": "llama70b"}[name])
    stages = estimate_stages(
        model,
        stage_layers=[model.num_layers // pp] * pp,
        tp=tp,
        cp=1,
        vpp=vpp,
        dp=dp,
        micro_batch_size=mbs,
        seq_length=seq,
        padded_vocab=padded_vocab_size(model.vocab_size, tp),
        num_microbatches=nmb,
        distributed_optimizer=distopt,
        sequence_parallel=True,
        recompute="selective",
        flash_attention=True,
    )
    assert stages[0].weights_and_optimizer == pytest.approx(weights, rel=0.01)
    assert stages[0].activations == pytest.approx(act, rel=0.01)


def _stage0(model, **overrides):
    kwargs = dict(
        stage_layers=[32],
        tp=1,
        cp=1,
        vpp=None,
        dp=8,
        micro_batch_size=1,
        seq_length=4096,
        padded_vocab=128256,
        num_microbatches=128,
        distributed_optimizer=True,
        sequence_parallel=False,
        recompute="selective",
        flash_attention=True,
    )
    kwargs.update(overrides)
    return estimate_stages(model, **kwargs)[0]


def test_recompute_orders_activation_memory(llama8b):
    full = _stage0(llama8b, recompute="full").activations
    selective = _stage0(llama8b, recompute="selective").activations
    none_no_flash = _stage0(llama8b, recompute="none", flash_attention=False).activations
    assert full < selective < none_no_flash
    assert _stage0(llama8b, recompute="none").activations == selective  # flash attention keeps no scores


def test_runbook_layout_fits_an_s5000(llama8b):
    """TP1 PP1 DP8 with full recompute on 80 GiB: the runbook's optimised run."""
    stage = _stage0(llama8b, recompute="full")
    assert stage.total / GIB < 72
    assert _stage0(llama8b, recompute="none", flash_attention=False).total / GIB > 80


def test_context_parallel_divides_activations(llama8b):
    one = _stage0(llama8b, cp=1).activations
    two = _stage0(llama8b, cp=2).activations
    assert two == pytest.approx(one / 2, rel=0.01)


def test_llama3_8b_flops_per_token_both_conventions(llama8b):
    """The reference's figures: 51.47 (causal) vs 57.91 (full) GFLOP/token at seq 8192."""
    assert flops_per_token(llama8b, 8192, 128256, "causal") / 1e9 == pytest.approx(51.47, abs=0.01)
    assert flops_per_token(llama8b, 8192, 128256, "full") / 1e9 == pytest.approx(57.91, abs=0.01)


def test_flops_per_iteration_scales_with_batch(llama8b):
    one = flops_per_iteration(llama8b, 4096, 128256, 1)
    many = flops_per_iteration(llama8b, 4096, 128256, 1024)
    assert many["causal"] == pytest.approx(1024 * one["causal"])
    assert many["full"] > many["causal"]


def test_fp32_keeps_no_main_params_and_doubles_the_activations(llama8b):
    """FP32: 4-byte weights and grads, Adam's moments sharded (8 + 8/dp B), against BF16's 6 + 12/dp."""
    bf16, fp32 = _stage0(llama8b), _stage0(llama8b, precision="fp32")
    assert fp32.weights_and_optimizer / bf16.weights_and_optimizer == pytest.approx((8 + 8 / 8) / (6 + 12 / 8))
    assert fp32.activations == 2 * bf16.activations
    unsharded = _stage0(llama8b, precision="fp32", distributed_optimizer=False).weights_and_optimizer
    assert unsharded / _stage0(llama8b, distributed_optimizer=False).weights_and_optimizer == pytest.approx(16 / 18)
    assert _stage0(llama8b, precision="fp8") == bf16  # FP8 runs keep BF16 weights in Megatron's accounting


def test_a_checkpoint_holds_the_weights_and_adams_fp32_state(llama8b):
    from trainops.memory import checkpoint_bytes, parameter_counts

    vocab = padded_vocab_size(128256, 1)
    parameters = parameter_counts(llama8b, vocab)["total"]
    assert 8.0e9 < parameters < 8.1e9
    assert checkpoint_bytes(llama8b, vocab, "bf16") == parameters * 14  # about 105 GiB for Llama3-8B
    assert checkpoint_bytes(llama8b, vocab, "fp32") == parameters * 12
