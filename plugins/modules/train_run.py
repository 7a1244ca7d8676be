#!/usr/bin/python
"""Documentation of the train_run action plugin (plugins/action/train_run.py); the plugin does the work."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: train_run
short_description: Change a training run's record, runs/<exp>/<run_id>/run.json
description:
  - The record of one train.yml run (C(trainops.run_record)) holds what was decided before and between its
    attempts: the options, the launcher's settings and Slurm job, when it started, the nodes left out and why, the
    master the checks ran on, the dataset's manifest and the resume choice. Plays read it as C(trainops_run).
  - Each change is written whole and appended to C(<run_dir>/events.jsonl) (when, the event, the keys changed).
    C(left_out) only grows (nodes are added with why).
version_added: "0.9.0"
author: mtt-train-ops
options:
  run_dir:
    description: Controller directory of the run (C(runs/<exp>/<run_id>)).
    type: path
    required: true
  event:
    description: What happened, in a few words (the event log's C(event)).
    type: str
    required: true
  set:
    description: The keys to change and their values.
    type: dict
    required: true
notes:
  - An action plugin: it runs on the controller. From a node play, use C(delegate_to: localhost) and C(run_once).
"""

EXAMPLES = r"""
- name: Keep a node found sick out of the rest of the run
  train_run:
    run_dir: "{{ trainops_run_dir }}"
    event: health check after attempt 1
    set:
      left_out: "{{ health_result.left_out }}"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
run:
  description: The record after the change.
  returned: always
  type: dict
"""
