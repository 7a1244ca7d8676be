"""Every role-prefixed variable that any role, playbook or template reads is defined by that role.

A name such as ``container_known_hosts_path`` belongs to the role whose name is its longest prefix
(``container``); reading it anywhere when that role defines it nowhere (defaults, vars, argument specs, set_fact,
register) is a drift: the name it meant is spelled differently where it is defined, and ``| default`` hides it.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted((p.name for p in (ROOT / "roles").iterdir() if p.is_dir()), key=len, reverse=True)
#: a name, not an attribute (``x.launch_env``), a quoted key (``'launch_env'``), a YAML anchor
#: (``&container_args``) or a file name (``a_b.py``)
_TOKEN = re.compile(r"(?<![.\w&*'])[a-z][a-z0-9_]*\b(?!\.(?:py|yml|sh|j2|json)\b)")
#: inventory and -e names that begin like a role (docs/inventory.md): user inputs, not role variables
INPUTS = {"accelerator_card", "accelerator_memory_gib", "accelerator_peak_tflops"}


def _owner(name: str) -> str | None:
    return next((role for role in ROLES if name.startswith(role + "_")), None)


def _task_names(node: object) -> set[str]:
    """Names a task list defines: register, set_fact keys, task vars, loop variables (blocks walked)."""
    names: set[str] = set()
    if isinstance(node, list):
        for item in node:
            names |= _task_names(item)
    elif isinstance(node, dict):
        if isinstance(node.get("register"), str):
            names.add(node["register"])
        for key in ("ansible.builtin.set_fact", "set_fact", "vars"):
            if isinstance(node.get(key), dict):
                names |= set(node[key])
        loop_var = (node.get("loop_control") or {}).get("loop_var")
        if loop_var:
            names.add(loop_var)
        for key in ("block", "rescue", "always"):
            names |= _task_names(node.get(key))
    return names


def _defined(role: str) -> set[str]:
    base = ROOT / "roles" / role
    names: set[str] = set()
    for part in ("defaults", "vars"):
        path = base / part / "main.yml"
        if path.is_file():
            names |= set(yaml.safe_load(path.read_text()) or {})
    specs = base / "meta" / "argument_specs.yml"
    if specs.is_file():
        for entry in (yaml.safe_load(specs.read_text())["argument_specs"] or {}).values():
            names |= set(entry.get("options") or {})
    for path in [*(base / "tasks").glob("*.yml"), *(base / "handlers").glob("*.yml")]:
        names |= _task_names(yaml.safe_load(path.read_text()))
    return names


def test_every_role_variable_read_is_defined_by_its_role():
    defined = {role: _defined(role) for role in ROLES}
    sources = [
        *(ROOT / "roles").rglob("*.yml"),
        *(ROOT / "playbooks").glob("*.yml"),
        *(ROOT / "templates").glob("*.j2"),
    ]
    missing = set()
    for path in sources:
        if path.parts[-2] == "meta":
            continue
        for line in path.read_text().splitlines():
            if line.lstrip().startswith("#"):
                continue
            for token in _TOKEN.findall(line):
                role = _owner(token)
                if (
                    role
                    and token not in ROLES
                    and token not in INPUTS
                    and token not in defined[role]
                    and not line.lstrip().startswith(f"{token}:")
                ):
                    missing.add(f"{path.relative_to(ROOT)}: {token} (role {role} defines no such variable)")
    assert not missing, "\n".join(sorted(missing))
