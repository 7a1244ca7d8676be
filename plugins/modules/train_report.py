#!/usr/bin/python
"""Documentation of the train_report action plugin (plugins/action/train_report.py); the plugin does the work."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: train_report
short_description: Parse a collected training run and write metrics.jsonl, memory.jsonl, summary.json and plots
description:
  - Reads every node's collected torchrun logs under O(run_dir) (C(<run_dir>/<node>/...)), parses them with the
    project's Megatron log parser, and writes C(metrics.jsonl) (one record per iteration line),
    C(memory.jsonl), C(summary.json) and, when matplotlib is installed, C(loss.png) and C(throughput.png).
  - The summary has the last iteration, median and p90 step time without warm-up, tokens/s per card, TFLOP/s
    per card (as Megatron prints it, and from the plan's model FLOPs, causal convention), MFU against the card's
    stated dense BF16 peak, the largest reserved memory per rank, first and last loss, NaN and skipped counts,
    and the failure with its node and global rank.
version_added: "0.1.0"
author: mtt-train-ops
options:
  run_dir:
    description: Controller directory of the run (C(runs/<exp>/<run_id>)).
    type: path
    required: true
  plan:
    description: The run's plan (C(plan.json)).
    type: dict
    required: true
  incident:
    description: What the watcher saw, when it ended the run (C(state), C(node), C(reason)), and its hang
      diagnosis (C(hang)) when it made one. Without it, C(<run_dir>/hang/diagnosis.json) gives the diagnosis.
    type: dict
  straggler_ratio:
    description: A rank whose compute time over the run is at least this many times the median of the other
      ranks' is a straggler (from the straggler report rank 0 prints).
    type: float
    default: 1.2
  incidents_file:
    description: The site's incident record (C(<runs_dir>/incidents.jsonl)); the run's incidents (each failed
      attempt's culprit, each lost node) are appended to it, once per run, attempt, node and kind. When it cannot
      be written, a warning names it and the incidents, and the report stands. Unset (report.yml): none is added.
    type: path
notes:
  - Run it on the controller. It writes only inside O(run_dir), and to O(incidents_file).
"""

EXAMPLES = r"""
- name: Write the report of a collected run
  train_report:
    run_dir: runs/tp1_pp1_dp4_mbs1_numbs2_gbs8_gpus4/20261130-101500
    plan: "{{ lookup('ansible.builtin.file', 'runs/.../plan/plan.json') | from_json }}"
  register: report
"""

RETURN = r"""
summary:
  description: The content of summary.json.
  returned: success
  type: dict
table:
  description: The printed summary, one line per item.
  returned: success
  type: list
  elements: str
failure:
  description: "The failure, as C(node rank N (local rank L): error (file:line)); empty when the run did not fail."
  returned: success
  type: str
state:
  description: finished, failed, running or empty.
  returned: success
  type: str
incidents:
  description: The incidents this call added to O(incidents_file) (node, kind, cause, run, attempt, evidence).
  returned: success
  type: list
  elements: dict
"""
