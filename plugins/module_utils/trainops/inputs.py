"""The first check of every playbook: every input it reads, judged on the controller before any node.

:func:`check` takes what the user gave (the ``-e`` options, the inventory's groups and hosts, the model preset)
and returns every problem at once, each naming the option as the user wrote it, its value and the fix, and the
warnings (an option this playbook ignores, an unknown one with ``allow_unknown``). It writes nothing. The rules
of single values are :mod:`.options`'; the rules between values are those of their own modules (the watcher's,
the launcher's, data.yml's, the cluster's), run here on the converted values.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import options as schema
from .backend import PROFILE_KEYS, load_profile, names
from .cluster import cluster_from_hosts
from .data_request import problems as data_problems
from .errors import PlanError
from .invocation import example_text, no_inventory_text
from .model import model_from_dict
from .node_choice import choose, chosen_out
from .node_choice import problems as spare_problems
from .slurm import settings as slurm_settings
from .slurm import unhonoured as slurm_unhonoured
from .watch import NAMES as WATCH_NAMES
from .watch import watch_options
from .written import Setting, Written, read_extra, read_inventory

#: The files a plan directory holds (roles/render): plan.yml removes an earlier plan's before writing its own.
PLAN_FILES = (
    "plan.json",
    "recommendations.json",
    "hostfile",
    "fanout.sh",
    "stop.sh",
    "probe.sh",
    "diagnose.sh",
    "on-node.sh",
)


def is_plan_file(name: str) -> bool:
    return name in PLAN_FILES or (name.startswith("launch-") and name.endswith(".sh"))


def rendered_files(plan: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The scripts roles/render writes from ``templates/`` for ``plan``, in order: each with its file name, its
    template (without ``.j2``), its mode, its node (launch scripts, ``{}`` otherwise) and a label."""
    files = [
        {"name": "hostfile", "template": "hostfile", "mode": "0644", "node": {}, "label": "hostfile (master first)"}
    ]
    files += [
        {"name": f"launch-{node['name']}.sh", "template": "launch.sh", "mode": "0755", "node": node,
         "label": f"launch-{node['name']}.sh (node rank {node['node_rank']})"}
        for node in plan["nodes"]
    ]  # fmt: skip
    files += [
        {"name": name, "template": name, "mode": "0755", "node": {}, "label": name}
        for name in ("fanout.sh", "stop.sh", "probe.sh", "diagnose.sh", "on-node.sh")
    ]
    return files


@dataclass
class Inputs:
    """What one playbook run was given."""

    playbook: str
    #: option name -> value, as the play sees it (``-e`` over the inventory's all.vars).
    values: Mapping[str, Any]
    #: The names given with ``-e``.
    extra_names: Sequence[str] = ()
    #: The ``-e`` arguments as typed (``name=value``, ``{...}``, ``@file``): read again as written.
    extra_arguments: Sequence[str] = ()
    #: group name -> host names.
    groups: Mapping[str, Sequence[str]] = field(default_factory=dict)
    #: host name -> its inventory variables (those of the schema's host and cluster options).
    hostvars: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: The inventory sources (``-i``) and whether each exists.
    inventory_sources: Mapping[str, bool] = field(default_factory=dict)
    #: No inventory was given (no -i: only ansible.cfg's empty one, :data:`.invocation.NO_INVENTORY`).
    no_inventory: bool = False
    #: The sources include the example cluster (inventory/example).
    example_inventory: bool = False
    #: The backends directory (backends/<accelerator>.yml).
    backends_dir: str = ""
    #: Names that are roles' parameters (roles/*/meta/argument_specs.yml): only :data:`.options.SITE_SETTINGS`
    #: of them pass (unchecked here); the others are the roles' own, refused as unknown.
    role_parameters: Sequence[str] = ()
    #: The model preset's path and its mapping (or why it could not be read), for plan.yml and train.yml.
    model_path: str | None = None
    model: Mapping[str, Any] | None = None
    model_error: str | None = None
    models_available: Sequence[str] = ()


@dataclass
class Verdict:
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: Every option this playbook reads, converted (its default where not given).
    options: dict[str, Any] = field(default_factory=dict)


