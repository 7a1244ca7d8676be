"""Jinja filters over the core: rendering a plan (comments, argument lines, resume point, its files)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

_CORE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _CORE not in sys.path:
    sys.path.insert(0, _CORE)

from ansible.errors import AnsibleFilterError  # noqa: E402
from trainops import inputs as inputs_core  # noqa: E402
from trainops import options as options_core  # noqa: E402
from trainops import plan as plan_core  # noqa: E402
from trainops import shell as shell_core  # noqa: E402
from trainops.errors import PlanError  # noqa: E402


def one_line(value: Any) -> str:
    """``value`` on one line (control characters as escapes): for comments and labels in rendered scripts."""
    return options_core.one_line(value)


def rendered_files(plan: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What roles/render writes from templates/ for the plan: name, template, mode, node, label."""
    return inputs_core.rendered_files(plan)


def shell_arg_lines(args: Sequence[str], indent: int = 4) -> str:
    """Quote an argument vector for bash, one ``--flag value...`` group per continued line (trainops.shell)."""
    return shell_core.shell_arg_lines(args, indent)


def plan_with_resume(plan: Mapping[str, Any], tracker: str | None, moved_to: str | None = None) -> dict[str, Any]:
    """The plan with its resume point, from the text of Megatron's latest_checkpointed_iteration.txt."""
    try:
        iteration = plan_core.tracker_iteration(tracker)
    except PlanError as exc:
        raise AnsibleFilterError("; ".join(exc.problems)) from None
    return plan_core.with_resume(plan, iteration, moved_to or None)


class FilterModule:
    """mtt-train-ops filters: rendering a plan (comments, argument lines, resume point, its files)."""

    def filters(self) -> dict[str, Any]:
        return {
            "trainops_shell_arg_lines": shell_arg_lines,
            "trainops_one_line": one_line,
            "trainops_rendered_files": rendered_files,
            "trainops_plan_with_resume": plan_with_resume,
        }
