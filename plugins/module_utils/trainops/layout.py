"""Parallel layout: derive and validate every number of a Megatron launch.

:func:`plan_layout` takes a model, a cluster and a :class:`LayoutRequest` and
returns a :class:`Layout`, or raises :class:`PlanError` with *every* problem
found, each naming the valid alternatives. The checks are those of Megatron's
``validate_args``, ``TransformerConfig.__post_init__``, the micro-batch
calculator and the interleaved schedule, for the given Megatron version.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

from .cluster import Cluster
from .errors import PlanError
from .flops import layer_flops_per_token, output_layer_flops_per_token
from .memory import GIB, StageMemory, estimate_stages
from .model import ModelSpec
from .plan_request import DEFAULT_HEADROOM

PRECISIONS = ("bf16", "fp8", "fp32")
#: auto: the least recomputation (in this order after it) whose estimate fits the card less the headroom.
RECOMPUTE = ("auto", "none", "selective", "full")
#: What auto tries, least recomputation first.
RECOMPUTE_ORDER = ("none", "selective", "full")
#: Megatron's --transformer-impl: Transformer Engine layers (FP8, fused attention), or Megatron's own (local).
TRANSFORMER_IMPLS = ("transformer_engine", "local")
#: How much slower than the best split an even split may be and still be chosen.
BALANCE_TOLERANCE = 0.05


@dataclass(frozen=True)
class LayoutRequest:
    """What the user asks for (``-e`` values); the defaults are the vendor runbook's."""

    tp: int = 1
    pp: int = 1
    cp: int = 1
    vpp: int | None = None
    mbs: int = 1
    #: Give one of the two; with neither, 128 micro-batches (the runbook's).
    num_microbatches: int | None = None
    gbs: int | None = None
    seq_length: int = 4096
    precision: str = "fp8"
    #: auto (the least of none < selective < full that fits; plan_layout chooses it), none, selective or full.
    recompute: str = "auto"
    distributed_optimizer: bool = True
    #: None: on when tp > 1 (Megatron turns it off at tp = 1 anyway).
    sequence_parallel: bool | None = None
    #: A memory-efficient fused attention kernel (flash or cuDNN), through Transformer Engine; False: unfused.
    flash_attention: bool = True
    #: ``transformer_engine`` (default, and needed by fp8) or ``local`` (Megatron's own layers, whose attention is
    #: the plain DotProductAttention: it keeps the s x s scores, whatever flash_attention says).
    transformer_impl: str = "transformer_engine"
    megatron_version: str = "0.14"
    #: Optional overrides of the computed uneven pipeline split.
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    train_iters: int = 100000
    #: default (the bundle's choices) or vendor (the vendor's Llama3-8B script's: :mod:`.recipe`).
    recipe: str = "default"


DEFAULT_NUM_MICROBATCHES = 128


def attention_kind(req: LayoutRequest) -> str:
    """The attention the launch runs: ``fused`` (Transformer Engine's flash or cuDNN kernel, --attention-backend
    auto), ``unfused`` (Transformer Engine, --attention-backend unfused) or ``local`` (Megatron's own
    DotProductAttention). Only ``fused`` avoids keeping the s x s scores."""
    if req.transformer_impl == "local":
        return "local"
    return "fused" if req.flash_attention else "unfused"


def keeps_attention_scores(req: LayoutRequest) -> bool:
    """Whether the attention that runs keeps the s x s scores (the memory estimate counts them then)."""
    return attention_kind(req) != "fused"


@dataclass(frozen=True)
class Layout:
    """A validated layout: everything the launch needs, derived once."""

    request: LayoutRequest
    world_size: int
    tp: int
    pp: int
    cp: int
    vpp: int | None
    dp: int
    micro_batch_size: int
    num_microbatches: int
    global_batch_size: int
    seq_length: int
    padded_vocab: int
    sequence_parallel: bool
    stage_layers: tuple[int, ...]
    #: Values for --decoder-first/last-pipeline-num-layers; None means "not passed".
    decoder_first_pipeline_num_layers: int | None
    decoder_last_pipeline_num_layers: int | None
    warnings: tuple[str, ...] = field(default=())
    #: Why ``request.recompute`` is what it is (auto's choice from the memory estimate, or given).
    recompute_reason: str = ""

    @property
    def exp_name(self) -> str:
        """The layout's part of the experiment name (``tp1_pp2_dp8_mbs1_numbs128_gbs1024_gpus16``), and the whole
        name before the model joined it: :func:`.identity.experiment_name` puts the model, its architecture's
        digest, the sequence length and the precision before it (a checkpoint directory belongs to one model)."""
        parts = [f"tp{self.tp}", f"pp{self.pp}"]
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
        if self.vpp:
            parts.append(f"vpp{self.vpp}")
        parts += [
            f"dp{self.dp}",
            f"mbs{self.micro_batch_size}",
            f"numbs{self.num_microbatches}",
            f"gbs{self.global_batch_size}",
            f"gpus{self.world_size}",
        ]
        return "_".join(parts)


