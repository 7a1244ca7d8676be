"""Action plugin: the first task of every playbook, on the controller, before any SSH.

It gathers what the user gave (the ``-e`` options as typed, the inventory's groups and hosts, the model preset),
hands it to the core (:func:`trainops.inputs.check`) and fails with every problem at once, each naming the
option, its value and the fix; warnings (an option this playbook ignores) are printed. It writes nothing. The
module file (plugins/modules/trainops_inputs.py) holds the documentation.
"""

from __future__ import annotations

import glob
import os
import sys
from typing import Any

_CORE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _CORE not in sys.path:
    sys.path.insert(0, _CORE)

import yaml  # noqa: E402
from ansible import context  # noqa: E402
from ansible.plugins.action import ActionBase  # noqa: E402
from ansible.utils.display import Display  # noqa: E402
from ansible.utils.vars import load_extra_vars  # noqa: E402
from trainops import inputs, invocation, options  # noqa: E402

display = Display()
PROJECT = os.path.dirname(os.path.dirname(_CORE))


def role_parameters() -> list[str]:
    """Every role's parameters (roles/*/meta/argument_specs.yml): the site's settings among them pass
    (options.SITE_SETTINGS), the others are the roles' own and refused."""
    names: set[str] = set()
    for path in glob.glob(os.path.join(PROJECT, "roles", "*", "meta", "argument_specs.yml")):
        with open(path, encoding="utf-8") as handle:
            specs = (yaml.safe_load(handle) or {}).get("argument_specs") or {}
        for spec in specs.values():
            names.update((spec or {}).get("options") or {})
    return sorted(names)


def load_model(value: Any) -> tuple[str | None, Any, str | None, list[str]]:
    """(path, mapping, why it could not be read, the available presets) of ``-e model``."""
    models_dir = os.path.join(PROJECT, "models")
    available = sorted(os.path.basename(p)[: -len(".yml")] for p in glob.glob(os.path.join(models_dir, "*.yml")))
    try:
        name = options.convert("model", value)
    except options.OptionError:
        return None, None, None, available  # the option's own problem is reported
    path = name if name.startswith("/") else os.path.join(models_dir, f"{name}.yml")
    if not os.path.isfile(path):
        return path, None, "not a regular file" if os.path.exists(path) else "no such preset file", available
    try:
        with open(path, encoding="utf-8") as handle:
            return path, yaml.safe_load(handle), None, available
    except (OSError, yaml.YAMLError) as exc:
        return path, None, f"unreadable: {str(exc).splitlines()[0]}", available


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("playbook",))

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        playbook = str(self._task.args["playbook"])
        extra = load_extra_vars(self._loader) or {}
        groups = {name: list(hosts) for name, hosts in (task_vars.get("groups") or {}).items()}
        values: dict[str, Any] = {}
        problems: list[str] = []
        for opt in options.OPTIONS.values():
            if opt.where == "host":
                continue
            if opt.name in extra:
                values[opt.name] = extra[opt.name]
            elif opt.name in task_vars:
                values[opt.name] = self._read(task_vars[opt.name], f"inventory: {opt.name}", problems)
        hostvars: dict[str, dict[str, Any]] = {}
        wanted = [o.name for o in options.OPTIONS.values() if o.where in ("host", "cluster")]
        for host in groups.get("nodes") or []:
            hv = task_vars["hostvars"][host]
            hostvars[host] = {k: self._read(hv[k], f"inventory {host}: {k}", problems) for k in wanted if k in hv}
        given_sources = [str(s) for s in task_vars.get("ansible_inventory_sources") or []]
        sources = {s: ("," in s or os.path.exists(s)) for s in given_sources}
        given = inputs.Inputs(
            playbook=playbook,
            values=values,
            extra_names=sorted(extra),
            extra_arguments=[str(a) for a in context.CLIARGS.get("extra_vars") or ()],
            groups=groups,
            hostvars=hostvars,
            inventory_sources=sources,
            no_inventory=invocation.no_inventory(given_sources, PROJECT),
            example_inventory=invocation.uses_example(given_sources, PROJECT),
            backends_dir=os.path.join(PROJECT, "backends"),
            role_parameters=role_parameters(),
        )
        if playbook in ("plan", "train"):
            given.model_path, given.model, given.model_error, given.models_available = load_model(
                values.get("model", options.OPTIONS["model"].default)
            )
        verdict = inputs.check(given)
        for warning in verdict.warnings:
            display.warning(f"{playbook}.yml: {warning}")
        problems += verdict.problems
        result["warnings_found"] = verdict.warnings
        if problems:
            result["failed"] = True
            result["msg"] = (
                f"{playbook}.yml: {len(problems)} problem(s) in the inputs; nothing was changed and no node was "
                "contacted:\n" + "\n".join(f"- {p}" for p in problems) + "\nEvery option: docs/options.md."
            )
        else:
            result["changed"] = False
            result["msg"] = f"{playbook}.yml: every input checked"
            # every option this playbook reads, converted, its default where not given: the plays read these
            result["ansible_facts"] = {
                "trainops_inputs": verdict.options,
                # the -i and site options a printed follow-up command carries (trainops_command)
                "trainops_invocation": invocation.invocation(given_sources, PROJECT, extra),
            }
        return result

    def _read(self, value: Any, where: str, problems: list[str]) -> Any:
        """An inventory value, templated; one that cannot be is named."""
        try:
            return self._templar.template(value)
        except Exception as exc:  # noqa: BLE001 (any templating error is the user's to fix)
            problems.append(f"{where} cannot be read: {str(exc).splitlines()[0]}")
            return None
