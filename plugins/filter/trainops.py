"""Jinja filters over the core: inventory, cluster, tool-output parsers, shell rendering."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

_CORE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _CORE not in sys.path:
    sys.path.insert(0, _CORE)

from ansible.errors import AnsibleFilterError  # noqa: E402


def _core(name: str) -> Any:
    """A core module, imported when a filter first needs it: Ansible loads this file in every worker process
    that resolves any filter, so importing the whole core here would cost every task of every play."""
    return importlib.import_module(f"trainops.{name}")


#: Inventory variables the planner reads from each node.
NODE_KEYS = ("ansible_host", "slots", "accelerator", "master", "node_addr", "accelerator_card")


def inventory_nodes(
    hostnames: Sequence[str], hostvars: Mapping[str, Any], in_order: bool = False
) -> list[dict[str, Any]]:
    """The planner's view of each node: its name and the inventory keys it reads. ``in_order``: the order given is
    the rank order, the first node the master (a Slurm allocation's), so a node's ``master: true`` is left out."""
    nodes = []
    for name in hostnames:
        hv = hostvars[name]
        node = {"name": name}
        for key in NODE_KEYS:
            if key in hv and not (in_order and key == "master"):
                node[key] = hv[key]
        nodes.append(node)
    return nodes


def cluster(nodes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The cluster in rank order: ``{"master": name, "master_addr", "nodes": [{name, addr, slots, node_rank}]}``."""
    cluster_module = _core("cluster")
    try:
        built = cluster_module.cluster_from_hosts(nodes)
    except _core("errors").PlanError as exc:
        raise AnsibleFilterError(f"invalid inventory: {exc}") from None
    return {
        "master": built.master.name,
        "master_addr": built.master.addr,
        "world_size": built.world_size,
        "nodes": [{"name": n.name, "addr": n.addr, "slots": n.slots, "node_rank": n.node_rank} for n in built.nodes],
    }


def node_facts(
    hostnames: Sequence[str],
    hostvars: Mapping[str, Any],
    keys: Sequence[str],
    defaults: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Plain facts of each node for the core: ``{"name": host, key: hostvars[host][key] or defaults[key]}``."""
    defaults = defaults or {}
    nodes = []
    for name in hostnames:
        hv = hostvars[name] if name in hostvars else {}
        nodes.append({"name": name, **{key: hv[key] if key in hv else defaults.get(key) for key in keys}})
    return nodes


def sizes_by_node(nodes: Sequence[Mapping[str, Any]], key: str) -> dict[str, Any]:
    """``{node name: node[key]}`` of node_facts' list."""
    return {node["name"]: node.get(key) for node in nodes}


def one_line(value: Any) -> str:
    """``value`` on one line (control characters as escapes): for comments and labels in rendered scripts."""
    return _core("options").one_line(value)


def stale_plan_files(names: Sequence[str], plan: Mapping[str, Any]) -> list[str]:
    return _core("inputs").stale_plan_files(names, plan)


def shell_arg_lines(args: Sequence[str], indent: int = 4) -> str:
    """Quote an argument vector for bash, one ``--flag value...`` group per continued line (trainops.shell)."""
    return _core("shell").shell_arg_lines(args, indent)


def plan_with_resume(plan: Mapping[str, Any], tracker: str | None, moved_to: str | None = None) -> dict[str, Any]:
    """The plan with its resume point, from the text of Megatron's latest_checkpointed_iteration.txt."""
    text = (tracker or "").strip()
    if text and not (text.isascii() and text.isdigit()) and text != "release":
        raise AnsibleFilterError(f"latest_checkpointed_iteration.txt holds {text!r}, not an iteration")
    iteration = int(text) if text and text != "release" else (0 if text == "release" else None)
    return _core("plan").with_resume(plan, iteration, moved_to or None)


def watch_options(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The watcher's options checked and converted (trainops.watch.watch_options); a bad one is refused."""
    try:
        return _core("watch").watch_options(raw)
    except _core("errors").PlanError as exc:
        raise AnsibleFilterError("; ".join(exc.problems)) from None


def controller_path(value: Any, option: str) -> str:
    """A controller path the user gave (``-e plan_dir``, ``-e runs_dir``), absolute against the directory
    ansible-playbook was started in (not the playbook's); an empty one is refused, naming the option."""
    text = "" if value is None else str(value)
    if not text.strip():
        raise AnsibleFilterError(f"-e {option}= is empty: give a directory, or leave {option} out for its default")
    return os.path.abspath(os.path.expanduser(text))


#: The project's backend profiles (backends/<accelerator>.yml).
BACKENDS_DIR = os.path.join(os.path.dirname(os.path.dirname(_CORE)), "backends")


def backend_profile(accelerator: Any, backend_env: Any = None) -> dict[str, Any]:
    """The backend profile of ``accelerator`` with the site's ``backend_env`` over its launch_env
    (trainops.backend); an unknown accelerator or a bad backend_env is refused, naming it."""
    try:
        return _core("backend").load_profile(BACKENDS_DIR, str(accelerator), backend_env)
    except _core("errors").PlanError as exc:
        raise AnsibleFilterError("; ".join(exc.problems)) from None


def _filter_error(name: str, parse: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a core parser so that its own error becomes an Ansible filter error naming the filter."""

    def wrapped(*args: Any) -> Any:
        try:
            return parse(*args)
        except (_core("gmi").GmiParseError, _core("collective").CollectiveParseError) as exc:
            raise AnsibleFilterError(f"{name}: {exc}") from None

    return wrapped


#: Cards (index, name, bus_id, memory_total_mib, memory_used_mib, utilization_pct, processes).
parse_mthreads_gmi = _filter_error("parse_mthreads_gmi", lambda text: _core("gmi").parse_mthreads_gmi(text)["cards"])
#: Cards plus the tool and driver versions.
parse_mthreads_gmi_full = _filter_error("parse_mthreads_gmi", lambda text: _core("gmi").parse_mthreads_gmi(text))
#: Cards from nvidia-smi's CSV queries, in the same shape as parse_mthreads_gmi.
parse_nvidia_smi = _filter_error(
    "parse_nvidia_smi", lambda gpus, apps="": _core("gmi").parse_nvidia_smi_csv(gpus, apps)["cards"]
)
#: rows, avg_busbw_gbps, largest_busbw_gbps, wrong, out_of_bounds of an all_reduce_perf run.
parse_allreduce_perf = _filter_error(
    "parse_allreduce_perf", lambda text: _core("collective").parse_allreduce_perf(text)
)


# Thin wrappers over the core's texts and checks; each is documented where it is defined.
def train_outcome(master: str, fanout: Mapping[str, Any], watch: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return _core("outcome").train_outcome(master, fanout, watch)


def running_text(
    outcome: Mapping[str, Any], plan: Mapping[str, Any], run_dir: str, slurm_job: Mapping[str, Any] | None = None
) -> str:
    return _core("outcome").running_text(plan, outcome, run_dir, slurm_job or None)


def stop_lines(nodes: Sequence[Mapping[str, Any]]) -> list[str]:
    return _core("outcome").stop_lines(nodes)


def silent_nodes_text(nodes: Sequence[Mapping[str, Any]], result_key: str, verb: str, then: str) -> str:
    return _core("outcome").silent_nodes_text(nodes, result_key, verb, then)


def status_text(probes: Sequence[Mapping[str, Any]]) -> str:
    """status.yml's display, from its probe loop's results (each: ``item.item`` the run dir, ``watch``)."""
    runs = [{"run_dir": probe["item"]["item"], "watch": probe["watch"]} for probe in probes]
    return _core("outcome").status_text(runs)


def provision_rows(nodes: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return _core("provision_report").provision_rows(nodes)


def collective_reusable(nodes: Sequence[Mapping[str, Any]], now: float, max_age_s: float) -> bool:
    return _core("collective").records_reusable(nodes, now, max_age_s)


def dataset_size_mismatch(sizes: Mapping[str, Mapping[str, Any]]) -> list[str]:
    return _core("dataset_manifest").size_mismatch(sizes)


def attempt_record(outcome: Mapping[str, Any], attempt: Any, times: Sequence[Any], summary: Any, marks: Any) -> dict:
    """One attempt's record (trainops.recovery.attempt_record): ``times`` its start and end (epoch seconds),
    ``marks`` the checkpoint it resumed from and the one it left, as the tracker's text ('' for none)."""
    started_at, ended_at = (float(t) for t in times)
    resumed_from, left = (_tracker_iteration(m) for m in marks)
    return _core("recovery").attempt_record(int(attempt), started_at, ended_at, outcome, summary, resumed_from, left)


def retry_decision(attempts: Sequence[Mapping[str, Any]], options: Mapping[str, Any], stop: Any, lost: Any, nodes: Any):
    """trainops.recovery.retry_decision with train.yml's options (max_restarts, elastic, min_nodes)."""
    return _core("recovery").retry_decision(
        attempts, int(options["max_restarts"]), bool(stop), lost, bool(options.get("elastic")),
        int(options.get("min_nodes") or 1), int(nodes),
    )  # fmt: skip


def replan_note(new: Mapping[str, Any], old: Mapping[str, Any], lost: Mapping[str, str]) -> str:
    return _core("recovery").replan_note(old, new, lost)


def lost_nodes(plan: Mapping[str, Any], answering: Sequence[str], hostvars: Mapping[str, Any], key: str) -> dict:
    """The plan's nodes that cannot take part in another attempt (trainops.recovery.lost_nodes); ``key``: the
    registered ping of each node."""
    reach = {n["name"]: hostvars[n["name"]].get(key) if n["name"] in hostvars else None for n in plan["nodes"]}
    return _core("recovery").lost_nodes(plan, list(answering), reach)


def _tracker_iteration(text: Any) -> int | None:
    """The iteration of Megatron's latest_checkpointed_iteration.txt text; None for none ('release': 0)."""
    if text is None or isinstance(text, int):
        return text
    value = str(text).strip()
    if not value:
        return None
    if value == "release":
        return 0
    if not (value.isascii() and value.isdigit()):
        raise AnsibleFilterError(f"latest_checkpointed_iteration.txt holds {value!r}, not an iteration")
    return int(value)


def _slurm_raw(raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[str], list[str]]:
    return dict(raw), list(raw.get("inventory_nodes") or []), list(raw.get("login_hosts") or [])


def slurm_settings(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The launcher's options checked and converted (trainops.slurm.settings); a bad one is refused."""
    options, nodes, login = _slurm_raw(raw)
    try:
        return _core("slurm").settings(options, nodes, login)
    except _core("errors").PlanError as exc:
        raise AnsibleFilterError(str(exc)) from None


def slurm_names(hostnames: Sequence[str], hostvars: Mapping[str, Any]) -> dict[str, str]:
    """Inventory host -> its Slurm node name (``slurm_node_name``, default the inventory name)."""
    return {name: str(hostvars[name].get("slurm_node_name") or name) for name in hostnames}


def slurm_batch_options(plan: Mapping[str, Any], slurm: Mapping[str, Any], sinfo_gres: str = "") -> list[str]:
    """sbatch's options for the run (trainops.slurm.batch_options), GPUs asked for where sinfo shows GPU GRES."""
    core = _core("slurm")
    return core.batch_options(plan, slurm, core.has_gpu_gres(sinfo_gres or ""))


def slurm_go_table(plan: Mapping[str, Any], names: Mapping[str, str]) -> str:
    return _core("slurm").go_table(plan, names)


def slurm_outcome(
    outcome: Mapping[str, Any],
    sacct_stdout: str,
    job_id: Any,
    cancelled_here: bool = False,
    sinfo_stdout: str = "",
    slurm_names: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The run's outcome with sacct's account of the job (trainops.slurm.outcome_with_job); ``sinfo_stdout``
    (``--Node --format=%N|%T|%E``) and ``slurm_names`` (the plan's hosts -> Slurm names) name a lost node."""
    core = _core("slurm")
    record = core.parse_accounting(sacct_stdout or "", str(job_id))
    down = core.unresponsive_nodes(sinfo_stdout or "")
    lost = {host: down[name] for host, name in (slurm_names or {}).items() if name in down}
    return core.outcome_with_job(outcome, record, str(job_id), bool(cancelled_here), lost)


def slurm_job_ended(sacct_stdout: str, job_id: Any) -> bool:
    """Whether sacct's output records the job as ended (any state but those of a queued or running job)."""
    core = _core("slurm")
    record = core.parse_accounting(sacct_stdout or "", str(job_id))
    return bool(record) and record["state"] not in core.ACTIVE


def slurm_sacct_argv(job_id: Any) -> list[str]:
    """sacct's command line for one job's own record, in the fields trainops.slurm.parse_accounting reads."""
    return ["sacct", "--jobs", str(job_id), *_core("slurm").SACCT_ARGS]


def slurm_bundle_jobs(squeue_stdout: str) -> list[dict[str, str]]:
    """The bundle's jobs in squeue's output (``--format=trainops.slurm.SQUEUE_FORMAT``)."""
    core = _core("slurm")
    return core.bundle_jobs(core.parse_queue(squeue_stdout or ""))


def slurm_queue_line(job: Mapping[str, str]) -> str:
    """``Slurm job 12 RUNNING on node[1-2] for 3:02, run exp/run``: a bundle job as status and stop show it."""
    line = _core("slurm").queue_line(job)
    run = job.get("comment", "").split(":", 1)[-1]
    return f"Slurm {line} for {job.get('elapsed') or '0:00'}, run {run}"


class FilterModule:
    """mtt-train-ops filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "trainops_inventory_nodes": inventory_nodes,
            "trainops_cluster": cluster,
            "trainops_backend_profile": backend_profile,
            "trainops_node_facts": node_facts,
            "trainops_by_node": sizes_by_node,
            "trainops_train_outcome": train_outcome,
            "trainops_running_text": running_text,
            "trainops_stop_lines": stop_lines,
            "trainops_silent_nodes_text": silent_nodes_text,
            "trainops_status_text": status_text,
            "trainops_provision_rows": provision_rows,
            "trainops_collective_reusable": collective_reusable,
            "trainops_dataset_size_mismatch": dataset_size_mismatch,
            "trainops_attempt_record": attempt_record,
            "trainops_retry_decision": retry_decision,
            "trainops_lost_nodes": lost_nodes,
            "trainops_replan_note": replan_note,
            "trainops_shell_arg_lines": shell_arg_lines,
            "trainops_one_line": one_line,
            "trainops_stale_plan_files": stale_plan_files,
            "trainops_plan_with_resume": plan_with_resume,
            "trainops_watch_options": watch_options,
            "trainops_controller_path": controller_path,
            "trainops_slurm_settings": slurm_settings,
            "trainops_slurm_names": slurm_names,
            "trainops_slurm_batch_options": slurm_batch_options,
            "trainops_slurm_go_table": slurm_go_table,
            "trainops_slurm_outcome": slurm_outcome,
            "trainops_slurm_bundle_jobs": slurm_bundle_jobs,
            "trainops_slurm_job_ended": slurm_job_ended,
            "trainops_slurm_sacct_argv": slurm_sacct_argv,
            "trainops_slurm_queue_line": slurm_queue_line,
            "parse_mthreads_gmi": parse_mthreads_gmi,
            "parse_mthreads_gmi_full": parse_mthreads_gmi_full,
            "parse_nvidia_smi": parse_nvidia_smi,
            "parse_allreduce_perf": parse_allreduce_perf,
        }
