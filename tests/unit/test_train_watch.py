"""The watcher (trainops.watch): the probe's output, the verdict on the nodes' states, a whole watch fed probe by
probe, and the train_watch module's documentation held to WatchRequest."""

from __future__ import annotations

import ast
import base64
import json
from dataclasses import fields
from pathlib import Path

import pytest
import yaml
from presets import load_preset, make_plan
from trainops.megatron_log import parse_lines
from trainops.options import OPTIONS
from trainops.watch import ProbeError, Progress, Watcher, WatchRequest, parse_probe, standby_node
from trainops.watch import judge_nodes as judge

ROOT = Path(__file__).resolve().parents[2]
STOPPED_STACK = (ROOT / "tests" / "fixtures" / "py-spy" / "stopped-in-all-reduce.txt").read_text()
WAIT_STACK = (ROOT / "tests" / "fixtures" / "py-spy" / "waiting-in-all-reduce-native.txt").read_text()

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


def test_the_standby_node_is_the_master_or_with_the_supervisor_on_the_master_the_next_node(plan):
    assert (plan["master"], plan.get("supervisor") or plan["master"]) == ("node1", "node1")
    assert standby_node(plan) == "node2"
    assert standby_node(dict(plan, supervisor="node3")) == "node1"  # -e supervisor_host: the master holds the copy
    assert standby_node(dict(plan, nodes=plan["nodes"][:1])) is None  # one node: nowhere else to move to


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
    with pytest.raises(ProbeError, match="no state for node2"):
        judge(plan, states(node1="running:1"), {}, 10, 120)


def _header(text: str, age: int | None, start: int = 0, rank0: dict | None = None) -> dict:
    return {"path": "x", "size": 0, "bytes": len(text.encode()), "age_s": age, "start": start, "rank0": rank0 or {}}


def test_progress_clock_saves_and_offsets(plan):
    progress = Progress(plan, started=1000.0)
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
    progress = Progress(plan, started=5000.0, tail=True)
    assert progress.offsets == {"log": -1, "stdout": -1, "stderr": -1}
    line = LOG.splitlines()[0] + "\n"
    progress.feed(_header(line, age=95, start=4096), line, now=5000.0, started=5000.0)
    assert progress.progress_at == 4905.0 and progress.offsets["log"] == 4096 + len(line.encode())


# --- a whole watch, fed probe by probe (the probe's output as probe.sh prints it) -------------------------------


def _probe(states: str, log: str = "", start: int = 0, marks: str = "") -> dict:
    nodes = "".join(
        f"node\t{name}\t{state.replace(':', chr(9), 1)}\n"
        for name, state in (pair.split("=") for pair in states.split())
    )
    header = f"log\t/w/logs/rank3.log\t{start + len(log.encode())}\t{len(log.encode())}\t0\t{start}\n"
    return {"rc": 0, "stdout": marks + nodes + header + log}


def _request(plan, **args) -> WatchRequest:
    return WatchRequest(plan=plan, probe="/w/probe.sh", programs="/opt/mtt-train-ops/v1/trainops/node", **args)


def test_a_watch_prints_progress_then_finishes(plan):
    watcher = Watcher(_request(plan, progress_interval=0), started=100.0)
    assert watcher.probe_argv() == ["bash", "/w/probe.sh", "0", "0", "0"]
    line = LOG.splitlines()[0] + "\n"
    printed = watcher.on_probe(_probe("node1=running:11 node2=running:12", line), now=105.0)
    assert len(printed) == 1 and printed[0].startswith("watch / r1: iteration 1/20")
    assert watcher.probe_argv()[2] == str(len(line.encode())) and not watcher.ended(105.0)
    assert watcher.on_probe(_probe("node1=exited:0 node2=exited:0", start=len(line.encode())), now=110.0) == []
    assert watcher.ended(110.0) and watcher.finish() == []
    out = watcher.result(110.0)
    assert out["state"] == "finished" and out["last_iteration"]["iteration"] == 1 and out["watched_s"] == 10.0


