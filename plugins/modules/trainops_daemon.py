#!/usr/bin/python
"""Ansible module: keep one of the bundle's long-running programs running on a host (trainops.daemon)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: trainops_daemon
short_description: Keep a long-running program running, detached, reloaded when its configuration changes
description:
  - Starts O(argv) in its own session with its output to C(<dir>/<name>.log), unless it already runs with that
    command line. A running one whose O(config) files changed is sent SIGHUP to read them again; one started with
    another command line is stopped and started anew.
  - Waits until the program answers O(ready_url) with HTTP 200, and fails with the end of its log when it ends
    first or does not answer within O(timeout) seconds.
version_added: "0.1.0"
author: mtt-train-ops
options:
  name:
    description: The program's name (its state and log files are named after it).
    type: str
    required: true
  argv:
    description: Its command line.
    type: list
    elements: str
    required: true
  dir:
    description: Directory of its state file and log (and its working directory).
    type: path
    required: true
  config:
    description: Its configuration files, whose contents decide a reload.
    type: list
    elements: path
    default: []
  ready_url:
    description: A local URL that answers 200 once the program serves.
    type: str
    required: true
  timeout:
    description: Seconds to wait for O(ready_url).
    type: float
    default: 60
"""

EXAMPLES = r"""
- name: Keep Prometheus running
  trainops_daemon:
    name: prometheus
    argv: [prometheus, --config.file=/var/lib/mtt-train-ops/monitoring/prometheus.yml]
    dir: /var/lib/mtt-train-ops/monitoring
    config: [/var/lib/mtt-train-ops/monitoring/prometheus.yml]
    ready_url: http://127.0.0.1:9090/-/ready
"""

RETURN = r"""
action:
  description: C(running) (nothing changed), C(reloaded) (SIGHUP after a configuration change) or C(started).
  returned: success
  type: str
pid:
  description: Its process id.
  returned: success
  type: int
log:
  description: Its log file.
  returned: success
  type: str
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.trainops.daemon import DaemonError, ensure  # noqa: E402


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "argv": {"type": "list", "elements": "str", "required": True},
            "dir": {"type": "path", "required": True},
            "config": {"type": "list", "elements": "path", "default": []},
            "ready_url": {"type": "str", "required": True},
            "timeout": {"type": "float", "default": 60.0},
        },
        supports_check_mode=False,
    )
    p = module.params
    try:
        result = ensure(p["name"], p["argv"], p["dir"], p["config"], p["ready_url"], p["timeout"])
    except (DaemonError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=result["action"] != "running", **result)


if __name__ == "__main__":
    main()
