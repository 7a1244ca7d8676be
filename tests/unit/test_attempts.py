"""The run's attempts as a state machine (trainops.attempts): each step from what the nodes report, the state in
the run's attempts.json, and the records and decisions train.yml acts on."""

from __future__ import annotations

import json

import pytest
from presets import load_preset, make_plan
from trainops.attempts import STATE_FILE, AttemptError, Attempts

HOSTS = [
    {"name": f"node{i}", "ansible_host": f"172.30.0.{10 + i}", "slots": 2, "accelerator": "cpu"} for i in (1, 2, 3)
]
NAMES = [host["name"] for host in HOSTS]
OPTIONS = {"max_restarts": 2, "elastic": False, "min_nodes": 1}
FANOUT_OK = {"rc": 0, "stdout": "", "stderr": ""}
LINE = {"iteration": 13}


def _plan(hosts=HOSTS, gbs=12):
    layout = {"train_iters": 100, "seq_length": 128, "gbs": gbs, "precision": "bf16"}
    return make_plan(model=load_preset("tiny"), hosts=hosts, layout=layout, run_id="r1", exp_name="attempts")


def _exited(node="node2"):
    return {"state": "failed", "kind": "exited", "node": node, "reason": f"torchrun on {node} exited with status 1",
            "last_iteration": LINE, "first_iteration_s": 5.0}  # fmt: skip


def _summary(last=13, node="node2", rank=3):
    failure = {"kind": "child_failed", "node": node, "rank": rank, "message": "Signal 9 (SIGKILL)"}
    return {"last_iteration": last, "failure": failure, "failure_text": f"{node} rank {rank}: Signal 9 (SIGKILL)"}


def test_the_record_names_the_culprit_not_the_first_node_the_watcher_saw_exit(tmp_path):
    """Rank 2 SIGKILLed on node2: node1's torchrun, whose ranks lost their peer, exits first. The record (and any
    decision that reads it) names node2, the culprit of the report; what the watcher saw first is kept."""
    Attempts(str(tmp_path)).begin(_plan(), "", now=100.0, run_started=1.0)
    Attempts(str(tmp_path)).end(FANOUT_OK, _exited("node1"), now=160.0)
    judged = Attempts(str(tmp_path)).judge(OPTIONS, _summary(rank=2), {"checkpoint": "10", "restarting": True},
                                           NAMES, {})  # fmt: skip
    assert judged["message"].startswith("attempt 1 failed: node2 rank 2: Signal 9 (SIGKILL) -> ")
    record = json.loads((tmp_path / "attempt-1" / "attempt.json").read_text())
    assert (record["node"], record["rank"], record["cause"]) == ("node2", 2, "node2 rank 2: Signal 9 (SIGKILL)")
    assert record["seen_first"] == "torchrun on node1 exited with status 1"


def test_with_elastic_a_hangs_culprit_is_isolated_and_the_run_re_planned_without_it(tmp_path):
    Attempts(str(tmp_path)).begin(_plan(), "", now=100.0, run_started=1.0)
    hung = {"state": "failed", "kind": "hang", "node": "node2", "last_iteration": LINE, "first_iteration_s": 5.0,
            "reason": "node2 rank 2 (local rank 0): hung: state T: stopped by a signal"}  # fmt: skip
    Attempts(str(tmp_path)).end(FANOUT_OK, hung, now=160.0)
    summary = {"last_iteration": 13, "failure": {"kind": "hang", "node": "node2", "rank": 2},
               "failure_text": "node2 rank 2 (local rank 0): hung: state T: stopped by a signal"}  # fmt: skip
    marks = {"checkpoint": "10", "restarting": True}
    judged = Attempts(str(tmp_path)).judge(dict(OPTIONS, elastic=True), summary, marks, NAMES, {})
    assert judged["next"] == "replan" and list(judged["lost"]) == ["node2"]
    assert judged["lost"]["node2"].startswith("isolated as the hang's culprit in attempt 1 (node2 rank 2")
    # without elastic the restart goes on the same nodes, as before
    Attempts(str(tmp_path / "b")).begin(_plan(), "", now=100.0, run_started=1.0)
    Attempts(str(tmp_path / "b")).end(FANOUT_OK, hung, now=160.0)
    again = Attempts(str(tmp_path / "b")).judge(OPTIONS, summary, marks, NAMES, {})
    assert again["next"] == "relaunch" and again["lost"] == {}