def test_probes_come_every_poll_interval_then_every_second_near_the_end(plan):
    watcher = Watcher(_request(plan, poll_interval=5.0), started=0.0)
    watcher.on_probe(_probe("node1=running:11 node2=running:12", LOG.splitlines()[0] + "\n"), now=5.0)
    assert watcher.progress.last["iteration"] < plan["train_iters"] and watcher.next_probe_in() == 5.0
    last = LOG.splitlines()[0].replace("iteration        1/", f"iteration       {plan['train_iters']}/") + "\n"
    watcher.on_probe(_probe("node1=running:11 node2=running:12", last, start=watcher.progress.offsets["log"]), 10.0)
    assert watcher.progress.last["iteration"] == plan["train_iters"] and watcher.next_probe_in() == 1.0
    # a node's launch that exited while the other still runs: the end (or the failure) is as near
    other = Watcher(_request(plan, poll_interval=5.0), started=0.0)
    other.on_probe(_probe("node1=running:11 node2=exited:0"), now=5.0)
    assert not other.ended(5.0) and other.next_probe_in() == 1.0


def test_the_master_unreachable_twice_is_lost(plan):
    watcher = Watcher(_request(plan), started=0.0)
    assert watcher.on_probe({"unreachable": True, "msg": "ssh: timed out"}, now=5.0) == [] and not watcher.ended(5)
    watcher.on_probe({"unreachable": True, "msg": "ssh: timed out"}, now=10.0)
    out = watcher.result(10.0)
    assert (out["state"], out["kind"], out["node"], out["ranks"]) == ("failed", "lost", "node1", [0, 1])
    assert "ssh: timed out" in out["reason"]


def test_a_removed_restart_mark_stops_the_attempt(plan):
    watcher = Watcher(_request(plan, restart_mark=True), started=0.0)
    watcher.on_probe(_probe("node1=running:1 node2=running:2", marks="mark\trestarting\tpresent\n"), now=5.0)
    assert not watcher.ended(5.0)
    watcher.on_probe(_probe("node1=running:1 node2=running:2", marks="mark\trestarting\tabsent\n"), now=10.0)
    assert watcher.result(10.0)["kind"] == "stopped"


def test_the_wait_ends_a_watch_that_goes_on(plan):
    watcher = Watcher(_request(plan, wait=0), started=0.0)
    watcher.on_probe(_probe("node1=running:1 node2=running:2"), now=0.0)
    assert watcher.ended(0.0) and watcher.result(0.0)["state"] == "running"


