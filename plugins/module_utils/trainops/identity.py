"""An experiment's identity: its name, and whether a checkpoint directory belongs to it.

A checkpoint directory belongs to one model. :func:`experiment_name` names an experiment by what makes its
checkpoints incompatible or its results incomparable, then by its layout::

    llama3-8b-3c91f0_seq4096_fp8_tp1_pp2_dp8_mbs1_numbs128_gbs1024_gpus16
    <preset>-<arch>_seq<S>_<precision>_<layout (Layout.exp_name, the name before this change)>

``<arch>`` is a short digest of the preset's architecture (:data:`ARCHITECTURE_FIELDS`), so that a custom preset
that keeps a shipped preset's name but changes its layers, widths, vocabulary or RoPE base is another experiment.

:func:`saved_args_differences` compares the arguments Megatron recorded in a save (``args`` in ``common.pt``, read
on the node by ``trainops/node/checkpoint_scan.py scan --args``) with the launch the plan renders
(``plan["megatron_args"]``): differences of architecture, shapes, sequence length or tokenizer are *fatal* (a resume
is refused), those of precision or vocabulary padding are *stated*; tp/pp/dp are never compared (torch_dist
re-shards). docs/checkpoints.md ("Which model a directory belongs to").
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import time
from collections.abc import Mapping, Sequence
from typing import Any

from . import records
from .checkpoints import LEDGER_FILE as LEDGER
from .checkpoints import choose as choose_save
from .checkpoints import judge as judge_saves
from .checkpoints import tracker_value
from .errors import PlanError
from .layout import Layout
from .model import ModelSpec

#: The preset's fields that shape the saved tensors or change what they mean (not its name, description,
#: initialisation, which only matters at a fresh start, or tokenizer type, whose vocabulary ``vocab_size`` holds).
ARCHITECTURE_FIELDS = (
    "num_layers",
    "hidden_size",
    "ffn_hidden_size",
    "num_attention_heads",
    "query_groups",
    "head_dim",
    "vocab_size",
    "max_position_embeddings",
    "swiglu",
    "normalization",
    "norm_epsilon",
    "untie_embeddings_and_output_weights",
    "position_embedding_type",
    "rotary_base",
    "add_bias_linear",
)
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")
#: The longest preset name an experiment name keeps (the whole name stays within exp's 100 characters).
MODEL_NAME_CHARS = 32


def architecture_digest(model: ModelSpec) -> str:
    """Six hex digits over :data:`ARCHITECTURE_FIELDS` (equal presets, equal digests, whatever their names)."""
    values = {name: getattr(model, name) for name in ARCHITECTURE_FIELDS}
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:6]


def experiment_name(model: ModelSpec, layout: Layout) -> str:
    """``<preset>-<arch>_seq<S>_<precision>_<layout>``: the default experiment name (the run and checkpoint dirs)."""
    name = _UNSAFE.sub("-", model.name).strip("-.")[:MODEL_NAME_CHARS] or "model"
    return f"{name}-{architecture_digest(model)}_seq{layout.seq_length}_{layout.request.precision}_{layout.exp_name}"


# --- the saved arguments against the rendered launch -----------------------------------------------------------

#: Megatron's defaults (core 0.14, megatron/training/arguments.py) for flags the bundle may leave out.
_DEFAULTS = {"--normalization": "LayerNorm", "--position-embedding-type": "learned_absolute", "--rotary-base": 10000}


def _flags(argv: Sequence[str]) -> dict[str, str | None]:
    """``--flag value`` pairs and bare ``--flag`` switches (None) of an argument vector."""
    out: dict[str, str | None] = {}
    items = [str(x) for x in argv]
    for i, item in enumerate(items):
        if item.startswith("--"):
            following = items[i + 1] if i + 1 < len(items) else None
            out[item] = following if following is not None and not following.startswith("--") else None
    return out


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def planned_values(plan: Mapping[str, Any]) -> dict[str, Any]:
    """What the plan's launch gives Megatron, under Megatron's argument names (the values ``validate_args`` makes
    of the vector: ffn and kv sizes filled in, the query groups of plain attention being the heads)."""
    flags = _flags(plan.get("megatron_args") or [])

    def value(flag: str) -> Any:
        return flags.get(flag) if flags.get(flag) is not None else _DEFAULTS.get(flag)

    hidden, heads = _int(value("--hidden-size")), _int(value("--num-attention-heads"))
    out: dict[str, Any] = {
        "num_layers": _int(value("--num-layers")),
        "hidden_size": hidden,
        "ffn_hidden_size": _int(value("--ffn-hidden-size")),
        "num_attention_heads": heads,
        "num_query_groups": _int(value("--num-query-groups")) if "--group-query-attention" in flags else heads,
        "kv_channels": _int(value("--kv-channels")) or (hidden // heads if hidden and heads else None),
        "seq_length": _int(value("--seq-length")),
        "max_position_embeddings": _int(value("--max-position-embeddings")),
        "swiglu": "--swiglu" in flags,
        "normalization": value("--normalization"),
        "untie_embeddings_and_output_weights": "--untie-embeddings-and-output-weights" in flags,
        "position_embedding_type": value("--position-embedding-type"),
        "rotary_base": _int(value("--rotary-base")),
        "add_bias_linear": "--disable-bias-linear" not in flags,
        "padded_vocab_size": _int(plan.get("padded_vocab_size")),
        "tensor_model_parallel_size": _int(plan.get("tp")) or 1,
        "precision": _precision("--bf16" in flags, "--fp16" in flags, flags.get("--fp8-format")),
        "schedule": schedule({f[2:].replace("-", "_"): v for f, v in flags.items() if f in _SCHEDULE_FLAGS}),
        "schedule_on_resume": (
            "checkpoint" if "--use-checkpoint-opt_param-scheduler" in flags
            else "override" if "--override-opt_param-scheduler" in flags else "refuse"
        ),
    }  # fmt: skip
    return out


#: The arguments (core 0.14, ``training.get_optimizer_param_scheduler``) that make the schedule
#: Megatron's ``OptimizerParamScheduler`` checks against a save's on load; flags as the launch spells them.
_SCHEDULE_FLAGS = tuple(f"--{name}" for name in (
    "lr", "min-lr", "lr-decay-style", "lr-warmup-iters", "lr-warmup-samples", "lr-warmup-fraction", "lr-decay-iters",
    "lr-decay-samples", "train-iters", "train-samples", "global-batch-size", "weight-decay", "start-weight-decay",
    "end-weight-decay", "weight-decay-incr-style",
))  # fmt: skip


def _float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def schedule(a: Mapping[str, Any]) -> dict[str, Any] | None:
    """The state Megatron's scheduler is built with (``training.get_optimizer_param_scheduler``, core 0.14) from
    arguments under Megatron's names, Megatron's defaults for those left out, under the names of the state it saves
    and compares on load (``OptimizerParamScheduler.state_dict``): the rates, the decay style, and the warm-up, decay
    and weight-decay steps in samples. None when the arguments do not say."""
    gbs, train_samples = _int(a.get("global_batch_size")), _int(a.get("train_samples"))
    train_iters, fraction = _int(a.get("train_iters")), _float(a.get("lr_warmup_fraction"))
    if train_samples:
        decay, wd_steps = _int(a.get("lr_decay_samples")) or train_samples, train_samples
        warm = _int(a.get("lr_warmup_samples")) or 0
    elif train_iters and gbs:
        decay, wd_steps = (_int(a.get("lr_decay_iters")) or train_iters) * gbs, train_iters * gbs
        warm = (_int(a.get("lr_warmup_iters")) or 0) * gbs
    else:
        return None
    lr, weight_decay = _float(a.get("lr")), _float(a.get("weight_decay"))
    if lr is None:
        return None
    weight_decay = 0.01 if weight_decay is None else weight_decay
    start_wd, end_wd = _float(a.get("start_weight_decay")), _float(a.get("end_weight_decay"))
    return {
        "max_lr": lr,
        "min_lr": _float(a.get("min_lr")) or 0.0,
        "lr_decay_style": a.get("lr_decay_style") or "linear",
        "lr_warmup_steps": _number(fraction * decay if fraction is not None else warm),
        "lr_decay_steps": decay,
        "start_wd": weight_decay if start_wd is None else start_wd,
        "end_wd": weight_decay if end_wd is None else end_wd,
        "wd_incr_steps": wd_steps,
        "wd_incr_style": a.get("weight_decay_incr_style") or "constant",
    }


#: The names older Megatrons saved the scheduler's state under (core 0.14's load_state_dict reads them too).
_OLD_SCHEDULER_NAMES = {
    "max_lr": ("start_lr",),
    "lr_warmup_steps": ("warmup_iter", "warmup_steps"),
    "lr_decay_steps": ("end_iter", "decay_steps"),
    "lr_decay_style": ("decay_style",),
}


def saved_schedule(state: Any) -> dict[str, Any] | None:
    """The scheduler's state a save holds (``opt_param_scheduler`` in ``common.pt``, read on the node by
    ``checkpoint_scan.py scan --args``) under :func:`schedule`'s names; None when it is not there or incomplete.
    This, not the save's arguments, is what Megatron compares: a run resumed with lr_schedule_on_resume=checkpoint
    saves the schedule it loaded, not the one its arguments describe."""
    if not isinstance(state, Mapping):
        return None
    out: dict[str, Any] = {}
    for key in ("max_lr", "min_lr", "lr_decay_style", "lr_warmup_steps", "lr_decay_steps", "start_wd", "end_wd",
                "wd_incr_steps", "wd_incr_style"):  # fmt: skip
        found = next((state[k] for k in (key, *_OLD_SCHEDULER_NAMES.get(key, ())) if k in state), None)
        if found is None and key not in ("start_wd", "end_wd", "wd_incr_steps", "wd_incr_style"):
            return None
        out[key] = _number(found) if isinstance(found, (int, float)) and not isinstance(found, bool) else found
    if out["wd_incr_steps"] is None:  # a save from before the weight-decay schedule: not compared
        for key in ("start_wd", "end_wd", "wd_incr_steps", "wd_incr_style"):
            out.pop(key)
    return out


def _precision(bf16: Any, fp16: Any, fp8: Any) -> str:
    base = "bf16" if bf16 else "fp16" if fp16 else "fp32"
    return f"{base}+fp8 {fp8}" if fp8 else base


def saved_values(args: Mapping[str, Any]) -> dict[str, Any]:
    """The same names from the arguments a save holds (keys an older Megatron did not record are left out)."""
    out = {key: args[key] for key in (
        "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "kv_channels", "seq_length",
        "max_position_embeddings", "swiglu", "normalization", "untie_embeddings_and_output_weights",
        "position_embedding_type", "rotary_base", "add_bias_linear", "padded_vocab_size",
    ) if key in args}  # fmt: skip
    if "num_attention_heads" in args:
        grouped = args.get("group_query_attention") and args.get("num_query_groups")
        out["num_query_groups"] = args["num_query_groups"] if grouped else args["num_attention_heads"]
    if "bf16" in args or "fp16" in args:
        out["precision"] = _precision(args.get("bf16"), args.get("fp16"), args.get("fp8"))
    out["tensor_model_parallel_size"] = _int(args.get("tensor_model_parallel_size")) or 1
    out["make_vocab_size_divisible_by"] = _int(args.get("make_vocab_size_divisible_by")) or 128
    return out


#: Differences that refuse a resume: the tensors' shapes, or what the weights mean (the model, its context, its
#: positions). Everything else compared is stated.
FATAL = (
    "num_layers",
    "hidden_size",
    "ffn_hidden_size",
    "num_attention_heads",
    "num_query_groups",
    "kv_channels",
    "swiglu",
    "normalization",
    "untie_embeddings_and_output_weights",
    "position_embedding_type",
    "add_bias_linear",
    "seq_length",
    "rotary_base",
)
#: The -e option that sets each compared argument (the rest come from the model preset).
OPTION = {"seq_length": "seq_length", "precision": "precision"}


def saved_args_differences(
    args: Mapping[str, Any], plan: Mapping[str, Any], scheduler: Any = None
) -> dict[str, list[dict[str, Any]]]:
    """``{"fatal": [...], "stated": [...]}``, each ``{"arg", "saved", "planned", "why"}``, between the arguments a
    save holds and the plan's launch. Keys either side lacks are not compared. The padded vocabulary differs with
    tp by design (Megatron pads to a multiple of ``make_vocab_size_divisible_by`` x tp and reshapes the embedding
    on load): within that padding it is stated, beyond it the vocabulary is another tokenizer's (fatal)."""
    return _differences(dict(saved_values(args), schedule=saved_schedule(scheduler)), planned_values(plan))


