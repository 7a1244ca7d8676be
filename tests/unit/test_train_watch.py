"""train_watch: the probe's output and the verdict on the nodes' states."""

from __future__ import annotations

import base64
import importlib.util
from pathlib import Path

import pytest
from ansible.errors import AnsibleActionFail
from presets import load_preset
from trainops.megatron_log import parse_lines
from trainops.plan import make_plan

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("trainops_train_watch", ROOT / "plugins" / "action" / "train_watch.py")
train_watch = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(train_watch)
parse_probe = train_watch.parse_probe
judge = train_watch.ActionModule._judge

HOSTS = [
    {"name": "node1", "ansible_host": "172.30.0.11", "slots": 2, "accelerator": "cpu"},
    {"name": "node2", "ansible_host": "172.30.0.12", "slots": 2, "accelerator": "cpu"},
]
LOG = (
    "[2026-11-30 06:00:42.457] iteration        1/      20 | consumed samples:            8 | elapsed time per "
    "iteration (ms): 58.0 | throughput per GPU (TFLOP/s/GPU): 0.002630 | learning rate: 3.000000E-03 | global "
    "batch size:     8 | lm loss: 5.520555E+00 | loss scale: 1.0 | grad norm: 0.353 | number of skipped "
    "iterations:   0 | number of nan iterations:   0 |\n"
    "node\tnode9\texited\t1\n"  # log text that looks like a state line is log text
)


@pytest.fixture(scope="module")
def plan():
    layout = {"train_iters": 20, "seq_length": 256, "gbs": 8, "precision": "bf16"}
    return make_plan(model=load_preset("tiny"), hosts=HOSTS, layout=layout, run_id="r1", exp_name="watch")


def test_parse_probe_states_header_and_log():
    size = len(LOG.encode())
    rank0 = "saving checkpoint at iteration 5 to /ckpt in torch format\n\u00e9\n"
    encoded = base64.b64encode(rank0.encode()).decode()
    text = (
        "node\tnode1\trunning\t3415\n"
        "node\tnode2\tunreachable\tssh: connect to host 172.30.0.12 port 2222: Connection timed out\n"
        "mark\trestarting\tabsent\r\n"
        f"rank0-stdout\t/r/logs/node1/x/attempt_0/0/stdout.log\t900\t{len(rank0.encode())}\t3\t40\t{encoded}\n"
        "rank0-stderr\t-\t0\t0\t-\t0\t\n"
        f"log\t/data/runs/watch/r1/logs/node2/r1_abc/attempt_0/1/stdout.log\t{size + 100}\t{size}\t7\t100\n" + LOG
    )
    nodes, header, log = parse_probe(text)
    assert nodes == {
        "node1": ("running", "3415"),
        "node2": ("unreachable", "ssh: connect to host 172.30.0.12 port 2222: Connection timed out"),
    }
    assert header == {
        "path": "/data/runs/watch/r1/logs/node2/r1_abc/attempt_0/1/stdout.log",
        "size": size + 100,
        "bytes": size,
        "age_s": 7,
        "start": 100,
        "rank0": {
            "stdout": {
                "path": "/r/logs/node1/x/attempt_0/0/stdout.log",
                "size": 900,
                "bytes": len(rank0.encode()),
                "start": 40,
                "text": rank0,
            },
            "stderr": {"path": "-", "size": 0, "bytes": 0, "start": 0, "text": ""},
        },
        "marks": {"restarting": "absent"},
    }
    assert log == LOG
    assert [r["iteration"] for r in parse_lines(log.splitlines()).iterations] == [1]


def test_parse_probe_without_log_or_output():
    assert parse_probe("node\tnode1\texited\t0\nnode\tnode2\twaiting\t-\n") == (
        {"node1": ("exited", "0"), "node2": ("waiting", "-")},
        None,
        "",
    )
    assert parse_probe("node\tnode1\texited\t0\nlog\t-\t0\t0\t-\t0\n") == (
        {"node1": ("exited", "0")},
        {"path": "-", "size": 0, "bytes": 0, "age_s": None, "start": 0, "rank0": {}, "marks": {}},
        "",
    )
    assert parse_probe("") == ({}, None, "")
    assert parse_probe("node\tnode1\trunning\t1\ta tab\n") == ({"node1": ("running", "1\ta tab")}, None, "")
    assert parse_probe("node\tshort\n") == ({}, None, "")


def states(**nodes):
    return {name: tuple(value.split(":", 1)) if ":" in value else (value, "") for name, value in nodes.items()}


