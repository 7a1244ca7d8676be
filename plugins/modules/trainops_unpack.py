#!/usr/bin/python
"""Documentation of the trainops_unpack action plugin (plugins/action/trainops_unpack.py); the plugin does the work."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: trainops_unpack
short_description: Unpack a fetched pack of a node's logs into a directory on the controller
description:
  - Extracts the tar archive O(src) (gzip, bzip2 or xz, or none) into O(dest), made when absent, in the controller's
    process. Files already there are replaced by the pack's.
  - A member that would land outside O(dest) (an absolute path, C(..), a link pointing out) or that is not a plain
    file, directory or link is refused (Python's C(data) extraction filter); nothing is changed for such a pack
    beyond the members before it.
version_added: "0.9.0"
author: mtt-train-ops
options:
  src:
    description: The archive, on the controller.
    type: path
    required: true
  dest:
    description: The directory to unpack into, on the controller.
    type: path
    required: true
notes:
  - An action plugin: it runs on the controller whatever the task's host.
"""

EXAMPLES = r"""
- name: Unpack the node's logs on the controller
  trainops_unpack:
    src: "{{ collect_dest }}/.collect/{{ inventory_hostname }}.tgz"
    dest: "{{ collect_dest }}"
"""

RETURN = r"""
files:
  description: How many members the pack held.
  returned: success
  type: int
"""
