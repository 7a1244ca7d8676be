"""One verdict per node from the facts a health check gathered there: healthy, degraded, sick or unknown, with the
evidence of every check and the action it suggests.

The quick level's checks (:data:`QUICK_CHECKS`), each from facts that ``roles/health_check`` gathers in one pass per
node (the device tool's full query, the software stack, the free space where checkpoints go, the kernel log):

- ``cards``: the cards the device tool lists against the node's ``slots``, and each card's memory against the
  card's nominal memory (an IOMMU that hides part of it: an S4000 showing 32,768 of 49,152 MiB) and the fleet's;
- ``ecc``: uncorrected ECC errors since the driver loaded (sick), in the card's past (degraded), pages or rows
  waiting for a reset to be retired or remapped (sick), a failed remap (sick), retired pages (degraded);
- ``thermal``: a card at its slowdown temperature, or held back by a hardware or thermal slowdown (degraded);
- ``stack``: driver, CUDA/MUSA, torch, torch_musa, NCCL, the Megatron-LM tree and the container's image, the same
  on every node: a node that differs from the others' common value is named with both values (sick);
- ``disk``: the free space where checkpoints go against the plan's checkpoint size: under one checkpoint (sick),
  under two (degraded);
- ``kernel``: the kernel log's device errors since the node's last check (NVIDIA's Xid messages, the ones its Xid
  catalogue documents); the testbed's nodes may not read it, and the check then says so (skipped).

The full level adds (:data:`FULL_CHECKS`):

- ``burn_in``: every card's matrix-multiply TFLOP/s in the run's precision (``roles/health_burn_in``), against the
  other nodes' median card and its own node's: a card under :data:`PEER_SICK` of the other nodes' median is
  sick (a rank there would hold every other back), under :data:`PEER_DEGRADED` degraded; a card that failed is
  sick;
- ``node_collective``: the bus bandwidth of an all-reduce among the node's own cards alone
  (``roles/health_collective`` on the node alone: all_reduce_perf -g, gloo on the cpu backend), against the other nodes'
  median, with the same shares; wrong elements are sick;
- ``fleet_collective``: with three checked nodes or more, an all-reduce across all of them at once, against
  ``health_min_busbw_gbps``. When it misses that threshold, or fails, every pair of nodes is tested
  (:func:`pair_rounds`: rounds of disjoint pairs, each round's pairs at the same time) and :func:`fleet_checks`
  names the node every one of whose pairs is slow (under the shares above of the median node's best pair), or the
  pair that is slow while each of its nodes is fast with another. Two nodes cannot tell which one is slow.

A full check's results stand for ``health_max_age`` (:func:`carried_full`): the quick check that train.yml runs
before each launch carries them into its own verdicts, so a node the full level found slow stays out until a
newer full check finds it well.

A value the tool does not report is ``None`` and is never taken for a pass: its check says what it could not see.
Nothing here knows Ansible.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from . import device_query, records
from .gmi import GmiParseError, parse_cards

VERDICTS = ("healthy", "unknown", "degraded", "sick")  # in rising order of concern
POLICIES = ("off", "warn", "exclude")
LEVELS = ("quick", "full")
QUICK_CHECKS = ("cards", "ecc", "thermal", "stack", "disk", "kernel")
FULL_CHECKS = ("burn_in", "node_collective", "fleet_collective")
#: A card's burn-in TFLOP/s, or a node's own all-reduce bus bandwidth, under this share of the other nodes' median:
#: a rank there would hold the run back (sick); under the second, degraded.
PEER_SICK = 0.5
PEER_DEGRADED = 0.8
#: A card's memory under this share of its nominal memory (or of the fleet's median) is a card that cannot hold
#: what the plan puts on it.
MEMORY_RATIO = 0.9
#: Degrees (or degrees of T.Limit margin) before the slowdown point at which a card counts as hot.
TEMPERATURE_MARGIN_C = 5.0
#: NVIDIA Xid codes whose catalogue entry means a hardware fault of the card or its links (the node is sick); any
#: other Xid degrades it. 48 double-bit ECC, 63/64 row remapping (pending, failed), 74 NVLink, 79 fallen off the bus,
#: 92 high single-bit ECC rate, 94/95 contained/uncontained ECC, 119/120 GSP timeout/error.
SICK_XIDS = frozenset({48, 63, 64, 74, 79, 92, 94, 95, 119, 120})
_XID = re.compile(r"NVRM: Xid \((?P<pci>[^)]*)\): (?P<code>\d+)\b(?P<rest>.*)")
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)[,.](\d+)([+-]\d\d:?\d\d)?\s+(.*)$")
STACK_NAMES = {
    "driver": "driver",
    "cuda": "CUDA/MUSA runtime",
    "torch": "torch",
    "torch_musa": "torch_musa",
    "nccl": "NCCL/MCCL",
    "megatron": "Megatron-LM tree",
    "image": "container image",
}
RECORD_NAME = "health.json"
FULL_SUFFIX = "-full"  # a full check's record directory: <UTC time>-full


def _result(check: str, status: str, detail: str, action: str = "", field: str = "") -> dict[str, str]:
    out = {"check": check, "status": status, "detail": detail}
    if action:
        out["action"] = action
    if field:
        out["field"] = field
    return out


def _found(check: str, status: str, found: Sequence[tuple[str, str]], action: str) -> dict[str, str]:
    """A check's result from what it found: ``(detail, field)`` pairs, the first one's field named."""
    return _result(check, status, "; ".join(detail for detail, _ in found), action, found[0][1])


def device_facts(tool: str, output: str, rc: int) -> dict[str, Any]:
    """The cards from the device tool's output (its full query, else its table), or why there are none."""
    if not tool:
        return {"cards": None, "why": "no device tool (the cpu backend)"}
    if rc != 0 or not (output or "").strip():
        return {
            "cards": [],
            "error": f"{tool} failed (exit status {rc}): {(output or '').strip()[:300] or 'no output'}",
        }
    try:
        parsed = device_query.parse(output)
        form = "query"
    except GmiParseError:
        try:
            parsed = parse_cards(tool, output)  # the table of an mthreads-gmi without a query form
            form = "table"
        except GmiParseError as exc:
            return {"cards": [], "error": f"{tool}'s output does not parse: {exc}"}
    return {
        "cards": parsed["cards"],
        "driver": parsed.get("driver_version"),
        "cuda": parsed.get("cuda_version"),
        "form": form,
    }