def _differences(saved: Mapping[str, Any], planned: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    fatal: list[dict[str, Any]] = []
    stated: list[dict[str, Any]] = []
    rope = planned.get("position_embedding_type") == "rope" and saved.get("position_embedding_type") == "rope"
    for key in (*FATAL, "max_position_embeddings", "precision"):
        if key not in saved or planned.get(key) is None or saved[key] == planned[key]:
            continue
        entry = {"arg": key, "saved": saved[key], "planned": planned[key]}
        if key == "rotary_base" and not rope:
            continue
        if key == "max_position_embeddings":
            # a learned position table has this many rows; RoPE has no table (Megatron sizes its cache by it)
            (stated if rope else fatal).append(dict(entry, why="RoPE has no position table" if rope else "shape"))
        elif key == "precision":
            stated.append(dict(entry, why="the same weights train on; results are not comparable"))
        else:
            fatal.append(dict(entry, why="shape" if key not in ("seq_length", "rotary_base") else "meaning"))
    if saved.get("padded_vocab_size") is not None and planned.get("padded_vocab_size") is not None:
        old, new = saved["padded_vocab_size"], planned["padded_vocab_size"]
        pad = saved["make_vocab_size_divisible_by"] * max(saved["tensor_model_parallel_size"],
                                                          planned["tensor_model_parallel_size"])  # fmt: skip
        if old != new:
            entry = {"arg": "padded_vocab_size", "saved": old, "planned": new}
            if abs(old - new) < pad:
                stated.append(dict(entry, why=f"padding to a multiple of {pad} at another tp"))
            else:
                fatal.append(dict(entry, why="another vocabulary"))
    old_schedule, new_schedule = saved.get("schedule"), planned.get("schedule")
    schedule_changes = [
        {"arg": key, "saved": old_schedule[key], "planned": new_schedule[key]}
        for key in old_schedule or {}
        if new_schedule and key in new_schedule and old_schedule[key] != new_schedule[key]
    ]
    return {"fatal": fatal, "stated": stated, "schedule": schedule_changes}


def schedule_verdict(changes: Sequence[Mapping[str, Any]], plan: Mapping[str, Any], iteration: int) -> tuple[str, str]:
    """``(refusal, line)`` for a resume whose learning-rate schedule differs from the save's (``changes`` from
    :func:`saved_args_differences`): refused unless ``training.lr_schedule_on_resume`` chose, a stated line when
    it did; both empty when nothing differs."""
    if not changes:
        return "", ""
    what = "; ".join(difference_text(e) for e in changes)
    choice = planned_values(plan)["schedule_on_resume"]
    line = f"checkpoint   the learning-rate schedule differs from iteration {iteration}'s save ({what}): "
    if choice == "checkpoint":
        return "", line + "the save's is kept (lr_schedule_on_resume=checkpoint)"
    if choice == "override":
        return "", line + "this run's applies from the resumed iteration on (lr_schedule_on_resume=override)"
    return (
        f"the learning-rate schedule differs from the one iteration {iteration}'s save was trained with ({what}; "
        "Megatron's scheduler refuses to load it). Nothing was started or changed. Resume with the options it was "
        "trained with (train_iters, the global batch and the training schedule of the run that saved it), or "
        'choose: -e \'{"training": {"lr_schedule_on_resume": "checkpoint"}}\' keeps the saved schedule '
        "(to extend a run's train_iters, its decay stays where it was), \"override\" takes this run's schedule from "
        "the resumed iteration on; or -e fresh=true starts anew"
    ), ""


def _read_json(path: str) -> Any:
    """An earlier run's record, or None when it is missing or unreadable (this check then leaves it to the node's)."""
    try:
        return records.read_json(path, "record", "", expect=object)
    except records.RecordError:
        return None


def new_run_id(when: float | None = None) -> str:
    """A new run id: the UTC time to the second, then four random hex digits (``20261205-011500-3fa9``), so that
    two runs started in the same second on one experiment get two ids; :func:`claim_run_dir` makes the rare
    collision a refusal, never an overwrite. Ids sort by their start time."""
    return f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime(when))}-{secrets.token_hex(2)}"


