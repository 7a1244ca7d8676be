"""The cluster as the planner sees it: ordered nodes, their cards, the master.

Built from inventory data (a list of host mappings, in ``nodes`` group order).
The master is the first node unless exactly one sets ``master: true``; node
ranks follow inventory order with the master moved to rank 0.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import PlanError
from .options import OptionError, convert

#: Where a card's peak for a precision is unknown, the cost model ranks layouts as if the card had an H100's dense
#: peaks (stated in the recommendation table; a test holds them to backends/cuda.yml's H100). The ranking weighs
#: compute against communication, so it needs a rate; its absolute tokens/s are then not that card's.
REFERENCE_CARD = "H100"
REFERENCE_PEAK_TFLOPS = {"bf16": 989, "fp8": 1979, "fp32": 67}
#: All-reduce bus bandwidth inside one node of a card no profile knows (set with accelerator_memory_gib).
DEFAULT_INTRA_BUSBW_GBPS = 5.0
#: Per-card share of the inter-node network (GB/s), e.g. one 200 Gb/s NIC per card.
DEFAULT_INTER_BUSBW_GBPS = 25.0


@dataclass(frozen=True)
class Node:
    """One host of the ``nodes`` group."""

    name: str
    addr: str
    slots: int
    node_rank: int


@dataclass(frozen=True)
class Cluster:
    """Nodes in rank order (master first) and the facts of their cards."""

    nodes: tuple[Node, ...]
    accelerator: str
    card: str
    memory_gib: float
    #: Dense peak TFLOP/s per precision (``bf16``, ``fp8``); None where unknown.
    peak_tflops: Mapping[str, float | None]
    intra_busbw_gbps: float
    inter_busbw_gbps: float
    #: True when ``-e accelerator_peak_tflops`` set the peak.
    peak_given: bool = False
    #: False when the card's profile says it has no FP8 (``fp8: false``); True where it has or does not say.
    fp8: bool = True
    #: The backend profile's file, for messages (``backends/musa.yml``).
    profile: str = ""

    @property
    def master(self) -> Node:
        return self.nodes[0]

    def peak(self, precision: str) -> float | None:
        """The card's dense peak for ``precision``, or None when no public source states it."""
        return self.peak_tflops.get(precision)

    def peak_source(self, precision: str) -> str:
        if self.peak_given:
            return f"{self.peak(precision):g} TFLOP/s set by -e accelerator_peak_tflops"
        if self.peak(precision) is None:
            return f"unknown peak for {self.card} {precision} (set -e accelerator_peak_tflops=...)"
        return f"dense {precision.upper()} peak of the {self.card}, {self.peak(precision):g} TFLOP/s"

    def cost_model_tflops(self, precision: str) -> tuple[float, str | None]:
        """The rate the cost model ranks with, and why it is not this card's own when it is not."""
        own = self.peak(precision)
        if own:
            return own, None
        reference = REFERENCE_PEAK_TFLOPS[precision]
        return float(reference), (
            f"ranked as if each card had the {REFERENCE_CARD}'s dense {precision.upper()} peak ({reference} TFLOP/s): "
            f"{self.card} has no stated {precision} peak; tokens/s are relative (set -e accelerator_peak_tflops)"
        )

    @property
    def world_size(self) -> int:
        return sum(n.slots for n in self.nodes)

    @property
    def slots_per_node(self) -> int:
        """The smallest node's card count: the size a group can span inside one node."""
        return min(n.slots for n in self.nodes)


#: An inventory host name becomes a directory name (logs/<node>, hang/<node>) and a label in every script:
#: letters, digits, '.', '_' and '-', starting with a letter or digit.
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_HOSTNAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$"
)


def name_problem(name: str) -> str | None:
    """Why an inventory host name cannot be a node's name, or None."""
    if _SAFE_NAME.match(name) and name not in (".", ".."):
        return None
    return (
        f"node {name!r}: an inventory host name becomes a directory name and a label on every node; use letters, "
        "digits, '.', '_' and '-' (at most 63, starting with a letter or digit), and keep the address in ansible_host"
    )


def address_problem(name: str, key: str, addr: str) -> str | None:
    """Why ``addr`` is neither an IP address nor a host name, or None (names are not resolved here)."""
    try:
        ipaddress.ip_address(addr)
        return None
    except ValueError:
        pass
    if _HOSTNAME.match(addr) and not re.fullmatch(r"[\d.]+", addr):  # dotted digits must be an IP address
        return None
    return f"node {name}: {key} {addr!r} is neither an IP address nor a valid host name"


def node_address(host: Mapping[str, Any], name: str) -> str:
    """The address the nodes reach node ``name`` at: its ``node_addr``, else its ``ansible_host``, else its name."""
    return str(host.get("node_addr") or host.get("ansible_host") or name)


