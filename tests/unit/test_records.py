"""The controller's own records survive damage to themselves (trainops.records): each damage made real on a real
file (a torn append, bytes that are not UTF-8, a JSON list for a record, a line without its kind, a link to
nothing, a directory in the file's place, a record cut short, a clock ahead), then read, cleared, listed, reported."""

from __future__ import annotations

import json
import os

import pytest
from presets import load_preset, make_plan
from trainops import health, incidents, records, recovery
from trainops.attempts import STATE_FILE, Attempts, read_marks
from trainops.run_report import report_run, write_report

DAY = 86400.0
NOW = 100 * DAY


def _incident(node="node2", kind="hang", time=NOW - DAY, run="exp/r1", cause="hung: state T"):
    return {"node": node, "kind": kind, "time": time, "run": run, "attempt": 1, "cause": cause, "counts": True}


def _lines(*rows) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def test_a_torn_last_line_is_set_aside_and_a_clear_is_never_glued_onto_it(tmp_path):
    """A crash mid-append left half a line: the clear goes on its own line, the half line into .torn, and the
    node is cleared (before, the clear continued the cut line, was unreadable, and node2 stayed left out)."""
    path = tmp_path / "incidents.jsonl"
    torn = json.dumps(_incident(run="exp/r3")).encode()[:25]
    path.write_bytes(_lines(_incident(run="exp/r1"), _incident(run="exp/r2")) + torn)
    found, warnings = incidents.read(str(path))
    assert list(incidents.implicated(found, NOW)) == ["node2"]
    assert warnings == [
        f"{path} line 3 was cut short (a write that did not finish: the next one sets it aside); skipped"
    ]
    _, said = incidents.clear(str(path), "node2", NOW)
    assert said == [f"{path}: its last line was cut short (25 bytes, a write that did not finish); set aside in "
                    f"{path}.torn"]  # fmt: skip
    assert (tmp_path / "incidents.jsonl.torn").read_bytes() == torn + b"\n"
    assert path.read_bytes().endswith(b"\n") and path.read_bytes().count(b"\n") == 3
    found, warnings = incidents.read(str(path))
    assert warnings == [] and [r["kind"] for r in found] == ["hang", "hang", "cleared"]
    assert incidents.implicated(found, NOW) == {}


def test_a_whole_last_line_that_lost_only_its_newline_is_kept(tmp_path):
    path = tmp_path / "incidents.jsonl"
    path.write_bytes(_lines(_incident(run="exp/r1")) + json.dumps(_incident(run="exp/r2")).encode())
    added, said = incidents.record(str(path), [dict(_incident(run="exp/r3"), attempt=1)], NOW)
    assert said == [] and len(added) == 1
    found, warnings = incidents.read(str(path))
    assert warnings == [] and [r["run"] for r in found] == ["exp/r1", "exp/r2", "exp/r3"]
    assert not (tmp_path / "incidents.jsonl.torn").exists()


def test_a_record_saved_by_a_windows_editor_reads_whole(tmp_path):
    """A byte-order mark and \r\n line ends (a hand edit in another editor) are not damage: every line counts."""
    path = tmp_path / "incidents.jsonl"
    rows = [json.dumps(_incident(run=f"exp/r{i}")) for i in (1, 2)]
    path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(rows).encode() + b"\r\n")
    found, warnings = incidents.read(str(path))
    assert warnings == [] and [r["run"] for r in found] == ["exp/r1", "exp/r2"]


def test_bad_lines_are_named_by_file_and_line_and_skipped(tmp_path):
    path = tmp_path / "incidents.jsonl"
    path.write_bytes(
        _lines(_incident(run="exp/r1"))
        + b'{"node": "node2", "kind": "hang", "cause": "caf\xe9"}\n'  # Latin-1, not UTF-8
        + b'["node2", "hang"]\n'  # a list, not a record
        + _lines({"node": "node2", "run": "exp/r9", "time": NOW})  # no kind: was `Module failed: 'kind'`
        + _lines(dict(_incident(), time="yesterday"))
        + b"not json at all\n\n"
        + _lines(_incident(run="exp/r2"))
    )
    found, warnings = incidents.read(str(path))
    assert [r["run"] for r in found] == ["exp/r1", "exp/r2"]
    assert warnings == [
        f"{path} line 2 is not UTF-8 text (byte 48); skipped",
        f"{path} line 3 holds a list, not a record (an object); skipped",
        f"{path} line 4 has no 'kind' (a name); skipped",
        f"{path} line 5 has a time that is not a number ('yesterday'); skipped",
        f"{path} line 6 is not JSON; skipped",
    ]
    assert (
        incidents.table(found, NOW, 14, 2)[0] == "node2: 2 incident(s) in 14 days, LEFT OUT of the next run (limit 2)"
    )