def _diagnosis(node_ranks: dict[str, list[tuple[int, str, str]]]) -> str:
    lines = []
    for node, ranks in node_ranks.items():
        rows = [
            {
                "rank": rank,
                "local_rank": rank % 2,
                "pid": 100 + rank,
                "state": state,
                "state_text": {"S": "sleeping", "T": "stopped"}[state],
                "wchan": "futex_do_wait",
                "cpu_percent": 0.0,
                "stack": stack,
                "stack_error": None,
            }
            for rank, state, stack in ranks
        ]
        lines.append(f"diag\t{node}\tok\t{json.dumps({'node': node, 'ranks': rows, 'missing_ranks': []})}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("on_hang", ["stop", "warn"])
def test_a_stall_asks_for_a_diagnosis_and_prints_the_culprit_at_once(plan, tmp_path, on_hang):
    watcher = Watcher(_request(plan, hang_timeout="30", on_hang=on_hang, evidence_dir=str(tmp_path)), started=0.0)
    line = LOG.splitlines()[0] + "\n"
    watcher.on_probe(_probe("node1=running:1 node2=running:2", line), now=5.0)
    assert not watcher.wants_diagnosis
    watcher.on_probe(_probe("node1=running:1 node2=running:2", start=len(line.encode())), now=34.0)
    assert not watcher.wants_diagnosis  # 29 s without a line
    watcher.on_probe(_probe("node1=running:1 node2=running:2", start=len(line.encode())), now=36.0)
    assert watcher.wants_diagnosis and watcher.diagnose_argv() == ["bash", "/w/diagnose.sh"]
    reply = {
        "rc": 0,
        "stdout": _diagnosis(
            {
                "node1": [(0, "S", WAIT_STACK), (1, "S", WAIT_STACK)],
                "node2": [(2, "T", STOPPED_STACK), (3, "S", WAIT_STACK)],
            }
        ),
    }
    printed = watcher.on_diagnosis(reply, now=37.0)
    assert printed[0].startswith("[WARNING] watch / r1: ") and "rank 2" in printed[1] and "node2" in printed[1]
    assert printed[-1] == f"  evidence: {tmp_path / 'hang'}" and (tmp_path / "hang" / "diagnosis.json").is_file()
    out = watcher.result(37.0)
    assert out["hang"]["culprits"][0]["rank"] == 2 and "stacks" not in out["hang"]
    if on_hang == "stop":
        assert "(the run is stopped)" in printed[0] and watcher.ended(37.0)
        assert (out["state"], out["kind"], out["node"], out["ranks"]) == ("failed", "hang", "node2", [2, 3])
    else:
        assert "on_hang=warn" in printed[0] and not watcher.ended(37.0) and out["state"] == "running"
        watcher.on_probe(_probe("node1=running:1 node2=running:2", start=len(line.encode())), now=40.0)
        assert not watcher.wants_diagnosis  # the next warning only after another full limit


def test_a_later_less_confident_diagnosis_leaves_the_runs_finding_and_its_evidence_alone(plan, tmp_path):
    """on_hang=warn diagnoses a stall again after every further limit. The stopped rank continued as the second look
    came (every rank back in its all-reduce: low confidence, no culprit): that look is said and counted, but the
    run's finding, and the evidence on disk, stay the first, which named the rank; an equally confident later look
    takes its place."""
    watcher = Watcher(_request(plan, hang_timeout="30", on_hang="warn", evidence_dir=str(tmp_path)), started=0.0)
    line = LOG.splitlines()[0] + "\n"
    offset = len(line.encode())
    stopped = {
        "node1": [(0, "S", WAIT_STACK), (1, "S", WAIT_STACK)],
        "node2": [(2, "T", STOPPED_STACK), (3, "S", WAIT_STACK)],
    }
    waiting = {
        "node1": [(0, "S", WAIT_STACK), (1, "S", WAIT_STACK)],
        "node2": [(2, "S", WAIT_STACK), (3, "S", WAIT_STACK)],
    }
    watcher.on_probe(_probe("node1=running:1 node2=running:2", line), now=5.0)
    watcher.on_probe(_probe("node1=running:1 node2=running:2", start=offset), now=36.0)
    watcher.on_diagnosis({"rc": 0, "stdout": _diagnosis(stopped)}, now=37.0)
    first = json.loads((tmp_path / "hang" / "diagnosis.json").read_text())
    assert first["confidence"] == "high" and first["culprits"][0]["rank"] == 2

    watcher.on_probe(_probe("node1=running:1 node2=running:2", start=offset), now=68.0)
    assert watcher.wants_diagnosis
    printed = watcher.on_diagnosis({"rc": 0, "stdout": _diagnosis(waiting)}, now=69.0)
    assert "low confidence" in printed[0] and "which stays the run's finding" in printed[-1], printed
    assert f"diagnosis of {first['detected_at']} (high confidence: node2 rank 2" in printed[-1], printed[-1]
    hang = watcher.result(69.0)["hang"]
    assert (hang["confidence"], hang["culprits"][0]["rank"], hang["diagnoses"]) == ("high", 2, 2), hang
    assert [later["confidence"] for later in hang["less_confident_later"]] == ["low"]
    assert json.loads((tmp_path / "hang" / "diagnosis.json").read_text()) == first
    assert "state T" in (tmp_path / "hang" / "node2" / "rank-2.txt").read_text()

    # a third look as confident as the first (the rank stopped again) is the run's finding now, with its evidence
    watcher.on_probe(_probe("node1=running:1 node2=running:2", start=offset), now=100.0)
    printed = watcher.on_diagnosis({"rc": 0, "stdout": _diagnosis(stopped)}, now=101.0)
    assert printed[-1] == f"  evidence: {tmp_path / 'hang'}"
    hang = watcher.result(101.0)["hang"]
    assert (hang["confidence"], hang["diagnoses"], hang["seconds_since_progress"]) == ("high", 3, 31.0), hang
    assert json.loads((tmp_path / "hang" / "diagnosis.json").read_text())["diagnoses"] == 3


def test_every_rank_exited_while_torchrun_lives_is_its_teardown_not_a_hang(plan, tmp_path):
    """Seen on a busy testbed node: the last iteration printed, every rank exited, and torchrun still in its exit
    barrier past the hang limit. No rank is stuck: the attempt's outcome is torchrun's exit, not a hang."""
    watcher = Watcher(_request(plan, hang_timeout="30", on_hang="stop", evidence_dir=str(tmp_path)), started=0.0)
    line = LOG.splitlines()[0] + "\n"
    watcher.on_probe(_probe("node1=running:1 node2=running:2", line), now=5.0)
    watcher.on_probe(_probe("node1=running:1 node2=running:2", start=len(line.encode())), now=36.0)
    assert watcher.wants_diagnosis
    # every node answers, and no rank of the run has a process any more
    printed = watcher.on_diagnosis({"rc": 0, "stdout": _diagnosis({"node1": [], "node2": []})}, now=37.0)
    assert printed == ["watch / r1: every rank has exited; waiting for each node's torchrun to end the attempt"]
    assert not watcher.ended(37.0) and watcher.result(37.0)["state"] == "running" and "hang" not in watcher.result(37.0)
    watcher.on_probe(_probe("node1=exited:0 node2=exited:0", start=len(line.encode())), now=40.0)
    assert watcher.ended(40.0) and watcher.result(40.0)["state"] == "finished"
    # one rank still there (stopped) is a hang as before
    stuck = Watcher(_request(plan, hang_timeout="30", on_hang="stop"), started=0.0)
    stuck.on_probe(_probe("node1=running:1 node2=running:2", line), now=5.0)
    stuck.on_probe(_probe("node1=running:1 node2=running:2", start=len(line.encode())), now=36.0)
    stuck.on_diagnosis({"rc": 0, "stdout": _diagnosis({"node1": [], "node2": [(2, "T", STOPPED_STACK)]})}, now=37.0)
    assert stuck.ended(37.0) and stuck.result(37.0)["kind"] == "hang"


def _documentation() -> dict:
    """train_watch's DOCUMENTATION as ansible-doc reads it: statically, without importing the module."""
    source = (ROOT / "plugins" / "modules" / "train_watch.py").read_text()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "DOCUMENTATION" for t in node.targets):
            return yaml.safe_load(ast.literal_eval(node.value))
    raise AssertionError("train_watch.py has no DOCUMENTATION")


