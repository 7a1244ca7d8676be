"""The run's supervisor on the cluster: watches an attempt from inside the master's training container, detached
from every SSH session, so that the watch does not depend on the controller that started it.

    python3 supervise.py start --run-dir DIR --attempt N < request.json   start the watch (or find it running)
    python3 supervise.py read --run-dir DIR --attempt N --offset BYTES [--wait S]   what it said since BYTES (-L: its
                                                                                     last L lines)
    python3 supervise.py evidence --run-dir DIR                           a hang's evidence files, as JSON
    python3 supervise.py status --run-dir DIR [--take-up]                  the newest watch, as JSON; --take-up starts
                                                                          its supervisor again when it died unfinished

The watch is the core's (:func:`trainops.watch.watch` over a :class:`trainops.watch.Watcher`): the run's probe.sh,
diagnose.sh and the checkpoint scanner run here, in this container, and reach the other nodes over the containers'
sshd as they always have; a node is called lost only when they cannot reach it. Its files, under
``DIR/supervisor/``, one set per attempt:

    watch-N.request.json   the watch's request (trainops.watch.WatchRequest), as train.yml's action sent it
    watch-N.pid            the supervisor's process id (its own session, no terminal, no run mark)
    watch-N.lock           held (flock) by the supervisor for as long as it lives: it runs when the lock is taken
    watch-N.events         what it says, one JSON line each: {"t": wall clock, "line": text}; rotated to
                           watch-N.events.1 past 4 MiB (the follower's offsets stay valid: EventLog), under
                           watch-N.events.lock
    watch-N.snapshot.json  the watch's result so far, written after every probe (state running)
    watch-N.result.json    the watch's result once it has ended (or {"error": ...} when the watch itself failed)
    watch-N.log            its own errors (a traceback, should it die of one)

``start`` answers one JSON line: ``{"pid", "started", "ended"}``. A supervisor found dead without a result (killed,
or its container restarted) is started again and takes the watch up from the logs' last 256 KiB, saying so in its
events. Every file is written whole and renamed into place, or appended a line at a time.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import re
import subprocess
import sys
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


def paths(run_dir: str, attempt: int) -> dict[str, str]:
    base = os.path.join(run_dir, "supervisor", f"watch-{attempt}")
    names = ("request.json", "pid", "lock", "events", "snapshot.json", "result.json", "log")
    return {name: f"{base}.{name}" for name in names}


def write_json(path: str, value: object) -> None:
    with open(f"{path}.tmp", "w", encoding="utf-8") as handle:
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


def run_here(argv: list[str], stdin: str | None = None) -> dict[str, object]:
    """One command of the watch, in this container; answered as docker_container_exec answers."""
    try:
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"rc": None, "stdout": "", "stderr": "", "failed": True, "msg": f"timed out after {COMMAND_TIMEOUT_S} s"}
    except OSError as exc:
        return {"rc": None, "stdout": "", "stderr": str(exc), "failed": True, "msg": str(exc)}
    reply: dict[str, object] = {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
    if done.returncode != 0:
        reply.update(failed=True, msg=(done.stderr or done.stdout or f"exited {done.returncode}").strip())
    return reply


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
        self.size += os.write(self.fd, (json.dumps({"t": round(time.time(), 3), "line": line}) + "\n").encode())
        if self.size >= self.limit:
            with events_locked(self.path, exclusive=True):
                self._begin(self.base + self.size)
                os.close(self.fd)
                self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            self.base, self.size = base_of(self.path), os.fstat(self.fd).st_size


def supervise(files: dict[str, str], taken_up_from: int) -> None:
    """The detached process: the whole watch, its lines to the events, its result to the result file."""
    from trainops.watch import ProbeError, Watcher, WatchRequest, watch

    say = EventLog(files["events"]).say
    request = WatchRequest(**read_json(files["request.json"]))
    if taken_up_from:
        say(f"supervisor: its process {taken_up_from} ended without a result; taking the watch up again (pid "
            f"{os.getpid()}), from the logs' last 256 KiB")  # fmt: skip
    watcher = Watcher(request, time.monotonic())

    def probed(watcher: Watcher) -> None:  # the result so far (state running), for anyone who asks
        write_json(files["snapshot.json"], watcher.result(time.monotonic()))

    try:
        result = watch(watcher, run_here, say, probed)
    except ProbeError as exc:
        result = {"error": str(exc)}
    write_json(files["result.json"], result)


def start(run_dir: str, attempt: int, request_text: str) -> dict[str, object]:
    files = paths(run_dir, attempt)
    os.makedirs(os.path.dirname(files["pid"]), exist_ok=True)
    if os.path.exists(files["result.json"]):
        return {"pid": 0, "started": False, "ended": True}
    lock = os.open(files["lock"], os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # a supervisor lives (or another start is starting one)
        os.close(lock)
        return {"pid": recorded_pid(files), "started": False, "ended": False}
    taken_up_from = recorded_pid(files)
    if taken_up_from:  # its supervisor died before the watch ended: take it up from the logs' tail
        request = dict(read_json(files["request.json"]) or json.loads(request_text), tail=True)
        snapshot = read_json(files["snapshot.json"]) or {}
        request["known_checkpoints"] = (snapshot.get("checkpoints") or {}).get("saves") or request.get(
            "known_checkpoints"
        )
    else:
        request = json.loads(request_text)
    request.update(wait=UNBOUNDED_S, evidence_dir=run_dir)
    write_json(files["request.json"], request)
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
            supervise(files, taken_up_from)
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


def read(run_dir: str, attempt: int, offset: int, wait: float) -> dict[str, object]:
    """The events after ``offset`` (whole lines; a negative offset: the last -offset lines), whether the
    supervisor lives, and the result once there is one; waits up to ``wait`` seconds for something new."""
    files = paths(run_dir, attempt)
    deadline = time.monotonic() + wait
    if offset < 0:  # a follower that attaches late (status.yml -e follow=true): the last -offset lines first
        with events_locked(files["events"], exclusive=False):
            offset = attach_offset(files["events"], -offset)
    while True:
        result = read_json(files["result.json"])
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


def newest_attempt(run_dir: str) -> int:
    """The newest attempt with a watch request under ``DIR/supervisor/`` (0: the run never had a supervisor)."""
    try:
        names = os.listdir(os.path.join(run_dir, "supervisor"))
    except OSError:
        return 0
    found = [re.fullmatch(r"watch-(\d+)\.request\.json", name) for name in names]
    return max((int(match.group(1)) for match in found if match), default=0)


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


def live_attempt(run_dir: str) -> int:
    """The attempt the run's ranks belong to: the one after the last set aside (``DIR/attempt-K``), else 1."""
    try:
        names = os.listdir(run_dir)
    except OSError:
        return 1
    found = [re.fullmatch(r"attempt-(\d+)", name) for name in names]
    return 1 + max((int(match.group(1)) for match in found if match), default=0)


