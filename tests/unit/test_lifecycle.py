"""The run's lifecycle on the cluster (trainops.lifecycle), stepped as the supervisor steps it, with the node
package's own programs (run_groups.py, pack_logs.py, node_facts.py, checkpoint_scan.py) run for real on this
machine: each node of the plan is a run directory here, reached by a runner that runs the command in it (the
testbed's tests reach real containers over their sshd with the run's on-node.sh)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from presets import load_preset, make_plan
from trainops import health
from trainops.lifecycle import STATE_DIR, Lifecycle

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ROOT / "plugins" / "module_utils" / "trainops" / "node"
HOSTS = [
    {"name": "node1", "ansible_host": "172.30.0.11", "slots": 2, "accelerator": "cpu"},
    {"name": "node2", "ansible_host": "172.30.0.12", "slots": 2, "accelerator": "cpu"},
]


@pytest.fixture
def cluster(tmp_path):
    """The run's directory (shared by both nodes here, as on the testbed's shared storage), each node's logs and
    exit status of a failed attempt, the restart mark, and a runner that answers as on-node.sh does."""
    run_dir, work_home = tmp_path / "work" / "runs" / "life" / "r1", tmp_path / "work"
    layout = {"train_iters": 100, "seq_length": 128, "gbs": 8, "precision": "bf16"}
    plan = make_plan(model=load_preset("tiny"), hosts=HOSTS, layout=layout, run_id="r1", exp_name="life")
    plan = dict(plan, run_dir=str(run_dir), work_home=str(work_home), checkpoint_dir=str(tmp_path / "ckpt"))
    for node, rc in (("node1", 1), ("node2", 137)):
        (run_dir / "logs" / node).mkdir(parents=True)
        (run_dir / "logs" / node / "torchrun.log").write_text(f"{node}'s agent\n")
        (run_dir / "exit").mkdir(exist_ok=True)
        (run_dir / "exit" / f"{node}.rc").write_text(f"{rc}\n")
    (run_dir / "restarting").write_text("restarts\n")
    (tmp_path / "ckpt").mkdir()
    unreachable: set[str] = set()
    calls: list[tuple[str, list[str]]] = []

    def on_node(node, argv, stdin=None, binary=False):
        calls.append((node, argv))
        if node in unreachable:
            return {"rc": 255, "stdout": b"" if binary else "", "stderr": "ssh: connect to host: No route to host",
                    "failed": True, "msg": "ssh: connect to host: No route to host", "unreachable": True}  # fmt: skip
        argv = [sys.executable if part == "python3" else part for part in argv]
        done = subprocess.run(argv, input=stdin, capture_output=True, text=not binary, timeout=60)
        reply = {"rc": done.returncode, "stdout": done.stdout,
                 "stderr": done.stderr.decode() if binary else done.stderr}  # fmt: skip
        if done.returncode:
            reply.update(failed=True, msg=reply["stderr"])
        return reply

    said: list[str] = []
    request = {"plan": plan, "programs": str(PROGRAMS), "run_started": 1.0, "launched": "the test",
               "options": {"max_restarts": 1, "health": "warn", "verify_checkpoints": True},
               "health": {"device_tool": "nvidia-smi", "megatron_home": str(tmp_path)}}  # fmt: skip
    life = Lifecycle(str(run_dir), request, on_node, said.append)
    return life, run_dir, said, unreachable, calls


FAILED = {
    "state": "failed",
    "kind": "exited",
    "node": "node2",
    "reason": "torchrun on node2 exited with status 137",
    "last_iteration": {"iteration": 13},
    "first_iteration_s": 5.0,
}


def test_a_failed_attempt_is_stopped_judged_set_aside_and_the_next_one_prepared(cluster):
    life, run_dir, said, _, calls = cluster
    assert life.step() == "launch"
    life.launch()  # launched by "the test": nothing is started
    assert life.step() == "watch" and not any(argv[-1].endswith("fanout.sh") for _, argv in calls)
    life.ended(FAILED)
    assert life.step() == "after"
    view = life.after_attempt()
    assert view["next"] == "relaunch" and life.step() == "next", said
    state = run_dir / STATE_DIR
    # judged from the logs gathered from both nodes, recorded, and set aside with them
    record = json.loads((state / "attempt-1" / "attempt.json").read_text())
    assert record["attempt"] == 1 and record["state"] == "failed"
    assert (state / "attempt-1" / "node2" / "exit.rc").read_text().strip() == "137"
    # on the nodes, the attempt's logs moved aside for the next launch; the restart mark stays
    assert (run_dir / "attempt-1" / "logs" / "node1" / "torchrun.log").exists() and not (
        run_dir / "logs" / "node1"
    ).exists()
    assert (run_dir / "restarting").exists()
    # the quick health check ran on both nodes (no device tool here: the nodes' cards cannot be read)
    assert any(line.startswith("health       after the failure, from the master:") for line in said), said
    assert any("attempt 2 resumes from a fresh start (no save)" in line for line in said), said
    # a supervisor killed now and started again launches attempt 2, not the steps again
    again = Lifecycle(str(run_dir), life.request, life.on_node, said.append)
    assert again.step() == "next"


def test_a_restart_mark_removed_by_stop_yml_ends_the_run(cluster):
    life, run_dir, said, _, _ = cluster
    life.launch()
    life.ended(dict(FAILED, kind="stopped"))
    (run_dir / "restarting").unlink()
    view = life.after_attempt()
    assert view["next"] == "end" and life.step() == "done"
    assert "stop.yml" in view["decision"]["reason"], view["decision"]


def test_the_health_check_after_a_failure_carries_a_recent_full_check_and_leaves_a_node_sick_in_it_out(cluster):
    life, _, said, _, _ = cluster
    now = time.time()
    burn_in = {"check": "burn_in", "status": "sick", "detail": "card 1 failed its burn-in", "action": "replace it"}
    full = [{"time": now - 3600, "level": "full", "verdicts": {"node2": {"checks": [burn_in]}}}]
    life.request = dict(life.request, health=dict(life.request["health"], full=full, max_age_h=24))
    life.options["health"] = "exclude"
    life.launch()
    life.ended(FAILED)
    view = life.after_attempt()
    assert view["next"] == "end" and "node2" in view["lost"], view  # no elastic: one node left is not the plan
    assert "sick in the health check" in view["lost"]["node2"], view["lost"]
    shown = next(line for line in said if line.startswith("health       after the failure"))
    assert "node2  sick" in shown and "(the full check of " in shown and "1.0 h ago)" in shown, shown
    assert life.attempts.left_out()["node2"].startswith("sick in the health check after attempt 1"), said
    # older than health_max_age: nothing is carried
    assert health.carry(full, ["node2"], now + 24 * 3600, 24 * 3600) == {}


def test_a_stop_asked_by_stop_yml_stops_every_node_with_its_grace_removes_the_mark_and_launches_nothing(cluster):
    life, run_dir, said, _, calls = cluster
    asked: dict = {}
    life.stopping = lambda: asked or None
    life.launch()
    life.ended(dict(FAILED, kind="stopped"))
    asked.update(asked_at=2.0, grace=7)
    view = life.after_attempt()
    assert view["next"] == "end" and life.step() == "done"
    assert view["decision"]["reason"] == "stop.yml stopped the run: no new attempt", view["decision"]
    stops = [argv for _, argv in calls if len(argv) > 1 and argv[1].endswith("run_groups.py")]
    assert len(stops) == 2 and all(argv[-3:] == ["--grace", "7", "--cancel-restarts"] for argv in stops), stops
    assert not (run_dir / "restarting").exists()
    assert not any(line.startswith("health") for line in said), said  # a stop is no failure to check nodes for
    assert not (run_dir / "attempt-1").exists()  # nothing set aside for an attempt that never comes


def test_a_stop_asked_between_two_attempts_launches_no_next_one(cluster):
    life, run_dir, said, _, calls = cluster
    life.launch()
    life.ended(FAILED)
    assert life.after_attempt()["next"] == "relaunch" and life.step() == "next"
    view = life.end_restarts()  # what the supervisor does at the step "next" once stop.yml asked
    assert view["next"] == "end" and life.step() == "done"
    assert said[-1] == "attempt 2 is not started: stop.yml stopped the run: no new attempt"
    assert not [argv for _, argv in calls if argv[-1].endswith("fanout.sh")]


def test_a_stop_asked_before_the_first_fan_out_starts_no_rank_and_ends_the_run_stopped(cluster):
    """stop.yml in the seconds between train.yml starting the supervisor and its first launch: the fan-out is not
    run, the attempt ends stopped on the master, and the steps after it launch nothing."""
    life, run_dir, said, _, calls = cluster
    life.request = dict(life.request, launched="")
    (run_dir / "fanout.sh").write_text("echo started >> fanout.runs\n")
    life.stopping = lambda: {"asked_at": 2.0, "grace": 7}
    view = life.launch()
    assert (view["number"], view["outcome"]["state"], view["outcome"]["kind"]) == (1, "failed", "stopped"), view
    assert "before attempt 1's launch" in view["outcome"]["reason"] and view["outcome"]["node"] == "node1"
    assert (
        said[-1] == "supervisor: stop.yml asked the run's supervisor to stop the run before attempt 1's launch: "
        "no rank is started"
    )
    assert life.step() == "after"
    assert life.after_attempt()["next"] == "end" and life.step() == "done"
    assert not [argv for _, argv in calls if argv[-1].endswith("fanout.sh")] and not (run_dir / "fanout.runs").exists()


def test_a_node_the_master_cannot_reach_is_lost_and_without_elastic_the_run_ends_naming_it(cluster):
    life, _, said, unreachable, calls = cluster
    unreachable.add("node2")
    life.launch()
    life.ended(FAILED)
    view = life.after_attempt()
    assert view["next"] == "end" and "node2" in view["lost"], view
    assert "unreachable" in view["lost"]["node2"] and "No route to host" in view["lost"]["node2"]
    assert "node2: unreachable from the master (ssh: connect to host: No route to host): it gets no rank again" in said
    # nothing but the reach was tried on it
    assert [argv for node, argv in calls if node == "node2"] == [["true"]]


def test_a_supervisor_killed_between_its_steps_takes_none_of_them_twice(cluster, monkeypatch):
    life, run_dir, said, _, calls = cluster
    life.launch()
    life.ended(FAILED)

    def killed(self, view):  # the supervisor dies (SIGKILL) after the judge, before the resume choice
        raise SystemExit("killed")

    monkeypatch.setattr(Lifecycle, "_resume", killed)
    with pytest.raises(SystemExit):
        life.after_attempt()
    monkeypatch.undo()
    again = Lifecycle(str(run_dir), life.request, life.on_node, said.append)
    assert again.step() == "after"
    view = again.after_attempt()
    assert view["next"] == "relaunch" and again.step() == "next"
    state = json.loads((run_dir / STATE_DIR / "attempts.json").read_text())
    assert len(state["records"]) == 1, state["records"]  # judged once: the restart budget is not spent twice
    stops = [argv for _, argv in calls if len(argv) > 1 and argv[1].endswith("run_groups.py")]
    assert len(stops) == 2, stops  # each node stopped once


def test_a_finished_attempt_is_judged_where_restarts_are_on_and_the_run_ends(cluster):
    life, run_dir, _, _, calls = cluster
    (run_dir / "exit" / "node1.rc").write_text("0\n")
    (run_dir / "exit" / "node2.rc").write_text("0\n")
    life.launch()
    life.ended({"state": "finished", "last_iteration": {"iteration": 100}, "first_iteration_s": 5.0})
    assert life.step() == "after"
    view = life.after_attempt()
    assert view["next"] == "end" and life.step() == "done"
    record = json.loads((run_dir / STATE_DIR / "attempt-1" / "attempt.json").read_text())
    assert record["state"] == "finished"
    assert not [argv for _, argv in calls if len(argv) > 1 and argv[1].endswith("run_groups.py")]  # nothing to stop


def test_a_fan_out_a_killed_supervisor_may_have_run_is_not_run_again(cluster):
    life, run_dir, said, _, calls = cluster
    life.request = dict(life.request, launched="")
    (run_dir / "fanout.sh").write_text("echo started >> fanout.runs\n")
    life.attempts.begin(life.request["plan"], "", 1.0, 1.0)
    life.attempts.launching()  # killed after this, before the fan-out returned
    again = Lifecycle(str(run_dir), life.request, life.on_node, said.append)
    view = again.launch()
    assert view["number"] == 1 and again.step() == "watch"
    assert not [argv for _, argv in calls if argv[-1].endswith("fanout.sh")]
    assert "it is not run again" in said[-1]


def test_a_slurm_runs_next_attempt_is_started_by_its_job_tasks_and_they_are_told_when_the_run_ends(cluster):
    """-e launcher=slurm with -e max_restarts: each node's job task says it waits (slurm-task-<node>); the next
    attempt is started by writing slurm-next (no fan-out), and the run's end tells the tasks to end."""
    life, run_dir, said, _, calls = cluster
    life.request["slurm_job"] = "17"
    life.launch()
    life.ended(FAILED)
    for node in ("node1", "node2"):
        (run_dir / f"slurm-task-{node}").write_text("waiting 1 137\n")
    view = life.after_attempt()
    assert view["next"] == "relaunch" and life.step() == "next", said
    view = life.launch()
    assert view["number"] == 2 and (run_dir / "slurm-next").read_text() == "2\n"
    assert life.attempts.current["fanout"]["stdout"] == "Slurm job 17's tasks told to start attempt 2"
    assert not any(argv[-1].endswith("fanout.sh") for _, argv in calls)
    life.ended({"state": "finished", "kind": None, "node": None, "reason": "", "last_iteration": {"iteration": 100}})
    life.after_attempt()
    assert life.step() == "done"
    life.finish()
    assert (run_dir / "slurm-next").read_text() == "end\n"


def test_a_slurm_job_whose_task_has_ended_starts_no_next_attempt_and_says_why(cluster):
    life, run_dir, said, _, _ = cluster
    life.request["slurm_job"] = "18"
    life.launch()
    life.ended(FAILED)
    (run_dir / "slurm-task-node1").write_text("waiting 1 1\n")
    (run_dir / "slurm-task-node2").write_text("ended by Slurm (the job's step ended: a cancel, its time limit)\n")
    view = life.after_attempt()
    assert view["next"] == "end" and life.step() == "done"
    reason = view["decision"]["reason"]
    assert reason.startswith("Slurm job 18 can start no attempt: its task on node2 has ended by Slurm"), reason
    assert "node1" not in reason and "train.yml run again resumes" in reason
    assert not (run_dir / "slurm-next").exists()
