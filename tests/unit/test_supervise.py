"""The run's supervisor (trainops/node/supervise.py), run here as train_watch runs it in the master's container:
``start`` with the watch's request on stdin, then ``read`` until its result, over a run directory whose probe.sh
prints what the test writes (the nodes' launch states), on this machine's processes."""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from presets import load_preset, make_plan
from trainops.watch import WatchRequest

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ROOT / "plugins" / "module_utils" / "trainops" / "node"
HOSTS = [
    {"name": "node1", "ansible_host": "172.30.0.11", "slots": 2, "accelerator": "cpu"},
    {"name": "node2", "ansible_host": "172.30.0.12", "slots": 2, "accelerator": "cpu"},
]
RUNNING = "node\tnode1\trunning\t11\nnode\tnode2\trunning\t12\n"
FINISHED = "node\tnode1\texited\t0\nnode\tnode2\texited\t0\n"


def supervise(*args: str, stdin: str = "") -> dict:
    done = subprocess.run([sys.executable, str(PROGRAMS / "supervise.py"), *args], input=stdin,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def run(tmp_path):
    """A run directory with its probe.sh (which prints the file ``states``) and the watch's request."""
    run_dir = tmp_path / "work" / "runs" / "sv" / "r1"  # under a work home, as stop.yml finds the runs
    run_dir.mkdir(parents=True)
    (run_dir / "states").write_text(RUNNING)
    (run_dir / "probe.sh").write_text(f"cat {run_dir}/states\n")
    (run_dir / "on-node.sh").write_text('shift; exec "$@"\n')  # one node, the supervisor's own: run it here
    layout = {"train_iters": 20, "seq_length": 256, "gbs": 8, "precision": "bf16"}
    plan = dict(make_plan(model=load_preset("tiny"), hosts=HOSTS, layout=layout, run_id="r1", exp_name="sv"),
                run_dir=str(run_dir), work_home=str(tmp_path / "work"))  # fmt: skip
    request = WatchRequest(plan=plan, probe=str(run_dir / "probe.sh"), programs=str(PROGRAMS), poll_interval=1.0,
                           wait=30.0, verify_checkpoints=False)  # fmt: skip
    assert WatchRequest(**json.loads(request.to_json())) == request
    # the test's ranks are "launched" already (the supervisor starts nothing); no restarts
    started = {"run_started": 1.0, "launched": "the test's nodes", "options": {"max_restarts": 0}}
    return run_dir, json.dumps({"watch": json.loads(request.to_json()), "run": started})


def follow(run_dir: Path, until: float = 30) -> tuple[list[str], dict]:
    lines, offset, deadline = [], 0, time.monotonic() + until
    while time.monotonic() < deadline:
        answer = supervise("read", "--run-dir", str(run_dir), "--offset", str(offset), "--wait", "2")
        lines += answer["lines"]
        offset = answer["offset"]
        if answer["result"] is not None and not answer["lines"]:
            return lines, answer["result"]
    raise AssertionError(f"no result within {until} s: {lines}")


def test_the_supervisor_watches_detached_and_its_result_is_read_once_the_run_ends(run):
    run_dir, request = run
    started = supervise("start", "--run-dir", str(run_dir), stdin=request)
    assert started["started"] and started["pid"] > 0 and not started["ended"]
    # a second start (another terminal, a train.yml again) finds it running and starts nothing
    again = supervise("start", "--run-dir", str(run_dir), stdin=request)
    assert again == dict(started, started=False)
    time.sleep(1.5)
    snapshot = supervise("read", "--run-dir", str(run_dir))
    assert snapshot["pid"] == started["pid"] and snapshot["result"] is None
    assert snapshot["snapshot"]["state"] == "running" and snapshot["snapshot"]["nodes"]["node2"]["state"] == "running"
    # status.yml's view: the newest watch, its supervisor, its state, since when it runs
    seen = supervise("status", "--run-dir", str(run_dir))
    assert seen["attempt"] == 1 and seen["pid"] == started["pid"] and seen["state"] == "running"
    assert not seen["ended"] and seen["since"] <= time.time() and seen["events"].endswith("supervisor/events")
    state = json.loads((run_dir / "supervisor" / "run" / "attempts.json").read_text())
    assert state["current"]["number"] == 1 and state["current"]["fanout"]["stdout"] == "the test's nodes"
    assert seen["nodes"] == ["node1", "node2"] and seen["left_out"] == {} and seen["last_verified"] is None
    (run_dir / "states").write_text(FINISHED)
    _, result = follow(run_dir)
    watched = result["watch"]
    assert watched["state"] == "finished" and watched["nodes"]["node1"] == {"state": "exited", "detail": "0"}
    assert result["attempt"]["number"] == 1 and result["attempt"]["outcome"]["state"] == "finished"
    deadline = time.monotonic() + 10
    while supervise("read", "--run-dir", str(run_dir))["pid"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert supervise("read", "--run-dir", str(run_dir))["pid"] == 0  # it exits with its watch
    assert supervise("start", "--run-dir", str(run_dir), stdin=request)["ended"]


def test_a_supervisor_killed_mid_watch_is_started_again_and_takes_the_watch_up(run):
    run_dir, request = run
    first = supervise("start", "--run-dir", str(run_dir), stdin=request)["pid"]
    time.sleep(1.5)
    os.kill(first, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while supervise("read", "--run-dir", str(run_dir))["pid"] and time.monotonic() < deadline:
        time.sleep(0.2)
    dead = supervise("read", "--run-dir", str(run_dir))
    assert dead["pid"] == 0 and dead["result"] is None
    seen = supervise("status", "--run-dir", str(run_dir))  # without --take-up: only seen
    assert seen["pid"] == 0 and seen["taken_up_from"] == 0 and not seen["ended"] and seen["state"] == "running"
    # the next status.yml starts it again (as train.yml's follower would: both go through start)
    again = supervise("status", "--run-dir", str(run_dir), "--take-up")
    assert again["taken_up_from"] == first and again["pid"] not in (0, first)
    (run_dir / "states").write_text(FINISHED)
    lines, result = follow(run_dir)
    at = next(n for n, line in enumerate(lines) if line.startswith(f"supervisor: its process {first} ended before"))
    assert "taking the run up again" in lines[at] and "at its step 'watch'" in lines[at], lines
    assert lines[at + 1] == "supervisor: taking attempt 1's watch up from the logs' last 256 KiB", lines
    assert result["watch"]["state"] == "finished" and result["attempt"]["outcome"]["state"] == "finished"
    state = json.loads((run_dir / "supervisor" / "run" / "attempts.json").read_text())
    assert len(state["records"]) == 0 and state["current"]["number"] == 1  # no ranks launched again


def test_stop_asks_the_supervisor_which_ends_the_watch_at_once_and_answers_once_it_has(run):
    run_dir, request = run
    pid = supervise("start", "--run-dir", str(run_dir), stdin=request)["pid"]
    time.sleep(1.5)
    # its watch has no end of its own (the ranks run on): it ends because it was asked
    answer = supervise("stop", "--work-home", str(run_dir.parents[2]), "--grace", "5", "--wait", "30")
    assert [run["run_dir"] for run in answer["runs"]] == [str(run_dir)], answer
    stopped = answer["runs"][0]
    assert stopped["pid"] == pid and stopped["ended"] and stopped["attempt"] == 1 and stopped["state"] == "failed"
    result = json.loads((run_dir / "supervisor" / "result.json").read_text())
    assert result["attempt"]["outcome"]["kind"] == "stopped", result
    assert "stop.yml asked the run's supervisor to stop the run" in result["attempt"]["outcome"]["reason"]
    lines, _ = follow(run_dir)
    assert "supervisor: stop.yml asked for the run to stop: attempt 1 is stopped, and no new attempt starts" in lines
    # asked again (a second stop.yml): no supervisor lives, nothing is asked
    assert supervise("stop", "--work-home", str(run_dir.parents[2]), "--wait", "5") == {"runs": []}


def test_a_run_without_a_supervisor_says_so(tmp_path):
    assert supervise("status", "--run-dir", str(tmp_path), "--take-up") == {"attempt": 0, "run_dir": str(tmp_path)}


def test_a_watch_that_cannot_go_on_ends_with_its_error_for_the_follower(run):
    run_dir, request = run
    (run_dir / "probe.sh").write_text("echo 'the probe failed' >&2; exit 3\n")
    supervise("start", "--run-dir", str(run_dir), stdin=request)
    _, result = follow(run_dir)
    # two failed probes in a row: the master's container does not answer its own probe (the core's verdict)
    watched = result["watch"]
    assert watched["state"] == "failed" and watched["node"] == "node1" and "the probe failed" in watched["reason"]
    assert result["attempt"]["outcome"]["state"] == "failed" and result["attempt"]["next"] == "end"


def test_starts_at_once_start_one_supervisor(run):
    run_dir, request = run
    starts = [subprocess.Popen([sys.executable, str(PROGRAMS / "supervise.py"), "start", "--run-dir", str(run_dir),
                                ], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
              for _ in range(3)]  # fmt: skip
    answers = [json.loads(start.communicate(request, timeout=60)[0]) for start in starts]
    assert sum(answer["started"] for answer in answers) == 1, answers
    (run_dir / "states").write_text(FINISHED)
    assert follow(run_dir)[1]["watch"]["state"] == "finished"


def test_a_follower_that_attaches_late_reads_the_last_lines_first(tmp_path):
    events = tmp_path / "supervisor" / "events"
    events.parent.mkdir()
    said = [json.dumps({"t": n, "line": f"line {n}"}) for n in range(30)]
    events.write_text("\n".join(said) + '\n{"t": 30, "line": "cut sh')  # the last one is being written
    late = supervise("read", "--run-dir", str(tmp_path), "--offset", "-5")
    assert late["lines"] == [f"line {n}" for n in range(25, 30)] and late["pid"] == 0 and late["result"] is None
    # then on from where that read ended, as from any offset
    assert late["offset"] == len("\n".join(said)) + 1
    assert supervise("read", "--run-dir", str(tmp_path), "--offset", "-50")["lines"][0] == "line 0"


def load_program():
    spec = importlib.util.spec_from_file_location("supervise_program", PROGRAMS / "supervise.py")
    program = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(program)
    return program


def test_the_events_rotate_and_a_follower_reads_on_across_the_rotation(tmp_path):
    program = load_program()
    files = program.paths(str(tmp_path))
    Path(files["events"]).parent.mkdir()
    log = program.EventLog(files["events"], limit=400)
    read, offset = [], 0
    for n in range(40):  # about 45 bytes a line: a rotation every 9 lines
        log.say(f"line {n}")
        if n % 4 == 3:  # a follower that reads now and then, and so sees several rotations
            answer = program.read(str(tmp_path), offset, 0)
            read, offset = read + answer["lines"], answer["offset"]
    answer = program.read(str(tmp_path), offset, 0)
    assert read + answer["lines"] == [f"line {n}" for n in range(40)]
    # two files, each under the limit and a line: the rest was dropped
    sizes = [os.path.getsize(files["events"]), os.path.getsize(files["events"] + ".1")]
    assert all(size < 400 + 50 for size in sizes) and not os.path.exists(files["events"] + ".2")
    # a follower that fell behind by more than the two files is told, and goes on with what is kept
    late = program.read(str(tmp_path), 0, 0)
    kept = [json.loads(row)["line"] for row in Path(files["events"] + ".1").read_text().splitlines() if "line" in row]
    assert late["lines"][0].startswith("supervisor: ") and "rotated out" in late["lines"][0]
    assert late["lines"][1:] == kept and kept[0] != "line 0"
    # a follower that attaches late gets the last lines, from the rotated file too when the current one is new
    held = kept + [json.loads(row)["line"] for row in Path(files["events"]).read_text().splitlines() if "line" in row]
    for count in (1, 2, 5, len(held) + 3):
        attached = program.read(str(tmp_path), -count, 0)
        lines, at = attached["lines"], attached["offset"]
        while more := program.read(str(tmp_path), at, 0)["lines"]:  # the rest of the rotated file, read on
            lines, at = lines + more, program.read(str(tmp_path), at, 0)["offset"]
        assert lines == held[-count:], count
    # a supervisor taken up goes on with the same sequence of bytes (its base from the file's header)
    again = program.EventLog(files["events"], limit=400)
    assert again.base == log.base and again.size == log.size
    again.say("line 40")
    assert program.read(str(tmp_path), answer["offset"], 0)["lines"] == ["line 40"]


def test_a_supervisor_killed_mid_rotation_leaves_what_the_next_one_finishes(tmp_path):
    program = load_program()
    events = str(tmp_path / "events")
    log = program.EventLog(events, limit=300)
    for n in range(8):
        log.say(f"line {n}")
    base, size = log.base, log.size
    assert program.read(str(tmp_path / "nowhere"), 0, 0)["lines"] == []  # a watch not begun reads as empty
    # killed after the new file was written, before it was renamed into place: the next one renames it
    os.replace(events, events + ".1")
    Path(events + ".new").write_text(json.dumps({"base": base + size}) + "\n")
    again = program.EventLog(events, limit=300)
    assert again.base == base + size and not os.path.exists(events + ".new")
    # killed before the new file was written: the next one begins it where the rotated file ends
    os.remove(events)
    third = program.EventLog(events, limit=300)
    assert third.base == program.base_of(events + ".1") + os.path.getsize(events + ".1")


def test_a_follower_reading_while_the_supervisor_writes_and_rotates_misses_and_repeats_nothing(tmp_path):
    program = load_program()
    files = program.paths(str(tmp_path))
    Path(files["events"]).parent.mkdir()
    writer = subprocess.Popen([sys.executable, "-c", (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('s', {str(PROGRAMS / 'supervise.py')!r})\n"
        "s = importlib.util.module_from_spec(spec); spec.loader.exec_module(s)\n"
        f"log = s.EventLog({files['events']!r}, limit=3000)\n"
        "import time\n"
        "for n in range(1500): log.say(f'line {n}'); time.sleep(0.002)\n"
    )])  # fmt: skip
    lines, offset = [], 0
    while writer.poll() is None or len(lines) < 1500:
        answer = program.read(str(tmp_path), offset, 0)
        lines, offset = lines + answer["lines"], answer["offset"]
        if writer.poll() is not None and not answer["lines"]:
            break
    assert writer.returncode == 0
    assert lines == [f"line {n}" for n in range(1500)]  # about 25 rotations, read across as they came


def test_status_takes_a_dead_supervisor_up_while_a_reader_looks(run):
    run_dir, request = run
    first = supervise("start", "--run-dir", str(run_dir), stdin=request)["pid"]
    time.sleep(1.5)
    os.kill(first, signal.SIGKILL)
    files = load_program().paths(str(run_dir))
    deadline = time.monotonic() + 10
    while supervise("read", "--run-dir", str(run_dir))["pid"] and time.monotonic() < deadline:
        time.sleep(0.2)
    # a reader's look holds the supervisor's lock shared for a moment: the take-up waits for it, not gives up
    with open(files["lock"], "a") as held:
        fcntl.flock(held, fcntl.LOCK_SH)
        taking = subprocess.Popen([sys.executable, str(PROGRAMS / "supervise.py"), "status", "--run-dir",
                                   str(run_dir), "--take-up"], stdout=subprocess.PIPE, text=True)  # fmt: skip
        time.sleep(1)
    answer = json.loads(taking.communicate(timeout=60)[0])
    assert answer["taken_up_from"] == first and answer["pid"] not in (0, first), answer
    seen = supervise("status", "--run-dir", str(run_dir), "--take-up")
    assert seen["attempt"] == 1 and seen["pid"] == answer["pid"] and seen["taken_up_from"] == 0
    (run_dir / "states").write_text(FINISHED)
    assert follow(run_dir)[1]["watch"]["state"] == "finished"


def test_the_watch_s_sleep_ends_when_the_launch_here_exits_and_a_stop_request_cuts_it_short(tmp_path):
    program = load_program()
    files = program.paths(str(tmp_path))
    os.makedirs(os.path.dirname(files["stop.json"]))
    exit_file = tmp_path / "exit" / "node1.rc"
    exit_file.parent.mkdir()
    # the launch exits during a long sleep: the sleep ends then (a stop request 30 s later would fail the test)
    threading.Timer(0.3, exit_file.write_text, ("137\n",)).start()
    asked = threading.Timer(30, Path(files["stop.json"]).write_text, ("{}",))
    asked.start()
    try:
        program.napper(files, str(exit_file))(120)
    finally:
        asked.cancel()
    # an exit status there before the sleep began (a watch taken up) does not end every sleep at once
    threading.Timer(0.3, Path(files["stop.json"]).write_text, ("{}",)).start()
    with pytest.raises(program.StopAsked):
        program.napper(files, str(exit_file))(120)


def test_a_supervisor_on_another_node_copies_its_record_to_the_master_and_the_supervision_moves_there(run, tmp_path):
    """-e supervisor_host=node3: the record is copied to the master (node1) as the watch goes; node3 lost (its
    supervisor killed), ``move`` on the master takes the run up from the copy, without a launch, and names node1 in
    the plans; the old supervisor, started again, is told it was superseded and acts no more. The two nodes' run
    directories are three directories here: on-node.sh maps the run's path to the master's for node1, and the
    master's to node2's for node2 (the moved supervisor's standby node, which it copies the record to in turn)."""
    run_dir, request_text = run
    master_dir = tmp_path / "master" / "runs" / "sv" / "r1"
    node2_dir = tmp_path / "node2" / "runs" / "sv" / "r1"
    for where in (master_dir, node2_dir):
        where.mkdir(parents=True)
    (master_dir / "probe.sh").write_text(f"cat {run_dir}/states\n")
    on_node = (f"from={run_dir}; to={master_dir}; standby={node2_dir}\n"
               'name=$1; shift; if [[ $name == node1 ]]; then exec "${@//$from/$to}"; fi\n'
               'if [[ $name == node2 ]]; then exec "${@//$to/$standby}"; fi; exec "$@"\n')  # fmt: skip
    for where in (run_dir, master_dir):
        (where / "on-node.sh").write_text(on_node)
    request = json.loads(request_text)
    request["watch"]["plan"]["supervisor"] = "node3"
    old = supervise("start", "--run-dir", str(run_dir), stdin=json.dumps(request))["pid"]
    copy = master_dir / "supervisor.copy"
    deadline = time.monotonic() + 10
    while not (copy / "snapshot.json").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert json.loads((copy / "copied.json").read_text())["from"] == "node3"
    assert json.loads((copy / "run" / "attempts.json").read_text())["current"]["number"] == 1
    assert not (master_dir / "supervisor").exists()  # a copy, not a second supervisor
    held = supervise("copies", "--work-home", str(tmp_path / "master"))["runs"]  # what status.yml finds there
    assert [(one["run_dir"], one["supervisor"]) for one in held] == [(str(master_dir), "node3")]
    os.kill(old, signal.SIGKILL)  # node3 lost, with its supervisor
    refused = supervise("move", "--run-dir", str(run_dir), "--node", "node3")  # no copy on the supervisor's node
    assert "no copy of the run's record here" in refused["refused"]
    moved = supervise("move", "--run-dir", str(master_dir), "--node", "node1")
    assert moved["pid"] > 0 and moved["from"] == "node3" and moved["plans_written"] == {"node1": "", "node2": ""}
    assert json.loads((master_dir / "plan.json").read_text())["supervisor"] == "node1"
    assert supervise("move", "--run-dir", str(master_dir), "--node", "node1")["refused"].startswith(
        "node1: the run's supervisor already lives here"
    )
    time.sleep(1.5)
    # node3 back with its supervisor (status.yml there would take it up): told at its first copy, it ends
    supervise("status", "--run-dir", str(run_dir), "--take-up")
    deadline = time.monotonic() + 10
    while supervise("read", "--run-dir", str(run_dir))["pid"] and time.monotonic() < deadline:
        time.sleep(0.2)
    said = supervise("read", "--run-dir", str(run_dir))
    assert said["pid"] == 0 and said["result"]["superseded"], said  # a follower there is told where it went
    assert said["result"]["error"].startswith("the run's supervision was moved to node1 (supervise.py move): this")
    assert (
        "supervisor: the run's supervision was moved to node1 (supervise.py move); this one ends" in said["lines"][-1]
    )
    assert not (run_dir / "supervisor" / "result.json").exists()
    # and it is not started again (status.yml there, train.yml's follower): it is superseded, not dead
    again = supervise("status", "--run-dir", str(run_dir), "--take-up")
    assert again["pid"] == 0 and again["ended"] and again["superseded"].startswith("the run's supervision was moved")
    (run_dir / "states").write_text(FINISHED)
    lines, result = follow(master_dir)
    assert lines[0].startswith("supervisor: the run's supervision moved here (node1, pid "), lines
    assert "from node3, which did not answer; taking the run up at its step 'watch'" in lines[0], lines
    assert result["watch"]["state"] == "finished"
    state = json.loads((master_dir / "supervisor" / "run" / "attempts.json").read_text())
    assert len(state["records"]) == 0 and state["current"]["plan"]["supervisor"] == "node1"  # no launch again
    # the supervisor now on the master copies its record to the plan's next node, node2, up to the run's end: should
    # the master be lost too, its supervision moves there
    standby = node2_dir / "supervisor.copy"
    deadline = time.monotonic() + 10  # the run's end is copied after its result is written
    while not (standby / "result.json").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert json.loads((standby / "copied.json").read_text())["from"] == "node1"
    assert json.loads((standby / "result.json").read_text())["watch"]["state"] == "finished"
    assert supervise("copies", "--work-home", str(tmp_path / "node2")) == {"runs": []}  # it has ended
    assert (copy / "result.json").exists() is False  # the master's own record ends; the copy was node3's


def test_copies_are_of_the_newest_unended_run_and_of_none_once_a_later_run_began(tmp_path):
    """status.yml finds a lost supervisor's run by the copy on its standby node: only the newest run's copy counts (a
    node runs one run at a time, so an older copy is of a run that is over), and none once a run began after it."""
    work = tmp_path / "work"

    def run_with_copy(name: str, started: float, ended: bool = False) -> Path:
        run_dir = work / "runs" / "exp" / name
        copy = run_dir / "supervisor.copy"
        copy.mkdir(parents=True)
        (run_dir / "plan.json").write_text("{}")
        os.utime(run_dir / "plan.json", (started, started))
        (copy / "copied.json").write_text(json.dumps({"from": "node1", "at": started + 5}))
        (copy / "request.json").write_text(json.dumps({"run": {"run_started": started}}))
        if ended:
            (copy / "result.json").write_text("{}")
        return run_dir

    now = time.time()
    run_with_copy("r1", now - 3000)  # its supervisor died unended, long ago
    newest = run_with_copy("r2", now - 100)
    assert supervise("copies", "--work-home", str(work))["runs"] == [
        {"run_dir": str(newest), "supervisor": "node1", "copied_at": now - 95}
    ]
    (newest / "supervisor.copy" / "result.json").write_text("{}")  # ended: the older one is over too
    assert supervise("copies", "--work-home", str(work))["runs"] == []
    later = work / "runs" / "other" / "r3"
    later.mkdir(parents=True)
    (later / "plan.json").write_text("{}")  # a run without a copy here, begun now
    (newest / "supervisor.copy" / "result.json").unlink()
    assert supervise("copies", "--work-home", str(work))["runs"] == []
