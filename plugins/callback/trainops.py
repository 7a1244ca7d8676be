"""The bundle's screen output: Ansible's default callback, with the warnings of the results it hides.

``ansible.cfg`` hides the lines of hosts that skip a task or end it ``ok`` (``display_skipped_hosts``,
``display_ok_hosts``), so that a run prints what a person reads. ansible-core 2.19's default callback then drops
the warnings of those results with their lines: a warning raised in a task that ended ``ok`` (a deprecation, a
module's warning, train.yml's "-e option ignored") would never reach the screen. This callback is the default one,
except that it prints the warnings and deprecations of an ``ok`` result it does not show, under the task's banner.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.callback.default import CallbackModule as DefaultCallback

DOCUMENTATION = """
    name: trainops
    type: stdout
    short_description: Ansible's default screen output, keeping the warnings of the results it hides
    description:
        - The default callback, except that with C(display_ok_hosts=false) it still prints the warnings and
          deprecations of a result that ended C(ok).
    extends_documentation_fragment:
      - default_callback
      - result_format_callback
    requirements:
      - set as stdout_callback in ansible.cfg (the bundle's does)
"""


class CallbackModule(DefaultCallback):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "trainops"

    def v2_runner_on_ok(self, result: Any) -> None:
        super().v2_runner_on_ok(result)
        hidden = not self.get_option("display_ok_hosts") and not result.result.get("changed", False)
        if hidden and (result.result.get("warnings") or result.result.get("deprecations")):
            if self._last_task_banner != result.task._uuid:
                self._print_task_banner(result.task)
            self._handle_warnings_and_exception(result)
