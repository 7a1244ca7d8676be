"""The provision report: one row per node, as a fixed-width table and as a JSON file on the controller."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from . import records


def provision_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The provision report as a fixed-width table, one row per node."""

    def bandwidth(value: Any) -> str:
        return "-" if value is None else f"{float(value):.4g}"

    def data(row: Mapping[str, Any]) -> str:
        sizes = row.get("data") or {}
        if row.get("supervisors_host"):
            return "supervisors host"
        if not sizes:
            return "not checked"
        return "MISSING" if any(v is None for v in sizes.values()) else "ok"

    fmt = "{:<10} {:<16} {:<16} {:<44} {:>5} {:>5} {:<20} {:>9} {:>9} {}"
    lines = [
        fmt.format("node", "address", "container", "image", "sshd", "cards", "card", "node GB/s", "all GB/s", "data")
    ]
    for row in rows:
        status = row.get("status", "")
        container = row.get("container", "-") + ("" if status == "running" else f" ({status})")
        lines.append(
            fmt.format(
                row["node"],
                str(row.get("address", "")),
                container,
                str(row.get("image", ""))[:44],
                str(row.get("sshd_port", "")),
                str(row.get("cards", "-")),
                ",".join(row.get("card_names") or []) or "-",
                bandwidth(row.get("busbw_node_gbps")),
                bandwidth(row.get("busbw_cluster_gbps")),
                data(row),
            )
        )
    served = [f"{row['node']} {row['card_metrics']}" for row in rows if row.get("card_metrics")]
    if served:
        lines.append("card metrics: " + ", ".join(served))
    return "\n".join(lines)


def write_provision_report(directory: str, timestamp: str, rows: Sequence[Mapping[str, Any]]) -> str:
    """Write ``<directory>/provision-<timestamp>.json`` (the directory made if needed, the file replaced whole,
    never half-written); its path."""
    path = os.path.join(directory, f"provision-{timestamp}.json")
    records.write_json(path, {"timestamp": timestamp, "nodes": list(rows)})
    return path


def provision_rows(nodes: Sequence[Mapping[str, Any]], supervisors: Sequence[str] = ()) -> list[dict[str, Any]]:
    """One report row per node from what provision.yml's roles found on it: ``name``, ``ansible_host``,
    ``container_facts``, ``container_ssh_port``, ``accelerator_facts``, ``collective_results``, ``dataset_sizes``,
    ``card_exporter_url`` (each may be missing on a node that failed early). ``supervisors``: the names among them
    of the supervisors group's hosts (a container without cards that can run a supervisor; no card, no data)."""
    rows = []
    for node in nodes:
        container = node.get("container_facts") or {}
        cards = node.get("accelerator_facts") or {}
        collective = node.get("collective_results") or {}
        rows.append(
            {
                "node": node["name"],
                "address": node.get("ansible_host") or node["name"],
                "container": container.get("name", "-"),
                "status": container.get("status", "not provisioned"),
                "image": container.get("image", "-"),
                "sshd_port": node.get("container_ssh_port"),
                "cards": cards.get("count", "-"),
                "card_names": cards.get("names", []),
                "driver": cards.get("driver", ""),
                "busbw_node_gbps": (collective.get("intra") or {}).get("largest_busbw_gbps"),
                "busbw_cluster_gbps": (collective.get("inter") or {}).get("largest_busbw_gbps"),
                "collective": collective,
                "data": node.get("dataset_sizes") or {},
                "card_metrics": node.get("card_exporter_url") or None,
                "supervisors_host": node["name"] in supervisors,
            }
        )
    return rows