def _cards_check(
    node: str, facts: Mapping[str, Any], device: Mapping[str, Any], nominal_mib: int | None, fleet_mib: float | None
) -> dict[str, str]:
    slots = int(facts.get("slots") or 0)
    tool = facts.get("device_tool") or ""
    if device.get("cards") is None:
        return _result("cards", "skipped", device.get("why", "no device tool"))
    if device.get("error"):
        return _result(
            "cards",
            "unknown",
            device["error"],
            f"run {tool} on {node} by hand; check the driver and the container's devices",
        )
    cards = device["cards"]
    if len(cards) < slots:
        seen = ", ".join(f"{c['index']} ({c['bus_id'] or 'no bus id'})" for c in cards) or "none"
        return _result(
            "cards",
            "sick",
            f"{tool} lists {len(cards)} card(s) ({seen}), slots={slots} asks for {slots}",
            f"check {node}'s cards and driver (a card lost from the bus needs a reset or a repair), or "
            f"lower slots for {node}",
            "card count",
        )
    small = []
    for card in cards[:slots] if slots else cards:
        total = card.get("memory_total_mib")
        if total is None:
            continue
        for reference, what in ((nominal_mib, "nominal"), (fleet_mib, "the fleet's median")):
            if reference and total < MEMORY_RATIO * reference:
                small.append(f"card {card['index']} shows {total} MiB of {int(reference)} MiB ({what})")
                break
    if small:
        return _result(
            "cards",
            "sick",
            "; ".join(small),
            f"a card showing part of its memory: check the IOMMU setting (iommu=pt) and the driver on {node}",
            "FB Memory Usage/Total",
        )
    memory = sorted({c.get("memory_total_mib") for c in cards if c.get("memory_total_mib")})
    return _result(
        "cards",
        "ok",
        f"{len(cards)} card(s) for {slots} slot(s)"
        + (f", {'/'.join(str(m) for m in memory)} MiB each" if memory else ""),
    )


def _ecc_check(node: str, device: Mapping[str, Any], slots: int) -> dict[str, str]:
    cards = device.get("cards")
    if cards is None:
        return _result("ecc", "skipped", device.get("why", "no device tool"))
    if device.get("error"):
        return _result("ecc", "unknown", "no card facts (see cards)")
    if device.get("form") == "table":
        return _result(
            "ecc",
            "unknown",
            "the tool printed only its table (no ECC counters): a driver without -q",
            "update the driver, or check the cards' ECC counters by hand",
        )
    sick, degraded, seen = [], [], False
    for card in cards:
        where = card.get("fields", {})
        label = f"card {card['index']} ({card['bus_id']})"
        if card.get("ecc_uncorrected_volatile") is not None or card.get("remap_pending") is not None:
            seen = True
        if card.get("ecc_uncorrected_volatile"):
            sick.append(
                (
                    f"{label}: {card['ecc_uncorrected_volatile']} uncorrected ECC error(s) since the driver loaded",
                    where.get("ecc_uncorrected_volatile", "ECC Errors/Volatile"),
                )
            )
        if card.get("retired_pending"):
            sick.append((f"{label}: a page waits to be retired", where.get("retired_pending", "Retired Pages")))
        if card.get("remap_pending"):
            sick.append(
                (f"{label}: a row remap waits for a reset", where.get("remap_pending", "Remapped Rows/Pending"))
            )
        if card.get("remap_failed"):
            sick.append((f"{label}: a row remap failed", where.get("remap_failed", "Remapped Rows")))
        if card.get("ecc_uncorrected_aggregate") and not card.get("ecc_uncorrected_volatile"):
            degraded.append(
                (
                    f"{label}: {card['ecc_uncorrected_aggregate']} uncorrected ECC error(s) in its past",
                    where.get("ecc_uncorrected_aggregate", "ECC Errors/Aggregate"),
                )
            )
        if card.get("retired_pages"):
            degraded.append((f"{label}: {card['retired_pages']} retired page(s)", where.get("retired_pages", "")))
    if sick:
        return _found(
            "ecc",
            "sick",
            sick,
            f"drain {node} and reset the card (nvidia-smi -r / a reboot); replace it if it comes back",
        )
    if degraded:
        return _found("ecc", "degraded", degraded, f"watch {node}'s counters; plan a repair if they grow")
    if not seen:
        return _result(
            "ecc",
            "unknown",
            "the tool's query has no ECC counters for these cards",
            "check the cards' ECC counters by hand",
        )
    return _result("ecc", "ok", "no uncorrected error, nothing pending")


