"""Jinja filters over the core: the inventory's nodes, the cluster, backend profiles, controller paths."""

from __future__ import annotations

import copy
import functools
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

_CORE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _CORE not in sys.path:
    sys.path.insert(0, _CORE)

from ansible.errors import AnsibleFilterError  # noqa: E402
from trainops import backend as backend_core  # noqa: E402
from trainops import cluster as cluster_core  # noqa: E402
from trainops.errors import PlanError  # noqa: E402

#: Inventory variables the planner reads from each node.
NODE_KEYS = ("ansible_host", "slots", "accelerator", "master", "node_addr", "accelerator_card")


#: The project's backend profiles (backends/<accelerator>.yml).
BACKENDS_DIR = os.path.join(os.path.dirname(os.path.dirname(_CORE)), "backends")


@functools.lru_cache(maxsize=1)
def _profiles() -> dict[str, dict[str, Any]]:
    """Every profile, read once per ansible-playbook run: the lazily templated trainops_cluster_facts and
    trainops_backends evaluate the filters below many times, and the files do not change during a run."""
    return backend_core.load_profiles(BACKENDS_DIR)


def inventory_nodes(
    hostnames: Sequence[str], hostvars: Mapping[str, Any], in_order: bool = False
) -> list[dict[str, Any]]:
    """The planner's view of each node: its name and the inventory keys it reads. ``in_order``: the order given is
    the rank order, the first node the master (a Slurm allocation's), so a node's ``master: true`` is left out."""
    nodes = []
    for name in hostnames:
        hv = hostvars[name]
        node = {"name": name}
        for key in NODE_KEYS:
            if key in hv and not (in_order and key == "master"):
                node[key] = hv[key]
        nodes.append(node)
    return nodes


def cluster(nodes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The cluster in rank order: ``{"master": name, "master_addr", "nodes": [{name, addr, slots, node_rank}]}``."""
    try:
        built = cluster_core.cluster_from_hosts(nodes, _profiles())
    except PlanError as exc:
        raise AnsibleFilterError(f"invalid inventory: {exc}") from None
    return {
        "master": built.master.name,
        "master_addr": built.master.addr,
        "world_size": built.world_size,
        "nodes": [{"name": n.name, "addr": n.addr, "slots": n.slots, "node_rank": n.node_rank} for n in built.nodes],
    }


def node_facts(
    hostnames: Sequence[str],
    hostvars: Mapping[str, Any],
    keys: Sequence[str],
    defaults: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Plain facts of each node for the core: ``{"name": host, key: hostvars[host][key] or defaults[key]}``."""
    defaults = defaults or {}
    nodes = []
    for name in hostnames:
        hv = hostvars[name] if name in hostvars else {}
        nodes.append({"name": name, **{key: hv[key] if key in hv else defaults.get(key) for key in keys}})
    return nodes


def sizes_by_node(nodes: Sequence[Mapping[str, Any]], key: str) -> dict[str, Any]:
    """``{node name: node[key]}`` of node_facts' list."""
    return {node["name"]: node.get(key) for node in nodes}


def controller_path(value: Any, option: str) -> str:
    """A controller path the user gave (``-e plan_dir``, ``-e runs_dir``), absolute against the directory
    ansible-playbook was started in (not the playbook's); an empty one is refused, naming the option."""
    text = "" if value is None else str(value)
    if not text.strip():
        raise AnsibleFilterError(f"-e {option}= is empty: give a directory, or leave {option} out for its default")
    return os.path.abspath(os.path.expanduser(text))


def backend_profiles(_accelerator: Any = None) -> dict[str, dict[str, Any]]:
    """Every backend profile by accelerator, as they stand in backends/ (the planner reads their cards); the value
    filtered (the run's accelerator) is not needed, a filter needs one."""
    try:
        return copy.deepcopy(_profiles())
    except PlanError as exc:
        raise AnsibleFilterError("; ".join(exc.problems)) from None


def backend_profile(accelerator: Any, backend_env: Any = None) -> dict[str, Any]:
    """The backend profile of ``accelerator`` with the site's ``backend_env`` over its launch_env
    (trainops.backend); an unknown accelerator or a bad backend_env is refused, naming it."""
    try:
        return backend_core.load_profile(BACKENDS_DIR, str(accelerator), backend_env)
    except PlanError as exc:
        raise AnsibleFilterError("; ".join(exc.problems)) from None


class FilterModule:
    """mtt-train-ops filters: the inventory's nodes, the cluster, backend profiles, controller paths."""

    def filters(self) -> dict[str, Any]:
        return {
            "trainops_inventory_nodes": inventory_nodes,
            "trainops_cluster": cluster,
            "trainops_backend_profile": backend_profile,
            "trainops_backend_profiles": backend_profiles,
            "trainops_node_facts": node_facts,
            "trainops_by_node": sizes_by_node,
            "trainops_controller_path": controller_path,
        }
