"""The node's card exporter: the cards' metrics (:mod:`trainops.card_metrics`) served to Prometheus from the
training container, on every address of the node, for as long as the container runs; provision.yml starts it
(-e card_metrics_port, docs/monitoring.md).

    python3 card_exporter.py ensure --dir DIR --node NAME --device-tool TOOL --port PORT --version V
        start the exporter (or find it serving with these options; one serving others is stopped first); with
        --port 0 or no device tool, stop the one there is. One JSON line answers:
        {"serving", "started", "stopped", "pid", "port"} and, when it started, what its first reading found ("cards":
        how many, "errors"); a port it cannot take: exit 1 and why.
    python3 card_exporter.py serve --node NAME --device-tool TOOL --port PORT [--interval S]
        the exporter itself, in the foreground

Every ``--interval`` seconds (10) it queries the device tool (its full query, and its process listing), while
prometheus-client's server thread answers each scrape with the last reading: a scrape never waits for the tool, and
a tool that hangs shows as a reading that grows old (``trainops_card_query_timestamp_seconds``) and, after its
timeout, ``trainops_card_query_up 0``. Its files, under DIR: ``lock`` (held while it lives), ``state.json`` (its
pid and options), ``log``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
import traceback

# run as a script: the package's parent (.../trainops/node/ -> ...), not this directory, holds ``trainops``
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

#: Seconds the device tool may take for one query before the reading says it failed.
QUERY_TIMEOUT = 30


def run(argv: list[str], timeout: float) -> dict:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"rc": 127, "output": str(exc), "argv": argv}
    return {"rc": done.returncode, "output": done.stdout if done.returncode == 0 else (done.stderr or done.stdout),
            "argv": argv}  # fmt: skip


class CardCollector:
    """prometheus-client's collector protocol over the last reading of the node's cards."""

    def __init__(self, node: str, tool: str) -> None:
        self.node, self.tool = node, tool
        self._latest: tuple[dict, float, float] | None = None

    def refresh(self) -> None:
        from trainops.card_metrics import LISTINGS, read
        from trainops.node.node_facts import device_query

        started = time.time()
        query = device_query(self.tool, timeout=QUERY_TIMEOUT)
        listing = [run(argv, QUERY_TIMEOUT) for argv in LISTINGS.get(self.tool, [])] if "-q" in query["argv"] else []
        self._latest = (read(self.tool, query, listing), time.time() - started, started)

    def reading(self) -> dict:
        return (self._latest or ({"cards": [], "errors": ["no query yet"]},))[0]

    def describe(self):
        return []  # the families vary with the cards; prometheus-client then takes them from collect()

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        from trainops.card_metrics import families

        reading, seconds, taken_at = self._latest or (None, None, None)
        for family in families(self.node, self.tool, reading, seconds, taken_at):
            if family.samples:
                served = GaugeMetricFamily(family.metric.name, family.metric.help, labels=family.metric.labels)
                for labels, value in family.samples:
                    served.add_metric(labels, value)
                yield served


def serve(node: str, tool: str, port: int, interval: float, ready=None) -> None:
    """Serve until killed. ``ready(answer)`` is called once: with what the first reading found (``cards``,
    ``errors``) once the port is taken, or with ``error`` when it cannot be."""
    import prometheus_client
    from prometheus_client.core import CollectorRegistry

    collector = CardCollector(node, tool)
    collector.refresh()  # the first reading before the first scrape: ensure's answer says what it found
    registry = CollectorRegistry(auto_describe=True)
    registry.register(collector)
    prometheus_client.ProcessCollector(namespace="trainops_card_exporter", registry=registry)
    try:
        prometheus_client.start_http_server(port, addr="0.0.0.0", registry=registry)  # noqa: S104
    except OSError as exc:
        if ready:
            ready({"error": f"port {port}: {exc}"})
        raise SystemExit(1) from None
    if ready:
        reading = collector.reading()
        ready({"cards": len(reading["cards"]), "errors": reading["errors"]})
    while True:
        time.sleep(interval)
        try:
            collector.refresh()
        except Exception as exc:  # noqa: BLE001 - a reading that failed is said in the log; the next one may not
            print(f"{time.strftime('%FT%T')} the card query failed: {exc!r}", flush=True)


def files(directory: str) -> dict[str, str]:
    return {name: os.path.join(directory, name) for name in ("lock", "state.json", "log")}


def running(paths: dict[str, str]) -> dict | None:
    """The live exporter's state (its pid and options), or None when none holds the lock."""
    handle = os.open(paths["lock"], os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        try:
            with open(paths["state.json"], encoding="utf-8") as state:
                return json.load(state)
        except (OSError, ValueError):
            return {"pid": 0}
    finally:
        os.close(handle)  # the lock, when this took it, goes with it
    return None


def stop(paths: dict[str, str], state: dict, wait: float = 10.0) -> None:
    pid = int(state.get("pid") or 0)
    for sig, seconds in ((signal.SIGTERM, wait), (signal.SIGKILL, 5.0)):
        if pid > 1:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if running(paths) is None:
                return
            time.sleep(0.1)
    raise SystemExit(f"the card exporter (pid {pid}) does not stop; its lock is {paths['lock']}")


def start(paths: dict[str, str], options: dict) -> dict:
    """Fork the exporter into its own session (it takes the lock and writes its state); once it serves, its pid and
    what its first reading found (``{"pid", "cards", "errors"}``)."""
    reader, writer = os.pipe()
    sys.stdout.flush()
    if os.fork() == 0:
        os.close(reader)
        os.setsid()
        if os.fork() != 0:
            os._exit(0)
        lock = os.open(paths["lock"], os.O_WRONLY | os.O_CREAT, 0o644)
        fcntl.flock(lock, fcntl.LOCK_EX)  # held until this process ends
        log = os.open(paths["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        with open(f"{paths['state.json']}.tmp", "w", encoding="utf-8") as state:
            json.dump({**options, "pid": os.getpid()}, state)
        os.replace(f"{paths['state.json']}.tmp", paths["state.json"])

        def ready(answer: dict) -> None:
            os.write(writer, json.dumps({**answer, "pid": os.getpid()}).encode())
            os.close(writer)

        try:
            serve(options["node"], options["device_tool"], options["port"], options["interval"], ready)
        except BaseException:  # noqa: BLE001 - its log says why; ensure reads no answer and points there
            traceback.print_exc()
        finally:
            os._exit(1)
    os.close(writer)
    with os.fdopen(reader) as handle:
        answer = json.loads(handle.read() or "{}")
    os.wait()
    if "pid" not in answer or "error" in answer:
        why = answer.get("error") or f"it ended before serving; its log: {paths['log']}"
        raise SystemExit(f"the card exporter cannot serve: {why}")
    return answer


def ensure(args: argparse.Namespace) -> dict:
    os.makedirs(args.dir, exist_ok=True)
    paths = files(args.dir)
    wanted = {"node": args.node, "device_tool": args.device_tool, "port": args.port, "version": args.version,
              "interval": args.interval}  # fmt: skip
    live = running(paths)
    if live is not None and {key: live.get(key) for key in wanted} == wanted:
        return {"serving": True, "started": False, "stopped": False, "pid": live.get("pid"), "port": args.port}
    if live is not None:
        stop(paths, live)
    if not args.port or not args.device_tool:
        return {"serving": False, "started": False, "stopped": live is not None, "pid": None, "port": args.port}
    first = start(paths, wanted)
    return {"serving": True, "started": True, "stopped": live is not None, "port": args.port, **first}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("ensure", "serve"):
        command = commands.add_parser(name)
        command.add_argument("--node", required=True)
        command.add_argument("--device-tool", default="")
        command.add_argument("--port", type=int, required=True)
        command.add_argument("--interval", type=float, default=10.0)
        if name == "ensure":
            command.add_argument("--dir", required=True)
            command.add_argument("--version", default="")
    args = parser.parse_args()
    if args.command == "serve":
        serve(args.node, args.device_tool, args.port, args.interval)
    else:
        print(json.dumps(ensure(args)))


if __name__ == "__main__":
    main()
