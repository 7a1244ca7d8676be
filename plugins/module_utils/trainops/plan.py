"""From inventory, ``-e`` values and a model preset to ``plan.json``.

:func:`make_plan` is the single entry point the ``megatron_layout`` module
calls. It validates everything (raising :class:`PlanError` with every
problem), derives the layout, estimates memory and FLOPs, builds the Megatron
argument vector, and returns a JSON-ready mapping plus a readable summary.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from . import hf_llama
from .cluster import Cluster, cluster_from_hosts
from .dataset_manifest import ManifestError, epochs, manifest_for_plan
from .errors import PlanError
from .flops import flops_per_iteration, flops_per_token
from .identity import experiment_name
from .layout import (
    Layout,
    LayoutRequest,
    attention_kind,
    keeps_attention_scores,
    memory_limit_gib,
    plan_layout,
    stage_memory,
)
from .megatron_args import (
    MOCK_DATA,
    RunPaths,
    TrainingConfig,
    build_megatron_args,
    check_samples,
    check_training,
    evaluation,
    warmup_iters,
    warmup_samples,
)
from .memory import GIB, checkpoint_bytes, megatron_theoretical, parameter_counts
from .model import ModelSpec, model_from_dict
from .options import OptionError, convert, nearest
from .plan_request import DEFAULT_HEADROOM, FLOPS_CONVENTIONS, PlanRequest, coerce
from .recipe import apply_recipe
from .recommend import describe, estimate, recommend
from .tokenizer import TYPES as TOKENIZER_TYPES
from .tokenizer import TokenizerFormatError, detect_format, megatron_tokenizer


def _dataclass_from(cls, values: Mapping[str, Any], problems: list[str], what: str):
    known = {f.name: f for f in fields(cls)}
    for key in sorted(k for k in values if k not in known):
        near = nearest(str(key), list(known))
        problems.append(
            f"{what}.{key} is not a {what} setting"
            + (f"; did you mean {what}.{near}?" if near else f"; the {what} settings: {', '.join(sorted(known))}")
        )
    kwargs = {}
    for key, value in values.items():
        if key in known:
            coerced = coerce(str(known[key].type), key, value, problems)
            if coerced is not None:
                kwargs[key] = coerced
    return cls(**kwargs)


def resolve_tokenizer(explicit: str | None, path: str, model: ModelSpec) -> tuple[str, str, str]:
    """``(type, --tokenizer-model path, how it was chosen)``.

    An explicit type wins; else a file the controller can read is inspected
    (see :mod:`.tokenizer`); else the preset's type is taken, unchecked.
    """
    if explicit:
        if explicit not in TOKENIZER_TYPES:
            raise PlanError([f"tokenizer_type {explicit!r} is unknown; use one of {', '.join(TOKENIZER_TYPES)}"])
        if os.path.isfile(path) or os.path.isdir(path):  # the controller has a copy: its format must be the type's
            try:
                detect_format(path)
            except (TokenizerFormatError, OSError):
                kind = note = explicit  # not a format the detection knows: Megatron is the judge
            else:
                try:
                    kind, _, note = megatron_tokenizer(path)
                except TokenizerFormatError as exc:
                    raise PlanError([f"-e tokenizer_type={explicit}: {exc}"]) from None
            if kind != explicit:
                raise PlanError(
                    [
                        f"-e tokenizer_type={explicit} does not read -e tokenizer_path={path!r}: the controller's "
                        f"copy is read by {kind} ({note}); give -e tokenizer_type={kind}, or leave it out (detected)"
                    ]
                )
        return explicit, path, "given"
    # Only a regular file or a directory is read (a FIFO or a device would block or mean nothing).
    if os.path.isfile(path) or os.path.isdir(path):
        try:
            kind, model_path, note = megatron_tokenizer(path)
        except (TokenizerFormatError, OSError) as exc:
            raise PlanError(
                [
                    f"-e tokenizer_path={path!r}: the controller has this path, and it was read there to detect "
                    f"the tokenizer: {exc}; give -e tokenizer_type=... to skip the detection (the path is used "
                    "inside the containers)"
                ]
            ) from None
        return kind, model_path, f"detected from the controller's copy at {path}: {note}"
    return model.tokenizer_type, path, f"from model preset {model.name} (not on the controller, not checked)"


def memory_report(model: ModelSpec, cluster: Cluster, layout: Layout, headroom: float) -> dict[str, Any]:
    """Per-stage estimate, the most loaded stage, and Megatron's own theoretical figure."""
    req = layout.request
    stages = stage_memory(model, layout)
    worst = max(stages, key=lambda st: st.total)
    limit = memory_limit_gib(cluster, headroom)
    theory = megatron_theoretical(
        model,
        tp=layout.tp,
        pp=layout.pp,
        vpp=layout.vpp,
        dp=layout.dp,
        micro_batch_size=layout.micro_batch_size,
        seq_length=layout.seq_length,
        padded_vocab=layout.padded_vocab,
        num_microbatches=layout.num_microbatches,
        distributed_optimizer=req.distributed_optimizer,
    )
    return {
        "weights_and_optimizer": round(worst.weights_and_optimizer / GIB, 3),
        "activations": round(worst.activations / GIB, 3),
        "total": round(worst.total / GIB, 3),
        "card": cluster.memory_gib,
        "limit": round(limit, 3),
        "headroom_fraction": headroom,
        "fits": worst.total / GIB <= limit,
        "most_loaded_stage": worst.stage,
        "stages": [
            {
                "stage": st.stage,
                "layers": st.layers,
                "weights_and_optimizer": round(st.weights_and_optimizer / GIB, 3),
                "activations": round(st.activations / GIB, 3),
                "total": round(st.total / GIB, 3),
            }
            for st in stages
        ],
        "megatron_theoretical": {
            "weights_and_optimizer": round(theory["weight_and_optimizer"] / GIB, 3),
            "activations_selective_sp": round(theory["activation"] / GIB, 3),
        },
        # the attention the launch runs (layout.attention_kind) and whether the estimate counts its s x s scores
        "attention": attention_kind(req),
        "attention_scores_counted": keeps_attention_scores(req),
    }


