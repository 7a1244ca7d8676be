"""The site's incident record (trainops.incidents): what a run adds, when a node is left out, and clearing it."""

from __future__ import annotations

import json

from trainops import incidents

DAY = 86400.0
NOW = 100 * DAY


def _attempt(n, kind="exited", node="node2", cause="node2 rank 2 (local rank 0): Signal 9 (SIGKILL)", **extra):
    return {"attempt": n, "state": "failed", "kind": kind, "node": node, "rank": 2, "cause": cause,
            "ended_at": NOW - DAY, **extra}  # fmt: skip


def test_a_runs_incidents_name_each_attempts_culprit_and_each_lost_node():
    attempts = [_attempt(1, kind="hang", cause="node2 rank 2 (local rank 0): hung: state T"), _attempt(2)]
    attempts.append({"attempt": 3, "state": "finished", "node": None})
    found = incidents.from_run("exp/r1", attempts, {"state": "finished"}, nodes_lost=["node3"])
    assert [(i["attempt"], i["node"], i["kind"]) for i in found] == [
        (1, "node2", "hang"), (2, "node2", "dead_rank"), (3, "node3", "lost")
    ]  # fmt: skip
    assert found[0]["evidence"] == "exp/r1/attempt-1" and found[0]["cause"].endswith("hung: state T")
    assert all(i["counts"] for i in found)  # a hang, a SIGKILL, a lost node


def test_an_attempt_that_failed_on_its_save_implicates_no_node():
    """Attempt 2 could not load the save it resumed from: the save is set aside, and its node gets no incident."""
    spoiled = _attempt(2, cause="node2 rank 2 (local rank 0): CheckpointException",
                       save_failure="did not load iteration 10's save")  # fmt: skip
    found = incidents.from_run("exp/r1", [_attempt(1), spoiled], {"state": "finished"}, nodes_lost=[])
    assert [(i["attempt"], i["node"]) for i in found] == [(1, "node2")]


def test_a_run_without_restarts_records_the_reports_failure():
    summary = {"state": "failed", "failure": {"node": "node2", "rank": 3, "message": "boom"},
               "failure_text": "node2 rank 3 (local rank 1): boom", "incident": {"kind": "exited"}}  # fmt: skip
    (found,) = incidents.from_run("exp/r1", [], summary, nodes_lost=[])
    assert (found["node"], found["rank"], found["kind"], found["evidence"]) == ("node2", 3, "dead_rank", "exp/r1")
    assert incidents.from_run("exp/r1", [], {"state": "finished"}, nodes_lost=[]) == []


def test_recording_a_run_again_adds_nothing(tmp_path):
    path = str(tmp_path / "incidents.jsonl")
    found = incidents.from_run("exp/r1", [_attempt(1)], {}, [])
    assert len(incidents.record(path, found, NOW)[0]) == 1
    assert incidents.record(path, found, NOW) == ([], [])
    assert len(incidents.read(path)[0]) == 1


def test_two_incidents_in_the_window_leave_a_node_out_until_it_is_cleared(tmp_path):
    path = str(tmp_path / "incidents.jsonl")
    incidents.record(path, incidents.from_run("exp/r1", [_attempt(1)], {}, []), NOW)
    assert incidents.implicated(incidents.read(path)[0], NOW) == {}  # once is not twice
    incidents.record(path, incidents.from_run("exp/r2", [_attempt(1, kind="hang")], {}, []), NOW)
    out = incidents.implicated(incidents.read(path)[0], NOW)
    assert list(out) == ["node2"] and [r["run"] for r in out["node2"]] == ["exp/r1", "exp/r2"]
    text = incidents.exclusion_text("node2", out["node2"], 14)
    assert text.startswith("node2 left out: implicated 2 times in 14 days (dead_rank in exp/r1 attempt 1: ")
    assert text.endswith("ansible-playbook playbooks/incidents.yml -e clear=node2")
    # settable: a limit of 3, or a window that ended before the incidents, leaves it in; 0 turns exclusion off
    assert incidents.implicated(incidents.read(path)[0], NOW, limit=3) == {}
    assert incidents.implicated(incidents.read(path)[0], NOW + 20 * DAY) == {}
    assert incidents.implicated(incidents.read(path)[0], NOW, limit=0) == {}
    incidents.clear(path, "node2", NOW + 1)
    assert incidents.implicated(incidents.read(path)[0], NOW + 2) == {}
    assert len(incidents.read(path)[0]) == 3  # the history stays


