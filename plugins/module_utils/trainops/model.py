"""Model presets: the architecture of a decoder-only transformer, as data.

Presets live in ``models/<name>.yml``; the caller loads the YAML and hands the
mapping to :func:`model_from_dict`, which validates every field and reports
all problems at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from .errors import PlanError


@dataclass(frozen=True)
class ModelSpec:
    """A dense GPT-style model as Megatron-LM's ``pretrain_gpt.py`` builds it."""

    name: str
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    vocab_size: int
    #: GQA query groups; equal to the heads for plain multi-head attention.
    num_query_groups: int = 0
    #: Per-head projection size; defaults to hidden / heads.
    kv_channels: int = 0
    max_position_embeddings: int = 4096
    swiglu: bool = True
    normalization: str = "RMSNorm"
    norm_epsilon: float = 1e-5
    untie_embeddings_and_output_weights: bool = True
    position_embedding_type: str = "rope"
    rotary_base: int = 10000
    add_bias_linear: bool = False
    init_method_std: float = 0.02
    #: Megatron tokenizer type the preset's tokenizer file is (TikTokenizer, ...).
    tokenizer_type: str = "HuggingFaceTokenizer"
    #: Extra tokenizer arguments (e.g. ``tiktoken_pattern: v2``).
    tokenizer_options: dict = field(default_factory=dict)
    description: str = ""

    @property
    def query_groups(self) -> int:
        return self.num_query_groups or self.num_attention_heads

    @property
    def group_query_attention(self) -> bool:
        return self.query_groups != self.num_attention_heads

    @property
    def head_dim(self) -> int:
        return self.kv_channels or self.hidden_size // self.num_attention_heads


_INT_FIELDS = (
    "num_layers",
    "hidden_size",
    "ffn_hidden_size",
    "num_attention_heads",
    "vocab_size",
    "max_position_embeddings",
)
_NORMALIZATIONS = ("RMSNorm", "LayerNorm")
_POSITION_TYPES = ("rope", "learned_absolute", "none")


def model_from_dict(data: Mapping[str, Any]) -> ModelSpec:
    """Validate a preset mapping and build a :class:`ModelSpec`.

    Raises :class:`PlanError` listing every problem found.
    """
    problems: list[str] = []
    known = {f.name for f in fields(ModelSpec)}
    unknown = sorted(set(data) - known)
    if unknown:
        problems.append(f"model preset has unknown keys {unknown}; known keys: {sorted(known)}")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        problems.append("model preset needs a 'name' (string)")
    for key in _INT_FIELDS:
        value = data.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            problems.append(f"model {name!r}: '{key}' must be a positive integer, got {value!r}")
    if problems:
        raise PlanError(problems)
    spec = ModelSpec(**{k: v for k, v in data.items() if k in known})
    if spec.hidden_size % spec.num_attention_heads and not spec.kv_channels:
        problems.append(
            f"model {spec.name!r}: hidden_size {spec.hidden_size} is not divisible by "
            f"{spec.num_attention_heads} heads; set kv_channels"
        )
    if spec.num_attention_heads % spec.query_groups:
        problems.append(
            f"model {spec.name!r}: {spec.num_attention_heads} heads are not divisible by "
            f"{spec.query_groups} query groups"
        )
    if spec.normalization not in _NORMALIZATIONS:
        problems.append(f"model {spec.name!r}: normalization must be one of {_NORMALIZATIONS}")
    if spec.position_embedding_type not in _POSITION_TYPES:
        problems.append(f"model {spec.name!r}: position_embedding_type must be one of {_POSITION_TYPES}")
    if problems:
        raise PlanError(problems)
    return spec
