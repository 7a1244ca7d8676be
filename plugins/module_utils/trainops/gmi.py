"""Parse ``mthreads-gmi`` (Moore Threads) and ``nvidia-smi`` output into cards.

Every parser returns ``{"tool_version", "driver_version", "cards": [...]}``,
each card with ``index, name, bus_id, memory_total_mib, memory_used_mib,
utilization_pct, temperature_c, processes: [{pid, name, memory_mib}]`` (``None`` where
the form has no such value). ``mthreads-gmi``
comes in three forms: the default table (column widths differ between 1.x and
2.x, and ``-cf`` output can arrive with its whitespace collapsed), ``-q`` text
(``Key : value``) and ``-q -j`` JSON. :func:`parse_mthreads_gmi` takes any of
them. Garbage gives :class:`GmiParseError` naming what was expected.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

_HEADER = re.compile(r"mthreads-gmi\s*:\s*(\S+)\s+Driver Version\s*:\s*(\S+)", re.I)
_BUS_ID = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9a-fA-F]"
_CARD = re.compile(rf"^\s*(\d+)\s+(.+?)\s*\|\s*({_BUS_ID})\s*\|\s*(\d+)\s*%\s*(\d+)\s*MiB\s*\(\s*(\d+)\s*MiB\s*\)")
_PROCESS = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\S.*?)(?:\s+(\d+)\s*MiB)?\s*$")
_MIB = re.compile(r"(\d+(?:\.\d+)?)\s*MiB", re.I)
#: The table's second line of a card ends with its temperature: ``Physical  P0  |16x(16x)  |48C   YES``.
_TABLE_TEMP = re.compile(r"\|\s*(\d+)\s*C\b")


class GmiParseError(ValueError):
    """The text is not output of the device tool in any known form."""


def _card(index: int, name: str, bus_id: str, total: int | None, used: int | None, util: int | None) -> dict:
    return {
        "index": index,
        "name": name,
        "bus_id": bus_id.lower(),
        "memory_total_mib": total,
        "memory_used_mib": used,
        "utilization_pct": util,
        "temperature_c": None,
        "processes": [],
    }


def parse_mthreads_gmi(text: str) -> dict[str, Any]:
    """Cards from any form of ``mthreads-gmi`` output (table, ``-q`` text or JSON)."""
    if not isinstance(text, str) or not text.strip():
        raise GmiParseError("mthreads-gmi printed nothing; is the driver loaded and the tool on PATH?")
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return _parse_json(stripped)
    if re.search(r"^\s*Product Name\s*:", text, re.M):
        return _parse_query_text(text)
    return _parse_table(text)


def _parse_table(text: str) -> dict[str, Any]:
    header = _HEADER.search(text)
    cards: dict[int, dict] = {}
    in_processes = False
    last: dict | None = None
    for line in text.splitlines():
        if line.strip().startswith("Processes"):
            in_processes = True
            continue
        if not in_processes:
            match = _CARD.match(line)
            if match:
                index, name, bus, util, used, total = match.groups()
                last = cards[int(index)] = _card(int(index), name.strip(), bus, int(total), int(used), int(util))
            elif last is not None and last["temperature_c"] is None and (temp := _TABLE_TEMP.search(line)):
                last["temperature_c"] = int(temp.group(1))
            continue
        match = _PROCESS.match(line)
        if match and int(match.group(1)) in cards:
            gpu, pid, name, usage = match.groups()
            cards[int(gpu)]["processes"].append(
                {"pid": int(pid), "name": name.strip(), "memory_mib": int(usage) if usage else None}
            )
    if not cards:
        first = text.strip().splitlines()[0][:100]
        raise GmiParseError(
            "no card rows ('<index>  MTT <model> |<bus id> |<util>%  <used>MiB(<total>MiB)') found in "
            f"mthreads-gmi output; it starts with: {first!r}"
        )
    return {
        "tool_version": header.group(1) if header else None,
        "driver_version": header.group(2) if header else None,
        "cards": [cards[i] for i in sorted(cards)],
    }


def _mib(value: Any) -> int | None:
    match = _MIB.search(str(value or ""))
    return int(float(match.group(1))) if match else None


def _pct(value: Any) -> int | None:
    match = re.search(r"(\d+)", str(value or ""))
    return int(match.group(1)) if match else None


def _parse_json(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise GmiParseError(f"mthreads-gmi JSON output does not parse: {exc}") from None
    gpus = data.get("GPU") if isinstance(data, dict) else None
    if isinstance(gpus, dict):
        gpus = [gpus]
    if not isinstance(gpus, list) or not gpus:
        raise GmiParseError("mthreads-gmi JSON output has no 'GPU' list")
    cards = []
    for position, gpu in enumerate(gpus):
        if not isinstance(gpu, dict):
            raise GmiParseError(f"mthreads-gmi JSON: GPU entry {position} is not an object")
        memory = gpu.get("FB Memory Usage") or {}
        pci = gpu.get("PCI") or {}
        index = gpu.get("Index", position)
        cards.append(
            _card(
                int(index),
                str(gpu.get("Product Name", "")).strip(),
                str(pci.get("Bus ID", "")),
                _mib(memory.get("Total")),
                _mib(memory.get("Used")),
                _pct((gpu.get("Utilization") or {}).get("Gpu")),
            )
        )
        cards[-1]["temperature_c"] = _pct((gpu.get("Temperature") or {}).get("GPU Current Temp"))
    return {"tool_version": None, "driver_version": data.get("Driver Version"), "cards": cards}


def _parse_query_text(text: str) -> dict[str, Any]:
    cards: list[dict] = []
    driver = None
    section = ""
    for line in text.splitlines():
        if ":" not in line:
            section = line.strip()  # e.g. "FB Memory Usage", "Utilization"
            continue
        key, _, value = (part.strip() for part in line.partition(":"))
        if key.startswith("Driver Version"):
            driver = value
        if key == "Product Name":
            cards.append(_card(len(cards), value, "", None, None, None))
        elif not cards:
            continue
        elif key in ("FB Memory Usage", "Utilization") and not value:
            section = key  # some versions print "FB Memory Usage :"
        elif key == "Bus Id" or key == "Bus ID":
            cards[-1]["bus_id"] = value.lower()
        elif key == "Total" and section == "FB Memory Usage":
            cards[-1]["memory_total_mib"] = _mib(value)
        elif key == "Used" and section == "FB Memory Usage":
            cards[-1]["memory_used_mib"] = _mib(value)
        elif key == "Gpu" and section == "Utilization":
            cards[-1]["utilization_pct"] = _pct(value)
        elif key == "Index":
            cards[-1]["index"] = int(value)
    if not cards:
        raise GmiParseError("mthreads-gmi -q output has no 'Product Name' entry")
    return {"tool_version": None, "driver_version": driver, "cards": cards}


def parse_nvidia_smi_csv(gpus_csv: str, apps_csv: str = "") -> dict[str, Any]:
    """Cards from ``nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total,memory.used,utilization.gpu
    --format=csv,noheader,nounits`` and processes from ``--query-compute-apps=gpu_bus_id,pid,process_name,
    used_memory --format=csv,noheader,nounits``."""
    cards = []
    for line in (gpus_csv or "").splitlines():
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 5 or not fields[0].isdigit():
            raise GmiParseError(f"nvidia-smi CSV row is not 'index, name, bus id, total, used[, util]': {line!r}")
        util = _pct(fields[5]) if len(fields) > 5 else None
        cards.append(_card(int(fields[0]), fields[1], fields[2], _pct(fields[3]), _pct(fields[4]), util))
    if not cards:
        raise GmiParseError("nvidia-smi listed no GPU")
    by_bus = {c["bus_id"]: c for c in cards}
    for line in (apps_csv or "").splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) >= 4 and fields[1].isdigit() and fields[0].lower() in by_bus:
            by_bus[fields[0].lower()]["processes"].append(
                {"pid": int(fields[1]), "name": fields[2], "memory_mib": _pct(fields[3])}
            )
    return {"tool_version": None, "driver_version": None, "cards": cards}


#: The card parser of each device tool (a backend profile's ``device_tool``), the one place they are registered:
#: the tool's output (and, for nvidia-smi, its compute-apps query) to ``{tool_version, driver_version, cards}``.
#: A new backend's tool adds its parser here and its task file under roles/accelerator/tasks/<tool>.yml.
PARSERS: dict[str, Callable[..., dict[str, Any]]] = {
    "mthreads-gmi": parse_mthreads_gmi,
    "nvidia-smi": parse_nvidia_smi_csv,
}


def parse_cards(device_tool: str, *outputs: str) -> dict[str, Any]:
    """The cards ``device_tool`` reports, by its registered parser; :class:`GmiParseError` for a tool without one."""
    if device_tool not in PARSERS:
        raise GmiParseError(f"device tool {device_tool!r} has no card parser (known: {', '.join(PARSERS)})")
    return PARSERS[device_tool](*outputs)
