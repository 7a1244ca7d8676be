"""Action plugin: watch a launched run from its master node until it ends, printing its progress.

Every ``poll_interval`` seconds it runs the run's ``probe.sh`` in the master's container (through
community.docker.docker_container_exec on the master node). The probe reports every node's launch state (over
the containers' sshd, the fan-out's own path) and the new lines of the last rank's stdout, which prints
Megatron's iteration lines. A progress line is printed every ``progress_interval`` seconds when there is a new
iteration. Watching ends when

* every node's torchrun exited 0: ``finished``;
* a node's torchrun exited non-zero, a node's process group vanished without an exit status, a node stayed
  unreachable for two probes, or a node did not start within ``start_timeout``: ``failed``, naming the node;
* ``wait`` seconds passed: ``running`` (the job goes on; status.yml follows it, stop.yml stops it).

It changes nothing on any node.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

_CORE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _CORE not in sys.path:
    sys.path.insert(0, _CORE)

from ansible.errors import AnsibleActionFail  # noqa: E402
from ansible.plugins.action import ActionBase  # noqa: E402
from ansible.utils.display import Display  # noqa: E402
from trainops.megatron_log import parse_lines  # noqa: E402
from trainops.run_report import progress_line, ranks_of  # noqa: E402

display = Display()

#: A node unreachable for this many probes in a row has failed (one lost probe is forgiven).
UNREACHABLE_PROBES = 2


def parse_probe(text: str) -> tuple[dict[str, tuple[str, str]], dict[str, Any] | None, str]:
    """Split probe.sh's output into node states, the log header and the new log text."""
    nodes: dict[str, tuple[str, str]] = {}
    header = None
    lines = text.split("\n")
    for index, line in enumerate(lines):
        fields = line.split("\t")
        if fields[0] == "node" and len(fields) >= 4:
            nodes[fields[1]] = (fields[2], "\t".join(fields[3:]))
        elif fields[0] == "log" and len(fields) >= 4:
            header = {"path": fields[1], "size": int(fields[2]), "bytes": int(fields[3])}
            return nodes, header, "\n".join(lines[index + 1 :])
    return nodes, header, ""


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(
        ("container", "probe", "plan", "wait", "poll_interval", "progress_interval", "start_timeout")
    )

    def _probe(self, task_vars: dict[str, Any], container: str, probe: str, offset: int) -> dict[str, Any]:
        return self._execute_module(
            module_name="community.docker.docker_container_exec",
            module_args={"container": container, "argv": ["bash", probe, str(offset)], "strip_empty_ends": False},
            task_vars=task_vars,
        )

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        args = self._task.args
        plan = args["plan"]
        container = args.get("container", "train")
        probe = args["probe"]
        wait = float(args.get("wait", 86400))
        poll = max(1.0, float(args.get("poll_interval", 5)))
        every = max(0.0, float(args.get("progress_interval", 30)))
        start_timeout = float(args.get("start_timeout", 120))
        master = plan["master"]

        started = time.monotonic()
        offset, printed_at, last_printed = 0, None, None
        last: dict[str, Any] | None = None
        memory: dict[str, Any] | None = None
        first_iteration_s = None
        unreachable: dict[str, int] = {}
        nodes: dict[str, tuple[str, str]] = {}
        outcome: dict[str, Any] = {"state": "running"}
        while True:
            now = time.monotonic() - started
            reply = self._probe(task_vars, container, probe, offset)
            if reply.get("unreachable") or reply.get("failed"):
                count = unreachable[master] = unreachable.get(master, 0) + 1
                if count >= UNREACHABLE_PROBES:
                    reason = (reply.get("msg") or reply.get("stderr") or "no answer").strip()
                    outcome = {
                        "state": "failed",
                        "kind": "lost",
                        "node": master,
                        "reason": f"the master does not answer: {reason}",
                    }
                    break
            else:
                unreachable.pop(master, None)
                nodes, header, text = parse_probe(reply.get("stdout", ""))
                if header and header["bytes"]:
                    offset += header["bytes"]
                    log = parse_lines(text.splitlines(), source=header["path"])
                    if log.iterations:
                        last = log.iterations[-1]
                        if first_iteration_s is None:
                            first_iteration_s = round(now, 1)
                    if log.memory:
                        memory = max(log.memory, key=lambda m: m.get("max_reserved_mb") or 0)
                if last is not None and last is not last_printed and (printed_at is None or now - printed_at >= every):
                    display.display(f"{plan['exp_name']} / {plan['run_id']}: {progress_line(last, plan, memory)}")
                    printed_at, last_printed = now, last
                outcome = self._judge(plan, nodes, unreachable, now, start_timeout)
                if outcome["state"] != "running":
                    break
            if now >= wait:
                break
            time.sleep(poll)

        if last is not None and last is not last_printed:
            display.display(f"{plan['exp_name']} / {plan['run_id']}: {progress_line(last, plan, memory)}")
        outcome.update(
            nodes={name: {"state": state, "detail": detail} for name, (state, detail) in nodes.items()},
            last_iteration=last,
            watched_s=round(time.monotonic() - started, 1),
            first_iteration_s=first_iteration_s,
            progress=progress_line(last, plan, memory) if last else None,
        )
        if outcome.get("node"):
            outcome["ranks"] = ranks_of(plan, outcome["node"])
        result.update(changed=False, watch=outcome)
        return result

    @staticmethod
    def _judge(
        plan: dict[str, Any],
        nodes: dict[str, tuple[str, str]],
        unreachable: dict[str, int],
        now: float,
        start_timeout: float,
    ) -> dict[str, Any]:
        names = [n["name"] for n in plan["nodes"]]
        missing = [n for n in names if n not in nodes]
        if missing:
            raise AnsibleActionFail(f"probe.sh reported no state for {', '.join(missing)}: is it this run's probe?")
        for name in names:
            state, detail = nodes[name]
            if state == "unreachable":
                unreachable[name] = unreachable.get(name, 0) + 1
                if unreachable[name] >= UNREACHABLE_PROBES:
                    return {
                        "state": "failed",
                        "kind": "lost",
                        "node": name,
                        "reason": f"the master's container cannot reach {name}'s container any more ({detail})",
                    }
                continue
            unreachable.pop(name, None)
            if state == "exited" and detail.strip() != "0":
                return {
                    "state": "failed",
                    "kind": "exited",
                    "node": name,
                    "reason": f"torchrun on {name} exited with status {detail}",
                }
            if state == "stopped":
                return {
                    "state": "failed",
                    "kind": "killed",
                    "node": name,
                    "reason": f"the launch on {name} (process group {detail}) is gone without an exit status: killed",
                }
            if state == "waiting" and now > start_timeout:
                return {
                    "state": "failed",
                    "kind": "not started",
                    "node": name,
                    "reason": f"the launch did not start on {name} within {start_timeout:.0f} s "
                    f"(see logs/launch-{name}.out in the run dir)",
                }
        if all(nodes[name][0] == "exited" for name in names):
            return {"state": "finished"}
        return {"state": "running"}