def test_a_link_to_nothing_or_a_directory_is_said_not_read_as_no_incident(tmp_path):
    link = tmp_path / "incidents.jsonl"
    link.symlink_to(tmp_path / "mnt" / "incidents.jsonl")  # shared storage not mounted
    assert incidents.read(str(link)) == ([], [
        f"{link} is a link to {tmp_path}/mnt/incidents.jsonl, which does not exist: nothing in it was read; move it "
        f"away (mv {link} {link}.damaged) or restore it"
    ])  # fmt: skip
    with pytest.raises(records.RecordError, match="which does not exist: nothing was added to it"):
        incidents.clear(str(link), "node2", NOW)
    link.unlink()
    link.mkdir()
    found, (warning,) = incidents.read(str(link))
    assert found == [] and warning.startswith(f"{link} is a directory, not a file: nothing in it was read")
    with pytest.raises(records.RecordError, match="is a directory, not a file: nothing was added"):
        incidents.record(str(link), [_incident()], NOW)


def test_a_clear_covers_an_incident_a_clock_ahead_dated_after_it(tmp_path):
    """node2's clock ran five days ahead: its incident says a time after the clear, and is still cleared; an
    incident recorded after the clear counts again."""
    path = str(tmp_path / "incidents.jsonl")
    incidents.record(path, [_incident(run="exp/r1"), _incident(run="exp/r2", time=NOW + 5 * DAY)], NOW)
    assert list(incidents.implicated(incidents.read(path)[0], NOW)) == ["node2"]
    incidents.clear(path, "node2", NOW)
    assert incidents.implicated(incidents.read(path)[0], NOW + 1) == {}
    assert incidents.table(incidents.read(path)[0], NOW + 1, 14, 2) == ["no incident in the last 14 days"]
    incidents.record(path, [_incident(run="exp/r3", time=NOW + 2), _incident(run="exp/r4", time=NOW + 3)], NOW)
    assert [r["run"] for r in incidents.implicated(incidents.read(path)[0], NOW + 4)["node2"]] == ["exp/r3", "exp/r4"]


def test_a_cause_with_terminal_escape_codes_prints_escaped(tmp_path):
    path = tmp_path / "incidents.jsonl"
    path.write_bytes(_lines(_incident(cause="boom\x1b[2J\x1b]0;owned\x07\nnext line"), _incident(run="exp/r2")))
    found, _ = incidents.read(str(path))
    printed = incidents.table(found, NOW, 14, 2) + [incidents.exclusion_text("node2", found, 14)]
    assert all(c.isprintable() for text in printed for c in text)
    assert "boom\\x1b[2J\\x1b]0;owned\\x07\\nnext line" in printed[1]


def test_whole_file_records_are_replaced_whole_and_a_damaged_one_names_its_file_and_fix(tmp_path):
    path = str(tmp_path / "run" / "summary.json")
    records.write_json(path, {"a": 1})
    records.write_json(path, {"a": 2})
    assert json.loads(open(path).read()) == {"a": 2} and os.listdir(tmp_path / "run") == ["summary.json"]
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    assert records.read_json(str(tmp_path / "none.json"), "x", "fix") is None
    cases = {
        b'{"records": [], "curr': "was cut short after 21 bytes (a write that did not finish)",
        b'{"a": 1} trailing': "is not JSON (line 1, column 10)",
        b'{"a": "\xff"}': "is not UTF-8 text (byte 8)",
        b"[1, 2]": "holds a list, not an object",
    }
    for data, problem in cases.items():
        (tmp_path / "bad.json").write_bytes(data)
        with pytest.raises(records.RecordError) as caught:
            records.read_json(str(tmp_path / "bad.json"), "state of this run's attempts", "move it aside")
        assert str(caught.value) == f"{tmp_path}/bad.json {problem}: it is not a readable state of this run's " \
            "attempts; move it aside"  # fmt: skip


def test_a_truncated_attempts_state_or_marks_file_names_the_file_and_the_fix(tmp_path):
    (tmp_path / STATE_FILE).write_text('{"current": {"number": 1, "plan": {"nodes": [')
    with pytest.raises(records.RecordError) as caught:
        Attempts(str(tmp_path))
    message = str(caught.value)
    assert message.startswith(f"{tmp_path}/attempts.json was cut short after 45 bytes")
    assert f"mv {tmp_path}/attempts.json {tmp_path}/attempts.json.damaged" in message and "Expecting" not in message
    (tmp_path / "node1").mkdir()
    (tmp_path / "node1" / "marks.json").write_text("[]")
    with pytest.raises(records.RecordError, match="marks.json holds a list, not an object"):
        read_marks(str(tmp_path), "node1")


def test_a_report_goes_on_without_a_damaged_diagnosis_or_attempt_record(tmp_path):
    plan = make_plan(
        model=load_preset("tiny"),
        hosts=[{"name": "node1", "ansible_host": "10.0.0.1", "slots": 2, "accelerator": "cpu"}],
        layout={"train_iters": 10, "seq_length": 128, "gbs": 2, "precision": "bf16"},
        run_id="r1",
        exp_name="damaged",
    )
    (tmp_path / "hang").mkdir()
    (tmp_path / "hang" / "diagnosis.json").write_text('{"culprit": {"node": "no')
    good = {"attempt": 1, "started_at": 10.0, "ended_at": 70.0, "state": "failed", "kind": "hang", "node": "node1"}
    recovery.write_attempt(str(tmp_path), good, set_aside=False)
    (tmp_path / "attempt-2").mkdir()
    (tmp_path / "attempt-2" / "attempt.json").write_bytes(b'{"attempt": 2, "started')
    summary = write_report(str(tmp_path), plan)
    assert [a["attempt"] for a in summary["attempts"]] == [1]
    first, second = summary["warnings"]
    assert first.startswith(f"{tmp_path}/hang/diagnosis.json was cut short") and "rank" in first
    assert second.startswith(f"{tmp_path}/attempt-2/attempt.json was cut short") and "leaves this attempt out" in second
    assert f"warning      {second}" in summary["table"]
    assert json.loads((tmp_path / "summary.json").read_text())["warnings"] == [first, second]


