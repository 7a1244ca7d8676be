"""Training FLOPs per token and per iteration, as Megatron-LM counts them.

Follows ``num_floating_point_operations`` of megatron/training/training.py
(dense GPT, GQA, SwiGLU): every GEMM counted three times (forward, weight
gradient, data gradient), two FLOPs per multiply-add. Two conventions exist
for the attention score term: ``causal`` (Megatron core >= 0.12 halves it for
the causal mask) and ``full`` (older versions and many published tables).
Activation recomputation is not counted (model FLOPs, not hardware FLOPs).
"""

from __future__ import annotations

from .model import ModelSpec

CONVENTIONS = ("causal", "full")


def flops_per_token(model: ModelSpec, seq_length: int, padded_vocab: int, convention: str = "causal") -> float:
    """Forward + backward FLOPs for one token of a sequence of ``seq_length``."""
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {CONVENTIONS}")
    h = model.hidden_size
    layers = model.num_layers
    gated = 1.5 if model.swiglu else 1.0
    projection_ratio = model.head_dim * model.num_attention_heads / h
    score = seq_length / h / (2 if convention == "causal" else 1)
    expansion = 3 * 2 * 2
    mlp = expansion * layers * h * model.ffn_hidden_size * gated
    attention = (
        expansion * layers * h * h * (1 + model.query_groups / model.num_attention_heads + score) * projection_ratio
    )
    logits = 3 * 2 * h * padded_vocab
    return mlp + attention + logits


def layer_flops_per_token(model: ModelSpec, seq_length: int) -> float:
    """One transformer layer's share (causal convention): the unit of pipeline balance."""
    return (flops_per_token(model, seq_length, 0)) / model.num_layers


def output_layer_flops_per_token(model: ModelSpec, padded_vocab: int) -> float:
    """The output (logits) layer's FLOPs per token, carried by the last pipeline stage."""
    return 3 * 2 * model.hidden_size * padded_vocab


def flops_per_iteration(
    model: ModelSpec, seq_length: int, padded_vocab: int, global_batch_size: int
) -> dict[str, float]:
    """FLOPs of one global batch in both conventions."""
    tokens = global_batch_size * seq_length
    return {c: flops_per_token(model, seq_length, padded_vocab, c) * tokens for c in CONVENTIONS}
