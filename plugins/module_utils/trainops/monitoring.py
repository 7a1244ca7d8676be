"""The monitoring host's configuration (playbooks/monitoring.yml, docs/monitoring.md): the Prometheus and
Alertmanager configurations the bundle ships (``monitoring/prometheus.yml``, ``monitoring/alertmanager.yml``) made
into a site's, from its inventory and options. The shipped files stay the one source of their structure: this
only fills in the targets, the intervals, the addresses and the receiver."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

#: The shipped configuration's scrape jobs: the run's supervisor, and each node's card exporter.
RUN_JOB, CARDS_JOB = "trainops-run", "trainops-cards"


def prometheus_config(base: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]], *, metrics_port: int,
                      card_metrics_port: int, scrape_interval_s: int, alertmanager: str, rules: str,
                      supervisors: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:  # fmt: skip
    """``base`` with every node of ``nodes`` (``{name, addr}``) as a target: of the run job on ``metrics_port``
    (any node may hold a run's supervisor: the master, -e supervisor_host, or the node status.yml moved it to), with
    every host of the supervisors group (``{name, node_addr or ansible_host}``: they hold no card), and of the cards
    job on ``card_metrics_port`` (a port of 0 leaves its job out); the scrape and rule intervals; the Alertmanager's
    address; the rules file's path."""
    config = copy.deepcopy(dict(base))
    interval = f"{int(scrape_interval_s)}s"
    config["global"] = {**config.get("global", {}), "scrape_interval": interval, "evaluation_interval": interval}
    config["rule_files"] = [rules]
    config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    ports = {RUN_JOB: int(metrics_port), CARDS_JOB: int(card_metrics_port)}
    addrs = {RUN_JOB: [node["addr"] for node in nodes]
                      + [host.get("node_addr") or host.get("ansible_host") or host["name"] for host in supervisors],
             CARDS_JOB: [node["addr"] for node in nodes]}  # fmt: skip
    jobs = []
    for job in config.get("scrape_configs", []):
        port = ports.get(job["job_name"])
        if port == 0:
            continue
        if port is not None:
            job = {**job, "static_configs": [{"targets": [f"{addr}:{port}" for addr in addrs[job["job_name"]]]}]}
        jobs.append(job)
    config["scrape_configs"] = jobs
    return config


def alertmanager_config(base: Mapping[str, Any], webhook_url: str | None) -> dict[str, Any]:
    """``base`` with its receivers sending to ``webhook_url`` (a JSON webhook: Alertmanager's own format); without
    one they keep the alerts in Alertmanager (its web page and API) and send nothing."""
    config = copy.deepcopy(dict(base))
    receivers = []
    for receiver in config.get("receivers", []):
        receiver = {key: value for key, value in receiver.items() if not key.endswith("_configs")}
        if webhook_url:
            receiver["webhook_configs"] = [{"url": webhook_url, "send_resolved": True}]
        receivers.append(receiver)
    config["receivers"] = receivers
    return config


def panel_queries(dashboard: Mapping[str, Any], values: Mapping[str, str]) -> list[tuple[str, str]]:
    """Every query of the shipped Grafana dashboard (``monitoring/grafana/trainops-dashboard.json``) as
    ``(panel title, PromQL)``, with its template variables (``$exp``, ``$run_id``, ``$node``) replaced by ``values``
    (regular expressions, as Grafana's "All" puts ``.*``): what Grafana would ask Prometheus."""
    queries = []
    for panel in dashboard.get("panels", []):
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name in sorted(values, key=len, reverse=True):
                expr = expr.replace(f"${name}", values[name])
            queries.append((panel["title"], expr))
    return queries
