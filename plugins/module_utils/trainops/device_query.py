"""The health facts of each card from the device tool's full query: ``nvidia-smi -q``, ``mthreads-gmi -q`` (both
indented ``Key : value`` text) and ``mthreads-gmi -q -j`` (the same tree as JSON).

:func:`query_tree` turns the text into the nested dictionary the JSON form already is; :func:`cards` reads, per
card, what a health check needs, each value ``None`` where this tool or driver does not report it:

``index, name, bus_id, memory_total_mib, ecc_uncorrected_volatile, ecc_uncorrected_aggregate, retired_pages,
retired_pending, remap_pending, remap_failed, temperature_c, slowdown_temp_c, throttle_active`` (a list of the
active hardware and thermal slowdown reasons), and ``fields``: where in the tool's output each value came from, so
that a verdict can name the field. The card metrics (:mod:`trainops.card_metrics`) read, from the same query,
``memory_used_mib, utilization_pct, power_draw_w, power_limit_w`` and ``clocks_mhz`` (``{graphics, sm, memory}``,
those reported).

Key spellings differ between drivers (``Clocks Throttle Reasons`` before NVIDIA 535, ``Clocks Event Reasons``
after; ``Double Bit`` sections before Ampere, ``DRAM Uncorrectable`` after): every spelling seen in a recorded
output is listed below, and nothing else is guessed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from .gmi import GmiParseError

_LINE = re.compile(r"^(\s*)(\S.*?)\s*$")
_GPU_KEY = re.compile(r"^GPU\s*\d*(?:\s+[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9a-fA-F])?$")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")

#: Sections whose counters are uncorrected (double-bit) errors, by their spellings.
_ECC_SECTIONS = ("ECC Errors",)
_UNCORRECTED_KEYS = re.compile(r"uncorrectable|double bit|\bdbe\b", re.I)
_THROTTLE_SECTIONS = ("Clocks Event Reasons", "Clocks Throttle Reasons", "Clocks Reasons")
#: The power sections, by their spellings (``GPU Power Readings`` since NVIDIA 535; mthreads-gmi's JSON: ``Power
#: Readings``), and the current clocks' entries.
_POWER_SECTIONS = ("GPU Power Readings", "Power Readings")
_CLOCKS = {"graphics": "Graphics", "sm": "SM", "memory": "Memory"}
#: Reasons that mean the card is held back by its hardware or its temperature (not by an idle state, an
#: application clock setting or the normal power cap under load).
_THROTTLE_REASONS = re.compile(r"^(HW Slowdown|HW Thermal Slowdown|HW Power Brake Slowdown|SW Thermal Slowdown)$", re.I)


def query_tree(text: str) -> dict[str, Any]:
    """The indented ``Key : value`` text of ``nvidia-smi -q`` or ``mthreads-gmi -q`` as a nested dictionary: a line
    without a value opens a section holding the lines indented under it. Repeated keys in one section get a
    ``#2`` suffix (nothing is lost)."""
    root: dict[str, Any] = {}
    stack: list[tuple[int, dict[str, Any]]] = [(-1, root)]
    for raw in text.splitlines():
        match = _LINE.match(raw.expandtabs(4))
        if not match or set(match.group(2)) <= {"="}:
            continue
        indent, body = len(match.group(1)), match.group(2)
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        key, _, value = body.partition(":")
        key, value = key.strip(), value.strip()
        if _GPU_KEY.match(body):  # "GPU 00000000:18:00.0": a card's section, its bus id holds colons
            key, value = body, ""
        if value:
            parent[_unique(parent, key)] = value
            continue
        section: dict[str, Any] = {}
        parent[_unique(parent, key)] = section
        stack.append((indent, section))
    return root


def _unique(parent: Mapping[str, Any], key: str) -> str:
    if key not in parent:
        return key
    n = 2
    while f"{key}#{n}" in parent:
        n += 1
    return f"{key}#{n}"


def load(text: str) -> dict[str, Any]:
    """The query output as a tree: JSON as it is, text by :func:`query_tree`."""
    if not isinstance(text, str) or not text.strip():
        raise GmiParseError("the device tool's query printed nothing; is the driver loaded and the tool on PATH?")
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            tree = json.loads(stripped)
        except ValueError as exc:
            raise GmiParseError(f"the device tool's JSON query does not parse: {exc}") from None
        if not isinstance(tree, dict):
            raise GmiParseError("the device tool's JSON query is not an object")
        return tree
    return query_tree(text)


