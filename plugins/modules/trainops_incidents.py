#!/usr/bin/python
"""Ansible module: list the site's incident record, or clear a node's incidents after a repair."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: trainops_incidents
short_description: List the site's incident record, or clear a node's incidents
description:
  - Reads C(<runs_dir>/incidents.jsonl) on the controller (train.yml appends each run's incidents: a hang's
    culprit, a rank that died, a lost node) and lists, per node, its incidents within O(window_days) since it was
    last cleared, and whether the next train.yml leaves it out (O(limit) of them that count).
  - With O(clear), appends a C(cleared) line for that node first: its incidents so far (every line above it,
    whatever time it says) no longer count, and stay in the record. A last line cut short by a crash is set aside
    in C(<path>.torn) first, never extended.
  - A line that cannot be read (not JSON, not UTF-8, cut short, not an object, no node or kind) is named by file
    and line in a warning and skipped; a directory or a link to nothing in the record's place is a warning too.
version_added: "0.1.0"
author: mtt-train-ops
options:
  path:
    description: The incident record.
    type: path
    required: true
  clear:
    description: A node whose incidents so far are cleared; refused, changing nothing, when it is neither in
      O(nodes) nor in the record, or when there is no record at O(path) (a misspelt runs directory).
    type: str
  nodes:
    description: The inventory's nodes.
    type: list
    elements: str
    default: []
  window_days:
    description: The days over which incidents count.
    type: float
    default: 14
  limit:
    description: Incidents that leave a node out of the next run; 0, never.
    type: int
    default: 2
notes:
  - Run it on the controller.
"""

EXAMPLES = r"""
- name: Clear node2 after its card was replaced
  trainops_incidents:
    path: runs/incidents.jsonl
    clear: node2
"""

RETURN = r"""
lines:
  description: The listing, one line per node and one per incident.
  returned: success
  type: list
  elements: str
cleared:
  description: The line appended for O(clear), when given.
  returned: when clear is given
  type: dict
"""

import time  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.trainops import incidents, records  # noqa: E402


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "clear": {"type": "str"},
            "window_days": {"type": "float", "default": 14.0},
            "limit": {"type": "int", "default": 2},
            "nodes": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=False,
    )
    p = module.params
    now = time.time()
    result = {"changed": False}
    try:
        found, warnings = incidents.read(p["path"])
        if p["clear"] and (refusal := incidents.clear_refusal(p["path"], p["clear"], p["nodes"], found)):
            for warning in warnings:  # the record's bad lines, said with the refusal
                module.warn(warning)
            module.fail_json(msg=refusal)
        if p["clear"]:
            result["cleared"], said = incidents.clear(p["path"], p["clear"], now)
            result["changed"] = True
            found, warnings = incidents.read(p["path"])
            warnings = said + warnings
        result["lines"] = incidents.table(found, now, p["window_days"], p["limit"])
    except (OSError, records.RecordError) as exc:
        module.fail_json(msg=f"{p['path']}: {exc}" if isinstance(exc, OSError) else str(exc))
    for warning in warnings:
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