def cluster_from_hosts(
    hosts: Sequence[Mapping[str, Any]],
    backends: Mapping[str, Mapping[str, Any]],
    accelerator_memory_gib: float | None = None,
    accelerator_peak_tflops: float | None = None,
    inter_busbw_gbps: float | None = None,
) -> Cluster:
    """Build the cluster from inventory hosts (``name``, ``ansible_host``, ``slots``, ...) and the backend profiles
    by accelerator (``backends/<accelerator>.yml``: each names its cards' facts and its default card).

    Every problem is collected and raised together as :class:`PlanError`.
    """
    problems: list[str] = []
    if not hosts:
        raise PlanError(["the inventory group 'nodes' is empty; add at least one host"])
    parsed = []
    for host in hosts:
        name = str(host.get("name") or host.get("inventory_hostname") or "?")
        addr = node_address(host, name)
        if problem := name_problem(name):
            problems.append(problem)
        for key in ("ansible_host", "node_addr"):
            if key in host and (problem := address_problem(name, key, str(host[key]))):
                problems.append(problem)
        try:
            slots = convert("slots", host.get("slots", 8), f"node {name}")
        except OptionError as exc:
            problems.append(str(exc))
            slots = 1
        accel = host.get("accelerator", "musa")
        if accel not in backends:
            problems.append(
                f"node {name}: accelerator {accel!r} is unknown; use one of {', '.join(sorted(backends))} "
                "(the profiles in backends/)"
            )
        try:
            master = convert("master", host.get("master", False), f"node {name}")
        except OptionError as exc:
            problems.append(str(exc))
            master = False
        parsed.append((name, str(addr), slots, accel, master is True, host.get("accelerator_card")))

    masters = [p[0] for p in parsed if p[4]]
    if len(masters) > 1:
        problems.append(f"more than one node sets master: true ({', '.join(masters)}); keep one")
    seen: dict[str, str] = {}
    for name, addr, *_ in parsed:
        if addr in seen:
            problems.append(f"nodes {seen[addr]} and {name} share the address {addr}")
        seen.setdefault(addr, name)
    accels = sorted({p[3] for p in parsed})
    if len(accels) > 1:
        problems.append(f"nodes mix accelerators {accels}; one job runs on one kind")
    profile = backends.get(parsed[0][3]) or {}
    known = profile.get("cards") or {}
    cards = sorted({str(p[5] or profile.get("default_card", "")) for p in parsed})
    if len(cards) > 1:
        problems.append(f"nodes mix cards {cards}; one job runs on one kind")
    card = cards[0] if cards else ""
    if profile and card not in known and accelerator_memory_gib is None:
        problems.append(_unknown_card_text(card, profile, backends))
    if problems:
        raise PlanError(problems)

    if masters:
        parsed.sort(key=lambda p: not p[4])  # stable: the master first, others keep order
    nodes = tuple(Node(name=p[0], addr=p[1], slots=p[2], node_rank=i) for i, p in enumerate(parsed))
    facts = known.get(card) or {"memory_gib": accelerator_memory_gib, "intra_busbw_gbps": DEFAULT_INTRA_BUSBW_GBPS}
    peaks = dict(facts.get("peak_tflops") or dict.fromkeys(REFERENCE_PEAK_TFLOPS))
    if accelerator_peak_tflops:  # the site's figure for the run's precision (a plan has one)
        peaks = dict.fromkeys(peaks, float(accelerator_peak_tflops))
    return Cluster(
        nodes=nodes,
        accelerator=parsed[0][3],
        card=card,
        memory_gib=float(accelerator_memory_gib or facts["memory_gib"]),
        peak_tflops=peaks,
        peak_given=bool(accelerator_peak_tflops),
        fp8=facts.get("fp8", True) is not False,
        profile=f"backends/{parsed[0][3]}.yml",
        intra_busbw_gbps=float(facts["intra_busbw_gbps"]),
        inter_busbw_gbps=float(inter_busbw_gbps or DEFAULT_INTER_BUSBW_GBPS),
    )


def _unknown_card_text(card: str, profile: Mapping[str, Any], backends: Mapping[str, Mapping[str, Any]]) -> str:
    """A card the accelerator's profile does not list: the one meant (another spelling, or another accelerator's
    card), else how to plan on it anyway."""
    known = profile.get("cards") or {}
    name = profile.get("name")
    same = [c for c in known if c.lower() == card.lower()]
    if same:
        return f"accelerator_card={card!r} is not a card of the {name} profile; did you mean {same[0]}?"
    other = [a for a, p in backends.items() if a != name and card.lower() in {c.lower() for c in p.get("cards") or {}}]
    if other:
        return (
            f"accelerator_card={card!r} is a card of the {other[0]} profile, not of {name} (the inventory's "
            f"accelerator): give accelerator={other[0]}, or a {name} card ({', '.join(known)})"
        )
    return (
        f"card {card!r} has no known memory size; set accelerator_memory_gib (the {name} profile's cards: "
        f"{', '.join(known)})"
    )


def uniform_cluster(
    num_nodes: int, slots: int, backends: Mapping[str, Mapping[str, Any]], accelerator: str = "musa", **kwargs: Any
) -> Cluster:
    """A cluster of ``num_nodes`` identical nodes (benchmarks, tests, what-if planning)."""
    hosts = [
        {"name": f"node{i + 1}", "ansible_host": f"node{i + 1}", "slots": slots, "accelerator": accelerator}
        for i in range(num_nodes)
    ]
    return cluster_from_hosts(hosts, backends, **kwargs)


def node_ranks(plan: Mapping[str, Any]) -> dict[int, tuple[str, int]]:
    """Global rank -> (node, local rank), from the plan's nodes in rank order."""
    out, first = {}, 0
    for node in plan["nodes"]:
        for local in range(node["slots"]):
            out[first + local] = (node["name"], local)
        first += node["slots"]
    return out


def ranks_of(plan: Mapping[str, Any], node: str) -> list[int]:
    """The global ranks that run on ``node`` (none for a node not in the plan)."""
    return [rank for rank, (name, _) in node_ranks(plan).items() if name == node]
