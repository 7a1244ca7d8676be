"""The run's metrics (trainops.run_metrics) from a watch fed with real Megatron lines, and the supervisor's endpoint
(node/supervise.py's MetricsEndpoint) served for real by prometheus-client on loopback, scraped over HTTP and read
back with prometheus-client's own parser of the exposition format."""

from __future__ import annotations

import importlib.util
import re
import socket
import urllib.request
from pathlib import Path

import pytest
from metric_samples import HOSTS, documented_labels, watched
from presets import load_preset, make_plan
from prometheus_client.parser import text_string_to_metric_families
from trainops import run_metrics

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ROOT / "plugins" / "module_utils" / "trainops" / "node"
LABELS = {"exp", "run_id", "state", "node", "rank"}


@pytest.fixture(scope="module")
def plan():
    layout = {"train_iters": 20, "seq_length": 256, "gbs": 8, "precision": "bf16"}
    made = make_plan(model=load_preset("tiny"), hosts=HOSTS, layout=layout, run_id="r1", exp_name="metrics")
    return dict(made, peak_tflops_per_card=2.0, checkpoint_bytes=1000)


def _watched(plan) -> dict:
    """A watch's result after one probe that read iteration 12."""
    result = watched(plan)
    result["checkpoints"] = {
        "saves": [
            {"iteration": 5, "verdict": "verified", "mtime": 900.0},
            {"iteration": 10, "verdict": "verified", "mtime": 950.0},
            {"iteration": 11, "verdict": "bad", "mtime": 960.0},
            {"iteration": 12, "verdict": "pending", "mtime": 990.0},  # being written: not counted
        ],
        "disk": {"level": "warn", "line": "...", "free_bytes": 1500, "checkpoint_bytes": 1000},
    }
    result["stragglers"] = [{"node": "node2", "rank": 3, "ratio": 1.9}]
    return result


def _values(found: list[run_metrics.Family]) -> dict[str, float]:
    return {f.metric.name: f.samples[0][1] for f in found if len(f.samples) == 1}


def test_the_families_hold_what_the_watch_saw(plan):
    watch = _watched(plan)
    view = {"number": 2, "outcome": None, "next": "end"}
    found = run_metrics.families(plan, watch, view, run_started=0.0, now=1000.0, stragglers=watch["stragglers"],
                                 began_at_iteration=2)  # fmt: skip
    values = _values(found)
    assert values["trainops_iteration"] == 12 and values["trainops_iterations_planned"] == 20
    assert values["trainops_lm_loss"] == pytest.approx(5.520555) and values["trainops_step_seconds"] == 0.25
    assert values["trainops_tokens_per_second_per_card"] == pytest.approx(8 * 256 / 0.25 / 4)
    assert values["trainops_tflops_per_card"] == 0.5 and values["trainops_mfu_ratio"] == 0.25
    assert (values["trainops_attempt"], values["trainops_restarts_total"]) == (2, 1)
    assert values["trainops_seconds_since_progress"] == 10.0
    assert values["trainops_checkpoint_verified_iteration"] == 10
    assert values["trainops_checkpoint_verified_age_seconds"] == 50.0
    assert values["trainops_checkpoint_unverified_saves"] == 1
    assert values["trainops_checkpoint_disk_free_bytes"] == 1500 and values["trainops_checkpoint_bytes"] == 1000
    assert values["trainops_goodput_ratio"] == pytest.approx((12 - 2) * 0.25 / 1000)
    state = next(f for f in found if f.metric.name == "trainops_run_state")
    assert [labels[-1] for labels, value in state.samples if value == 1] == ["running"]
    slow = next(f for f in found if f.metric.name == "trainops_straggler_slowness_ratio")
    assert slow.samples == [(("metrics", "r1", "node2", "3"), 1.9)]
    assert all(labels[:2] == ("metrics", "r1") for f in found for labels, _ in f.samples)


