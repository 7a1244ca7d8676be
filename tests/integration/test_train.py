"""train.yml, stop.yml, status.yml and report.yml on the testbed: the whole lifecycle over real SSH, with the
smoke job under real torchrun on both nodes, and the failures a user meets (a dead rank, a busy cluster; a lost
node is test_restarts.py's). Marked `testbed`."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import time

import pytest

from testbed import ROOT, SMALL, in_container, in_node, nodes_contacted, playbook, rank_pid, recap
from testbed import latest_run as _latest_run
from testbed import train_in_background as _train_in_background
from testbed import wait_for_iterations as _wait_for_iterations

pytestmark = pytest.mark.testbed
#: An experiment name with spaces and shell metacharacters: refused on the controller, and nothing in it runs.
NASTY = 'it\'s a "test"; $(touch mtt-injected) `touch mtt-injected2` & | > <'
#: An unusual name an experiment may have (one path component of safe characters, trainops.options).
ODD = "lr=3e-4+warm@v2.1"
#: As a user passes it: -e with JSON (key=value cannot hold unbalanced quotes).
ODD_EXP = json.dumps({"exp": ODD})


def _no_injection() -> None:
    look = "find / -xdev -maxdepth 7 -name 'mtt-injected*' 2>/dev/null || true"
    for node in ("node1", "node2"):
        assert in_container(node, look).stdout == ""
        assert in_node(node, look).stdout == ""
    assert not list(ROOT.rglob("mtt-injected*"))


def test_train_runs_reports_and_resumes_with_an_unusual_experiment_name(provisioned, tmp_path):
    nasty = playbook("train.yml", *SMALL, "-e", json.dumps({"exp": NASTY}))
    assert nasty.returncode != 0 and "must be one directory name" in nasty.stdout
    assert not nodes_contacted(nasty.stdout)
    _no_injection()
    for node in ("node1", "node2"):  # a rerun starts clean
        in_container(node, "rm -rf /data/mtt-train-ops/checkpoints/*")
    first = playbook("train.yml", *SMALL, "-e", "train_iters=20", "-e", ODD_EXP)
    assert first.returncode == 0, first.stdout[-6000:]
    assert "resume       none: a fresh start" in first.stdout
    # what a person reads of a successful run (issue 35 item 8): no banner over a play that prints nothing, no
    # include's banner, a plan made again shows only the lines that changed
    assert len(first.stdout.splitlines()) <= 100, first.stdout
    assert "included:" not in first.stdout and "PLAY [Reach every node before changing any]" not in first.stdout
    progress = r"iteration 20/20 \(100%\) \| lm loss [\d.]+ \| [\d,]+ ms/it \| [\d,]+ tokens/s/card"
    assert re.search(progress, first.stdout)
    run_dir = _latest_run(ODD)
    assert run_dir.parent.name == ODD
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["state"] == "finished" and summary["last_iteration"] == 20
    assert summary["step_time_ms"]["median"] > 0 and summary["step_time_ms"]["p90"] >= summary["step_time_ms"]["median"]
    assert summary["tokens_per_second_per_gpu"]["median"] > 0
    assert summary["losses"]["lm loss"]["last"] < summary["losses"]["lm loss"]["first"]
    assert summary["nan_iterations"] == 0 and summary["failure"] is None
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in metrics] == list(range(1, 21))
    assert (run_dir / "loss.png").read_bytes()[:4] == b"\x89PNG"
    assert (run_dir / "throughput.png").stat().st_size > 0
    for node in ("node1", "node2"):
        assert (run_dir / node / "launch.out").exists() and (run_dir / node / "exit.rc").read_text().strip() == "0"
    # what ran (issue 36 item 7), recorded before the launch: this checkout's commit, each node's image as its engine
    # names it and its stack, the launch environment; the report adds the hash of the plan.json it launched with
    ran = summary["provenance"]
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert ran["bundle"]["commit"] == head.strip() and len(ran["node_package"]) == 12, ran
    for node in ("node1", "node2"):
        image = in_node(node, "docker inspect -f '{{.Image}}' train").stdout.strip()
        assert ran["nodes"][node]["image"] == image and ran["nodes"][node]["python"].startswith("3."), ran
    assert ran["launch_env"] == {"OMP_NUM_THREADS": "1"}  # the cpu profile's
    assert ran["plan_sha256"] == hashlib.sha256((run_dir / "plan" / "plan.json").read_bytes()).hexdigest()
    assert json.loads((run_dir / "run.json").read_text())["provenance"] == {
        k: v for k, v in ran.items() if k != "plan_sha256"
    }
    assert f"provenance   bundle commit {head[:12]}" in first.stdout, first.stdout
    _no_injection()

    # A run id names one run: -e run_id of this run is refused on the controller, from its own records, before any
    # node is contacted; a controller without those records (another -e runs_dir) is refused on every node.
    again = (*SMALL, "-e", "train_iters=20", "-e", ODD_EXP, "-e", f"run_id={run_dir.name}")
    reused = playbook("train.yml", *again)
    assert reused.returncode != 0 and f"run id {run_dir.name} names an earlier run of {ODD}" in reused.stdout
    assert not nodes_contacted(reused.stdout)
    reused = playbook("train.yml", *again, "-e", f"runs_dir={tmp_path / 'another-controller'}")
    assert reused.returncode != 0 and f"run id {run_dir.name} belongs to an earlier run" in reused.stdout
    assert "node1: the run directory" in reused.stdout and "node2: the run directory" in reused.stdout
    assert "Start every node's launch" not in reused.stdout

    # report.yml collects the run again from the nodes and rebuilds its report.
    shutil.rmtree(run_dir / "node1")
    (run_dir / "summary.json").unlink()
    rebuilt = playbook("playbooks/report.yml", "-e", json.dumps({"run": str(run_dir)}))
    assert rebuilt.returncode == 0, rebuilt.stdout[-4000:]
    assert (run_dir / "node1" / "launch.out").exists()
    assert json.loads((run_dir / "summary.json").read_text())["last_iteration"] == 20

    # The same experiment again: it resumes from the checkpoint of iteration 20 and trains 21..130, enough
    # iterations for a straggler verdict (the first report left out, 101 needed): none on the untouched testbed
    # (test_watch.py throttles a node and asks for it).
    second = playbook("train.yml", *SMALL, "-e", "train_iters=130", "-e", ODD_EXP)
    assert second.returncode == 0, second.stdout[-6000:]
    assert "resume       from iteration 20" in second.stdout
    resumed = json.loads((_latest_run(ODD) / "summary.json").read_text())
    metrics = [json.loads(line) for line in (_latest_run(ODD) / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in metrics] == list(range(21, 131)) and resumed["state"] == "finished"
    assert resumed["straggler_reports"] == 110 and resumed["stragglers"] == [], resumed["stragglers"]
    assert any(line.startswith("stragglers   none:") for line in resumed["table"]), resumed["table"]
    # fresh=true (the checkpoints moved aside, a start at iteration 1): test_slurm_launcher.py's first test


def _rank_environ(node: str, exp: str, rank: int) -> dict[str, str]:
    """/proc/<pid>/environ of the experiment's rank ``rank`` (torchrun's RANK) in the node's container."""
    found = in_container(node, f"cat /proc/{rank_pid(node, exp, rank)}/environ").stdout
    return dict(entry.split("=", 1) for entry in found.split("\0") if "=" in entry)


