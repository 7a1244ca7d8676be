"""The record of a train.yml run (trainops.run_record): what the plays read as trainops_run and change with the
train_run action, written whole, with one event line per change."""

from __future__ import annotations

import json

import pytest
from trainops import run_record
from trainops.records import RecordError


def test_a_run_without_a_record_reads_as_empty(tmp_path):
    assert run_record.read(str(tmp_path / "nowhere")) == {}


def test_changes_are_kept_whole_left_out_only_grows_and_each_is_an_event(tmp_path):
    run_dir = str(tmp_path / "exp" / "run")
    first = run_record.update(run_dir, {"started": 100.0, "left_out": {"node3": "implicated twice"}}, "planned", 1.0)
    assert first == {"started": 100.0, "left_out": {"node3": "implicated twice"}}
    later = run_record.update(run_dir, {"left_out": {"node2": "sick: ECC"}, "checked_master": "node1"}, "health", 2.0)
    assert later["left_out"] == {"node3": "implicated twice", "node2": "sick: ECC"}
    assert run_record.read(run_dir) == later
    events = [json.loads(line) for line in (tmp_path / "exp" / "run" / "events.jsonl").read_text().splitlines()]
    assert events == [
        {"t": 1.0, "event": "planned", "keys": ["left_out", "started"]},
        {"t": 2.0, "event": "health", "keys": ["checked_master", "left_out"]},
    ]


def test_a_key_the_record_does_not_hold_is_refused_and_nothing_written(tmp_path):
    with pytest.raises(run_record.RunRecordError, match="holds no left_oot"):
        run_record.update(str(tmp_path), {"left_oot": {}}, "typo")
    assert not (tmp_path / "run.json").exists() and not (tmp_path / "events.jsonl").exists()


def test_a_damaged_record_is_named_with_its_fix(tmp_path):
    (tmp_path / "run.json").write_text('{"started": 1')
    with pytest.raises(RecordError, match=r"run.json.*mv .*run.json .*run.json.damaged"):
        run_record.read(str(tmp_path))
