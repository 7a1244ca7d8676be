"""The checkpoint verdicts, the resume choice, retention and the disk guard (trainops.checkpoints), on a listing
recorded from Megatron-LM core_v0.14.0's own torch_dist saves on the testbed (tests/fixtures/checkpoints: the
tiny preset, tp1 pp2 dp2, saves at 5, 10 and 15, scanned by plugins/module_utils/trainops/node/checkpoint_scan.py)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from trainops import checkpoints as ck

RECORDED = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints" / "megatron-tiny-tp1pp2dp2.json").read_text()
)
#: the plan of that run, as far as the rules read it
PLAN = {"tp": 1, "pp": 2, "world_size": 4, "job": "megatron", "checkpoint_bytes": 25034240}


def listing(**changes) -> dict:
    out = copy.deepcopy(RECORDED)
    out.update(changes)
    return out


def save(out: dict, iteration: int) -> dict:
    return next(s for s in out["saves"] if s["iteration"] == iteration)


def verdicts(saves) -> dict[int, str]:
    return {s["iteration"]: s["verdict"] for s in saves}


def test_megatrons_own_saves_are_verified():
    saves = ck.judge(RECORDED, PLAN)
    assert verdicts(saves) == {5: "verified", 10: "verified", 15: "verified"}
    assert all(s["format"] == "torch_dist" and s["files"] == 11 for s in saves)
    assert saves[0]["bytes"] == sum(save(RECORDED, 5)["files"].values())


def test_a_truncated_shard_is_named_with_its_sizes():
    bad = listing()
    save(bad, 15)["files"]["__1_0.distcp"] = 1000
    found = ck.judge(bad, PLAN)[-1]
    assert found["verdict"] == "bad"
    assert "__1_0.distcp is truncated: 1,000 of the 4,197,458 bytes .metadata names" in found["reasons"]


def test_a_missing_shard_an_empty_file_and_a_missing_index_are_each_named():
    bad = listing()
    del save(bad, 10)["files"]["__3_1.distcp"]
    save(bad, 10)["files"]["common.pt"] = 0
    reasons = ck.judge(bad, PLAN)[1]["reasons"]
    assert "__3_1.distcp is missing (.metadata names it)" in reasons and "common.pt is empty" in reasons
    noindex = listing()
    del save(noindex, 5)["files"][".metadata"]
    del save(noindex, 5)["needed"]
    assert ".metadata is missing" in ck.judge(noindex, PLAN)[0]["reasons"]
    unreadable = listing()
    save(unreadable, 5)["index_error"] = "UnpicklingError: pickle data was truncated"
    assert any(r.startswith(".metadata cannot be read") for r in ck.judge(unreadable, PLAN)[0]["reasons"])


def test_identical_tensor_bytes_across_saves_are_flagged():
    copied = listing()
    save(copied, 15)["fingerprint"] = save(copied, 10)["fingerprint"]
    found = ck.judge(copied, PLAN)
    assert verdicts(found) == {5: "verified", 10: "verified", 15: "bad"}
    assert "the same sampled tensor bytes as iteration 10's save" in found[2]["reasons"][0]


def test_sizes_against_the_plan_and_the_save_before():
    assert (
        "the plan predicts"
        in ck.judge(listing(), dict(PLAN, checkpoint_bytes=PLAN["checkpoint_bytes"] * 3))[0]["reasons"][0]
    )
    shrunk = listing()
    for name in list(save(shrunk, 15)["files"]):
        if name.endswith(".distcp"):
            save(shrunk, 15)["files"][name] //= 2
            save(shrunk, 15)["needed"][name] //= 2
    reasons = ck.judge(shrunk, dict(PLAN, checkpoint_bytes=None))[2]["reasons"]
    assert reasons and "iteration 10's save has" in reasons[0]


def test_a_save_newer_than_the_tracker_is_pending_while_the_run_goes_on_else_unfinished():
    out = listing(tracker="10")
    assert verdicts(ck.judge(out, PLAN, running=True)) == {5: "verified", 10: "verified", 15: "pending"}
    after = ck.judge(out, PLAN, running=False)
    assert (
        after[2]["verdict"] == "bad" and "newer than the tracker (10): the save did not finish" in after[2]["reasons"]
    )


def test_a_known_verdict_is_kept_for_a_save_not_read_again():
    known = ck.judge(listing(tracker="10"), PLAN, running=True)
    partial = listing()
    for entry in partial["saves"][:2]:
        for key in ("files", "needed", "fingerprint", "mtime"):
            entry.pop(key)
        entry["partial"] = True
    again = ck.judge(partial, PLAN, running=True, known=known)
    assert verdicts(again) == {5: "verified", 10: "verified", 15: "verified"}
    # the fingerprint of a known save is still compared with
    partial["saves"][2]["fingerprint"] = known[1]["fingerprint"]
    assert ck.judge(partial, PLAN, known=known)[2]["verdict"] == "bad"


def test_the_newest_verified_save_is_chosen_and_newer_ones_set_aside():
    bad = listing()
    save(bad, 15)["files"]["__0_0.distcp"] = 10
    choice = ck.choose(ck.judge(bad, PLAN), bad["tracker"])
    assert choice["iteration"] == 10 and choice["tracker"] == "10"
    assert [s["name"] for s in choice["set_aside"]] == ["iter_0000015"]
    assert "iteration 15 set aside (not resumed from): __0_0.distcp is truncated" in choice["lines"][0]
    assert ck.choose(ck.judge(RECORDED, PLAN), "15") == {"iteration": 15, "set_aside": [], "tracker": None, "lines": []}


def test_a_tracker_naming_a_save_that_is_not_there_is_named_and_the_newest_verified_is_used():
    out = listing(tracker="20")
    choice = ck.choose(ck.judge(out, PLAN), out["tracker"])
    assert choice["iteration"] == 15 and choice["tracker"] == "15" and choice["set_aside"] == []
    assert any(
        "the tracker names iteration 20, which is not there (no iter_0000020/)" in line for line in choice["lines"]
    )


def test_no_verified_save_refuses_and_a_failed_load_excludes_a_save():
    bad = listing()
    for entry in bad["saves"]:
        entry["files"]["common.pt"] = 0
    choice = ck.choose(ck.judge(bad, PLAN), bad["tracker"])
    assert choice["iteration"] is None and "none of the 3 saves is verified" in choice["refused"]
    failed = ck.judge(RECORDED, PLAN, failed_loads={"15": "attempt 2: no iteration after the resume"})
    assert ck.choose(failed, "15")["iteration"] == 10
    assert ck.choose([], None) == {"iteration": None, "set_aside": [], "tracker": None, "lines": []}


@pytest.mark.parametrize(
    ("keep", "every", "tracker", "deleted"),
    [
        (2, 0, "15", [5]),
        (1, 0, "15", [5, 10]),
        (1, 10, "15", [5]),
        (1, 0, "10", [5]),
        (0, 0, "15", []),
        (5, 0, "15", []),
    ],
)
def test_retention_never_takes_the_newest_verified_the_trackers_or_a_milestone(keep, every, tracker, deleted):
    saves = ck.judge(listing(tracker=tracker), PLAN, running=True)
    if tracker == "10":  # the newest is still being written: nothing is removed at all
        assert saves[-1]["verdict"] == "pending"
        held = ck.retention(saves, keep, every, tracker)
        assert held["delete"] == [] and "iteration 15's save is pending" in held["held"]
        return
    plan = ck.retention(saves, keep, every, tracker)
    assert [s["iteration"] for s in plan["delete"]] == deleted
    assert plan["frees_bytes"] == sum(s["bytes"] for s in saves if s["iteration"] in deleted)


def test_retention_keeps_an_unverified_save_and_the_newest_verified_one():
    bad = listing()
    save(bad, 5)["files"]["common.pt"] = 0
    saves = ck.judge(bad, PLAN)
    assert [s["iteration"] for s in ck.retention(saves, 1, 0, "15")["delete"]] == [10]
    save(bad, 15)["files"]["common.pt"] = 0
    saves = ck.judge(bad, PLAN)
    assert ck.retention(saves, 1, 0, "15")["delete"] == []


def test_the_disk_guard():
    need = PLAN["checkpoint_bytes"]
    assert ck.disk(None, need, "/x")["level"] == "unknown"
    assert ck.disk(3 * need, need, "/x")["level"] == "ok"
    warn = ck.disk(int(1.5 * need), need, "/ckpt")
    assert warn["level"] == "warn" and "room for 1.5 checkpoint(s), under two" in warn["line"]
    refuse = ck.disk(need // 2, need, "/ckpt")
    assert refuse["level"] == "refuse" and refuse["line"].startswith(
        "11.94 MiB free at /ckpt, a checkpoint of this plan takes 23.87 MiB"
    )


WATCH_PLAN = dict(PLAN, run_dir="/data/runs/x/r1", checkpoint_dir=RECORDED["dir"])
#: The node package's programs in the container, where the watcher runs the scanner from.
PROGRAMS = "/opt/mtt-train-ops/0123456789ab/trainops/node"


def reply(out: dict) -> dict:
    return {"rc": 0, "stdout": json.dumps(out)}


def test_the_watch_judges_each_save_once_and_says_so():
    watch = ck.CheckpointWatch(WATCH_PLAN, PROGRAMS, {})
    assert not watch.wants_scan
    watch.note_saved(10)
    assert watch.wants_scan and watch.scan_argv()[-1] == ""
    assert watch.scan_argv()[:3] == ["python3", f"{PROGRAMS}/checkpoint_scan.py", "scan"]
    lines = watch.on_scan(reply(listing(tracker="10")), wall=save(RECORDED, 10)["mtime"] + 2.5, running=True)
    assert lines == [
        "checkpoint   iteration 5 verified: 24.22 MiB, 11 files (4.1 s after it was written)",
        "checkpoint   iteration 10 verified: 24.22 MiB, 11 files (2.5 s after it was written)",
    ]
    assert watch.scan_argv()[-2:] == ["--skip", "5,10"] and not watch.wants_apply
    bad = listing()
    save(bad, 15)["fingerprint"] = save(bad, 10)["fingerprint"]
    lines = watch.on_scan(reply(bad), wall=save(RECORDED, 15)["mtime"] + 1)
    assert len(lines) == 1 and lines[0].startswith("[WARNING] checkpoint iteration 15 is not to be trusted: the same")
    assert watch.suffix(save(RECORDED, 10)["mtime"] + 30) == "ckpt 10 verified 30 s ago"


def test_the_watch_removes_what_retention_lets_go_or_only_says_so():
    watch = ck.CheckpointWatch(WATCH_PLAN, PROGRAMS, {"keep_checkpoints": 1})
    watch.on_scan(reply(listing()), wall=2e9)
    assert watch.wants_apply and watch.apply_input()["remove"] == ["iter_0000005", "iter_0000010"]
    lines = watch.on_apply({"rc": 0, "stdout": json.dumps({"removed": ["iter_0000005", "iter_0000010"]})}, wall=2e9)
    assert lines == [
        "checkpoint   removed iteration 5 (keep_checkpoints=1): 24.22 MiB freed",
        "checkpoint   removed iteration 10 (keep_checkpoints=1): 24.22 MiB freed",
    ]
    assert [s["iteration"] for s in watch.result()["saves"]] == [15]
    assert [s["iteration"] for s in watch.result()["removed"]] == [5, 10]
    dry = ck.CheckpointWatch(WATCH_PLAN, PROGRAMS, {"keep_checkpoints": 2, "keep_dry_run": True})
    lines = dry.on_scan(reply(listing()), wall=2e9)
    assert not dry.wants_apply and lines[-1].startswith(
        "checkpoint   keep_dry_run: keep_checkpoints=2 would remove iteration 5"
    )


def test_the_watch_reports_a_filling_disk_and_a_failed_scan():
    watch = ck.CheckpointWatch(WATCH_PLAN, PROGRAMS, {})
    lines = watch.on_scan(reply(listing(free_bytes=PLAN["checkpoint_bytes"] // 2)), wall=2e9)
    assert (
        lines[-1].startswith("[WARNING] checkpoint disk: 11.94 MiB free at ") and "not one checkpoint fits" in lines[-1]
    )
    assert watch.suffix(2e9).endswith("ckpt disk full")
    assert "failed: Permission denied" in watch.on_scan({"failed": True, "msg": "Permission denied"}, wall=2e9)[0]
    off = ck.CheckpointWatch(WATCH_PLAN, PROGRAMS, {"verify_checkpoints": False})
    off.note_saved(5)
    assert not off.wants_scan
