"""The cards' metrics of one node, as its card exporter serves them to Prometheus (provision.yml's
``-e card_metrics_port``, docs/monitoring.md).

Everything comes from the parsers the health check uses: the device tool's full query (``mthreads-gmi -q -j`` or
``-q``, ``nvidia-smi -q``: :mod:`trainops.device_query`) for memory, utilisation, temperature, power, clocks, ECC,
retired pages and row remapping, and its process listing (``mthreads-gmi``'s table, ``nvidia-smi
--query-compute-apps``: :mod:`trainops.gmi`) for the processes on each card. A driver without the full query (older
mthreads-gmi: the table only) gives what its table has: memory, utilisation and processes.

:func:`read` joins the tool's outputs into one reading; :func:`families` turns a reading into metric families of
plain data (:class:`trainops.run_metrics.Family`), which ``node/card_exporter.py`` hands to prometheus-client.
:data:`METRICS` lists every family once: the docs' table is held to it by a test. Labels hold the node's inventory
name, the card's index and what the tool names (model, bus id, driver, a process's name and id), nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from . import device_query
from .gmi import GmiParseError, parse_cards
from .run_metrics import Family, Metric

#: The device tool's process listing, by tool: the commands whose outputs ``gmi.parse_cards`` takes, in its order.
LISTINGS: dict[str, list[list[str]]] = {
    "mthreads-gmi": [["mthreads-gmi"]],
    "nvidia-smi": [
        ["nvidia-smi", "--query-gpu=index,name,pci.bus_id,memory.total,memory.used,utilization.gpu",
         "--format=csv,noheader,nounits"],
        ["nvidia-smi", "--query-compute-apps=gpu_bus_id,pid,process_name,used_memory", "--format=csv,noheader,nounits"],
    ],
}  # fmt: skip

CARD = ("node", "card")
MIB = 2**20

#: Every family the exporter serves, in the order served.
METRICS = (
    Metric("trainops_card_info", "gauge", "1 for each card the device tool lists, with its model, bus id and the "
           "driver's version.", ("node", "card", "model", "bus_id", "driver")),
    Metric("trainops_card_memory_used_bytes", "gauge", "Card memory in use.", CARD),
    Metric("trainops_card_memory_total_bytes", "gauge", "Card memory in all.", CARD),
    Metric("trainops_card_utilization_ratio", "gauge", "The share of the tool's last sample period in which the "
           "card was busy (its GPU utilisation, 0 to 1).", CARD),
    Metric("trainops_card_temperature_celsius", "gauge", "The card's temperature.", CARD),
    Metric("trainops_card_slowdown_temperature_celsius", "gauge", "The temperature at which the card slows itself "
           "down, where the tool reports it.", CARD),
    Metric("trainops_card_power_watts", "gauge", "The card's power draw.", CARD),
    Metric("trainops_card_power_limit_watts", "gauge", "The card's current power limit.", CARD),
    Metric("trainops_card_clock_hertz", "gauge", "The card's current clocks (graphics, sm, memory: those the tool "
           "reports).", ("node", "card", "clock")),
    Metric("trainops_card_ecc_uncorrected_errors", "gauge", "Uncorrected ECC errors: since the driver loaded "
           "(volatile) and over the card's life (aggregate).", ("node", "card", "scope")),
    Metric("trainops_card_retired_pages", "gauge", "Memory pages the card has retired.", CARD),
    Metric("trainops_card_retired_pages_pending", "gauge", "1 when a page retirement waits for the card's next "
           "reset.", CARD),
    Metric("trainops_card_row_remap_pending", "gauge", "1 when a row remapping waits for the card's next reset.",
           CARD),
    Metric("trainops_card_row_remap_failed", "gauge", "1 when a row remapping failed (the card needs service).",
           CARD),
    Metric("trainops_card_slowdown_active", "gauge", "1 for each hardware or thermal slowdown reason active on the "
           "card.", ("node", "card", "reason")),
    Metric("trainops_card_processes", "gauge", "Processes the device tool lists on the card.", CARD),
    Metric("trainops_card_process_memory_bytes", "gauge", "Card memory a process uses, as the tool lists it.",
           ("node", "card", "pid", "process")),
    Metric("trainops_card_query_up", "gauge", "1 when the device tool's last query ran and parsed, 0 when it "
           "failed.", ("node", "tool")),
    Metric("trainops_card_query_duration_seconds", "gauge", "How long the device tool's last query took.",
           ("node", "tool")),
    Metric("trainops_card_query_timestamp_seconds", "gauge", "When the device tool was last queried, Unix time.",
           ("node", "tool")),
)  # fmt: skip
BY_NAME = {metric.name: metric for metric in METRICS}


def _is_full_query(argv: Sequence[str]) -> bool:
    return "-q" in argv


def _failed(run: Mapping[str, Any], tool: str) -> str:
    return f"{' '.join(run.get('argv') or [tool])}: exit {run.get('rc')}: {str(run.get('output') or '').strip()[:300]}"


def read(tool: str, query: Mapping[str, Any], listing: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One reading of the node's cards: ``{"cards": [...], "driver": ..., "errors": [...]}``.

    ``query``: the full query's run (``{"rc", "output", "argv"}``, node_facts.device_query: the table's when the
    driver has no full query); ``listing``: the runs of :data:`LISTINGS`' commands (ignored for a table query, which
    is the listing). Each card holds the full query's facts (:func:`trainops.device_query.parse`) and the listing's
    ``memory_used_mib, utilization_pct, processes`` where the query has none. What failed is in ``errors``, and the
    cards hold what did not."""
    errors: list[str] = []
    by_key: dict[Any, dict[str, Any]] = {}
    driver = None
    full = _is_full_query(query.get("argv") or ())
    if query.get("rc") != 0:
        errors.append(_failed(query, tool))
    elif full:
        try:
            parsed = device_query.parse(query["output"])
            driver = parsed.get("driver_version")
            for card in parsed["cards"]:
                by_key[card["bus_id"] or card["index"]] = dict(card)
        except GmiParseError as exc:
            errors.append(str(exc))
    runs = list(listing) if full else ([query] if query.get("rc") == 0 else [])
    if runs and all(run.get("rc") == 0 for run in runs):
        try:
            listed = parse_cards(tool, *(run["output"] for run in runs))
            driver = driver or listed.get("driver_version")
            for card in listed["cards"]:
                merged = by_key.setdefault(card["bus_id"] or card["index"], {})
                for key, value in card.items():
                    if merged.get(key) is None or key == "processes":
                        merged[key] = value
        except GmiParseError as exc:
            errors.append(str(exc))
    else:
        errors.extend(_failed(run, tool) for run in runs if run.get("rc") != 0)
    cards = sorted(by_key.values(), key=lambda card: card.get("index", 0))
    return {"cards": cards, "driver": driver, "errors": errors}