def test_a_damaged_health_record_is_skipped_and_named(tmp_path):
    verdicts = health.judge({"a": {}})
    health.record(str(tmp_path), "quick", verdicts, {"a": {}}, 1000.0, "health.yml")
    newer = health.record(str(tmp_path), "quick", verdicts, {"a": {}}, 2000.0, "health.yml")
    with open(newer, "r+b") as handle:
        handle.truncate(40)
    warnings: list[str] = []
    assert health.last_checked(str(tmp_path), ["a"], warnings) == {"a": 1000.0}
    assert len(warnings) == 1 and warnings[0].startswith(f"{newer} was cut short after 40 bytes")


def test_report_yml_reads_the_runs_plan_defensively_and_against_the_inventory(tmp_path):
    hosts = [{"name": "node1", "ansible_host": "10.0.0.1"}, {"name": "node2", "ansible_host": "10.0.0.2"}]
    (tmp_path / "plan").mkdir()
    (tmp_path / "plan" / "plan.json").write_text('{"nodes": [{"name": "node1", "addr": "10.0')
    problem = report_run(str(tmp_path), hosts)["problem"]
    assert problem.startswith(f"{tmp_path}/plan/plan.json was cut short") and "No node was contacted" in problem
    plan = {"nodes": [{"name": "node1", "addr": "10.0.0.9"}]}
    (tmp_path / "plan" / "plan.json").write_text(json.dumps(plan))
    assert report_run(str(tmp_path), hosts)["problem"].startswith(
        f"{tmp_path} was planned for other nodes than this inventory's (node1): node1 is at 10.0.0.1 in it, at 10.0.0.9"
    )
    plan = {"nodes": [{"name": "node1", "addr": "192.168.0.1"}]}  # node_addr, the fabric address; node2 left out
    (tmp_path / "plan" / "plan.json").write_text(json.dumps(plan))
    hosts[0]["node_addr"] = "192.168.0.1"
    assert report_run(str(tmp_path), hosts) == {"plan": plan, "problem": ""}


def test_status_finds_the_runs_this_controller_launched_whose_incidents_are_not_recorded(tmp_path):
    """status_unfollowed.yml's list: a run train.yml rendered for a supervisor, on this inventory, within the
    window, without incidents-recorded.json (train.yml or status.yml writes it once the incidents are recorded)."""
    import os

    from trainops.run_report import INCIDENTS_RECORDED, unrecorded_runs

    hosts = [{"name": "node1", "ansible_host": "10.0.0.1"}, {"name": "node2", "ansible_host": "10.0.0.2"}]
    nodes = [{"name": "node1", "addr": "10.0.0.1"}, {"name": "node2", "addr": "10.0.0.2"}]

    def run(exp, run_id, **plan):
        directory = tmp_path / exp / run_id
        (directory / "plan").mkdir(parents=True)
        plan = {"nodes": nodes, "master": "node1", "run_dir": f"/data/runs/{exp}/{run_id}", **plan}
        (directory / "plan" / "plan.json").write_text(json.dumps(plan))
        return directory

    now = 1_800_000_000.0
    run("a", "1", supervisor="node1")
    run("a", "2", supervisor="login1")  # a supervisors host's
    run("b", "1")  # plan.yml's, or a train.yml that never rendered: no supervisor
    (run("b", "2", supervisor="node1") / INCIDENTS_RECORDED).write_text("{}")  # recorded already
    run("c", "1", supervisor="node1", nodes=[{"name": "node7", "addr": "10.0.0.7"}])  # another inventory's
    run("c", "2", supervisor="mgmt9")  # its supervisor's host is in no group of this inventory
    (tmp_path / "stray-file").write_text("")
    for path in tmp_path.glob("*/*/plan/plan.json"):
        os.utime(path, (now - 3600, now - 3600))
    os.utime(tmp_path / "a" / "2" / "plan" / "plan.json", (now - 60, now - 60))
    assert unrecorded_runs(str(tmp_path), hosts, ["login1"], now, 14) == [
        {"run": "a/1", "run_dir": "/data/runs/a/1", "master": "node1", "supervisor": "node1"},
        {"run": "a/2", "run_dir": "/data/runs/a/2", "master": "node1", "supervisor": "login1"},
    ]
    # older than the incident window: its incidents would count against no node
    assert unrecorded_runs(str(tmp_path), hosts, ["login1"], now + 15 * 86400, 14) == []
    assert unrecorded_runs(str(tmp_path / "none"), hosts, [], now, 14) == []
