"""Megatron GPT <-> Hugging Face Llama: the model's ``config.json`` and where each tensor goes (issue 37's export
and import build on it).

A Llama-shaped preset (:class:`.model.ModelSpec`: SwiGLU, RMSNorm, RoPE, no biases, grouped-query attention or
not) trained by Megatron-LM core 0.14 is, tensor for tensor, a ``LlamaForCausalLM``; three tensors differ in
layout, and getting them wrong gives a model that loads and produces garbage:

* ``self_attention.linear_qkv.weight`` holds the query, key and value rows **per query group**: for each of the
  ``g`` groups, its ``heads / g`` query heads, then its key head, then its value head, ``head_dim`` rows each
  (Megatron's ``Attention.get_query_key_value_tensors`` views the output as ``[.., g, (heads/g + 2) * head_dim]``
  and splits the last axis). Hugging Face keeps ``q_proj``, ``k_proj`` and ``v_proj`` apart, heads in order.
* ``mlp.linear_fc1.weight`` is SwiGLU's two projections stacked: the first half is the gate (through SiLU), the
  second the up projection (Megatron's ``glu``: ``silu(x[0]) * x[1]`` of ``chunk(x, 2)``).
* the word embeddings and the output layer have Megatron's padded vocabulary (a multiple of 128 x tp): the
  tokenizer's rows are the first ``vocab_size``; the padding rows are dropped on export and zeros on import.

RoPE needs no permutation: Megatron's default rotary embedding is the non-interleaved one
(``rotary_interleaved=False``, ``rotate_half``), which is Hugging Face Llama's. The norms are named by the layer
spec: Transformer Engine's fuses them into the next linear layer (``linear_qkv.layer_norm_weight``,
``linear_fc1.layer_norm_weight``), Megatron's local spec keeps them apart (``input_layernorm.weight``,
``pre_mlp_layernorm.weight``).

The splits work on any array with numpy-style slicing, ``reshape`` and ``shape`` (numpy, torch): this module reads
no file and needs neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .model import ModelSpec

#: The ``config.json`` fields that say which model a directory holds: an import compares them with the run's.
COMPARED = (
    "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "head_dim", "vocab_size", "rope_theta", "rms_norm_eps", "tie_word_embeddings",
)  # fmt: skip
#: What each Megatron tensor becomes: copied whole, split per query group into q/k/v, halved into gate/up, or cut
#: to the tokenizer's vocabulary.
HOW = ("copy", "qkv", "gate_up", "vocab")


class NotLlama(ValueError):
    """The model is not one a ``LlamaForCausalLM`` can hold (the reason names the preset's field)."""


@dataclass(frozen=True)
class Tensor:
    """One Megatron tensor (its name in the model's state dict, without tp/pp shards: a whole layer) and the
    Hugging Face tensors it becomes, with both sides' shapes."""

    megatron: str
    megatron_shape: tuple[int, ...]
    hf: tuple[str, ...]
    hf_shapes: tuple[tuple[int, ...], ...]
    how: str


def check_llama(model: ModelSpec) -> None:
    """Raise :class:`NotLlama` naming every field that keeps the preset from being a Llama."""
    problems = []
    if not model.swiglu:
        problems.append("swiglu is false (Llama's MLP is SwiGLU)")
    if model.normalization != "RMSNorm":
        problems.append(f"normalization is {model.normalization} (Llama's is RMSNorm)")
    if model.position_embedding_type != "rope":
        problems.append(f"position_embedding_type is {model.position_embedding_type} (Llama's is rope)")
    if model.add_bias_linear:
        problems.append("add_bias_linear is true (Llama's linear layers have no bias)")
    if model.num_attention_heads % model.query_groups:
        problems.append(f"{model.num_attention_heads} heads do not divide into {model.query_groups} query groups")
    if problems:
        raise NotLlama(f"model {model.name!r} is not a Llama: " + "; ".join(problems))


def hf_config(model: ModelSpec, vocab_size: int, dtype: str = "bfloat16") -> dict[str, Any]:
    """``config.json`` of the ``LlamaForCausalLM`` that holds ``model``, with the tokenizer's ``vocab_size`` (not
    Megatron's padded one)."""
    check_llama(model)
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": model.hidden_size,
        "intermediate_size": model.ffn_hidden_size,
        "num_hidden_layers": model.num_layers,
        "num_attention_heads": model.num_attention_heads,
        "num_key_value_heads": model.query_groups,
        "head_dim": model.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": model.norm_epsilon,
        "rope_theta": float(model.rotary_base),
        "max_position_embeddings": model.max_position_embeddings,
        "vocab_size": vocab_size,
        "tie_word_embeddings": not model.untie_embeddings_and_output_weights,
        "attention_bias": False,
        "mlp_bias": False,
        "initializer_range": model.init_method_std,
        "torch_dtype": dtype,
    }


