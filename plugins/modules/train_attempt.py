#!/usr/bin/python
"""Ansible module: record one attempt of a run on the controller, setting its files aside for the next one."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: train_attempt
short_description: Record an attempt of a training run in runs/<exp>/<run_id>/attempt-<k>/
description:
  - Writes C(attempt-<k>/attempt.json) in the run's controller directory (start, end, how it ended and why, the
    checkpoint it resumed from and the one it left, the last iteration it reached).
  - With O(set_aside=true) it first moves what the attempt left in the run's directory (each node's collected
    logs, the attempt's report, its hang evidence) into C(attempt-<k>/), so that the next attempt starts clean;
    C(plan/) and the earlier attempts stay. The report reads every C(attempt-*/attempt.json).
version_added: "0.3.0"
author: mtt-train-ops
options:
  run_dir:
    description: Controller directory of the run (C(runs/<exp>/<run_id>)).
    type: path
    required: true
  record:
    description: The attempt's record (C(trainops.recovery.attempt_record)); its C(attempt) names the directory.
    type: dict
    required: true
  set_aside:
    description: Move the attempt's files into its directory first (an attempt followed by another).
    type: bool
    default: false
  plan:
    description: The attempt's plan, kept as C(attempt-<k>/plan.json) (an elastic re-plan replaces C(plan/)).
    type: dict
notes:
  - Run it on the controller.
"""

RETURN = r"""
path:
  description: The attempt's directory.
  returned: success
  type: str
"""

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.trainops.recovery import write_attempt  # noqa: E402


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "run_dir": {"type": "path", "required": True},
            "record": {"type": "dict", "required": True},
            "set_aside": {"type": "bool", "default": False},
            "plan": {"type": "dict"},
        },
        supports_check_mode=False,
    )
    p = module.params
    if not os.path.isdir(p["run_dir"]):
        module.fail_json(msg=f"{p['run_dir']}: no such run directory on the controller")
    try:
        path = write_attempt(p["run_dir"], p["record"], p["set_aside"], p["plan"])
    except (OSError, KeyError, ValueError) as exc:
        module.fail_json(msg=f"cannot record attempt {p['record'].get('attempt')} in {p['run_dir']}: {exc}")
    module.exit_json(changed=True, path=path)


if __name__ == "__main__":
    main()
