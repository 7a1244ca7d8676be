"""Recovery without a person: which failed attempts start another, and what the attempts cost."""

from __future__ import annotations

import json

import pytest
from trainops import recovery


def _attempt(k, **over):
    base = {
        "attempt": k, "started_at": 1000.0 * k, "ended_at": 1000.0 * k + 600, "state": "failed", "kind": "exited",
        "node": "node2", "cause": "torchrun exited 1", "failure_kind": "child_failed", "exception": None,
        "resumed_from": None if k == 1 else 10 * (k - 1), "last_iteration": 10 * k + 3,
        "checkpoint_at_end": 10 * k, "first_iteration_at": 1000.0 * k + 30,
    }  # fmt: skip
    return {**base, **over}


def test_a_rank_lost_mid_run_is_restarted_while_restarts_remain():
    decision = recovery.retry_decision([_attempt(1)], max_restarts=1)
    assert decision == {"retry": True, "reason": "attempt 1 failed (exited): restart 1 of 1", "replan": False}


def test_max_restarts_ends_the_run_with_every_attempt_counted():
    decision = recovery.retry_decision([_attempt(1), _attempt(2)], max_restarts=1)
    assert decision == {"retry": False, "reason": "max_restarts=1 reached: 2 attempts failed"}


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"state": "finished"}, "attempt 1 finished"),
        ({"last_iteration": None}, "failed before its first iteration"),
        ({"failure_kind": "oom"}, "out of memory"),
        ({"exception": "FileNotFoundError: /data/x.bin"}, "a missing file fails the same way again"),
        ({"kind": None}, "not one a restart cures"),
    ],
)
def test_failures_a_restart_does_not_cure_end_the_run(change, words):
    decision = recovery.retry_decision([_attempt(1, **change)], max_restarts=3)
    assert not decision["retry"] and words in decision["reason"]


def test_max_restarts_zero_is_todays_behaviour():
    assert recovery.retry_decision([_attempt(1)], max_restarts=0)["reason"].startswith("max_restarts=0")


def test_stop_yml_ends_the_restarts():
    decision = recovery.retry_decision([_attempt(1)], max_restarts=3, stop_requested=True)
    assert decision == {"retry": False, "reason": "stop.yml stopped the run: no new attempt"}


def test_a_lost_node_ends_the_run_naming_it_and_suggesting_elastic():
    decision = recovery.retry_decision([_attempt(1, kind="lost")], max_restarts=1, lost={"node2": "unreachable (x)"})
    assert not decision["retry"]
    assert decision["reason"].startswith("node2: unreachable (x). The run cannot go on without node2")
    assert "-e elastic=true" in decision["reason"]


def test_two_attempts_in_a_row_without_a_new_checkpoint_end_the_run():
    first = _attempt(1)
    stalled = [_attempt(2, resumed_from=10, checkpoint_at_end=10), _attempt(3, resumed_from=10, checkpoint_at_end=10)]
    assert recovery.retry_decision([first, stalled[0]], max_restarts=5)["retry"]
    decision = recovery.retry_decision([first, *stalled], max_restarts=5)
    assert not decision["retry"] and "attempts 2 and 3 made no progress beyond checkpoint 10" in decision["reason"]


def test_lost_nodes_are_those_out_of_the_play_or_unreachable_now():
    plan = {"nodes": [{"name": "node1"}, {"name": "node2"}, {"name": "node3"}]}
    reach = {"node1": {"ping": "pong"}, "node3": {"unreachable": True, "msg": "timed\nout"}}
    lost = recovery.lost_nodes(plan, ["node1", "node3"], reach)
    assert lost == {"node2": "left the play (unreachable, or a task on it failed)", "node3": "unreachable (timed out)"}


def test_attempt_record_from_the_watchers_outcome_and_the_logs_summary():
    outcome = {"state": "failed", "kind": "exited", "node": "node2", "reason": "torchrun exited 1",
               "first_iteration_s": 12.5}  # fmt: skip
    failure = {"kind": "child_failed", "exception": "RuntimeError", "error_source": {"kind": "oom"}}
    record = recovery.attempt_record(2, 100.0, 160.0, outcome, {"last_iteration": 17, "failure": failure}, 10, 15)
    assert record == {
        "attempt": 2, "started_at": 100.0, "ended_at": 160.0, "state": "failed", "kind": "exited", "node": "node2",
        "rank": None, "cause": "torchrun exited 1", "seen_first": "torchrun exited 1", "failure_kind": "oom",
        "exception": "RuntimeError",
        "resumed_from": 10, "last_iteration": 17, "checkpoint_at_end": 15, "first_iteration_at": 112.5,
        "save_failure": None,
    }  # fmt: skip


