"""Jinja filters of the checkpoints: the master's scan of the experiment's saves as the save a run resumes from;
export.yml's save, place and result (trainops.export)."""

from __future__ import annotations

import os
import sys
from typing import Any

_CORE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _CORE not in sys.path:
    sys.path.insert(0, _CORE)

from ansible.errors import AnsibleFilterError  # noqa: E402
from trainops import export, identity  # noqa: E402
from trainops.errors import PlanError  # noqa: E402


def resume_choice(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """The registered result of ``checkpoint_scan.py scan`` on the master as the run's resume point: the core's
    :func:`trainops.identity.resume_choice` (the run's supervisor calls it too), its refusal as a filter error."""
    try:
        return identity.resume_choice(*args, **kwargs)
    except PlanError as exc:
        raise AnsibleFilterError("; ".join(exc.problems)) from None


class FilterModule:
    """mtt-train-ops filters: the save a run resumes from, and the save export.yml exports."""

    def filters(self) -> dict[str, Any]:
        return {
            "trainops_resume_choice": resume_choice,
            "trainops_earlier_run_refusal": identity.earlier_run_refusal,
            "trainops_export_job": export.export_job,
            "trainops_export_text": export.result_text,
            "trainops_import_text": export.import_text,
            "trainops_program_result": export.program_result,
        }
