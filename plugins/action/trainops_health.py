"""Action plugin: judge every node's health from the facts roles/health_check gathered, and record it.

Judged in the controller's process: every provision.yml, health.yml and train.yml (and a check before another
attempt) judges once, and as a module that was a Python process of its own (about 0.6 s on two cores). The module
file (plugins/modules/trainops_health.py) holds the documentation.
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
from trainops import health, incidents, records  # noqa: E402

display = Display()

ARGUMENT_SPEC = {
    "facts": {"type": "dict", "required": True},
    "expected": {"type": "dict", "default": {}},
    "health_dir": {"type": "path", "required": True},
    "incidents_file": {"type": "str", "default": ""},
    "level": {"type": "str", "default": "quick", "choices": list(health.LEVELS)},
    "max_age_h": {"type": "float", "default": 0.0},
    "context": {"type": "str", "default": "health.yml"},
    "policy": {"type": "str", "default": "exclude", "choices": list(health.POLICIES)},
    "use_nodes": {"type": "list", "elements": "str", "default": []},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        _, p = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        now = time.time()
        warnings: list[str] = []  # a damaged record read or written, each named
        try:
            nodes = list(p["facts"])
            max_age_s = p["max_age_h"] * 3600 if p["level"] == "quick" else 0
            carried = health.carried_full(p["health_dir"], nodes, now, max_age_s, warnings)
            last = health.last_checked(p["health_dir"], nodes, warnings)
            verdicts = health.judge(p["facts"], p["expected"], last, carried)
            path = health.record(p["health_dir"], p["level"], verdicts, p["facts"], now, p["context"])
        except OSError as exc:
            raise AnsibleActionFail(f"{p['health_dir']}: {exc}") from exc
        if p["incidents_file"]:
            name = os.path.relpath(os.path.dirname(path), os.path.dirname(os.path.abspath(p["health_dir"])))
            found = health.incidents(verdicts, name, path, now)
            try:
                warnings += incidents.record(p["incidents_file"], found, now)[1]
            except (OSError, records.RecordError) as exc:  # the verdicts stand; the incidents are said, not lost
                told = "; ".join(incidents.line(i) for i in found)
                warnings.append(f"the sick nodes' incidents were not added to {p['incidents_file']}: {exc} ({told})")
        for warning in dict.fromkeys(warnings):  # a record read twice is named once
            display.warning(warning)
        left_out = {n: why for n, why in health.left_out(verdicts, p["policy"]).items() if n not in p["use_nodes"]}
        reasons = {n: verdicts[n]["reason"] for n in left_out}
        result.update(changed=False, verdicts=verdicts, lines=health.lines(verdicts), left_out=left_out,
                      reasons=reasons, path=path)  # fmt: skip
        return result
