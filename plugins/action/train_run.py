"""Action plugin: a change to a train.yml run's record (:mod:`trainops.run_record`, ``<run_dir>/run.json``).

train.yml's plays change the run's state only through this action (with ``delegate_to: localhost`` and
``run_once`` where a node play changes it), and read it through the ``trainops_run`` variable. The module file
(plugins/modules/train_run.py) holds the documentation.
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
from trainops import run_record  # noqa: E402
from trainops.records import RecordError  # noqa: E402

ARGUMENT_SPEC = {
    "run_dir": {"type": "path", "required": True},
    "event": {"type": "str", "required": True},
    "set": {"type": "dict", "required": True},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        try:
            record = run_record.update(args["run_dir"], args["set"], args["event"])
        except (run_record.RunRecordError, RecordError, OSError) as exc:
            raise AnsibleActionFail(f"train_run {args['event']}: {exc}") from exc
        result.update(changed=False, run=record)
        return result
