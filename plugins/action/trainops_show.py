"""Action plugin: print a message for the person at the terminal, whatever the callback hides.

The bundle's ``ansible.cfg`` hides the lines of tasks that ended ``ok`` (``display_ok_hosts = False``), so that a
run prints what a person reads: the plan, the progress, the summary, and every line of a failure. What the bundle
means to say goes through this action: it prints ``msg`` (a string or a list of lines) once, as it is, and changes
nothing. The module file (plugins/modules/trainops_show.py) holds the documentation.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()

ARGUMENT_SPEC = {"msg": {"type": "raw", "required": True}}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        msg = args["msg"]
        text = "\n".join(str(line) for line in msg) if isinstance(msg, (list, tuple)) else str(msg)
        display.display(text)
        result.update(changed=False, msg=text)
        return result
