#!/usr/bin/python
"""Documentation of the trainops_health action plugin (plugins/action/trainops_health.py); the plugin does the work."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: trainops_health
short_description: Every node's health verdict (healthy, degraded, sick, unknown), recorded on the controller
description:
  - Judges the quick level's checks (C(trainops.health)) over O(facts), and the full level's burn-in and node
    all-reduce where the facts have them, the nodes compared with each other, and writes
    C(<health_dir>/<UTC time>/health.json) (C(<UTC time>-full/) for the full level) with every check's evidence. A
    quick check carries the newest full check's results of each node (O(max_age_h)).
  - Appends each sick node to the site's incident record (O(incidents_file)), with the record as its evidence.
  - Returns one line per node, and the nodes that O(policy) leaves out (the sick ones with C(exclude), except
    those the user named in O(use_nodes)).
version_added: "0.5.0"
author: mtt-train-ops
options:
  facts:
    description: Each node's facts (roles/health_check's C(health_check_facts)), in the inventory's order.
    type: dict
    required: true
  expected:
    description: C(card_memory_mib) (the card's nominal memory), C(checkpoint_bytes) (the plan's checkpoint),
      C(min_free_gib).
    type: dict
    default: {}
  health_dir:
    description: Where the record is written.
    type: path
    required: true
  incidents_file:
    description: The site's incident record; empty, none is written.
    type: str
    default: ""
  level:
    description: The level checked (C(full) when O(facts) have the burn-in's and the all-reduce's results).
    type: str
    default: quick
    choices: [quick, full]
  max_age_h:
    description:
      - Hours for which a full check's results stand; a quick check carries the newest full check's (no older than
        this) into its verdicts. 0 carries none.
    type: float
    default: 0
  context:
    description: Who asked (health.yml, provision.yml, or train.yml and its run).
    type: str
    default: health.yml
  policy:
    description: C(exclude) leaves sick nodes out; C(warn) and C(off) only name them.
    type: str
    default: exclude
    choices: [off, warn, exclude]
  use_nodes:
    description: Nodes the user chose (C(-e use_nodes)); never left out.
    type: list
    elements: str
    default: []
notes:
  - Run it on the controller.
"""

RETURN = r"""
verdicts:
  description: Each node's verdict, its checks, reason and action.
  returned: success
  type: dict
lines:
  description: One line per node.
  returned: success
  type: list
  elements: str
left_out:
  description: The nodes O(policy) leaves out, each with why.
  returned: success
  type: dict
reasons:
  description: The same nodes, each with its verdict's reason alone (what a restart's decision names).
  returned: success
  type: dict
path:
  description: The record written.
  returned: success
  type: str
"""