def parse_version(text: str) -> tuple[int, int]:
    """'0.14' / 'core_v0.14.0' / '0.14.0rc1' -> (0, 14)."""
    digits = str(text).lower().replace("core_v", "").lstrip("v").split(".")
    try:
        return int(digits[0]), int("".join(ch for ch in digits[1] if ch.isdigit()) or 0)
    except (IndexError, ValueError):
        raise PlanError([f"megatron_version {text!r} is not a version like 0.14"]) from None


def divisors(n: int) -> list[int]:
    """All positive divisors of ``n`` in ascending order."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def padded_vocab_size(vocab: int, tp: int, divisible_by: int = 128) -> int:
    """Megatron's ``_vocab_size_with_padding``."""
    multiple = divisible_by * tp
    return math.ceil(vocab / multiple) * multiple


def tp_allowed(model: ModelSpec, tp: int, version: tuple[int, int]) -> bool:
    """Heads divisible by TP; query groups a multiple of TP (0.16+: or a divisor)."""
    if model.num_attention_heads % tp:
        return False
    groups = model.query_groups
    return groups % tp == 0 or (version >= (0, 16) and tp % groups == 0)


def _fmt(values: Sequence[int], limit: int = 12) -> str:
    values = list(values)
    if not values:
        return "none"
    text = ", ".join(str(v) for v in values[:limit])
    return text + (", ..." if len(values) > limit else "")