def check(given: Inputs) -> Verdict:
    """Every problem of ``given``, every warning, and the converted options (see the module's docstring)."""
    out = Verdict()
    _inventory_exists(given, out)
    extra = read_extra(given.extra_arguments)
    _unknown_options(given, extra, out)
    inventory = read_inventory([source for source, exists in given.inventory_sources.items() if exists])
    # an option whose value YAML rewrote, or that is set where it is not read, has that problem, not its value's
    told = _as_written(given, inventory, extra, out) | extra.split
    accelerators = _accelerators(given.backends_dir)
    for opt in schema.read_by(given.playbook):
        if opt.where == "host":
            continue
        present = opt.name in given.values
        source = "-e" if opt.name in given.extra_names or not present else "inventory"
        try:
            value = (
                schema.convert(opt, given.values[opt.name], source, accelerators)
                if present
                else (schema.convert(opt, opt.default, source, accelerators) if opt.default is not None else None)
            )
        except schema.OptionError as exc:
            if opt.name not in told:
                out.problems.append(str(exc))
            continue
        out.options[opt.name] = value
    out.problems += _port_problems(out.options, given.values.get("container_network_mode", "host"))
    for name in schema.REQUIRED.get(given.playbook, ()):
        if name not in given.values:
            out.problems.append(f"-e {name}=... is required: {schema.OPTIONS[name].doc}")
    nodes = given.groups.get("nodes") or []
    if nodes:
        _hosts(given, nodes, accelerators, out, told)
    # the options that need or exclude others (the schema's rules), all at once, on the values that converted
    given_now = {name: out.options[name] for name in given.extra_names if name in out.options}
    out.problems += schema.rule_problems(given_now, out.options)
    if nodes:
        _spares(given, nodes, out)
    if given.playbook == "train" and nodes:
        _chosen_nodes(given, nodes, out)
    if nodes:
        out.problems += _supervisor_hosts_problems(nodes, given.groups.get("supervisors") or [])
    if given.playbook in ("train", "status") and nodes:
        _supervisor_host(nodes, given.groups.get("supervisors") or [], out)
    if out.problems:
        # the rules between the nodes too (a shared address, two masters), so that one run names every problem of
        # the inventory; each node's own field was named above
        between = _cluster_problems(given, nodes, out.options)
        out.problems += [p for p in between if "share the address" in p or "sets master: true" in p]
        return out
    _between(given, nodes, out)
    return out


#: The inventory groups the playbooks read (Ansible's own: all, ungrouped).
GROUPS = ("nodes", "supervisors", "slurm_login", "monitoring")


def _stray_hosts(given: Inputs) -> list[str]:
    """Hosts in no group a playbook reads (``workers:`` beside ``nodes:``): no playbook contacts or plans on them,
    which the user is told."""
    read = {h for g in GROUPS for h in given.groups.get(g) or ()}
    stray = sorted({h for h in given.groups.get("all") or () if h not in read and h != "localhost"})
    if not stray:
        return []
    where = sorted({g for g, hosts in given.groups.items() if g not in ("all", *GROUPS) and set(hosts) & set(stray)})
    return [
        f"inventory: {', '.join(stray)} (group {', '.join(where) or 'ungrouped'}) is in no group the playbooks read "
        f"({', '.join(GROUPS)}): no playbook plans on or contacts it; list a training server under all.children.nodes"
    ]


def _inventory_exists(given: Inputs, out: Verdict) -> None:
    if given.no_inventory:
        out.problems.append(no_inventory_text(given.playbook))
        return
    if given.example_inventory:
        out.warnings.append(example_text(given.playbook))
    out.warnings += _stray_hosts(given)
    missing = [source for source, exists in given.inventory_sources.items() if not exists]
    if missing:
        out.problems.append(
            f"-i {', '.join(missing)}: no such inventory file or directory; give -i inventory/<site> "
            "(start from inventory/example/hosts.yml; docs/inventory.md)"
        )
    elif not given.groups.get("nodes"):
        sources = ", ".join(given.inventory_sources) or "the default inventory"
        out.problems.append(
            f"the inventory ({sources}) has no host in the group 'nodes': the inventory must list every training "
            "server under all.children.nodes.hosts, each with ansible_host and slots (docs/inventory.md, "
            "inventory/example/hosts.yml)"
        )


