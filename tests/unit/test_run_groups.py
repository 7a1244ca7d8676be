"""run_groups.py: live launches found by process group and mark, stopped for real (processes of this machine)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from trainops.node import run_groups

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "plugins" / "module_utils" / "trainops" / "node" / "run_groups.py"

pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")

#: An experiment name with spaces, quotes and shell and glob metacharacters (one directory level).
ODD_EXP = 'it\'s a "test"; $(touch pwned) `x` & | > < [ab]*?'

#: The launch script: records its process group (setsid made it the leader), starts a "rank" in a session of its
#: own (found only by the mark, as torchrun's ranks are), then waits like torchrun.
LAUNCH = """echo "$$" > "$MTT_TRAIN_OPS_RUN/pids/node1.pid"
setsid sleep 300 &
echo "$!" > "$MTT_TRAIN_OPS_RUN/rank.pid"
{extra}
sleep 300 &
wait
"""


def alive(pid: int) -> bool:
    """Running (not a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] != b"Z"


def carries(pid: int, run_dir: Path) -> bool:
    try:
        return f"MTT_TRAIN_OPS_RUN={run_dir}\0".encode() in Path(f"/proc/{pid}/environ").read_bytes() + b"\0"
    except OSError:
        return False


def wait_for(predicate, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def run_script(*args: str) -> tuple[int, dict]:
    """Run the script the way the role does: python3 - ARGS with the script on stdin."""
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)
    assert done.stderr == ""
    return done.returncode, json.loads(done.stdout)