def _thermal_check(node: str, device: Mapping[str, Any]) -> dict[str, str]:
    cards = device.get("cards")
    if cards is None:
        return _result("thermal", "skipped", device.get("why", "no device tool"))
    if device.get("error") or device.get("form") == "table":
        return _result("thermal", "unknown", "no temperatures or slowdown reasons in the tool's output")
    hot, temps = [], []
    for card in cards:
        label = f"card {card['index']} ({card['bus_id']})"
        where = card.get("fields", {})
        current, slowdown = card.get("temperature_c"), card.get("slowdown_temp_c")
        margin, slowdown_margin = card.get("tlimit_margin_c"), card.get("slowdown_tlimit_margin_c")
        if current is not None:
            temps.append(current)
        if card.get("throttle_active"):
            hot.append((f"{label}: {', '.join(card['throttle_active'])} active", where.get("throttle_active", "")))
        elif current is not None and slowdown is not None and current >= slowdown - TEMPERATURE_MARGIN_C:
            hot.append((f"{label}: {current:g} C, slowdown at {slowdown:g} C", where.get("temperature_c", "")))
        elif margin is not None and slowdown_margin is not None and margin <= slowdown_margin + TEMPERATURE_MARGIN_C:
            hot.append(
                (
                    f"{label}: {margin:g} C from its limit, slowdown at {slowdown_margin:g} C",
                    where.get("tlimit_margin_c", ""),
                )
            )
    if hot:
        return _found(
            "thermal", "degraded", hot, f"check {node}'s cooling and power (a slowed card makes every rank wait)"
        )
    if not temps:
        return _result("thermal", "unknown", "the tool's query has no temperatures")
    return _result("thermal", "ok", f"{min(temps):g}-{max(temps):g} C, no slowdown")


def _size(n: float) -> str:
    return f"{n / 1024**3:.2f} GiB" if n >= 1024**3 else f"{n / 1024**2:.2f} MiB"


def _disk_check(node: str, disk: Mapping[str, Any], checkpoint_bytes: float | None, min_free_gib: float) -> dict:
    if not disk or disk.get("error"):
        return _result(
            "disk",
            "unknown",
            (disk or {}).get("error", "no free-space figure"),
            f"check the checkpoint directory on {node}",
        )
    free, path = int(disk["free_bytes"]), disk.get("path", "")
    gib = 1024**3
    text = f"{_size(free)} free at {path}"
    if checkpoint_bytes:
        need = float(checkpoint_bytes)
        where = f"{text}, a checkpoint of this plan takes {_size(need)}"
        if free < need:
            return _result(
                "disk",
                "sick",
                f"{where}: not one checkpoint fits",
                f"free space at {path} on {node} (or point work_home elsewhere)",
                "free space",
            )
        if free < 2 * need:
            return _result(
                "disk",
                "degraded",
                f"{where}: fewer than two fit",
                f"free space at {path} on {node} before the second save",
                "free space",
            )
        return _result("disk", "ok", f"{where}")
    if min_free_gib and free < min_free_gib * gib:
        return _result(
            "disk",
            "sick",
            f"{text}, under health_min_free_gib={min_free_gib:g}",
            f"free space at {path} on {node}",
            "free space",
        )
    return _result("disk", "ok", text)


def _stamp(line: str) -> tuple[float | None, str]:
    match = _STAMP.match(line.strip())
    if not match:
        return None, line.strip()
    zone = match.group(3) or "+00:00"
    if len(zone) == 5:  # +0000
        zone = zone[:3] + ":" + zone[3:]
    when = dt.datetime.fromisoformat(f"{match.group(1)}.{match.group(2)[:6]}{zone}")
    return when.timestamp(), match.group(4)


def kernel_errors(lines: Iterable[str], since: float | None = None) -> list[dict[str, Any]]:
    """NVIDIA Xid messages in ``dmesg --time-format iso`` lines, after ``since`` (epoch seconds) when given."""
    found = []
    for line in lines:
        when, text = _stamp(line)
        if since is not None and when is not None and when <= since:
            continue
        match = _XID.search(text)
        if match:
            found.append(
                {"time": when, "pci": match.group("pci"), "xid": int(match.group("code")), "text": text.strip()[:300]}
            )
    return found


def _kernel_check(node: str, log: Mapping[str, Any], since: float | None) -> dict[str, str]:
    if not log or not log.get("readable"):
        return _result(
            "kernel", "skipped", f"the kernel log is not readable here ({(log or {}).get('error', 'no log')})"
        )
    errors = kernel_errors(log.get("lines") or [], since)
    if not errors:
        return _result("kernel", "ok", "no device error" + (" since the last check" if since else ""))
    sick = [e for e in errors if e["xid"] in SICK_XIDS]
    worst = (sick or errors)[0]
    codes = ", ".join(sorted({f"Xid {e['xid']} ({e['pci']})" for e in errors}))
    return _result(
        "kernel",
        "sick" if sick else "degraded",
        f"{len(errors)} device error(s): {codes}; first: {worst['text']}",
        f"look up the Xid in NVIDIA's catalogue; drain {node} and reset the card",
        "kernel log",
    )