def test_documentation_states_the_watch_request():
    documented = _documentation()["options"]
    assert list(documented)[-3:] == ["detach", "notify", "run"]  # the action's own, after the request's
    documented = {name: option for name, option in documented.items() if name not in ("detach", "notify", "run")}
    stated = {name: {k: v for k, v in option.items() if k != "description"} for name, option in documented.items()}
    assert stated == WatchRequest.argument_spec()
    assert list(stated) == list(WatchRequest.argument_spec()), "the documentation lists the options in field order"
    described = {f: " ".join(str(documented[f]["description"]).split()) for f in documented}
    assert described == {f.name: " ".join(f.metadata["doc"].split()) for f in fields(WatchRequest)}


def test_the_watch_defaults_are_the_schemas():
    spec = WatchRequest.argument_spec()
    assert spec["wait"]["default"] == OPTIONS["train_wait"].default
    for name in ("poll_interval", "progress_interval", "start_timeout", "hang_timeout", "on_hang", "straggler_ratio"):
        assert spec[name]["default"] == OPTIONS[name].default, name


def test_train_ymls_options_fill_every_argument_not_given_itself():
    options = {"train_wait": 600.0, "poll_interval": 2.0, "progress_interval": 5.0, "start_timeout": 30.0}
    options |= {"hang_timeout": None, "on_hang": "warn", "straggler_ratio": 1.5, "max_restarts": 2}
    spec = WatchRequest.argument_spec()
    args = {name: entry.get("default") for name, entry in spec.items()}
    args |= {"plan": {}, "probe": "/r/probe.sh", "programs": "/p", "options": options, "poll_interval": 9.0}
    request = WatchRequest.from_args(args, ["plan", "probe", "options", "poll_interval"])
    assert (request.wait, request.progress_interval, request.start_timeout) == (600.0, 5.0, 30.0)
    assert (request.hang_timeout, request.on_hang, request.straggler_ratio) == ("auto", "warn", 1.5)
    assert request.poll_interval == 9.0 and request.restart_mark is True  # given itself: kept
    assert request.options is None and request.diagnose_script == "/r/diagnose.sh"


