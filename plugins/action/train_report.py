"""Action plugin: parse a collected run and write its report (metrics, memory, summary, plots).

Written in the controller's process: every train.yml and report.yml reports, and as a module that was a Python
process of its own on the controller. The module file (plugins/modules/train_report.py) holds the documentation.
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
from trainops import incidents, records  # noqa: E402
from trainops.megatron_log import LogPathError  # noqa: E402
from trainops.run_report import INCIDENTS_RECORDED, write_report  # noqa: E402

display = Display()

ARGUMENT_SPEC = {
    "run_dir": {"type": "path", "required": True},
    "plan": {"type": "dict", "required": True},
    "incident": {"type": "dict"},
    "straggler_ratio": {"type": "float", "default": 1.2},
    "incidents_file": {"type": "path"},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        _, p = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        if not os.path.isdir(p["run_dir"]):
            raise AnsibleActionFail(f"{p['run_dir']}: no such run directory on the controller")
        try:
            summary = write_report(p["run_dir"], p["plan"], p["incident"], p["straggler_ratio"])
        except (LogPathError, OSError) as exc:
            raise AnsibleActionFail(f"cannot write the report of {p['run_dir']}: {exc}") from exc
        added = []
        if p["incidents_file"]:
            run = f"{p['plan']['exp_name']}/{p['plan']['run_id']}"
            found = incidents.from_run(run, summary.get("attempts") or [], summary, summary.get("nodes_missing") or [])
            # the nodes the run's supervisor found sick after an attempt (its state, collected into the run's directory)
            found += incidents.read(os.path.join(p["run_dir"], incidents.HEALTH_FILE))[0]
            try:
                added, said = incidents.record(p["incidents_file"], found, time.time())
                # status.yml reports a run whose end no terminal followed until this mark is there
                records.write_json(
                    os.path.join(p["run_dir"], INCIDENTS_RECORDED),
                    {"time": round(time.time(), 1), "incidents_file": p["incidents_file"], "found": found},
                )
            except (OSError, records.RecordError) as exc:  # the report stands; the incidents are said, not lost
                told = "; ".join(incidents.line(i) for i in found) or "none"
                said = [f"the run's incidents were not added to {p['incidents_file']}: {exc} (they are: {told})"]
            for warning in said:
                display.warning(warning)
        result.update(
            changed=True,
            summary=summary,
            table=summary["table"],
            failure=summary["failure_text"],
            state=summary["state"],
            incidents=added,
        )
        return result
