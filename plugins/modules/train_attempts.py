#!/usr/bin/python
"""Documentation of the train_attempts action plugin (plugins/action/train_attempts.py); the plugin does the work."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: train_attempts
short_description: Read, or amend, a training run's attempts as the run's supervisor recorded them
description:
  - The run's attempts are stepped on the cluster by its supervisor (C(trainops.lifecycle.Lifecycle) over
    C(trainops.attempts.Attempts)); train.yml collects the supervisor's state into C(<run_dir>/attempts.json) on
    the controller with the master's logs.
  - C(result) returns the last attempt (number, plan, outcome, decision) for the report.
  - C(amend) replaces the last attempt's outcome by one with Slurm's account of the job (C(-e launcher=slurm)),
    which only the login node can give.
version_added: "0.4.0"
author: mtt-train-ops
options:
  step:
    description: The step.
    type: str
    required: true
    choices: [amend, result]
  run_dir:
    description: Controller directory of the run (C(runs/<exp>/<run_id>)).
    type: path
    required: true
  outcome:
    description: C(amend), the outcome with Slurm's account of the job.
    type: dict
notes:
  - An action plugin; it runs on the controller.
"""

RETURN = r"""
attempt:
  description: The current attempt.
  returned: always
  type: dict
  contains:
    number: {description: "The attempt's number (1, 2, ...).", type: int}
    plan: {description: "The attempt's plan, fixed for the attempt.", type: dict}
    resumes_from: {description: "The checkpoint iteration it resumed from, or none.", type: int}
    outcome: {description: "How it ended (state, kind, node, reason), from C(end) on.", type: dict}
    decision: {description: "C(retry) and C(reason), from C(judge) on.", type: dict}
    next: {description: "end, relaunch or replan.", type: str}
    lost: {description: "The nodes it lost, each with why.", type: dict}
    message: {description: "The line to print after a judged attempt.", type: str}
    checked_saves: {description: "The verdicts of the scan before this attempt's launch.", type: list}
    failed_loads: {description: "The saves an attempt of the run failed to resume from (iteration -> why).", type: dict}
    next_plan: {description: "The next attempt's plan (the re-plan, or the same plan), when one follows.", type: dict}
"""
