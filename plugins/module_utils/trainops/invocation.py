"""How this ``ansible-playbook`` run was invoked, and the commands the bundle prints for the user to run next.

There is no default cluster: ``ansible.cfg`` names :data:`NO_INVENTORY` (an inventory with no host), so a
playbook run without ``-i`` refuses in its first play, on the controller, before any node is contacted
(:func:`no_inventory_text`), and ``inventory/example`` is used only when named (:func:`example_text` says so).

:func:`invocation` records what the next command needs: the inventory sources given (relative to the project
when inside it) and the site options given with ``-e`` (:func:`carried`: those that say where the site's things
are and how runs are launched, as ``work_home`` or ``launcher``). :func:`command` builds a follow-up command line
from it, every word quoted for a POSIX shell, each option only where the next playbook reads it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from . import options as schema

#: The inventory ansible.cfg names: no host, so that forgetting -i contacts nobody.
NO_INVENTORY = os.path.join("inventory", "none.yml")
#: The example cluster (the runbook's two S5000 servers at 10.10.142.x): used only when named with -i.
EXAMPLE = os.path.join("inventory", "example")
#: -e options carried to a follow-up besides the cluster ones (where="cluster"): how runs are launched and where
#: the controller keeps them.
CARRIED = ("launcher", "runs_dir", "health_dir")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def shown_source(source: str, project: str) -> str:
    """An inventory source as a follow-up shows it: relative to ``project`` when inside it, else as given."""
    if "," in source or not os.path.isabs(source):
        return source
    real, root = os.path.realpath(source), os.path.realpath(project)
    if real == root or real.startswith(root + os.sep):
        return os.path.relpath(real, root)
    return source


def _under(source: str, project: str, place: str) -> bool:
    if "," in source:
        return False
    real, target = os.path.realpath(source), os.path.realpath(os.path.join(project, place))
    return real == target or real.startswith(target + os.sep)


def no_inventory(sources: Sequence[str], project: str) -> bool:
    """True when no inventory was given: no source, or only ansible.cfg's :data:`NO_INVENTORY`."""
    return all(_under(str(s), project, NO_INVENTORY) for s in sources)


def uses_example(sources: Sequence[str], project: str) -> bool:
    """True when one of the sources is the example cluster (inventory/example or a file in it)."""
    return any(_under(str(s), project, EXAMPLE) for s in sources)


def no_inventory_text(playbook: str) -> str:
    """The refusal of a run without -i."""
    return (
        f"no inventory given (-i): {_path(playbook)} needs your cluster's inventory, as "
        f"`ansible-playbook -i inventory/<site> {_path(playbook)} ...` (copy inventory/example/hosts.yml to "
        "inventory/<site>/hosts.yml and list your nodes: docs/inventory.md). There is no default cluster, so that "
        "a forgotten -i contacts nobody; -i inventory/example names the example cluster (the runbook's two S5000 "
        "servers at 10.10.142.x: plan.yml can plan on it)"
    )


def example_text(playbook: str) -> str:
    """What a run on the example cluster is told."""
    told = (
        "inventory/example is the example cluster (the runbook's two 8 x S5000 servers at 10.10.142.133-134), not yours"
    )
    if playbook == "plan":
        return f"{told}: this plan is the example's; give -i inventory/<site> for your own (docs/inventory.md)"
    return f"{told}: {playbook}.yml contacts those addresses; give -i inventory/<site> for your own (docs/inventory.md)"


def carried(extra: Mapping[str, Any]) -> dict[str, Any]:
    """The options given with -e that a follow-up command must give again (see :data:`CARRIED`)."""
    return {
        name: value
        for name, value in extra.items()
        if name in schema.OPTIONS and (schema.OPTIONS[name].where == "cluster" or name in CARRIED)
    }