def _port_problems(options: Mapping[str, Any], network_mode: Any) -> list[str]:
    """Ports that meet on a node: the containers share the host's network by default, so their sshd cannot take
    the host's port 22, and the rendezvous port (and the next one, the CPU backend's gloo check) cannot be it."""
    ssh, master = options.get("container_ssh_port"), options.get("master_port")
    problems = []
    if ssh == 22 and network_mode == "host":
        problems.append(
            "container_ssh_port=22 is the host's own sshd: the containers share the host's network "
            "(container_network_mode: host), so theirs needs another port; leave it out (2222)"
        )
    if ssh is not None and master is not None and ssh in (master, master + 1):
        problems.append(
            f"master_port={master} meets container_ssh_port={ssh} (the rendezvous takes master_port and the next "
            "port): give master_port another free port, as 14388"
        )
    return problems


def _lenient(given: Inputs) -> bool:
    """-e allow_unknown=true: an unknown name is a warning."""
    try:
        return bool(schema.convert("allow_unknown", given.values.get("allow_unknown", False)))
    except schema.OptionError:
        return False  # reported with the other options


def _readable(playbook: str) -> list[str]:
    """The names a "did you mean" may suggest to ``playbook``: the options it reads, and the site's settings of its
    roles (data.yml's builder's only to data.yml)."""
    return [name for name, opt in schema.OPTIONS.items() if playbook in opt.playbooks] + [
        name for name in schema.SITE_SETTINGS if playbook == "data" or not name.startswith("data_build_")
    ]


def _unknown(name: str, given: Inputs) -> str:
    """The sentence for a name no playbook reads, with the nearest one this playbook reads."""
    near = schema.nearest(name, _readable(given.playbook))
    own = (
        "; it is a role's own parameter, which the playbooks set from the options"
        if name in given.role_parameters
        else (
            f"; it is a key of the backend profile (backends/<accelerator>.yml: {name}), which describes the image: "
            "edit the profile, or copy it to a profile of your own"
            if name in PROFILE_KEYS
            else ""
        )
    )
    return (
        f"{name}: no such option{own}"
        + (f"; did you mean {near}?" if near and not own else "")
        + " (docs/options.md lists every option; -e allow_unknown=true passes it on)"
    )


#: Options that would seem to narrow what a playbook acts on, but that it does not read: ignoring one would act on
#: more than asked (stop.yml with -e exp=... stops every run), so each is refused, saying what the playbook does.
_STOPS_ALL = "it stops every launch of this bundle on every node of the inventory"
_CHECKS_ALL = "it checks every node of the inventory"
SELECTS = {
    "stop": {name: _STOPS_ALL for name in ("exp", "run_id", "run", "use_nodes", "exclude_nodes")},
    "health": {name: _CHECKS_ALL for name in ("use_nodes", "exclude_nodes")},
    "provision": {name: "it provisions every node of the inventory" for name in ("use_nodes", "exclude_nodes")},
}


#: Prefixes of the names other tools put in an inventory, never the bundle's options: Ansible's own connection
#: variables, and Molecule's (its generated inventory's all.vars: molecule_file, molecule_yml, ...).
OTHER_TOOLS = ("ansible_", "molecule_")


def _unknown_options(given: Inputs, extra: Written, out: Verdict) -> None:
    out.problems += extra.problems  # an -e that a space split
    lenient = _lenient(given)
    for name in given.extra_names:
        if name.startswith(OTHER_TOOLS) or name in schema.SITE_SETTINGS:
            continue
        opt = schema.OPTIONS.get(name)
        if name == "_raw_params":  # Ansible's name for a word of an -e that is not name=value
            if not extra.problems:
                out.problems.append("-e: a word that is not name=value: a space split an -e; quote its value or "
                                    "drop the space")  # fmt: skip
        elif opt is None:
            (out.warnings if lenient else out.problems).append(f"-e {_unknown(name, given)}")
        elif given.playbook not in opt.playbooks and name in SELECTS.get(given.playbook, ()):
            out.problems.append(
                f"-e {name}: {given.playbook}.yml has no such selection: {SELECTS[given.playbook][name]}; drop -e "
                f"{name}, or give --limit 'NODE,localhost' for the nodes to act on"
            )
        elif given.playbook not in opt.playbooks:
            readers = ", ".join(f"{p}.yml" for p in opt.playbooks)
            out.warnings.append(f"-e {name} is not read by {given.playbook}.yml (it is read by {readers}); ignored")


