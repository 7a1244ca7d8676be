#!/usr/bin/python
"""Documentation of the trainops_render action plugin (plugins/action/trainops_render.py); the plugin does the work."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: trainops_render
short_description: Render a plan's launch files from templates and write them into a directory on the controller
description:
  - Renders each of O(files) from C(<templates_dir>/<template>.j2) with the task's variables and C(node) set to the
    item's node (as M(ansible.builtin.template) renders, C(trim_blocks) on), writes O(contents) as they are, each
    file whole and renamed into place, in the controller's own process (no module process per file).
  - Removes the files in O(dest) that match a pattern of O(stale) and are not written now (an earlier plan's).
  - Always writes on the controller, whatever host the task runs for.
version_added: "0.5.0"
author: mtt-train-ops
options:
  dest:
    description: Directory to write to (created when missing).
    type: path
    required: true
  templates_dir:
    description: Directory of the templates.
    type: path
    required: true
  files:
    description: The files to render, each with C(name), C(template) (without C(.j2)), C(mode) (octal text) and
      C(node) (the node a launch script is for, else C({})).
    type: list
    elements: dict
    required: true
  contents:
    description: More files, name to text, written as they are (mode 0644), ending with a newline.
    type: dict
    default: {}
  stale:
    description: Glob patterns of files in O(dest) to remove when this run does not write them.
    type: list
    elements: str
    default: []
"""

RETURN = r"""
written:
  description: Every file name written or already up to date.
  type: list
  returned: success
changed_files:
  description: The files whose content or mode changed.
  type: list
  returned: success
removed:
  description: The stale files removed.
  type: list
  returned: success
"""