def test_goodput_counts_lost_iterations_recovery_time_and_productive_time():
    first = _attempt(1, started_at=0.0, ended_at=100.0, last_iteration=13, checkpoint_at_end=10)
    final = _attempt(2, started_at=110.0, ended_at=200.0, state="finished", resumed_from=10, last_iteration=30,
                     checkpoint_at_end=30, first_iteration_at=125.0)  # fmt: skip
    got = recovery.goodput([first, final], seconds_per_iteration=5.0)
    assert got == {
        "attempts": 2, "restarts": 1, "iterations_lost": 3, "time_to_recover_s": [25.0], "wall_s": 200.0,
        "productive_s": 150.0, "goodput": 0.75,
    }  # fmt: skip
    assert recovery.goodput([first, final], None)["goodput"] is None


def test_an_attempt_is_set_aside_with_its_record_and_read_back(tmp_path):
    run = tmp_path / "run"
    (run / "plan").mkdir(parents=True)
    (run / "node1").mkdir()
    (run / "node1" / "rank0.log").write_text("x")
    (run / "summary.json").write_text("{}")
    for record in ("run.json", "events.jsonl"):  # the run's record, read by every attempt: it stays
        (run / record).write_text("{}")
    recovery.write_attempt(str(run), _attempt(1), set_aside=True)
    assert sorted(p.name for p in run.iterdir()) == ["attempt-1", "events.jsonl", "plan", "run.json"]
    assert (run / "attempt-1" / "node1" / "rank0.log").read_text() == "x"
    (run / "node1").mkdir()
    recovery.write_attempt(str(run), _attempt(2, state="finished"), set_aside=False)
    assert (run / "node1").is_dir() and json.loads((run / "attempt-2" / "attempt.json").read_text())["attempt"] == 2
    assert [a["attempt"] for a in recovery.read_attempts(str(run))[0]] == [1, 2]
    assert recovery.attempt_dirs(str(run)) == ["attempt-1", "attempt-2"]


def test_the_report_lines_name_each_attempt_and_the_goodput():
    attempts = [_attempt(1, started_at=0.0, ended_at=100.0), _attempt(2, state="finished", started_at=110.0,
                                                                      ended_at=200.0)]  # fmt: skip
    lines = recovery.attempts_table(attempts, recovery.goodput(attempts, 5.0))
    assert (
        lines[0]
        == "attempt 1    from a fresh start, reached iteration 13, 100 s, failed (exited, node2): torchrun exited 1"
    )
    assert lines[1].startswith("attempt 2    from checkpoint 10, reached iteration 23, 90 s, finished")
    assert lines[2].startswith("recovery     1 restart(s), 3 iteration(s) lost, time to recover")
    assert recovery.attempts_table(attempts[:1], {}) == []


def test_a_lost_node_with_elastic_is_replanned_on_the_nodes_that_remain():
    lost = {"node2": "unreachable (x)"}
    decision = recovery.retry_decision([_attempt(1, kind="lost")], 1, lost=lost, elastic=True, plan_nodes=2)
    assert decision["retry"] and decision["replan"]
    assert decision["reason"] == "attempt 1 failed (lost): restart 1 of 1, re-planned without node2 (-e elastic=true)"
    refused = recovery.retry_decision([_attempt(1, kind="lost")], 1, lost=lost, elastic=True, min_nodes=2, plan_nodes=2)
    assert not refused["retry"] and "1 node(s) remain, fewer than min_nodes=2" in refused["reason"]


def test_the_replan_note_says_what_changed_and_why():
    old = {"nodes": [{"name": "node1"}, {"name": "node2"}], "dp": 4, "num_microbatches": 2, "global_batch_size": 8}
    new = {"nodes": [{"name": "node1"}], "dp": 2, "num_microbatches": 4, "global_batch_size": 8}
    assert recovery.replan_note(old, new, {"node2": "unreachable"}) == (
        "nodes 2 -> 1, dp 4 -> 2, micro-batches 2 -> 4, global batch 8 unchanged, node2 left out: unreachable"
    )
    # a spare in the lost node's place: the layout stays
    spare = dict(old, nodes=[{"name": "node1"}, {"name": "node3"}])
    assert recovery.replan_note(old, spare, {"node2": "hang culprit"}) == (
        "nodes 2 -> 2, global batch 8 unchanged, node2 left out: hang culprit, node3 (a spare) takes a place"
    )


def test_the_replan_note_says_the_world_size_when_a_spare_has_fewer_slots():
    old = {"nodes": [{"name": "node1", "slots": 8}, {"name": "node2", "slots": 8}], "world_size": 16, "dp": 16,
           "num_microbatches": 4, "global_batch_size": 192}  # fmt: skip
    new = dict(old, nodes=[{"name": "node1", "slots": 8}, {"name": "small", "slots": 4}], world_size=12, dp=12,
               num_microbatches=16)  # fmt: skip
    assert recovery.replan_note(old, new, {"node2": "unreachable"}) == (
        "nodes 2 -> 2, world size 16 -> 12 ranks, dp 16 -> 12, micro-batches 4 -> 16, global batch 192 unchanged, "
        "node2 left out: unreachable, small (a spare) takes a place with 4 slot(s) for node2's 8"
    )
    # two lost, one spare: it takes the first lost node's place (rank order), the other is dropped
    three = dict(old, nodes=[{"name": f"node{i}", "slots": 8} for i in (1, 2, 3)], world_size=24, dp=24)
    one = dict(old, nodes=[{"name": "node1", "slots": 8}, {"name": "small", "slots": 4}], world_size=12, dp=12)
    note = recovery.replan_note(three, one, {"node2": "hang", "node3": "hang"})
    assert note.startswith("nodes 3 -> 2, world size 24 -> 12 ranks, dp 24 -> 12")
    assert note.endswith("small (a spare) takes a place with 4 slot(s) for node2's 8")


