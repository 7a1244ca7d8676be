"""Jinja filters of the health check: a node's gathered results as the facts trainops.health judges."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import Any

_CORE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _CORE not in sys.path:
    sys.path.insert(0, _CORE)

from ansible.errors import AnsibleFilterError  # noqa: E402
from trainops import health as health_core  # noqa: E402


def health_facts(
    container_info: Mapping[str, Any],
    container_facts: Mapping[str, Any],
    kernel_log: Mapping[str, Any],
    container: str,
    slots: Any,
    device_tool: str,
) -> dict[str, Any]:
    """roles/health_check's registered results (the container's info, node_facts.py's output, the kernel log's
    device errors) as one node's facts; a container that is not running, or a script that failed, is the error."""
    if not container_info.get("exists"):
        return {"error": f"the training container '{container}' does not exist", "action": "run provision.yml"}
    state = (container_info.get("container") or {}).get("State") or {}
    if not state.get("Running"):
        return {"error": f"the training container '{container}' is {state.get('Status', 'not running')}",
                "action": "run provision.yml (it starts the container)"}  # fmt: skip
    try:
        facts = json.loads(container_facts.get("stdout") or "")
    except ValueError:
        why = (container_facts.get("stderr") or container_facts.get("msg") or "no output").strip()[-300:]
        return {"error": f"the facts could not be read in '{container}': {why}",
                "action": f"run python3 in '{container}' by hand to see why"}  # fmt: skip
    facts["stack"]["image"] = (container_info.get("container") or {}).get("Image")
    facts["slots"] = int(slots)
    facts["device_tool"] = device_tool
    text = kernel_log.get("stdout") or ""
    if text.startswith("UNREADABLE"):
        facts["kernel_log"] = {"readable": False, "error": text[len("UNREADABLE") :].strip() or "dmesg failed"}
    elif kernel_log.get("rc", 0) != 0:
        facts["kernel_log"] = {"readable": False, "error": (kernel_log.get("stderr") or "dmesg failed").strip()}
    else:
        facts["kernel_log"] = {"readable": True, "lines": text.splitlines()[-200:]}
    return facts


def chosen_left_out(incident_left_out: Mapping[str, str], nodes: list[str], options: Mapping[str, Any]) -> dict:
    """The nodes a new run leaves out before any node is reached: the incident record's (unless -e use_nodes names
    them) and what -e exclude_nodes and -e use_nodes leave out; a name not in the inventory is refused."""
    use, exclude = options.get("use_nodes") or [], options.get("exclude_nodes") or []
    try:
        chosen = health_core.chosen_nodes(nodes, exclude, use)
    except ValueError as exc:
        raise AnsibleFilterError(f"-e exclude_nodes / -e use_nodes: {exc}") from None
    out = {node: why for node, why in incident_left_out.items() if node not in use}
    out.update(chosen)
    if len(out) >= len(nodes):
        raise AnsibleFilterError(
            "every node is left out (" + "; ".join(out.values()) + "): nothing to plan on. Nothing was started."
        )
    return out


class FilterModule:
    """mtt-train-ops filters: the health check's facts, the nodes chosen for a run."""

    def filters(self) -> dict[str, Any]:
        return {"trainops_health_facts": health_facts, "trainops_chosen_left_out": chosen_left_out}