def test_a_node_found_sick_before_the_next_attempt_gets_no_rank_in_it(tmp_path):
    """The quick health check after a failure finds node3 sick (its disk is full): with elastic the next attempt is
    re-planned without it; without, the run ends naming it, instead of relaunching on it."""
    marks = {"checkpoint": "10", "restarting": True}
    sick = {"node3": "disk: 1.00 MiB free at /data/mtt-train-ops/checkpoints/x: not one checkpoint fits"}
    for name, elastic, step in (("elastic", True, "replan"), ("fixed", False, "end")):
        run = Attempts(str(tmp_path / name))
        run.begin(_plan(), "", now=100.0, run_started=1.0)
        run.end(FANOUT_OK, _exited(), now=160.0)
        judged = Attempts(str(tmp_path / name)).judge(dict(OPTIONS, elastic=elastic), _summary(), marks, NAMES, {},
                                                      sick)  # fmt: skip
        assert judged["next"] == step
        assert judged["lost"] == {"node3": f"sick in the health check before the next attempt ({sick['node3']})"}
    assert "The run cannot go on without node3" in judged["decision"]["reason"]


def _reread(tmp_path) -> Attempts:
    """A new instance: every step must work from attempts.json alone."""
    return Attempts(str(tmp_path))


def test_a_cured_failure_relaunches_from_the_checkpoint_then_finishes(tmp_path):
    plan = _plan()
    first = Attempts(str(tmp_path)).begin(plan, "", now=100.0, run_started=1.0)
    assert (first["number"], first["resumes_from"], first["plan"]["run_id"]) == (1, None, "r1")
    assert _reread(tmp_path).end(FANOUT_OK, _exited(), now=160.0)["outcome"]["kind"] == "exited"
    judged = _reread(tmp_path).judge(OPTIONS, _summary(), {"checkpoint": "10", "restarting": True}, ["node1",
                                     "node2", "node3"], {})  # fmt: skip
    assert judged["next"] == "relaunch" and judged["decision"]["retry"]
    assert judged["message"] == (
        "attempt 1 failed: node2 rank 3: Signal 9 (SIGKILL) -> attempt 1 failed (exited): restart 1 of 2; "
        "starting attempt 2 from checkpoint 10"
    )
    record = json.loads((tmp_path / "attempt-1" / "attempt.json").read_text())
    assert (record["resumed_from"], record["checkpoint_at_end"], record["last_iteration"]) == (None, 10, 13)
    (tmp_path / "node1").mkdir()  # a collected node's logs: set aside into attempt-1/ by prepare
    assert _reread(tmp_path).prepare(restarting=True)["next"] == "relaunch"
    assert (tmp_path / "attempt-1" / "node1").is_dir() and (tmp_path / STATE_FILE).is_file()
    second = _reread(tmp_path).begin(plan, "ignored after the first attempt", now=200.0, run_started=1.0)
    assert (second["number"], second["resumes_from"], second["outcome"]) == (2, 10, None)
    done = _reread(tmp_path).end(FANOUT_OK, {"state": "finished"}, now=260.0)
    assert done["outcome"] == {"state": "finished"} and done["decision"] is None


def test_stop_yml_between_the_attempts_ends_the_restarts(tmp_path):
    attempts = Attempts(str(tmp_path))
    attempts.begin(_plan(), "", now=0.0, run_started=1.0)
    attempts.end(FANOUT_OK, _exited(), now=10.0)
    attempts.judge(OPTIONS, _summary(), {"checkpoint": "10", "restarting": True}, ["node1", "node2", "node3"], {})
    ended = attempts.prepare(restarting=False)
    assert ended["next"] == "end" and ended["decision"]["reason"] == "stop.yml stopped the run: no new attempt"
    with pytest.raises(AttemptError, match="was not followed by another"):
        attempts.begin(_plan(), "", now=20.0, run_started=1.0)
    assert not (tmp_path / "attempt-1" / "plan").exists()  # nothing set aside: the run ends here


def test_the_restart_mark_gone_at_the_judgement_ends_the_run(tmp_path):
    attempts = Attempts(str(tmp_path))
    attempts.begin(_plan(), "7", now=0.0, run_started=1.0)
    attempts.end(FANOUT_OK, _exited(), now=10.0)
    judged = attempts.judge(OPTIONS, _summary(), {"checkpoint": "10", "restarting": False}, ["node1", "node2",
                            "node3"], {})  # fmt: skip
    assert judged["next"] == "end" and "stop.yml" in judged["decision"]["reason"] and judged["resumes_from"] == 7