def _as_written(given: Inputs, inventory: Written, extra: Written, out: Verdict) -> set[str]:
    """The inventory and the -e arguments as written (:mod:`.written`): a host listed twice; in the inventory's
    all.vars, the nodes group's or a node's vars, a name no playbook reads; anywhere in the inventory, a run option
    (read from -e or all.vars only) set on a host or in a group's vars; an option whose unquoted value YAML 1.1
    rewrote (``health: off``, ``slots: 010``). Returns the names of the options named here."""
    out.problems += inventory.problems
    lenient, nodes, told = _lenient(given), set(given.groups.get("nodes") or ()), set()
    last = {setting.name: setting for setting in extra.settings}  # the -e that counts
    for setting in [*inventory.settings, *last.values()]:
        opt, name, where = schema.OPTIONS.get(setting.name), setting.name, _place(setting)
        if setting.scope != "-e" and not name.startswith(OTHER_TOOLS) and name not in schema.SITE_SETTINGS:
            ours = setting.scope in ("all", "group nodes") or setting.scope.removeprefix("host ") in nodes
            if opt is None and ours:
                (out.warnings if lenient else out.problems).append(f"{where}: {_unknown(name, given)}")
                continue
            if opt is not None and opt.where == "-e" and setting.scope != "all":
                out.problems.append(
                    f"{where}: {name}: not read here: a run option is read from -e or the inventory's all.vars "
                    f"only (on a host or in a group's vars it is ignored); move it under all.vars, or give -e {name}"
                )
                told.add(name)
                continue
        problem = opt and setting.rewritten and schema.as_written(opt, setting.text, setting.read, setting.reader)
        if problem:
            out.problems.append(f"{where}: {problem}")
            told.add(name)
    return told


def _place(setting: Setting) -> str:
    if setting.scope == "-e":
        return setting.place
    scope = "all.vars" if setting.scope == "all" else setting.scope.replace("group ", "the vars of group ")
    return f"inventory {setting.place} ({scope})"


def _spares(given: Inputs, nodes: Sequence[str], out: Verdict) -> None:
    """A master that is a spare (every playbook); an inventory of spares only, where a run is planned
    (trainops.node_choice.problems)."""
    plans = given.playbook in ("plan", "train")
    use = (out.options.get("use_nodes") or []) if given.playbook == "train" else []
    out.problems += spare_problems(_choice_hosts(given, nodes), plans, use)


def _chosen_nodes(given: Inputs, nodes: Sequence[str], out: Verdict) -> None:
    """-e exclude_nodes and -e use_nodes name inventory nodes and leave one to plan on (a spare in the place of
    one they leave out: trainops.node_choice.choose, as train.yml chooses), and at least min_nodes to an elastic
    run."""
    opts = out.options
    try:
        left_out = chosen_out(nodes, opts.get("exclude_nodes") or [], opts.get("use_nodes") or [])
    except ValueError as exc:
        out.problems.append(f"-e exclude_nodes / -e use_nodes: {exc}")
        return
    try:
        start = choose(_choice_hosts(given, nodes), left_out, opts.get("use_nodes") or [])["nodes"]
    except ValueError as exc:
        if str(exc) not in out.problems:  # an inventory of spares only is named once, by _spares
            out.problems.append(f"-e exclude_nodes / -e use_nodes: {exc}; name fewer nodes")
        return
    minimum = opts.get("min_nodes")
    if "min_nodes" not in given.values or not opts.get("elastic") or minimum is None:
        return
    if minimum > len(start):
        chosen = " after -e exclude_nodes / use_nodes" if left_out else ""
        out.problems.append(
            f"-e min_nodes={minimum} is more than the {len(start)} node(s) the run starts on{chosen} "
            f"({', '.join(start) or 'none'}): an elastic re-plan keeps at least min_nodes of them; lower min_nodes"
        )


def _supervisor_hosts_problems(nodes: Sequence[str], supervisors: Sequence[str]) -> list[str]:
    """A host of the supervisors group (a login or management node: a training container without cards, docs/
    inventory.md) is no training node: one listed in both groups would be planned on and checked as a node."""
    both = [host for host in supervisors if host in nodes]
    if not both:
        return []
    return [
        f"inventory: {', '.join(both)} is in both the nodes and the supervisors group: a supervisors host gets no "
        "rank and no card check; keep it in one group (nodes: it may still run a supervisor with -e supervisor_host)"
    ]