def claim_run_dir(runs_dir: str, exp: str, run_id: str, playbook: str, given: bool) -> str:
    """Create the run's controller directory ``<runs_dir>/<exp>/<run_id>`` as this run's own, atomically (one
    ``mkdir``: of two runs claiming one id, one wins), before any node is contacted. The refusal (``""`` when the
    claim holds) says that the id names an earlier run on this controller: a run id names one run, and its records
    are never overwritten."""
    exp_dir = os.path.join(runs_dir, exp)
    run_dir = os.path.join(exp_dir, run_id)
    try:
        os.makedirs(exp_dir, exist_ok=True)
        os.mkdir(run_dir)
    except FileExistsError:
        fix = (
            "Leave -e run_id out (a new one is made for every run), or give one no run of this experiment has used"
            if given
            else "Run it again: the generated id met another run's started in the same second"
        )
        held = set(os.listdir(run_dir)) if os.path.isdir(run_dir) else None
        if given and held == set():
            fix += (
                f" (this one was claimed by a run refused before it wrote anything: remove the empty {run_dir} "
                "to use the id again)"
            )
        elif given and held is not None and held <= {"run.json", "events.jsonl", ".run.lock"}:
            fix += (
                f" (this one was claimed by a run refused before its launch, which left only its record: remove "
                f"{run_dir} to use the id again)"
            )
        resume = "; the experiment resumes from its checkpoints with any run id" if playbook == "train.yml" else ""
        return records.printable(
            f"{playbook}: run id {run_id} names an earlier run of {exp} on this controller ({run_dir}); a run's "
            f"records are never overwritten. {fix}{resume}. Nothing was written; no node was contacted."
        )
    except OSError as exc:
        return records.printable(
            f"{playbook}: the run directory {run_dir} cannot be made on this controller ({exc.strerror or exc}). "
            "Give -e runs_dir=DIR on a disk you can write to. Nothing was written; no node was contacted."
        )
    return ""


