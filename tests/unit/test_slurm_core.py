"""launcher=slurm's pure logic (trainops.slurm): the settings checked on the controller, sbatch's options from the
plan, and squeue's and sacct's real output (captured from the testbed's Slurm 22.05, tests/fixtures/slurm/)
turned into the queue lines and the run's outcome."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from trainops import outcome, slurm
from trainops.errors import PlanError

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "slurm"
NODES = ["node1", "node2"]
PLAN = {
    "exp_name": "s1",
    "run_id": "20261201-100835",
    "run_dir": "/data/mtt-train-ops/runs/s1/20261201-100835",
    "work_home": "/data/mtt-train-ops",
    "nodes": [
        {"name": "node1", "addr": "10.0.0.1", "slots": 8, "node_rank": 0},
        {"name": "node2", "addr": "10.0.0.2", "slots": 8, "node_rank": 1},
    ],
}


def settings(**raw):
    return slurm.settings({"launcher": "slurm", **raw}, NODES, ["login1"])


def test_ssh_is_the_default_and_takes_no_slurm_option():
    assert slurm.settings({}, NODES, []) == {"launcher": "ssh"}
    with pytest.raises(PlanError, match="slurm_partition need -e launcher=slurm"):
        slurm.settings({"slurm_partition": "gpu"}, NODES, [])


def test_slurm_settings_default_to_every_inventory_node_and_the_partitions_defaults():
    got = settings()
    assert got == {
        "launcher": "slurm",
        "login": "login1",
        "nodes": 2,
        "partition": "",
        "time": None,
        "queue_timeout": 3600.0,
        "go_timeout": 900,
        "gpus_per_node": "auto",
        "output_dir": "/tmp",
        "hosts": ["node1", "node2"],
        "exclude": [],
    }


def test_a_spare_is_never_allocated_under_slurm():
    """A spare gets no rank with launcher=slurm either: Slurm is asked not to give it (--exclude, by its Slurm
    name), slurm_nodes counts the other nodes, and the first plan is made on them."""
    raw = {"launcher": "slurm", "spares": ["node2"], "slurm_names": {"node1": "a01", "node2": "a02", "node3": "a03"}}
    got = slurm.settings(raw, ["node1", "node2", "node3"], ["login1"])
    assert (got["nodes"], got["hosts"], got["exclude"]) == (2, ["node1", "node3"], ["a02"])
    assert "--exclude=a02" in slurm.batch_options(PLAN, got, gres_gpu=False)
    with pytest.raises(PlanError) as caught:
        slurm.settings(dict(raw, slurm_nodes=3), ["node1", "node2", "node3"], ["login1"])
    assert caught.value.problems == [
        "-e slurm_nodes=3 must be a whole number from 1 to 2 (the nodes of the inventory, where the containers are "
        "provisioned, less its spares (node2), which Slurm is asked not to give)"
    ]
    with pytest.raises(PlanError, match=r"every node is a spare \(spare: true on node1, node2\)"):
        slurm.settings({"launcher": "slurm", "spares": ["node1", "node2"]}, NODES, ["login1"])


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({"exclude_nodes": ["node2"]}, "-e exclude_nodes=node2 is not honoured with -e launcher=slurm: Slurm picks"),
        ({"use_nodes": ["node1"]}, "-e use_nodes=node1 is not honoured with -e launcher=slurm: Slurm picks"),
        ({"elastic": True}, "-e elastic=true is not honoured with -e launcher=slurm: a restart under Slurm runs"),
        ({"min_nodes": 2}, "-e min_nodes=2 is not honoured with -e launcher=slurm"),
        ({"incident_limit": 1}, "-e incident_limit=1 is not honoured with -e launcher=slurm: the incident record"),
        ({"incident_window_days": 3.0}, "-e incident_window_days=3.0 is not honoured"),
        ({"health": "exclude"}, "-e health=exclude is not honoured with -e launcher=slurm: with Slurm a sick node"),
    ],
)
def test_options_slurm_cannot_honour_are_refused_naming_them(given, words):
    assert [p for p in slurm.unhonoured(given) if p.startswith(words)], slurm.unhonoured(given)


def test_what_slurm_honours_passes():
    assert slurm.unhonoured({"elastic": False, "health": "warn", "exclude_nodes": [], "max_restarts": 0}) == []


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"slurm_nodes": 3}, "slurm_nodes=3 must be a whole number from 1 to 2"),
        ({"slurm_nodes": "0"}, "slurm_nodes='0' must be"),
        ({"slurm_nodes": True}, "slurm_nodes=True must be"),
        ({"slurm_partition": "gpu;rm"}, "is not a partition name"),
        ({"slurm_time": "soon"}, "must be minutes (90)"),
        ({"slurm_time": "0"}, "at least 1 minute"),
        ({"slurm_time": "1:60:00"}, "minutes or seconds of 60"),
        ({"slurm_queue_timeout": -1}, "slurm_queue_timeout=-1 must be seconds > 0"),
        ({"slurm_gpus_per_node": "8"}, "must be auto, true or false"),
        ({"slurm_go_timeout": "5"}, "slurm_go_timeout='5' must be whole seconds >= 10"),
        ({"slurm_output_dir": "logs"}, "must be an absolute path"),
    ],
)
def test_bad_slurm_settings_are_refused_naming_the_option(raw, message):
    with pytest.raises(PlanError) as caught:
        settings(**raw)
    assert any(message in problem for problem in caught.value.problems), caught.value.problems


def test_slurm_needs_a_login_group_and_every_problem_is_listed_at_once():
    with pytest.raises(PlanError) as caught:
        slurm.settings({"launcher": "slurm", "slurm_time": "x"}, NODES, [])
    assert len(caught.value.problems) == 2
    assert "slurm_login group" in caught.value.problems[0]


@pytest.mark.parametrize(
    ("given", "expected"),
    [(None, None), ("", None), (90, "90"), ("1:30:00", "1:30:00"), ("2-00:00:00", "2-00:00:00"), ("2-12", "2-12")],
)
def test_time_limits_take_minutes_or_slurms_own_forms(given, expected):
    assert slurm.time_limit(given) == expected


def test_batch_options_come_from_the_plan_one_task_per_whole_node():
    options = slurm.batch_options(PLAN, settings(slurm_partition="gpu", slurm_time=120), gres_gpu=False)
    assert options == [
        "--job-name=mtt-s1",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--exclusive",
        "--no-requeue",
        "--output=/tmp/mtt-s1-20261201-100835-%j.out",
        "--comment=mtt-train-ops:s1/20261201-100835",
        "--partition=gpu",
        "--time=120",
    ]


@pytest.mark.parametrize(
    ("sinfo", "wanted", "asked"),
    [
        ((FIXTURES / "sinfo-gres-none.txt").read_text(), "auto", False),  # the testbed: no GRES
        ("gpu:8\n", "auto", True),
        ("gpu:s5000:8(S:0-1)\n", "auto", True),
        ("(null)\ngpu:h200:8\n", "auto", True),
        ("gpu:8\n", "false", False),
        ("(null)\n", "true", True),
        ("gpumem:80G\n", "auto", False),
    ],
)
def test_gpus_are_asked_for_where_the_partition_has_gpu_gres(sinfo, wanted, asked):
    options = slurm.batch_options(PLAN, settings(slurm_gpus_per_node=wanted), slurm.has_gpu_gres(sinfo))
    assert ("--gpus-per-node=8" in options) is asked


def test_the_real_queue_shows_a_pending_job_with_its_reason():
    jobs = slurm.parse_queue((FIXTURES / "squeue-pending.txt").read_text())
    assert [slurm.queue_line(job) for job in jobs] == ["job 11 PENDING (Resources)", "job 9 RUNNING on node[1-2]"]
    assert [job["job_id"] for job in slurm.bundle_jobs(jobs)] == ["11"]


def _record(job_id: str):
    return slurm.parse_accounting((FIXTURES / "sacct-jobs.txt").read_text(), job_id)


def test_sacct_records_are_found_by_job_id_and_cancelled_by_is_split_off():
    assert _record("8")["state"] == "CANCELLED" and _record("8")["by"] == "0"
    assert _record("17")["exit_code"] == "1:0"
    assert _record("99") is None
    assert slurm.accounting_text(_record("15")) == (
        "Slurm job 15: TIMEOUT after 00:01:04 (limit 00:01:00), exit code 0:15, on node[1-2]"
    )


def test_a_completed_job_keeps_the_watchers_outcome_and_adds_slurms_record():
    got = slurm.outcome_with_job({"state": "finished"}, _record("11"), "11")
    assert got["state"] == "finished"
    assert got["slurm"]["state"] == "COMPLETED"


def test_a_time_limit_is_a_timeout_not_a_crash():
    watched = {"state": "failed", "kind": "killed", "node": "node2", "reason": "the launch on node2 is gone"}
    got = slurm.outcome_with_job(watched, _record("15"), "15")
    assert got["kind"] == "timeout"
    assert "reached its time limit" in got["reason"] and "not a crash" in got["reason"]


def test_a_failed_job_keeps_the_named_rank_and_adds_slurms_state():
    watched = {"state": "failed", "kind": "exited", "node": "node2", "reason": "torchrun on node2 exited with status 1"}
    got = slurm.outcome_with_job(watched, _record("17"), "17")
    assert got["node"] == "node2" and got["kind"] == "exited"
    assert (
        got["reason"]
        == "torchrun on node2 exited with status 1; Slurm job 17: FAILED after 00:00:36, exit code 1:0, on node[1-2]"
    )


def test_a_cancel_outside_stop_yml_is_named_but_stop_yml_is_not_blamed():
    got = slurm.outcome_with_job({"state": "failed", "kind": "killed", "node": "node1"}, _record("8"), "8")
    assert got["kind"] == "cancelled" and "not by stop.yml" in got["reason"]
    stopped = slurm.outcome_with_job({"state": "failed", "kind": "stopped", "node": "node1"}, _record("8"), "8")
    assert stopped["kind"] == "stopped"


def test_a_job_train_yml_cancelled_after_its_run_ended_keeps_the_watchers_cause():
    lost = {"state": "failed", "kind": "lost", "node": "node2", "reason": "node2 does not answer"}
    got = slurm.outcome_with_job(lost, _record("8"), "8", cancelled_here=True)
    assert got["kind"] == "lost" and got["node"] == "node2" and got["reason"] == "node2 does not answer"
    assert got["slurm"]["text"].endswith("(by train.yml: the job outlived its run)")


def test_a_lost_node_in_slurm_keeps_the_watchers_node():
    record = dict(_record("17"), state="NODE_FAIL")
    got = slurm.outcome_with_job({"state": "failed", "kind": "lost", "node": "node2", "reason": "gone"}, record, "17")
    assert got["kind"] == "lost" and got["node"] == "node2"
    assert got["reason"].startswith("gone; Slurm job 17: NODE_FAIL")


def test_a_node_slurm_lost_while_its_ranks_ran_on_is_named_from_sinfo():
    # the testbed: node2's slurmd killed mid-run; 120 s later Slurm marks it down* and ends the job NODE_FAIL
    down = slurm.unresponsive_nodes((FIXTURES / "sinfo-node-down.txt").read_text())
    assert down == {"node2": "down*: Not responding"}
    record = dict(_record("17"), state="NODE_FAIL")
    watched = {"state": "failed", "kind": "killed", "node": "node1", "reason": "the launch on node1 is gone"}
    got = slurm.outcome_with_job(watched, record, "17", lost_nodes=down)
    assert got["kind"] == "node_fail" and got["node"] == "node2"
    assert "Slurm lost node2 (down*: Not responding) and ended the job" in got["reason"]
    assert slurm.outcome_with_job(watched, record, "17")["reason"].count("Slurm lost a node of the job") == 1


def test_no_record_is_said_plainly():
    got = slurm.outcome_with_job({"state": "finished"}, None, "5")
    assert got["slurm"]["text"] == "Slurm job 5: sacct has no record"


def test_the_allocation_maps_to_inventory_hosts_in_slurms_order_and_names_strangers():
    hosts, unknown = slurm.allocation_hosts(["gpu-b", "gpu-a", "gpu-z"], {"gpu-a": "node1", "gpu-b": "node2"})
    assert hosts == ["node2", "node1"] and unknown == ["gpu-z"]


def test_the_go_table_names_every_node_with_its_rank():
    assert slurm.go_table(PLAN, {"node1": "gpu-a"}) == "gpu-a node1 0\nnode2 node2 1\n"


def _render_batch(tmp_path: Path) -> Path:
    """The batch script as train.yml renders it: the real template, through Ansible's template lookup."""
    out = tmp_path / "batch.sh"
    template = ROOT / "templates" / "slurm-batch.sh.j2"
    template_vars = {
        "slurm_plan": PLAN,
        "slurm_options": ["--nodes=2"],
        "slurm_batch_container": "train",
        "slurm_batch_go_timeout": 4,
        "slurm_batch_stop_grace_s": 5,
        "slurm_batch_max_restarts": 1,
        "slurm_batch_programs": "/opt/mtt-train-ops/0123456789ab/trainops/node",
    }
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": template_vars,
            "tasks": [
                {
                    "ansible.builtin.copy": {
                        "content": f"{{{{ lookup('ansible.builtin.template', '{template}') }}}}",
                        "dest": str(out),
                        "mode": "0755",
                    }
                }
            ],
        }
    ]
    playbook = tmp_path / "render.yml"
    playbook.write_text(json.dumps(play))
    binary = Path(sys.executable).parent / "ansible-playbook"
    done = subprocess.run(
        [
            str(binary),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            str(playbook),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    return out


def test_the_batch_script_is_valid_bash_and_its_node_task_refuses_a_missing_go_file(tmp_path):
    script = _render_batch(tmp_path)
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    task = text.split("<<'TASK'\n", 1)[1].split("\nTASK\n", 1)[0]
    # what srun exports to each task: the batch script's own MTT_SLURM_* variables
    exported = dict(
        shlex.split(line[len("export ") :])[0].split("=", 1)
        for line in text.splitlines()
        if line.startswith("export MTT_SLURM_")
    )
    assert set(exported) == {"MTT_SLURM_CONTAINER", "MTT_SLURM_RUN_DIR", "MTT_SLURM_WORK_HOME", "MTT_SLURM_PROGRAMS"}
    # the node task, run as srun would on a node without the container: a docker that always fails
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "docker").write_text("#!/bin/sh\nexit 1\n")
    (fake / "docker").chmod(0o755)
    done = subprocess.run(
        ["bash", "-c", task],
        env={"PATH": f"{fake}:/usr/bin:/bin", "SLURMD_NODENAME": "node2", "SLURM_NODEID": "1", **exported},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "train.yml did not write the run's files into container train within 4 s; nothing started" in done.stderr


def test_with_restarts_a_node_task_waits_after_an_attempt_starts_the_next_it_is_told_and_ends_when_told(tmp_path):
    """The node task's loop (-e max_restarts), run as srun would, with a docker whose exec runs the command here:
    attempt 1's launch fails, the task says it waits, starts attempt 2 when slurm-next says 2, and exits with that
    launch's status when slurm-next says end."""
    script = _render_batch(tmp_path)
    text = script.read_text()
    task = text.split("<<'TASK'\n", 1)[1].split("\nTASK\n", 1)[0]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "slurm-go").write_text(slurm.go_table(PLAN, {}))
    # the launch fails the first time (status 3) and finishes the second
    launches = run_dir / "launches"
    (run_dir / "launch-node2.sh").write_text(f"echo x >> {launches}; [ $(wc -l < {launches}) -gt 1 ] || exit 3\n")
    fake = tmp_path / "bin"
    fake.mkdir()
    # docker exec [-d] CONTAINER ARGV... runs ARGV here
    (fake / "docker").write_text(
        '#!/bin/bash\n[ "$1" = exec ] || exit 1\nshift\n[ "$1" = -d ] && shift\nshift\nexec "$@"\n'
    )
    (fake / "docker").chmod(0o755)
    env = {"PATH": f"{fake}:/usr/bin:/bin", "SLURMD_NODENAME": "node2", "SLURM_NODEID": "1",
           "MTT_SLURM_CONTAINER": "train", "MTT_SLURM_RUN_DIR": str(run_dir), "MTT_SLURM_WORK_HOME": str(tmp_path),
           "MTT_SLURM_PROGRAMS": str(tmp_path)}  # fmt: skip
    mark = run_dir / "slurm-task-node2"

    def await_mark(expected: str) -> None:
        deadline = time.monotonic() + 20
        while not (mark.exists() and mark.read_text().strip() == expected):
            assert time.monotonic() < deadline, mark.read_text() if mark.exists() else "no mark"
            time.sleep(0.2)

    task_process = subprocess.Popen(["bash", "-c", task], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True)  # fmt: skip
    try:
        await_mark("waiting 1 3")
        (run_dir / "slurm-next").write_text("2\n")
        await_mark("waiting 2 0")
        (run_dir / "slurm-next").write_text("end\n")
        out, _ = task_process.communicate(timeout=20)
    finally:
        task_process.kill()
    assert task_process.returncode == 0, out
    assert launches.read_text() == "x\nx\n"
    assert "launch-node2.sh exited with status 3 (attempt 1)" in out and "(attempt 2)" in out
    assert mark.read_text().strip() == "ended the run's supervisor ended the run after attempt 2"


def test_a_run_left_going_under_slurm_names_its_job_and_the_commands_take_the_launcher():
    text = outcome.running_text(PLAN, {"state": "running"}, "/runs/s1/x", {"id": "8", "slurm_nodes": NODES})
    assert "slurm:      job 8 on node1,node2 (squeue --jobs 8)" in text
    assert "stop it:    ansible-playbook stop.yml -e launcher=slurm" in text
    assert "-e launcher" not in outcome.running_text(PLAN, {"state": "running"}, "/runs/s1/x")


def test_the_playbooks_read_squeue_in_the_cores_format():
    play = yaml.safe_load((ROOT / "playbooks" / "slurm_jobs.yml").read_text())[0]
    assert play["vars"]["slurm_jobs_squeue"][-1] == f"--format={slurm.SQUEUE_FORMAT}"
