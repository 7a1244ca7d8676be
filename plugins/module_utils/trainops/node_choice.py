"""Which nodes a run plans on, in rank order: one choice for plan.yml, train.yml (before the launch, after the
health check, at an elastic re-plan) and the input check that judges them first.

A run plans on the inventory's regular nodes (those without ``spare: true``) less those left out (the incident
record's, the health check's sick ones, ``-e exclude_nodes``, those ``-e use_nodes`` does not name), with a healthy
spare in the place of each regular node left out, so that it takes that node's rank. A spare gets no rank in any
plan until it takes such a place (``-e use_nodes`` may name one: then the user chose it). A spare with as many
slots as the node takes its place exactly: the world size, the layout and the global batch stay as they were. One
with other slots is taken only when no exact one is free, and its line says how the world size changes (the
re-plans keep the global batch, and refuse when the new data-parallel size cannot hold it). Without a spare for
it, a node left out is simply dropped, and the planner makes the run on fewer nodes (as an elastic re-plan does).

A master cannot be a spare: the master has node rank 0, a spare none (:func:`problems`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: Where spares are documented (named in the messages).
DOCS = "docs/health.md, Spares"


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


def spares_last(hosts: Sequence[Mapping[str, Any]]) -> list[str]:
    """Host names with the spares after the others, each group in the inventory's order: the order of the
    cluster every playbook shares (trainops_cluster_facts), so that its master (the ``master: true`` host, else
    the first) is the node train.yml makes the master, never a spare listed first."""
    return [h["name"] for h in hosts if h.get("spare") is not True] + [
        h["name"] for h in hosts if h.get("spare") is True
    ]


def problems(hosts: Sequence[Mapping[str, Any]], plans: bool = False, use: Sequence[str] = ()) -> list[str]:
    """What the inventory's spares contradict, each naming the node and the fix. ``hosts``: every node in the
    inventory's order, each with ``name`` and its converted ``master`` and ``spare``; ``plans``: the playbook
    plans a run (plan.yml, train.yml), which needs a node that is not a spare (or ``use``, -e use_nodes)."""
    out = [
        f"inventory {h['name']}: master: true and spare: true: the master has node rank 0 and a spare has no rank "
        "until it takes the place of a node left out, so a node cannot be both; drop spare: true on it, or set "
        f"master: true on a node that is not a spare ({DOCS})"
        for h in hosts
        if h.get("master") is True and h.get("spare") is True
    ]
    if plans and hosts and not use and all(h.get("spare") is True for h in hosts):
        out.append(all_spares_text([h["name"] for h in hosts]))
    return out


def all_spares_text(spares: Sequence[str]) -> str:
    return (
        f"inventory: every node is a spare (spare: true on {', '.join(spares)}): a spare gets no rank until it takes "
        "the place of a node left out, so there is no node to plan on; drop spare: true on the nodes to train on "
        f"({DOCS})"
    )


def choose(hosts: Sequence[Mapping[str, Any]], left_out: Mapping[str, str], use: Sequence[str] = ()) -> dict[str, Any]:
    """The nodes a run plans on, in rank order (``hosts``: every node in the inventory's order, each with ``name``,
    ``master``, ``spare`` and ``slots``; ``left_out``: node -> why it gets no rank; ``use``: -e use_nodes, whose
    nodes are then the regular ones and no spare stands in). Returns ``nodes``, ``in_order`` (the order must be
    kept: a spare stands in) and ``lines``, one per spare that stands in. Raises ValueError, saying why, when
    there is nothing to plan on."""
    if use:
        regular, spares = [h for h in hosts if h["name"] in use], []
    else:
        regular = [h for h in hosts if h.get("spare") is not True]
        spares = [h["name"] for h in hosts if h.get("spare") is True]
    if not regular:
        raise ValueError(all_spares_text(spares))
    slots = {h["name"]: h.get("slots") for h in hosts}
    chosen, lines = plan_nodes(rank_order(regular), spares, left_out, slots)
    if not chosen:
        why = "".join(f"\n- {left_out[h['name']]}" for h in regular if h["name"] in left_out)
        unused = [s for s in spares if s in left_out]
        spare = (
            "\nthe spares cannot stand in:" + "".join(f"\n- {left_out[s]}" for s in unused)
            if unused
            else ("" if spares else "\nthe inventory has no spare (spare: true) to stand in")
        )
        names = ",".join(h["name"] for h in regular)
        record = any("left out by -e" not in left_out[h["name"]] for h in regular if h["name"] in left_out)
        fix = (
            f"\nRepair and clear a node (the commands above), or for this run only give -e use_nodes={names} (over "
            "the incident record and the health check)"
            if record
            else ""
        )
        raise ValueError(f"every node is left out, nothing to plan on:{why}{spare}{fix}")
    return {"nodes": chosen, "in_order": bool(lines), "lines": lines}


def plan_nodes(
    order: Sequence[str],
    spares: Sequence[str],
    left_out: Mapping[str, str] | Sequence[str],
    slots: Mapping[str, Any] | None = None,
) -> tuple[list[str], list[str]]:
    """The nodes to plan on, in rank order, and one line per spare that stands in.

    ``order``: the regular nodes (or the last attempt's plan) in rank order; ``spares``: the spare hosts, in the
    inventory's order; ``left_out``: the nodes that get no rank (a spare in it is not used); ``slots``: node ->
    its slots (unknown: every spare takes a place exactly). A node left out takes the first free spare with its
    slots, else the first free one."""
    slots = slots or {}
    free = [s for s in spares if s not in left_out and s not in order]
    before = sum(_slots(slots, n) or 0 for n in order)
    chosen, lines, taken = [], [], []
    for rank, node in enumerate(order):
        if node not in left_out:
            chosen.append(node)
            continue
        if not free:
            continue
        spare = next((s for s in free if _slots(slots, s) == _slots(slots, node)), free[0])
        free.remove(spare)
        chosen.append(spare)
        taken.append((rank, node, spare))
    after = sum(_slots(slots, n) or 0 for n in chosen)
    for rank, node, spare in taken:
        mine, theirs = _slots(slots, spare), _slots(slots, node)
        line = f"spare        {spare} takes the place of {node} (node rank {rank})"
        if mine is not None and theirs is not None and mine != theirs:
            line += f" with {mine} slot(s) for its {theirs}"
        if before == after:
            lines.append(f"{line}: the layout stays as planned")
        else:
            lines.append(
                f"{line}: the world size goes from {before} to {after} ranks, so the layout is not the one planned "
                f"for {before}: the plan below gives the data-parallel size and the global batch on {after}"
            )
    return chosen, lines


def _slots(slots: Mapping[str, Any], node: str) -> int | None:
    value = slots.get(node)
    try:
        return None if value is None or isinstance(value, bool) else int(value)
    except (TypeError, ValueError):
        return None