def _own_verified_saves(run_dir: str) -> list[int]:
    """The iterations a run saved itself (its summary's ``checkpoints.saved``, from Megatron's log) that its ledger
    (``checkpoints.json``) verified; a run's ledger also judges the saves of the runs before it."""
    summary, ledger = _read_json(os.path.join(run_dir, "summary.json")), _read_json(os.path.join(run_dir, LEDGER))
    saved = ((summary or {}).get("checkpoints") or {}).get("saved") if isinstance(summary, dict) else None
    own = {s.get("iteration") for s in saved or [] if isinstance(s, Mapping)}
    judged = ledger.get("saves") if isinstance(ledger, dict) else None
    return sorted(
        s["iteration"]
        for s in judged or []
        if isinstance(s, Mapping) and s.get("verdict") == "verified" and s.get("iteration") in own
    )


def earlier_run_refusal(runs_dir: str, plan: Mapping[str, Any], fresh: bool) -> str:
    """The refusal (``""`` when none) of a resume into a checkpoint directory that, by this controller's own records,
    another configuration wrote: before any node is contacted. The node-side check (:func:`check_directory`, on the
    arguments Megatron saved) stays the authority; this one reads ``runs/<exp>/<run_id>/plan/plan.json``, the
    summary and the ledger of the earlier runs of the same experiment, on the same checkpoint directory and at least
    one of the same node addresses, newest first. The newest that wrote a save it verified is compared, as a save's
    arguments are (the padded vocabulary only when both plans took it from the same source:
    train.yml's first plan has not read the dataset's manifest yet); a newer one that moved the directory aside
    (``fresh=true``) and saved nothing verified ends the search. Unreadable records are skipped (the node-side
    check still runs)."""
    if fresh or not runs_dir:
        return ""
    exp_dir = os.path.join(runs_dir, str(plan["exp_name"]))
    addrs = {n.get("addr") for n in plan.get("nodes") or []}
    earlier = []
    for run_id in os.listdir(exp_dir) if os.path.isdir(exp_dir) else []:
        path = os.path.join(exp_dir, run_id, "plan", "plan.json")
        old = _read_json(path)
        if run_id == plan.get("run_id") or not isinstance(old, dict) or not isinstance(old.get("megatron_args"), list):
            continue
        if old.get("checkpoint_dir") == plan.get("checkpoint_dir") and addrs & {
            n.get("addr") for n in old.get("nodes") or [] if isinstance(n, Mapping)
        }:
            earlier.append((os.path.getmtime(path), run_id, old))
    for _, run_id, old in sorted(earlier, key=lambda e: e[0], reverse=True):
        verified = _own_verified_saves(os.path.join(exp_dir, run_id))
        if not verified:
            if old.get("checkpoint_dir_before"):
                return ""
            continue
        if old.get("job", "megatron") != plan.get("job", "megatron"):
            return ""  # the node-side check names another job's saves
        flags = _flags(old["megatron_args"])
        saved = dict(
            planned_values(old), make_vocab_size_divisible_by=_int(flags.get("--make-vocab-size-divisible-by")) or 128
        )
        planned = planned_values(plan)
        if saved["schedule_on_resume"] == "checkpoint" or plan.get("job", "megatron") != "megatron":
            # that run kept an earlier save's schedule: only the master's read of the saved one can tell it; the
            # smoke job keeps no Megatron scheduler
            saved["schedule"] = None
        if old.get("vocab_source") != plan.get("vocab_source"):
            # train.yml's first plan has not read the dataset's manifest yet: the vocabulary is compared on the master
            saved.pop("padded_vocab_size"), planned.pop("padded_vocab_size")
        found = _differences(saved, planned)
        fatal, directory = found["fatal"], plan["checkpoint_dir"]
        record = f"run {plan['exp_name']}/{run_id}, recorded on this controller in {os.path.join(exp_dir, run_id)}"
        if not fatal:
            refusal = schedule_verdict(found["schedule"], plan, max(verified))[0]
            return (
                f"train.yml: the checkpoint directory {directory} ({record}): {refusal}; no node was contacted."
                * bool(refusal)
            )
        return (
            f"train.yml: the checkpoint directory {directory} was written by another configuration ({record}, "
            f"verified iteration {max(verified)}'s save there): "
            + "; ".join(difference_text(e) for e in fatal)
            + f". Nothing was started or changed; no node was contacted. {the_fix(fatal, plan, directory)}."
        )
    return ""