def make_plan(request: PlanRequest | None = None, /, **options: Any) -> dict[str, Any]:
    """Validate and derive the whole plan of ``request``; raise :class:`PlanError` listing every problem.

    ``make_plan(model=..., hosts=..., ...)`` is ``make_plan(PlanRequest.from_options({...}))``: the options of
    :class:`.plan_request.PlanRequest`, as given (strings from ``-e`` are converted, a bad one named).
    """
    if request is None:
        request = PlanRequest.from_options(options)
    elif options:
        raise TypeError("make_plan takes a PlanRequest or its options, not both")
    checked = _checked(request)
    tokenizer = _tokenizer(request, checked)
    memory = memory_report(checked.model, checked.cluster, checked.layout, request.memory_headroom_fraction)
    recommendations = None
    if request.recommend or not memory["fits"]:
        ranked = recommend(
            checked.model,
            checked.cluster,
            checked.layout_request,
            checked.layout.global_batch_size,
            request.memory_headroom_fraction,
            tokenizer_vocab(checked.dataset),
        )
        recommendations = [describe(i + 1, est) for i, est in enumerate(ranked)]
    if not memory["fits"] and not request.force:
        raise PlanError([_does_not_fit(checked, memory, recommendations, request.memory_headroom_fraction)])
    plan = _plan_mapping(request, checked, tokenizer, memory)
    if recommendations is not None:
        plan["recommendations"] = recommendations
        _, assumed = checked.cluster.cost_model_tflops(checked.layout_request.precision)
        plan["recommendation_table"] = ([f"note: {assumed}"] if assumed else []) + recommendation_lines(
            recommendations, requested=plan
        )
    return plan


@dataclass(frozen=True)
class _Checked:
    """What a request's checks produced: the parsed inputs and the derived layout."""

    model: ModelSpec
    cluster: Cluster
    layout_request: LayoutRequest
    training: TrainingConfig
    layout: Layout
    #: What the planner takes from the dataset's manifest (:func:`.dataset_manifest.manifest_for_plan`), or None.
    dataset: dict[str, Any] | None


def _init_from_problems(r: PlanRequest, spec: ModelSpec | None, training: TrainingConfig) -> list[str]:
    """Why ``-e init_from`` cannot start this run: the smoke job, mock data, no checkpoints (Megatron loads the
    weights through its checkpoint loading), a model that is not a Llama."""
    problems = []
    if not training.save_interval:
        problems.append(
            f"-e init_from={r.init_from}: training.save_interval is 0 (no checkpoints), and Megatron loads the "
            "imported weights as a checkpoint: give a save_interval"
        )
    if r.smoke:
        problems.append(f"-e init_from={r.init_from}: the smoke job does not load weights; run Megatron (smoke=false)")
    if r.data_path == MOCK_DATA:
        problems.append(f"-e init_from={r.init_from}: mock data has no tokenizer the imported model could share")
    if spec is not None:
        try:
            hf_llama.check_llama(spec)
        except hf_llama.NotLlama as exc:
            problems.append(f"-e init_from={r.init_from}: {exc}: only a Llama imports")
    return problems


