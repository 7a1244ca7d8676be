"""Jinja filters of the checkpoints: the master's scan of the experiment's saves as the save a run resumes from."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import Any

_CORE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _CORE not in sys.path:
    sys.path.insert(0, _CORE)

from ansible.errors import AnsibleFilterError  # noqa: E402
from trainops import checkpoints, identity  # noqa: E402


def resume_choice(
    scan: Mapping[str, Any],
    plan: Mapping[str, Any],
    verify: bool,
    node: str,
    failed_loads: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The registered result of ``checkpoint_scan.py scan`` on the master as the run's resume point.

    ``{"resume": "N" | "", "set_aside": [names], "tracker": "N" | None, "lines": [...], "refused": text | "",
    "saves": [verdicts]}``. ``verify`` false trusts the tracker as it is (-e verify_checkpoints=false).
    ``failed_loads``: the saves an attempt of this run failed to resume from (iteration -> why), never chosen.
    A directory written by another configuration (the arguments its newest save recorded, ``scan --args``) is
    refused whatever ``verify`` says (:func:`trainops.identity.check_directory`); the old-style directory a
    ``scan --legacy`` listed, when it is this experiment's, comes back as ``adopt`` (moved before the resume)."""
    directory = plan["checkpoint_dir"]
    try:
        listing = json.loads(scan.get("stdout") or "")
    except ValueError:
        why = (scan.get("stderr") or scan.get("msg") or "no output").strip()[-400:]
        raise AnsibleFilterError(
            f"{node}: the checkpoints in {directory} could not be scanned: {why}. Fix the directory, or give "
            "-e verify_checkpoints=false to resume from what its tracker names unchecked. Nothing was started."
        ) from None
    belongs = identity.check_directory(listing, plan, node)
    adopt = belongs.get("adopt")
    if belongs["refused"]:
        return {"resume": "", "set_aside": [], "tracker": None, "lines": belongs["lines"],
                "refused": belongs["refused"], "saves": [], "adopt": None}  # fmt: skip
    if not verify:
        tracker = checkpoints.tracker_value(listing.get("tracker"))
        return {"resume": "" if tracker is None else str(tracker), "set_aside": [], "tracker": None,
                "lines": belongs["lines"], "refused": "", "saves": [], "adopt": adopt}  # fmt: skip
    saves = checkpoints.judge(listing, plan, running=False, failed_loads=failed_loads)
    choice = checkpoints.choose(saves, listing.get("tracker"))
    if adopt:
        directory = f"{listing['dir']} (to be moved to {directory})"
    refused = ""
    if choice.get("refused"):
        refused = (
            f"{node}: not one checkpoint in {directory} can be resumed from ({choice['refused']}). Nothing was "
            "started or changed. Give -e fresh=true to start anew (the saves are moved aside, not deleted), or "
            "-e verify_checkpoints=false to resume from what the tracker names unchecked (docs/checkpoints.md)."
        )
    return {
        "resume": "" if choice["iteration"] is None else str(choice["iteration"]),
        "set_aside": [entry["name"] for entry in choice["set_aside"]],
        "tracker": choice["tracker"],
        "lines": belongs["lines"] + choice["lines"],
        "refused": refused,
        "saves": saves,
        "adopt": None if refused else adopt,
    }


class FilterModule:
    """mtt-train-ops filters: the save a run resumes from."""

    def filters(self) -> dict[str, Any]:
        return {"trainops_resume_choice": resume_choice, "trainops_earlier_run_refusal": identity.earlier_run_refusal}
