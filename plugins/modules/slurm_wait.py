#!/usr/bin/python
"""Documentation of the slurm_wait action plugin (plugins/action/slurm_wait.py); the plugin does the work."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: slurm_wait
short_description: Wait for a submitted Slurm job to get its nodes, printing its state and reason
description:
  - Runs C(squeue) on the task's host (a node of the inventory's C(slurm_login) group) every O(poll_interval)
    seconds and prints the job's state and reason when they change, and every O(progress_interval) seconds.
  - When the job runs, expands its node list with C(scontrol show hostnames) (Slurm's order, C(SLURM_NODEID)
    0, 1, ...) and maps each Slurm node to its inventory host.
  - Fails with C(sacct)'s account when the job ends before it runs; cancels it (C(scancel)) and fails when it
    is still queued after O(timeout) seconds.
version_added: "0.3.0"
author: mtt-train-ops
options:
  job_id:
    description: The job's id (sbatch --parsable).
    type: str
    required: true
  inventory:
    description: Slurm node name to inventory host (C(slurm_node_name), default the inventory name).
    type: dict
    default: {}
  timeout:
    description: Seconds to wait for the allocation before the job is cancelled.
    type: float
    default: 3600
  poll_interval:
    description: Seconds between two squeue calls (at least 1).
    type: float
    default: 3
  progress_interval:
    description: Seconds between two lines while the state and reason do not change.
    type: float
    default: 30
"""

EXAMPLES = r"""
- name: Wait for the allocation
  slurm_wait:
    job_id: "{{ submitted.stdout }}"
    inventory: {node1: node1, node2: node2}
  register: slurm_job
"""

RETURN = r"""
job_id:
  description: The job's id.
  type: str
  returned: always
slurm_nodes:
  description: The allocation's nodes, in Slurm's order.
  type: list
  elements: str
  returned: success
hosts:
  description: The inventory hosts of O(slurm_nodes), in the same order.
  type: list
  elements: str
  returned: success
unknown:
  description: Slurm nodes of the allocation that the inventory lacks.
  type: list
  elements: str
  returned: success
waited_s:
  description: Seconds waited for the allocation.
  type: float
  returned: success
history:
  description: Each state and reason the job went through, one line each.
  type: list
  elements: str
  returned: always
"""
