#!/usr/bin/python
"""Ansible module: judge every node's health from the facts roles/health_check gathered, and record it."""

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

import os  # noqa: E402
import time  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.trainops import health, incidents, records  # noqa: E402


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "facts": {"type": "dict", "required": True},
            "expected": {"type": "dict", "default": {}},
            "health_dir": {"type": "path", "required": True},
            "incidents_file": {"type": "str", "default": ""},
            "level": {"type": "str", "default": "quick", "choices": list(health.LEVELS)},
            "max_age_h": {"type": "float", "default": 0.0},
            "context": {"type": "str", "default": "health.yml"},
            "policy": {"type": "str", "default": "exclude", "choices": list(health.POLICIES)},
            "use_nodes": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=False,
    )
    p = module.params
    now = time.time()
    warnings: list[str] = []  # a damaged record read or written, each named
    try:
        nodes = list(p["facts"])
        max_age_s = p["max_age_h"] * 3600 if p["level"] == "quick" else 0
        carried = health.carried_full(p["health_dir"], nodes, now, max_age_s, warnings)
        last = health.last_checked(p["health_dir"], nodes, warnings)
        verdicts = health.judge(p["facts"], p["expected"], last, carried)
        path = health.record(p["health_dir"], p["level"], verdicts, p["facts"], now, p["context"])
    except OSError as exc:
        module.fail_json(msg=f"{p['health_dir']}: {exc}")
    if p["incidents_file"]:
        name = os.path.relpath(os.path.dirname(path), os.path.dirname(os.path.abspath(p["health_dir"])))
        found = health.incidents(verdicts, name, path, now)
        try:
            warnings += incidents.record(p["incidents_file"], found, now)[1]
        except (OSError, records.RecordError) as exc:  # the verdicts stand; the incidents are said, not lost
            told = "; ".join(incidents.line(i) for i in found)
            warnings.append(f"the sick nodes' incidents were not added to {p['incidents_file']}: {exc} ({told})")
    for warning in dict.fromkeys(warnings):  # a record read twice is named once
        module.warn(warning)
    left_out = {n: why for n, why in health.left_out(verdicts, p["policy"]).items() if n not in p["use_nodes"]}
    reasons = {n: verdicts[n]["reason"] for n in left_out}
    module.exit_json(changed=False, verdicts=verdicts, lines=health.lines(verdicts), left_out=left_out,
                     reasons=reasons, path=path)  # fmt: skip


if __name__ == "__main__":
    main()
