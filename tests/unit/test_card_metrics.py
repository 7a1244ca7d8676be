"""The cards' metrics (trainops.card_metrics) from recorded device-tool outputs, and the node's card exporter
(node/card_exporter.py) started for real on loopback with a device tool that replays a recorded output, scraped over
HTTP and read back with prometheus-client's own parser of the exposition format."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from metric_samples import documented_labels
from prometheus_client.parser import text_string_to_metric_families
from trainops import card_metrics

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
EXPORTER = ROOT / "plugins" / "module_utils" / "trainops" / "node" / "card_exporter.py"
LABELS = {"node", "card", "model", "bus_id", "driver", "clock", "scope", "reason", "pid", "process", "tool"}


def ran(argv: list[str], output: str, rc: int = 0) -> dict:
    return {"rc": rc, "output": output, "argv": argv}


def samples(families) -> dict[str, list[tuple[tuple[str, ...], float]]]:
    return {family.metric.name: family.samples for family in families if family.samples}


def test_nvidia_smi_full_query_and_its_process_listing_give_every_card_family():
    query = ran(["nvidia-smi", "-q"], (FIXTURES / "nvidia-smi" / "h100x8-healthy-565.57.01.txt").read_text())
    tree = card_metrics.device_query.parse(query["output"])
    second = tree["cards"][1]["bus_id"]
    gpus = "".join(f"{c['index']}, NVIDIA H100 80GB HBM3, {c['bus_id'].upper()}, 81559, 1, 0\n" for c in tree["cards"])
    apps = f"{second.upper()}, 4242, python, 5200\n"
    listing = [ran(card_metrics.LISTINGS["nvidia-smi"][0], gpus), ran(card_metrics.LISTINGS["nvidia-smi"][1], apps)]
    reading = card_metrics.read("nvidia-smi", query, listing)
    assert reading["errors"] == [] and len(reading["cards"]) == 8
    got = samples(card_metrics.families("node1", "nvidia-smi", reading, 0.4, 1.7e9))
    assert ("node1", "0", "NVIDIA H100 80GB HBM3", tree["cards"][0]["bus_id"], "565.57.01") in dict(
        got["trainops_card_info"]
    )
    first = dict(got["trainops_card_power_watts"])[("node1", "0")]
    assert first == 100.89  # the fixture's GPU Power Readings / Power Draw of its first card
    assert dict(got["trainops_card_power_limit_watts"])[("node1", "0")] == 700.0
    assert dict(got["trainops_card_clock_hertz"])[("node1", "0", "sm")] == 345e6
    assert dict(got["trainops_card_memory_total_bytes"])[("node1", "0")] == 81559 * 2**20
    assert dict(got["trainops_card_temperature_celsius"])[("node1", "0")] == 30.0
    assert dict(got["trainops_card_ecc_uncorrected_errors"])[("node1", "0", "volatile")] == 0
    # the process lands on the card whose bus id the listing names, and only there
    assert got["trainops_card_process_memory_bytes"] == [(("node1", "1", "4242", "python"), 5200 * 2**20)]
    assert dict(got["trainops_card_processes"]) == {("node1", str(i)): float(i == 1) for i in range(8)}
    assert got["trainops_card_query_up"] == [(("node1", "nvidia-smi"), 1.0)]
    assert "trainops_card_slowdown_active" not in got  # healthy: only 'Idle' is active


def test_a_retired_page_and_an_active_hardware_slowdown_are_served_on_their_cards():
    def read(name: str) -> dict:
        query = ran(["nvidia-smi", "-q"], (FIXTURES / "nvidia-smi" / name).read_text())
        return card_metrics.read("nvidia-smi", query, [ran(["nvidia-smi"], "", rc=9)] * 2)

    retired = read("v100x8-retiredpages-550.127.05.txt")
    pages = dict(samples(card_metrics.families("n", "nvidia-smi", retired, 1, 1))["trainops_card_retired_pages"])
    holder = next(c for c in retired["cards"] if c["bus_id"] == "00000000:00:08.0")
    assert pages[("n", str(holder["index"]))] == 1 and sum(pages.values()) == 1
    slow = samples(card_metrics.families("n", "nvidia-smi", read("h100x8-hwslowdown-535.161.08.txt"), 1, 1))
    reasons = {labels[2] for labels, _ in slow["trainops_card_slowdown_active"]}
    assert reasons == {"HW Slowdown", "HW Power Brake Slowdown"}
    # the listing failed (exit 9): the query's cards are still served, and the query says it was not whole
    assert slow["trainops_card_query_up"] == [(("n", "nvidia-smi"), 0.0)]
    assert "trainops_card_processes" not in slow


def test_mthreads_gmi_json_query_with_the_table_as_its_process_listing():
    text = (FIXTURES / "mthreads-gmi" / "s5000-query-json-excerpt.txt").read_text()
    first = text.split("\n        },\n")[0] + "\n        }\n    ]\n}\n"  # the excerpt's first card, as JSON
    table = (FIXTURES / "mthreads-gmi" / "s5000-x8-gmi2.4.1.txt").read_text()
    table = table.replace("00000000:18:00.0", "00000000:2a:00.0")  # the table of the same machine: its bus id
    reading = card_metrics.read(
        "mthreads-gmi", ran(["mthreads-gmi", "-q", "-j"], first), [ran(["mthreads-gmi"], table)]
    )
    got = samples(card_metrics.families("s5000", "mthreads-gmi", reading, 1, 1))
    assert dict(got["trainops_card_power_watts"])[("s5000", "0")] == 96.66  # JSON's "Power Draw " (its space)
    assert dict(got["trainops_card_temperature_celsius"])[("s5000", "0")] == 27.0  # the query's, not the table's
    assert len(got["trainops_card_info"]) == 8  # the table's seven other cards join with what it has
    assert dict(got["trainops_card_utilization_ratio"])[("s5000", "3")] == 0.0


def test_a_driver_with_only_the_table_and_a_tool_that_fails():
    table = (FIXTURES / "mthreads-gmi" / "s80-gmi2.0.0-processes-truncated.txt").read_text()
    reading = card_metrics.read("mthreads-gmi", ran(["mthreads-gmi"], table), [])
    got = samples(card_metrics.families("desk", "mthreads-gmi", reading, 1, 1))
    assert got["trainops_card_memory_used_bytes"] == [(("desk", "0"), 662 * 2**20)]
    assert got["trainops_card_temperature_celsius"] == [(("desk", "0"), 41.0)]
    assert dict(got["trainops_card_process_memory_bytes"]) == {("desk", "0", "1123", "/usr/lib/xorg/Xorg"): 134 * 2**20}
    assert got["trainops_card_processes"] == [(("desk", "0"), 2.0)]  # one without its memory shown is counted
    assert "trainops_card_power_watts" not in got
    failed = card_metrics.read("mthreads-gmi", ran(["mthreads-gmi"], "Failed to initialize MTML", rc=255), [])
    assert failed["cards"] == [] and "exit 255: Failed to initialize MTML" in failed["errors"][0]
    got = samples(card_metrics.families("desk", "mthreads-gmi", failed, 1, 1))
    assert set(got) == {f"trainops_card_query_{x}" for x in ("up", "duration_seconds", "timestamp_seconds")}
    assert got["trainops_card_query_up"] == [(("desk", "mthreads-gmi"), 0.0)]


def test_names_follow_prometheus_conventions_and_the_docs_list_each_with_its_labels():
    for metric in card_metrics.METRICS:
        assert re.fullmatch(r"trainops_card_[a-z_]+", metric.name) and metric.kind == "gauge", metric.name
        assert not metric.name.endswith("_total") and set(metric.labels) <= LABELS
        assert documented_labels(metric.name, metric.kind) == list(metric.labels), metric.name


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def replaying_tool(tmp_path):
    """A directory on PATH whose mthreads-gmi prints the recorded S5000 table, and has no -q (an older driver):
    the exporter's own subprocesses run it, as they would run the real tool."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "mthreads-gmi"
    table = FIXTURES / "mthreads-gmi" / "s5000-x8-gmi2.4.1.txt"
    tool.write_text(f'#!/bin/sh\n[ "$#" -eq 0 ] && exec cat {table}\necho "no option $*" >&2\nexit 2\n')
    tool.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def _ensure(env, state: Path, port: int, version: str = "v1", tool: str = "mthreads-gmi"):
    argv = [sys.executable, str(EXPORTER), "ensure", "--dir", str(state), "--node", "node1", "--device-tool", tool,
            "--port", str(port), "--version", version, "--interval", "1"]  # fmt: skip
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