def test_a_lost_node_is_replanned_around_with_elastic(tmp_path):
    attempts = Attempts(str(tmp_path))
    plan = attempts.begin(_plan(), "", now=0.0, run_started=1.0)["plan"]
    attempts.end(FANOUT_OK, {"state": "failed", "kind": "lost", "node": "node3", "reason": "node3 lost"}, now=9.0)
    reach = {"node3": {"unreachable": True, "msg": "ssh: connect to host 172.30.0.13: No route"}}
    judged = attempts.judge(dict(OPTIONS, elastic=True), _summary(), {"checkpoint": "10", "restarting": True},
                            ["node1", "node2"], reach)  # fmt: skip
    assert judged["next"] == "replan" and list(judged["lost"]) == ["node3"]
    assert "left the play" in judged["lost"]["node3"]
    smaller = _plan(HOSTS[:2])
    replanned = attempts.replanned(smaller)
    assert "nodes 3 -> 2" in replanned["decision"]["reason"] and "node3 left out" in replanned["decision"]["reason"]
    attempts.prepare(restarting=True)
    second = attempts.begin(plan, "", now=20.0, run_started=1.0)
    assert [n["name"] for n in second["plan"]["nodes"]] == ["node1", "node2"]
    assert second["plan"]["resume"] == {"iteration": 10, "from": plan["checkpoint_dir"]}


def test_a_refused_replan_ends_the_run_saying_why(tmp_path):
    attempts = Attempts(str(tmp_path))
    attempts.begin(_plan(), "", now=0.0, run_started=1.0)
    attempts.end(FANOUT_OK, {"state": "failed", "kind": "lost", "node": "node3", "reason": "node3 lost"}, now=9.0)
    attempts.judge(dict(OPTIONS, elastic=True), _summary(), {"checkpoint": "10", "restarting": True},
                   ["node1", "node2"], {})  # fmt: skip
    refused = attempts.replanned(refused="gbs 12 is not a multiple of dp 4 x mbs 1 ")
    assert refused["next"] == "end"
    assert (
        refused["decision"]["reason"]
        == "the re-plan without node3 was refused: gbs 12 is not a multiple of dp 4 x mbs 1"
    )


def test_slurm_amends_the_outcome_before_the_judgement(tmp_path):
    attempts = Attempts(str(tmp_path))
    attempts.begin(_plan(), "", now=0.0, run_started=1.0)
    with pytest.raises(AttemptError, match="has not ended"):
        attempts.amend({"state": "failed"})
    attempts.end(FANOUT_OK, {"state": "finished"}, now=9.0)
    timed_out = {"state": "failed", "kind": "timeout", "node": "node1", "reason": "Slurm job 7 TIMEOUT"}
    assert attempts.amend(timed_out)["outcome"]["kind"] == "timeout"
    judged = attempts.judge(OPTIONS, _summary(), {"checkpoint": "10", "restarting": True}, NAMES, {})
    assert judged["next"] == "end" and "not one a restart cures" in judged["decision"]["reason"]


def test_a_failed_fanout_is_named_on_the_master_and_a_lost_master_reads_no_marks(tmp_path):
    attempts = Attempts(str(tmp_path))
    attempts.begin(_plan(), "", now=0.0, run_started=1.0)
    ended = attempts.end({"rc": 255, "stderr": "ssh: connect refused", "stdout": ""}, None, now=1.0)
    assert (ended["outcome"]["kind"], ended["outcome"]["node"]) == ("launch", "node1")
    judged = attempts.judge(OPTIONS, None, None, ["node1", "node2", "node3"], {})
    assert judged["next"] == "end" and "not one a restart cures" in judged["decision"]["reason"]


def test_steps_out_of_order_are_refused(tmp_path):
    attempts = Attempts(str(tmp_path))
    with pytest.raises(AttemptError, match="no attempt has begun"):
        attempts.end(FANOUT_OK, None, now=0.0)
    attempts.begin(_plan(), "", now=0.0, run_started=1.0)
    attempts.end(FANOUT_OK, _exited(), now=1.0)
    attempts.judge(OPTIONS, _summary(), {"checkpoint": "10", "restarting": True}, ["node1", "node2", "node3"], {})
    with pytest.raises(AttemptError, match="was not to be re-planned"):
        attempts.replanned(_plan())


