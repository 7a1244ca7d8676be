"""Hang diagnosis: py-spy dumps recorded on the testbed, /proc states, the culprit, the hang limit."""

from __future__ import annotations

from pathlib import Path

import pytest
from presets import load_preset, make_plan
from trainops import hang
from trainops.watch import parse_diagnosis, watch_options

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "py-spy"
STOPPED = (FIXTURES / "stopped-in-all-reduce.txt").read_text()
WAIT_ALLREDUCE = (FIXTURES / "waiting-in-all-reduce-native.txt").read_text()
WAIT_BARRIER = (FIXTURES / "waiting-in-barrier-native.txt").read_text()
DRILL = (FIXTURES / "drill-sleeping-outside-collective.txt").read_text()
HOSTS = [
    {"name": "node1", "ansible_host": "172.30.0.11", "slots": 2, "accelerator": "cpu"},
    {"name": "node2", "ansible_host": "172.30.0.12", "slots": 2, "accelerator": "cpu"},
]


@pytest.fixture(scope="module")
def plan():
    layout = {"train_iters": 20, "seq_length": 128, "gbs": 8, "precision": "bf16"}
    return make_plan(model=load_preset("tiny"), hosts=HOSTS, layout=layout, run_id="r1", exp_name="hang")


def _rank(rank, local, stack, state="S", cpu=0.0, wchan="futex_do_wait"):
    return {
        "rank": rank,
        "local_rank": local,
        "pid": 100 + rank,
        "state": state,
        "state_text": {"S": "sleeping", "T": "stopped", "D": "disk sleep", "Z": "zombie", "R": "running"}[state],
        "wchan": wchan,
        "cpu_percent": cpu,
        "stack": stack,
        "stack_error": None if stack else "py-spy is not installed here (py-spy): run provision.yml",
    }


def _node(ranks):
    return {"reachable": True, "ranks": ranks}


def test_parse_a_dump_with_native_frames():
    threads = hang.parse_dump(WAIT_ALLREDUCE)
    assert len(threads) == 1 and threads[0]["name"] == "MainThread" and threads[0]["status"] == "idle"
    frames = threads[0]["frames"]
    assert frames[0]["native"] and frames[0]["where"] == "libc.so.6"
    python = hang.python_frames(threads[0])
    assert [f["function"] for f in python] == ["all_reduce", "_exception_logger.<locals>.wrapper", "main", "<module>"]
    assert python[0]["where"] == "torch/distributed/distributed_c10d.py:3252"
    assert hang.collective_of(python) == "all_reduce"
    assert hang.signature(python) == "waits in all_reduce from main (smoke_train.py)"


def test_a_rank_outside_any_collective():
    python = hang.python_frames(hang.main_thread(hang.parse_dump(DRILL)))
    assert hang.collective_of(python) is None
    assert hang.signature(python).startswith("hold_for_drill (smoke_train.py) < main (smoke_train.py)")
    assert hang.innermost(python) == "hold_for_drill (smoke_train.py:175)"


def test_a_stopped_rank_is_the_culprit_with_high_confidence(plan):
    reports = {
        "node1": _node([_rank(0, 0, WAIT_ALLREDUCE), _rank(1, 1, WAIT_ALLREDUCE)]),
        "node2": _node([_rank(2, 0, STOPPED, state="T", wchan="do_signal_stop"), _rank(3, 1, WAIT_ALLREDUCE)]),
    }
    finding = hang.diagnose(plan, reports)
    assert finding["confidence"] == "high"
    assert [(c["node"], c["rank"], c["local_rank"], c["state"]) for c in finding["culprits"]] == [("node2", 2, 0, "T")]
    assert "stopped by a signal" in finding["culprits"][0]["reason"]
    assert finding["finding"].endswith("(3 other rank(s) wait in all_reduce)")
    assert len(finding["ranks"]) == 4 and set(finding["stacks"]) == {"0", "1", "2", "3"}


