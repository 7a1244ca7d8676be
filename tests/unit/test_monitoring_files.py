"""The monitoring files the bundle ships (monitoring/): the alert rules pass Prometheus' own checker and their
promtool unit tests, every rule is tested both firing and not yet firing, every series a rule or a dashboard panel
reads is one the bundle serves, the Prometheus and Alertmanager configurations pass promtool's and amtool's checks
(as shipped, and as monitoring.yml makes them for a site), and the Grafana dashboard is importable.
promtool and amtool come from Debian's prometheus and prometheus-alertmanager packages (testbed/host-setup.sh)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from trainops import card_metrics, monitoring, run_metrics

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "monitoring"
RULES = MONITORING / "rules" / "trainops-alerts.yml"
RULE_TESTS = MONITORING / "rules" / "trainops-alerts.test.yml"
DASHBOARD = MONITORING / "grafana" / "trainops-dashboard.json"
SERVED = {m.name for m in run_metrics.METRICS} | {m.name for m in card_metrics.METRICS}


def tool(name: str) -> str:
    path = shutil.which(name)
    if not path:
        pytest.fail(f"{name} is not installed: testbed/host-setup.sh installs it (Debian's prometheus packages)")
    return path


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=MONITORING)


def rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_the_rules_pass_promtools_checker_and_their_unit_tests():
    checked = run(tool("promtool"), "check", "rules", str(RULES))
    assert checked.returncode == 0 and f"SUCCESS: {len(rules())} rules found" in checked.stdout, checked.stdout
    tested = run(tool("promtool"), "test", "rules", str(RULE_TESTS))
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


def test_every_rule_is_tested_firing_and_not_yet_firing():
    cases: dict[str, list[bool]] = {}
    for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in test["alert_rule_test"]:
            cases.setdefault(check["alertname"], []).append(bool(check["exp_alerts"]))
    for rule in rules():
        assert set(cases.get(rule["alert"], [])) == {True, False}, f"{rule['alert']}: {cases.get(rule['alert'])}"
        # a description says what to do and is the same for every alert of the rule; the summary names what fired
        assert "{{" not in rule["annotations"]["description"] and "{{ $" in rule["annotations"]["summary"]
        assert rule["labels"]["severity"] in ("critical", "warning")


def test_every_series_a_rule_reads_is_one_the_bundle_serves():
    for rule in rules():
        names = set(re.findall(r"\b(trainops_[a-z_]+)", rule["expr"])) | set(re.findall(r"\b(up)\{", rule["expr"]))
        assert names and names <= SERVED | {"up"}, f"{rule['alert']}: {sorted(names - SERVED)} are not served"


def test_the_prometheus_and_alertmanager_configurations_pass_their_checkers():
    config = run(tool("promtool"), "check", "config", "prometheus.yml")
    assert config.returncode == 0, config.stdout + config.stderr
    assert f"SUCCESS: {len(rules())} rules found" in config.stdout  # the rules file it names is the one tested
    scraped = {job["job_name"] for job in yaml.safe_load((MONITORING / "prometheus.yml").read_text())["scrape_configs"]}
    referenced = set(re.findall(r'job="([a-z-]+)"', RULES.read_text()))
    assert referenced <= scraped == {"trainops-run", "trainops-cards"}
    alertmanager = run(tool("amtool"), "check-config", "alertmanager.yml")
    assert alertmanager.returncode == 0, alertmanager.stdout + alertmanager.stderr


def test_a_sites_configuration_made_from_the_shipped_one_passes_the_checkers(tmp_path):
    """What monitoring.yml writes on the monitoring host (trainops.monitoring), checked as promtool and amtool would
    check it there: every node a target of both jobs, a port of 0 leaving its job out, the webhook as the receiver."""
    base = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
    nodes = [{"name": "node1", "addr": "10.0.0.1"}, {"name": "node2", "addr": "10.0.0.2"}]
    made = monitoring.prometheus_config(base, nodes, metrics_port=9465, card_metrics_port=9466, scrape_interval_s=5,
                                        alertmanager="127.0.0.1:9093", rules=str(RULES))  # fmt: skip
    targets = {job["job_name"]: job["static_configs"][0]["targets"] for job in made["scrape_configs"]}
    assert targets == {"trainops-run": ["10.0.0.1:9465", "10.0.0.2:9465"],
                       "trainops-cards": ["10.0.0.1:9466", "10.0.0.2:9466"]}  # fmt: skip
    assert made["global"] == {"scrape_interval": "5s", "evaluation_interval": "5s"}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(made))
    checked = run(tool("promtool"), "check", "config", str(tmp_path / "prometheus.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # a supervisors host (a login node) may run a supervisor: its run metrics are scraped; it has no card
    login = monitoring.prometheus_config(base, nodes, metrics_port=9465, card_metrics_port=9466, scrape_interval_s=5,
                                         alertmanager="127.0.0.1:9093", rules=str(RULES),
                                         supervisors=[{"name": "login1", "ansible_host": "10.0.0.9"}])  # fmt: skip
    assert {job["job_name"]: job["static_configs"][0]["targets"] for job in login["scrape_configs"]} == {
        "trainops-run": ["10.0.0.1:9465", "10.0.0.2:9465", "10.0.0.9:9465"],
        "trainops-cards": ["10.0.0.1:9466", "10.0.0.2:9466"],
    }
    no_cards = monitoring.prometheus_config(base, nodes, metrics_port=9465, card_metrics_port=0, scrape_interval_s=5,
                                            alertmanager="127.0.0.1:9093", rules=str(RULES))  # fmt: skip
    assert [job["job_name"] for job in no_cards["scrape_configs"]] == ["trainops-run"]

    shipped = yaml.safe_load((MONITORING / "alertmanager.yml").read_text())
    for url, sent in (("https://hooks.example.org/T0K3N", True), (None, False)):
        config = monitoring.alertmanager_config(shipped, url)
        assert all(("webhook_configs" in receiver) is sent for receiver in config["receivers"])
        (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(config))
        checked = run(tool("amtool"), "check-config", str(tmp_path / "alertmanager.yml"))
        assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_dashboard_is_importable_and_each_panel_reads_what_the_bundle_serves():
    dashboard = json.loads(DASHBOARD.read_text())
    assert [i["name"] for i in dashboard["__inputs"]] == ["DS_PROMETHEUS"]  # Grafana asks for the data source
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert variables == {"exp", "run_id", "node"}
    cells: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        assert panel["targets"] and panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
        box = panel["gridPos"]
        area = {(x, y) for x in range(box["x"], box["x"] + box["w"]) for y in range(box["y"], box["y"] + box["h"])}
        assert box["x"] + box["w"] <= 24 and not area & cells, f"{panel['title']} overlaps another panel"
        cells |= area
        for target in panel["targets"]:
            names = set(re.findall(r"\b(trainops_[a-z_]+)", target["expr"]))
            assert names and names <= SERVED, f"{panel['title']}: {sorted(names - SERVED)} are not served"
            assert set(re.findall(r"\$([a-z_]+)", target["expr"])) <= variables, target["expr"]
    titles = {p["title"] for p in dashboard["panels"]}
    assert {"Progress", "Loss", "Throughput per card and MFU", "Step time and stragglers", "Memory per card",
            "Restarts and goodput", "Newest verified checkpoint", "Card health"} <= titles  # fmt: skip
    queries = monitoring.panel_queries(dashboard, {"exp": "e.*", "run_id": ".*", "node": ".*"})
    assert all("$" not in expr for _, expr in queries) and len(queries) >= len(dashboard["panels"])
