"""Action plugin: one step of a run's attempts on the controller (:class:`trainops.attempts.Attempts`).

train.yml runs it with ``run_once`` and ``delegate_to: localhost``, so that its result (the current attempt:
number, plan, outcome, decision, next step, message) is registered on every node of the play; the state itself is
the core's, in ``<run_dir>/attempts.json``. The module file (plugins/modules/train_attempts.py) holds the
documentation. The steps that decide (``judge``, ``replanned``) print what comes next.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from typing import Any

_CORE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _CORE not in sys.path:
    sys.path.insert(0, _CORE)

from ansible.errors import AnsibleActionFail  # noqa: E402
from ansible.plugins.action import ActionBase  # noqa: E402
from ansible.utils.display import Display  # noqa: E402
from trainops.attempts import AttemptError, Attempts, read_marks  # noqa: E402
from trainops.errors import PlanError  # noqa: E402
from trainops.megatron_log import LogPathError  # noqa: E402
from trainops.records import RecordError  # noqa: E402
from trainops.run_report import write_report  # noqa: E402
from trainops.straggler import DEFAULT_RATIO  # noqa: E402

display = Display()

STEPS = ("begin", "end", "amend", "judge", "replanned", "resume", "prepare", "result")
ARGUMENT_SPEC = {
    "step": {
        "type": "str",
        "required": True,
        "choices": list(STEPS),
    },
    "run_dir": {"type": "path", "required": True},
    "plan": {"type": "dict"},
    "resumes_from": {"type": "raw"},
    "run_started": {"type": "float"},
    "fanout_result": {"type": "str", "default": "launch_fanout"},
    "watch_result": {"type": "str", "default": "train_watch"},
    "outcome": {"type": "dict"},
    "options": {"type": "dict"},
    "reach_result": {"type": "str", "default": "train_reach"},
    "unhealthy": {"type": "dict", "default": {}},
    "refused": {"type": "str"},
    "restarting": {"type": "bool"},
    "checked_saves": {"type": "list", "elements": "dict", "default": []},
    "choice": {"type": "dict"},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        step = args["step"]
        try:
            attempts = Attempts(args["run_dir"])
            if step == "begin":
                view = attempts.begin(
                    args["plan"], args["resumes_from"], time.time(), float(args["run_started"]), args["checked_saves"]
                )
            elif step == "end":
                fanout, watch = self._master_results(attempts.current["plan"]["master"], args, task_vars)
                view = attempts.end(fanout, watch, time.time())
            elif step == "amend":
                view = attempts.amend(args["outcome"] or {})
            elif step == "judge":
                answering = list(task_vars.get("ansible_play_hosts") or [])
                hostvars = task_vars.get("hostvars") or {}
                plan = attempts.current["plan"]
                reach = {
                    n["name"]: hostvars[n["name"]].get(args["reach_result"]) if n["name"] in hostvars else None
                    for n in plan["nodes"]
                }
                options = args["options"] or {}
                ratio = float(options.get("straggler_ratio") or DEFAULT_RATIO)
                summary = write_report(args["run_dir"], plan, attempts.current["outcome"], ratio)
                try:
                    marks = read_marks(args["run_dir"], plan["master"])
                except RecordError as exc:  # judged as if not collected: the run goes on
                    display.warning(str(exc))
                    marks = None
                view = attempts.judge(options, summary, marks, answering, reach, args["unhealthy"])
            elif step == "replanned":
                view = attempts.replanned(args["plan"], args["refused"])
            elif step == "resume":
                view = attempts.resume(args["choice"] or {})
            elif step == "prepare":
                view = attempts.prepare(bool(args["restarting"]))
            else:
                view = attempts.view()
        except (AttemptError, PlanError, ValueError, LogPathError, OSError) as exc:
            raise AnsibleActionFail(f"train_attempts {step}: {exc}") from exc
        if step in ("judge", "replanned", "resume") and view.get("message"):
            display.display(view["message"])
        result.update(changed=step in ("judge", "resume", "prepare"), attempt=view)
        return result

    @staticmethod
    def _master_results(master: str, args: dict[str, Any], task_vars: dict[str, Any]) -> tuple[dict, Any]:
        """The master's fan-out and watcher results of this attempt; a master that left the play (failed or
        unreachable before its fan-out returned) is a failed fan-out, never its results of an attempt before."""
        if master not in (task_vars.get("ansible_play_hosts") or []):
            return {"rc": 255, "stdout": "", "stderr": f"{master} left the play (see its failure above)"}, None
        master_vars = (task_vars.get("hostvars") or {}).get(master) or {}
        fanout = master_vars.get(args["fanout_result"]) or {}
        watch = master_vars.get(args["watch_result"]) or {}
        return dict(fanout), (watch.get("watch") if isinstance(watch, Mapping) else None)