def invocation(sources: Sequence[str], project: str, extra: Mapping[str, Any]) -> dict[str, Any]:
    """What a follow-up command needs of this run: ``inventory`` (the sources as shown, none for ansible.cfg's
    :data:`NO_INVENTORY`) and ``extra`` (:func:`carried`)."""
    shown = [] if no_inventory(sources, project) else [shown_source(str(s), project) for s in sources]
    return {
        "inventory": shown,
        "extra": carried(extra),
        "given": {name: value for name, value in extra.items() if name in schema.OPTIONS},
    }


#: The plan's resolved values that :func:`reproduce` writes out, as the option that sets each (so that a later
#: change of a default, or of the inventory's, does not change the run).
_RESOLVED = (
    ("model", "model"),
    ("tp", "tp"),
    ("pp", "pp"),
    ("cp", "cp"),
    ("vpp", "vpp"),
    ("mbs", "micro_batch_size"),
    ("gbs", "global_batch_size"),
    ("seq_length", "seq_length"),
    ("precision", "precision"),
    ("recompute", "recompute"),
    ("train_iters", "train_iters"),
    ("exp", "exp_name"),
)
#: What a reproduction leaves out of the options given: a run id names one run (another run would be refused), and
#: num_microbatches is what the global batch it sets already says.
_NOT_REPRODUCED = ("run_id", "num_microbatches")


def reproduce(given: Mapping[str, Any] | None, plan: Mapping[str, Any]) -> str:
    """The train.yml command that runs this plan: this run's -i, every option given with -e that train.yml reads
    (the training mapping, the data, the site's), and the plan's resolved layout, model, batch, precision,
    recomputation, iterations and experiment written out."""
    given = dict(given or {})
    options = {
        k: v
        for k, v in (given.get("given") or {}).items()
        if k not in _NOT_REPRODUCED and "train" in schema.OPTIONS[k].playbooks
    }
    options.update({option: plan.get(key) for option, key in _RESOLVED if plan.get(key) is not None})
    if "--train-samples" in (plan.get("megatron_args") or []):
        options.pop("train_iters", None)  # trained by samples (the vendor's recipe): train_iters is what they make
    if options.get("cp") == 1 and "cp" not in (given.get("given") or {}):
        options.pop("cp")
    return command({**given, "extra": {}}, "train", options)


def _path(playbook: str) -> str:
    """``stop`` -> ``stop.yml``, ``status`` -> ``playbooks/status.yml`` (the three at the top are what users type)."""
    name = playbook[: -len(".yml")] if playbook.endswith(".yml") else playbook
    name = name.split("/")[-1]
    return f"{name}.yml" if name in ("provision", "train", "stop") else f"playbooks/{name}.yml"


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def command(given: Mapping[str, Any] | None, playbook: str, options: Mapping[str, Any] | None = None) -> str:
    """The command line that runs ``playbook`` (``status``, ``stop.yml``, ``playbooks/report.yml``) next, with
    ``given``'s inventory and carried options (those the playbook reads) and ``options`` (this command's own,
    over the carried ones), every word quoted for a POSIX shell. A mapping or list value is given as JSON."""
    given = given or {}
    path = _path(playbook)
    name = path.rsplit("/", 1)[-1][: -len(".yml")]
    words = ["ansible-playbook"]
    for source in given.get("inventory") or []:
        words += ["-i", shlex.quote(str(source))]
    words.append(shlex.quote(path))
    values = {
        key: value
        for key, value in (given.get("extra") or {}).items()
        if key not in schema.OPTIONS or name in schema.OPTIONS[key].playbooks
    }
    values.update(options or {})
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, (Mapping, list, tuple)):
            words += ["-e", shlex.quote(json.dumps({key: value}, sort_keys=True))]
        elif _NAME.match(str(key)):
            words += ["-e", f"{key}={shlex.quote(_value(value))}"]  # -e run='/a b': the name stays readable
        else:
            words += ["-e", shlex.quote(f"{key}={_value(value)}")]
    return " ".join(words)
