"""Backend profiles (``backends/<accelerator>.yml``): what each accelerator's stack provides and needs.

One loader for every play: the profile of an accelerator, with the site's ``backend_env`` (inventory) laid over
its ``launch_env``. A profile also holds its cards' facts (``cards``, ``default_card``): the planner has no
table of its own. A new backend is its profile, its device tool's task file under
``roles/accelerator/tasks/<device_tool>.yml``, and that tool's parser (``trainops.gmi.PARSERS``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

import yaml

from .errors import PlanError

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Every key of a profile: (its type, whether it is required, what it holds). docs/options.md is generated from it.
PROFILE_KEYS: dict[str, tuple[type, bool, str]] = {
    "name": (str, True, "The accelerator's name (the file's name)."),
    "device_tool": (str, True, "The device tool (mthreads-gmi, nvidia-smi), or empty for none."),
    "default_card": (str, True, "The card a node has unless its accelerator_card says (one of cards)."),
    "cards": (dict, True, "Each card's memory_gib, peak_tflops, intra_busbw_gbps, source; fp8: false if none."),
    "container_env": (dict, True, "Environment of the training container."),
    "visible_devices_env": (str, True, "The visible-devices variable the launch sets per node, or empty."),
    "torch_distributed_backend": (str, True, "torch.distributed backend (mccl, nccl, gloo)."),
    "collective_test": (str, True, "The collective test binary inside the container, or empty."),
    "collective_min_busbw_gbps": ((int, float), False, "Least all-reduce bus bandwidth (GB/s); 0: no check."),
    "image": (str, True, "The training image."),
    "torchrun": (str, True, "torchrun inside the container."),
    "megatron_home": (str, True, "Megatron-LM's directory inside the container."),
    "megatron_entrypoint": (str, True, "The pretrain_gpt.py the launch runs."),
    "pythonpath": (list, False, "Directories the launch puts first on PYTHONPATH."),
    "megatron_log_straggler": (bool, False, "Whether the launch passes --log-straggler by default."),
    "flight_recorder": (bool, False, "Whether the launch turns on PyTorch's NCCL flight recorder."),
    "megatron_flops_convention": (str, False, "How the image's Megatron counts printed TFLOP/s (causal, full)."),
    "default_job": (str, False, "What the launch runs unless -e smoke says: megatron (default) or smoke."),
    "megatron_distributed_backend": (str, False, "Megatron's --distributed-backend: nccl (default) or gloo."),
    "megatron_fused_kernels": (bool, False, "Whether the image has Megatron's fused kernels (Apex, TE); default true."),
    "launch_env": (dict, True, "Environment of every launch (the site's backend_env goes over it)."),
}
#: Keys every profile must have (the roles and templates read them).
REQUIRED_KEYS = tuple(key for key, (_, required, _) in PROFILE_KEYS.items() if required)


#: What each card of a profile states.
CARD_KEYS = ("memory_gib", "peak_tflops", "intra_busbw_gbps", "source")
#: The precisions a card states a dense peak for.
PEAK_PRECISIONS = ("bf16", "fp8", "fp32")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def card_problems(path: str, profile: Mapping[str, Any]) -> list[str]:
    """What is wrong with a profile's ``cards`` and ``default_card``: every card states its memory, a peak (or
    null) per precision, its bus bandwidth and its source."""
    cards = profile.get("cards")
    if not isinstance(cards, Mapping) or not cards:
        return []  # the key check names it
    problems = []
    if profile.get("default_card") not in cards:
        problems.append(
            f"{path}: default_card {profile.get('default_card')!r} is not one of its cards ({', '.join(cards)})"
        )
    for card, facts in cards.items():
        where = f"{path}: card {card}"
        if not isinstance(facts, Mapping):
            problems.append(f"{where} must map {', '.join(CARD_KEYS)}")
            continue
        if missing := [key for key in CARD_KEYS if key not in facts]:
            problems.append(f"{where} lacks {', '.join(missing)}")
        problems += [f"{where}: {key} must be a positive number" for key in ("memory_gib", "intra_busbw_gbps")
                     if key in facts and not _number(facts[key])]  # fmt: skip
        peaks = facts.get("peak_tflops")
        if "peak_tflops" in facts and (
            not isinstance(peaks, Mapping)
            or set(peaks) != set(PEAK_PRECISIONS)
            or not all(v is None or _number(v) for v in peaks.values())
        ):
            problems.append(f"{where}: peak_tflops must give {', '.join(PEAK_PRECISIONS)}, each a number or null")
        if "fp8" in facts and not isinstance(facts["fp8"], bool):
            problems.append(f"{where}: fp8 must be true or false (whether the card computes in FP8)")
        if "source" in facts and not (isinstance(facts["source"], str) and facts["source"].strip()):
            problems.append(f"{where}: source must say where its figures come from")
    return problems


def names(backends_dir: str) -> list[str]:
    """The accelerators that have a profile."""
    return sorted(f[: -len(".yml")] for f in os.listdir(backends_dir) if f.endswith(".yml"))


#: Variables the launch sets itself (launch.sh.j2, torchrun): a site's backend_env may not set them, since the launch
#: would silently override them. The profile's own ``visible_devices_env`` is added per profile.
LAUNCH_SETS = (
    "PYTHONPATH", "MTT_TRAIN_OPS_RUN", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK",
    "LOCAL_WORLD_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
)  # fmt: skip


def launch_set_problems(profile: Mapping[str, Any], site_env: Any) -> list[str]:
    """A ``backend_env`` name that the launch sets itself (it would be overridden): refused, naming who sets it."""
    if not isinstance(site_env, Mapping):
        return []
    own = {name: "launch.sh" for name in LAUNCH_SETS}
    if profile.get("visible_devices_env"):
        own[str(profile["visible_devices_env"])] = (
            f"the {profile.get('name')} profile's visible_devices_env (one per slot)"
        )
    return [
        f"backend_env sets {key}, which {own[key]} sets itself for every launch (the site's value would be "
        "overridden): remove it from backend_env; set slots to change the cards a node uses"
        for key in site_env
        if key in own
    ]


def env_problems(site_env: Any) -> list[str]:
    """Problems of the inventory's ``backend_env`` (names of environment variables to strings or numbers)."""
    bad = (
        [repr(site_env)]
        if not isinstance(site_env, Mapping)
        else [
            f"{key!r}: {value!r}"
            for key, value in site_env.items()
            if not (isinstance(key, str) and _ENV_NAME.match(key))
            or isinstance(value, bool)
            or not isinstance(value, (str, int, float))
        ]
    )
    if not bad:
        return []
    return [
        "backend_env must map environment variable names (letters, digits, _) to strings or numbers, as "
        f'backend_env: {{MCCL_ALGOS: "1"}}; got {", ".join(bad)}'
    ]