def tensors(model: ModelSpec, padded_vocab: int, vocab_size: int, fused_norms: bool = True) -> list[Tensor]:
    """Every tensor of ``model`` in Megatron's naming (``fused_norms``: Transformer Engine's layer spec, else the
    local one) with its Hugging Face names and shapes, in the order of the layers."""
    check_llama(model)
    hidden, ffn, head = model.hidden_size, model.ffn_hidden_size, model.head_dim
    heads, groups = model.num_attention_heads, model.query_groups
    out = [Tensor("embedding.word_embeddings.weight", (padded_vocab, hidden), ("model.embed_tokens.weight",),
                  ((vocab_size, hidden),), "vocab")]  # fmt: skip
    for i in range(model.num_layers):
        meg, hf = f"decoder.layers.{i}.", f"model.layers.{i}."
        input_norm = "self_attention.linear_qkv.layer_norm_weight" if fused_norms else "input_layernorm.weight"
        mlp_norm = "mlp.linear_fc1.layer_norm_weight" if fused_norms else "pre_mlp_layernorm.weight"
        out += [
            Tensor(meg + input_norm, (hidden,), (hf + "input_layernorm.weight",), ((hidden,),), "copy"),
            Tensor(meg + "self_attention.linear_qkv.weight", ((heads + 2 * groups) * head, hidden),
                   tuple(hf + f"self_attn.{p}_proj.weight" for p in "qkv"),
                   ((heads * head, hidden), (groups * head, hidden), (groups * head, hidden)), "qkv"),
            Tensor(meg + "self_attention.linear_proj.weight", (hidden, heads * head),
                   (hf + "self_attn.o_proj.weight",), ((hidden, heads * head),), "copy"),
            Tensor(meg + mlp_norm, (hidden,), (hf + "post_attention_layernorm.weight",), ((hidden,),), "copy"),
            Tensor(meg + "mlp.linear_fc1.weight", (2 * ffn, hidden),
                   (hf + "mlp.gate_proj.weight", hf + "mlp.up_proj.weight"), ((ffn, hidden), (ffn, hidden)),
                   "gate_up"),
            Tensor(meg + "mlp.linear_fc2.weight", (hidden, ffn), (hf + "mlp.down_proj.weight",), ((hidden, ffn),),
                   "copy"),
        ]  # fmt: skip
    out.append(Tensor("decoder.final_layernorm.weight", (hidden,), ("model.norm.weight",), ((hidden,),), "copy"))
    if model.untie_embeddings_and_output_weights:
        out.append(Tensor("output_layer.weight", (padded_vocab, hidden), ("lm_head.weight",), ((vocab_size, hidden),),
                          "vocab"))  # fmt: skip
    return out


def split_qkv(weight: Any, heads: int, groups: int, head_dim: int) -> tuple[Any, Any, Any]:
    """Megatron's ``linear_qkv.weight`` ([(heads + 2 groups) head_dim, hidden], per group: its queries, key, value)
    as Hugging Face's ``q_proj``, ``k_proj``, ``v_proj`` weights."""
    per_group = heads // groups
    hidden = weight.shape[-1]
    grouped = weight.reshape(groups, (per_group + 2) * head_dim, hidden)
    query = grouped[:, : per_group * head_dim].reshape(heads * head_dim, hidden)
    key = grouped[:, per_group * head_dim : (per_group + 1) * head_dim].reshape(groups * head_dim, hidden)
    value = grouped[:, (per_group + 1) * head_dim :].reshape(groups * head_dim, hidden)
    return query, key, value


def merge_qkv(query: Any, key: Any, value: Any, heads: int, groups: int, head_dim: int, concat) -> Any:
    """The inverse of :func:`split_qkv`; ``concat(list, axis)`` joins arrays (``numpy.concatenate``, ``torch.cat``
    with ``dim``)."""
    per_group, hidden = heads // groups, query.shape[-1]
    parts = []
    for g in range(groups):
        parts += [query[g * per_group * head_dim : (g + 1) * per_group * head_dim],
                  key[g * head_dim : (g + 1) * head_dim], value[g * head_dim : (g + 1) * head_dim]]  # fmt: skip
    merged = concat(parts, 0)
    assert merged.shape == ((heads + 2 * groups) * head_dim, hidden)
    return merged


def split_gate_up(weight: Any) -> tuple[Any, Any]:
    """Megatron's SwiGLU ``linear_fc1.weight`` as Hugging Face's ``gate_proj`` (its first half) and ``up_proj``."""
    half = weight.shape[0] // 2
    return weight[:half], weight[half:]


def hf_shapes(config: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """Every tensor of the ``LlamaForCausalLM`` that ``config`` (a ``config.json``) describes, with its shape, as
    ``transformers`` builds it."""
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    head = config.get("head_dim") or hidden // config["num_attention_heads"]
    q, kv, ffn = config["num_attention_heads"] * head, config["num_key_value_heads"] * head, config["intermediate_size"]
    shapes = {"model.embed_tokens.weight": (config["vocab_size"], hidden), "model.norm.weight": (hidden,)}
    for i in range(layers):
        at = f"model.layers.{i}."
        shapes.update({
            at + "input_layernorm.weight": (hidden,), at + "post_attention_layernorm.weight": (hidden,),
            at + "self_attn.q_proj.weight": (q, hidden), at + "self_attn.k_proj.weight": (kv, hidden),
            at + "self_attn.v_proj.weight": (kv, hidden), at + "self_attn.o_proj.weight": (hidden, q),
            at + "mlp.gate_proj.weight": (ffn, hidden), at + "mlp.up_proj.weight": (ffn, hidden),
            at + "mlp.down_proj.weight": (hidden, ffn),
        })  # fmt: skip
    if not config.get("tie_word_embeddings"):
        shapes["lm_head.weight"] = (config["vocab_size"], hidden)
    return shapes