def test_a_save_megatron_says_is_done_asks_for_a_checkpoint_scan(plan):
    watcher = Watcher(_request(plan, progress_interval=0, verify_checkpoints=True), started=100.0)
    rank0 = "  successfully saved checkpoint from iteration       5 to /ckpt [ t 1/1, p 1/1 ]\n"
    encoded = base64.b64encode(rank0.encode()).decode()
    section = f"rank0-stdout\t/r/logs/node1/x/attempt_0/0/stdout.log\t{len(rank0)}\t{len(rank0)}\t0\t0\t{encoded}\n"
    line = LOG.splitlines()[0] + "\n"
    reply = _probe("node1=running:11 node2=running:12", line)
    watcher.on_probe(dict(reply, stdout=section + reply["stdout"]), now=105.0)
    assert watcher.checkpoints.wants_scan
    argv = watcher.checkpoints.scan_argv()
    assert argv[:4] == [
        "python3",
        "/opt/mtt-train-ops/v1/trainops/node/checkpoint_scan.py",
        "scan",
        plan["checkpoint_dir"],
    ]
    assert watcher.result(106.0)["checkpoints"]["saves"] == []
    off = Watcher(_request(plan, verify_checkpoints=False), started=100.0)
    off.on_probe(dict(reply, stdout=section + reply["stdout"]), now=105.0)
    assert not off.checkpoints.wants_scan


def test_a_master_silent_to_the_follower_is_judged_only_after_its_limit(plan):
    from trainops.watch import MASTER_SILENT_S, silent_master

    assert silent_master(plan, 60.0, "Connection reset by peer") is None  # the controller's path: keep trying
    lost = silent_master(plan, MASTER_SILENT_S, "ssh: connect to host 172.30.0.11 port 22: Connection refused\n")
    assert lost["state"] == "failed" and lost["kind"] == "lost" and lost["node"] == plan["master"]
    assert lost["ranks"] == [0, 1]
    assert (
        lost["reason"] == "the master has not answered for 120 s: ssh: connect to host 172.30.0.11 port 22: "
        "Connection refused"
    )


def test_a_silent_supervisors_node_that_is_not_the_master_loses_no_node(plan):
    """-e supervisor_host=node3: its silence to the follower is no verdict on the run, whose ranks are elsewhere."""
    from trainops.watch import MASTER_SILENT_S, silent_master

    elsewhere = dict(plan, supervisor="node3")
    assert silent_master(elsewhere, 60.0, "Connection timed out") is None
    assert silent_master(
        elsewhere, MASTER_SILENT_S, "ssh: connect to host 172.30.0.13 port 22: Connection timed out"
    ) == {
        "state": "running",
        "reason": "the supervisor's node node3 has not answered this controller for 120 s (ssh: connect to host "
        "172.30.0.13 port 22: Connection timed out)",
    }
