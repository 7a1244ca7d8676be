"""Action plugin: render a plan's launch files from the project's templates and write them, on the controller.

The render role writes a hostfile, one launch script per node, the fan-out, stop, probe and diagnosis scripts,
plan.json and recommendations.json: with ``ansible.builtin.template`` and ``copy`` that was one module process per
file on the controller (about 0.8 s each on two cores, 7 s a train.yml). This action renders them with the
task's own templar and variables (as ``ansible.builtin.template`` does: ``trim_blocks``, ``\\n`` newlines) and
writes each file whole, renamed into place, in the controller's process. It also removes the files of an earlier
plan that this one does not write (``stale`` patterns), since a plan directory holds one plan. The module file
(plugins/modules/trainops_render.py) holds the documentation.
"""

from __future__ import annotations

import fnmatch
import os
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.template import trust_as_template

ARGUMENT_SPEC = {
    "dest": {"type": "path", "required": True},
    "templates_dir": {"type": "path", "required": True},
    "files": {"type": "list", "elements": "dict", "required": True},
    "contents": {"type": "dict", "default": {}},
    "stale": {"type": "list", "elements": "str", "default": []},
}
#: As ansible.builtin.template renders by default.
OVERRIDES = {"trim_blocks": True, "lstrip_blocks": False, "newline_sequence": "\n"}


def write_file(path: str, text: str, mode: int) -> bool:
    """Write ``text`` to ``path`` whole (a temporary file renamed into place); False when it was already so."""
    try:
        with open(path, encoding="utf-8") as handle:
            same = handle.read() == text and (os.stat(path).st_mode & 0o7777) == mode
    except OSError:
        same = False
    if same:
        return False
    with open(f"{path}.tmp", "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(f"{path}.tmp", mode)
    os.replace(f"{path}.tmp", path)
    return True


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def _render(self, template: str, task_vars: dict[str, Any], node: Any) -> str:
        templar = self._templar.copy_with_new_env(available_variables=dict(task_vars, node=node))
        text = templar.template(template, escape_backslashes=False, overrides=OVERRIDES)
        return "" if text is None else str(text)

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        dest = args["dest"]
        texts: dict[str, tuple[str, int]] = {}
        templates: dict[str, str] = {}  # each template read once (launch.sh.j2 renders once per node)
        for item in args["files"]:
            source = os.path.join(args["templates_dir"], f"{item['template']}.j2")
            if source not in templates:
                try:
                    with open(source, encoding="utf-8") as handle:
                        templates[source] = trust_as_template(handle.read())
                except OSError as exc:
                    raise AnsibleActionFail(f"cannot read the template {source}: {exc}") from exc
            text = self._render(templates[source], task_vars, item.get("node") or {})
            texts[item["name"]] = (text, int(item["mode"], 8))
        for name, text in args["contents"].items():
            text = str(text)
            texts[name] = (text if text.endswith("\n") else text + "\n", 0o644)
        bad = [name for name in texts if os.path.basename(name) != name or name in ("", ".", "..")]
        if bad:
            raise AnsibleActionFail(f"refusing file names that are not plain names in {dest}: {', '.join(bad)}")
        try:
            os.makedirs(dest, exist_ok=True)
            changed = [name for name, (text, mode) in texts.items() if write_file(os.path.join(dest, name), text, mode)]
            removed = sorted(
                name
                for name in os.listdir(dest)
                if name not in texts and any(fnmatch.fnmatch(name, pattern) for pattern in args["stale"])
            )
            for name in removed:
                os.remove(os.path.join(dest, name))
        except OSError as exc:
            raise AnsibleActionFail(f"cannot write the launch files into {dest}: {exc}") from exc
        result.update(changed=bool(changed or removed), written=sorted(texts), changed_files=changed, removed=removed)
        return result
