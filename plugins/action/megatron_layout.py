"""Action plugin: validate a Megatron-LM layout and derive its launch plan, in the controller's process.

The layout role plans on the controller, two or three times a train.yml (the first plan, the plan with the dataset's
manifest, the plan on the final nodes). As a module each plan was a Python process of its own (about 0.5 s on two
cores, busy training); this action calls the same core (:func:`trainops.plan.make_plan`) in the task's worker. The
module file (plugins/modules/megatron_layout.py) holds the documentation; its options are PlanRequest's fields.
"""

from __future__ import annotations

import os
import sys
from typing import Any

_CORE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _CORE not in sys.path:
    sys.path.insert(0, _CORE)

from ansible.plugins.action import ActionBase  # noqa: E402
from trainops.errors import PlanError  # noqa: E402
from trainops.plan import make_plan  # noqa: E402
from trainops.plan_request import PlanRequest  # noqa: E402

ARGUMENT_SPEC = PlanRequest.argument_spec()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        _, request = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        try:
            plan = make_plan(PlanRequest.from_options(request))
        except PlanError as exc:
            result.update(
                failed=True,
                msg=f"the layout is refused ({len(exc.problems)} problem(s)); nothing was written:\n{exc}",
                problems=exc.problems,
            )
            return result
        # the request as given: the run's supervisor plans an elastic re-plan from it (trainops.lifecycle)
        result.update(changed=False, plan=plan, request=request)
        return result
