"""The process groups of mtt-train-ops launches on one node: list the live ones, or stop them.

Run inside the training container (python3, standard library only):

    python3 - list NODE WORK_HOME [--run-dir DIR]
    python3 - stop NODE WORK_HOME [--run-dir DIR] [--grace SECONDS] [--cancel-restarts]

Every launch script records its process group in ``<work_home>/runs/<exp>/<run>/pids/<NODE>.pid`` (the fan-out
starts it with setsid: the group holds that shell and torchrun) and exports ``MTT_TRAIN_OPS_RUN=<run dir>``,
which every process it starts inherits: torchrun puts each rank in a session of its own, so the ranks are
found by that mark, not by the group. A launch counts as live only while a process of its group runs from
the run directory or carries its mark, so a recycled process-group id is never signalled. ``stop`` first kills
every process of the launch that is stopped (state T, a ``kill -STOP``: it could not act on SIGTERM until
continued, so a grace period would only be waited out), then sends SIGTERM to the group and every marked process,
waits up to the grace period, then sends SIGKILL, and checks that none is left. With ``--cancel-restarts``
(stop.yml) it also removes the ``restarting`` mark of every run (``<run dir>/restarting``, written by a train.yml
that restarts the run after a failure: ``-e max_restarts``), so that train.yml starts no new attempt. It prints
one JSON object.
"""

import argparse
import glob
import json
import os
import signal
import sys
import time


def members(pgid):
    """The pids of the processes whose process group is ``pgid`` (zombies excluded)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != b"Z":
            found.append(int(entry))
    return found


def marked(run_dir):
    """The pids whose environment carries this run's mark (torchrun's ranks live in sessions of their own)."""
    mark = b"\0MTT_TRAIN_OPS_RUN=" + run_dir.encode() + b"\0"
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if mark in b"\0" + handle.read() + b"\0":
                    found.append(int(entry))
        except OSError:
            continue
    return found


def processes(group):
    """Every process of a launch: its process group and its marked descendants."""
    return sorted(set(members(group["pgid"])) | set(marked(group["run_dir"])))


def state(pid):
    """The process's state letter (R, S, D, T, Z...), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2 :].split()[0].decode()


def kill_frozen(group):
    """SIGKILL, then SIGCONT, to every process of the launch in state T; their pids."""
    frozen = [pid for pid in processes(group) if state(pid) == "T"]
    for pid in frozen:
        for signum in (signal.SIGKILL, signal.SIGCONT):
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass
    return frozen


def signal_all(group, signum):
    for pid in processes(group):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def runs_from(pid, run_dir):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return run_dir.rstrip("/").encode() + b"/" in handle.read()
    except OSError:
        return False


def live_groups(node, work_home, run_dir=None):
    pattern = os.path.join(glob.escape(work_home), "runs", "*", "*", "pids", glob.escape(node) + ".pid")
    if run_dir:
        pattern = os.path.join(glob.escape(run_dir), "pids", glob.escape(node) + ".pid")
    for pid_file in sorted(glob.glob(pattern)):
        directory = os.path.dirname(os.path.dirname(pid_file))
        try:
            with open(pid_file) as handle:
                pgid = int(handle.read().strip())
        except (OSError, ValueError):
            continue
        in_group, mark = members(pgid), marked(directory)
        pids = sorted(set(in_group) | set(mark))
        if pids and (mark or any(runs_from(pid, directory) for pid in in_group)):
            yield {
                "run_dir": directory,
                "exp": os.path.basename(os.path.dirname(directory)),
                "run_id": os.path.basename(directory),
                "pgid": pgid,
                "processes": len(pids),
                "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(os.stat(pid_file).st_mtime)),
            }


def stop(group, grace):
    begun = time.monotonic()
    frozen = kill_frozen(group)
    signal_all(group, signal.SIGTERM)
    while time.monotonic() - begun < grace:
        if not processes(group):
            return dict(
                group,
                result="stopped by SIGTERM" + (f" (stopped processes {frozen} killed first)" if frozen else ""),
                seconds=round(time.monotonic() - begun, 1),
                survivors=[],
                frozen_killed=frozen,
            )
        time.sleep(0.2)
    signal_all(group, signal.SIGKILL)
    for _ in range(25):
        if not processes(group):
            break
        time.sleep(0.2)
    left = processes(group)
    return dict(
        group,
        result=f"killed by SIGKILL after {grace:g} s" if not left else "survives SIGKILL",
        seconds=round(time.monotonic() - begun, 1),
        survivors=left,
        frozen_killed=frozen,
    )


def refusal(node, groups, stop_command="", status_command=""):
    """The sentence that refuses a node where launches of this bundle run (train.yml's idle check, the launch);
    ``stop_command``/``status_command``: the controller's command lines, carrying its -i (else the playbooks named)."""
    runs = "".join(
        f"run '{g['exp']}/{g['run_id']}' (process group {g['pgid']}, {g['processes']} processes, started "
        f"{g['started']}) in {g['run_dir']}; "
        for g in groups
    )
    return (
        f"{node}: a job is running: {runs}stop it with `{stop_command or 'stop.yml'}` "
        f"(`{status_command or 'playbooks/status.yml'}` shows its progress), then run train.yml again."
    )


RESTART_MARK = "restarting"


def cancel_restarts(work_home, run_dir=None):
    """Remove the restart mark of every run under ``work_home`` (or of ``run_dir``); the run dirs it was in."""
    pattern = (
        os.path.join(run_dir, RESTART_MARK) if run_dir else os.path.join(work_home, "runs", "*", "*", RESTART_MARK)
    )
    cancelled = []
    for mark in sorted(glob.glob(pattern)):
        try:
            os.remove(mark)
        except FileNotFoundError:
            continue
        cancelled.append(os.path.dirname(mark))
    return cancelled


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("list", "stop"))
    parser.add_argument("node")
    parser.add_argument("work_home")
    parser.add_argument("--run-dir", default="")
    parser.add_argument("--grace", type=float, default=30.0)
    parser.add_argument("--cancel-restarts", action="store_true")
    parser.add_argument("--stop-command", default="", help="list: the command that stops a run, as the refusal says")
    parser.add_argument("--status-command", default="", help="list: the command that shows a run's progress")
    args = parser.parse_args()
    groups = list(live_groups(args.node, args.work_home, args.run_dir or None))
    if args.mode == "list":
        told = refusal(args.node, groups, args.stop_command, args.status_command) if groups else ""
        print(json.dumps({"node": args.node, "live": groups, "refusal": told}))
        return 0
    cancelled = cancel_restarts(args.work_home, args.run_dir or None) if args.cancel_restarts else []
    stopped = [stop(group, args.grace) for group in groups]
    left = list(live_groups(args.node, args.work_home, args.run_dir or None))
    print(json.dumps({"node": args.node, "stopped": stopped, "live_after": left, "restarts_cancelled": cancelled}))
    return 1 if left or any(s["survivors"] for s in stopped) else 0


if __name__ == "__main__":
    sys.exit(main())
