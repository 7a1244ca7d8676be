"""Jinja filters over the core: the Slurm launcher (settings, sbatch options, sacct and squeue)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

_CORE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _CORE not in sys.path:
    sys.path.insert(0, _CORE)

from ansible.errors import AnsibleFilterError  # noqa: E402
from trainops import slurm as slurm_core  # noqa: E402
from trainops.errors import PlanError  # noqa: E402


def _slurm_raw(raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[str], list[str]]:
    return dict(raw), list(raw.get("inventory_nodes") or []), list(raw.get("login_hosts") or [])


def slurm_settings(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The launcher's options checked and converted (trainops.slurm.settings); a bad one is refused."""
    options, nodes, login = _slurm_raw(raw)
    try:
        return slurm_core.settings(options, nodes, login)
    except PlanError as exc:
        raise AnsibleFilterError(str(exc)) from None


def slurm_names(hostnames: Sequence[str], hostvars: Mapping[str, Any]) -> dict[str, str]:
    """Inventory host -> its Slurm node name (``slurm_node_name``, default the inventory name)."""
    return {name: str(hostvars[name].get("slurm_node_name") or name) for name in hostnames}


def slurm_batch_options(plan: Mapping[str, Any], slurm: Mapping[str, Any], sinfo_gres: str = "") -> list[str]:
    """sbatch's options for the run (trainops.slurm.batch_options), GPUs asked for where sinfo shows GPU GRES."""
    core = slurm_core
    return core.batch_options(plan, slurm, core.has_gpu_gres(sinfo_gres or ""))


def slurm_go_table(plan: Mapping[str, Any], names: Mapping[str, str]) -> str:
    return slurm_core.go_table(plan, names)


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
    core = slurm_core
    record = core.parse_accounting(sacct_stdout or "", str(job_id))
    down = core.unresponsive_nodes(sinfo_stdout or "")
    lost = {host: down[name] for host, name in (slurm_names or {}).items() if name in down}
    return core.outcome_with_job(outcome, record, str(job_id), bool(cancelled_here), lost)


def slurm_job_ended(sacct_stdout: str, job_id: Any) -> bool:
    """Whether sacct's output records the job as ended (any state but those of a queued or running job)."""
    core = slurm_core
    record = core.parse_accounting(sacct_stdout or "", str(job_id))
    return bool(record) and record["state"] not in core.ACTIVE


def slurm_sacct_argv(job_id: Any) -> list[str]:
    """sacct's command line for one job's own record, in the fields trainops.slurm.parse_accounting reads."""
    return ["sacct", "--jobs", str(job_id), *slurm_core.SACCT_ARGS]


def slurm_bundle_jobs(squeue_stdout: str) -> list[dict[str, str]]:
    """The bundle's jobs in squeue's output (``--format=trainops.slurm.SQUEUE_FORMAT``)."""
    core = slurm_core
    return core.bundle_jobs(core.parse_queue(squeue_stdout or ""))


def slurm_queue_line(job: Mapping[str, str]) -> str:
    """``Slurm job 12 RUNNING on node[1-2] for 3:02, run exp/run``: a bundle job as status and stop show it."""
    line = slurm_core.queue_line(job)
    run = job.get("comment", "").split(":", 1)[-1]
    return f"Slurm {line} for {job.get('elapsed') or '0:00'}, run {run}"


class FilterModule:
    """mtt-train-ops filters: the Slurm launcher (settings, sbatch options, sacct and squeue)."""

    def filters(self) -> dict[str, Any]:
        return {
            "trainops_slurm_settings": slurm_settings,
            "trainops_slurm_names": slurm_names,
            "trainops_slurm_batch_options": slurm_batch_options,
            "trainops_slurm_go_table": slurm_go_table,
            "trainops_slurm_outcome": slurm_outcome,
            "trainops_slurm_bundle_jobs": slurm_bundle_jobs,
            "trainops_slurm_job_ended": slurm_job_ended,
            "trainops_slurm_sacct_argv": slurm_sacct_argv,
            "trainops_slurm_queue_line": slurm_queue_line,
        }
