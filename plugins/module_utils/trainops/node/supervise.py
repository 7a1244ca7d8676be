"""The run's supervisor on the cluster: runs a training run's whole lifecycle from inside a node's training
container (the master's, or -e supervisor_host's: the plan's ``supervisor``), detached from every SSH session, so
that neither the watch nor the restarts depend on the controller that started it.

    python3 supervise.py start --run-dir DIR < request.json     start the run's supervisor (or find it running)
    python3 supervise.py read --run-dir DIR --offset BYTES [--wait S]   what it said since BYTES (-L: its last L
                                                                         lines), and the run's end once it came
    python3 supervise.py evidence --run-dir DIR                 a hang's evidence files, as JSON
    python3 supervise.py status --run-dir DIR [--take-up]        where the run stands, as JSON; --take-up starts its
                                                                 supervisor again when it died before the run ended
    python3 supervise.py receive --run-dir DIR < copy.json      keep the record's copy a supervisor elsewhere sends
    python3 supervise.py move --run-dir DIR --node NAME         take the supervision over here, from that copy
    python3 supervise.py copies --work-home DIR                 the unended runs whose record's copy is here
    python3 supervise.py stop --work-home DIR [--grace S] [--wait S]
                                 ask every run's supervisor living here to stop its run, and wait until each has
                                 (stop.yml)

The lifecycle is the core's (:class:`trainops.lifecycle.Lifecycle` over :class:`trainops.attempts.Attempts`):
launch (the run's fanout.sh), watch (:func:`trainops.watch.watch`: the run's probe.sh, diagnose.sh and the
checkpoint scanner run here and reach the other nodes over the containers' sshd), and after a failure: stop, gather
the logs, the quick health check, judge, choose the save to resume from, set aside, launch again (``-e
max_restarts``). A node is called lost only when this container cannot reach it. Its files, under
``DIR/supervisor/``:

    request.json   the run's request: ``{"watch": the watch's arguments (trainops.watch.WatchRequest, the first
                   attempt's), "run": the lifecycle's (trainops.lifecycle.Lifecycle)}``, as train.yml's action sent it
    pid            the supervisor's process id (its own session, no terminal, no run mark)
    lock           held (flock) by the supervisor for as long as it lives: it runs when the lock is taken
    events         what it says, one JSON line each: {"t": wall clock, "line": text}; rotated to events.1 past 4 MiB
                   (the follower's offsets stay valid: EventLog), under events.lock
    snapshot.json  the current attempt's watch so far (its number as ``attempt``), written after every probe
    result.json    the run's end: ``{"attempt": the last attempt (Attempts.view), "watch": its watch's result}``,
                   or ``{"error": ...}`` when the supervisor itself failed
    log            its own errors (a traceback, should it die of one)
    stop.json      stop.yml's request to stop the run (``{"asked_at": wall clock, "grace": seconds}``): the
                   supervisor ends the watch within a second, stops what is left on every node (removing the restart
                   mark), launches no new attempt, and writes its result
    run/           the lifecycle's state: attempts.json, each node's gathered logs, attempt-K/, health/

``start`` answers one JSON line: ``{"pid", "started", "ended"}``. A supervisor found dead before the run ended
(killed, or its container restarted) is started again and goes on from the step its state says, taking a watch up
from the logs' last 256 KiB, without launching ranks that are alive. Every file is written whole and renamed into
place, or appended a line at a time.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import glob
import json
import os
import re
import subprocess
import sys
import threading
import time
import traceback

# run as a script: the package's parent (.../trainops/node/ -> ...), not this directory, holds ``trainops``
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

#: Seconds a command of the watch (a probe, the diagnosis, a scan) may take before it is given up as failed.
COMMAND_TIMEOUT_S = 300
#: The watch has no time limit on the cluster (train_wait bounds only how long a terminal follows it).
UNBOUNDED_S = 10**9
#: Bytes of events after which the file is rotated (:class:`EventLog`): about 4 days of a run's lines at the
#: default progress_interval of 30 s.
EVENTS_LIMIT = 4 << 20


#: Seconds between copies of the record to the run's standby node (trainops.watch.standby_node: the master while a
#: supervisor on another node watches, -e supervisor_host; else the plan's next node); a step of the lifecycle (an
#: attempt's end, a launch) is copied at once.
COPY_EVERY_S = 30.0
#: The record's files a copy holds (under supervisor/): what a supervisor moved to the copy's node takes the run up
#: from, and each ended attempt's record (the report's attempts). Not the events (its lines begin anew there), nor
#: the logs gathered after a failure (gathered again).
COPIED = ("request.json", "pid", "snapshot.json", "run/attempts.json", "result.json")
ATTEMPT_RECORD = re.compile(r"run/attempt-[0-9]+/attempt\.json")
#: The copy's directory beside supervisor/, on the run's standby node.
COPY_DIR = "supervisor.copy"


def attempt_records(base: str) -> list[str]:
    """The ended attempts' records under a supervisor's directory (or its copy), relative to it."""
    return sorted(
        os.path.relpath(path, base) for path in glob.glob(os.path.join(base, "run", "attempt-*", "attempt.json"))
    )


def paths(run_dir: str) -> dict[str, str]:
    base = os.path.join(run_dir, "supervisor")
    names = (
        "request.json",
        "pid",
        "lock",
        "events",
        "snapshot.json",
        "result.json",
        "log",
        "stop.json",
        "moved.json",
        "superseded.json",
    )
    return {name: os.path.join(base, name) for name in names} | {"state": os.path.join(base, "run")}


def write_json(path: str, value: object, mode: int = 0o644) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(f"{path}.tmp")  # a temporary left by a killed writer keeps its mode: made anew with ``mode``
    with open(os.open(f"{path}.tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "w", encoding="utf-8") as handle:
        json.dump(value, handle)
    os.replace(f"{path}.tmp", path)


def read_json(path: str) -> object:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def recorded_pid(files: dict[str, str]) -> int:
    try:
        with open(files["pid"], encoding="utf-8") as handle:
            return int(handle.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def alive(files: dict[str, str]) -> int:
    """The supervisor's pid while it lives (its lock is held; a pid alone could be another process's after a
    restart of the container), else 0; -1 when it lives but has not written its pid yet."""
    try:
        handle = open(files["lock"], "a")  # noqa: SIM115 - closed below, which releases a lock taken here
    except OSError:
        return 0
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return recorded_pid(files) or -1
    return 0


def base_of(path: str) -> int:
    """Where an events file begins in the watch's one sequence of bytes: its header's ``base`` (a file begun by a
    rotation), else 0 (the first file)."""
    try:
        with open(path, "rb") as handle:
            first = handle.readline(256)
        return int(json.loads(first)["base"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


@contextlib.contextmanager
def events_locked(path: str, exclusive: bool):
    """The events' rotation lock (``<events>.lock``): held exclusively while the file is rotated, shared while a
    reader finds where its offset lies, so that no reader sees one file's base with another's lines."""
    try:
        fd = os.open(f"{path}.lock", os.O_WRONLY | os.O_CREAT, 0o644)
    except OSError:
        if exclusive:
            raise
        yield  # a reader of a watch that has no directory yet: nothing to rotate under it
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


class EventLog:
    """The supervisor's events, appended a whole line at a time. Past ``limit`` bytes the file is rotated: it
    becomes ``<events>.1`` (the one before is dropped) and a new file begins with a header ``{"base": B}``, B being
    where it begins in the watch's one sequence of bytes, so that a follower's offset stays valid across rotations
    (:func:`read`). The new file is written whole beside it (``<events>.new``) and renamed into place, under the
    rotation lock; a supervisor killed mid-rotation leaves what the next one finishes. The files of a watch of weeks
    stay under twice ``limit``."""

    def __init__(self, path: str, limit: int = EVENTS_LIMIT) -> None:
        self.path, self.limit = path, limit
        self._said = threading.Lock()
        with events_locked(path, exclusive=True):
            if not os.path.exists(path) and os.path.exists(f"{path}.new"):  # killed between the two renames
                os.replace(f"{path}.new", path)
            elif not os.path.exists(path) and os.path.exists(f"{path}.1"):  # killed before the new file was made
                older = f"{path}.1"
                self._begin(base_of(older) + os.path.getsize(older))
            self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.base = base_of(path)
        if self.size:  # a line cut short by a supervisor killed mid-write ends here
            with open(path, "rb") as handle:
                handle.seek(-1, os.SEEK_END)
                if handle.read(1) != b"\n":
                    self.size += os.write(self.fd, b"\n")

    def _begin(self, base: int) -> None:
        """The next file, with its header, written beside the current one and renamed into place."""
        with open(f"{self.path}.new", "wb") as handle:
            handle.write((json.dumps({"base": base}) + "\n").encode())
        if os.path.exists(self.path):
            os.replace(self.path, f"{self.path}.1")
        os.replace(f"{self.path}.new", self.path)

    def say(self, line: str) -> None:
        with self._said:  # the record's copy says from a thread of its own
            self.size += os.write(self.fd, (json.dumps({"t": round(time.time(), 3), "line": line}) + "\n").encode())
            if self.size >= self.limit:
                with events_locked(self.path, exclusive=True):
                    self._begin(self.base + self.size)
                    os.close(self.fd)
                    self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
                self.base, self.size = base_of(self.path), os.fstat(self.fd).st_size


def on_node_runner(plan_run_dir: str):
    """``on_node(node, argv, stdin=None, binary=False)`` over the run's on-node.sh (:data:`trainops.lifecycle.OnNode`):
    ssh's own failure (status 255) is the node unreachable."""

    def on_node(node: str, argv: list[str], stdin: str | None = None, binary: bool = False) -> dict[str, object]:
        command = ["bash", os.path.join(plan_run_dir, "on-node.sh"), node, *argv]
        try:
            done = subprocess.run(command, input=stdin, capture_output=True, text=not binary, timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return {"rc": None, "stdout": b"" if binary else "", "stderr": "", "failed": True,
                    "msg": f"{node}: no answer in {COMMAND_TIMEOUT_S} s", "unreachable": argv == ["true"]}  # fmt: skip
        stderr = done.stderr.decode("utf-8", "replace") if binary else done.stderr
        reply: dict[str, object] = {"rc": done.returncode, "stdout": done.stdout, "stderr": stderr}
        if done.returncode != 0:
            reply.update(failed=True, msg=(stderr or f"exited {done.returncode}").strip())
        if done.returncode == 255:
            reply["unreachable"] = True
        return reply

    return on_node


class StopAsked(Exception):
    """stop.yml asked the supervisor to stop the run (its stop.json is there)."""


def stop_request(files: dict[str, str]) -> dict[str, object] | None:
    """stop.yml's request to stop the run, None before it asks; one whose file cannot be read (a person's
    ``touch``) is a request all the same."""
    if not os.path.exists(files["stop.json"]):
        return None
    asked = read_json(files["stop.json"])
    return asked if isinstance(asked, dict) else {"asked_at": None}


def napper(files: dict[str, str], exit_file: str):
    """The watch's sleep between probes, cut short within half a second of a stop request (:class:`StopAsked`), or
    of the launch on this node ending (``exit_file``, its exit status, appears: torchrun ends on every node when a
    rank dies anywhere, so the next probe comes at once instead of up to ``poll_interval`` later)."""

    def nap(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        exited = os.path.exists(exit_file)
        while True:
            if stop_request(files) is not None:
                raise StopAsked
            if not exited and os.path.exists(exit_file):
                return
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(0.5, left))

    return nap


class Superseded(BaseException):
    """The run's supervision was moved to another node (supervise.py move) while this one could not be reached. Not
    an Exception: no step's own error handling (Lifecycle.after_attempt ends the run on one) may take it for a
    failure of the run; the supervisor ends where it is."""


class RecordCopy:
    """The record copied to the run's standby node (:func:`trainops.watch.standby_node`: the master while the
    supervisor runs on another node, -e supervisor_host; else the plan's next node), so that should the supervisor's
    node be lost, the supervision can be moved there (supervise.py move) and take the run up from the copy. A step's
    change is copied at once, the watch's snapshot every :data:`COPY_EVERY_S` seconds, by a thread of its own: no
    step of the run waits for the standby, nor for a standby that does not answer. The standby answers
    ``superseded`` once a supervision moved there lives: this one then ends (:class:`Superseded`, raised at its next
    call) and acts no more."""

    def __init__(self, run_dir: str, files: dict[str, str], programs: str, on_node, say) -> None:
        self.run_dir, self.files, self.programs, self.on_node, self.say = run_dir, files, programs, on_node, say
        self.failing_to: str | None = None  # the standby the last copy could not reach
        self.superseded: str | None = None
        self._plan: dict[str, object] | None = None
        self._last = -COPY_EVERY_S  # when the last copy began (monotonic)
        self._asked = self._made = 0  # copies asked for; the last asked for that a copy served
        self._changed = threading.Condition()
        threading.Thread(target=self._copier, name="record-copy", daemon=True).start()

    def __call__(self, plan: dict[str, object], now: bool = False) -> None:
        """Ask for a copy of the record as it is now (``now``: a step's change; not while the standby does not
        answer), or when the last is :data:`COPY_EVERY_S` old."""
        from trainops.watch import standby_node

        if self.superseded is not None:
            raise Superseded(self.superseded)
        with self._changed:
            self._plan = plan
            due = time.monotonic() - self._last >= COPY_EVERY_S
            if due or (now and self.failing_to != standby_node(plan)):
                self._asked += 1
                self._changed.notify_all()

    def flush(self, timeout: float = 60.0) -> None:
        """Wait up to ``timeout`` for the copies asked for to be made (the run's end, before this process ends)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._made < self._asked and time.monotonic() < deadline:
                self._changed.wait(max(0.0, deadline - time.monotonic()))
        if self.superseded is not None:
            raise Superseded(self.superseded)

    def _copier(self) -> None:
        while True:
            with self._changed:
                while self._made >= self._asked:
                    self._changed.wait()
                serving, plan = self._asked, self._plan
            try:
                if plan is not None:
                    self._copy(plan)
            except Exception as exc:  # noqa: BLE001 - a copy that fails is said; the run goes on
                self.say(f"supervisor: its record could not be copied: {exc!r}")
            with self._changed:
                self._made = serving
                self._changed.notify_all()

    def _copy(self, plan: dict[str, object]) -> None:
        from trainops.watch import standby_node, supervisor_node

        here, standby = supervisor_node(plan), standby_node(plan)
        if standby is None:
            return
        self._last = time.monotonic()
        base = os.path.dirname(self.files["pid"])
        held = {}
        for name in (*COPIED, *attempt_records(base)):
            with contextlib.suppress(OSError), open(os.path.join(base, name), encoding="utf-8") as handle:
                held[name] = handle.read()
        argv = ["python3", os.path.join(self.programs, "supervise.py"), "receive", "--run-dir", self.run_dir]
        reply = self.on_node(standby, argv, json.dumps({"from": here, "at": time.time(), "files": held}))
        if reply.get("rc") == 0 and "superseded" in str(reply.get("stdout")):
            try:
                self.superseded = str(json.loads(str(reply["stdout"]))["superseded"])
            except (ValueError, KeyError, TypeError):
                self.superseded = str(reply.get("stdout")).strip()
            return
        if reply.get("rc") != 0 and self.failing_to != standby:
            why = " ".join(str(reply.get("msg") or reply.get("stderr") or "").split())[:200]
            self.say(f"supervisor: its record could not be copied to {standby}, the run's standby node (tried again "
                     f"every {COPY_EVERY_S:.0f} s): {why}")  # fmt: skip
        self.failing_to = standby if reply.get("rc") != 0 else None


def receive(run_dir: str, payload: str) -> dict[str, object]:
    """The record's copy from the run's supervisor on another node, written whole into ``<run_dir>/supervisor.copy/``;
    ``superseded`` instead once a supervision moved here lives (the sender ends)."""
    files = paths(run_dir)
    moved = read_json(files["moved.json"])
    if moved is not None:  # whether or not its supervisor lives now: this node's record is the run's
        return {"superseded": f"the run's supervision was moved to {(moved or {}).get('to')} (supervise.py move)"}
    sent = json.loads(payload)
    copy = os.path.join(run_dir, COPY_DIR)
    for name, text in sent["files"].items():
        if name not in COPIED and not ATTEMPT_RECORD.fullmatch(name):
            continue
        os.makedirs(os.path.dirname(os.path.join(copy, name)), exist_ok=True)
        temporary = os.path.join(copy, f"{name}.tmp")
        with contextlib.suppress(FileNotFoundError):
            os.remove(temporary)
        mode = 0o600 if name == "request.json" else 0o644  # -e notify's URLs may hold tokens
        with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, os.path.join(copy, name))
    write_json(os.path.join(copy, "copied.json"), {"from": sent["from"], "at": sent["at"]})
    return {"received": sorted(sent["files"])}


def _with_supervisor(value: object, node: str) -> object:
    """``value`` (a record's JSON) with every plan in it naming ``node`` as its supervisor's host, and the re-plan's
    rendering with it (``render_here``)."""
    if isinstance(value, list):
        return [_with_supervisor(item, node) for item in value]
    if not isinstance(value, dict):
        return value
    out = {key: _with_supervisor(item, node) for key, item in value.items()}
    if "run_dir" in out and "master" in out and "nodes" in out:  # a plan
        out["supervisor"] = node
    if "render_here" in out:
        out["render_here"] = node
    return out


def move(run_dir: str, node: str) -> dict[str, object]:
    """The run's supervision moved to this container (``node``) from the copy of its record here (the run's standby
    node, :func:`trainops.watch.standby_node`, while its supervisor's node does not answer): the record put in place
    naming ``node`` as the supervisor's host, the run's plan.json on every node of its current plan saying so, and a
    supervisor started, which takes the run up from the copy's step without launching ranks that are alive (as after
    a SIGKILL). Refused, changing nothing, when a supervisor lives here, the run has ended, or there is no copy
    here."""
    files = paths(run_dir)
    copy, base = os.path.join(run_dir, COPY_DIR), os.path.dirname(files["pid"])
    copied = read_json(os.path.join(copy, "copied.json"))
    if alive(files):
        return {"refused": f"{node}: the run's supervisor already lives here (pid {recorded_pid(files)})"}
    if os.path.exists(files["result.json"]) or os.path.exists(os.path.join(copy, "result.json")):
        return {"refused": f"{node}: the run has ended (its record here says so): nothing to supervise"}
    if not isinstance(copied, dict) or not os.path.exists(os.path.join(copy, "request.json")):
        return {"refused": f"{node}: no copy of the run's record here ({copy}): its supervisor copies it to the run's "
                           "standby node only (the master, or, when the supervisor ran on the master, the plan's "
                           "next node); move the supervision there"}  # fmt: skip
    if os.path.exists(base):  # an earlier supervision's files here, dead: kept aside
        os.replace(base, f"{base}.before-{int(time.time())}")
    os.makedirs(base)
    # first: a copy the old supervisor sends from now on is refused, and tells it to end (receive)
    write_json(files["moved.json"], {"from": copied["from"], "copied_at": copied["at"], "to": node})
    for name in (*COPIED, *attempt_records(copy)):
        source = os.path.join(copy, name)
        if not os.path.exists(source):
            continue
        os.makedirs(os.path.dirname(os.path.join(base, name)), exist_ok=True)
        if name.endswith(".json"):
            write_json(os.path.join(base, name), _with_supervisor(read_json(source), node),
                       mode=0o600 if name == "request.json" else 0o644)  # fmt: skip
        else:
            with open(source, encoding="utf-8") as handle, open(os.path.join(base, name), "w") as out:
                out.write(handle.read())
    with open(os.path.join(run_dir, "supervisor-here.tmp"), "w", encoding="utf-8") as handle:
        handle.write(node)  # on-node.sh runs a command for this node here, and reaches the old one over ssh
    os.replace(os.path.join(run_dir, "supervisor-here.tmp"), os.path.join(run_dir, "supervisor-here"))
    request = read_json(files["request.json"]) or {}
    state = read_json(os.path.join(files["state"], "attempts.json")) or {}
    plan = (state.get("current") or {}).get("plan") or request["watch"]["plan"]
    on_node = on_node_runner(str(plan["run_dir"]))
    written = {}
    for name in [n["name"] for n in plan["nodes"]]:
        argv = ["python3", os.path.join(request["watch"]["programs"], "write_run_files.py"), "--run-dir", run_dir]
        reply = on_node(name, argv, json.dumps({"plan.json": json.dumps(plan, indent=2, sort_keys=True) + "\n"}))
        written[name] = "" if reply.get("rc") == 0 else str(reply.get("msg") or "")[:200]
    with open(files["request.json"], encoding="utf-8") as handle:
        began = start(run_dir, handle.read())
    return {"pid": began["pid"], "from": copied["from"], "copied_at": copied["at"], "plans_written": written}


class MetricsEndpoint:
    """The run's metrics (:mod:`trainops.run_metrics`) on ``port`` of the supervisor's node (-e metrics_port; 0:
    none), served by prometheus-client's own HTTP server in a thread of this process: each scrape reads what the
    last probe or step left here, and nothing else. A port it cannot take is said once; the run goes on without."""

    def __init__(self, port: int, run_started: float, say) -> None:
        self.port, self.run_started, self.say = port, run_started, say
        self._latest: tuple | None = None

    def serve(self, plan: dict) -> None:
        if not self.port:
            return
        try:
            import prometheus_client
            from prometheus_client.core import CollectorRegistry

            registry = CollectorRegistry(auto_describe=True)
            registry.register(self)
            prometheus_client.ProcessCollector(namespace="trainops_supervisor", registry=registry)
            prometheus_client.start_http_server(self.port, addr="0.0.0.0", registry=registry)  # noqa: S104
        except (ImportError, OSError) as exc:
            self.say(f"supervisor: the run's metrics cannot be served on port {self.port} ({exc}): this run serves "
                     "none; -e metrics_port=N chooses another port, 0 none")  # fmt: skip
            self.port = 0
            return
        from trainops.watch import supervisor_node

        here = supervisor_node(plan)
        address = next((node.get("addr") for node in plan["nodes"] if node["name"] == here), None) or here
        self.say(f"supervisor: the run's metrics: http://{address}:{self.port}/metrics")

    def update(self, plan: dict, watch: dict | None, view: dict, state: dict) -> None:
        """What the next scrape serves: the attempt's plan, its watch's result, the attempts' view and state."""
        records = state.get("records") or []
        first = records[0] if records else state.get("current") or {}
        began = first.get("resumes_from")  # the iteration the run's first attempt resumed from (None: scratch)
        self._latest = (plan, watch, view, began if isinstance(began, int) else None)

    def describe(self):
        return []  # the families vary with the run; prometheus-client then takes them from collect()

    def collect(self):
        """prometheus-client's collector protocol: the run's families now (a scrape's thread)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        from trainops.run_metrics import families

        latest = self._latest
        if latest is None:
            return
        plan, watch, view, began = latest
        stragglers = (watch or {}).get("stragglers") or ()
        for family in families(plan, watch, view, self.run_started, time.time(), stragglers, began):
            if not family.samples:
                continue
            kind = CounterMetricFamily if family.metric.kind == "counter" else GaugeMetricFamily
            served = kind(family.metric.name, family.metric.help, labels=family.metric.labels)
            for labels, value in family.samples:
                served.add_metric(labels, value)
            yield served


def supervise(run_dir: str, files: dict[str, str], taken_up_from: int) -> None:
    """The detached process: the run's lifecycle from the step its state is at, its lines to the events, the run's
    end to the result file."""
    from trainops.lifecycle import Lifecycle

    first_here = not os.path.exists(files["events"])
    say = EventLog(files["events"]).say
    request = read_json(files["request.json"])
    first = request["watch"]
    on_node = on_node_runner(first["plan"]["run_dir"])

    def stopping() -> dict[str, object] | None:
        return stop_request(files)

    # -e notify's URLs (tokens) stay in request.json and the notifier: never in the run's state, which is collected
    run = {key: value for key, value in request["run"].items() if key != "notify"}
    life = Lifecycle(run_dir, dict(run, plan=first["plan"], programs=first["programs"]), on_node, say, stopping)
    moved = read_json(files["moved.json"])
    if isinstance(moved, dict) and first_here:  # moved here, and started here for the first time
        copied = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(moved.get("copied_at") or 0)))
        say(f"supervisor: the run's supervision moved here ({moved.get('to')}, pid {os.getpid()}) from "
            f"{moved.get('from')}, which did not answer; taking the run up at its step '{life.step()}' from the record "
            f"as copied at {copied}")  # fmt: skip
    elif taken_up_from:
        say(f"supervisor: its process {taken_up_from} ended before the run did; taking the run up again (pid "
            f"{os.getpid()}) at its step '{life.step()}'")  # fmt: skip
    copy = RecordCopy(run_dir, files, first["programs"], on_node, say)

    def plan_now() -> dict:
        current = life.attempts.state.get("current")
        return current["plan"] if current else first["plan"]

    life.attempts.on_save = lambda: copy(plan_now(), now=True)  # each change of the state, as it is saved
    options = request["run"].get("options") or {}
    metrics = MetricsEndpoint(int(options.get("metrics_port") or 0), float(request["run"]["run_started"]), say)
    metrics.serve(first["plan"])
    notifier = notifications(request["run"].get("notify") or [], files, say)
    try:
        _run_steps(life, files, first, on_node, say, stopping, copy, Observers(metrics, notifier))
        copy(plan_now(), now=True)  # the run's end, in the copy too
        copy.flush()
    except Superseded as exc:
        say(f"supervisor: {exc}; this one ends and acts no more")
        write_json(files["superseded.json"], {"at": time.time(), "why": str(exc)})
    finally:
        if notifier:
            notifier.close()  # the run's last events are sent before this process ends


class Observers:
    """Everything that reads the run after each probe and each step: the metrics endpoint and the notifier."""

    def __init__(self, *observers) -> None:
        self.observers = [observer for observer in observers if observer is not None]

    def update(self, plan: dict, watch: dict | None, view: dict, state: dict) -> None:
        for observer in self.observers:
            observer.update(plan, watch, view, state)


def notifications(urls: list[str], files: dict[str, str], say):
    """The run's notifier (-e notify), or None without one; Apprise not importable here is said once."""
    if not urls:
        return None
    from trainops.notify import Notifier, apprise_sender, sent_path

    try:
        send = apprise_sender(urls)
    except ImportError as exc:
        say(f"supervisor: notifications cannot be sent ({exc}): this run sends none")
        return None
    say(f"supervisor: notifications go to {len(urls)} target(s) of -e notify")
    return Notifier(send, sent_path(files["state"]), say)


def _run_steps(life, files, first, on_node, say, stopping, copy, metrics) -> None:
    """The lifecycle's steps from where its state is, to the run's end (its result written); each step's change
    copied to the master when the supervisor runs elsewhere (:class:`RecordCopy`)."""
    from trainops.recovery import STOPPED
    from trainops.watch import ProbeError, Watcher, WatchRequest, supervisor_node, watch

    launched_here = False
    while True:
        current = life.attempts.state.get("current")
        copy(current["plan"] if current else first["plan"], now=True)  # an attempt set aside, a result
        if current:
            metrics.update(current["plan"], current.get("watch"), life.view(), life.attempts.state)
        step = life.step()
        if step == "next" and stopping():
            life.end_restarts()
        elif step in ("launch", "next"):
            view = life.launch()
            launched_here = True
        elif step == "watch":
            view = life.view()
            snapshot = read_json(files["snapshot.json"]) or {}
            taking_up = not launched_here and snapshot.get("attempt") == view["number"]
            known = (snapshot.get("checkpoints") or {}).get("saves") if taking_up else None
            # a hang's evidence goes to the run's state (set aside with its attempt, collected with the state)
            watch_request = WatchRequest(**dict(first, plan=view["plan"], attempt=view["number"],
                                                probe=f"{view['plan']['run_dir']}/probe.sh", diagnose=None,
                                                wait=UNBOUNDED_S, evidence_dir=files["state"], tail=not launched_here,
                                                known_checkpoints=known or view["checked_saves"]))  # fmt: skip
            master = view["plan"]["master"]  # the probes run on the attempt's master (a re-plan may move it)
            if taking_up:
                say(f"supervisor: taking attempt {view['number']}'s watch up from the logs' last 256 KiB")
            watcher = Watcher(watch_request, time.monotonic())

            def probed(watcher: Watcher, number: int = view["number"], plan: dict = view["plan"]) -> None:
                result = dict(watcher.result(time.monotonic()), attempt=number)
                write_json(files["snapshot.json"], result)  # status's
                metrics.update(plan, result, life.view(), life.attempts.state)
                copy(plan)

            try:
                if stopping():
                    raise StopAsked
                # the launch's exit status on the supervisor's own node (-e supervisor_host, else the master's;
                # a supervisor on a node without a rank sees none and wakes at the next probe)
                here = supervisor_node(view["plan"])
                exit_file = os.path.join(view["plan"]["run_dir"], "exit", f"{here}.rc")
                watched = watch(watcher, lambda argv, stdin=None, m=master: on_node(m, argv, stdin), say, probed,
                                napper(files, exit_file))  # fmt: skip
            except StopAsked:
                say(f"supervisor: stop.yml asked for the run to stop: attempt {view['number']} is stopped, and no "
                    "new attempt starts")  # fmt: skip
                watcher.stop(f"stop.yml asked the run's supervisor to stop the run ({STOPPED})")
                watched = watcher.result(time.monotonic())
            except ProbeError as exc:
                write_json(files["result.json"], {"error": str(exc), "attempt": life.view()})
                return
            life.ended(watched)
            launched_here = False
        elif step == "after":
            life.after_attempt()
        else:
            break
    life.finish()  # a Slurm job's tasks waiting for another attempt are told the run has ended
    view = life.view()
    metrics.update(view["plan"], life.last_watch(), view, life.attempts.state)  # the run's end, observed
    write_json(files["result.json"], {"attempt": view, "watch": life.last_watch()})


def start(run_dir: str, request_text: str) -> dict[str, object]:
    files = paths(run_dir)
    os.makedirs(os.path.dirname(files["pid"]), exist_ok=True)
    if os.path.exists(files["result.json"]) or os.path.exists(files["superseded.json"]):
        return {"pid": 0, "started": False, "ended": True}
    lock = os.open(files["lock"], os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # a supervisor lives (or another start is starting one)
        os.close(lock)
        return {"pid": recorded_pid(files), "started": False, "ended": False}
    taken_up_from = recorded_pid(files)
    if not (taken_up_from and os.path.exists(files["request.json"])):  # a run's first start: its request kept
        write_json(files["request.json"], json.loads(request_text), mode=0o600)  # -e notify's URLs may hold tokens
    reader, writer = os.pipe()
    sys.stdout.flush()
    if os.fork() == 0:  # the supervisor: its own session, detached from this exec's output; it keeps the lock
        os.close(reader)
        os.setsid()
        if os.fork() != 0:
            os._exit(0)
        log = os.open(files["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        with open(f"{files['pid']}.tmp", "w", encoding="utf-8") as handle:
            handle.write(f"{os.getpid()}\n")
        os.replace(f"{files['pid']}.tmp", files["pid"])
        os.write(writer, str(os.getpid()).encode())
        os.close(writer)
        try:
            supervise(run_dir, files, taken_up_from)
        except BaseException:  # noqa: BLE001 - its log and result say why, for the follower
            traceback.print_exc()
            write_json(files["result.json"], {"error": f"the supervisor failed: {traceback.format_exc(limit=3)}"})
        os._exit(0)
    os.close(writer)
    os.close(lock)  # the supervisor's copy holds it
    with os.fdopen(reader) as handle:
        started = int(handle.read() or 0)
    os.wait()
    return {"pid": started, "started": True, "ended": False}


def tail_offset(path: str, count: int) -> int:
    """Where the last ``count`` whole lines of ``path`` begin (within its last 1 MiB; 0 for a shorter file)."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            start = max(0, size - (1 << 20))
            handle.seek(max(0, start - 1))
            text = handle.read()
    except OSError:
        return 0
    on_a_line = start == 0 or text[:1] == b"\n"  # the window begins a line (the byte before it ends one)
    text = text[1:] if start > 0 else text
    end = text.rfind(b"\n") + 1  # a line being written is not counted
    cut = end
    for _ in range(count):
        cut = text.rfind(b"\n", 0, cut - 1) + 1 if cut > 0 else 0
        if cut == 0:
            break
    if cut == 0 and not on_a_line:  # the 1 MiB began inside a line: begin at the first whole one
        cut = text.find(b"\n") + 1
    return start + cut


def attach_offset(path: str, count: int) -> int:
    """Where the last ``count`` lines of the watch's events begin, in the rotated file too when the current one,
    just begun, holds fewer."""
    base, local = base_of(path), tail_offset(path, count)
    try:
        with open(path, "rb") as handle:
            handle.seek(local)
            held = handle.read().count(b"\n") - (1 if base and local == 0 else 0)  # the header is no line
    except OSError:
        held = 0
    older = f"{path}.1"
    if held < count and base and os.path.exists(older):
        return base_of(older) + tail_offset(older, count - held)
    return base + local


def events_after(path: str, offset: int) -> tuple[bytes, int, int]:
    """The whole lines after ``offset`` in the watch's sequence of events (:class:`EventLog`): from the rotated
    file while the offset is in it, else from the current one; returns them, the offset they begin at, and the
    bytes skipped (rotated out before they were read)."""
    base, skipped = base_of(path), 0
    if offset < base:
        older = f"{path}.1"
        older_base = base_of(older) if os.path.exists(older) else base
        if offset < older_base:  # older than the files kept: on from the oldest kept line
            skipped, offset = older_base - offset, older_base
        whole = _whole_lines(older, offset - older_base) if offset < base else b""
        if whole:
            return whole, offset, skipped
        offset = base  # the rotated file read to its end: on in the current one
    return _whole_lines(path, offset - base), offset, skipped


def _whole_lines(path: str, at: int) -> bytes:
    try:
        with open(path, "rb") as handle:
            handle.seek(at)
            chunk = handle.read(1 << 20)
    except OSError:
        return b""
    return chunk[: chunk.rfind(b"\n") + 1]


def run_end(files: dict[str, str]) -> object:
    """The run's end as this node's record has it: its result; for a supervisor superseded by a move (it ended
    without one), an error saying where the supervision went; None while the run goes on here."""
    result = read_json(files["result.json"])
    superseded = read_json(files["superseded.json"]) if result is None else None
    if isinstance(superseded, dict):
        return {"error": f"{superseded.get('why')}: this node supervises the run no more; follow the run where it "
                         "moved: status.yml -e follow=true", "superseded": True}  # fmt: skip
    return result


def read(run_dir: str, offset: int, wait: float) -> dict[str, object]:
    """The events after ``offset`` (whole lines; a negative offset: the last -offset lines), whether the
    supervisor lives, and the run's end once it came (else the current attempt's watch so far); waits up to
    ``wait`` seconds for something new."""
    files = paths(run_dir)
    deadline = time.monotonic() + wait
    if offset < 0:  # a follower that attaches late (status.yml -e follow=true): the last -offset lines first
        with events_locked(files["events"], exclusive=False):
            offset = attach_offset(files["events"], -offset)
    while True:
        result = run_end(files)
        with events_locked(files["events"], exclusive=False):
            whole, start, skipped = events_after(files["events"], offset)
        if whole or result is not None or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    lines = [f"supervisor: {skipped} bytes of its older lines were rotated out before this read"] if skipped else []
    offset = start
    for text in whole.decode("utf-8", "replace").splitlines():
        try:
            lines.append(json.loads(text)["line"])
        except (ValueError, KeyError, TypeError):  # a line cut short by a supervisor killed mid-write
            continue
    return {"lines": lines, "offset": offset + len(whole), "pid": alive(files),
            "result": result, "snapshot": read_json(files["snapshot.json"]) if result is None else None}  # fmt: skip


def last_lines(path: str, count: int = 3) -> list[str]:
    """The last ``count`` lines the supervisor said (from the events' last 64 KiB)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - (1 << 16)))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return []
    lines = []
    for row in text.splitlines():
        try:
            lines.append(json.loads(row)["line"])
        except (ValueError, KeyError, TypeError):  # a row the tail cut, or one cut short
            continue
    return lines[-count:]


def status(run_dir: str, take_up: bool) -> dict[str, object]:
    """Where the run stands: its current attempt, the supervisor's pid (0: gone), since when it runs, whether the run
    ended, its state (the end's, else the current attempt's watch so far), its last lines; ``attempt`` 0 when the
    run never had a supervisor. With ``take_up``, a supervisor found dead before the run ended is started again
    (``taken_up_from``: the pid that died); it goes on from the step the run's state is at, as when train.yml's
    follower finds it dead."""
    files = paths(run_dir)
    if not os.path.exists(files["request.json"]):
        return {"attempt": 0, "run_dir": run_dir}
    pid, result = alive(files), run_end(files)
    answer: dict[str, object] = {"run_dir": run_dir, "pid": pid, "taken_up_from": 0}
    if isinstance(result, dict) and result.get("superseded"):  # moved away: this node's record is no more the run's
        answer.update(superseded=result["error"], ended=True)
        return answer
    if take_up and result is None and not pid:
        dead = recorded_pid(files)
        with open(files["request.json"], encoding="utf-8") as handle:
            request_text = handle.read()
        for _ in range(25):  # the lock may be held a moment by a reader's look, or by another start
            began = start(run_dir, request_text)
            if began["started"]:
                answer.update(pid=began["pid"], taken_up_from=dead)
                break
            if began["ended"]:
                break
            if alive(files):  # another (train.yml's follower) started it meanwhile
                answer["pid"] = recorded_pid(files)
                break
            time.sleep(0.2)
        result = read_json(files["result.json"])
    try:
        since = os.stat(files["pid"]).st_mtime
    except OSError:
        since = None
    state = read_json(os.path.join(files["state"], "attempts.json")) or {}
    snapshot = read_json(files["snapshot.json"]) or {}
    attempt = ((state.get("current") or {}).get("number")) or snapshot.get("attempt") or 1
    ended = isinstance(result, dict)
    if ended and "error" in result:
        shown = "error"
    elif ended:
        shown = ((result.get("attempt") or {}).get("outcome") or {}).get("state")
    else:
        shown = snapshot.get("state") if snapshot.get("attempt") == attempt else "starting"
    current = state.get("current") or {}
    out = {**(state.get("left_out") or {}), **(current.get("lost") or {})}
    saves = (snapshot.get("checkpoints") or {}).get("saves") or current.get("checked_saves") or []
    verified = [save["iteration"] for save in saves if save.get("verdict") == "verified"]
    answer.update(attempt=attempt, since=since, ended=ended, state=shown, events=files["events"],
                  last=last_lines(files["events"]),
                  nodes=[node["name"] for node in (current.get("plan") or {}).get("nodes") or []],
                  left_out=out, last_verified=max(verified, default=None))  # fmt: skip
    return answer


def stop(work_home: str, grace: int, wait: float, slurm_cancels: bool = False) -> dict[str, object]:
    """Ask the supervisor of every run under ``work_home`` that lives in this container to stop its run (its
    ``stop.json``), then wait up to ``wait`` seconds for each to end. Each run: ``run_dir``, ``pid``, ``ended``
    (its result is written), ``state``, ``attempt``, ``stopped`` (node -> the process groups it stopped there).
    ``slurm_cancels``: stop.yml cancels the run's Slurm job next (scancel), whose tasks stop the ranks; the
    supervisor waits for that before it stops what is left itself (:meth:`trainops.lifecycle.Lifecycle._stop`),
    so that Slurm's account of the job says CANCELLED. A request already made is kept as it was."""
    asked = []
    for request in sorted(glob.glob(os.path.join(work_home, "runs", "*", "*", "supervisor", "request.json"))):
        run_dir = os.path.dirname(os.path.dirname(request))
        files = paths(run_dir)
        pid = alive(files)
        if pid and not os.path.exists(files["result.json"]):
            if not os.path.exists(files["stop.json"]):
                asked_now = {"asked_at": time.time(), "grace": grace, "slurm_cancels": slurm_cancels}
                write_json(files["stop.json"], asked_now)
            asked.append((run_dir, files, pid))
    deadline = time.monotonic() + wait
    while any(not os.path.exists(f["result.json"]) for _, f, _ in asked) and time.monotonic() < deadline:
        time.sleep(0.5)
    runs = []
    for run_dir, files, pid in asked:
        state = read_json(os.path.join(files["state"], "attempts.json")) or {}
        current = state.get("current") or {}
        result = read_json(files["result.json"])
        runs.append({"run_dir": run_dir, "pid": pid, "ended": result is not None, "attempt": current.get("number"),
                     "state": ((current.get("outcome") or {}).get("state")), "waited_s": wait,
                     "stopped": current.get("stopped_groups") or {}})  # fmt: skip
    return {"runs": runs}


def copies(work_home: str) -> dict[str, object]:
    """The run under ``work_home`` whose record this container holds a copy of (it is its standby node,
    :class:`RecordCopy`), that had not ended when it was copied and was not moved here: status.yml looks at such a
    run when its supervisor's node does not answer, also where no rank of it lives any more (a master lost with its
    supervisor ends its ranks elsewhere). Only the newest such run, and only while no run has begun in this
    container since: a node runs one run at a time (train.yml refuses a node where a launch lives), so an older copy
    is of a run that is over, however its supervisor ended. Each: ``run_dir``, ``supervisor`` (the node the copy
    came from), ``copied_at``."""
    held = []
    for copied in glob.glob(os.path.join(work_home, "runs", "*", "*", COPY_DIR, "copied.json")):
        run_dir = os.path.dirname(os.path.dirname(copied))
        files, sent = paths(run_dir), read_json(copied)
        ended = (files["result.json"], files["moved.json"], os.path.join(run_dir, COPY_DIR, "result.json"))
        if not isinstance(sent, dict) or any(os.path.exists(path) for path in ended):
            continue
        request = read_json(os.path.join(run_dir, COPY_DIR, "request.json"))
        run = request.get("run") if isinstance(request, dict) else None
        started = float((run or {}).get("run_started") or 0)
        held.append((started, run_dir, sent))
    if not held:
        return {"runs": []}
    started, run_dir, sent = max(held, key=lambda one: (one[0], one[1]))
    for plan in glob.glob(os.path.join(work_home, "runs", "*", "*", "plan.json")):
        if os.path.dirname(plan) != run_dir and os.path.getmtime(plan) > started:
            return {"runs": []}  # a run began here after it
    return {"runs": [{"run_dir": run_dir, "supervisor": sent.get("from"), "copied_at": sent.get("at")}]}


def evidence(run_dir: str) -> dict[str, str]:
    """The last hang's evidence files (the watch writes them into the run's state), as name -> text."""
    root = os.path.join(paths(run_dir)["state"], "hang")
    found = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            with open(path, encoding="utf-8", errors="replace") as handle:
                found[os.path.relpath(path, root)] = handle.read()
    return found


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    stopper = commands.add_parser("stop")
    stopper.add_argument("--work-home", required=True, help="the bundle's work directory in this container")
    stopper.add_argument("--grace", type=int, default=30, help="seconds between SIGTERM and SIGKILL")
    stopper.add_argument("--wait", type=float, default=180.0, help="seconds to wait for the supervisors to end")
    stopper.add_argument("--slurm-cancels", action="store_true", help="the runs' Slurm jobs are cancelled next")
    copies_here = commands.add_parser("copies")
    copies_here.add_argument("--work-home", required=True, help="the bundle's work directory in this container")
    for name in ("start", "read", "evidence", "status", "receive", "move"):
        sub = commands.add_parser(name)
        sub.add_argument("--run-dir", required=True, help="the run's directory in this container")
        if name == "move":
            sub.add_argument("--node", required=True, help="this node's inventory name (the supervisor's new host)")
        if name == "status":
            sub.add_argument("--take-up", action="store_true", help="start a supervisor that died unfinished again")
        if name == "read":
            sub.add_argument("--offset", type=int, default=0, help="bytes already read; -L: the last L lines")
            sub.add_argument("--wait", type=float, default=0.0, help="seconds to wait for something new")
    args = parser.parse_args(argv)
    if args.command == "start":
        answer = start(args.run_dir, sys.stdin.read())
    elif args.command == "read":
        answer = read(args.run_dir, args.offset, args.wait)
    elif args.command == "status":
        answer = status(args.run_dir, args.take_up)
    elif args.command == "stop":
        answer = stop(args.work_home, args.grace, args.wait, args.slurm_cancels)
    elif args.command == "receive":
        answer = receive(args.run_dir, sys.stdin.read())
    elif args.command == "move":
        answer = move(args.run_dir, args.node)
    elif args.command == "copies":
        answer = copies(args.work_home)
    else:
        answer = evidence(args.run_dir)
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
