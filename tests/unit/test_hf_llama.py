"""trainops.hf_llama: a Megatron Llama's tensors as Hugging Face's LlamaForCausalLM holds them (no weights, no
torch: numpy arrays stand in for tensors)."""

from __future__ import annotations

import numpy as np
import pytest
from presets import load_preset
from trainops.hf_llama import NotLlama, hf_config, hf_shapes, merge_qkv, split_gate_up, split_qkv, tensors
from trainops.layout import padded_vocab_size
from trainops.model import model_from_dict

#: meta-llama/Meta-Llama-3-8B's config.json as published (the architecture's fields; bos/eos and the generation
#: settings come from the tokenizer, transformers_version from the writer).
LLAMA3_8B_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 8192, "model_type": "llama", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 128256,
}  # fmt: skip


def test_the_llama3_8b_preset_is_the_published_config_and_every_tensor_has_its_name_and_shape():
    model = model_from_dict(load_preset("llama3-8b"))
    config = hf_config(model, vocab_size=128256)
    assert {key: config[key] for key in LLAMA3_8B_CONFIG} == LLAMA3_8B_CONFIG
    padded = padded_vocab_size(128256, 8)  # tp 8: a multiple of 128 x 8
    mapped = tensors(model, padded, 128256)
    names = [name for t in mapped for name in t.hf]
    published = hf_shapes(LLAMA3_8B_CONFIG)
    assert len(names) == len(set(names)) == len(published) == 291  # embed, 32 x 9, norm, lm_head
    assert {name: shape for t in mapped for name, shape in zip(t.hf, t.hf_shapes, strict=True)} == published
    qkv = next(t for t in mapped if t.megatron == "decoder.layers.0.self_attention.linear_qkv.weight")
    assert qkv.megatron_shape == ((32 + 2 * 8) * 128, 4096) and qkv.how == "qkv"
    fc1 = next(t for t in mapped if t.megatron == "decoder.layers.31.mlp.linear_fc1.weight")
    assert fc1.megatron_shape == (2 * 14336, 4096) and fc1.hf[0].endswith("gate_proj.weight")
    assert mapped[0].megatron_shape == (padded, 4096) and mapped[0].hf_shapes == ((128256, 4096),)
    local = {t.megatron for t in tensors(model, padded, 128256, fused_norms=False)}
    assert "decoder.layers.0.input_layernorm.weight" in local and "decoder.layers.0.pre_mlp_layernorm.weight" in local


def test_the_query_key_value_split_is_megatrons_per_group_layout():
    """Megatron's attention on x, done as its get_query_key_value_tensors does (one projection, viewed per query
    group, split), equals Hugging Face's three projections with the split weights; merge_qkv undoes the split."""
    heads, groups, head_dim, hidden = 8, 2, 4, 16
    rng = np.random.default_rng(0)
    weight = rng.standard_normal(((heads + 2 * groups) * head_dim, hidden))
    x = rng.standard_normal((3, hidden))
    mixed = (x @ weight.T).reshape(3, groups, (heads // groups + 2) * head_dim)
    query = mixed[..., : heads // groups * head_dim].reshape(3, heads, head_dim)
    key = mixed[..., heads // groups * head_dim : (heads // groups + 1) * head_dim]
    value = mixed[..., (heads // groups + 1) * head_dim :]
    q, k, v = split_qkv(weight, heads, groups, head_dim)
    assert np.array_equal((x @ q.T).reshape(3, heads, head_dim), query)
    assert np.array_equal((x @ k.T).reshape(3, groups, head_dim), key)
    assert np.array_equal((x @ v.T).reshape(3, groups, head_dim), value)
    assert np.array_equal(merge_qkv(q, k, v, heads, groups, head_dim, np.concatenate), weight)


def test_swiglu_gate_is_the_first_half():
    rng = np.random.default_rng(1)
    weight, x = rng.standard_normal((2 * 6, 5)), rng.standard_normal((2, 5))
    out = x @ weight.T
    first, second = out[:, :6], out[:, 6:]
    megatron = first / (1 + np.exp(-first)) * second  # glu: silu(chunk 0) * chunk 1
    gate, up = split_gate_up(weight)
    hf = (x @ gate.T) / (1 + np.exp(-(x @ gate.T))) * (x @ up.T)  # LlamaMLP: act(gate_proj(x)) * up_proj(x)
    assert np.allclose(hf, megatron)


def test_a_model_that_is_not_a_llama_is_refused_naming_why():
    preset = dict(load_preset("tiny"), swiglu=False, normalization="LayerNorm", add_bias_linear=True)
    with pytest.raises(NotLlama) as refused:
        hf_config(model_from_dict(preset), vocab_size=4096)
    assert str(refused.value) == (
        "model 'tiny' is not a Llama: swiglu is false (Llama's MLP is SwiGLU); normalization is LayerNorm (Llama's "
        "is RMSNorm); add_bias_linear is true (Llama's linear layers have no bias)"
    )