def test_the_odd_one_out_of_the_stacks(plan):
    reports = {
        "node1": _node([_rank(0, 0, WAIT_BARRIER), _rank(1, 1, DRILL, wchan="hrtimer_nanosleep")]),
        "node2": _node([_rank(2, 0, WAIT_BARRIER), _rank(3, 1, WAIT_BARRIER)]),
    }
    finding = hang.diagnose(plan, reports)
    assert finding["confidence"] == "medium"
    (culprit,) = finding["culprits"]
    assert (culprit["node"], culprit["rank"]) == ("node1", 1)
    assert culprit["reason"] == (
        "not in a collective (at hold_for_drill (smoke_train.py:175)) while 3 rank(s) wait in barrier"
    )
    assert finding["groups"][0]["ranks"] == [0, 2, 3] and finding["groups"][0]["collective"] == "barrier"


def test_all_alike_names_nobody_and_says_so(plan):
    reports = {
        "node1": _node([_rank(0, 0, WAIT_BARRIER), _rank(1, 1, WAIT_BARRIER)]),
        "node2": _node([_rank(2, 0, WAIT_BARRIER), _rank(3, 1, WAIT_BARRIER)]),
    }
    finding = hang.diagnose(plan, reports)
    assert finding["culprits"] == [] and finding["confidence"] == "low"
    assert "no rank stands out" in finding["finding"] and "NCCL_DEBUG=INFO" in finding["finding"]


def test_a_tie_between_two_stacks_names_nobody(plan):
    reports = {
        "node1": _node([_rank(0, 0, WAIT_BARRIER), _rank(1, 1, WAIT_BARRIER)]),
        "node2": _node([_rank(2, 0, DRILL), _rank(3, 1, DRILL)]),
    }
    finding = hang.diagnose(plan, reports)
    assert finding["culprits"] == [] and "no majority" in finding["finding"]


@pytest.mark.parametrize(
    ("state", "words"),
    [("D", "uninterruptible sleep"), ("Z", "zombie"), ("t", "tracer")],
)
def test_states_that_explain_a_stall_by_themselves(plan, state, words):
    stuck = _rank(3, 1, None, wchan="nfs_wait_bit_killable")
    stuck.update(state=state, state_text="x")
    reports = {
        "node1": _node([_rank(0, 0, WAIT_BARRIER), _rank(1, 1, WAIT_BARRIER)]),
        "node2": _node([_rank(2, 0, WAIT_BARRIER), stuck]),
    }
    (culprit,) = hang.diagnose(plan, reports)["culprits"]
    assert culprit["rank"] == 3 and words in culprit["reason"]
    assert ("nfs_wait_bit_killable" in culprit["reason"]) == (state == "D")


def test_a_missing_rank_and_a_lost_node(plan):
    reports = {
        "node1": _node([_rank(0, 0, WAIT_BARRIER)]),
        "node2": {"reachable": False, "error": "ssh: connect to host 172.30.0.12 port 2222: No route to host"},
    }
    finding = hang.diagnose(plan, reports)
    assert finding["confidence"] == "high"
    node_lost, gone = finding["culprits"]
    assert node_lost["node"] == "node2" and node_lost["rank"] is None and node_lost["ranks"] == [2, 3]
    assert "No route to host" in node_lost["reason"]
    assert (gone["node"], gone["rank"], gone["state"]) == ("node1", 1, "gone")


def test_without_stacks_a_busy_rank_among_sleepers(plan):
    reports = {
        "node1": _node([_rank(0, 0, None), _rank(1, 1, None, state="R", cpu=99.0)]),
        "node2": _node([_rank(2, 0, None), _rank(3, 1, None)]),
    }
    finding = hang.diagnose(plan, reports)
    assert [c["rank"] for c in finding["culprits"]] == [1] and finding["confidence"] == "low"
    assert finding["finding"].startswith("no stacks (py-spy is not installed here")


def test_a_failed_probe_is_not_a_culprit(plan):
    reports = parse_diagnosis("diag\tnode1\tfailed\tTraceback: boom\n", ["node1", "node2"])
    assert reports["node1"] == {"reachable": True, "probe_error": "Traceback: boom"}
    assert reports["node2"]["probe_error"] == "diagnose.sh printed nothing for this node"
    finding = hang.diagnose(plan, reports)
    assert finding["culprits"] == [] and {r["state"] for r in finding["ranks"]} == {"unknown"}


