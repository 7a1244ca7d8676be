"""Action plugin: watch a launched run from its master node until it ends, printing its progress.

Every ``poll_interval`` seconds it runs the run's ``probe.sh`` in the master's container (``docker exec`` over the
play's connection to the master node: see ``_exec``). The probe reports every node's launch state (over
the containers' sshd, the fan-out's own path), the new lines of the last rank's stdout, which prints Megatron's
iteration lines, and the new lines of rank 0's stdout and stderr (checkpoint saves, Megatron's straggler
report). A progress line is printed every ``progress_interval`` seconds when there is a new iteration; it names
the stragglers of the last 20 straggler reports, if any. Watching ends when

* every node's torchrun exited 0: ``finished``;
* a node's torchrun exited non-zero, a node's process group vanished without an exit status, a node stayed
  unreachable for two probes, or a node did not start within ``start_timeout``: ``failed``, naming the node;
* no new iteration line came for the hang limit (``hang_timeout``, or ``max(10 x p90 time between iteration
  lines, 300 s)``; at least 1,800 s before the first iteration and while a checkpoint is saved): the run's
  ``diagnose.sh`` reads every rank on every node (state, wait channel, CPU, py-spy stack) and the culprit is
  named (:func:`trainops.hang.diagnose`); the evidence goes to ``<evidence_dir>/hang/``. With ``on_hang: stop``
  the run is ``failed`` (kind ``hang``); with ``warn`` the diagnosis is printed and watching goes on;
* ``wait`` seconds passed: ``running`` (the job goes on; status.yml follows it, stop.yml stops it).

With ``tail: true`` (status.yml) the first probe reads the last 256 KiB of the logs instead of their start, and
the time of the last iteration comes from the log's age, so a run already going is judged as it is now.

It changes nothing on any node. The verdicts are the core's (:class:`trainops.watch.Watcher`); this plugin runs
the probes, sleeps between them and prints what the watcher gives it.
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
from trainops.watch import ProbeError, Watcher, WatchRequest  # noqa: E402

display = Display()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(WatchRequest.argument_spec())

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

    def _checkpoints(self, request: WatchRequest, watcher: Watcher, running: bool) -> list[str]:
        """The checkpoint watch's commands, when it wants them: the scan after a save, then retention's removal."""
        found, ckpt = [], watcher.checkpoints
        watcher.wall = time.time()
        if ckpt.wants_scan:
            found += ckpt.on_scan(self._exec(request.container, ckpt.scan_argv()), time.time(), running=running)
        if ckpt.wants_apply:
            reply = self._exec(request.container, ckpt.apply_argv(), json.dumps(ckpt.apply_input()))
            found += ckpt.on_apply(reply, time.time())
        return found

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=WatchRequest.argument_spec())
        request = WatchRequest.from_args(args, list(self._task.args))
        watcher = Watcher(request, time.monotonic())
        try:
            while True:
                for line in watcher.on_probe(self._exec(request.container, watcher.probe_argv()), time.monotonic()):
                    display.display(line)
                if watcher.wants_diagnosis:
                    reply = self._exec(request.container, watcher.diagnose_argv())
                    for line in watcher.on_diagnosis(reply, time.monotonic()):
                        display.display(line)
                for line in self._checkpoints(request, watcher, running=True):
                    display.display(line)
                if watcher.ended(time.monotonic()):
                    break
                time.sleep(watcher.next_probe_in())
        except ProbeError as exc:
            raise AnsibleActionFail(str(exc)) from exc
        if watcher.outcome["state"] == "finished" and watcher.checkpoints.enabled:
            watcher.checkpoints.wants_scan = True  # the save at the end, made just before the ranks exited
        for line in [*self._checkpoints(request, watcher, running=False), *watcher.finish()]:
            display.display(line)
        result.update(changed=False, watch=watcher.result(time.monotonic()))
        return result
