"""One node's ranks of a run, as a suspected hang needs them: state, kernel wait channel, CPU use and stack.

Run inside the training container (python3, standard library only), from the run directory where the launch
put it, by the run's ``diagnose.sh`` on every node at once:

    python3 rank_probe.py --run-dir DIR --node NAME --first-rank N --slots S [--sample-s 1] [--py-spy PATH]

A rank is a process that carries the run's mark (``MTT_TRAIN_OPS_RUN=<run dir>``, set by the launch script)
and torchrun's ``RANK`` and ``LOCAL_RANK``. For each it reads

* ``/proc/PID/status``: the state (R running, S sleeping, D disk wait, T stopped, t traced, Z zombie);
* ``/proc/PID/wchan``: where in the kernel it waits;
* ``/proc/PID/stat``: user+system CPU seconds, twice ``--sample-s`` apart, giving the CPU share it used;
* ``py-spy dump``: every thread's Python stack, with native frames where py-spy can unwind them. A stopped
  rank is read without suspending it (``--nonblocking``), since suspending a stopped process never returns.

It prints one JSON object on one line and changes nothing (py-spy pauses a running rank for the instant of a
dump unless it is stopped already).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time

TICKS = os.sysconf("SC_CLK_TCK")
DUMP_TIMEOUT_S = 20


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--first-rank", type=int, required=True)
    parser.add_argument("--slots", type=int, required=True)
    parser.add_argument("--sample-s", type=float, default=1.0)
    parser.add_argument("--py-spy", default="py-spy", help="the py-spy binary (a path, or a name on PATH)")
    return parser.parse_args(argv)


def read(path, mode="r"):
    try:
        with open(path, mode) as handle:
            return handle.read()
    except OSError:
        return None


def environ(pid):
    raw = read(f"/proc/{pid}/environ", "rb")
    if raw is None:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


def find_ranks(run_dir):
    """``{global rank: (pid, local rank)}`` of the processes marked with this run that torchrun started."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        env = environ(entry)
        if env.get("MTT_TRAIN_OPS_RUN") != run_dir or "RANK" not in env or "LOCAL_RANK" not in env:
            continue
        try:
            rank, local = int(env["RANK"]), int(env["LOCAL_RANK"])
        except ValueError:
            continue
        # a rank's own children (data loader workers) inherit its environment: keep the eldest, the rank itself
        if rank not in found or int(entry) < found[rank][0]:
            found[rank] = (int(entry), local)
    return found


def status(pid):
    """``(state letter, state text, threads)`` from /proc/PID/status."""
    text = read(f"/proc/{pid}/status") or ""
    state, threads = ("?", "gone"), None
    for line in text.splitlines():
        if line.startswith("State:"):
            value = line.split(":", 1)[1].strip()
            state = (value[:1], value[1:].strip().strip("()") or value)
        elif line.startswith("Threads:"):
            threads = int(line.split(":", 1)[1])
    return state[0], state[1], threads


def cpu_seconds(pid):
    raw = read(f"/proc/{pid}/stat")
    if raw is None:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def dump(py_spy, pid, stopped):
    """py-spy's dump of a rank: (text, how, error). Native frames first; a stopped rank without suspending it."""
    attempts = [["--nonblocking"]] if stopped else [["--native"], [], ["--nonblocking"]]
    error = None
    for extra in attempts:
        try:
            done = subprocess.run(
                [py_spy, "dump", "--pid", str(pid), *extra],
                capture_output=True,
                text=True,
                timeout=DUMP_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            error = f"py-spy dump {' '.join(extra)} did not answer within {DUMP_TIMEOUT_S} s"
            continue
        if done.returncode == 0 and "Thread " in done.stdout:
            return done.stdout, " ".join(["dump", *extra]), None
        error = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"py-spy exited {done.returncode}"]
        error = error[0]
    return None, None, error


def main(argv=None):
    args = parse_args(argv)
    py_spy = shutil.which(args.py_spy)
    ranks = find_ranks(args.run_dir.rstrip("/"))
    before = {rank: cpu_seconds(pid) for rank, (pid, _) in ranks.items()}
    started = time.monotonic()
    time.sleep(max(0.0, args.sample_s))
    elapsed = time.monotonic() - started
    rows = {}
    for rank, (pid, local) in sorted(ranks.items()):
        letter, text, threads = status(pid)
        after = cpu_seconds(pid)
        used = None if before[rank] is None or after is None else max(0.0, after - before[rank])
        rows[rank] = {
            "rank": rank,
            "local_rank": local,
            "pid": pid,
            "state": letter,
            "state_text": text,
            "threads": threads,
            "wchan": (read(f"/proc/{pid}/wchan") or "").strip() or None,
            "cpu_s": after,
            "cpu_percent": None if used is None else round(100 * used / elapsed, 1),
            "stack": None,
            "stack_how": None,
            "stack_error": None if py_spy else f"py-spy is not installed here ({args.py_spy}): run provision.yml",
        }

    def take(row):
        row["stack"], row["stack_how"], row["stack_error"] = dump(py_spy, row["pid"], row["state"] in "Tt")

    if py_spy:
        workers = [threading.Thread(target=take, args=(row,)) for row in rows.values() if row["state"] != "Z"]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    expected = list(range(args.first_rank, args.first_rank + args.slots))
    report = {
        "node": args.node,
        "expected_ranks": expected,
        "ranks": [rows[rank] for rank in sorted(rows)],
        "missing_ranks": [rank for rank in expected if rank not in rows],
        "py_spy": py_spy,
        "sample_s": round(elapsed, 2),
    }
    json.dump(report, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
