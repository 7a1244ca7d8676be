"""What a plan is asked for: the one definition of the ``megatron_layout`` module's options.

:class:`PlanRequest` holds every option :func:`.plan.make_plan` takes, each field with its type, default,
choices and a one-line description. The module's ``argument_spec`` is generated from it
(:meth:`PlanRequest.argument_spec`) and a unit test holds the module's ``DOCUMENTATION`` to it.
:meth:`PlanRequest.from_options` converts what the playbooks pass as given (strings from ``-e``), naming the
option of every value that does not convert; those problems travel with the request, so that ``make_plan``
reports them together with every other problem.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any

from .tokenizer import TYPES as TOKENIZER_TYPES

DEFAULT_HEADROOM = 0.10
#: How a Megatron counts the FLOPs behind the TFLOP/s it prints: causal attention (upstream core >= 0.12) or
#: full attention (older cores, and the vendor MUSA patch's own FLOP function).
FLOPS_CONVENTIONS = ("causal", "full")
#: Megatron's --distributed-backend choices (MUSA's patch maps nccl to MCCL; gloo: the CPU testbed).
DISTRIBUTED_BACKENDS = ("nccl", "gloo")

_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def coerce(kind: str, key: str, value: Any, problems: list[str]) -> Any:
    """Turn ``-e`` strings into the field's type; record a problem when impossible. An empty value (``-e tp=``)
    is a problem, never the default: leaving the option out gives the default."""
    base = kind.replace(" | None", "")
    if value is None:
        return None
    if isinstance(value, str) and value.strip() == "":
        problems.append(f"-e {key}= is empty: give a value, or leave {key} out for its default")
        return None
    if base != "str" and isinstance(value, str) and value.strip().lower() in ("none", "null"):
        return None
    try:
        if base == "bool":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in _TRUE or text in _FALSE:
                return text in _TRUE
            raise ValueError
        if base == "int":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(str(value).strip()) if isinstance(value, str) else int(value)
        if base == "float":
            return float(value)
        if base == "str":
            return str(value)
    except (TypeError, ValueError):
        wanted = {"int": "an integer", "float": "a number", "bool": "true or false"}.get(base, "a " + base)
        problems.append(f"{key} must be {wanted}, got {value!r}")
        return None
    return value


def _option(
    kind: str,
    doc: str,
    *,
    default: Any = MISSING,
    choices: Sequence[str] | None = None,
    elements: str | None = None,
    converted: bool = False,
) -> Any:
    """One option. ``kind``: dict, list, str, int, float or bool. No ``default``: the option is required; a default
    of None: optional, without one. ``converted``: the value arrives as given (a string from ``-e``) and
    :meth:`PlanRequest.from_options` converts it, naming the option (Ansible's type for it is ``raw``)."""
    meta = {"kind": kind, "doc": doc, "choices": choices, "elements": elements, "converted": converted}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True, kw_only=True)