def _stack_checks(
    facts_by_node: Mapping[str, Mapping[str, Any]], devices: Mapping[str, Mapping[str, Any]], order: Sequence[str]
) -> dict[str, dict[str, str]]:
    """Each node's software against the others': per item, the value most nodes have (the first node's on a tie) is
    the reference, and a node with another value is named with both."""
    stacks: dict[str, dict[str, str]] = {}
    for node in order:
        stack = dict(facts_by_node[node].get("stack") or {})
        device = devices[node]
        for key in ("driver", "cuda"):
            if device.get(key):
                stack[key] = str(device[key])
        stacks[node] = {k: str(v) for k, v in stack.items() if v not in (None, "")}
    out = {}
    for node in order:
        if facts_by_node[node].get("error"):
            continue
        differs = []
        for key, label in STACK_NAMES.items():
            values = {n: stacks[n].get(key) for n in order if not facts_by_node[n].get("error")}
            present = [v for v in values.values() if v is not None]
            if len(set(present)) <= 1 and (values[node] is not None or not present):
                continue
            counts = Counter(present)
            top = max(counts.values())
            reference = next(values[n] for n in order if values.get(n) is not None and counts[values[n]] == top)
            if values[node] != reference:
                others = sorted(n for n, v in values.items() if v == reference)
                differs.append(f"{label} {values[node] or 'missing'} here, {reference} on {', '.join(others)}")
        if differs:
            out[node] = _result(
                "stack",
                "sick",
                "; ".join(differs),
                f"make {node}'s software match the others (the same image, driver and tree), or re-provision it",
                "software stack",
            )
        else:
            shown = ", ".join(f"{k} {stacks[node][k]}" for k in ("torch", "driver") if k in stacks[node])
            out[node] = _result("stack", "ok", f"the same as every node ({shown or 'nothing to compare'})")
    return out


def _burn_in_check(node: str, burn: Mapping[str, Any], fleet: float | None) -> dict[str, str]:
    """Each card's burn-in TFLOP/s against ``fleet`` (the other nodes' median card: a slow node does not pull its
    own yardstick down) and the node's own median card."""
    if burn.get("error"):
        return _result("burn_in", "unknown", f"the burn-in did not run: {burn['error']}",
                       f"run the node package's burn_in.py (/opt/mtt-train-ops/current/trainops/node/) in {node}'s "
                       "training container by hand")  # fmt: skip
    cards = burn.get("cards") or []
    failed = [c for c in cards if c.get("error")]
    if failed:
        return _result("burn_in", "sick", "; ".join(f"card {c['card']}: {c['error']}" for c in failed),
                       f"inspect {node}'s cards (the device tool, the kernel log); a card that cannot multiply "
                       "matrices cannot train", "burn_in.cards[].error")  # fmt: skip
    speeds = {c["card"]: float(c["tflops"]) for c in cards if c.get("tflops") is not None}
    if not speeds:
        return _result("burn_in", "unknown", "no card's TFLOP/s to compare")
    own = statistics.median(speeds.values())
    worst_card = min(speeds, key=lambda k: speeds[k])
    worst = speeds[worst_card]
    shown = ", ".join(f"card {k} {v:.3g}" for k, v in sorted(speeds.items()))
    detail = f"{burn.get('precision', '')} TFLOP/s {shown}; the slowest (card {worst_card}) is "
    if fleet:
        detail += f"{worst / fleet:.2f}x the other nodes' median card ({fleet:.3g})"
        if own > 0 and worst / own < PEER_DEGRADED:
            detail += f" and {worst / own:.2f}x this node's ({own:.3g})"
    else:
        detail += f"{worst / own:.2f}x this node's median card ({own:.3g}; no other node to compare with)"
    ratio = worst / (fleet or own)
    if ratio >= PEER_DEGRADED and (own <= 0 or worst / own >= PEER_DEGRADED):
        return _result("burn_in", "ok", detail)
    status = "sick" if ratio < PEER_SICK else "degraded"
    action = (
        f"find what slows {node} (clocks and power: the device tool; a CPU quota or a busy host; the card's "
        "cooling), then run health.yml -e level=full again"
    )
    return _result("burn_in", status, detail, action, "burn_in.cards[].tflops")


