"""Action plugin: read, or amend, a run's attempts on the controller (:class:`trainops.attempts.Attempts`).

The attempts are stepped on the cluster by the run's supervisor (:class:`trainops.lifecycle.Lifecycle`), whose
state train.yml collects into ``<run_dir>/attempts.json`` on the controller with the master's logs. Here the
controller only reads the last attempt for the report (``result``), and amends its outcome with Slurm's account of
the job (``amend``, ``-e launcher=slurm``), which only the login node can give. Registered with ``run_once``, the
result (the last attempt: number, plan, outcome, decision) is on every node of the play. The module file
(plugins/modules/train_attempts.py) holds the documentation.
"""

from __future__ import annotations

import os
import sys
from typing import Any

_CORE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _CORE not in sys.path:
    sys.path.insert(0, _CORE)

from ansible.errors import AnsibleActionFail  # noqa: E402
from ansible.plugins.action import ActionBase  # noqa: E402
from trainops.attempts import AttemptError, Attempts  # noqa: E402
from trainops.records import RecordError  # noqa: E402

STEPS = ("amend", "result")
ARGUMENT_SPEC = {
    "step": {"type": "str", "required": True, "choices": list(STEPS)},
    "run_dir": {"type": "path", "required": True},
    "outcome": {"type": "dict"},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        step = args["step"]
        try:
            attempts = Attempts(args["run_dir"])
            view = attempts.amend(args["outcome"] or {}) if step == "amend" else attempts.view()
        except (AttemptError, RecordError, OSError) as exc:
            raise AnsibleActionFail(f"train_attempts {step}: {exc}") from exc
        result.update(changed=step == "amend", attempt=view)
        return result