def _checked(r: PlanRequest) -> _Checked:
    """Check every input; raise :class:`PlanError` with every problem, the request's own first."""
    problems = list(r.problems)
    for key, value in (
        ("accelerator_memory_gib", r.accelerator_memory_gib),
        ("accelerator_peak_tflops", r.accelerator_peak_tflops),
    ):
        if value is not None and value <= 0:
            problems.append(f"-e {key}={value:g} must be a positive number")
    problems += exp_name_problems(r.exp_name)
    problems += _option_problems({"run_id": r.run_id})
    problems += path_problems(
        {
            "work_home": r.work_home,
            "data_path": r.data_path,
            "tokenizer_path": r.tokenizer_path,
            **({"init_from": r.init_from} if r.init_from else {}),
        }
    )
    problems += data_prefix_problems(r.data_path)
    spec = cluster = None
    try:
        spec = model_from_dict(r.model)
    except PlanError as exc:
        problems += exc.problems
    try:
        cluster = cluster_from_hosts(r.hosts, r.backends, r.accelerator_memory_gib, r.accelerator_peak_tflops)
    except PlanError as exc:
        problems += exc.problems
    request = _dataclass_from(LayoutRequest, r.layout, problems, "layout")
    train_cfg = _dataclass_from(TrainingConfig, r.training or {}, problems, "training")
    spec, request, train_cfg = apply_recipe(spec, request, train_cfg, r.layout, r.training or {}, problems)
    if r.init_from:
        problems += _init_from_problems(r, spec, train_cfg)
    if r.printed_flops_convention not in FLOPS_CONVENTIONS:
        problems.append(
            f"printed_flops_convention {r.printed_flops_convention!r} must be one of {', '.join(FLOPS_CONVENTIONS)}"
        )
    if r.memory_headroom_fraction is not None and not 0 <= r.memory_headroom_fraction < 1:
        problems.append(f"memory_headroom_fraction must be in [0, 1), got {r.memory_headroom_fraction}")
    if r.master_port is not None and not 1024 <= r.master_port <= 65535:
        problems.append(f"master_port must be an integer 1024..65535, got {r.master_port!r}")
    dataset = None
    if r.manifest:
        try:
            dataset = manifest_for_plan(
                dict(r.manifest), r.tokenizer_path if r.tokenizer_path_given else None, r.tokenizer_type or None
            )
        except ManifestError as exc:
            problems.append(f"dataset manifest: {exc}")
        else:
            if spec is not None and dataset["vocab_size"] > spec.vocab_size:
                problems.append(
                    f"dataset {r.data_path} was tokenized with {dataset['vocab_size']} token ids, more than model "
                    f"{spec.name}'s vocabulary of {spec.vocab_size}: use the model's tokenizer, or a preset that fits"
                )
    if cluster is not None and request.precision == "fp8" and not cluster.fp8:
        problems.append(
            f"precision=fp8: the {cluster.card} has no FP8 ({cluster.profile} says fp8: false for it); "
            "give -e precision=bf16, or set precision: bf16 in the inventory's all.vars"
        )
    lay = None
    request, torch_norm_note = _without_apex(request, train_cfg, problems)
    if spec is not None and cluster is not None:
        try:
            headroom = r.memory_headroom_fraction
            lay = plan_layout(
                spec,
                cluster,
                request,
                headroom if headroom is not None and 0 <= headroom < 1 else DEFAULT_HEADROOM,
                tokenizer_vocab(dataset),
            )
            if torch_norm_note:
                lay = replace(lay, warnings=(*lay.warnings, torch_norm_note))
            if request.recipe == "vendor" and (r.layout or {}).get("recompute") in (None, ""):
                lay = replace(lay, recompute_reason=f"{request.recompute} (the vendor's recipe recomputes nothing)")
        except PlanError as exc:
            problems += exc.problems
    if lay is not None and train_cfg.train_samples:
        # sample-based (recipe=vendor): Megatron trains train_samples // gbs iterations; the plan says that many
        problems += check_samples(train_cfg, lay.global_batch_size)
        iters = (
            max(1, train_cfg.train_samples // lay.global_batch_size) if isinstance(train_cfg.train_samples, int) else 1
        )
        request = replace(request, train_iters=iters)
        lay = replace(lay, request=replace(lay.request, train_iters=iters))
    if isinstance(request.train_iters, int):
        problems += check_training(train_cfg, request.train_iters)
    if lay is not None and isinstance(request.train_iters, int):
        problems += _token_problems(request.train_iters * lay.global_batch_size * lay.seq_length)
    if problems or lay is None or spec is None or cluster is None:
        raise PlanError(problems)
    return _Checked(spec, cluster, request, train_cfg, lay, dataset)


#: More tokens than any run trains: 10^15, about thirty times the largest published pre-training (Qwen3: 36 T
#: tokens; Llama 3: 15.6 T). A plan above it is a slip of the keyboard in the batch or the iterations.
MAX_TOKENS = 10**15


def _token_problems(tokens: int) -> list[str]:
    if tokens <= MAX_TOKENS:
        return []
    return [
        f"the run would train {tokens / 1e12:,.1f} T tokens (gbs x seq_length x train_iters), above the bound of "
        f"{MAX_TOKENS / 1e12:,.0f} T (about 30 x the largest published pre-training, Qwen3's 36 T): check -e gbs "
        "and -e train_iters"
    ]


#: Tokenizers whose own vocabulary Megatron builds the embedding from (``--vocab-size`` is not read); Megatron's
#: TikTokenizer takes the preset's ``--vocab-size``, its NullTokenizer (mock data) the preset's too.
TOKENIZER_OWN_VOCAB = ("HuggingFaceTokenizer", "SentencePieceTokenizer")


def tokenizer_vocab(dataset: Mapping[str, Any] | None) -> int | None:
    """The vocabulary Megatron builds when the dataset's manifest knows it and it is the tokenizer's own (the manifest
    records Megatron's own count), else None: the preset's ``vocab_size`` is padded."""
    if dataset and dataset["tokenizer_type"] in TOKENIZER_OWN_VOCAB:
        return int(dataset["vocab_size"])
    return None


def _without_apex(request: LayoutRequest, training: TrainingConfig, problems: list[str]) -> tuple[LayoutRequest, str]:
    """Megatron's local layers without Apex (``fused_kernels`` false: a bare PyTorch, the CPU testbed) normalise with
    torch's own norm, which refuses sequence parallelism (megatron/core/transformer/torch_norm.py:32, core 0.14): it
    is turned off (a note says so), or refused when asked for."""
    if training.fused_kernels or request.transformer_impl != "local" or request.sequence_parallel is False:
        return request, ""
    if request.sequence_parallel:
        problems.append(
            "sequence_parallel=true with transformer_impl=local needs Apex's fused norm, and this backend has no "
            "fused kernels (Megatron's torch norm refuses sequence parallelism): drop -e sequence_parallel"
        )
        return request, ""
    note = "sequence parallelism off: Megatron's local layers without Apex use torch's norm, which refuses it"
    return replace(request, sequence_parallel=False), note


def _tokenizer(r: PlanRequest, checked: _Checked) -> tuple[str, str, str]:
    """``(type, --tokenizer-model path, how it was chosen)``: the manifest's, mock data's, or resolved."""
    dataset = checked.dataset
    tokenizer_type, tokenizer_path = (
        (dataset["tokenizer_type"], dataset["tokenizer_path"])
        if dataset is not None
        else (r.tokenizer_type, r.tokenizer_path)
    )
    if r.data_path == MOCK_DATA:
        tok_type, tok_model, tok_source = "NullTokenizer", "", "Megatron's mock data (data_path=mock)"
    else:
        tok_type, tok_model, tok_source = resolve_tokenizer(tokenizer_type, tokenizer_path, checked.model)
    if dataset is not None:
        tok_source = f"from the dataset's manifest {r.data_path}.manifest.json"
    return tok_type, tok_model, tok_source


def _does_not_fit(
    checked: _Checked, memory: Mapping[str, Any], recommendations: Sequence[Mapping[str, Any]] | None, headroom: float
) -> str:
    """The refusal of a layout that does not fit, with up to three that do."""
    better = [r for r in (recommendations or []) if r["fits"]][:3]
    hint = "; ".join(
        f"tp={r['tp']} pp={r['pp']}" + (f" vpp={r['vpp']}" if r["vpp"] else "") + f" mbs={r['mbs']} "
        f"({r['memory_gib']} GiB)"
        for r in better
    ) or "none at this global batch; " + " or ".join(["try more nodes", *_memory_levers(checked.layout.request)])
    cluster = checked.cluster
    return (
        f"layout {checked.layout.exp_name} needs {memory['total']} GiB per card on stage {memory['most_loaded_stage']} "
        f"(weights+optimizer {memory['weights_and_optimizer']}, activations {memory['activations']}) but the "
        f"{cluster.card} allows {memory['limit']} GiB ({cluster.memory_gib} GiB minus "
        f"{headroom:.0%} headroom); layouts that fit: {hint}; or pass -e force=true"
    )


def _memory_levers(req: LayoutRequest) -> list[str]:
    """What else lowers the memory a card needs, leaving out what the request already set (recompute=auto has
    already tried full, and chose it when nothing less fit)."""
    return [
        lever
        for lever, set_already in (
            ("recompute=full", req.recompute == "full"),
            ("mbs=1", req.mbs == 1),
            ("distributed_optimizer=true", req.distributed_optimizer),
        )
        if not set_already
    ]


def _operator_figures(checked: _Checked, headroom: float | None) -> dict[str, Any]:
    """What an operator plans with: the parameter count, the tokens of the whole run, the learning-rate schedule,
    the saves' sizes, and the run's duration by the cost model (``recommend.estimate``; relative when the card has no
    stated peak, which ``duration.assumed`` says)."""
    spec, lay, t = checked.model, checked.layout, checked.training
    iters = lay.request.train_iters
    warm = (
        f"{warmup_samples(t, lay.global_batch_size):,} samples"
        if t.train_samples
        else f"{warmup_iters(t, iters):,} iterations"
    )
    one_save = int(checkpoint_bytes(spec, lay.padded_vocab, lay.request.precision))
    timed = estimate(spec, checked.cluster, lay, headroom if headroom is not None else DEFAULT_HEADROOM)
    _, assumed = checked.cluster.cost_model_tflops(lay.request.precision)
    return {
        "parameters": int(parameter_counts(spec, lay.padded_vocab)["total"]),
        "tokens_total": iters * lay.global_batch_size * lay.seq_length,
        "lr_schedule": {
            "lr": t.lr,
            "min_lr": t.min_lr,
            "decay_style": t.lr_decay_style,
            "warmup": warm,
            "on_resume": t.lr_schedule_on_resume,
        },
        "saves": {
            "interval": t.save_interval,
            "count": iters // t.save_interval if t.save_interval else 0,
            "bytes_each": one_save,
        },
        "duration": {
            "iteration_s": round(timed.iteration_s, 3),
            "seconds": round(timed.iteration_s * iters),
            "assumed": assumed or "",
        },
    }


def _plan_mapping(
    r: PlanRequest, checked: _Checked, tokenizer: tuple[str, str, str], memory: dict[str, Any]
) -> dict[str, Any]:
    """``plan.json`` (without the recommendations)."""
    spec, cluster, request, train_cfg, lay, dataset = (
        checked.model,
        checked.cluster,
        checked.layout_request,
        checked.training,
        checked.layout,
        checked.dataset,
    )
    tok_type, tok_model, tok_source = tokenizer
    # the model, sequence length and precision name the experiment too: a checkpoint dir belongs to one model
    exp = r.exp_name or experiment_name(spec, lay)
    run_dir = f"{r.work_home.rstrip('/')}/runs/{exp}/{r.run_id}"
    checkpoint_dir = f"{r.work_home.rstrip('/')}/checkpoints/{exp}"
    paths = RunPaths(
        data_path=r.data_path,
        tokenizer_model=tok_model,
        tokenizer_type=tok_type,
        checkpoint_dir=checkpoint_dir,
        tensorboard_dir=f"{run_dir}/tensorboard",
        pretrained_checkpoint=init_checkpoint(checkpoint_dir) if r.init_from else "",
    )
    flops = flops_per_iteration(spec, lay.seq_length, lay.padded_vocab, lay.global_batch_size)
    plan: dict[str, Any] = {
        "model": spec.name,
        "accelerator": cluster.accelerator,
        "card": cluster.card,
        "world_size": lay.world_size,
        "tp": lay.tp,
        "pp": lay.pp,
        "cp": lay.cp,
        "vpp": lay.vpp,
        "dp": lay.dp,
        "micro_batch_size": lay.micro_batch_size,
        "num_microbatches": lay.num_microbatches,
        "global_batch_size": lay.global_batch_size,
        "global_batch_source": _batch_source(request, lay),
        "seq_length": lay.seq_length,
        "train_iters": request.train_iters,
        "precision": request.precision,
        # what runs (auto resolved by the memory estimate: layout.choose_recompute), what was asked, and why
        "recompute": lay.request.recompute,
        "recompute_requested": request.recompute,
        "recompute_reason": lay.recompute_reason,
        "recipe": request.recipe,
        "sequence_parallel": lay.sequence_parallel,
        "distributed_optimizer": request.distributed_optimizer,
        "padded_vocab_size": lay.padded_vocab,
        # the vocabulary Megatron builds: the tokenizer's own (from the dataset's manifest), or the preset's
        "vocab_size": tokenizer_vocab(dataset) or spec.vocab_size,
        "vocab_source": "the tokenizer's (dataset manifest)" if tokenizer_vocab(dataset) else f"model {spec.name}",
        "stage_layers": list(lay.stage_layers),
        "decoder_first_pipeline_num_layers": lay.decoder_first_pipeline_num_layers,
        "decoder_last_pipeline_num_layers": lay.decoder_last_pipeline_num_layers,
        "memory_gib": memory,
        # what one save needs where checkpoints go (the health check's disk test)
        "checkpoint_bytes": int(checkpoint_bytes(spec, lay.padded_vocab, request.precision)),
        "flops_per_iteration": flops["causal"],
        "flops_per_iteration_full_attention": flops["full"],
        "flops_convention": "causal (Megatron core >= 0.12); the full-attention count is given beside it",
        "flops_per_token": flops_per_token(spec, lay.seq_length, lay.padded_vocab),
        "tokens_per_iteration": lay.global_batch_size * lay.seq_length,
        **_operator_figures(checked, r.memory_headroom_fraction),
        "exp_name": exp,
        "run_id": r.run_id,
        "run_dir": run_dir,
        "work_home": r.work_home,
        "checkpoint_dir": paths.checkpoint_dir,
        # the directory the same derived name gave before the model joined it, which a resume may adopt
        "checkpoint_dir_before": None if r.exp_name else f"{r.work_home.rstrip('/')}/checkpoints/{lay.exp_name}",
        "tensorboard_dir": paths.tensorboard_dir,
        "data_path": r.data_path,
        "tokenizer_path": tok_model,
        "tokenizer_type": tok_type,
        "tokenizer_type_source": tok_source,
        "master_addr": cluster.master.addr,
        "master_port": r.master_port,
        "master": cluster.master.name,
        "nodes": [asdict(n) for n in cluster.nodes],
        "last_rank": {
            "node": cluster.nodes[-1].name,
            "local_rank": cluster.nodes[-1].slots - 1,
            "global_rank": lay.world_size - 1,
        },
        "megatron_version": request.megatron_version,
        "megatron_args": build_megatron_args(spec, lay, paths, train_cfg, r.distributed_backend),
        # --eval-iters as rendered, and why (no evaluation without a validation split: megatron_args.evaluation)
        "evaluation": dict(zip(("eval_iters", "why"), evaluation(train_cfg, r.data_path), strict=True)),
        "job": "smoke" if r.smoke else "megatron",
        "smoke_args": smoke_args(lay, request.train_iters, paths, train_cfg),
        # the card's dense peak at the run's precision (None: no public figure), for MFU
        "peak_tflops_per_card": cluster.peak(request.precision),
        "peak_source": cluster.peak_source(request.precision),
        "printed_flops_convention": r.printed_flops_convention,
        "resume": None,
        # a fresh start's weights: a Hugging Face directory, imported before the launch to init_checkpoint
        **(
            _init_from(r.init_from, spec, tokenizer_vocab(dataset) or spec.vocab_size, checkpoint_dir)
            if r.init_from
            else {}
        ),
        "dataset": None
        if dataset is None
        else {
            "tokens": dataset["tokens"],
            "documents": dataset["documents"],
            "vocab_size": dataset["vocab_size"],
            "eod_id": dataset["eod_id"],
            "epochs": epochs(lay.global_batch_size * lay.seq_length, request.train_iters, dataset["tokens"]),
        },
        "warnings": list(lay.warnings) + ([] if memory["fits"] else ["forced: the layout does not fit"]),
        "forced": bool(r.force and not memory["fits"]),
    }
    plan["summary"] = summary_lines(plan)
    return plan


def init_checkpoint(checkpoint_dir: str) -> str:
    """Where an experiment's imported weights go: beside its checkpoint directory, on the same (shared) storage,
    outside the saves a resume scans."""
    return f"{checkpoint_dir}.imported"


def _init_from(source: str, spec: ModelSpec, vocab_size: int, checkpoint_dir: str) -> dict[str, Any]:
    """The plan's fields for ``-e init_from``: the source, where it is imported, and the ``config.json`` fields the
    source must have (the plan's model, with the tokenizer's vocabulary)."""
    config = hf_llama.hf_config(spec, vocab_size)
    return {
        "init_from": source,
        "init_checkpoint": init_checkpoint(checkpoint_dir),
        "init_expect": {key: config[key] for key in hf_llama.COMPARED if key in config},
    }


def path_problems(paths: Mapping[str, Any]) -> list[str]:
    """Paths inside the containers (:data:`.options.OPTIONS`' rule: absolute, one line, within Linux's lengths;
    ``data_path=mock`` is Megatron's mock data, not a path)."""
    return _option_problems(paths)


def data_prefix_problems(data_path: str) -> list[str]:
    """``data_path`` is the prefix Megatron adds ``.bin`` and ``.idx`` to, not one of the files or a directory."""
    path = str(data_path or "")
    if path.endswith((".bin", ".idx")):
        return [f"-e data_path={path!r} names one of the files: give the prefix they share, {path[:-4]}"]
    if path.endswith("/"):
        return [f"-e data_path={path!r} names a directory: give the prefix of the .bin/.idx in it, as {path}<name>"]
    return []


def exp_name_problems(name: str | None) -> list[str]:
    """An experiment name becomes one directory level on every node and appears in every script."""
    return [] if name is None else _option_problems({"exp": name})


def _option_problems(values: Mapping[str, Any]) -> list[str]:
    problems = []
    for key, value in values.items():
        try:
            convert(key, value)
        except OptionError as exc:
            problems.append(str(exc))
    return problems


def smoke_args(lay: Layout, train_iters: int, paths: RunPaths, training: TrainingConfig) -> list[str]:
    """Arguments of ``trainops/node/smoke_train.py`` for this plan: the planned layout, batch and paths."""
    return (
        [
            "--tp",
            str(lay.tp),
            "--pp",
            str(lay.pp),
            "--cp",
            str(lay.cp),
            "--train-iters",
            str(train_iters),
            "--micro-batch-size",
            str(lay.micro_batch_size),
            "--global-batch-size",
            str(lay.global_batch_size),
            "--seq-length",
            str(lay.seq_length),
        ]
        + (["--data-path", paths.data_path] if paths.data_path != MOCK_DATA else [])
        + (
            [
                "--save",
                paths.checkpoint_dir,
                "--load",
                paths.checkpoint_dir,
                "--save-interval",
                str(training.save_interval),
            ]
            if training.save_interval
            else []
        )
        + ["--distributed-timeout-minutes", str(training.distributed_timeout_minutes)]
    )


def tracker_iteration(text: Any) -> int | None:
    """The iteration in the text of Megatron's ``latest_checkpointed_iteration.txt``: None for no text (no
    checkpoint), 0 for ``release``; raises :class:`PlanError` for anything else."""
    if text is None or isinstance(text, int):
        return text
    value = str(text).strip()
    if not value:
        return None
    if value == "release":
        return 0
    if not (value.isascii() and value.isdigit()):
        raise PlanError([f"latest_checkpointed_iteration.txt holds {value!r}, not an iteration"])
    return int(value)


def with_resume(plan: Mapping[str, Any], latest_iteration: int | None, moved_to: str | None = None) -> dict[str, Any]:
    """The plan with what the launch resumes from: ``latest_iteration`` of its checkpoint dir, or nothing.

    Megatron's ``--load`` (and the smoke job's) always names the checkpoint dir, so a checkpoint there is
    loaded; ``moved_to`` says where ``fresh=true`` moved an earlier checkpoint dir (kept, not deleted).
    """
    out = dict(plan)
    if latest_iteration is not None:
        out["resume"] = {"iteration": latest_iteration, "from": plan["checkpoint_dir"]}
        line = f"resume       from iteration {latest_iteration} in {plan['checkpoint_dir']} (-e fresh=true: start anew)"
    else:
        out["resume"] = None
        line = f"resume       none: a fresh start, checkpoints go to {plan['checkpoint_dir']}"
        if plan.get("init_from"):
            line = (
                f"resume       none: a fresh start from the weights of {plan['init_from']} (imported to "
                f"{plan['init_checkpoint']}), checkpoints go to {plan['checkpoint_dir']}"
            )
        if moved_to:
            line += f" (fresh=true: the earlier ones were moved to {moved_to})"
    out["summary"] = [x for x in plan["summary"] if not x.startswith("resume ")] + [line]
    return out


def _stage_text(plan: Mapping[str, Any]) -> str:
    flags = []
    if plan["decoder_first_pipeline_num_layers"] is not None:
        flags.append(f"--decoder-first-pipeline-num-layers {plan['decoder_first_pipeline_num_layers']}")
    if plan["decoder_last_pipeline_num_layers"] is not None:
        flags.append(f"--decoder-last-pipeline-num-layers {plan['decoder_last_pipeline_num_layers']}")
    layers = "/".join(str(n) for n in plan["stage_layers"])
    return f"{layers}" + (f" ({', '.join(flags)})" if flags else " (even split, no stage flags)")


def _attention_text(memory: Mapping[str, Any]) -> str:
    kind = memory.get("attention")
    text = {
        "fused": "Transformer Engine, fused (flash or cuDNN; --attention-backend auto): no s x s scores kept",
        "unfused": "Transformer Engine, unfused (--attention-backend unfused): the s x s scores are counted",
        "local": "Megatron's own DotProductAttention (--transformer-impl local): the s x s scores are counted",
    }
    return text.get(kind, "-")


def _size(n_bytes: float) -> str:
    for unit, scale in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:,.1f} {unit}"
    return f"{n_bytes / 1024:,.1f} KiB"


