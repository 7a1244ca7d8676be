"""The monitoring files the bundle ships (monitoring/): the alert rules pass Prometheus' own checker and their
promtool unit tests, every rule is tested both firing and not yet firing, every series a rule reads is one the
bundle serves, and the Prometheus and Alertmanager configurations pass promtool's and amtool's checks.
promtool and amtool come from Debian's prometheus and prometheus-alertmanager packages (testbed/host-setup.sh)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from trainops import card_metrics, run_metrics

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "monitoring"
RULES = MONITORING / "rules" / "trainops-alerts.yml"
RULE_TESTS = MONITORING / "rules" / "trainops-alerts.test.yml"


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
    served = {m.name for m in run_metrics.METRICS} | {m.name for m in card_metrics.METRICS} | {"up"}
    for rule in rules():
        names = set(re.findall(r"\b(trainops_[a-z_]+)", rule["expr"])) | set(re.findall(r"\b(up)\{", rule["expr"]))
        assert names and names <= served, f"{rule['alert']}: {sorted(names - served)} are not served"


def test_the_prometheus_and_alertmanager_configurations_pass_their_checkers():
    config = run(tool("promtool"), "check", "config", "prometheus.yml")
    assert config.returncode == 0, config.stdout + config.stderr
    assert f"SUCCESS: {len(rules())} rules found" in config.stdout  # the rules file it names is the one tested
    scraped = {job["job_name"] for job in yaml.safe_load((MONITORING / "prometheus.yml").read_text())["scrape_configs"]}
    referenced = set(re.findall(r'job="([a-z-]+)"', RULES.read_text()))
    assert referenced <= scraped == {"trainops-run", "trainops-cards"}
    alertmanager = run(tool("amtool"), "check-config", "alertmanager.yml")
    assert alertmanager.returncode == 0, alertmanager.stdout + alertmanager.stderr
