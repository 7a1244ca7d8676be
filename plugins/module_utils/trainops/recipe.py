"""Training recipes: ``-e recipe=default|vendor``.

``default`` is the bundle's own choices (Llama 3's RoPE base, an iteration-based schedule, the fused kernels,
recompute auto, a validation split). ``vendor`` renders what Moore Threads' Llama3-8B script runs
(``run_pretrain_llama3_musa.sh`` of the megatron-lm-musa-patch history, ``docs/plan.md`` "The vendor's recipe"):

- the sample-based schedule: ``--train-samples 24414062`` (about 100 B tokens at seq 4096) and
  ``--lr-warmup-samples`` = 2000 x the global batch (2,048,000 at gbs 1024), instead of --train-iters and
  --lr-warmup-iters;
- no ``--rotary-base``: Megatron's default 10000 (Llama 3 itself was defined with 500000);
  ``--max-position-embeddings`` = the sequence length;
- ``--no-bias-swiglu-fusion --no-bias-dropout-fusion --no-masked-softmax-fusion``;
- recompute none (the vendor's ``--recompute-granularity full --recompute-method block --recompute-num-layers 0``
  recomputes no layer; the recipe renders none as no flag at all);
- at pp=2 the vendor's stage split, 18/14 (``--decoder-last-pipeline-num-layers 14``);
- ``--split 1 --eval-iters 0 --eval-interval 1000``, seed 42, the same optimiser.

What the user gives explicitly (``-e recompute``, ``-e last_stage_layers``, a ``training`` key) wins over the recipe.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .layout import LayoutRequest
from .megatron_args import TrainingConfig
from .model import ModelSpec

RECIPES = ("default", "vendor")
#: The vendor script's TRAIN_SAMPLES (24414062 x 4096 tokens: about 100 B).
VENDOR_TRAIN_SAMPLES = 24414062
#: The vendor script's last pipeline stage at pp=2 (first 18, last 14 of Llama3-8B's 32 layers).
VENDOR_LAST_STAGE_LAYERS_PP2 = 14
#: The model the vendor's script trains (its architecture flags are the preset's).
VENDOR_MODEL = "llama3-8b"

_VENDOR_TRAINING = {
    "train_samples": VENDOR_TRAIN_SAMPLES,
    "split": "1",
    "eval_iters": 0,
    "eval_interval": 1000,
    "seed": 42,
    "bias_fusions": False,
    "masked_softmax_fusion": False,
}


def apply_recipe(
    model: ModelSpec | None,
    request: LayoutRequest,
    training: TrainingConfig,
    layout_given: Mapping[str, Any],
    training_given: Mapping[str, Any],
    problems: list[str],
) -> tuple[ModelSpec | None, LayoutRequest, TrainingConfig]:
    """The model, layout request and training settings of ``request.recipe``; what the user gave (the keys of
    ``layout_given`` and ``training_given`` with a value) is kept. Problems are appended to ``problems``."""
    name = request.recipe
    if name not in RECIPES:
        problems.append(f"recipe {name!r} is unknown; use one of {', '.join(RECIPES)}")
        return model, request, training
    if name == "default":
        return model, request, training

    def given(mapping: Mapping[str, Any], key: str) -> bool:
        return mapping.get(key) not in (None, "")

    if model is not None and model.name != VENDOR_MODEL:
        problems.append(
            f"recipe=vendor is the vendor's {VENDOR_MODEL} script; model {model.name!r} is another: use "
            f"-e model={VENDOR_MODEL}, or recipe=default"
        )
    if given(layout_given, "train_iters") and not given(training_given, "train_samples"):
        problems.append(
            f"recipe=vendor trains by samples (--train-samples {VENDOR_TRAIN_SAMPLES}), which Megatron does not take "
            'with --train-iters: drop -e train_iters, or give the length as -e \'{"training": {"train_samples": '
            "N}}', or use recipe=default"
        )
    changes = {k: v for k, v in _VENDOR_TRAINING.items() if not given(training_given, k)}
    training = replace(training, **changes)
    layout_changes: dict[str, Any] = {}
    if not given(layout_given, "recompute"):
        layout_changes["recompute"] = "none"
    if (
        request.pp == 2
        and not given(layout_given, "first_stage_layers")
        and not given(layout_given, "last_stage_layers")
        and (model is None or model.num_layers > VENDOR_LAST_STAGE_LAYERS_PP2)
    ):
        layout_changes["last_stage_layers"] = VENDOR_LAST_STAGE_LAYERS_PP2
    request = replace(request, **layout_changes)
    if model is not None:
        # no --rotary-base (Megatron's 10000, as the vendor's script); max positions = the sequence, as the vendor's
        positions = request.seq_length if isinstance(request.seq_length, int) else model.max_position_embeddings
        model = replace(model, rotary_base=None, max_position_embeddings=min(positions, model.max_position_embeddings))
    return model, request, training