class PlanRequest:
    """Every option of a plan, in the order of the module's documentation."""

    model: Mapping[str, Any] = _option("dict", "The model preset (the mapping of models/<name>.yml).")
    hosts: Sequence[Mapping[str, Any]] = _option(
        "list",
        "The nodes group's hosts in inventory order, each a mapping (name, ansible_host, slots, ...).",
        elements="dict",
    )
    backends: Mapping[str, Mapping[str, Any]] = _option(
        "dict", "Every backend profile by accelerator (backends/<accelerator>.yml): its cards and default card."
    )
    layout: Mapping[str, Any] = _option(
        "dict", "The requested layout (tp, pp, mbs, ...); -e strings are converted.", default={}
    )
    training: Mapping[str, Any] | None = _option(
        "dict", "Optimiser overrides (lr, min_lr, save_interval, ...).", default={}
    )
    work_home: str = _option(
        "str", "Directory inside the containers for runs and checkpoints.", default="/data/mtt-train-ops"
    )
    data_path: str = _option(
        "str", "Megatron data prefix (without .bin/.idx).", default="/data/datasets/llama3_text_document"
    )
    tokenizer_path: str = _option(
        "str", "Tokenizer file or directory inside the containers.", default="/data/llama3-tokenizer"
    )
    tokenizer_type: str | None = _option(
        "str",
        "Megatron tokenizer type; omitted: detected from the file, else the preset's.",
        default=None,
        choices=TOKENIZER_TYPES,
    )
    run_id: str = _option("str", "The run's identifier; names the run directory and the torchrun run id.")
    master_port: int | None = _option("int", "The rendezvous port on the master.", default=14388, converted=True)
    accelerator_memory_gib: float | None = _option(
        "float", "Memory of one card in GiB; defaults by card.", default=None, converted=True
    )
    accelerator_peak_tflops: float | None = _option(
        "float",
        "Dense peak of one card at the run's precision; defaults by card where known.",
        default=None,
        converted=True,
    )
    printed_flops_convention: str = _option(
        "str",
        "How the backend's Megatron counts the TFLOP/s it prints (causal: core >= 0.12, or full).",
        default="causal",
        choices=FLOPS_CONVENTIONS,
    )
    distributed_backend: str = _option(
        "str",
        "Megatron's --distributed-backend (the backend profile's megatron_distributed_backend).",
        default="nccl",
        choices=DISTRIBUTED_BACKENDS,
    )
    memory_headroom_fraction: float | None = _option(
        "float",
        "Share of the card kept free for the allocator, workspaces and FP8 buffers.",
        default=DEFAULT_HEADROOM,
        converted=True,
    )
    force: bool = _option("bool", "Accept a layout that does not fit in memory.", default=False, converted=True)
    recommend: bool = _option("bool", "Also rank every valid layout of the cluster.", default=False, converted=True)
    exp_name: str | None = _option(
        "str", "Experiment name (one directory level); default from the model, seq, precision and layout.", default=None
    )
    smoke: bool = _option(
        "bool",
        "Launch the project's smoke job instead of pretrain_gpt.py (the layout role defaults it to the backend "
        "profile's default_job).",
        default=False,
        converted=True,
    )
    manifest: Mapping[str, Any] | None = _option("dict", "The dataset's <data_path>.manifest.json.", default=None)
    init_from: str | None = _option(
        "str",
        "A Hugging Face Llama directory inside the containers whose weights a fresh start begins from (imported "
        "before the launch; docs/export.md); none: Megatron's own initialisation.",
        default=None,
    )
    tokenizer_path_given: bool = _option("bool", "Whether tokenizer_path was set by the user.", default=True)
    #: Not an option: what :meth:`from_options` could not convert, each naming the option as the user wrote it.
    problems: tuple[str, ...] = ()

    @classmethod
    def options(cls) -> tuple[Field, ...]:
        """The option fields, in order (every field but :attr:`problems`)."""
        return tuple(f for f in fields(cls) if "kind" in f.metadata)

    @classmethod
    def argument_spec(cls) -> dict[str, dict[str, Any]]:
        """The Ansible ``argument_spec``: converted options are ``raw`` (strings from ``-e`` reach the core)."""
        spec = {}
        for f in cls.options():
            meta = f.metadata
            entry: dict[str, Any] = {"type": "raw" if meta["converted"] else meta["kind"]}
            if meta["elements"]:
                entry["elements"] = meta["elements"]
            if f.default is MISSING and f.default_factory is MISSING:
                entry["required"] = True
            elif f.default_factory is not MISSING:
                entry["default"] = f.default_factory()
            elif f.default is not None:
                entry["default"] = f.default
            if meta["choices"]:
                entry["choices"] = list(meta["choices"])
            spec[f.name] = entry
        return spec

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> PlanRequest:
        """The request for ``options`` (the module's parameters, or keyword arguments): converted options turned
        into their types, what cannot be converted named in :attr:`problems` (its value None). An unknown or a
        missing required option is the caller's error (:class:`TypeError`), as for keyword arguments."""
        known = cls.options()
        unknown = sorted(set(options) - {f.name for f in known})
        if unknown:
            raise TypeError(f"unknown plan option(s) {unknown}")
        missing = [
            f.name for f in known if f.default is MISSING and f.default_factory is MISSING and f.name not in options
        ]
        if missing:
            raise TypeError(f"missing plan option(s) {missing}")
        problems: list[str] = []
        values = {}
        for f in known:
            value = options[f.name] if f.name in options else _default(f)
            if f.metadata["converted"]:
                before = len(problems)
                value = coerce(f.metadata["kind"], f.name, value, problems)
                if value is None and _default(f) is not None and len(problems) == before:  # -e master_port=none
                    wanted = {"int": "an integer", "float": "a number", "bool": "true or false"}[f.metadata["kind"]]
                    problems.append(f"{f.name} must be {wanted}, got {options[f.name]!r}")
                if f.metadata["kind"] == "bool":
                    value = bool(value)
            values[f.name] = value
        return cls(**values, problems=tuple(problems))


def _default(f: Field) -> Any:
    return f.default_factory() if f.default_factory is not MISSING else f.default
