"""Run nccl-tests' all_reduce_perf (MCCL's on MUSA) in the training container (mtt-train-ops, role collective).

    python3 allreduce_perf.py --test PATH --max-bytes 1G --gpus 8 --timeout 300
        [--hosts ADDR,ADDR --ssh-port 2222 --ssh-key KEY]

Without --hosts: this node's cards. With --hosts: across those nodes through mpirun over the containers' sshd
(one process per node, each driving --gpus cards). Exit 127 when the test binary is missing, 126 when --hosts is
given and the image has no mpirun; else the test's own exit status (124 on timeout).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

NO_TEST = 127
NO_MPIRUN = 126


def command(args: argparse.Namespace) -> list[str]:
    """The command line: timeout, then all_reduce_perf alone or under mpirun."""
    sweep = [args.test, "-b", "8", "-e", args.max_bytes, "-f", "2", "-g", str(args.gpus), "-c", "1"]
    if not args.hosts:
        return ["timeout", str(args.timeout), *sweep]
    hosts = [h for h in args.hosts.split(",") if h]
    rsh = f"-p {args.ssh_port} -i {args.ssh_key} -o BatchMode=yes -o StrictHostKeyChecking=yes"
    mpirun = ["mpirun", "--allow-run-as-root", "-np", str(len(hosts)), "-H", ",".join(f"{h}:1" for h in hosts)]
    return ["timeout", str(args.timeout), *mpirun, "--bind-to", "none", "-mca", "plm_rsh_args", rsh,
            "-x", "PATH", "-x", "LD_LIBRARY_PATH", *sweep]  # fmt: skip


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--test", required=True, help="all_reduce_perf inside the container")
    parser.add_argument("--max-bytes", required=True, help="largest message of the sweep (nccl-tests' -e)")
    parser.add_argument("--gpus", type=int, required=True, help="cards per process (nccl-tests' -g)")
    parser.add_argument("--timeout", type=int, required=True, help="seconds allowed for the run")
    parser.add_argument("--hosts", default="", help="comma-separated node addresses: run across them with mpirun")
    parser.add_argument("--ssh-port", type=int, default=2222, help="port of the containers' sshd")
    parser.add_argument("--ssh-key", default="/root/.ssh/mtt_cluster_ed25519", help="key for the containers' sshd")
    args = parser.parse_args(argv)
    if args.hosts and shutil.which("mpirun") is None:
        print("no mpirun in the image", file=sys.stderr)
        return NO_MPIRUN
    if not (os.path.isfile(args.test) and os.access(args.test, os.X_OK)):
        print(f"no executable all_reduce_perf at {args.test}", file=sys.stderr)
        return NO_TEST
    line = command(args)
    sys.stdout.flush()
    os.execvp(line[0], line)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