def _gpu_sections(tree: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    gpus = tree.get("GPU")
    if isinstance(gpus, dict):
        gpus = [gpus]
    if isinstance(gpus, list):
        return [(f"GPU[{i}]", g) for i, g in enumerate(gpus) if isinstance(g, dict)]
    found = [
        (key, value) for key, value in tree.items() if _GPU_KEY.match(key.split("#")[0]) and isinstance(value, dict)
    ]
    if found:
        return found
    # some mthreads-gmi -q versions print the cards' keys flat, one block after each 'Product Name'
    blocks: list[dict[str, Any]] = []
    for key, value in tree.items():
        if key.split("#")[0] == "Product Name":
            blocks.append({})
        if blocks:
            blocks[-1][key.split("#")[0]] = value
    return [(f"card {i}", b) for i, b in enumerate(blocks)]


def _get(section: Mapping[str, Any], *names: str) -> tuple[Any, str | None]:
    for name in names:
        for key, value in section.items():
            if key.split("#")[0].strip().lower() == name.lower():
                return value, key
    return None, None


def _number(value: Any) -> float | None:
    match = _NUMBER.search(str(value)) if value is not None else None
    return float(match.group(0)) if match else None


def _yes(value: Any) -> bool | None:
    if value is None:
        return None
    text = str(value).strip().lower()
    if text in ("yes", "true", "1", "active"):
        return True
    if text in ("no", "false", "0", "not active", "none"):
        return False
    return None


def _walk(section: Mapping[str, Any], path: str):
    for key, value in section.items():
        where = f"{path}/{key}"
        if isinstance(value, dict):
            yield from _walk(value, where)
        else:
            yield where, key.split("#")[0].strip(), value


def _ecc(gpu: Mapping[str, Any], label: str, fields: dict[str, str]) -> tuple[int | None, int | None]:
    """Uncorrected ECC errors since the driver loaded (volatile) and over the card's life (aggregate)."""
    section, key = _get(gpu, *_ECC_SECTIONS)
    if not isinstance(section, dict):
        return None, None
    totals: dict[str, int | None] = {}
    for scope in ("Volatile", "Aggregate"):
        counters, scope_key = _get(section, scope)
        if not isinstance(counters, dict):
            totals[scope] = None
            continue
        count, seen, worst = 0, False, None
        for where, name, value in _walk(counters, f"{label}/{key}/{scope_key}"):
            number = _number(value)
            # pre-Ampere cards split double-bit errors by memory and give a Total: count only the Total there
            if number is None or not (_UNCORRECTED_KEYS.search(name) or "Double Bit" in where):
                continue
            if "Double Bit" in where and name.lower() != "total":
                continue
            seen = True
            count += int(number)
            if number and worst is None:
                worst = where
        totals[scope] = count if seen else None
        if worst:
            fields[f"ecc_uncorrected_{scope.lower()}"] = worst
    return totals["Volatile"], totals["Aggregate"]


def _card(label: str, gpu: Mapping[str, Any], position: int) -> dict[str, Any]:
    fields: dict[str, str] = {}
    name, _ = _get(gpu, "Product Name")
    index, _ = _get(gpu, "Index")  # nvidia-smi -q has none: its order is the index
    pci, _ = _get(gpu, "PCI")
    bus, _ = _get(pci, "Bus ID", "Bus Id") if isinstance(pci, dict) else (None, None)
    bus = bus or (label.split()[-1] if len(label.split()) == 2 and ":" in label else "")
    memory, _ = _get(gpu, "FB Memory Usage")
    total, _ = _get(memory, "Total") if isinstance(memory, dict) else (None, None)
    used, _ = _get(memory, "Used") if isinstance(memory, dict) else (None, None)
    utilization, _ = _get(gpu, "Utilization")
    busy, _ = _get(utilization, "Gpu") if isinstance(utilization, dict) else (None, None)
    power, _ = _get(gpu, *_POWER_SECTIONS)
    draw, _ = _get(power, "Power Draw") if isinstance(power, dict) else (None, None)
    limit, _ = _get(power, "Current Power Limit", "Power Limit") if isinstance(power, dict) else (None, None)
    clocks, _ = _get(gpu, "Clocks")
    clocks_mhz = {}
    for clock, key in _CLOCKS.items():
        value = _number(_get(clocks, key)[0]) if isinstance(clocks, dict) else None
        if value is not None:
            clocks_mhz[clock] = value
    volatile, aggregate = _ecc(gpu, label, fields)

    retired, retired_key = _get(gpu, "Retired Pages", "Page Retirement")
    retired_pages = retired_pending = None
    if isinstance(retired, dict):
        counts = [
            _number(v)
            for _, n, v in _walk(retired, "")
            if re.search(r"single bit|double bit|ecc|retired", n, re.I) and "pending" not in n.lower()
        ]
        counts = [c for c in counts if c is not None]
        retired_pages = int(sum(counts)) if counts else None
        pending, pending_key = _get(retired, "Pending Page Blacklist", "Pending Page Retirement", "Pending")
        retired_pending = _yes(pending)
        if pending_key:
            fields["retired_pending"] = f"{label}/{retired_key}/{pending_key}"
        fields["retired_pages"] = f"{label}/{retired_key}"

    remap, remap_key = _get(gpu, "Remapped Rows")
    remap_pending = remap_failed = None
    if isinstance(remap, dict):
        pending, pending_key = _get(remap, "Pending")
        failed, failed_key = _get(remap, "Remapping Failure Occurred")
        remap_pending, remap_failed = _yes(pending), _yes(failed)
        fields["remap_pending"] = f"{label}/{remap_key}/{pending_key}"
        fields["remap_failed"] = f"{label}/{remap_key}/{failed_key}"

    temperature, temperature_key = _get(gpu, "Temperature")
    current = slowdown = margin = slowdown_margin = None
    if isinstance(temperature, dict):
        current_value, current_key = _get(temperature, "GPU Current Temp", "GPU Temp", "Current")
        slowdown_value, slowdown_key = _get(temperature, "GPU Slowdown Temp", "Slowdown Temp")
        margin_value, margin_key = _get(temperature, "GPU T.Limit Temp")
        slowdown_margin_value, slowdown_margin_key = _get(temperature, "GPU Slowdown T.Limit Temp")
        current, slowdown = _number(current_value), _number(slowdown_value)
        # drivers since 535 give, instead of a slowdown temperature, the margin to the card's limit (T.Limit) and
        # the margin at which it slows down (negative: past the limit)
        margin, slowdown_margin = _number(margin_value), _number(slowdown_margin_value)
        for fact, key in (
            ("temperature_c", current_key),
            ("slowdown_temp_c", slowdown_key),
            ("tlimit_margin_c", margin_key),
            ("slowdown_tlimit_margin_c", slowdown_margin_key),
        ):
            if key:
                fields[fact] = f"{label}/{temperature_key}/{key}"

    throttle_active: list[str] = []
    reasons, reasons_key = _get(gpu, *_THROTTLE_SECTIONS)
    if isinstance(reasons, dict):
        for where, reason, value in _walk(reasons, f"{label}/{reasons_key}"):
            if _THROTTLE_REASONS.match(reason) and _yes(value):
                throttle_active.append(reason)
                fields.setdefault("throttle_active", where)

    return {
        "index": int(_number(index)) if _number(index) is not None else position,
        "name": str(name or "").strip(),
        "bus_id": str(bus).lower(),
        "memory_total_mib": int(_number(total)) if _number(total) is not None else None,
        "memory_used_mib": int(_number(used)) if _number(used) is not None else None,
        "utilization_pct": _number(busy),
        "power_draw_w": _number(draw),
        "power_limit_w": _number(limit),
        "clocks_mhz": clocks_mhz,
        "ecc_uncorrected_volatile": volatile,
        "ecc_uncorrected_aggregate": aggregate,
        "retired_pages": retired_pages,
        "retired_pending": retired_pending,
        "remap_pending": remap_pending,
        "remap_failed": remap_failed,
        "temperature_c": current,
        "slowdown_temp_c": slowdown,
        "tlimit_margin_c": margin,
        "slowdown_tlimit_margin_c": slowdown_margin,
        "throttle_active": throttle_active,
        "fields": fields,
    }


def parse(text: str) -> dict[str, Any]:
    """``{driver_version, cuda_version, cards}`` from a device tool's full query (text or JSON)."""
    tree = load(text)
    sections = _gpu_sections(tree)
    if not sections:
        first = text.strip().splitlines()[0][:100]
        raise GmiParseError(f"the device tool's query lists no card (no 'GPU' section); it starts with: {first!r}")
    driver, _ = _get(tree, "Driver Version")
    cuda, _ = _get(tree, "CUDA Version", "MUSA Version")
    return {
        "driver_version": driver,
        "cuda_version": cuda,
        "cards": [_card(label, gpu, i) for i, (label, gpu) in enumerate(sections)],
    }