class Launches:
    """Processes started by a test, every one ended at teardown (only those carrying the test's run dir mark,
    or its own direct children)."""

    def __init__(self, tmp_path: Path) -> None:
        self.work_home = tmp_path / "work home"
        self.children: list[subprocess.Popen] = []
        self.run_dirs: list[Path] = []

    def run_dir(self, exp: str = "exp1", run: str = "20261130-060020") -> Path:
        run_dir = self.work_home / "runs" / exp / run
        (run_dir / "pids").mkdir(parents=True)
        self.run_dirs.append(run_dir)
        return run_dir

    def launch(self, run_dir: Path, extra: str = "") -> dict[str, int]:
        """setsid bash <run_dir>/launch.sh, as the fan-out starts it; returns its pgid and its rank's pid."""
        script = run_dir / "launch.sh"
        script.write_text(LAUNCH.format(extra=extra))
        env = dict(os.environ, MTT_TRAIN_OPS_RUN=str(run_dir))
        proc = subprocess.Popen(["setsid", "bash", str(script)], env=env, stdin=subprocess.DEVNULL)
        self.children.append(proc)
        pid_file, rank_file = run_dir / "pids" / "node1.pid", run_dir / "rank.pid"
        assert wait_for(lambda: rank_file.exists() and rank_file.read_text().strip() and pid_file.read_text().strip())
        pgid, rank = int(pid_file.read_text()), int(rank_file.read_text())
        assert pgid == proc.pid == os.getpgid(proc.pid)
        assert wait_for(lambda: os.getpgid(rank) == rank)  # the rank is in a session of its own (once setsid ran)
        assert wait_for(lambda: Path(f"/proc/{rank}/cmdline").read_bytes().startswith(b"sleep"))
        return {"pgid": pgid, "rank": rank}

    def unrelated(self) -> subprocess.Popen:
        proc = subprocess.Popen(["sleep", "300"], start_new_session=True, stdin=subprocess.DEVNULL)
        self.children.append(proc)
        return proc

    def cleanup(self) -> None:
        for run_dir in self.run_dirs:
            for entry in os.listdir("/proc"):
                if entry.isdigit() and carries(int(entry), run_dir):
                    try:
                        os.kill(int(entry), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        for proc in self.children:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def launches(tmp_path, request):
    made = Launches(tmp_path)
    request.addfinalizer(made.cleanup)
    return made


def test_list_then_stop_by_sigterm_then_nothing_left(launches):
    run_dir = launches.run_dir()
    started = launches.launch(run_dir)
    group = {"pgid": started["pgid"], "run_dir": str(run_dir)}
    assert started["rank"] not in run_groups.members(started["pgid"])
    assert started["rank"] in run_groups.marked(str(run_dir))
    assert started["rank"] in run_groups.processes(group)

    rc, listed = run_script("list", "node1", str(launches.work_home))
    assert rc == 0 and listed["node"] == "node1"
    [live] = listed["live"]
    assert (live["run_dir"], live["exp"], live["run_id"]) == (str(run_dir), "exp1", "20261130-060020")
    assert live["pgid"] == started["pgid"]
    assert live["processes"] == 3  # the launch shell, its sleep, and the rank in a session of its own
    assert list(run_groups.live_groups("node2", str(launches.work_home))) == []

    rc, stopped = run_script("stop", "node1", str(launches.work_home), "--grace", "5")
    assert rc == 0
    [result] = stopped["stopped"]
    assert result["result"] == "stopped by SIGTERM" and result["survivors"] == [] and result["frozen_killed"] == []
    assert stopped["live_after"] == []
    assert wait_for(lambda: not alive(started["rank"]) and not alive(started["pgid"]))

    rc, again = run_script("stop", "node1", str(launches.work_home), "--grace", "5")
    assert (rc, again) == (0, {"node": "node1", "stopped": [], "live_after": [], "restarts_cancelled": []})


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace(launches):
    run_dir = launches.run_dir()
    ignoring = 'setsid bash -c \'trap "" TERM; touch "$MTT_TRAIN_OPS_RUN/ignoring"; exec sleep 300\' &'
    started = launches.launch(run_dir, extra=ignoring)
    assert wait_for((run_dir / "ignoring").exists)
    rc, stopped = run_script("stop", "node1", str(launches.work_home), "--run-dir", str(run_dir), "--grace", "0.5")
    assert rc == 0
    [result] = stopped["stopped"]
    assert result["result"] == "killed by SIGKILL after 0.5 s"
    assert result["survivors"] == [] and result["seconds"] >= 0.5
    assert not run_groups.processes({"pgid": started["pgid"], "run_dir": str(run_dir)})


def test_a_stopped_rank_is_killed_at_once_not_given_the_grace(launches):
    """A rank under kill -STOP cannot act on SIGTERM: waiting out the grace for it would only delay the stop."""
    run_dir = launches.run_dir()
    started = launches.launch(run_dir)
    os.kill(started["rank"], signal.SIGSTOP)
    assert wait_for(lambda: run_groups.state(started["rank"]) == "T")
    rc, stopped = run_script("stop", "node1", str(launches.work_home), "--run-dir", str(run_dir), "--grace", "30")
    assert rc == 0
    [result] = stopped["stopped"]
    assert result["frozen_killed"] == [started["rank"]] and result["survivors"] == []
    assert result["result"] == f"stopped by SIGTERM (stopped processes [{started['rank']}] killed first)"
    assert wait_for(lambda: not alive(started["rank"]))


def test_run_dir_option_stops_only_that_run(launches):
    first, second = launches.run_dir(run="r1"), launches.run_dir(run="r2")
    keep = launches.launch(first)
    gone = launches.launch(second)
    assert {g["run_id"] for g in run_groups.live_groups("node1", str(launches.work_home))} == {"r1", "r2"}
    rc, stopped = run_script("stop", "node1", str(launches.work_home), "--run-dir", str(second), "--grace", "5")
    assert rc == 0 and [s["run_id"] for s in stopped["stopped"]] == ["r2"]
    assert wait_for(lambda: not alive(gone["rank"]))
    assert alive(keep["rank"]) and alive(keep["pgid"])
    assert [g["run_id"] for g in run_groups.live_groups("node1", str(launches.work_home))] == ["r1"]


def test_a_recycled_pgid_is_neither_reported_nor_signalled(launches):
    run_dir = launches.run_dir()
    other = launches.unrelated()  # no mark, not running from the run dir
    (run_dir / "pids" / "node1.pid").write_text(f"{other.pid}\n")
    assert run_groups.members(other.pid) == [other.pid]
    rc, listed = run_script("list", "node1", str(launches.work_home))
    assert (rc, listed["live"]) == (0, [])
    rc, stopped = run_script("stop", "node1", str(launches.work_home), "--grace", "0.5")
    assert (rc, stopped["stopped"]) == (0, [])
    time.sleep(0.2)
    assert other.poll() is None and alive(other.pid)


def test_unreadable_pid_files_are_skipped(launches):
    run_dir = launches.run_dir()
    (run_dir / "pids" / "node1.pid").write_text("not a pid\n")
    assert list(run_groups.live_groups("node1", str(launches.work_home))) == []


def test_an_odd_experiment_name_works(launches, tmp_path):
    run_dir = launches.run_dir(exp=ODD_EXP)
    started = launches.launch(run_dir)
    rc, listed = run_script("list", "node1", str(launches.work_home))
    assert rc == 0 and [g["exp"] for g in listed["live"]] == [ODD_EXP]
    rc, stopped = run_script("stop", "node1", str(launches.work_home), "--run-dir", str(run_dir), "--grace", "5")
    assert rc == 0 and stopped["stopped"][0]["result"] == "stopped by SIGTERM"
    assert wait_for(lambda: not alive(started["rank"]))
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()


def test_a_group_whose_processes_carry_the_mark_is_live(launches):
    """The docstring: live "while a process of its group runs from the run directory or carries its mark"."""
    run_dir = launches.run_dir()
    env = dict(os.environ, MTT_TRAIN_OPS_RUN=str(run_dir))
    proc = subprocess.Popen(["setsid", "sleep", "300"], env=env, stdin=subprocess.DEVNULL)
    launches.children.append(proc)
    assert wait_for(lambda: os.getpgid(proc.pid) == proc.pid)
    (run_dir / "pids" / "node1.pid").write_text(f"{proc.pid}\n")
    assert [g["pgid"] for g in run_groups.live_groups("node1", str(launches.work_home))] == [proc.pid]


def test_stop_cancels_the_restarts_of_every_run_only_when_asked(tmp_path):
    runs = [tmp_path / "runs" / "exp" / "r1", tmp_path / "runs" / ODD_EXP / "r2"]
    for run in runs:
        run.mkdir(parents=True)
        (run / "restarting").write_text("x\n")
    plain = subprocess.run(
        [sys.executable, str(SCRIPT), "stop", "node1", str(tmp_path)], capture_output=True, text=True, check=True
    )
    assert json.loads(plain.stdout)["restarts_cancelled"] == []
    assert all((run / "restarting").exists() for run in runs)
    asked = subprocess.run(
        [sys.executable, str(SCRIPT), "stop", "node1", str(tmp_path), "--cancel-restarts"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(asked.stdout)["restarts_cancelled"] == sorted(str(run) for run in runs)
    assert not any((run / "restarting").exists() for run in runs)