def _shown(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (bool, type(None))) else str(value)


def difference_text(entry: Mapping[str, Any]) -> str:
    """``seq_length: saved 4096, planned 8192``."""
    return f"{entry['arg']}: saved {_shown(entry['saved'])}, planned {_shown(entry['planned'])}"


def the_fix(fatal: Sequence[Mapping[str, Any]], plan: Mapping[str, Any], directory: str) -> str:
    """What the user can do about a directory written by another configuration."""
    matching = [f"-e {OPTION[e['arg']]}={e['saved']}" for e in fatal if e["arg"] in OPTION]
    if any(e["arg"] not in OPTION for e in fatal):
        matching.append("-e model=<the preset it was written with>")
    return (
        f"Give another experiment name (-e exp=NAME: a fresh checkpoint directory), or -e fresh=true to move "
        f"{directory} aside (kept, not deleted) and start anew, or resume it with the options it was written with "
        f"({' '.join(matching)})"
    )


def check_directory(listing: Mapping[str, Any], plan: Mapping[str, Any], node: str) -> dict[str, Any]:
    """Whether the scanned directory (``checkpoint_scan.py scan --args``) belongs to the plan's experiment.

    Judged on the newest save that recorded its arguments (a directory belongs to one configuration; the newest
    is what a resume loads). A megatron plan also refuses the smoke job's saves, and the smoke job Megatron's.
    ``{"refused": text | "", "lines": [...], "compared": iteration | None}``, and ``"adopt": {"from", "to"}`` when
    the listing is of the old-style directory (``legacy_of``: the plan's directory, which has no saves) and its
    saves are this experiment's: the caller moves it to the plan's directory on every node."""
    directory = listing.get("dir") or plan.get("checkpoint_dir")
    saves = sorted(listing.get("saves") or [], key=lambda s: s.get("iteration", 0))
    out: dict[str, Any] = {"refused": "", "lines": [], "compared": None}
    job = plan.get("job", "megatron")
    foreign = [
        s for s in saves
        if (job == "megatron" and "smoke.pt" in (s.get("files") or {}))
        or (job == "smoke" and (".metadata" in (s.get("files") or {}) or "args" in s))
    ]  # fmt: skip
    if foreign:
        other = "the smoke job" if job == "megatron" else "Megatron's pretrain_gpt.py"
        out["refused"] = (
            f"{node}: the checkpoint directory {directory} holds saves written by {other} (iteration "
            f"{foreign[-1]['iteration']}), and this run is {'Megatron' if job == 'megatron' else 'the smoke job'}: "
            f"it cannot resume from them. Nothing was started or changed. {the_fix([], plan, directory)}."
        )
        return out
    legacy_of = listing.get("legacy_of")
    with_args = [s for s in saves if isinstance(s.get("args"), Mapping)]
    if legacy_of and saves and not with_args:
        out["refused"] = (
            f"{node}: {legacy_of} has no saves, and the old-style checkpoint directory {directory} (named before "
            "the model, sequence length and precision joined the experiment name) records no arguments to show "
            f"that it belongs to this experiment. Nothing was started or changed. Move it to {legacy_of} yourself "
            f"to resume from it, or give -e fresh=true to start anew in {legacy_of} ({directory} is left as it is)."
        )
        return out
    if not with_args:
        return out
    newest = with_args[-1]
    out["compared"] = newest["iteration"]
    found = saved_args_differences(newest["args"], plan, newest.get("scheduler"))
    out["lines"] = [
        f"checkpoint   iteration {newest['iteration']}'s save differs: {difference_text(e)} ({e['why']}; resumed)"
        for e in found["stated"]
    ]
    schedule_refusal, schedule_line = schedule_verdict(found["schedule"], plan, newest["iteration"])
    out["lines"] += [schedule_line] if schedule_line else []
    if found["fatal"] and legacy_of:
        out["refused"] = (
            f"{node}: {legacy_of} has no saves, and the old-style checkpoint directory {directory} (named before "
            "the model, sequence length and precision joined the experiment name) was written by another "
            f"configuration (the arguments Megatron recorded in iteration {newest['iteration']}'s save): "
            + "; ".join(difference_text(e) for e in found["fatal"])
            + f". Nothing was started or changed. Give -e fresh=true to start anew in {legacy_of} ({directory} "
            f"is left as it is), or {the_fix(found['fatal'], plan, directory).split(', or ')[-1]}."
        )
    elif found["fatal"]:
        out["refused"] = (
            f"{node}: the checkpoint directory {directory} was written by another configuration (the arguments "
            f"Megatron recorded in iteration {newest['iteration']}'s save): "
            + "; ".join(difference_text(e) for e in found["fatal"])
            + f". Nothing was started or changed. {the_fix(found['fatal'], plan, directory)}."
        )
    elif schedule_refusal:
        out["refused"] = f"{node}: the checkpoint directory {directory}: {schedule_refusal}."
    elif legacy_of:
        out["adopt"] = {"from": directory, "to": legacy_of}
        out["lines"].append(
            f"checkpoint   {legacy_of} has no saves; the old-style directory {directory} (named before the model, "
            f"sequence length and precision joined the experiment name) holds this experiment's (the arguments of "
            f"iteration {newest['iteration']}'s save match): it is moved to {legacy_of} and resumed from"
        )
    return out