def _value(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def families(node: str, tool: str, reading: Mapping[str, Any] | None, duration_s: float | None,
             taken_at: float | None) -> list[Family]:  # fmt: skip
    """The node's card families from its last :func:`read` (None: no query has finished yet)."""
    out = {metric.name: Family(metric) for metric in METRICS}

    def add(name: str, labels: tuple[str, ...], value: Any, scale: float = 1.0) -> None:
        number = _value(value)
        if number is not None:
            out[name].samples.append((labels, number * scale))

    if reading is not None:
        add("trainops_card_query_up", (node, tool), not reading["errors"])
        add("trainops_card_query_duration_seconds", (node, tool), duration_s)
        add("trainops_card_query_timestamp_seconds", (node, tool), taken_at)
    for card in (reading or {}).get("cards", ()):
        index = str(card.get("index", ""))
        at = (node, index)
        info = (node, index, str(card.get("name") or ""), str(card.get("bus_id") or ""), str(reading["driver"] or ""))
        add("trainops_card_info", info, 1)
        add("trainops_card_memory_used_bytes", at, card.get("memory_used_mib"), MIB)
        add("trainops_card_memory_total_bytes", at, card.get("memory_total_mib"), MIB)
        add("trainops_card_utilization_ratio", at, card.get("utilization_pct"), 0.01)
        add("trainops_card_temperature_celsius", at, card.get("temperature_c"))
        add("trainops_card_slowdown_temperature_celsius", at, card.get("slowdown_temp_c"))
        add("trainops_card_power_watts", at, card.get("power_draw_w"))
        add("trainops_card_power_limit_watts", at, card.get("power_limit_w"))
        for clock, mhz in sorted((card.get("clocks_mhz") or {}).items()):
            add("trainops_card_clock_hertz", (node, index, clock), mhz, 1e6)
        for scope in ("volatile", "aggregate"):
            add("trainops_card_ecc_uncorrected_errors", (node, index, scope), card.get(f"ecc_uncorrected_{scope}"))
        add("trainops_card_retired_pages", at, card.get("retired_pages"))
        add("trainops_card_retired_pages_pending", at, card.get("retired_pending"))
        add("trainops_card_row_remap_pending", at, card.get("remap_pending"))
        add("trainops_card_row_remap_failed", at, card.get("remap_failed"))
        for reason in card.get("throttle_active") or ():
            add("trainops_card_slowdown_active", (node, index, reason), 1)
        processes = card.get("processes")
        if processes is not None:
            add("trainops_card_processes", at, len(processes))
            for process in processes:
                add("trainops_card_process_memory_bytes", (node, index, str(process["pid"]), str(process["name"])),
                    process.get("memory_mib"), MIB)  # fmt: skip
    return list(out.values())