def test_finished_only_when_every_node_exited_zero(plan):
    assert judge(plan, states(node1="exited:0", node2="exited:0\n"), {}, 10, 120) == {"state": "finished"}
    assert judge(plan, states(node1="exited:0", node2="running:2245"), {}, 10, 120) == {"state": "running"}
    assert judge(plan, states(node1="running:3415", node2="running:2245"), {}, 10, 120) == {"state": "running"}


def test_a_non_zero_exit_fails_naming_the_node(plan):
    out = judge(plan, states(node1="running:3415", node2="exited:1"), {}, 10, 120)
    assert (out["state"], out["kind"], out["node"]) == ("failed", "exited", "node2")
    assert out["reason"] == "torchrun on node2 exited with status 1"


def test_a_vanished_group_was_killed(plan):
    out = judge(plan, states(node1="stopped:3415", node2="running:2245"), {}, 10, 120)
    assert (out["state"], out["kind"], out["node"]) == ("failed", "killed", "node1")
    assert "process group 3415" in out["reason"]


def test_waiting_fails_only_after_the_start_timeout(plan):
    assert judge(plan, states(node1="running:1", node2="waiting:-"), {}, 119, 120) == {"state": "running"}
    out = judge(plan, states(node1="running:1", node2="waiting:-"), {}, 121, 120)
    assert (out["state"], out["kind"], out["node"]) == ("failed", "not started", "node2")
    assert "within 120 s" in out["reason"] and "launch-node2.out" in out["reason"]


def test_unreachable_counts_twice_before_failing(plan):
    unreachable: dict[str, int] = {}
    lost = states(node1="running:1", node2="unreachable:ssh: Connection timed out")
    assert judge(plan, lost, unreachable, 10, 120) == {"state": "running"}
    assert unreachable == {"node2": 1}
    # One good probe forgives it.
    assert judge(plan, states(node1="running:1", node2="running:2"), unreachable, 15, 120) == {"state": "running"}
    assert unreachable == {}
    assert judge(plan, lost, unreachable, 20, 120) == {"state": "running"}
    out = judge(plan, lost, unreachable, 25, 120)
    assert (out["state"], out["kind"], out["node"]) == ("failed", "lost", "node2")
    assert "ssh: Connection timed out" in out["reason"]


def test_unreachable_does_not_hide_an_exit_elsewhere(plan):
    out = judge(plan, states(node1="unreachable:x", node2="exited:137"), {}, 10, 120)
    assert (out["kind"], out["node"]) == ("exited", "node2")


def test_a_node_missing_from_the_probe_is_an_error(plan):
    with pytest.raises(AnsibleActionFail, match="no state for node2"):
        judge(plan, states(node1="running:1"), {}, 10, 120)


def _header(text: str, age: int | None, start: int = 0, rank0: dict | None = None) -> dict:
    return {"path": "x", "size": 0, "bytes": len(text.encode()), "age_s": age, "start": start, "rank0": rank0 or {}}


def test_progress_clock_saves_and_offsets(plan):
    progress = train_watch._Progress(plan, started=1000.0)
    line = LOG.splitlines()[0] + "\n"
    progress.feed(_header(line, age=2, start=0), line, now=1010.0, started=1000.0)
    assert progress.last["iteration"] == 1 and progress.progress_at == 1008.0  # the line's time, by the log's age
    assert progress.offsets["log"] == len(line.encode()) and progress.limit(30) == 30
    saving = "saving checkpoint at iteration       1 to /ckpt in torch format\n"
    section = {"path": "r0", "size": 70, "bytes": len(saving), "start": 5, "text": saving}
    progress.feed(_header("", age=None, rank0={"stdout": section}), "", now=1020.0, started=1000.0)
    assert progress.saving and progress.limit(30) == 1800 and progress.offsets["stdout"] == 5 + len(saving)
    assert progress.progress_at == 1008.0  # no iteration: the clock runs on


def test_a_tail_probe_of_a_quiet_run_dates_its_last_iteration_by_the_logs_age(plan):
    progress = train_watch._Progress(plan, started=5000.0, tail=True)
    assert progress.offsets == {"log": -1, "stdout": -1, "stderr": -1}
    line = LOG.splitlines()[0] + "\n"
    progress.feed(_header(line, age=95, start=4096), line, now=5000.0, started=5000.0)
    assert progress.progress_at == 4905.0 and progress.offsets["log"] == 4096 + len(line.encode())
