"""Jinja filters over the core: device tools' and collective test output, provision rows, dataset sizes."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

_CORE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _CORE not in sys.path:
    sys.path.insert(0, _CORE)

from ansible.errors import AnsibleFilterError  # noqa: E402
from trainops import collective as collective_core  # noqa: E402
from trainops import dataset_manifest as dataset_manifest_core  # noqa: E402
from trainops import gmi as gmi_core  # noqa: E402
from trainops import provision_report as provision_report_core  # noqa: E402


def _filter_error(name: str, parse: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a core parser so that its own error becomes an Ansible filter error naming the filter."""

    def wrapped(*args: Any) -> Any:
        try:
            return parse(*args)
        except collective_core.CollectiveParseError as exc:
            raise AnsibleFilterError(f"{name}: {exc}") from None

    return wrapped


def device_cards(output: str, device_tool: str, *more: str) -> dict[str, Any]:
    """``{tool_version, driver_version, cards}`` from a device tool's output, by the tool's registered parser
    (trainops.gmi.PARSERS); each card: index, name, bus_id, memory_total_mib, memory_used_mib, utilization_pct,
    processes."""
    try:
        return gmi_core.parse_cards(device_tool, output, *more)
    except gmi_core.GmiParseError as exc:
        raise AnsibleFilterError(f"trainops_device_cards ({device_tool}): {exc}") from None


#: rows, avg_busbw_gbps, largest_busbw_gbps, wrong, out_of_bounds of an all_reduce_perf run.
parse_allreduce_perf = _filter_error("parse_allreduce_perf", lambda text: collective_core.parse_allreduce_perf(text))


def provision_rows(nodes: Sequence[Mapping[str, Any]], supervisors: Sequence[str] = ()) -> list[dict[str, Any]]:
    return provision_report_core.provision_rows(nodes, supervisors)


def collective_reusable(nodes: Sequence[Mapping[str, Any]], now: float, max_age_s: float) -> bool:
    return collective_core.records_reusable(nodes, now, max_age_s)


def dataset_size_mismatch(sizes: Mapping[str, Mapping[str, Any]]) -> list[str]:
    return dataset_manifest_core.size_mismatch(sizes)


class FilterModule:
    """mtt-train-ops filters: device tools' and collective test output, provision rows, dataset sizes."""

    def filters(self) -> dict[str, Any]:
        return {
            "trainops_provision_rows": provision_rows,
            "trainops_collective_reusable": collective_reusable,
            "trainops_dataset_size_mismatch": dataset_size_mismatch,
            "trainops_dataset_written_size_problems": dataset_manifest_core.written_size_problems,
            "trainops_device_cards": device_cards,
            "parse_allreduce_perf": parse_allreduce_perf,
        }