def test_before_the_first_iteration_only_what_is_known_is_served(plan):
    found = run_metrics.families(dict(plan, peak_tflops_per_card=None), None, None, run_started=0.0, now=5.0)
    values = _values(found)
    assert "trainops_iteration" not in values and "trainops_mfu_ratio" not in values
    assert values["trainops_iterations_planned"] == 20 and values["trainops_attempt"] == 1
    state = next(f for f in found if f.metric.name == "trainops_run_state")
    assert [labels[-1] for labels, value in state.samples if value == 1] == ["starting"]


@pytest.mark.parametrize(
    ("outcome", "next_step", "state"),
    [({"state": "failed", "kind": "exited"}, None, "judging"),
     ({"state": "failed", "kind": "exited"}, "relaunch", "restarting"),
     ({"state": "failed", "kind": "exited"}, "end", "failed"),
     ({"state": "failed", "kind": "stopped"}, "end", "stopped"),
     ({"state": "finished"}, "end", "finished")],
)  # fmt: skip
def test_the_run_state_follows_the_attempt_and_the_decision(outcome, next_step, state):
    decided = {"decision": {"reason": "the core's"}, "next": next_step} if next_step else {"next": "end"}
    assert run_metrics.run_state({}, {"outcome": outcome, **decided}) == state


def test_names_follow_prometheus_conventions_and_the_docs_list_each_with_its_labels():
    for metric in run_metrics.METRICS:
        assert re.fullmatch(r"trainops_[a-z_]+", metric.name), metric.name
        assert metric.name.endswith("_total") == (metric.kind == "counter"), metric.name
        assert set(metric.labels) <= LABELS and metric.labels[:2] == ("exp", "run_id")
        assert documented_labels(metric.name, metric.kind) == list(metric.labels), metric.name


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _endpoint_class():
    spec = importlib.util.spec_from_file_location("supervise_metrics", PROGRAMS / "supervise.py")
    program = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(program)
    return program.MetricsEndpoint


def test_the_supervisors_endpoint_serves_the_families_over_http_and_a_taken_port_is_said(plan):
    port = _free_port()
    said: list[str] = []
    endpoint = _endpoint_class()(port, 0.0, said.append)
    endpoint.serve(plan)
    assert said == [f"supervisor: the run's metrics: http://127.0.0.1:{port}/metrics"]
    url = f"http://127.0.0.1:{port}/metrics"
    assert "trainops_iteration" not in urllib.request.urlopen(url, timeout=10).read().decode()  # nothing probed yet
    watch = _watched(plan)
    endpoint.update(plan, watch, {"number": 1, "outcome": None, "next": "end"}, {"current": {"resumes_from": None}})
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    served = {family.name: family for family in text_string_to_metric_families(text)}
    assert served["trainops_iteration"].samples[0].value == 12
    assert served["trainops_iteration"].samples[0].labels == {"exp": "metrics", "run_id": "r1"}
    assert served["trainops_restarts"].type == "counter" and "trainops_restarts_total 0.0" not in text
    assert 'trainops_restarts_total{exp="metrics",run_id="r1"} 0.0' in text
    assert served["trainops_straggler_slowness_ratio"].samples[0].labels["node"] == "node2"
    assert served["trainops_supervisor_process_resident_memory_bytes"].samples[0].value > 0
    # nothing but the run's labels: no path, argument or environment of the run in any sample
    for family in served.values():
        for sample in family.samples:
            assert set(sample.labels) <= LABELS, (family.name, sample.labels)
    assert "/w/" not in text and "probe.sh" not in text
    # a second supervisor on the same node and port serves none, says so, and goes on
    again: list[str] = []
    taken = _endpoint_class()(port, 0.0, again.append)
    taken.serve(plan)
    assert taken.port == 0 and len(again) == 1 and f"cannot be served on port {port}" in again[0], again
    assert "-e metrics_port=N chooses another port" in again[0]
