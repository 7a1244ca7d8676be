"""provenance: what a run ran (the bundle's version, each node's image and stack, the launch environment), recorded
before its launch and printed by its report with the hash of its plan."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

from test_run_report import CPU_HOSTS, make
from trainops import provenance, run_record
from trainops.run_report import write_report

STACK = {"image": "sha256:" + "ab" * 32, "megatron": "0123456789ab (2170 files)", "torch": "2.6.0+cpu",
         "torch_musa": None, "nccl": None, "python": "3.11.2", "device_query": {"rc": 0}}  # fmt: skip


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_the_bundles_version_is_its_commit_and_says_when_the_checkout_differs(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "train.yml").write_text("---\n")
    _git(tmp_path, "add", "train.yml")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = _git(tmp_path, "rev-parse", "HEAD")
    assert provenance.bundle_version(str(tmp_path)) == {"commit": head, "modified": False}
    (tmp_path / "untracked.txt").write_text("a run's own file changes nothing\n")
    assert provenance.bundle_version(str(tmp_path))["modified"] is False
    (tmp_path / "train.yml").write_text("--- # edited\n")
    assert provenance.bundle_version(str(tmp_path)) == {"commit": head, "modified": True}


def test_outside_a_git_checkout_the_version_says_why(tmp_path):
    found = provenance.bundle_version(str(tmp_path))
    assert found["commit"] is None and "not a git checkout" in found["why"]
    assert provenance.lines(provenance.record(found, "ae69124582e7", {}, {}))[0] == (
        f"provenance   bundle no git commit ({tmp_path} is not a git checkout); node package ae69124582e7; "
        "plan.json sha256 -"
    )


def test_the_record_keeps_each_nodes_stack_and_the_environment_as_text():
    found = provenance.record({"commit": "f" * 40, "modified": False}, "ae69124582e7",
                              {"node1": STACK, "node2": {}}, {"OMP_NUM_THREADS": 1, "MCCL_IB_HCA": "mlx5"})  # fmt: skip
    assert found["nodes"]["node1"] == {k: STACK[k] for k in provenance.STACK_KEYS}  # no device query, no disk
    assert found["nodes"]["node2"] == dict.fromkeys(provenance.STACK_KEYS)  # unread: unknown, not guessed
    assert found["launch_env"] == {"MCCL_IB_HCA": "mlx5", "OMP_NUM_THREADS": "1"}
    json.dumps(found)  # it goes into run.json


def test_nodes_that_run_the_same_stack_share_a_line_and_a_different_one_shows():
    other = dict(STACK, image="sha256:" + "cd" * 32)
    found = provenance.record({"commit": "0123456789abcdef" * 2 + "01234567", "modified": True}, "ae69124582e7",
                              {"node1": STACK, "node2": STACK, "node3": other}, {"OMP_NUM_THREADS": "1"})  # fmt: skip
    lines = provenance.lines(dict(found, plan_sha256="9" * 64))
    assert lines == [
        "provenance   bundle commit 0123456789ab with local changes; node package ae69124582e7; "
        "plan.json sha256 999999999999",
        "             node1, node2: image sha256:abababababab, Megatron-LM 0123456789ab (2170 files), "
        "torch 2.6.0+cpu, python 3.11.2",
        "             node3: image sha256:cdcdcdcdcdcd, Megatron-LM 0123456789ab (2170 files), torch 2.6.0+cpu, "
        "python 3.11.2",
        "             launch env: OMP_NUM_THREADS=1",
    ]
    assert provenance.lines(None)[0].startswith("provenance   not recorded (run.json holds none: a run of an older")


def test_the_report_keeps_the_recorded_provenance_with_the_hash_of_the_plan_it_launched_with(tmp_path):
    plan = make(CPU_HOSTS, smoke=True)
    (tmp_path / "plan").mkdir()
    (tmp_path / "plan" / "plan.json").write_text(json.dumps(plan))
    found = provenance.record({"commit": "a" * 40, "modified": False}, "ae69124582e7", {"node1": STACK}, {})
    run_record.update(str(tmp_path), {"provenance": found}, "provenance recorded")
    summary = write_report(str(tmp_path), plan)
    digest = hashlib.sha256((tmp_path / "plan" / "plan.json").read_bytes()).hexdigest()
    assert summary["provenance"] == dict(found, plan_sha256=digest)
    assert json.loads((tmp_path / "summary.json").read_text())["provenance"]["plan_sha256"] == digest
    assert summary["table"][1] == (
        f"provenance   bundle commit aaaaaaaaaaaa; node package ae69124582e7; plan.json sha256 {digest[:12]}"
    )
    # a run without a record (an older bundle's) says so, and nothing else changes
    older = tmp_path / "older"
    older.mkdir()
    assert write_report(str(older), plan)["provenance"] is None