def _node_collective_check(node: str, coll: Mapping[str, Any], others: float | None) -> dict[str, str]:
    """The node's own all-reduce bus bandwidth against the other nodes' median."""
    if coll.get("skipped"):
        return _result("node_collective", "skipped", coll["skipped"])
    if coll.get("error"):
        return _result("node_collective", "unknown", f"the all-reduce among {node}'s cards failed: {coll['error']}",
                       f"run the collective check by hand in {node}'s training container")  # fmt: skip
    if coll.get("wrong"):
        wrong = f"the all-reduce returned {coll['wrong']} wrong element(s)"
        action = f"do not train on {node}: check its cards, links and driver"
        return _result("node_collective", "sick", wrong, action, "node_collective.wrong")
    busbw = float(coll.get("busbw_gbps") or 0)
    detail = f"{coll.get('tool', 'all-reduce')} among {coll.get('ranks')} cards: {busbw:.3g} GB/s bus bandwidth"
    if not others:
        return _result("node_collective", "ok", detail + " (no other node to compare with)")
    ratio = busbw / others
    detail += f" at {_size(float(coll.get('bytes') or 0))}, {ratio:.2f}x the other nodes' median ({others:.3g})"
    if ratio >= PEER_DEGRADED:
        return _result("node_collective", "ok", detail)
    action = (
        f"check {node}'s links between its cards (mthreads-gmi topo -m / mtlink -s, nvidia-smi topo -m) and its "
        "host (a CPU quota, a busy host), then run health.yml -e level=full again"
    )
    return _result("node_collective", "sick" if ratio < PEER_SICK else "degraded", detail, action,
                   "node_collective.busbw_gbps")  # fmt: skip