def _supervisor_host(nodes: Sequence[str], supervisors: Sequence[str], out: Verdict) -> None:
    """-e supervisor_host names a node of the inventory, or a host of its supervisors group (its training
    container runs the supervisor)."""
    host = out.options.get("supervisor_host")
    hosts = [*nodes, *supervisors]
    if host and host not in hosts:
        near = schema.nearest(host, hosts, {})
        hint = f"; did you mean {near}?" if near else ""
        groups = f"nodes ({', '.join(nodes)})" + (f" or supervisors ({', '.join(supervisors)})" if supervisors else "")
        out.problems.append(
            f"-e supervisor_host={host}: not a host of the inventory's {groups} group{hint}: the supervisor runs in "
            "a provisioned training container; name one of them, or drop it (the master's)"
        )


def _choice_hosts(given: Inputs, nodes: Sequence[str]) -> list[dict[str, Any]]:
    """The nodes as trainops.node_choice reads them (a bad field is named by the host's own check)."""
    hosts = []
    for name in nodes:
        hv = given.hostvars.get(name, {})
        master, spare = _flag("master", hv.get("master", False)), _flag("spare", hv.get("spare", False))
        hosts.append({"name": name, "master": master, "spare": spare, "slots": _slots(hv.get("slots", 8))})
    return hosts


def _flag(name: str, value: Any) -> bool:
    """A host's boolean field (a bad one is named by the host's own check)."""
    try:
        return schema.convert(name, value) is True
    except schema.OptionError:
        return False


def _slots(value: Any) -> int | None:
    try:
        return schema.convert("slots", value)
    except schema.OptionError:
        return None


def _accelerators(backends_dir: str) -> list[str]:
    return names(backends_dir) if backends_dir and os.path.isdir(backends_dir) else []


def _profiles(backends_dir: str) -> dict[str, dict[str, Any]]:
    """The profiles that load (a broken one is named by the accelerator's own check below)."""
    profiles = {}
    for name in _accelerators(backends_dir):
        try:
            profiles[name] = load_profile(backends_dir, name)
        except PlanError:
            profiles[name] = {"name": name}
    return profiles


def _hosts(given: Inputs, nodes: Sequence[str], accelerators: Sequence[str], out: Verdict, told: set[str]) -> None:
    """Each host's own fields, and the cluster fields that must be the same on every node and on the controller."""
    readers = [o for o in schema.OPTIONS.values() if o.where in ("host", "cluster")]  # the whole inventory
    for host in nodes:
        hv = given.hostvars.get(host, {})
        for opt in readers:
            if opt.name not in hv or (opt.where == "cluster" and opt.name in given.extra_names) or opt.name in told:
                continue
            if opt.name in given.values and hv[opt.name] == given.values[opt.name]:
                continue  # the all.vars value every host inherits: checked (and named) once, above
            try:
                schema.convert(opt, hv[opt.name], f"inventory {host}", accelerators)
            except schema.OptionError as exc:
                out.problems.append(str(exc))
    for opt in readers:
        if opt.where != "cluster" or opt.name in given.extra_names:
            continue
        seen = {host: given.hostvars.get(host, {}).get(opt.name, opt.default) for host in nodes}
        distinct = {repr(v) for v in seen.values()}
        if len(distinct) > 1:
            shown = ", ".join(f"{host}={value!r}" for host, value in seen.items())
            out.problems.append(
                f"inventory: {opt.name} differs between nodes ({shown}); one run uses one value: set it once under "
                "all.vars (or with -e)"
            )
        elif opt.name not in _FROM_THE_NODES and distinct != {repr(given.values.get(opt.name, opt.default))}:
            value = next(iter(seen.values()))
            out.problems.append(
                f"inventory: {opt.name}={value!r} is set for the nodes (in a group's or the hosts' vars), but the "
                f"controller, which plans the run, reads all.vars ({given.values.get(opt.name, opt.default)!r}): "
                "set it once under all.vars (or with -e)"
            )


#: The cluster fields the controller reads from the first node when all.vars has none (trainops_defaults).
_FROM_THE_NODES = ("accelerator", "accelerator_card", "backend_env")


def _cluster_problems(given: Inputs, nodes: Sequence[str], opts: Mapping[str, Any]) -> list[str]:
    """What :func:`.cluster.cluster_from_hosts` finds in the inventory's nodes (each as ``inventory: ...``)."""
    if not nodes:
        return []
    hosts = [{"name": n, **{k: v for k, v in given.hostvars.get(n, {}).items()}} for n in nodes]
    try:
        cluster_from_hosts(
            hosts,
            _profiles(given.backends_dir),
            opts.get("accelerator_memory_gib"),
            opts.get("accelerator_peak_tflops"),
        )
    except PlanError as exc:
        return [f"inventory: {p}" for p in exc.problems]
    return []


