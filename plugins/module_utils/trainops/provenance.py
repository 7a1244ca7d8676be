"""What a run ran: the bundle's version, each node's training image and software stack (the Megatron-LM tree's
digest among them), the node package's version and the launch environment, recorded in the run's record
(``run.json``, :mod:`.run_record`) before the launch; the report adds the hash of the plan the run launched with,
keeps it all in ``summary.json`` and prints it (:func:`lines`).

A run of weeks outlives the checkout that launched it: the version is the one at the launch, not at the report.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Mapping
from typing import Any

#: What each node's stack holds (trainops.node.node_facts' ``stack``, the container's image ID added by the host).
STACK_KEYS = ("image", "megatron", "torch", "torch_musa", "nccl", "python")


def bundle_version(root: str) -> dict[str, Any]:
    """The bundle's git commit at ``root`` and whether tracked files differ from it (``modified``); outside a git
    checkout (an unpacked release), ``commit`` None and why: the node package's version still names the code."""
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
        if head.returncode != 0:
            return {"commit": None, "why": f"{root} is not a git checkout"}
        status = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=30)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"commit": None, "why": f"git could not be asked: {exc}"}
    return {"commit": head.stdout.strip(), "modified": bool(status.stdout.strip())}


def record(
    bundle: Mapping[str, Any], node_package: str, stacks: Mapping[str, Mapping[str, Any]], launch_env: Mapping
) -> dict[str, Any]:
    """The run's provenance for its record: ``stacks``, node -> its stack (a node whose stack could not be read
    maps to {} and shows as unknown)."""
    return {
        "bundle": dict(bundle),
        "node_package": str(node_package),
        "nodes": {str(node): {key: (stack or {}).get(key) for key in STACK_KEYS} for node, stack in stacks.items()},
        "launch_env": {str(name): str(value) for name, value in sorted(launch_env.items())},
    }


def file_digest(path: str) -> str | None:
    """The sha256 of a file's bytes (the plan.json the run launched with), None when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None


def _short(image: Any) -> str:
    text = str(image or "unknown")
    return text[:19] if text.startswith("sha256:") else text


def lines(provenance: Mapping[str, Any] | None) -> list[str]:
    """The report's lines: the bundle, the node package and the plan's hash; each stack with the nodes that run it
    (nodes that run the same one share a line); the launch environment."""
    if not provenance:
        return [
            "provenance   not recorded (run.json holds none: a run of an older bundle, or a report made on another "
            "controller than the one that launched the run)"
        ]
    bundle = provenance.get("bundle") or {}
    commit = bundle.get("commit")
    if commit:
        version = f"commit {commit[:12]}" + (" with local changes" if bundle.get("modified") else "")
    else:
        version = f"no git commit ({bundle.get('why') or 'unknown'})"
    plan = str(provenance.get("plan_sha256") or "-")[:12]
    out = [f"provenance   bundle {version}; node package {provenance.get('node_package')}; plan.json sha256 {plan}"]
    shared: dict[str, list[str]] = {}
    for node, stack in (provenance.get("nodes") or {}).items():
        shared.setdefault(json.dumps(stack, sort_keys=True), []).append(node)
    for key, nodes in shared.items():
        stack = json.loads(key)
        parts = [f"image {_short(stack.get('image'))}", f"Megatron-LM {stack.get('megatron') or 'none'}"]
        parts += [f"{name} {stack[name]}" for name in ("torch", "torch_musa", "nccl", "python") if stack.get(name)]
        out.append(f"             {', '.join(nodes)}: {', '.join(parts)}")
    env = provenance.get("launch_env") or {}
    out.append("             launch env: " + (" ".join(f"{k}={v}" for k, v in env.items()) or "(none)"))
    return out
