"""Jinja filters of the health check: a node's gathered results as the facts trainops.health judges."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from typing import Any

_CORE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _CORE not in sys.path:
    sys.path.insert(0, _CORE)

from ansible.errors import AnsibleFilterError  # noqa: E402
from ansible.utils.display import Display  # noqa: E402
from trainops import collective, health, node_choice  # noqa: E402
from trainops.options import convert  # noqa: E402

display = Display()


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
    text = kernel_log.get("stdout") or ""
    if text.startswith("UNREADABLE"):
        log = {"readable": False, "error": text[len("UNREADABLE") :].strip() or "dmesg failed"}
    elif kernel_log.get("rc", 0) != 0:
        log = {"readable": False, "error": (kernel_log.get("stderr") or "dmesg failed").strip()}
    else:
        log = {"readable": True, "lines": text.splitlines()[-200:]}
    image = (container_info.get("container") or {}).get("Image")
    facts = health.node_facts(container_facts, slots, device_tool, image, log)
    if "error" in facts:
        return {"error": f"the facts could not be read in '{container}': {facts['error'].split(': ', 1)[-1]}",
                "action": f"run python3 in '{container}' by hand to see why"}  # fmt: skip
    return facts


def full_records(health_dir: str, nodes: list[str], max_age_h: Any) -> list[dict[str, Any]]:
    """The full checks younger than ``max_age_h`` hours for ``nodes`` (trainops.health.full_records): what train.yml
    hands the run's supervisor, whose quick check after a failure carries them as health.yml's quick check does. A
    damaged record is skipped, with a warning."""
    warnings: list[str] = []
    found = health.full_records(health_dir, nodes, time.time(), float(max_age_h or 0) * 3600, warnings)
    for warning in warnings:
        display.warning(warning)
    return found


def burn_in_facts(result: Mapping[str, Any]) -> dict[str, Any]:
    """roles/health_burn_in's registered run as the node's burn-in facts: burn_in.py's JSON, or the error."""
    try:
        facts = json.loads((result.get("stdout") or "").strip().splitlines()[-1])
    except (ValueError, IndexError):
        why = (result.get("stderr") or result.get("msg") or "no output").strip()[-300:]
        return {"error": f"exit {result.get('rc', '?')}: {why}"}
    return facts if isinstance(facts, dict) else {"error": f"not a burn-in result: {facts!r}"[:300]}


def collective_run_facts(result: Mapping[str, Any], nodes: list[str], cards: int, test_path: str) -> dict[str, Any]:
    """roles/health_collective's registered run across ``nodes`` (one node alone, all, or a pair), each with
    ``cards`` ranks, as its facts: the nodes, and the bus bandwidth at the largest message (gloo's JSON line, or
    all_reduce_perf's table), ``skipped`` with why, or the error."""
    ranks, facts = cards * len(nodes), {"nodes": list(nodes)}
    if ranks < 2:
        return dict(facts, skipped="one card: nothing to all-reduce within the node")
    if result.get("rc") == 126 and len(nodes) > 1:
        return dict(facts, skipped="no mpirun in the training image: no all-reduce across nodes")
    if result.get("rc") == 127:
        where = test_path or "(none configured)"
        return dict(facts, skipped=f"no all_reduce_perf at {where} in the training container")
    text = result.get("stdout") or ""
    if result.get("rc", 1) != 0:
        why = ((result.get("stderr") or "") + " " + text).strip()[-300:] or result.get("msg", "no output")
        return dict(facts, error=f"exit {result.get('rc', '?')}: {why}")
    lines = [line for line in text.splitlines() if line.startswith("{")]
    try:
        if lines:
            measured = json.loads(lines[-1])
            return dict(facts, tool="gloo", ranks=ranks, bytes=measured["bytes"], busbw_gbps=measured["busbw_gbps"],
                        wrong=measured.get("wrong", 0))  # fmt: skip
        parsed = collective.parse_allreduce_perf(text)
    except (ValueError, KeyError, collective.CollectiveParseError) as exc:
        return dict(facts, error=f"the all-reduce's output could not be read: {exc}"[:300])
    return dict(facts, tool="all_reduce_perf", ranks=ranks, bytes=parsed["largest_size_bytes"],
                busbw_gbps=parsed["largest_busbw_gbps"], wrong=parsed["wrong"] or 0)  # fmt: skip


def _run_across(runs: list[Mapping[str, Any]], nodes: list[str]) -> dict[str, Any] | None:
    """The run across all ``nodes`` among ``runs`` (the others are pairs), as a copy."""
    return next((dict(r) for r in runs if list(r["nodes"]) == list(nodes)), None)


def fleet_missed(runs: list[Mapping[str, Any]], nodes: list[str], min_busbw_gbps: float) -> bool:
    """Whether the all-reduce across all ``nodes`` (among ``runs``) failed or missed ``min_busbw_gbps``: then each
    pair is tested."""
    fleet = _run_across(runs, nodes)
    if fleet is None or fleet.get("skipped"):
        return False
    return bool(fleet.get("error") or fleet.get("wrong")) or float(fleet["busbw_gbps"]) < float(min_busbw_gbps)


