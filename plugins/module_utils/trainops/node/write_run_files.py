"""Write a run's files into its directory in the training container (mtt-train-ops, role launch).

    python3 write_run_files.py --run-dir DIR [--node NAME --work-home HOME] < {"NAME": "TEXT", ...}

The files come as JSON on stdin. Each is written whole and then renamed into place (a reader never sees half a
script); ``.sh`` and ``.py`` files are made executable. Creates ``DIR/logs``. Prints how many files were written.

With ``--node`` and ``--work-home``, first refuses (exit 3, naming each, writing nothing) a node where a launch of
this bundle still runs, as the node package's ``run_groups.py`` (beside this file; stop.sh's and stop.yml's code)
finds them: a run is never launched beside another, nor a restart beside what survived the attempt before.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import run_groups  # the node package's, beside this file (a script's own directory is first on sys.path)


def write_files(run_dir: str, files: dict[str, str]) -> int:
    for name, text in files.items():
        path = os.path.join(run_dir, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".tmp", "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(path + ".tmp", 0o755 if name.endswith((".sh", ".py")) else 0o644)
        os.replace(path + ".tmp", path)
    os.makedirs(os.path.join(run_dir, "logs"), exist_ok=True)
    return len(files)


def busy_refusal(node: str, work_home: str, stop_command: str = "", status_command: str = "") -> str:
    """Why this node is refused ("" when no launch of this bundle runs on it); the commands it names are the
    controller's, with its -i."""
    live = list(run_groups.live_groups(node, work_home))
    return run_groups.refusal(node, live, stop_command, status_command) if live else ""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True, help="the run's directory inside the container")
    parser.add_argument("--node", help="this node's inventory name (with --work-home: refuse a busy node)")
    parser.add_argument("--work-home", help="the directory that holds the bundle's runs in the container")
    parser.add_argument("--stop-command", default="", help="the command that stops a run, as the refusal says")
    parser.add_argument("--status-command", default="", help="the command that follows a run, as the refusal says")
    args = parser.parse_args(argv)
    files = json.load(sys.stdin)
    bad = [name for name in files if name.startswith("/") or ".." in name.split("/")]
    if bad:
        print(f"refusing file names outside the run directory: {', '.join(bad)}", file=sys.stderr)
        return 2
    if args.node and args.work_home:
        refused = busy_refusal(args.node, args.work_home, args.stop_command, args.status_command)
        if refused:
            print(refused, file=sys.stderr)
            return 3
    print(write_files(args.run_dir, files))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