def _scrape(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_the_exporter_serves_the_cards_is_found_again_restarts_for_new_options_and_stops(replaying_tool, tmp_path):
    state, port = tmp_path / "card-exporter", _free_port()
    first = _ensure(replaying_tool, state, port)
    try:
        assert first.returncode == 0, first.stderr
        answer = json.loads(first.stdout)
        assert (answer["started"], answer["cards"], answer["errors"]) == (True, 8, [])
        served = _scrape(port)
        temperatures = {s.labels["card"]: s.value for s in served["trainops_card_temperature_celsius"].samples}
        assert temperatures["5"] == 50.0 and len(temperatures) == 8
        assert served["trainops_card_query_up"].samples[0].value == 1.0
        assert "trainops_card_exporter_process_resident_memory_bytes" in served

        # the same options: found serving, not started again; a taken port elsewhere is refused with why
        again = json.loads(_ensure(replaying_tool, state, port).stdout)
        assert (again["started"], again["pid"]) == (False, answer["pid"])
        clash = _ensure(replaying_tool, tmp_path / "other", port)
        assert clash.returncode == 1 and f"the card exporter cannot serve: port {port}: " in clash.stderr

        # a new version (provision.yml after an update) replaces it; the reading is refreshed every interval
        before = served["trainops_card_query_timestamp_seconds"].samples[0].value
        newer = json.loads(_ensure(replaying_tool, state, port, version="v2").stdout)
        assert (newer["started"], newer["stopped"]) == (True, True) and newer["pid"] != answer["pid"]
        time.sleep(2.5)
        assert _scrape(port)["trainops_card_query_timestamp_seconds"].samples[0].value > before
    finally:
        stopped = json.loads(_ensure(replaying_tool, state, 0).stdout)  # -e card_metrics_port=0: none
    assert (stopped["serving"], stopped["stopped"]) == (False, True)
    with pytest.raises(OSError):
        _scrape(port)
