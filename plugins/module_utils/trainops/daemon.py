"""A long-running program the bundle keeps running on a host (Prometheus and Alertmanager on the monitoring host,
playbooks/monitoring.yml): started detached, in its own session, with its output to a log; found again by its
state file; told to read its configuration again (SIGHUP) when only its configuration changed; started anew when
its command line changed or it died; and waited for until it answers its ready URL.

Its files, under ``directory``: ``<name>.json`` (pid, command line, configuration digest) and ``<name>.log``.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from .records import write_json


class DaemonError(RuntimeError):
    """The program did not start, or did not answer in time; the message says why, with its log's last lines."""


def digest(paths: Sequence[str]) -> str:
    """One digest of the configuration files' contents (a file that is missing counts as empty)."""
    total = hashlib.sha256()
    for path in paths:
        total.update(path.encode() + b"\0")
        if os.path.isfile(path):
            with open(path, "rb") as handle:
                total.update(hashlib.sha256(handle.read()).digest())
    return total.hexdigest()[:16]


def alive(pid: int, argv: Sequence[str]) -> bool:
    """Whether ``pid`` runs ``argv`` (a pid reused by another program is not it)."""
    if pid <= 1:
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            running = handle.read().split(b"\0")[:-1]
        with open(f"/proc/{pid}/stat", "rb") as handle:
            zombie = handle.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except OSError:
        return False
    return not zombie and [part.decode(errors="replace") for part in running] == list(argv)


def _tail(path: str, lines: int = 8) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return " | ".join(line.strip() for line in handle.readlines()[-lines:])
    except OSError:
        return "(no log)"


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - the program's own local URL
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def stop(pid: int, argv: Sequence[str], grace: float = 20.0) -> None:
    for sig, seconds in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        if not alive(pid, argv):
            return
        os.kill(pid, sig)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and alive(pid, argv):
            time.sleep(0.2)
    if alive(pid, argv):
        raise DaemonError(f"pid {pid} ({argv[0]}) does not stop")


def ensure(name: str, argv: Sequence[str], directory: str, config: Sequence[str], ready_url: str,
           timeout: float = 60.0) -> dict[str, Any]:  # fmt: skip
    """Keep ``argv`` running as ``name``: ``{"action": "running" | "reloaded" | "started", "pid", "log"}``."""
    os.makedirs(directory, exist_ok=True)
    state_path, log_path = os.path.join(directory, f"{name}.json"), os.path.join(directory, f"{name}.log")
    try:
        with open(state_path, encoding="utf-8") as handle:
            state = json.load(handle)
    except (OSError, ValueError):
        state = {}
    wanted = {"argv": list(argv), "config": digest(config)}
    pid, child = int(state.get("pid") or 0), None
    if alive(pid, argv) and state.get("argv") == wanted["argv"]:
        if state.get("config") == wanted["config"]:
            action = "running"
        else:
            os.kill(pid, signal.SIGHUP)  # Prometheus and Alertmanager read their configuration again
            action = "reloaded"
    else:
        if pid and state.get("argv"):
            stop(pid, state["argv"])
        with open(log_path, "ab") as log:
            child = subprocess.Popen(  # noqa: S603 - the bundle's own command line
                list(argv), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=directory,
                start_new_session=True,
            )  # fmt: skip
        pid, action = child.pid, "started"
    write_json(state_path, {**wanted, "pid": pid, "name": name})
    deadline = time.monotonic() + timeout
    while not _ready(ready_url):
        # the child this started is asked, not /proc: for a moment after exec its cmdline reads empty (the kernel
        # sets the new program's arguments after the exec has closed the pipe Popen waits on), which alive() takes
        # for another program (seen: Prometheus started, called ended, and stopped by the caller)
        if (child.poll() is not None) if child else not alive(pid, argv):
            raise DaemonError(f"{name} ({argv[0]}) ended before it answered {ready_url}; its log: {_tail(log_path)}")
        if time.monotonic() > deadline:
            raise DaemonError(f"{name} does not answer {ready_url} after {timeout:g} s; its log: {_tail(log_path)}")
        time.sleep(0.5)
    return {"action": action, "pid": pid, "log": log_path}
