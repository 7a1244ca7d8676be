"""Jinja filters over the core's monitoring configuration (trainops.monitoring)."""

from __future__ import annotations

import os
import sys

_CORE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _CORE not in sys.path:
    sys.path.insert(0, _CORE)

from trainops import monitoring  # noqa: E402


def prometheus_config(base, nodes, metrics_port, card_metrics_port, scrape_interval_s, alertmanager, rules,
                      supervisors=()):  # fmt: skip
    return monitoring.prometheus_config(
        base, nodes, metrics_port=metrics_port, card_metrics_port=card_metrics_port,
        scrape_interval_s=scrape_interval_s, alertmanager=alertmanager, rules=rules, supervisors=supervisors,
    )  # fmt: skip


class FilterModule:
    """mtt-train-ops filters: the monitoring host's configuration."""

    def filters(self):
        return {
            "trainops_prometheus_config": prometheus_config,
            "trainops_alertmanager_config": monitoring.alertmanager_config,
        }