@lru_cache(maxsize=4096)
def split_stages(
    num_layers: int, pp: int, vpp: int | None, output_cost: float
) -> tuple[tuple[int, ...], int | None, int | None] | None:
    """Choose the layers of every pipeline stage.

    ``output_cost`` is the output layer's cost in transformer layers; the last
    stage carries it (the embedding lookup of the first stage costs next to no
    compute). Minimises the slowest stage; ties go to an even split (no flags),
    then to the fewest flags. Middle stages must be equal, and with VPP every
    stage a multiple of VPP (Megatron's TransformerConfig rules). Returns
    ``(stage_layers, first_flag, last_flag)`` or None when no split exists.
    """
    step = vpp or 1
    if pp == 1:
        return ((num_layers,), None, None) if num_layers % step == 0 else None
    candidates = []
    middles = pp - 2
    for first in range(step, num_layers, step):
        for last in range(step, num_layers - first + 1, step):
            rest = num_layers - first - last
            if middles == 0:
                if rest:
                    continue
                mid = None
            else:
                if rest < middles * step or rest % middles or (rest // middles) % step:
                    continue
                mid = rest // middles
            cost = max([first, last + output_cost] + ([mid] if mid else []))
            even = first == last and (mid is None or mid == first)
            if mid is None:  # PP=2: Megatron takes the first stage as "the middle"
                flags = 0 if even else 1
            else:
                flags = (first != mid) + (last != mid)
            candidates.append((cost, even, flags, first, last, mid))
    if not candidates:
        return None
    # Within BALANCE_TOLERANCE of the best, prefer an even split, then fewer
    # flags, then the cheaper slowest stage, then a lighter first stage (it
    # holds the most micro-batches in flight).
    limit = min(c[0] for c in candidates) * (1 + BALANCE_TOLERANCE)
    best = min((c for c in candidates if c[0] <= limit), key=lambda c: (not c[1], c[2], c[0], c[3]))
    first, last, mid = best[3:]
    if mid is None:
        stages = (first, last)
        first_flag, last_flag = None, (None if first == last else last)
    else:
        stages = (first,) + (mid,) * middles + (last,)
        first_flag = first if first != mid else None
        last_flag = last if last != mid else None
    return stages, first_flag, last_flag


def _explicit_split(
    num_layers: int, pp: int, vpp: int | None, first: int | None, last: int | None, problems: list[str]
) -> tuple[tuple[int, ...], int | None, int | None] | None:
    """Stage layers from user-given first/last stage sizes, checked as Megatron does."""
    if pp == 1:
        problems.append("first_stage_layers/last_stage_layers need pp > 1; drop them for pp=1")
        return None
    step = vpp or 1
    rest, middles = num_layers, pp
    for label, value in (("first_stage_layers", first), ("last_stage_layers", last)):
        if value is None:
            continue
        if value < 1 or value % step:
            problems.append(f"{label}={value} must be >= 1 and a multiple of vpp={step}")
            return None
        rest -= value
        middles -= 1
    if middles == 0:
        if rest:
            problems.append(
                f"first_stage_layers + last_stage_layers = {num_layers - rest} but the model has {num_layers} layers"
            )
            return None
        return (first, last), None, last
    if rest < middles or rest % middles or (rest // middles) % step:
        given = " + ".join(f"{k}={v}" for k, v in (("first_stage_layers", first), ("last_stage_layers", last)) if v)
        problems.append(
            f"{given} leaves {rest} of the model's {num_layers} layers for the other {middles} stage(s), which "
            "do not split evenly"
            + (f" into multiples of vpp={step}" if vpp else "")
            + f"; the other stages need at least {middles * step} layers, equal and a multiple of {step}"
        )
        return None
    mid = rest // middles
    stages = ((first,) if first else (mid,)) + (mid,) * (pp - 2) + ((last,) if last else (mid,))
    return stages, first, last


def stage_memory(model: ModelSpec, layout: Layout) -> list[StageMemory]:
    """The per-stage memory estimate of a validated layout (its request's recompute, none, selective or full)."""
    req = layout.request
    return estimate_stages(
        model,
        stage_layers=layout.stage_layers,
        tp=layout.tp,
        cp=layout.cp,
        vpp=layout.vpp,
        dp=layout.dp,
        micro_batch_size=layout.micro_batch_size,
        seq_length=layout.seq_length,
        padded_vocab=layout.padded_vocab,
        num_microbatches=layout.num_microbatches,
        distributed_optimizer=req.distributed_optimizer,
        sequence_parallel=layout.sequence_parallel,
        recompute=req.recompute,
        flash_attention=not keeps_attention_scores(req),
        precision=req.precision,
    )


def memory_limit_gib(cluster: Cluster, headroom_fraction: float) -> float:
    """What the planner lets a layout use on one card."""
    return cluster.memory_gib * (1 - headroom_fraction)


def choose_recompute(model: ModelSpec, cluster: Cluster, layout: Layout, headroom_fraction: float) -> Layout:
    """``layout`` with ``recompute=auto`` resolved: the least recomputation (none < selective < full) whose most
    loaded stage fits the card less the headroom, as the planner judges fit (plan.memory_report); full when none
    does (the plan then refuses the layout, unless forced). A given recompute is kept, its reason "given"."""
    req = layout.request
    if req.recompute != "auto":
        return replace(layout, recompute_reason=f"{req.recompute} (given: -e recompute={req.recompute})")
    limit = memory_limit_gib(cluster, headroom_fraction)
    needs: list[str] = []
    for mode in RECOMPUTE_ORDER:
        chosen = replace(layout, request=replace(req, recompute=mode))
        need = max(st.total for st in stage_memory(model, chosen)) / GIB
        needs.append(f"{mode} {need:.1f} GiB")
        if need <= limit:
            break
    where = f"limit {limit:.1f} GiB per card ({cluster.memory_gib:g} less {headroom_fraction:.0%} headroom)"
    if need > limit:
        why = f"auto: full, the most there is, and it still does not fit ({', '.join(needs)}; {where})"
    elif mode == "none":
        why = f"auto: none, nothing needs recomputing ({needs[0]} without recomputation fits the {where})"
    else:
        why = f"auto: {mode}, the least that fits ({', '.join(needs)}; {where})"
    return replace(chosen, recompute_reason=why)


def plan_layout(
    model: ModelSpec,
    cluster: Cluster,
    req: LayoutRequest,
    headroom_fraction: float = DEFAULT_HEADROOM,
    vocab_size: int | None = None,
) -> Layout:
    """Validate ``req`` for ``model`` on ``cluster`` and derive the layout; ``recompute=auto`` is resolved against
    the card's memory less ``headroom_fraction`` (:func:`choose_recompute`). ``vocab_size``: the vocabulary Megatron
    builds when it is the tokenizer's rather than the preset's (a Hugging Face or SentencePiece tokenizer, known from
    the dataset's manifest); the embedding and output layer are padded from it."""
    problems: list[str] = []
    warnings: list[str] = []
    version = parse_version(req.megatron_version)
    world = cluster.world_size
    where = f"world size {world} ({len(cluster.nodes)} node(s), {'+'.join(str(n.slots) for n in cluster.nodes)} cards)"

    ints = {
        "tp": req.tp,
        "pp": req.pp,
        "cp": req.cp,
        "mbs": req.mbs,
        "seq_length": req.seq_length,
        "train_iters": req.train_iters,
    }
    for key in ("vpp", "num_microbatches", "gbs", "first_stage_layers", "last_stage_layers"):
        if getattr(req, key) is not None:
            ints[key] = getattr(req, key)
    for key, value in ints.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            problems.append(f"{key} must be a positive integer, got {value!r}")
    if req.precision not in PRECISIONS:
        problems.append(f"precision {req.precision!r} is unknown; use one of {', '.join(PRECISIONS)}")
    if req.recompute not in RECOMPUTE:
        problems.append(f"recompute {req.recompute!r} is unknown; use one of {', '.join(RECOMPUTE)}")
    if req.transformer_impl not in TRANSFORMER_IMPLS:
        problems.append(
            f"transformer_impl {req.transformer_impl!r} is unknown; use one of {', '.join(TRANSFORMER_IMPLS)}"
        )
    elif req.precision == "fp8" and req.transformer_impl != "transformer_engine":
        problems.append(
            "precision=fp8 runs in Transformer Engine: use transformer_impl=transformer_engine, or precision=bf16 "
            "with transformer_impl=local"
        )
    if problems:
        raise PlanError(problems)
    if req.transformer_impl == "local" and req.flash_attention:
        warnings.append(
            "transformer_impl=local runs Megatron's plain DotProductAttention, which keeps the s x s attention "
            "scores: flash attention does not apply, and the memory estimate counts the scores"
        )

    tp, pp, cp, mbs = req.tp, req.pp, req.cp, req.mbs
    vpp = req.vpp if req.vpp and req.vpp > 1 else None
    heads, groups = model.num_attention_heads, model.query_groups

    if not tp_allowed(model, tp, version):
        valid = [t for t in divisors(heads) if tp_allowed(model, t, version)]
        fitting = [t for t in valid if world % (t * pp * cp) == 0] or valid
        rule = "be a divisor of" if version < (0, 16) else "divide or be a multiple of"
        if heads % tp:
            problems.append(f"tp={tp} does not divide {heads} attention heads; valid tp: {_fmt(fitting)}")
        else:
            problems.append(
                f"tp={tp} must {rule} the {groups} query groups (Megatron {version[0]}.{version[1]}); "
                f"valid tp: {_fmt(fitting)}"
            )
    model_size = tp * pp * cp
    if world % model_size:
        valid_pp = [p for p in divisors(world // math.gcd(world, tp * cp)) if world % (tp * p * cp) == 0]
        valid_tp = [t for t in divisors(world) if world % (t * pp * cp) == 0 and tp_allowed(model, t, version)]
        problems.append(
            f"{where} is not divisible by tp*pp*cp = {tp}*{pp}*{cp} = {model_size}; "
            f"with tp={tp} cp={cp} valid pp: {_fmt(valid_pp)}; with pp={pp} cp={cp} valid tp: {_fmt(valid_tp)}"
        )
    if pp > model.num_layers:
        problems.append(f"pp={pp} exceeds the model's {model.num_layers} layers")
    if cp > 1 and req.seq_length % (2 * cp):
        valid_cp = [c for c in divisors(world) if req.seq_length % (2 * c) == 0 and world % (tp * pp * c) == 0]
        problems.append(
            f"seq_length {req.seq_length} is not divisible by 2*cp = {2 * cp}; valid cp: {_fmt([1] + valid_cp)}"
        )
    if req.seq_length > model.max_position_embeddings:
        problems.append(
            f"seq_length {req.seq_length} exceeds the model's max_position_embeddings "
            f"{model.max_position_embeddings}; use seq_length <= {model.max_position_embeddings}"
        )
    if vpp and pp == 1:
        problems.append(f"vpp={vpp} (interleaved pipeline) needs pp > 1; drop vpp or raise pp")

    dp = world // model_size if world % model_size == 0 else 0
    num_mb, gbs = req.num_microbatches, req.gbs
    if dp:
        if gbs is None:
            num_mb = num_mb or DEFAULT_NUM_MICROBATCHES
            gbs = mbs * dp * num_mb
        elif gbs % (mbs * dp):
            step = mbs * dp
            below, above = gbs // step * step, (gbs // step + 1) * step
            valid_mbs = [m for m in divisors(gbs) if (gbs // m) % dp == 0]
            problems.append(
                f"global batch {gbs} is not divisible by mbs*dp = {mbs}*{dp} = {step}; "
                f"nearest valid gbs: {_fmt([v for v in (below, above) if v > 0])}; "
                f"valid mbs for gbs={gbs}: {_fmt(valid_mbs)}"
            )
        elif num_mb is not None and num_mb != gbs // (mbs * dp):
            problems.append(
                f"num_microbatches={num_mb} and gbs={gbs} disagree: gbs/(mbs*dp) = {gbs // (mbs * dp)}; "
                "give only one of them"
            )
        else:
            num_mb = gbs // (mbs * dp)
        if vpp and num_mb and gbs % (mbs * dp) == 0 and num_mb % pp:
            problems.append(
                f"interleaved pipeline (vpp={vpp}) needs the {num_mb} micro-batches to be a multiple of "
                f"pp={pp}; use num_microbatches {max(pp, num_mb // pp * pp)} or {(num_mb // pp + 1) * pp}"
            )

    padded = padded_vocab_size(vocab_size or model.vocab_size, tp)
    output_cost = output_layer_flops_per_token(model, padded) / layer_flops_per_token(model, req.seq_length)
    split = None
    if pp <= model.num_layers:
        if req.first_stage_layers or req.last_stage_layers:
            split = _explicit_split(model.num_layers, pp, vpp, req.first_stage_layers, req.last_stage_layers, problems)
        else:
            split = split_stages(model.num_layers, pp, vpp, round(output_cost, 3))
            if split is None:
                valid_vpp = [
                    v
                    for v in range(2, model.num_layers // pp + 1)
                    if split_stages(model.num_layers, pp, v, round(output_cost, 3))
                ]
                problems.append(
                    f"{model.num_layers} layers cannot be split over pp={pp} stages with vpp={vpp} "
                    f"(every stage a multiple of vpp, middle stages equal); valid vpp: {_fmt(valid_vpp)}"
                )

    sequence_parallel = bool(tp > 1) if req.sequence_parallel is None else bool(req.sequence_parallel)
    if sequence_parallel and tp == 1:
        warnings.append("sequence parallel has no effect at tp=1; Megatron turns it off")
        sequence_parallel = False
    if sequence_parallel and req.seq_length % tp:
        problems.append(
            f"seq_length {req.seq_length} is not divisible by tp={tp}, which sequence parallelism splits it over; "
            f"use a seq_length that is a multiple of {tp}, or sequence_parallel=false"
        )
    if req.precision == "fp8" and model.hidden_size % 16:
        problems.append(f"fp8 needs hidden_size divisible by 16; {model.hidden_size} is not")

    if problems:
        raise PlanError(problems)
    assert split is not None and num_mb is not None and gbs is not None
    stages, first_flag, last_flag = split
    layout = Layout(
        request=req,
        world_size=world,
        tp=tp,
        pp=pp,
        cp=cp,
        vpp=vpp,
        dp=dp,
        micro_batch_size=mbs,
        num_microbatches=num_mb,
        global_batch_size=gbs,
        seq_length=req.seq_length,
        padded_vocab=padded,
        sequence_parallel=sequence_parallel,
        stage_layers=stages,
        decoder_first_pipeline_num_layers=first_flag,
        decoder_last_pipeline_num_layers=last_flag,
        warnings=tuple(warnings),
    )
    return choose_recompute(model, cluster, layout, headroom_fraction)