def test_parse_diagnosis_lines():
    text = (
        'diag\tnode1\tok\t{"node": "node1", "ranks": [], "missing_ranks": [0, 1]}\n'
        "diag\tnode2\tunreachable\tssh: connect to host 172.30.0.12 port 2222: Connection timed out\n"
    )
    reports = parse_diagnosis(text, ["node1", "node2"])
    assert reports["node1"]["reachable"] and reports["node1"]["missing_ranks"] == [0, 1]
    assert reports["node2"] == {
        "reachable": False,
        "error": "ssh: connect to host 172.30.0.12 port 2222: Connection timed out",
    }


def test_evidence_text_says_who_is_suspected(plan):
    reports = {
        "node1": _node([_rank(0, 0, WAIT_ALLREDUCE), _rank(1, 1, WAIT_ALLREDUCE)]),
        "node2": _node([_rank(2, 0, STOPPED, state="T"), _rank(3, 1, None)]),
    }
    finding = hang.diagnose(plan, reports)
    rows = {r["rank"]: r for r in finding["ranks"]}
    text = hang.rank_evidence(rows[2], finding["stacks"]["2"], finding)
    assert "verdict     CULPRIT: state T" in text and "Thread 160" in text
    other = hang.rank_evidence(rows[3], None, finding)
    assert "verdict     not suspected" in other and "no stack: py-spy is not installed here" in other


def test_hang_limit():
    assert hang.hang_limit([], 30) == 30
    assert hang.hang_limit([], None) == 300  # no step time yet: the floor
    assert hang.hang_limit([1.0] * 10 + [50.0], None) == 300  # 10 x p90 (1 s) is below the floor
    assert hang.hang_limit([40.0] * 10, None) == 400
    assert hang.hang_limit([40.0] * 10, None, started=False) == 1800
    assert hang.hang_limit([], 30, saving=True) == 1800
    assert hang.line_interval_s({"iteration": 10}, {"iteration": 20, "elapsed_ms": 500.0}) == 5.0
    assert hang.line_interval_s(None, {"iteration": 1, "elapsed_ms": 500.0}) is None


def test_checkpoint_events_of_megatron_and_the_smoke_job():
    lines = [
        "saving checkpoint at iteration    1000 to /ckpt in torch_dist format",
        "  successfully saved checkpoint from iteration    1000 to /ckpt [ t 1/1, p 1/1 ]",
        "saving checkpoint at iteration      20 to /data/ckpt in torch format",
    ]
    assert hang.checkpoint_events(lines) == [("start", 1000), ("done", 1000), ("start", 20)]


def test_watch_options_accept_and_convert():
    options = watch_options({"hang_timeout": "30", "on_hang": "warn", "straggler_ratio": "1.5", "wait": "false"})
    assert options["hang_timeout"] == 30.0 and options["on_hang"] == "warn" and options["wait"] is False
    assert options["straggler_ratio"] == 1.5 and options["poll_interval"] == 5.0
    assert watch_options({})["hang_timeout"] is None


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ({"hang_timeout": ""}, "-e hang_timeout= is empty"),
        ({"hang_timeout": "soon"}, "-e hang_timeout='soon' is not a number"),
        ({"hang_timeout": "0"}, "must be a number > 0 or auto"),
        ({"hang_timeout": "2"}, "shorter than poll_interval"),
        ({"on_hang": "kill"}, "-e on_hang='kill' must be one of stop, warn"),
        ({"straggler_ratio": "1"}, "-e straggler_ratio='1' must be a number > 1"),
        ({"wait": "maybe"}, "-e wait='maybe' must be true or false"),
        ({"poll_interval": "0.5"}, "-e poll_interval='0.5' must be a number >= 1"),
        ({"train_wait": "-1"}, "-e train_wait='-1' must be a number >= 0"),
        ({"train_wait": "inf"}, "-e train_wait='inf' is not a finite number"),
        ({"max_restarts": "²"}, "-e max_restarts='²' is not an integer"),
    ],
)
def test_watch_options_refuse_naming_the_option(raw, words):
    with pytest.raises(Exception) as caught:
        watch_options(raw)
    assert words in str(caught.value)