def pair_rounds(nodes: Sequence[str]) -> list[list[list[str]]]:
    """Every pair of ``nodes`` once, in rounds of disjoint pairs (the circle method: ``n - 1`` rounds for an even
    ``n``, ``n`` for an odd one, a different node resting in each), so that each round's pairs run at once."""
    ring: list[str | None] = list(nodes) + ([None] if len(nodes) % 2 else [])
    size = len(ring)
    rank = {node: i for i, node in enumerate(nodes)}
    rounds = []
    for _ in range(size - 1):
        pairs = [(ring[i], ring[size - 1 - i]) for i in range(size // 2)]
        rounds.append([sorted((a, b), key=rank.__getitem__) for a, b in pairs if a is not None and b is not None])
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return [sorted(r, key=lambda pair: rank[pair[0]]) for r in rounds if r]


def _bus(run: Mapping[str, Any]) -> float:
    """A run's bus bandwidth; a run that failed or returned wrong elements counts as none."""
    if run.get("error") or run.get("wrong") or run.get("busbw_gbps") is None:
        return 0.0
    return float(run["busbw_gbps"])


def _pair_text(pair: Mapping[str, Any]) -> str:
    a, b = pair["nodes"]
    if pair.get("error"):
        return f"{a}+{b} failed ({pair['error'][:120]})"
    return f"{a}+{b} {_bus(pair):.3g} GB/s" + (f" ({pair['wrong']} wrong elements)" if pair.get("wrong") else "")


def fleet_checks(fleet: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """Each node's ``fleet_collective`` check from the all-reduce across the nodes (``fleet``: the nodes, the
    run's ``busbw_gbps`` or ``error``, ``min_busbw_gbps`` and, when it missed, ``pairs``: each pair's run).

    A node every one of whose pairs is slow (its best pair under :data:`PEER_SICK` of the median node's best: sick,
    under :data:`PEER_DEGRADED`: degraded) is named; a slow pair whose nodes are both fast with another node names
    the path between them (degraded); a miss that no pair explains, or that two nodes cannot place, is said."""
    nodes = list(fleet.get("nodes") or [])
    threshold = float(fleet.get("min_busbw_gbps") or 0)
    if fleet.get("skipped"):
        return {n: _result("fleet_collective", "skipped", fleet["skipped"]) for n in nodes}
    busbw = _bus(fleet)
    what = f"{fleet.get('tool', 'all-reduce')} across {len(nodes)} nodes ({fleet.get('ranks')} ranks)"
    if fleet.get("error"):
        head = f"{what} failed: {fleet['error'][:200]}"
    elif fleet.get("wrong"):
        head = f"{what} returned {fleet['wrong']} wrong element(s)"
    else:
        head = f"{what}: {busbw:.3g} GB/s bus bandwidth at {_size(float(fleet.get('bytes') or 0))}"
        if busbw >= threshold:
            limit = f"at or above health_min_busbw_gbps={threshold:g}" if threshold else "no threshold set"
            return {n: _result("fleet_collective", "ok", f"{head} ({limit})") for n in nodes}
        head += f", under health_min_busbw_gbps={threshold:g}"
    pairs = list(fleet.get("pairs") or [])
    if not pairs:
        why = "two nodes cannot tell which of them is slow" if len(nodes) == 2 else "no pair was tested"
        action = "compare the nodes' own checks (burn_in, node_collective); a third node lets the pairs name one"
        return {n: _result("fleet_collective", "degraded", f"{head}; {why}", action, "fleet_collective.busbw_gbps")
                for n in nodes}  # fmt: skip
    best = {n: max((_bus(p) for p in pairs if n in p["nodes"]), default=0.0) for n in nodes}
    reference = statistics.median(best.values())
    if reference <= 0:
        detail = f"{head}; every pair failed too: " + ", ".join(_pair_text(p) for p in pairs)
        action = "check the network every node shares (the switch, the fabric manager)"
        return {n: _result("fleet_collective", "unknown", detail, action) for n in nodes}
    named = {n: best[n] / reference for n in nodes if best[n] / reference < PEER_DEGRADED}
    slow_pairs = [p for p in pairs if _bus(p) < PEER_DEGRADED * reference and not set(p["nodes"]) & set(named)]
    explained = ", ".join(sorted(named) + ["+".join(p["nodes"]) for p in slow_pairs])
    out = {}
    for node in nodes:
        own = [p for p in pairs if node in p["nodes"]]
        shown = ", ".join(_pair_text(p) for p in own)
        slow = [p for p in slow_pairs if node in p["nodes"]]
        if node in named:
            ratio = named[node]
            detail = (f"{head}; every pair with {node} is slow: {shown}; its best is {ratio:.2f}x the median "
                      f"node's best pair ({reference:.3g})")  # fmt: skip
            action = (f"check {node}'s network: its links and ports (ibstat, ip -s link, ethtool), its queueing "
                      "(tc qdisc), the switch port; then run health.yml -e level=full again")  # fmt: skip
            out[node] = _result("fleet_collective", "sick" if ratio < PEER_SICK else "degraded", detail, action,
                                "fleet_collective.pairs[].busbw_gbps")  # fmt: skip
        elif slow:
            others = ", ".join("+".join(p["nodes"]) for p in slow)
            detail = (f"{head}; the pair {others} is slow ({', '.join(_pair_text(p) for p in slow)}, against "
                      f"the median node's best pair {reference:.3g}) while each node is fast with another")  # fmt: skip
            action = f"check the path between {others.replace('+', ' and ')} (their switch ports, the route between)"
            out[node] = _result("fleet_collective", "degraded", detail, action, "fleet_collective.pairs[].busbw_gbps")
        elif explained:
            out[node] = _result("fleet_collective", "ok", f"{head}; {explained} explains it; the pairs with {node}: "
                                f"{shown}")  # fmt: skip
        else:
            detail = f"{head}; no pair is slow ({shown}): the whole fleet misses it together"
            out[node] = _result("fleet_collective", "unknown", detail, "check the network every node shares, or the "
                                "threshold")  # fmt: skip
    return out


def judge(
    facts_by_node: Mapping[str, Mapping[str, Any]],
    expected: Mapping[str, Any] | None = None,
    last_checked: Mapping[str, float] | None = None,
    carried: Mapping[str, Sequence[Mapping[str, str]]] | None = None,
) -> dict[str, dict[str, Any]]:
    """Every node's verdict from the facts gathered on it (``{node: facts}``, in the inventory's order).

    ``expected``: ``card_memory_mib`` (the card's nominal memory), ``checkpoint_bytes`` (the plan's checkpoint),
    ``min_free_gib`` (without a plan). ``last_checked``: each node's previous check (epoch seconds), from which
    the kernel log is read. ``carried``: checks of an earlier full check that still stand (:func:`carried_full`),
    added to each node's own. A node with ``burn_in`` and ``node_collective`` facts (the full level) gets those
    checks."""
    expected = expected or {}
    carried = carried or {}
    last_checked = last_checked or {}
    order = list(facts_by_node)
    devices = {
        node: device_facts(
            f.get("device_tool") or "",
            (f.get("device_query") or {}).get("output", ""),
            int((f.get("device_query") or {}).get("rc", 0)),
        )
        if not f.get("error")
        else {"cards": [], "error": f["error"]}
        for node, f in facts_by_node.items()
    }
    memories = [
        c["memory_total_mib"] for d in devices.values() for c in d.get("cards") or [] if c.get("memory_total_mib")
    ]
    fleet_mib = statistics.median(memories) if memories else None
    speeds = {
        node: [float(c["tflops"]) for c in (f.get("burn_in") or {}).get("cards") or [] if c.get("tflops") is not None]
        for node, f in facts_by_node.items()
    }
    busbw = {
        node: float(f["node_collective"]["busbw_gbps"])
        for node, f in facts_by_node.items()
        if (f.get("node_collective") or {}).get("busbw_gbps") is not None
    }
    stacks = _stack_checks(facts_by_node, devices, order)
    fleet = next((f["fleet_collective"] for f in facts_by_node.values() if f.get("fleet_collective")), None)
    fleet_results = fleet_checks(fleet) if fleet else {}
    verdicts = {}
    for node in order:
        facts = facts_by_node[node]
        if facts.get("error"):
            checks = [_result("facts", "unknown", facts["error"], facts.get("action", f"run provision.yml on {node}"))]
        else:
            device = devices[node]
            checks = [
                _cards_check(node, facts, device, expected.get("card_memory_mib"), fleet_mib),
                _ecc_check(node, device, int(facts.get("slots") or 0)),
                _thermal_check(node, device),
                stacks[node],
                _disk_check(
                    node,
                    facts.get("disk") or {},
                    expected.get("checkpoint_bytes"),
                    float(expected.get("min_free_gib") or 0),
                ),
                _kernel_check(node, facts.get("kernel_log") or {}, last_checked.get(node)),
            ]
            if "burn_in" in facts:
                others = [t for n, cards in speeds.items() if n != node for t in cards]
                checks.append(_burn_in_check(node, facts["burn_in"], statistics.median(others) if others else None))
            if "node_collective" in facts:
                peers = [b for n, b in busbw.items() if n != node]
                median = statistics.median(peers) if peers else None
                checks.append(_node_collective_check(node, facts["node_collective"], median))
            if node in fleet_results:
                checks.append(fleet_results[node])
        verdicts[node] = verdict_of(node, checks + [dict(c) for c in carried.get(node, [])])
    return verdicts


def verdict_of(node: str, checks: Sequence[Mapping[str, str]]) -> dict[str, Any]:
    status_rank = {"ok": 0, "skipped": 0, "unknown": 1, "degraded": 2, "sick": 3}
    worst = max((status_rank[c["status"]] for c in checks), default=0)
    verdict = VERDICTS[worst]
    first = next((c for c in checks if status_rank[c["status"]] == worst and worst), None)
    return {
        "node": node,
        "verdict": verdict,
        "checks": list(checks),
        "reason": "" if first is None else f"{first['check']}: {first['detail']}",
        "action": "" if first is None else first.get("action", ""),
    }


def lines(verdicts: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One line per node: its verdict, what is wrong (or how many checks passed), and the suggested action."""
    width = max((len(n) for n in verdicts), default=4)
    out = []
    for node, v in verdicts.items():
        bad = [c for c in v["checks"] if c["status"] in ("sick", "degraded", "unknown")]
        if bad:
            text = "; ".join(
                f"{c['check']} {c['status']}: {c['detail']}" + (f" [{c['field']}]" if c.get("field") else "")
                for c in bad
            )
            text += f" -> {v['action']}" if v.get("action") else ""
        else:
            passed = [c["check"] for c in v["checks"] if c["status"] == "ok"]
            why: dict[str, list[str]] = {}
            for c in v["checks"]:
                if c["status"] == "skipped":
                    why.setdefault(c["detail"].split(" (")[0], []).append(c["check"])
            text = f"{len(passed)} checks pass ({', '.join(passed)})"
            if why:
                text += "; skipped: " + "; ".join(f"{', '.join(checks)} ({reason})" for reason, checks in why.items())
        out.append(f"{node:<{width}}  {v['verdict']:<8}  {text}")
    return out


def left_out(verdicts: Mapping[str, Mapping[str, Any]], policy: str) -> dict[str, str]:
    """The nodes a new attempt or run leaves out under ``policy``: with ``exclude`` (the default) every sick node;
    ``warn`` and ``off`` leave none out. Degraded and unknown nodes are only named."""
    if policy not in POLICIES:
        raise ValueError(f"health={policy!r} must be one of {', '.join(POLICIES)}")
    if policy != "exclude":
        return {}
    return {
        node: f"{node}: left out, its health check says sick ({v['reason']}); {v['action']}. "
        f"-e health=warn keeps it; after a repair the next check brings it back"
        for node, v in verdicts.items()
        if v["verdict"] == "sick"
    }


def record(
    health_dir: str, level: str, verdicts: Mapping[str, Any], facts_by_node: Mapping[str, Any], now: float, context: str
) -> str:
    """Write ``<health_dir>/<UTC timestamp>/health.json`` (``<UTC timestamp>-full/`` for the full level: a quick
    check finds the full ones by name); returns its path."""
    directory = os.path.join(health_dir, _stamp_name(now) + (FULL_SUFFIX if level == "full" else ""))
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, RECORD_NAME)
    content = {"time": now, "level": level, "context": context, "verdicts": verdicts, "facts": facts_by_node}
    records.write_json(path, content, indent=1, default=str)
    return path


def _stamp_name(when: float) -> str:
    """A record's directory name: its UTC time, which sorts as the time does."""
    return dt.datetime.fromtimestamp(when, dt.UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def _newest_first(health_dir: str, suffix: str = "", since: float | None = None, warnings: list[str] | None = None):
    """The health records under ``health_dir``, newest first (their directories are UTC timestamps; a damaged one
    is skipped, and named in ``warnings``), read one at a time; with ``suffix`` only the directories so named, with
    ``since`` none older (both chosen by name, before any file is read)."""
    try:
        names = sorted(os.listdir(health_dir), reverse=True)
    except FileNotFoundError:
        return
    oldest = _stamp_name(since) if since is not None else ""
    for name in names:
        if name < oldest:
            break
        if not name.endswith(suffix):
            continue
        path = os.path.join(health_dir, name, RECORD_NAME)
        fix = "it is skipped; move it away to silence this"
        try:
            data = records.read_json(path, "health record", fix)
        except records.RecordError as exc:
            data, problem = None, str(exc)
        else:
            problem = None if data is None else _record_problem(path, data, fix)
        if problem and warnings is not None:
            warnings.append(problem)
        elif data is not None and not problem:
            yield data


def _record_problem(path: str, data: Mapping[str, Any], fix: str) -> str | None:
    """What a health record read as JSON lacks (a number for its time, each node's verdict an object), or None."""
    verdicts, time = data.get("verdicts"), data.get("time")
    if isinstance(verdicts, dict) and all(isinstance(v, dict) for v in verdicts.values()):
        if isinstance(time, (int, float)) and not isinstance(time, bool):
            return None
    return records.printable(f"{path} has no time or no verdicts of the form health.yml writes; {fix}")


def last_checked(
    health_dir: str, nodes: Sequence[str] | None = None, warnings: list[str] | None = None
) -> dict[str, float]:
    """When each node was last checked (the kernel log is read from then on). With ``nodes``, the reading stops at
    the newest record that has each of them, however long the history."""
    out: dict[str, float] = {}
    for data in _newest_first(health_dir, warnings=warnings):
        for node in data["verdicts"]:
            out[node] = max(out.get(node, 0.0), float(data.get("time") or 0))
        if nodes is not None and all(n in out for n in nodes):
            break
    return out


def full_records(
    health_dir: str, nodes: Sequence[str], now: float, max_age_s: float, warnings: list[str] | None = None
) -> list[dict[str, Any]]:
    """The full checks younger than ``max_age_s`` under ``health_dir``, newest first, each ``{"time", "level",
    "verdicts": {node: {"checks": its full-level checks (FULL_CHECKS)}}}`` for ``nodes``, as :func:`carry` reads
    them: from the newest on, until each node has one (what train.yml hands the run's supervisor, whose check after
    a failure carries them). None when ``max_age_s`` is 0. A damaged record is skipped and named in ``warnings``."""
    found: list[dict[str, Any]] = []
    if max_age_s <= 0:
        return found
    seen: set[str] = set()
    for data in _newest_first(health_dir, FULL_SUFFIX, since=now - max_age_s, warnings=warnings):
        if data.get("level") != "full" or now - float(data.get("time") or 0) > max_age_s:
            continue
        verdicts = {
            node: {"checks": [c for c in data["verdicts"][node].get("checks") or [] if c.get("check") in FULL_CHECKS]}
            for node in nodes
            if node in data["verdicts"] and node not in seen
        }
        if verdicts:
            found.append({"time": float(data["time"]), "level": "full", "verdicts": verdicts})
            seen |= set(verdicts)
        if seen >= set(nodes):
            break
    return found


def carry(full: Sequence[Mapping[str, Any]], nodes: Sequence[str], now: float, max_age_s: float) -> dict[str, list]:
    """The full-level checks each node carries into a quick check: those of its newest full check in ``full``
    (:func:`full_records`, newest first) younger than ``max_age_s`` at ``now``, each detail saying where it comes
    from."""
    out: dict[str, list[dict]] = {}
    for data in full:
        age = now - float(data.get("time") or 0)
        if max_age_s <= 0 or age > max_age_s or data.get("level") != "full":
            continue
        stamp = dt.datetime.fromtimestamp(float(data["time"]), dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        for node in nodes:
            if node in out or node not in data["verdicts"]:
                continue
            checks = [c for c in data["verdicts"][node].get("checks") or [] if c.get("check") in FULL_CHECKS]
            out[node] = [
                dict(c, detail=f"{c['detail']} (the full check of {stamp}, {age / 3600:.1f} h ago)", carried=True)
                for c in checks
            ]
    return out


def carried_full(
    health_dir: str, nodes: Sequence[str], now: float, max_age_s: float, warnings: list[str] | None = None
) -> dict[str, list[dict]]:
    """The full-level checks (:data:`FULL_CHECKS`) of each node's newest full check younger than ``max_age_s``,
    each detail saying where it comes from: what a quick check carries into its verdicts. None when ``max_age_s``
    is 0. A damaged record is skipped and named in ``warnings``."""
    return carry(full_records(health_dir, nodes, now, max_age_s, warnings), nodes, now, max_age_s)


def incidents(verdicts: Mapping[str, Mapping[str, Any]], name: str, path: str, now: float) -> list[dict[str, Any]]:
    """Each sick node as an incident of the site's record (trainops.incidents): kind ``health``, the record as its
    evidence. ``name``: the record's name (``health/<time>``), which keys the incident. A check carried from an
    earlier full check is that check's incident, not a new one."""
    return [
        {"run": name, "attempt": 0, "node": node, "kind": "health", "rank": None, "cause": v["reason"],
         "time": round(now, 1), "evidence": path, "counts": True}
        for node, v in verdicts.items()
        if any(c["status"] == "sick" and not c.get("carried") for c in v["checks"])
    ]  # fmt: skip


#: What the quick health check says of the kernel log where it cannot read it: the run's supervisor, inside the
#: master's container, cannot see the node's (the host's) kernel log.
KERNEL_LOG_UNSEEN = (
    "the run's supervisor reads no host's kernel log (health.yml and train.yml's check before the launch do)"
)


def node_facts(
    reply: Mapping[str, Any],
    slots: Any,
    device_tool: str,
    image: str | None = None,
    kernel_log: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One node's facts for :func:`judge` from ``node_facts.py``'s reply in its training container (``stdout``: its
    JSON; ``stderr``/``msg`` when it failed), the container's image where the host was asked, and the kernel log's
    device errors (``{"readable": bool, "lines"|"error"}``; unseen when not given). A script that failed is the
    node's error."""
    try:
        facts = json.loads(reply.get("stdout") or "")
    except ValueError:
        why = (reply.get("stderr") or reply.get("msg") or "no output").strip()[-300:]
        return {"error": f"the facts could not be read in the training container: {why}",
                "action": "run python3 in the training container by hand to see why"}  # fmt: skip
    facts["stack"]["image"] = image
    facts["slots"] = int(slots)
    facts["device_tool"] = device_tool
    facts["kernel_log"] = dict(kernel_log) if kernel_log else {"readable": False, "error": KERNEL_LOG_UNSEEN}
    return facts