def test_an_incident_recorded_after_its_node_was_cleared_is_kept_but_does_not_count(tmp_path):
    """A run launched with -e wait=false ended a day ago with node2 at fault; node2 was repaired and cleared before
    a terminal followed the run to its end and recorded it: the incident stays in the history and leaves nothing out."""
    path = str(tmp_path / "incidents.jsonl")
    incidents.record(path, incidents.from_run("exp/r1", [_attempt(1)], {}, []), NOW - 2 * DAY)
    incidents.clear(path, "node2", NOW - DAY / 2, "repaired")
    late = incidents.from_run("exp/r2", [_attempt(1, kind="hang")], {}, [])  # ended at NOW - DAY, before the clear
    (added,), _ = incidents.record(path, late, NOW)
    assert added["counts"] is False and added["recorded_after_clear"] == NOW - DAY / 2
    assert "recorded after the node was cleared, does not count against it" in incidents.line(added)
    assert incidents.implicated(incidents.read(path)[0], NOW, limit=1) == {}
    # one that ended after the clear counts, and so does one with no time of its own (dated now)
    after = incidents.from_run("exp/r3", [_attempt(1, ended_at=NOW - DAY / 4)], {}, [])
    untimed = incidents.from_run("exp/r4", [_attempt(1, ended_at=None)], {}, [])
    added, _ = incidents.record(path, after + untimed, NOW)
    assert [(i["run"], i["counts"], "recorded_after_clear" in i) for i in added] == [
        ("exp/r3", True, False), ("exp/r4", True, False)
    ]  # fmt: skip
    assert [r["run"] for r in incidents.implicated(incidents.read(path)[0], NOW)["node2"]] == ["exp/r3", "exp/r4"]


def test_a_clear_is_refused_without_a_record_or_for_an_unknown_node(tmp_path):
    path = str(tmp_path / "nosuchdir" / "incidents.jsonl")
    said = incidents.clear_refusal(path, "node1", ["node1", "node2"], [])
    assert said.startswith(f"-e clear=node1: there is no incident record at {path}, so node1 has no incident")
    assert "-e runs_dir must name the runs directory that holds incidents.jsonl" in said
    assert "Nothing was written." in said and not (tmp_path / "nosuchdir").exists()
    unknown = incidents.clear_refusal(path, "node9", ["node1", "node2"], [])
    assert unknown.startswith("-e clear=node9: no such node in the inventory (node1, node2) and no incident of it")
    # a record there: a node of the inventory or of the record is cleared
    incidents.record(path.replace("nosuchdir/", ""), incidents.from_run("exp/r1", [_attempt(1)], {}, []), NOW)
    there = str(tmp_path / "incidents.jsonl")
    found = incidents.read(there)[0]
    assert incidents.clear_refusal(there, "node1", ["node1", "node2"], found) is None
    assert incidents.clear_refusal(there, "node2", [], found) is None
    assert incidents.clear_refusal(there, "node9", ["node1"], found).startswith("-e clear=node9: no such node")


def test_a_cut_line_is_skipped(tmp_path):
    path = tmp_path / "incidents.jsonl"
    path.write_text(json.dumps({"node": "node1", "kind": "hang", "time": NOW}) + "\n" + '{"node": "nod')
    assert [r["node"] for r in incidents.read(str(path))[0]] == ["node1"]


def test_only_a_hangs_culprit_or_a_device_error_makes_a_node_suspect():
    assert incidents.suspect(_attempt(1, kind="hang")).startswith("the hang's culprit in attempt 1")
    assert incidents.suspect(_attempt(1)) is None  # a killed rank fails the same way on any node
    ecc = _attempt(1, exception="RuntimeError: CUDA error: uncorrectable ECC error encountered")
    assert incidents.suspect(ecc).startswith("a device error in attempt 1")
    assert incidents.suspect(dict(_attempt(1, kind="hang"), state="finished")) is None


def test_a_program_error_is_recorded_but_does_not_count_against_its_node(tmp_path):
    path = str(tmp_path / "incidents.jsonl")
    raised = _attempt(1, cause="node1 rank 0 (local rank 0): FileNotFoundError: /data/x.idx", node="node1",
                      failure_kind="traceback", exception="FileNotFoundError")  # fmt: skip
    for run in ("exp/r1", "exp/r2"):
        (found,), _ = incidents.record(path, incidents.from_run(run, [raised], {}, []), NOW)
        assert found["counts"] is False
    assert incidents.implicated(incidents.read(path)[0], NOW) == {}
    # neither a stop nor a launch that failed is an incident
    stopped = dict(_attempt(1), kind="stopped")
    assert incidents.from_run("exp/r3", [stopped, dict(_attempt(2), kind="launch")], {}, []) == []
