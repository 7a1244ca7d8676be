#!/usr/bin/python
"""Ansible module: write the provision report (one row per node) and return it as a table."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: provision_report
short_description: Write runs/provision-<timestamp>.json and return the report as a fixed-width table
description:
  - Writes O(rows) to C(<dir>/provision-<timestamp>.json) on the controller, creating O(dir) if needed. The file is
    written to a temporary name and renamed, so that a report is never half-written.
  - Returns the same rows as the table that provision.yml prints.
version_added: "0.1.0"
author: mtt-train-ops
options:
  dir:
    description: Directory of the reports on the controller.
    type: path
    required: true
  timestamp:
    description: Timestamp in the file's name (C(%Y%m%d-%H%M%S)).
    type: str
    required: true
  rows:
    description: One dict per node (node, address, container, status, image, sshd_port, cards, busbw, data ...).
    type: list
    elements: dict
    required: true
notes:
  - Run it on the controller. A record of the run, not a change to the cluster, so it reports C(changed=false).
"""

EXAMPLES = r"""
- name: Write the report
  provision_report:
    dir: runs
    timestamp: "{{ now(utc=true, fmt='%Y%m%d-%H%M%S') }}"
    rows: "{{ provision_report_rows }}"
  register: report
"""

RETURN = r"""
path:
  description: The report file.
  returned: success
  type: str
table:
  description: The report as a fixed-width table, one line per node after the header.
  returned: success
  type: str
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.trainops.provision_report import provision_table, write_provision_report  # noqa: E402


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "dir": {"type": "path", "required": True},
            "timestamp": {"type": "str", "required": True},
            "rows": {"type": "list", "elements": "dict", "required": True},
        },
        supports_check_mode=False,
    )
    p = module.params
    try:
        path = write_provision_report(p["dir"], p["timestamp"], p["rows"])
    except OSError as exc:
        module.fail_json(msg=f"cannot write the provision report in {p['dir']}: {exc}")
    module.exit_json(changed=False, path=path, table=provision_table(p["rows"]))


if __name__ == "__main__":
    main()
