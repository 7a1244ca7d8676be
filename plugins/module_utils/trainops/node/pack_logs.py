"""Pack one node's logs of a run into a tarball (mtt-train-ops, role collect); run in the training container.

    python3 pack_logs.py --run-dir DIR --node NAME --pack FILE.tgz|- [--checkpoint-dir CKPT] [--with-state]
                         [--tensorboard-dir TB]
    python3 pack_logs.py --run-dir DIR --node NAME --set-aside DIR/attempt-K

Packs ``DIR/logs/NAME/`` as ``NAME/`` (unpacked into the run's directory on the controller) with the node's launch
output (``logs/launch-NAME.out`` as ``launch.out``) and its exit status (``exit/NAME.rc`` as ``exit.rc``) copied in
first. With ``--checkpoint-dir`` (the master's, in
train.yml) it also writes ``marks.json`` there: ``{"checkpoint": "<latest_checkpointed_iteration.txt's text, or
empty>", "restarting": true|false}``, the checkpoint the attempt left (a new attempt resumes from it) and whether
the run's restart mark (``DIR/restarting``, written with the run's files when ``-e max_restarts`` is set) is still
there: stop.yml removes it, and then train.yml starts no new attempt. With ``--tensorboard-dir`` (the run's
TensorBoard directory, which every attempt of the run writes into) its event files on this node go in too, as
``tensorboard/<path>`` at the pack's root: every node's unpack into one directory, so that the run's attempts are one
run's curves in TensorBoard (Megatron's last rank writes them, and an elastic re-plan may move it to another node;
each file's name holds its writer's time, host and process, so none collides).

``--set-aside`` instead moves the node's logs, launch output, exit status and process group (``pids/NAME.pid``) of
an attempt that ended into ``attempt-K/`` (the restarts), so the next attempt's launch writes its own, and prints
``{"moved": [...], "restarting": true|false}``: the restart mark read again just before the next launch. Exit 2,
naming the directory, when the run directory is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tarfile

TRACKER = "latest_checkpointed_iteration.txt"
RESTART_MARK = "restarting"
MARKS = "marks.json"
#: The run supervisor's state in the run's directory (trainops.lifecycle.STATE_DIR).
STATE = os.path.join("supervisor", "run")


def marks(run_dir: str, checkpoint_dir: str) -> dict:
    """The checkpoint the attempt left (Megatron's tracker file) and whether the restart mark is still there."""
    try:
        with open(os.path.join(checkpoint_dir, TRACKER), encoding="utf-8") as handle:
            checkpoint = handle.read().strip()
    except OSError:
        checkpoint = ""
    return {"checkpoint": checkpoint, "restarting": os.path.isfile(os.path.join(run_dir, RESTART_MARK))}


def tensorboard_files(tensorboard_dir: str) -> list[tuple[str, str]]:
    """The TensorBoard files under ``tensorboard_dir`` (none when it does not exist), each with its name in the
    pack: ``tensorboard/<path under the directory>``."""
    found = []
    for parent, dirs, files in os.walk(tensorboard_dir):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(parent, name)
            found.append((path, os.path.join("tensorboard", os.path.relpath(path, tensorboard_dir))))
    return found


def pack(
    run_dir: str,
    node: str,
    pack_path: str,
    checkpoint_dir: str | None = None,
    state: bool = False,
    tensorboard_dir: str | None = None,
) -> int:
    """Pack the node's logs (with its launch output and exit status, and the marks when ``checkpoint_dir`` is
    given) into ``pack_path``; with ``state``, the run supervisor's state first (``DIR/supervisor/run/``: its
    attempts, the logs it gathered, the attempts it set aside), at the pack's root; with ``tensorboard_dir``, the
    TensorBoard files this node holds, as ``tensorboard/...``. Returns the number of entries (none: nothing is
    written, there is nothing to collect)."""
    logs = os.path.join(run_dir, "logs", node)
    os.makedirs(logs, exist_ok=True)
    if checkpoint_dir:
        with open(os.path.join(logs, MARKS), "w", encoding="utf-8") as handle:
            json.dump(marks(run_dir, checkpoint_dir), handle)
    extras = {os.path.join(run_dir, "logs", f"launch-{node}.out"): "launch.out",
              os.path.join(run_dir, "exit", f"{node}.rc"): "exit.rc"}  # fmt: skip
    for source, name in extras.items():
        if os.path.isfile(source):
            shutil.copyfile(source, os.path.join(logs, name))
    entries = [(os.path.join(logs, entry), f"{node}/{entry}") for entry in sorted(os.listdir(logs))]
    state_dir = os.path.join(run_dir, STATE)
    if state and os.path.isdir(state_dir):
        entries = [(os.path.join(state_dir, entry), entry) for entry in sorted(os.listdir(state_dir))] + entries
    if tensorboard_dir:
        entries += tensorboard_files(tensorboard_dir)
    if not entries:
        return 0
    if pack_path == "-":  # to standard output (the run's supervisor reads it over on-node.sh)
        with tarfile.open(fileobj=sys.stdout.buffer, mode="w|gz") as tar:
            for path, name in entries:
                tar.add(path, arcname=name)
        return len(entries)
    with tarfile.open(pack_path + ".tmp", "w:gz") as tar:
        for path, name in entries:
            tar.add(path, arcname=name)
    os.replace(pack_path + ".tmp", pack_path)
    return len(entries)


def set_aside(run_dir: str, node: str, target: str) -> list[str]:
    """Move the node's logs, launch output and exit status into ``target``; returns what was moved."""
    moved = []
    for part in (
        os.path.join("logs", node),
        os.path.join("logs", f"launch-{node}.out"),
        os.path.join("exit", f"{node}.rc"),
        # the launch's process group: a probe of the next attempt must not take the last one's for its own
        os.path.join("pids", f"{node}.pid"),
    ):
        source = os.path.join(run_dir, part)
        if os.path.exists(source):
            os.makedirs(os.path.dirname(os.path.join(target, part)), exist_ok=True)
            os.replace(source, os.path.join(target, part))
            moved.append(part)
    return moved


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True, help="the run's directory inside the container")
    parser.add_argument("--node", required=True, help="this node's inventory name")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--pack", help="the tarball to write (-: to standard output)")
    action.add_argument("--set-aside", help="move the node's logs of an ended attempt into this directory")
    parser.add_argument("--checkpoint-dir", help="with --pack: write marks.json (the checkpoint, the restart mark)")
    parser.add_argument("--with-state", action="store_true", help="with --pack: the run supervisor's state first")
    parser.add_argument("--tensorboard-dir", help="with --pack: the run's TensorBoard files there, as tensorboard/")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.run_dir):
        print(f"the run directory {args.run_dir} does not exist in this container", file=sys.stderr)
        return 2
    if args.set_aside:
        moved = set_aside(args.run_dir, args.node, args.set_aside)
        print(json.dumps({"moved": moved, "restarting": os.path.isfile(os.path.join(args.run_dir, RESTART_MARK))}))
        return 0
    if not pack(args.run_dir, args.node, args.pack, args.checkpoint_dir, args.with_state, args.tensorboard_dir):
        print("no logs on this node: its launch did not start (see the master's fan-out)", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