def _count(n: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{n:,.0f}"


def _operator_lines(plan: Mapping[str, Any]) -> list[str]:
    """The plan's figures an operator plans with (:func:`_operator_figures`); nothing for a plan made before them."""
    if "parameters" not in plan:
        return []
    sched, saves, took = plan["lr_schedule"], plan["saves"], plan["duration"]
    days = took["seconds"] / 86400
    keeps = (
        f"one save {_size(saves['bytes_each'])} (weights and optimizer state) every {saves['interval']:,} "
        f"iterations: {saves['count']:,} saves, {_size(saves['count'] * saves['bytes_each'])} if all are kept "
        f"(-e keep_checkpoints=N keeps the newest N: N x {_size(saves['bytes_each'])})"
        if saves["interval"]
        else "none (save_interval 0: no checkpoint, no resume)"
    )
    duration = (
        f"not known: {plan['card']} has no stated {plan['precision']} peak (-e accelerator_peak_tflops=N gives it); "
        f"at the cost model's reference peak, {days:,.1f} days"
        if took["assumed"]
        else f"about {days:,.1f} days ({took['iteration_s']:g} s/iteration by the cost model)"
    )
    return [
        f"model        {_count(plan['parameters'])} parameters ({plan['model']})",
        f"training     {plan['train_iters']:,} iterations = {_count(plan['tokens_total'])} tokens; "
        f"lr {sched['lr']:g} to {sched['min_lr']:g} ({sched['decay_style']}), warm-up {sched['warmup']}",
        f"saves        {keeps}",
        f"duration     {duration}",
    ]


def summary_lines(plan: Mapping[str, Any]) -> list[str]:
    """The readable plan summary printed by plan.yml and train.yml."""
    mem = plan["memory_gib"]
    nodes = ", ".join(f"{n['name']}={n['addr']}x{n['slots']}" for n in plan["nodes"])
    lines = [
        f"experiment   {plan['exp_name']}  (model {plan['model']}, {plan['precision']}, recompute {plan['recompute']})",
        f"cluster      {len(plan['nodes'])} node(s) [{nodes}], {plan['world_size']} x {plan['card']}; "
        f"master {plan['master']} {plan['master_addr']}:{plan['master_port']}",
        f"layout       tp={plan['tp']} pp={plan['pp']} cp={plan['cp']} vpp={plan['vpp'] or '-'} dp={plan['dp']} "
        f"sequence-parallel={'on' if plan['sequence_parallel'] else 'off'}",
        f"batch        mbs={plan['micro_batch_size']} x micro-batches={plan['num_microbatches']} x dp={plan['dp']} "
        f"= gbs {plan['global_batch_size']}; seq {plan['seq_length']}; {plan['train_iters']} iterations",
        f"global batch {plan.get('global_batch_source', 'given')}",
        f"stages       layers per pipeline stage {_stage_text(plan)}",
        f"memory       {mem['total']:.1f} GiB per card on stage {mem['most_loaded_stage']} "
        f"(weights+optimizer {mem['weights_and_optimizer']:.1f} + activations {mem['activations']:.1f}) "
        f"of {mem['card']:g} GiB, limit {mem['limit']:.1f}: {'fits' if mem['fits'] else 'DOES NOT FIT'}",
        *_operator_lines(plan),
        f"compute      {plan['flops_per_iteration'] / 1e15:.2f} PFLOP/iteration (causal; "
        f"{plan['flops_per_iteration_full_attention'] / 1e15:.2f} full-attention), "
        f"{plan['tokens_per_iteration']:,} tokens/iteration",
        f"attention    {_attention_text(plan['memory_gib'])}",
        *([f"recompute    {plan['recompute_reason']}"] if plan.get("recompute_reason") else []),
        *(
            [
                "recipe       vendor: the vendor's Llama3-8B script (--train-samples, RoPE base 10000, its fusion "
                "flags and stage split; docs/plan.md)"
            ]
            if plan.get("recipe") == "vendor"
            else []
        ),
        *([f"evaluation   {plan['evaluation']['why']}"] if plan.get("evaluation") else []),
        f"peak         {plan['peak_source']}",
        f"tokenizer    {plan['tokenizer_type']} ({plan['tokenizer_type_source']}); vocabulary {plan['vocab_size']:,} "
        f"({plan['vocab_source']}), padded to {plan['padded_vocab_size']:,}",
        f"dataset      {plan['data_path']}"
        + (
            f": {plan['dataset']['tokens']:,} tokens in {plan['dataset']['documents']:,} documents; the run reads "
            f"{plan['dataset']['epochs']:.3g} epoch(s)"
            if plan.get("dataset")
            else " (no manifest: made outside playbooks/data.yml, or not read)"
        ),
        "job          "
        + (
            "the smoke job (trainops/node/smoke_train.py): megatron-core groups, all-reduce checks, a small model; "
            "-e smoke=false runs Megatron-LM's pretrain_gpt.py (on the cpu testbed: an image with a Megatron-LM "
            "tree, make megatron-src; testbed/README.md)"
            if plan["job"] == "smoke"
            else "Megatron-LM pretrain_gpt.py"
        ),
        f"run dir      {plan['run_dir']}",
        f"progress     read from the last rank: node {plan['last_rank']['node']} local rank "
        f"{plan['last_rank']['local_rank']} (global {plan['last_rank']['global_rank']})",
    ]
    lines += [f"warning      {w}" for w in plan["warnings"]]
    return lines


def _batch_source(request: LayoutRequest, lay: Layout) -> str:
    """Where the global batch came from: given, or derived (it then changes with the layout)."""
    if request.gbs is not None:
        return "given (-e gbs)"
    how = f"-e num_microbatches={request.num_microbatches}" if request.num_microbatches else "the default 128"
    return (
        f"derived: {lay.num_microbatches} micro-batches ({how}) x mbs {lay.micro_batch_size} x dp {lay.dp}; it "
        "changes with tp, pp and the node count (and so do the experiment name and its checkpoints): give -e gbs=N "
        "to keep the training maths fixed across layouts"
    )


def _same_layout(row: Mapping[str, Any], plan: Mapping[str, Any]) -> bool:
    return all(row.get(key) == plan.get(other) for key, other in _ROW_KEYS)


_ROW_KEYS = (("tp", "tp"), ("pp", "pp"), ("cp", "cp"), ("vpp", "vpp"), ("mbs", "micro_batch_size"))


def recommendation_lines(
    rows: Sequence[Mapping[str, Any]], limit: int = 15, requested: Mapping[str, Any] | None = None
) -> list[str]:
    """The ranked table of layouts, best first, at one global batch; ``requested`` (the plan) is marked ``*``
    and its own rank is said when it is not in the first ``limit`` rows."""
    gbs = rows[0]["global_batch_size"] if rows else None
    out = [
        f"ranked at global batch {gbs} (the plan's; -e gbs=N ranks at another)",
        f"{'#':>4} {'tp':>3} {'pp':>3} {'vpp':>3} {'dp':>4} {'mbs':>3} {'mb':>5} {'gbs':>6} {'GiB':>7} "
        f"{'fits':>4} {'tok/s/card':>10}  where the time goes",
    ]
    mine = next((row for row in rows if requested is not None and _same_layout(row, requested)), None)
    shown = rows[:limit]

    def line(row: Mapping[str, Any]) -> str:
        return (
            f"{'*' if row is mine else ' '}{row['rank']:>3} {row['tp']:>3} {row['pp']:>3} {row['vpp'] or '-':>3} "
            f"{row['dp']:>4} {row['mbs']:>3} {row['num_microbatches']:>5} {row['global_batch_size']:>6} "
            f"{row['memory_gib']:>7.1f} {'yes' if row['fits'] else 'NO':>4} {row['tokens_per_s_per_card']:>10.0f}  "
            f"{row['why']}"
        )

    out += [line(row) for row in shown]
    if len(rows) > limit:
        out.append(f"... {len(rows) - limit} more in recommendations.json")
    if mine is not None and all(row is not mine for row in shown):
        out.append(line(mine))  # the requested layout always has its row
    if requested is not None:
        layout = " ".join(f"{other}={requested.get(other)}" for _, other in _ROW_KEYS if requested.get(other))
        out.append(
            f"* the requested layout ({layout}) ranks #{mine['rank']} of {len(rows)}"
            if mine
            else f"the requested layout ({layout}) is not among the {len(rows)} ranked"
        )
    return out