def resume_choice(
    scan: Mapping[str, Any],
    plan: Mapping[str, Any],
    verify: bool,
    node: str,
    failed_loads: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The reply of ``checkpoint_scan.py scan`` on the master (``stdout``, ``stderr``, ``msg``: as docker exec or
    the supervisor answers) as the run's resume point, for train.yml's first launch and the supervisor's restarts.

    ``{"resume": "N" | "", "set_aside": [names], "tracker": "N" | None, "lines": [...], "refused": text | "",
    "saves": [verdicts]}``. ``verify`` false trusts the tracker as it is (-e verify_checkpoints=false).
    ``failed_loads``: the saves an attempt of this run failed to resume from (iteration -> why), never chosen.
    A directory written by another configuration (the arguments its newest save recorded, ``scan --args``) is
    refused whatever ``verify`` says (:func:`trainops.identity.check_directory`); the old-style directory a
    ``scan --legacy`` listed, when it is this experiment's, comes back as ``adopt`` (moved before the resume)."""
    directory = plan["checkpoint_dir"]
    try:
        listing = json.loads(scan.get("stdout") or "")
    except ValueError:
        why = (scan.get("stderr") or scan.get("msg") or "no output").strip()[-400:]
        raise PlanError(
            [
                f"{node}: the checkpoints in {directory} could not be scanned: {why}. Fix the directory, or give "
                "-e verify_checkpoints=false to resume from what its tracker names unchecked. Nothing was started."
            ]
        ) from None
    belongs = check_directory(listing, plan, node)
    adopt = belongs.get("adopt")
    if belongs["refused"]:
        return {"resume": "", "set_aside": [], "tracker": None, "lines": belongs["lines"],
                "refused": belongs["refused"], "saves": [], "adopt": None}  # fmt: skip
    if not verify:
        tracker = tracker_value(listing.get("tracker"))
        return {"resume": "" if tracker is None else str(tracker), "set_aside": [], "tracker": None,
                "lines": belongs["lines"], "refused": "", "saves": [], "adopt": adopt}  # fmt: skip
    saves = judge_saves(listing, plan, running=False, failed_loads=failed_loads)
    choice = choose_save(saves, listing.get("tracker"))
    if adopt:
        directory = f"{listing['dir']} (to be moved to {directory})"
    refused = ""
    if choice.get("refused"):
        refused = (
            f"{node}: not one checkpoint in {directory} can be resumed from ({choice['refused']}). Nothing was "
            "started or changed. Give -e fresh=true to start anew (the saves are moved aside, not deleted), or "
            "-e verify_checkpoints=false to resume from what the tracker names unchecked (docs/checkpoints.md)."
        )
    return {
        "resume": "" if choice["iteration"] is None else str(choice["iteration"]),
        "set_aside": [entry["name"] for entry in choice["set_aside"]],
        "tracker": choice["tracker"],
        "lines": belongs["lines"] + choice["lines"],
        "refused": refused,
        "saves": saves,
        "adopt": None if refused else adopt,
    }
