"""Network checks between training containers (mtt-train-ops, role network).

port_probe.py free PORT                      exit 3 if PORT is taken on this node
port_probe.py listen PORT SECONDS COUNT      accept COUNT probes (or until SECONDS), answering each
port_probe.py probe HOST PORT SECONDS        connect to HOST:PORT, retrying until SECONDS; exit 2 on failure
port_probe.py resolve NAME...                print the names that do not resolve (and this host's own name)
port_probe.py node --role master|worker --port PORT --master-addr ADDR --timeout SECONDS --listen-seconds SECONDS
              --probes COUNT --names NAME...
    one node's whole check (role network): the master exits 3 if PORT is taken, else serves COUNT probes in the
    background; every node then reaches the master (a worker) and resolves NAME... and prints `check`'s JSON
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time


def free(port: int) -> int:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError as exc:
            print(f"port {port} is in use: {exc.strerror}")
            return 3
    return 0


def listen(port: int, seconds: float, count: int) -> int:
    deadline = time.monotonic() + seconds
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("0.0.0.0", port))
        sock.listen(64)
        served = 0
        while served < count and time.monotonic() < deadline:
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                break
            with conn:
                conn.sendall(b"mtt-train-ops\n")
            served += 1
    return 0


def reach(host: str, port: int, seconds: float) -> str | None:
    """None when HOST:PORT answers as our listener within SECONDS, else why not."""
    deadline = time.monotonic() + seconds
    error = "no attempt"
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=2) as conn:
                if conn.recv(64).startswith(b"mtt-train-ops"):
                    return None
                error = "something else answers on that port"
        except OSError as exc:
            error = exc.strerror or str(exc)
        time.sleep(0.3)
    return error


def probe(host: str, port: int, seconds: float) -> int:
    error = reach(host, port, seconds)
    print(f"reached {host}:{port}" if error is None else f"cannot reach {host}:{port}: {error}")
    return 0 if error is None else 2


def unresolved(names: list[str]) -> dict[str, str]:
    """Names (this host's own first) that do not resolve, or resolve to loopback for our own name."""
    own = socket.gethostname()
    failed = {}
    for name in [own, *names]:
        try:
            address = socket.gethostbyname(name)
        except OSError as exc:
            failed[name] = exc.strerror or str(exc)
            continue
        if name == own and address.startswith("127."):
            failed[name] = f"this host's own name resolves to loopback {address}; gloo/NCCL would advertise it"
    return failed


def resolve(names: list[str]) -> int:
    print(json.dumps({"hostname": socket.gethostname(), "unresolved": unresolved(names)}))
    return 0


def check(host: str, port: int, seconds: float, names: list[str]) -> int:
    error = None if host == "-" else reach(host, port, seconds)
    print(
        json.dumps(
            {
                "hostname": socket.gethostname(),
                "target": f"{host}:{port}",
                "probe_error": error,
                "unresolved": unresolved(names),
            }
        )
    )
    return 0


def serve_in_background(port: int, seconds: float, count: int) -> None:
    """:func:`listen` in a detached child (its own session, no inherited output), so that this check can end."""
    if os.fork() == 0:
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        try:
            listen(port, seconds, count)
        finally:
            os._exit(0)


def node(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="port_probe.py node")
    parser.add_argument("--role", choices=("master", "worker"), required=True)
    parser.add_argument("--port", type=int, required=True, help="the rendezvous port on the master")
    parser.add_argument("--master-addr", required=True, help="the master's address (unused on the master)")
    parser.add_argument("--timeout", type=float, required=True, help="seconds a worker keeps trying")
    parser.add_argument("--listen-seconds", type=float, required=True, help="seconds the master serves probes")
    parser.add_argument("--probes", type=int, required=True, help="probes the master answers (the workers)")
    parser.add_argument("--names", nargs="*", default=[], help="every node's address, each must resolve")
    args = parser.parse_args(argv)
    if args.role == "master":
        if free(args.port):
            return 3
        if args.probes > 0:
            serve_in_background(args.port, args.listen_seconds, args.probes)
    target = "-" if args.role == "master" else args.master_addr
    return check(target, args.port, args.timeout, args.names)


def main(argv: list[str]) -> int:
    command, args = argv[1], argv[2:]
    if command == "node":
        return node(args)
    if command == "free":
        return free(int(args[0]))
    if command == "listen":
        return listen(int(args[0]), float(args[1]), int(args[2]))
    if command == "probe":
        return probe(args[0], int(args[1]), float(args[2]))
    if command == "resolve":
        return resolve(args)
    if command == "check":
        return check(args[0], int(args[1]), float(args[2]), args[3:])
    print(__doc__)
    return 64


if __name__ == "__main__":
    sys.exit(main(sys.argv))
