"""Memory per card, following Megatron-LM's theoretical formulas.

Two functions:

* :func:`megatron_theoretical` reproduces ``megatron/training/theoretical_memory_usage.py``
  of core 0.14 exactly (same assumptions: the first pipeline stage holds L/PP
  layers, sequence parallel + selective recompute for activations). It is what
  Megatron prints as "Theoretical memory footprints" and is kept to check
  against real logs and against Megatron itself.
* :func:`estimate_stages` applies the same terms stage by stage with the
  planned (possibly uneven) stage layers, the chosen recompute, sequence
  parallel on or off, context parallel, and flash attention. The planner
  decides fit on the most loaded stage of this estimate. For an even split
  with sequence parallel and selective recompute both functions agree.

Terms (Korthikanti et al. 2022, Table 2, 16-bit activations; FP32 training doubles them), per transformer layer and
micro-batch, in bytes: ``s*b*h*(18 + 4*ffn/h)`` kept for backward, all of it
split over TP with sequence parallel, ``10*s*b*h`` replicated without it.
Without flash attention (an unfused kernel, or Megatron's local DotProductAttention) the attention scores
add ``5*a*s*s*b``: to every layer's kept activations without recompute, to the one layer being recomputed with
full recompute; selective recompute recomputes them. Full recompute keeps only each layer's input (``2*s*b*h``) plus
one layer's working set while it is recomputed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .model import ModelSpec

GIB = 1024**3
MIB = 1024**2
RECOMPUTE_MODES = ("none", "selective", "full")


def parameter_counts(model: ModelSpec, padded_vocab: int) -> dict[str, float]:
    """Parameters of one layer, the embedding and the final norm (Megatron's counting)."""
    h = model.hidden_size
    gated = 1.5 if model.swiglu else 1.0
    projection_ratio = model.head_dim * model.num_attention_heads / h
    attention = 2 * h * h * (1 + model.query_groups / model.num_attention_heads) * projection_ratio
    layer = 2 * h * (model.ffn_hidden_size * gated + 2) + attention
    embedding = h * padded_vocab
    final_norm = 2 * h
    output = embedding if model.untie_embeddings_and_output_weights else 0
    total = layer * model.num_layers + final_norm + embedding + output
    return {"layer": layer, "embedding": embedding, "final_norm": final_norm, "total": total}


def bytes_per_parameter(distributed_optimizer: bool, shards: int, precision: str = "bf16") -> float:
    """BF16 weights and grads with FP32 main params and Adam: 18 B, or 6 + 12/shards sharded (FP8 runs keep BF16
    weights). FP32 training has no separate main params (the optimizer updates the weights themselves): FP32 weights
    and grads with Adam's two moments, 16 B, or 8 + 8/shards sharded (the distributed optimizer shards only its
    state)."""
    if precision == "fp32":
        return 8 + 8 / shards if distributed_optimizer else 16
    return 6 + 12 / shards if distributed_optimizer else 18


def checkpoint_bytes(model: ModelSpec, padded_vocab: int, precision: str = "bf16") -> float:
    """One checkpoint of the whole model as Megatron saves it (its weights, and Adam's FP32 main params and two
    moments, however many ranks write them): 2 + 12 B per parameter, or 4 + 8 B in FP32 training."""
    per_parameter = 12 if precision == "fp32" else 14
    return parameter_counts(model, padded_vocab)["total"] * per_parameter


def activation_scale(precision: str) -> float:
    """The activation terms count 16-bit elements; FP32 training keeps 4-byte ones."""
    return 2.0 if precision == "fp32" else 1.0


def megatron_theoretical(
    model: ModelSpec,
    *,
    tp: int,
    pp: int,
    vpp: int | None,
    dp: int,
    micro_batch_size: int,
    seq_length: int,
    padded_vocab: int,
    num_microbatches: int | None,
    distributed_optimizer: bool,
) -> dict[str, float]:
    """Megatron core 0.14's own estimate, in bytes: ``weight_and_optimizer`` and ``activation``."""
    counts = parameter_counts(model, padded_vocab)
    block = counts["layer"] * model.num_layers + counts["final_norm"]
    shard = (block / pp + counts["embedding"]) / tp
    if model.untie_embeddings_and_output_weights and pp == 1:
        shard += counts["embedding"] / tp
    weights = shard * bytes_per_parameter(distributed_optimizer, dp)

    s, b, h = seq_length, micro_batch_size, model.hidden_size
    act = s * b * h * (18 + 4 * model.ffn_hidden_size / h) * model.num_layers
    act += 8 * s * b * pp + s * b * h * pp
    if vpp is not None:
        act *= 1 + (pp - 1) / (pp * vpp)
    elif pp > 1 and num_microbatches is not None:
        act *= min(1, num_microbatches / pp)
    if pp == 1:
        act += s * b * h * 4 * (1 + padded_vocab / h)
    return {"weight_and_optimizer": weights, "activation": act / tp}


@dataclass(frozen=True)
class StageMemory:
    """Estimated bytes on one card of a pipeline stage."""

    stage: int
    layers: int
    weights_and_optimizer: float
    activations: float

    @property
    def total(self) -> float:
        return self.weights_and_optimizer + self.activations


def layer_activation_bytes(
    model: ModelSpec, *, seq: int, mbs: int, tp: int, sequence_parallel: bool, recompute: str, flash_attention: bool
) -> tuple[float, float]:
    """(bytes kept per layer and micro-batch, one layer's working set) on one card."""
    s, b, h = seq, mbs, model.hidden_size
    split = 8 + 4 * model.ffn_hidden_size / h
    if sequence_parallel:
        working = s * b * h * (10 + split) / tp
    else:
        working = s * b * h * (10 + split / tp)
    if recompute != "selective" and not flash_attention:
        # the scores of an unfused attention: kept for backward without recompute; one layer's worth while a
        # layer is recomputed under full recompute (selective recompute recomputes exactly this part)
        working += 5 * model.num_attention_heads * s * s * b / tp
    if recompute == "full":
        kept = 2 * s * b * h / (tp if sequence_parallel else 1)
        return kept, working
    return working, 0.0


def estimate_stages(
    model: ModelSpec,
    *,
    stage_layers: Sequence[int],
    tp: int,
    cp: int,
    vpp: int | None,
    dp: int,
    micro_batch_size: int,
    seq_length: int,
    padded_vocab: int,
    num_microbatches: int,
    distributed_optimizer: bool,
    sequence_parallel: bool,
    recompute: str,
    flash_attention: bool,
    precision: str = "bf16",
) -> list[StageMemory]:
    """Weights + optimizer and activations for every pipeline stage (bytes per card)."""
    if recompute not in RECOMPUTE_MODES:
        raise ValueError(f"recompute must be one of {RECOMPUTE_MODES}")
    pp = len(stage_layers)
    counts = parameter_counts(model, padded_vocab)
    per_param = bytes_per_parameter(distributed_optimizer, dp * cp, precision)
    s, b, h = seq_length // cp, micro_batch_size, model.hidden_size
    kept, working = layer_activation_bytes(
        model,
        seq=s,
        mbs=b,
        tp=tp,
        sequence_parallel=sequence_parallel,
        recompute=recompute,
        flash_attention=flash_attention,
    )
    split_tp = tp if sequence_parallel else 1
    stages = []
    for i, layers in enumerate(stage_layers):
        params = layers * counts["layer"]
        if i == 0:
            params += counts["embedding"]
        if i == pp - 1:
            params += counts["final_norm"]
            if model.untie_embeddings_and_output_weights or pp > 1:
                params += counts["embedding"]
        if vpp is None:
            in_flight = min(pp - i, num_microbatches)
        else:
            in_flight = (pp - i) + (pp - 1) / vpp
        act = layers * kept * in_flight + working * (recompute == "full")
        if i == 0:
            act += (8 * s * b + s * b * h) * in_flight / split_tp
        if i == pp - 1:
            act += s * b * h * 4 * (1 + padded_vocab / h) / split_tp
        stages.append(StageMemory(i, layers, params / tp * per_param, act * activation_scale(precision)))
    return stages