#: what torchrun sets per rank, and the container's hostname (with host networking, each node's own)
PER_RANK = {"RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "TORCHELASTIC_ERROR_FILE", "HOSTNAME"}


def _same_start(environ: dict[str, str]) -> dict[str, str]:
    return {name: value for name, value in environ.items() if name not in PER_RANK}


def test_a_busy_cluster_is_refused_and_stop_twice_changes_nothing_the_second_time(provisioned):
    # the testbed's default job (the smoke job) at tp=2 pp=2: Megatron's groups and the plan's dp (1), gbs 2
    started = playbook("train.yml", *SMALL, "-e", "tp=2", "-e", "pp=2", "-e", "train_iters=100000", "-e", "wait=false")
    assert started.returncode == 0, started.stdout[-4000:]
    exp = re.search(r"experiment\s+(\S+)", started.stdout).group(1)
    assert "tp2_pp2_dp1" in exp, exp
    _wait_for_iterations(exp, 3)
    assert "follow it:  ansible-playbook -i inventory/testbed playbooks/status.yml" in started.stdout
    status = playbook("playbooks/status.yml")
    assert status.returncode == 0, status.stdout[-4000:]
    assert re.search(r"node2\s+running", status.stdout), status.stdout[-3000:]
    # -e wait=false started the run's supervisor on the cluster: the run is watched with no terminal following it
    assert re.search(r"watched  by its supervisor \(pid \d+ in node1's container since ", status.stdout), status.stdout
    # the master's ranks (started through docker exec) and the worker's (over sshd) have one environment
    master, worker = _rank_environ("node1", exp, 0), _rank_environ("node2", exp, 2)
    assert master["MTT_TRAIN_OPS_ENV"] == "container" and master["PYTHONPATH"], master
    assert _same_start(master) == _same_start(worker), set(_same_start(master).items()) ^ set(
        _same_start(worker).items()
    )

    refused = playbook("train.yml", *SMALL, "-e", "train_iters=10")
    assert refused.returncode != 0
    assert f"node1: a job is running: run '{exp}/" in refused.stdout
    assert "ansible-playbook -i inventory/testbed stop.yml" in refused.stdout
    assert recap(refused.stdout)["node1"]["changed"] == 0

    stopped = playbook("stop.yml")
    assert stopped.returncode == 0, stopped.stdout[-4000:]
    assert re.search(r"node1: run \S+ \(process group \d+, \d+ processes\) stopped by SIGTERM", stopped.stdout)
    assert re.search(r"node2: run \S+ \(process group \d+, \d+ processes\) stopped by SIGTERM", stopped.stdout)
    assert all(c["changed"] >= 1 for name, c in recap(stopped.stdout).items() if name != "localhost")
    for node in ("node1", "node2"):
        assert "torchrun" not in in_container(node, "ps -eo args").stdout
    again = playbook("stop.yml")
    assert again.returncode == 0, again.stdout[-4000:]
    assert "node1: idle, nothing to stop" in again.stdout and "node2: idle, nothing to stop" in again.stdout
    assert all(c["changed"] == 0 for c in recap(again.stdout).values())


def test_a_rank_killed_on_a_worker_fails_the_run_naming_node_and_rank(provisioned):
    for node in ("node1", "node2"):
        in_container(node, "rm -rf /data/mtt-train-ops/runs/kill-a-rank")
    job = _train_in_background("-e", "train_iters=100000", "-e", "exp=kill-a-rank")
    try:
        _wait_for_iterations("kill-a-rank")
        # the newest smoke_train.py process on node2 is local rank 1 (global rank 3)
        in_container("node2", "kill -9 $(pgrep -n -f 'python3 -u .*smoke_trai[n].py')")
        killed = time.monotonic()
        output, _ = job.communicate(timeout=240)
    finally:
        job.kill()
    assert job.returncode != 0, output[-4000:]
    assert time.monotonic() - killed < 120, "train.yml took too long to notice the dead rank"
    watched = re.search(r"Run kill-a-rank/\S+ failed: (.*)", output)
    assert watched, output[-5000:]
    assert "node2" in watched.group(1) and re.search(r"rank [23]\b", watched.group(1)), watched.group(1)
    assert "SIGKILL" in output or "exitcode -9" in output or "Signal 9" in output
    for node in ("node1", "node2"):
        assert "smoke_train.py" not in in_container(node, "ps -eo args").stdout, f"ranks left on {node}"
    run_dir = _latest_run("kill-a-rank")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["state"] == "failed" and summary["failure"]["node"] == "node2"
    assert summary["last_iteration"] >= 3 and (run_dir / "node1").is_dir() and (run_dir / "node2").is_dir()
