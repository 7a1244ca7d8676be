"""Model presets: the architecture of a decoder-only transformer, as data.

Presets live in ``models/<name>.yml``; the caller loads the YAML and hands the
mapping to :func:`model_from_dict`, which validates every field and reports
all problems at once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
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


_NORMALIZATIONS = ("RMSNorm", "LayerNorm")
_POSITION_TYPES = ("rope", "learned_absolute", "none")
_TOKENIZER_TYPES = ("TikTokenizer", "SentencePieceTokenizer", "HuggingFaceTokenizer", "NullTokenizer")
#: Each preset key's rule: (type, least value or choices). 0 for num_query_groups and kv_channels: "as the heads".
RULES: dict[str, tuple[type, Any]] = {
    "name": (str, None),
    "num_layers": (int, 1),
    "hidden_size": (int, 1),
    "ffn_hidden_size": (int, 1),
    "num_attention_heads": (int, 1),
    "vocab_size": (int, 1),
    "num_query_groups": (int, 0),
    "kv_channels": (int, 0),
    "max_position_embeddings": (int, 1),
    "swiglu": (bool, None),
    "normalization": (str, _NORMALIZATIONS),
    "norm_epsilon": (float, 0.0),
    "untie_embeddings_and_output_weights": (bool, None),
    "position_embedding_type": (str, _POSITION_TYPES),
    "rotary_base": (int, 1),
    "add_bias_linear": (bool, None),
    "init_method_std": (float, 0.0),
    "tokenizer_type": (str, _TOKENIZER_TYPES),
    "tokenizer_options": (dict, None),
    "description": (str, None),
}


def key_problem(name: Any, key: str, value: Any) -> str | None:
    """Why ``value`` cannot be preset key ``key``, or None."""
    kind, rule = RULES[key]
    where = f"model {name!r}: {key!r}"
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int) or value < rule:
            return f"{where} must be an integer >= {rule}, got {value!r}"
    elif kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= rule:
            return f"{where} must be a finite number > {rule:g}, got {value!r}"
    elif kind is bool:
        if not isinstance(value, bool):
            return f"{where} must be true or false, got {value!r}"
    elif kind is dict:
        if not isinstance(value, Mapping):
            return f"{where} must be a mapping, got {value!r}"
    elif not isinstance(value, str) or (key == "name" and not value.strip()):
        return f"{where} must be a non-empty string, got {value!r}" if key == "name" else f"{where} must be a string"
    elif rule and value not in rule:
        return f"{where} must be one of {', '.join(rule)}, got {value!r}"
    return None


def model_from_dict(data: Mapping[str, Any]) -> ModelSpec:
    """Validate a preset mapping key by key and build a :class:`ModelSpec`.

    Raises :class:`PlanError` listing every problem found.
    """
    problems: list[str] = []
    if not isinstance(data, Mapping):
        raise PlanError([f"a model preset is a mapping of keys, got {type(data).__name__}"])
    known = {f.name for f in fields(ModelSpec)}
    unknown = sorted(set(data) - known)
    if unknown:
        problems.append(f"model preset has unknown keys {unknown}; known keys: {sorted(known)}")
    name = data.get("name")
    required = [f.name for f in fields(ModelSpec) if f.default is MISSING and f.default_factory is MISSING]
    problems += [f"model {name!r}: {key!r} is required" for key in required if key not in data]
    problems += [p for key in sorted(set(data) & known) if (p := key_problem(name, key, data[key]))]
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
    if problems:
        raise PlanError(problems)
    return spec
