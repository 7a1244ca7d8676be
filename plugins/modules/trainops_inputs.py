#!/usr/bin/python
"""Documentation of the trainops_inputs action plugin (plugins/action/trainops_inputs.py); the plugin does the work."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: trainops_inputs
short_description: Check every input of a playbook on the controller before any node is contacted
description:
  - Reads the C(-e) options as given, the inventory's groups and hosts and, for plan.yml and train.yml, the model
    preset, and judges each against the schema of C(trainops.options) and the rules between them.
  - Fails with every problem at once, each naming the option as the user wrote it, its value and the fix. An
    unknown C(-e) option is refused with the nearest known name (a warning with C(-e allow_unknown=true)); an option
    that this playbook ignores but another reads gets a warning.
  - Refuses a run without C(-i) (ansible.cfg names C(inventory/none.yml), which has no host), saying how to give
    an inventory; warns that C(inventory/example) is the example cluster when it is used.
  - Writes nothing and contacts no host.
version_added: "0.4.0"
author: mtt-train-ops
options:
  playbook:
    description: The playbook being run.
    type: str
    required: true
    choices: [provision, plan, train, stop, status, report, data]
"""

EXAMPLES = r"""
- name: Check every input (before any node)
  trainops_inputs:
    playbook: train
"""

RETURN = r"""
ansible_facts:
  description: C(trainops_inputs), every option the playbook reads, converted (its default where not given);
    C(trainops_invocation), the C(-i) sources and site options given, which a printed follow-up command carries
    (the C(trainops_command) filter).
  returned: success
  type: dict
warnings_found:
  description: The warnings printed.
  returned: always
  type: list
  elements: str
"""
