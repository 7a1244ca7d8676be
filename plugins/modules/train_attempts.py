#!/usr/bin/python
"""Documentation of the train_attempts action plugin (plugins/action/train_attempts.py); the plugin does the work."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: train_attempts
short_description: One step of a training run's attempts, kept by the core in runs/<exp>/<run_id>/attempts.json
description:
  - The run's lifecycle (C(trainops.attempts.Attempts)) one step at a time, on the controller. The state lives in
    C(<run_dir>/attempts.json); every step reads it and writes it back.
  - C(begin) starts attempt k with a plan fixed for the whole attempt (the first plan, or the re-plan of the
    attempt before) and the checkpoint it resumes from.
  - C(end) keeps the attempt's outcome from the fan-out's result and the watcher's.
  - C(amend) replaces the outcome by one with Slurm's account of the job (C(-e launcher=slurm)).
  - C(judge) (C(-e max_restarts)) parses the attempt's collected logs and writes their report in O(run_dir),
    reads the master's collected C(marks.json) (the checkpoint the attempt left, the restart mark), records the
    attempt (C(attempt-<k>/attempt.json)), names the nodes it lost (each node's registered ping,
    O(reach_result)), decides the next step, C(end), C(relaunch) or C(replan), and prints it.
  - C(replanned) keeps the re-plan on the nodes that remain, or ends the run when it was O(refused); it prints
    what comes next.
  - C(resume) keeps the save the next attempt resumes from, the scan's O(choice) (the newest verified save that
    no attempt of the run failed to load), or ends the run when it was refused (no save can be trusted).
  - C(prepare) ends the restarts when stop.yml removed the restart mark (O(restarting=false)), else sets the
    attempt's collected files aside into C(attempt-<k>/).
  - C(result) returns the last attempt for the report.
version_added: "0.4.0"
author: mtt-train-ops
options:
  step:
    description: The step.
    type: str
    required: true
    choices: [begin, end, amend, judge, replanned, resume, prepare, result]
  run_dir:
    description: Controller directory of the run (C(runs/<exp>/<run_id>)).
    type: path
    required: true
  plan:
    description: C(begin) of the first attempt, the run's plan; C(replanned), the new plan.
    type: dict
  resumes_from:
    description: C(begin) of the first attempt, the text of the checkpoint's tracker file on the master ('' for none).
    type: raw
  run_started:
    description: C(begin), when this train.yml run started (epoch seconds); a state another run left under the same
      run id is kept aside as C(attempts-<its start>.json) and this run starts afresh.
    type: float
  fanout_result:
    description: C(end), the name of the master's registered fan-out result (its C(rc), C(stdout), C(stderr)); a
      master that left the play counts as a failed fan-out.
    type: str
    default: launch_fanout
  watch_result:
    description: C(end), the name of the master's registered watcher result (its C(watch); skipped with
      C(-e wait=false)).
    type: str
    default: train_watch
  outcome:
    description: C(amend), the outcome with Slurm's account of the job.
    type: dict
  options:
    description: C(judge), train.yml's watch options (C(max_restarts), C(elastic), C(min_nodes), C(straggler_ratio)).
    type: dict
  reach_result:
    description: C(judge), the name of each node's registered ping after the failure.
    type: str
    default: train_reach
  unhealthy:
    description: C(judge), the nodes the quick health check before the next attempt found sick (node -> why): a
      node of the plan among them cannot take part in another attempt (with C(elastic) the run is re-planned
      without it, else it ends naming it).
    type: dict
    default: {}
  refused:
    description: C(replanned), why the re-plan was refused (the run then ends).
    type: str
  restarting:
    description: C(prepare), whether the restart mark is still there.
    type: bool
  checked_saves:
    description: C(begin) of the first attempt, the verdicts of the scan before the launch (the watcher does not
      read those saves again).
    type: list
    elements: dict
    default: []
  choice:
    description: C(resume), the result of the C(trainops_resume_choice) filter on the next master's scan
      (C(resume), C(refused), C(lines), C(saves)).
    type: dict
notes:
  - Run it on the controller with C(run_once), so that every node of the play sees the result.
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