def test_the_last_iteration_comes_from_the_watcher_when_the_last_ranks_node_is_gone():
    outcome = {"state": "failed", "kind": "exited", "node": "node1", "last_iteration": {"iteration": 12}}
    record = recovery.attempt_record(1, 0.0, 60.0, outcome, {"last_iteration": None, "failure": None}, None, 10)
    assert record["last_iteration"] == 12
    assert recovery.retry_decision([record], 1, lost={"node2": "unreachable"}, elastic=True, plan_nodes=2)["retry"]


def test_a_checkpoint_proves_the_iterations_before_it_when_no_log_line_was_read():
    outcome = {"state": "failed", "kind": "exited", "node": "node1", "last_iteration": None}
    record = recovery.attempt_record(1, 0.0, 60.0, outcome, {"last_iteration": None}, None, 30)
    assert record["last_iteration"] == 30


KILLED = {"state": "failed", "kind": "exited", "node": "node1", "reason": "torchrun on node1 exited with status 1"}


def test_a_save_that_did_not_load_is_blamed_and_the_next_attempt_falls_back_before_it():
    """Resumed from 10, no rank said it loaded it, and no iteration came: the save is to blame, and the attempt is
    retried from the save before although it failed before its first iteration."""
    summary = {"last_iteration": None, "checkpoints": {"loaded": []}, "failure_text": "node1 rank 0: RuntimeError"}
    why = recovery.save_failure(KILLED, summary, 10)
    assert why.startswith("did not load iteration 10's save (no rank said it loaded it") and "RuntimeError" in why
    first = _attempt(1, checkpoint_at_end=10)
    second = dict(_attempt(2, resumed_from=10, checkpoint_at_end=10, last_iteration=10), save_failure=why)
    decision = recovery.retry_decision([first, second], max_restarts=3)
    assert decision["retry"] and decision["fallback"] == 10
    assert "falls back to the verified save before" in decision["reason"]
    # loaded, and trained past it: not the save's fault
    loaded = {"last_iteration": 14, "checkpoints": {"loaded": [{"iteration": 10}]}}
    assert recovery.save_failure(KILLED, loaded, 10) is None
    # a lost node says nothing of the save
    assert recovery.save_failure(dict(KILLED, kind="lost"), summary, 10) is None
    assert recovery.save_failure(KILLED, summary, None) is None


def test_a_nan_just_after_the_resume_blames_the_save_and_a_late_one_does_not():
    early = {"last_iteration": 12, "checkpoints": {"loaded": [{"iteration": 10}]},
             "first_nan": {"iteration": 11, "message": "iteration 11: lm loss not finite"}}  # fmt: skip
    why = recovery.save_failure(KILLED, early, 10)
    assert "went NaN within 10 iterations of resuming from iteration 10's save" in why
    late = dict(early, last_iteration=40, first_nan={"iteration": 35, "message": "iteration 35: lm loss not finite"})
    assert recovery.save_failure(KILLED, late, 10) is None


def test_the_same_failure_on_the_save_before_ends_the_run():
    first = _attempt(1, checkpoint_at_end=10)
    second = dict(_attempt(2, resumed_from=10, last_iteration=10), save_failure="did not load iteration 10's save")
    third = dict(_attempt(3, resumed_from=5, last_iteration=5), save_failure="did not load iteration 5's save")
    decision = recovery.retry_decision([first, second, third], max_restarts=5)
    assert not decision["retry"] and decision["reason"].startswith("attempts 2 and 3 failed the same way on two saves")
    assert decision["reason"].endswith("the cause is not the save")
    again = dict(third, resumed_from=10, save_failure="did not load iteration 10's save")
    decision = recovery.retry_decision([first, second, again], max_restarts=5)
    assert not decision["retry"] and "iteration 10's save failed twice" in decision["reason"]
    # max_restarts still bounds the fall backs
    assert not recovery.retry_decision([first, second], max_restarts=1)["retry"]


def test_iterations_lost_count_from_the_save_the_next_attempt_resumed_from():
    first = _attempt(1, started_at=0.0, ended_at=100.0, checkpoint_at_end=10, last_iteration=13)
    second = _attempt(2, started_at=110.0, ended_at=200.0, state="finished", resumed_from=5, last_iteration=20,
                      checkpoint_at_end=20)  # fmt: skip
    assert recovery.goodput([first, second], 1.0)["iterations_lost"] == 8  # 13 - 5, not 13 - 10