def load_profile(backends_dir: str, accelerator: str, site_env: Any = None) -> dict[str, Any]:
    """The profile of ``accelerator`` with ``site_env`` over its ``launch_env``; :class:`PlanError` names what
    is wrong (an unknown accelerator, a profile missing keys, a bad ``backend_env``)."""
    known = names(backends_dir)
    if accelerator not in known:
        raise PlanError([f"accelerator {accelerator!r} has no backend profile: use one of {', '.join(known)}"])
    path = os.path.join(backends_dir, f"{accelerator}.yml")
    with open(path, encoding="utf-8") as handle:
        profile = yaml.safe_load(handle) or {}
    missing = [key for key in REQUIRED_KEYS if key not in profile]
    problems = [f"{path} lacks {', '.join(missing)}"] if missing else []
    problems += [
        f"{path}: unknown key {key!r} (known: {', '.join(PROFILE_KEYS)})" for key in profile if key not in PROFILE_KEYS
    ]
    problems += [
        f"{path}: {key} must be a {kind.__name__ if isinstance(kind, type) else 'number'}, got {profile[key]!r}"
        for key, (kind, _, _) in PROFILE_KEYS.items()
        if key in profile
        and (not isinstance(profile[key], kind) or (kind is not bool and isinstance(profile[key], bool)))
    ]
    problems += card_problems(path, profile)
    problems += env_problems({} if site_env is None else site_env)
    problems += launch_set_problems(profile, site_env)
    if problems:
        raise PlanError(problems)
    env = {**(profile.get("launch_env") or {}), **{k: str(v) for k, v in (site_env or {}).items()}}
    return {**profile, "launch_env": env}


def load_profiles(backends_dir: str) -> dict[str, dict[str, Any]]:
    """Every profile, by accelerator (tools, tests, what-if planning)."""
    return {name: load_profile(backends_dir, name) for name in names(backends_dir)}
