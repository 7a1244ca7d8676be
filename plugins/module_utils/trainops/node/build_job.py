"""Start and follow a dataset build in the training container (mtt-train-ops, role data_build).

    python3 build_job.py start --dir DIR [--builder PATH] -- BUILDER-ARGS...   start the builder detached
    python3 build_job.py poll --dir DIR [--sleep SECONDS]      {"rc": N|null, "progress": {...}}
    python3 build_job.py outcome --dir DIR                     {"rc": N|null, "error": ..., "tail": [...]}

The builder is the node package's build_dataset.py, beside this file, unless --builder names another. DIR holds
the build's ``pid``, ``log``, ``progress.json`` and, once it has ended, ``rc``.
``start`` exits 9, naming the running build, when one of the same DIR (the same output) still runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ALREADY_RUNNING = 9


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def running_pid(directory: str) -> int | None:
    """The pid of a build of ``directory`` that has not ended, else None."""
    pid_text = (_read(os.path.join(directory, "pid")) or "").strip()
    if not pid_text.isdigit() or os.path.exists(os.path.join(directory, "rc")):
        return None
    try:
        os.kill(int(pid_text), 0)
    except OSError:
        return None
    return int(pid_text)


def start(directory: str, builder: str, builder_args: list[str]) -> int:
    pid = running_pid(directory)
    if pid is not None:
        log = os.path.join(directory, "log")
        print(f"a build of this output_prefix is already running (pid {pid}, log {log})", file=sys.stderr)
        return ALREADY_RUNNING
    for name in ("rc", "progress.json", "log"):
        if os.path.exists(os.path.join(directory, name)):
            os.remove(os.path.join(directory, name))
    sys.stdout.flush()
    if os.fork() == 0:  # the supervisor: its own session, detached from this exec's output
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        with open(os.path.join(directory, "pid.tmp"), "w", encoding="utf-8") as handle:
            handle.write(f"{os.getpid()}\n")
        os.replace(os.path.join(directory, "pid.tmp"), os.path.join(directory, "pid"))  # never read half-written
        command = [sys.executable, builder,
                   "--progress", os.path.join(directory, "progress.json"), *builder_args]  # fmt: skip
        with open(os.path.join(directory, "log"), "wb") as log:
            rc = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT)
        with open(os.path.join(directory, "rc.tmp"), "w", encoding="utf-8") as handle:
            handle.write(f"{rc}\n")
        os.replace(os.path.join(directory, "rc.tmp"), os.path.join(directory, "rc"))
        os._exit(0)
    return 0


def _rc(directory: str) -> int | None:
    text = (_read(os.path.join(directory, "rc")) or "").strip()
    return int(text) if text.lstrip("-").isdigit() else None


def poll(directory: str, sleep_s: float) -> int:
    time.sleep(sleep_s)
    try:
        progress = json.loads(_read(os.path.join(directory, "progress.json")) or "{}")
    except ValueError:  # caught mid-write
        progress = {}
    print(json.dumps({"rc": _rc(directory), "progress": progress}))
    return 0


def outcome(directory: str) -> int:
    lines = (_read(os.path.join(directory, "log")) or "").splitlines()
    errors = [line[len("ERROR: ") :] for line in lines if line.startswith("ERROR: ")]
    print(json.dumps({"rc": _rc(directory), "error": errors[-1] if errors else "", "tail": lines[-5:]}))
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("start", "poll", "outcome"):
        sub = commands.add_parser(name)
        sub.add_argument("--dir", required=True, help="the build's directory inside the container")
        if name == "poll":
            sub.add_argument("--sleep", type=float, default=0.0, help="seconds to wait before reading")
        if name == "start":
            sub.add_argument(
                "--builder",
                default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "build_dataset.py"),
                help="the builder to run",
            )
            sub.add_argument("builder_args", nargs=argparse.REMAINDER, help="-- then build_dataset.py's arguments")
    args = parser.parse_args(argv)
    if args.command == "start":
        rest = args.builder_args[1:] if args.builder_args[:1] == ["--"] else args.builder_args
        return start(args.dir, args.builder, rest)
    if args.command == "poll":
        return poll(args.dir, args.sleep)
    return outcome(args.dir)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