def status(run_dir: str, take_up: bool) -> dict[str, object]:
    """The run's current watch: its attempt, the supervisor's pid (0: gone), since when it runs, whether the watch
    ended, its state (the result's, else the snapshot's), its last lines; ``unwatched`` when the attempt the ranks
    belong to has no watch (the train.yml that launched it stopped before it started one). With ``take_up``, a
    supervisor found dead before its watch ended is started again (``taken_up_from``: the pid that died); it takes
    the watch up from the logs' tail, as when train.yml's follower finds it dead."""
    attempt = newest_attempt(run_dir)
    if not attempt:
        return {"attempt": 0, "run_dir": run_dir}
    live = live_attempt(run_dir)
    if live > attempt:
        return {"attempt": live, "run_dir": run_dir, "pid": 0, "taken_up_from": 0, "unwatched": True}
    files = paths(run_dir, attempt)
    pid, result = alive(files), read_json(files["result.json"])
    answer: dict[str, object] = {"attempt": attempt, "run_dir": run_dir, "pid": pid, "taken_up_from": 0}
    if take_up and result is None and not pid:
        dead = recorded_pid(files)
        with open(files["request.json"], encoding="utf-8") as handle:
            request_text = handle.read()
        for _ in range(25):  # the lock may be held a moment by a reader's look, or by another start
            began = start(run_dir, attempt, request_text)
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
    shown = result if isinstance(result, dict) else read_json(files["snapshot.json"])
    answer.update(
        since=since,
        ended=result is not None,
        state=(shown or {}).get("state") or ("error" if isinstance(result, dict) and "error" in result else None),
        events=files["events"],
        last=last_lines(files["events"]),
    )
    return answer


def evidence(run_dir: str) -> dict[str, str]:
    root = os.path.join(run_dir, "hang")
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
    for name in ("start", "read", "evidence", "status"):
        sub = commands.add_parser(name)
        sub.add_argument("--run-dir", required=True, help="the run's directory in this container")
        if name in ("start", "read"):
            sub.add_argument("--attempt", type=int, required=True, help="the attempt's number")
        if name == "status":
            sub.add_argument("--take-up", action="store_true", help="start a supervisor that died unfinished again")
        if name == "read":
            sub.add_argument("--offset", type=int, default=0, help="bytes already read; -L: the last L lines")
            sub.add_argument("--wait", type=float, default=0.0, help="seconds to wait for something new")
    args = parser.parse_args(argv)
    if args.command == "start":
        answer = start(args.run_dir, args.attempt, sys.stdin.read())
    elif args.command == "read":
        answer = read(args.run_dir, args.attempt, args.offset, args.wait)
    elif args.command == "status":
        answer = status(args.run_dir, args.take_up)
    else:
        answer = evidence(args.run_dir)
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
