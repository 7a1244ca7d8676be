#!/usr/bin/python
"""Documentation of the trainops_show action plugin (plugins/action/trainops_show.py); the plugin does the work."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: trainops_show
short_description: Print a message for the person at the terminal
description:
  - Prints O(msg) once, as it is (a list as one line per item), and changes nothing.
  - The bundle's C(ansible.cfg) hides the lines of tasks that end C(ok) (C(display_ok_hosts = False)); what the
    bundle means a person to read (the plan, the summary, a warning) is printed by this action instead of
    C(ansible.builtin.debug), whose result that setting hides.
version_added: "0.5.0"
author: mtt-train-ops
options:
  msg:
    description: The text, or a list of lines.
    type: raw
    required: true
notes:
  - An action plugin: it runs on the controller. With C(run_once) it prints once for the play.
"""

EXAMPLES = r"""
- name: Show the plan
  trainops_show:
    msg: "{{ layout_plan.summary }}"
  run_once: true
"""

RETURN = r"""
msg:
  description: The text printed.
  returned: always
  type: str
"""