def fleet_collective_facts(runs: list[Mapping[str, Any]], nodes: list[str], min_busbw_gbps: float) -> dict:
    """The runs of roles/health_collective across nodes as the facts trainops.health judges: the run across all
    ``nodes``, the threshold, and each pair's run under ``pairs`` when the pairs were tested."""
    fleet = _run_across(runs, nodes) or {"nodes": list(nodes), "error": "no all-reduce across the nodes ran"}
    fleet["min_busbw_gbps"] = float(min_busbw_gbps)
    pairs = [dict(r) for r in runs if len(r["nodes"]) == 2 and list(r["nodes"]) != list(nodes)]
    if pairs:
        fleet["pairs"] = sorted(pairs, key=lambda r: [nodes.index(n) for n in r["nodes"]])
    return fleet


def chosen_left_out(incident_left_out: Mapping[str, str], nodes: list[str], options: Mapping[str, Any]) -> dict:
    """The nodes a new run leaves out before any node is reached: the incident record's (unless -e use_nodes names
    them) and what -e exclude_nodes and -e use_nodes leave out; a name not in the inventory is refused."""
    use, exclude = options.get("use_nodes") or [], options.get("exclude_nodes") or []
    try:
        chosen = node_choice.chosen_out(nodes, exclude, use)
    except ValueError as exc:
        raise AnsibleFilterError(f"-e exclude_nodes / -e use_nodes: {exc}") from None
    out = {node: why for node, why in incident_left_out.items() if node not in use}
    out.update(chosen)
    return out


def _flag(hostvars: Mapping[str, Any], node: str, name: str) -> bool:
    """A node's boolean inventory field (master, spare) as the schema converts it (the inputs check refused a bad
    one before any of this)."""
    return bool(convert(name, hostvars[node].get(name, False), f"inventory {node}"))


def _hosts(nodes: list[str], hostvars: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The inventory's nodes as trainops.node_choice reads them: name, master, spare, slots."""
    return [
        {"name": n, "master": _flag(hostvars, n, "master"), "spare": _flag(hostvars, n, "spare"),
         "slots": convert("slots", hostvars[n].get("slots", 8), f"inventory {n}")}
        for n in nodes
    ]  # fmt: skip


def plan_nodes(
    left_out: Mapping[str, str], nodes: list[str], hostvars: Mapping[str, Any], options: Mapping[str, Any]
) -> dict[str, Any]:
    """The nodes a run plans on (trainops.node_choice.choose: plan.yml's and train.yml's one choice), in rank
    order (``nodes``: the inventory's, ``left_out``: those that get no rank): the regular nodes, with a spare
    (``spare: true``) in the place of each one left out; ``in_order`` when the order must be kept (a spare stands
    in), and a line per spare that does. With -e use_nodes, the nodes it names are the regular ones."""
    try:
        return node_choice.choose(_hosts(nodes, hostvars), left_out, options.get("use_nodes") or [])
    except ValueError as exc:
        raise AnsibleFilterError(f"{exc}. Nothing was started.") from None


def spares_last(nodes: list[str], hostvars: Mapping[str, Any]) -> list[str]:
    """The inventory's nodes with its spares last (trainops.node_choice.spares_last)."""
    return node_choice.spares_last(_hosts(nodes, hostvars))


def spares(nodes: list[str], hostvars: Mapping[str, Any]) -> list[str]:
    """The inventory's spares (``spare: true``), in its order."""
    return [n for n in nodes if _flag(hostvars, n, "spare")]


def replan_nodes(
    plan_nodes_: list[str],
    lost: Mapping[str, str],
    nodes: list[str],
    hostvars: Mapping[str, Any],
    left_out: Mapping[str, str],
) -> list[str]:
    """An elastic re-plan's nodes, in the last plan's rank order: each lost node's place taken by a spare that is
    not in the plan, not left out and answered the ping after the failure (its ``train_reach``), else dropped."""
    free = [
        n for n in nodes
        if _flag(hostvars, n, "spare") and n not in plan_nodes_ and n not in left_out
        and not (hostvars[n].get("train_reach") or {}).get("unreachable")
    ]  # fmt: skip
    slots = {h["name"]: h["slots"] for h in _hosts(nodes, hostvars)}
    chosen, _ = node_choice.plan_nodes(plan_nodes_, free, lost, slots)
    return chosen


class FilterModule:
    """mtt-train-ops filters: the health check's facts, the nodes chosen for a run."""

    def filters(self) -> dict[str, Any]:
        return {
            "trainops_health_facts": health_facts,
            "trainops_health_full_records": full_records,
            "trainops_burn_in_facts": burn_in_facts,
            "trainops_collective_run_facts": collective_run_facts,
            "trainops_fleet_missed": fleet_missed,
            "trainops_fleet_collective_facts": fleet_collective_facts,
            "trainops_pair_rounds": health.pair_rounds,
            "trainops_chosen_left_out": chosen_left_out,
            "trainops_plan_nodes": plan_nodes,
            "trainops_replan_nodes": replan_nodes,
            "trainops_spares": spares,
            "trainops_spares_last": spares_last,
        }
