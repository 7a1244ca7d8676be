"""Action plugin: unpack a node's pack of logs (a .tgz fetched from it) into the run's directory on the controller.

roles/collect fetches every node's pack and unpacks it here, on the controller, in the task's worker:
``ansible.builtin.unarchive`` was a module process of its own on the controller for each node (about 1 s on two
cores). The pack is the node's: Python's ``data`` extraction filter refuses a member that would land outside
``dest`` (an absolute path, ``..``, a link out) or is not a plain file, directory or link. The module file
(plugins/modules/trainops_unpack.py) holds the documentation.
"""

from __future__ import annotations

import os
import tarfile
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

ARGUMENT_SPEC = {
    "src": {"type": "path", "required": True},
    "dest": {"type": "path", "required": True},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        try:
            os.makedirs(args["dest"], exist_ok=True)
            with tarfile.open(args["src"], "r:*") as pack:
                names = pack.getnames()
                pack.extractall(args["dest"], filter="data")
        except (OSError, tarfile.TarError) as exc:
            raise AnsibleActionFail(f"cannot unpack {args['src']} into {args['dest']}: {exc}") from exc
        result.update(changed=True, files=len(names))
        return result