def test_a_new_train_yml_run_under_the_same_run_id_starts_afresh_keeping_the_old_state(tmp_path):
    attempts = Attempts(str(tmp_path))
    attempts.begin(_plan(), "", now=0.0, run_started=1000.0)
    attempts.end(FANOUT_OK, {"state": "finished"}, now=10.0)
    again = _reread(tmp_path).begin(_plan(), "30", now=50.0, run_started=2000.0)
    assert (again["number"], again["resumes_from"], again["outcome"]) == (1, 30, None)
    kept = json.loads((tmp_path / "attempts-1000.json").read_text())
    assert kept["current"]["outcome"] == {"state": "finished"} and kept["run_started"] == 1000.0


def _failed_attempt_that_resumed_from(tmp_path, summary, marks):
    """Attempt 1 killed after save 10; attempt 2 resumes from the scan's choice, 10, and fails as ``summary``
    says."""
    attempts = Attempts(str(tmp_path))
    attempts.begin(_plan(), "", now=0.0, run_started=1.0)
    attempts.end(FANOUT_OK, _exited(), now=10.0)
    attempts.judge(OPTIONS, _summary(), {"checkpoint": "10", "restarting": True}, NAMES, {})
    chosen = {"resume": "10", "refused": "", "lines": [], "saves": [{"name": "iter_0000010", "verdict": "verified"}]}
    resumed = attempts.resume(chosen)
    assert resumed["message"] == "resume       attempt 2 resumes from iteration 10's save (verified)"
    attempts.prepare(restarting=True)
    second = attempts.begin(_plan(), "", now=20.0, run_started=1.0)
    assert second["resumes_from"] == 10 and second["checked_saves"] == chosen["saves"]
    attempts.end(FANOUT_OK, _exited(), now=30.0)
    return attempts.judge(OPTIONS, summary, marks, NAMES, {})


def test_a_save_an_attempt_could_not_load_is_never_chosen_again_and_the_next_attempt_falls_back(tmp_path):
    """Attempt 2 resumed from save 10 and failed before any rank said it loaded it: the save is blamed (kept in
    failed_loads, which the next scan's judgement sets aside), and attempt 3 begins from the scan's next choice,
    save 5, although attempt 2 failed before its first iteration."""
    no_load = {"last_iteration": None, "checkpoints": {"loaded": []},
               "failure": {"kind": "traceback", "node": "node1", "rank": 0, "exception": "RuntimeError"},
               "failure_text": "node1 rank 0: RuntimeError: PytorchStreamReader failed"}  # fmt: skip
    judged = _failed_attempt_that_resumed_from(tmp_path, no_load, {"checkpoint": "10", "restarting": True})
    assert judged["next"] == "relaunch"
    assert judged["failed_loads"]["10"].startswith("did not load iteration 10's save")
    assert judged["message"].endswith("starting attempt 3 from the verified save before iteration 10")
    record = json.loads((tmp_path / "attempt-2" / "attempt.json").read_text())
    assert record["save_failure"] == judged["failed_loads"]["10"]
    fallback = {
        "resume": "5",
        "refused": "",
        "saves": [],
        "set_aside": ["iter_0000010"],
        "lines": ["checkpoint   iteration 10 set aside (not resumed from): an attempt could not resume from it (...)"],
    }
    said = _reread(tmp_path).resume(fallback)["message"].splitlines()
    assert said[0].startswith("checkpoint   iteration 10 set aside") and said[-1].endswith(
        "from iteration 5's save (the tracker's, not checked: -e verify_checkpoints=false)"
    )
    _reread(tmp_path).prepare(restarting=True)
    third = _reread(tmp_path).begin(_plan(), "", now=40.0, run_started=1.0)
    assert third["number"] == 3 and third["resumes_from"] == 5
    assert third["plan"]["resume"]["iteration"] == 5
    # save 10 was set aside: a save attempt 3 writes at iteration 10 anew is not blamed for the old one
    assert third["failed_loads"] == {}


def test_no_save_left_to_trust_ends_the_run_with_the_reasons(tmp_path):
    judged = _failed_attempt_that_resumed_from(tmp_path, _summary(last=17), {"checkpoint": "15", "restarting": True})
    assert judged["next"] == "relaunch" and judged["failed_loads"] == {}
    refused = {"resume": "", "refused": "node1: not one checkpoint in /x can be resumed from (...)", "lines": []}
    ended = _reread(tmp_path).resume(refused)
    assert ended["next"] == "end" and ended["decision"]["reason"].startswith("no save to resume from: node1: not one")
    assert ended["message"].startswith("attempt 3 is not started: no save to resume from")
    with pytest.raises(AttemptError, match="is not followed by another"):
        _reread(tmp_path).resume(refused)
