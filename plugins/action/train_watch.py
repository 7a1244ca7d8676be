"""Action plugin: follow a launched run's watch until it ends, printing its progress.

The watch itself runs on the cluster: the run's supervisor (the node package's ``supervise.py``), started here in
the master's training container, detached from every SSH session, watches the attempt with the core's
:func:`trainops.watch.watch`. Every few seconds it runs the run's ``probe.sh`` there. The probe reports every
node's launch state (over the containers' sshd, the fan-out's own path), the new lines of the last rank's stdout,
which prints Megatron's iteration lines, and the new lines of rank 0's stdout and stderr (checkpoint saves,
Megatron's straggler report). A progress line is printed every ``progress_interval`` seconds when there is a new
iteration; it names the stragglers of the last 20 straggler reports, if any. The watch ends when

* every node's torchrun exited 0: ``finished``;
* a node's torchrun exited non-zero, a node's process group vanished without an exit status, a node stayed
  unreachable from the master for two probes, or a node did not start within ``start_timeout``: ``failed``,
  naming the node;
* no new iteration line came for the hang limit (``hang_timeout``, or ``max(10 x p90 time between iteration
  lines, 300 s)``; at least 1,800 s before the first iteration and while a checkpoint is saved): the run's
  ``diagnose.sh`` reads every rank on every node (state, wait channel, CPU, py-spy stack) and the culprit is
  named (:func:`trainops.hang.diagnose`); the evidence goes to the run directory's ``hang/`` on the master, and
  is copied to ``<evidence_dir>/hang/``. With ``on_hang: stop`` the run is ``failed`` (kind ``hang``); with
  ``warn`` the diagnosis is printed and watching goes on.

This action follows the supervisor's events (``supervise.py read``, one ``docker exec`` over the play's
connection to the master node that waits up to 5 s for a new line) and prints them as they come; after ``wait``
seconds it returns ``running`` with the watch's result so far (the supervisor watches on; status.yml follows it,
stop.yml stops it). With ``detach: true`` (train.yml -e wait=false) it starts the supervisor and returns
``running`` at once. A connection to the master that fails (a reset, a cut, a controller that sleeps) is said once
and tried again: it is the controller's path, not the run's, and judges no node, unless the master stays silent
for :data:`trainops.watch.MASTER_SILENT_S` (then the attempt is ``failed``, kind ``lost``, as a master that is
gone). A supervisor found dead without a result is started again, and takes the watch up from the logs' tail.

With ``wait: 0`` (status.yml) the action probes once itself, with ``tail: true``: the first probe reads the last
256 KiB of the logs instead of their start, and the time of the last iteration comes from the log's age, so a
run already going is judged as it is now.

It changes nothing on any node but the supervisor's own files (``<run_dir>/supervisor/``). The verdicts are the
core's (:class:`trainops.watch.Watcher`).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from typing import Any

_CORE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _CORE not in sys.path:
    sys.path.insert(0, _CORE)

from ansible.errors import AnsibleActionFail, AnsibleConnectionFailure  # noqa: E402
from ansible.plugins.action import ActionBase  # noqa: E402
from ansible.utils.display import Display  # noqa: E402
from trainops.watch import ProbeError, Watcher, WatchRequest, silent_master, supervisor_node, watch  # noqa: E402

display = Display()
#: Seconds one read of the supervisor's events waits for a new line (the follower's latency, at most).
FOLLOW_WAIT_S = 5
#: Lines of the supervisor's events shown first to a follower that attaches to a run already going (status.yml).
ATTACH_LINES = 20
#: Seconds between tries while the master's container does not answer.
FOLLOW_RETRY_S = 2
#: What docker says when it cannot run a command in the container (not the command's own failure).
DOCKER_REFUSALS = ("Error response from daemon", "No such container", "is not running", "Cannot connect to the Docker")


def _why(reply: dict[str, Any], limit: int = 200) -> str:
    return (reply.get("msg") or reply.get("stderr") or "no answer").strip()[:limit]


def _silent(reply: dict[str, Any]) -> bool:
    """The master's container did not answer: the connection to the node failed, or docker could not run the
    command there (the container stopped or gone: docker exec's own exit status 125, or the daemon's refusal)."""
    if reply.get("unreachable"):
        return True
    if not reply.get("failed"):
        return False
    said = f"{reply.get('stderr') or ''} {reply.get('msg') or ''}"
    return reply.get("rc") in (None, 125) or any(text in said for text in DOCKER_REFUSALS)


#: The action's own arguments beside the watch's request: start the supervisor and return at once (-e wait=false);
#: the lifecycle's request (trainops.lifecycle.Lifecycle: options, resumes_from, checked_saves, run_started,
#: health; ``launched`` for a run whose ranks were launched before it had a supervisor).
DETACH = {
    "detach": {"type": "bool", "default": False},
    "run": {"type": "dict", "default": {}},
    # -e notify's URLs, which may hold tokens: into the supervisor's request on its node, and nowhere else
    "notify": {"type": "list", "elements": "str", "default": [], "no_log": True},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(WatchRequest.argument_spec()) | frozenset(DETACH)

    def _runner(self, container: str):
        return lambda argv, stdin=None: self._exec(container, argv, stdin)

    def _exec(self, container: str, argv: list[str], stdin: str | None = None) -> dict[str, Any]:
        """``docker exec`` in the master's container, over the play's connection to the master node.

        The docker CLI, not community.docker's module: the watcher probes every few seconds for days, and a module
        run starts a Python interpreter on the node each time (about 5 % of a 2-core testbed node's CPU at one
        probe every 5 s, measured; the CLI's cost is within noise). Results look like the module's.
        """
        interactive = ["-i"] if stdin is not None else []
        command = " ".join(shlex.quote(part) for part in ["docker", "exec", *interactive, container, *argv])
        try:
            done = self._low_level_execute_command(command, sudoable=True, in_data=stdin)
        except AnsibleConnectionFailure as exc:
            return {"unreachable": True, "msg": str(exc)}
        out = {"rc": done.get("rc"), "stdout": done.get("stdout", ""), "stderr": done.get("stderr", "")}
        if done.get("rc") != 0:
            out.update(failed=True, msg=(out["stderr"] or out["stdout"] or f"docker exec exited {out['rc']}").strip())
        return out

    def _follow(self, request: WatchRequest, run: dict[str, Any], detach: bool = False) -> dict[str, Any]:
        """The run's supervisor, followed for up to ``wait`` seconds: its lines printed as they come; the run's end
        (every line read first: ``{"attempt": the last attempt, "watch": its watch}``), or where it stands (the
        current attempt's watch so far, state running). With ``detach``, the supervisor is started and ``running``
        returned at once."""
        # the node whose container runs the supervisor (this task's host: -e supervisor_host, else the master)
        supervise, host = f"{request.programs}/supervise.py", supervisor_node(request.plan)
        who = "the master" if host == request.plan["master"] else "the supervisor's node"
        where = ["--run-dir", request.plan["run_dir"]]
        started_with = json.dumps({"watch": json.loads(request.to_json()), "run": run})
        deadline = time.monotonic() + request.wait
        # train.yml follows from the watch's first line; status.yml (tail) attaches with its last lines
        offset = -ATTACH_LINES if request.tail else 0
        lost_since, snapshot, result, started = None, None, None, False
        while True:
            if not started:
                reply = self._exec(request.container, ["python3", supervise, "start", *where], started_with)
                started = not _silent(reply)
                if detach:
                    if not started:
                        display.warning(f"{host}: the run's supervisor could not be started ({_why(reply)}); the "
                                        "run goes on unwatched: status.yml -e follow=true starts one")  # fmt: skip
                    elif reply.get("failed"):
                        raise AnsibleActionFail(f"{host}: the run's supervisor ({supervise}) failed to start: "
                                                f"{_why(reply, 1000)}")  # fmt: skip
                    return {"watch": {"state": "running"}}
            if started:
                reply = self._exec(request.container, ["python3", supervise, "read", *where, "--offset", str(offset),
                                                       "--wait", str(FOLLOW_WAIT_S)])  # fmt: skip
            if _silent(reply):
                started = False  # start again once it answers: a supervisor found running is only followed
                if lost_since is None:
                    lost_since = time.monotonic()
                    display.display(f"{host}: no answer from {who}'s container ({_why(reply)}); the run goes on "
                                    "under its supervisor on the cluster; trying again")  # fmt: skip
                lost = silent_master(request.plan, time.monotonic() - lost_since, _why(reply))
                if lost:
                    return {"watch": dict(snapshot or {}, **lost), "silent": True}
                if time.monotonic() >= deadline:
                    return {"watch": dict(snapshot or {"state": "running"})}
                time.sleep(FOLLOW_RETRY_S)
                continue
            if reply.get("failed"):  # the node answers, but the supervisor's program failed: not a lost node
                raise AnsibleActionFail(f"{host}: the run's supervisor ({supervise}) failed: {_why(reply, 1000)}")
            if lost_since is not None:
                display.display(f"{host}: {who} answers again, after {time.monotonic() - lost_since:.0f} s")
                lost_since = None
            answer = json.loads(reply["stdout"] or "{}")
            for line in answer["lines"]:
                display.display(line)
            offset, snapshot = answer["offset"], answer.get("snapshot") or snapshot
            result = answer["result"] if answer["result"] is not None else result
            if result is not None:
                if not answer["lines"]:  # every line said before the run's end is printed
                    return dict(result, ended=True)
                continue
            if not answer["pid"]:
                started = False  # died before the run ended: started again (it goes on from the run's state)
            if time.monotonic() >= deadline:
                return {"watch": dict(snapshot or {"state": "running"})}

    def _fetch_evidence(self, request: WatchRequest, result: dict[str, Any]) -> None:
        """A hang's evidence, written by the supervisor in the master's run directory, copied to the controller's."""
        reply = self._exec(
            request.container,
            ["python3", f"{request.programs}/supervise.py", "evidence", "--run-dir", request.plan["run_dir"]],
        )
        if reply.get("unreachable") or reply.get("failed"):
            display.warning(f"the hang's evidence stays on the master ({request.plan['run_dir']}/hang): {reply['msg']}")
            return
        root = os.path.join(request.evidence_dir, "hang")
        for name, text in json.loads(reply["stdout"] or "{}").items():
            path = os.path.join(root, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text)
        result["hang"]["evidence"] = root

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=dict(WatchRequest.argument_spec(), **DETACH))
        detach, run, notify = args.pop("detach"), args.pop("run"), args.pop("notify")
        run = dict(run, notify=notify) if notify else run
        request = WatchRequest.from_args(args, [name for name in self._task.args if name not in DETACH])
        if detach:  # train.yml -e wait=false: the supervisor started, whatever train_wait says
            followed = self._follow(request, run, detach)
        elif request.wait == 0:  # status.yml: one probe, from here
            try:
                watched = watch(Watcher(request, time.monotonic()), self._runner(request.container), display.display)
            except ProbeError as exc:
                raise AnsibleActionFail(str(exc)) from exc
            followed = {"watch": watched}
        else:
            followed = self._follow(request, run)
            if "error" in followed:
                raise AnsibleActionFail(followed["error"])
            watched = followed.get("watch") or {}
            if (watched.get("hang") or {}).get("evidence") and request.evidence_dir:
                self._fetch_evidence(request, watched)
        # watch: the last attempt's watch (or the current one's so far); attempt: the last attempt as the run's
        # state on the cluster holds it, once the run ended; ended: whether it did; silent: the master stopped
        # answering this controller (the run's state stays on it)
        result.update(changed=False, watch=followed.get("watch") or {}, attempt=followed.get("attempt"),
                      ended=bool(followed.get("ended")), silent=bool(followed.get("silent")))  # fmt: skip
        return result
