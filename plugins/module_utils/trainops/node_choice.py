"""Which nodes a run plans on, in rank order: the inventory's nodes less those left out (the incident record's,
the health check's sick ones, ``-e exclude_nodes``, those ``-e use_nodes`` does not name), with a healthy spare
(an inventory host with ``spare: true``) in the place of each regular node left out, so that it takes that node's
rank and the world size, the layout and the global batch stay as they were. Without a spare for it, a node left
out is simply dropped, and the planner makes the run on fewer nodes (as an elastic re-plan does).

Spares are provisioned and health-checked with the others but get no rank until they stand in for a node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def chosen_out(nodes: Sequence[str], exclude: Sequence[str], use: Sequence[str]) -> dict[str, str]:
    """The nodes ``-e use_nodes`` and ``-e exclude_nodes`` leave out (names not in the inventory are refused)."""
    unknown = sorted(n for n in set(exclude) | set(use) if n not in nodes)
    if unknown:
        raise ValueError(f"no such node in the inventory: {', '.join(unknown)} (the nodes: {', '.join(nodes)})")
    out = {n: f"{n}: left out by -e exclude_nodes" for n in nodes if n in exclude}
    if use:
        out.update({n: f"{n}: left out, not in -e use_nodes" for n in nodes if n not in use and n not in out})
    return out


def rank_order(hosts: Sequence[Mapping[str, Any]]) -> list[str]:
    """Host names in rank order: the one with ``master: true`` first, then the inventory's order."""
    masters = [h["name"] for h in hosts if h.get("master") is True]
    return masters + [h["name"] for h in hosts if h["name"] not in masters]


def plan_nodes(
    order: Sequence[str], spares: Sequence[str], left_out: Mapping[str, str] | Sequence[str]
) -> tuple[list[str], list[str]]:
    """The nodes to plan on, in rank order, and one line per spare that stands in.

    ``order``: the regular nodes (or the last attempt's plan) in rank order; ``spares``: the spare hosts, in the
    inventory's order; ``left_out``: the nodes that get no rank (a spare in it is not used)."""
    free = [s for s in spares if s not in left_out and s not in order]
    chosen, lines = [], []
    for rank, node in enumerate(order):
        if node not in left_out:
            chosen.append(node)
        elif free:
            spare = free.pop(0)
            chosen.append(spare)
            lines.append(
                f"spare        {spare} takes the place of {node} (node rank {rank}): the layout stays as planned"
            )
    return chosen, lines