def _between(given: Inputs, nodes: Sequence[str], out: Verdict) -> None:
    """The rules between values, each from its own module, on values that passed :func:`check`'s own."""
    book, opts = given.playbook, out.options
    if nodes:
        out.problems += _cluster_problems(given, nodes, opts)
        first = given.hostvars.get(nodes[0], {})
        accelerator = opts.get("accelerator") or first.get("accelerator") or "musa"
        if book in ("provision", "plan", "train") and given.backends_dir:
            try:
                load_profile(given.backends_dir, str(accelerator), opts.get("backend_env") or first.get("backend_env"))
            except PlanError as exc:
                out.problems += exc.problems
    if book in ("train", "status"):
        watched = {o: opts[o] for o in WATCH_NAMES if o in opts}
        try:
            watch_options(watched)
        except PlanError as exc:
            out.problems += exc.problems
    if book in ("train", "stop", "status"):
        raw = {name: given.values.get(name) for name in _SLURM_OPTIONS if name in given.values}
        raw["launcher"] = opts.get("launcher", "ssh")
        if book == "train":
            hosts = _choice_hosts(given, nodes)
            raw["spares"] = [h["name"] for h in hosts if h["spare"]]
            raw["slurm_names"] = {n: given.hostvars.get(n, {}).get("slurm_node_name") or n for n in nodes}
        try:
            slurm_settings(raw, list(nodes), list(given.groups.get("slurm_login") or []))
        except PlanError as exc:
            out.problems += exc.problems
        if book == "train" and raw["launcher"] == "slurm":
            out.problems += slurm_unhonoured({n: opts[n] for n in given.extra_names if n in opts})
    if book == "data":
        out.problems += data_problems(opts)
    if book in ("plan", "train"):
        _model(given, out)
    for name in ("plan_dir", "runs_dir", "health_dir", "run"):
        if opts.get(name) is not None and book in schema.OPTIONS[name].playbooks:
            _controller_dir(name, opts[name], out, plan_only=name == "plan_dir")


_SLURM_OPTIONS = (
    "slurm_nodes", "slurm_partition", "slurm_time", "slurm_queue_timeout", "slurm_gpus_per_node", "slurm_output_dir",
    "slurm_go_timeout",
)  # fmt: skip


def _model(given: Inputs, out: Verdict) -> None:
    name = out.options.get("model")
    if given.model_error or given.model is None:
        available = ", ".join(given.models_available) or "none"
        out.problems.append(
            f"-e model={name!r}: {given.model_error or 'no such preset'} ({given.model_path}); available presets: "
            f"{available}; use -e model=NAME, or an absolute path to a preset file (docs/models.md)"
        )
        return
    if not isinstance(given.model, Mapping):
        out.problems.append(f"-e model={name!r}: {given.model_path} is not a mapping of preset keys (docs/models.md)")
        return
    try:
        model_from_dict(given.model)
    except PlanError as exc:
        out.problems += [f"-e model={name!r} ({given.model_path}): {p}" for p in exc.problems]


def _controller_dir(name: str, path: str, out: Verdict, plan_only: bool) -> None:
    full = os.path.abspath(os.path.expanduser(path))
    where = f"-e {name}={path!r} (on the controller: {full})"
    if name == "run":
        if not os.path.isdir(full):
            runs = out.options.get("runs_dir")
            hint = f" (a relative -e run is taken from the current directory, not from -e runs_dir={runs})" * bool(runs)
            out.problems.append(
                f"{where} does not exist{hint}; give the directory train.yml printed (runs/<exp>/<run_id>)"
            )
        elif not os.path.isfile(os.path.join(full, "plan", "plan.json")):
            out.problems.append(f"{where} has no plan/plan.json: it is not a run directory of train.yml")
        return
    if os.path.exists(full) and not os.path.isdir(full):
        out.problems.append(f"{where} is not a directory; give a directory")
    elif plan_only and os.path.isdir(full):
        others = sorted(f for f in os.listdir(full) if not is_plan_file(f))
        if others:
            shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
            out.problems.append(
                f"{where} holds files that are not a plan's ({shown}); plan.yml replaces an earlier plan but "
                "writes only into an empty directory or one that holds a plan: give another directory"
            )
