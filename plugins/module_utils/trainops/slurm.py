"""Slurm as train.yml's launcher (``-e launcher=slurm``): the job's settings, its sbatch options, and what
squeue and sacct say about it, turned into the run's outcome.

The bundle keeps its own plan, checks, watcher, collection and report; Slurm allocates the nodes and starts one
task per node (``srun``), which starts that node's launch in its training container. Nothing here runs a
command: the playbooks run ``sbatch``, ``squeue``, ``sacct`` and ``scancel`` on a node of the inventory's
``slurm_login`` group and hand their output to these functions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import PlanError

LAUNCHERS = ("ssh", "slurm")

#: The comment every job of the bundle carries (``--comment``), by which stop.yml and status.yml find them.
COMMENT_PREFIX = "mtt-train-ops:"

#: squeue's format: job id, state, reason, node list, time used, time limit, name, comment.
SQUEUE_FORMAT = "%i|%T|%r|%N|%M|%l|%j|%k"
#: sacct's fields (``--parsable2 --noheader --allocations``).
SACCT_FIELDS = "JobID,State,ExitCode,Elapsed,Timelimit,NodeList,Reason"
#: sacct's arguments after ``--jobs ID``: the job's own line (no steps), no header, ``|``-separated.
SACCT_ARGS = ("--allocations", "--noheader", "--parsable2", f"--format={SACCT_FIELDS}")

#: Job states of squeue that mean the job has not ended.
ACTIVE = frozenset(
    {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING", "SIGNALING", "STAGE_OUT"}
)

_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d{1,2}))?(?::(\d{1,2}))?$")
_PARTITION = re.compile(r"^[A-Za-z0-9_.-]+$")


def time_limit(value: Any) -> str | None:
    """A Slurm ``--time`` from whole minutes (``90``) or Slurm's own forms (``1:30:00``, ``2-00:00:00``);
    ``None`` or empty: the partition's default. Raises ValueError naming the forms."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise ValueError("must be minutes or [D-]HH:MM:SS")
    text = str(value).strip()
    if text.isdigit():
        if int(text) < 1:
            raise ValueError("must be at least 1 minute")
        return text
    match = _TIME.match(text)
    if not match or (match.group(4) is None and match.group(1) is None and match.group(3) is None):
        raise ValueError("must be minutes (90) or [D-]HH:MM:SS (1:30:00, 2-00:00:00)")
    if any(int(part) >= 60 for part in (match.group(3), match.group(4)) if part):
        raise ValueError("has minutes or seconds of 60 or more")
    return text


def settings(raw: Mapping[str, Any], inventory_nodes: Sequence[str], login_hosts: Sequence[str]) -> dict[str, Any]:
    """The launcher's settings, checked on the controller before any node is touched.

    ``raw``: ``launcher`` (ssh|slurm), ``slurm_nodes`` (default: every node of the inventory), ``slurm_partition``
    (default: Slurm's default partition), ``slurm_time`` (default: the partition's), ``slurm_queue_timeout``
    (seconds to wait for the allocation, default 3600), ``slurm_output_dir`` (where the batch host writes the
    job's output, default /tmp), ``slurm_go_timeout`` (seconds each node's task waits for the run's files, default
    900, and between two attempts of a run with restarts), ``slurm_gpus_per_node`` (auto|true|false:
    ``--gpus-per-node`` where the partition has GPU GRES). Raises :class:`PlanError` with every problem."""
    problems: list[str] = []
    launcher = str(raw.get("launcher") or "ssh").strip().lower()
    if launcher not in LAUNCHERS:
        problems.append(f"-e launcher={raw.get('launcher')!r} must be one of {', '.join(LAUNCHERS)}")
        raise PlanError(problems)
    if launcher == "ssh":
        given = [name for name in ("slurm_nodes", "slurm_partition", "slurm_time") if raw.get(name) not in (None, "")]
        if given:
            problems.append(f"-e {', '.join(given)} need -e launcher=slurm (the launcher is ssh)")
            raise PlanError(problems)
        return {"launcher": "ssh"}

    spares = [n for n in raw.get("spares") or () if n in inventory_nodes]
    hosts = [n for n in inventory_nodes if n not in spares]
    names = raw.get("slurm_names") or {}
    if not login_hosts:
        problems.append(
            "-e launcher=slurm needs a slurm_login group in the inventory: the node(s) where sbatch, squeue, sacct "
            "and scancel run"
        )
    nodes = raw.get("slurm_nodes")
    if not hosts and inventory_nodes:
        problems.append(
            f"inventory: every node is a spare (spare: true on {', '.join(spares)}), and with -e launcher=slurm a "
            "spare is never allocated (sbatch --exclude): there is no node to run on; drop spare: true on the nodes "
            "to train on (docs/slurm.md)"
        )
        count = 0
    elif nodes in (None, ""):
        count = len(hosts)
    else:
        text = str(nodes).strip()
        count = int(text) if text.isdigit() and not isinstance(nodes, bool) else 0
        if count < 1 or count > len(hosts):
            spared = f", less its spares ({', '.join(spares)}), which Slurm is asked not to give" if spares else ""
            problems.append(
                f"-e slurm_nodes={nodes!r} must be a whole number from 1 to {len(hosts)} (the nodes of the "
                f"inventory, where the containers are provisioned{spared})"
            )
    partition = raw.get("slurm_partition")
    partition = "" if partition is None else str(partition).strip()
    if partition and not _PARTITION.match(partition):
        problems.append(f"-e slurm_partition={raw.get('slurm_partition')!r} is not a partition name")
    try:
        limit = time_limit(raw.get("slurm_time"))
    except ValueError as exc:
        problems.append(f"-e slurm_time={raw.get('slurm_time')!r} {exc}")
        limit = None
    queue = raw.get("slurm_queue_timeout", 3600)
    try:
        queue_timeout = float(queue)
        if isinstance(queue, bool) or queue_timeout <= 0:
            raise ValueError
    except (TypeError, ValueError):
        problems.append(f"-e slurm_queue_timeout={queue!r} must be seconds > 0")
        queue_timeout = 3600.0
    go = raw.get("slurm_go_timeout", 900)
    go_text = str(go).strip()
    if isinstance(go, bool) or not (go_text.isascii() and go_text.isdigit()) or int(go_text) < 10:
        problems.append(f"-e slurm_go_timeout={go!r} must be whole seconds >= 10")
        go_text = "900"
    gpus = str(raw.get("slurm_gpus_per_node", "auto")).strip().lower()
    if gpus not in ("auto", "true", "false"):
        problems.append(f"-e slurm_gpus_per_node={raw.get('slurm_gpus_per_node')!r} must be auto, true or false")
    output_dir = str(raw.get("slurm_output_dir") or "/tmp").strip()
    if not output_dir.startswith("/"):
        problems.append(f"-e slurm_output_dir={raw.get('slurm_output_dir')!r} must be an absolute path on the nodes")
    if problems:
        raise PlanError(problems)
    return {
        "launcher": "slurm",
        "login": login_hosts[0],
        "nodes": count,
        "partition": partition,
        "time": limit,
        "queue_timeout": queue_timeout,
        "go_timeout": int(go_text),
        "gpus_per_node": gpus,
        "output_dir": output_dir.rstrip("/") or "/",
        # the nodes Slurm may give, in the inventory's order (the first plan is made on the first `nodes` of
        # them), and the spares' Slurm names, which the job excludes: a spare gets no rank under Slurm either
        "hosts": hosts,
        "exclude": [str(names.get(n) or n) for n in spares],
    }


#: train.yml's options that choose the nodes or re-plan the run, which a Slurm allocation does not honour: Slurm
#: picks the job's nodes, and a restart stays on them. Refused with -e launcher=slurm, each saying what to use.
UNHONOURED = {
    "exclude_nodes": "Slurm picks the job's nodes, and the bundle would still reach and check the node: drain it in "
    "Slurm (scontrol update nodename=NODE state=drain reason=...), or give it spare: true in the inventory (Slurm "
    "is then asked not to give it, sbatch --exclude)",
    "use_nodes": "Slurm picks the job's nodes: ask for their number with -e slurm_nodes and for a partition of the "
    "nodes you want with -e slurm_partition",
    "elastic": "a restart under Slurm runs inside the job's allocation, on the nodes Slurm gave (-e max_restarts), "
    "so there is no re-plan: drop it, or use -e launcher=ssh",
    "min_nodes": "it bounds an elastic re-plan, and a restart under Slurm stays on the allocation's nodes: drop it, "
    "or use -e launcher=ssh",
    "incident_limit": "the incident record is not applied with Slurm, which picks the nodes: drain an implicated "
    "node in Slurm instead (docs/incidents.md)",
    "incident_window_days": "the incident record is not applied with Slurm, which picks the nodes: drain an "
    "implicated node in Slurm instead (docs/incidents.md)",
    "supervisor_host": "under Slurm the run's supervisor runs inside the job's allocation, in its master's "
    "container, as the job's own tasks do (docs/slurm.md): drop it, or use -e launcher=ssh",
    "health": "with Slurm a sick node cannot be left out before the launch (Slurm picks the nodes; it is named, as "
    "with health=warn): give -e health=warn or off, or drain the node in Slurm",
}


def unhonoured(given: Mapping[str, Any]) -> list[str]:
    """The options of :data:`UNHONOURED` in ``given`` (those given with -e, converted) that a run with
    ``launcher=slurm`` would ignore, each refused with what to do instead. ``elastic`` counts when true,
    ``health`` when ``exclude`` (its default, which Slurm runs as ``warn``, is not refused)."""
    out = []
    for name, why in UNHONOURED.items():
        value = given.get(name)
        if name not in given or value in (None, "", [], False) or (name == "health" and value != "exclude"):
            continue
        shown = ",".join(map(str, value)) if isinstance(value, list) else str(value).lower()
        out.append(f"-e {name}={shown} is not honoured with -e launcher=slurm: {why}")
    return out


def job_comment(plan: Mapping[str, Any]) -> str:
    return f"{COMMENT_PREFIX}{plan['exp_name']}/{plan['run_id']}"


def batch_options(plan: Mapping[str, Any], slurm: Mapping[str, Any], gres_gpu: bool) -> list[str]:
    """sbatch's options for the run: one task per node on whole nodes, named, timed and commented from the plan.
    ``gres_gpu``: the partition has GPU GRES (sinfo), so the cards are asked for as ``--gpus-per-node``."""
    slots = max(int(node["slots"]) for node in plan["nodes"])
    options = [
        f"--job-name=mtt-{plan['exp_name']}",
        f"--nodes={slurm['nodes']}",
        "--ntasks-per-node=1",
        "--exclusive",
        # a job Slurm requeues (after NODE_FAIL, by default) would start the run again with no train.yml watching
        # it: train.yml decides about new attempts
        "--no-requeue",
        f"--output={slurm['output_dir']}/mtt-{plan['exp_name']}-{plan['run_id']}-%j.out",
        f"--comment={job_comment(plan)}",
    ]
    if slurm.get("partition"):
        options.append(f"--partition={slurm['partition']}")
    if slurm.get("time"):
        options.append(f"--time={slurm['time']}")
    if slurm.get("exclude"):  # the spares: Slurm gives none of them, so none gets a rank
        options.append(f"--exclude={','.join(slurm['exclude'])}")
    wants_gpus = slurm.get("gpus_per_node", "auto")
    if wants_gpus == "true" or (wants_gpus == "auto" and gres_gpu):
        options.append(f"--gpus-per-node={slots}")
    return options


def has_gpu_gres(sinfo_gres: str) -> bool:
    """Whether ``sinfo --noheader --format=%G`` shows GPU GRES (``gpu:8``, ``gpu:s5000:8(S:0-1)``; ``(null)``: none)."""
    return any(re.match(r"^gpu(:|$)", part.strip()) for line in sinfo_gres.splitlines() for part in line.split(","))


def parse_queue(text: str) -> list[dict[str, str]]:
    """squeue's lines (``--noheader --format=SQUEUE_FORMAT``) as dicts."""
    keys = ("job_id", "state", "reason", "nodelist", "elapsed", "time_limit", "name", "comment")
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", len(keys) - 1)
        jobs.append(dict(zip(keys, parts + [""] * (len(keys) - len(parts)), strict=False)))
    return jobs


def queue_line(job: Mapping[str, str]) -> str:
    """One line of a job's place in the queue: ``job 12 PENDING (Resources), waited 0:42``."""
    reason = job.get("reason") or ""
    text = f"job {job['job_id']} {job['state']}"
    if reason and reason not in ("None", "(null)"):
        text += f" ({reason})"
    if job["state"] == "RUNNING" and job.get("nodelist"):
        text += f" on {job['nodelist']}"
    return text


def parse_accounting(text: str, job_id: str) -> dict[str, str] | None:
    """The job's own line of ``sacct --parsable2 --noheader --allocations --format=SACCT_FIELDS``; ``None`` when
    sacct does not know it yet. The state is split from a trailing ``by UID`` (``CANCELLED by 0``)."""
    keys = ("job_id", "state", "exit_code", "elapsed", "time_limit", "nodelist", "reason")
    for line in text.splitlines():
        parts = line.split("|")
        if parts and parts[0] == str(job_id):
            record = dict(zip(keys, parts + [""] * (len(keys) - len(parts)), strict=False))
            state, _, by = record["state"].partition(" by ")
            record["state"] = state.strip()
            record["by"] = by.strip()
            return record
    return None


def accounting_text(record: Mapping[str, str]) -> str:
    """What Slurm says of the job, in one line: ``Slurm job 12: TIMEOUT after 00:01:31 (limit 00:01:00), exit 0:15``."""
    text = f"Slurm job {record['job_id']}: {record['state']}"
    if record.get("by"):
        text += f" by uid {record['by']}"
    if record.get("elapsed"):
        text += f" after {record['elapsed']}"
    if record.get("time_limit") and record["time_limit"] not in ("UNLIMITED", "Partition_Limit"):
        text += f" (limit {record['time_limit']})"
    if record.get("exit_code"):
        text += f", exit code {record['exit_code']}"
    if record.get("nodelist") and record["nodelist"] not in ("None assigned", ""):
        text += f", on {record['nodelist']}"
    return text


def outcome_with_job(
    outcome: Mapping[str, Any],
    record: Mapping[str, str] | None,
    job_id: str,
    cancelled_here: bool = False,
    lost_nodes: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The run's outcome with Slurm's account of the job as one more input.

    The watcher's outcome names the node and rank; Slurm's state adds what the watcher cannot see: a job that
    reached its ``--time`` (TIMEOUT: the ranks were stopped by Slurm, not crashed), was cancelled outside
    stop.yml (CANCELLED), lost a node (NODE_FAIL) or was killed for host memory (OUT_OF_MEMORY).
    ``cancelled_here``: train.yml cancelled the job itself after the run had ended (a job that outlived its run,
    e.g. waiting for a lost node), so CANCELLED says nothing about the run. ``lost_nodes``: the job's nodes Slurm
    marks unresponsive (inventory name -> Slurm's state and reason), the one named after NODE_FAIL."""
    out = dict(outcome)
    if record is None:
        out["slurm"] = {"job_id": str(job_id), "state": "UNKNOWN", "text": f"Slurm job {job_id}: sacct has no record"}
        return out
    text = accounting_text(record)
    out["slurm"] = dict(record, text=text)
    state = record["state"]
    if state == "TIMEOUT":
        out.update(
            state="failed",
            kind="timeout",
            reason=f"{text}: the job reached its time limit and Slurm stopped it; not a crash. Run train.yml again "
            "with a longer -e slurm_time: it resumes from the last checkpoint",
        )
    elif state == "CANCELLED" and cancelled_here:
        out["slurm"]["text"] = text = f"{text} (by train.yml: the job outlived its run)"
    elif state == "CANCELLED" and outcome.get("kind") != "stopped" and outcome.get("state") != "finished":
        out.update(
            state="failed",
            kind="cancelled",
            reason=f"{text}: the job was cancelled in Slurm (scancel, an administrator or preemption), not by "
            "stop.yml; its ranks were stopped, not crashed",
        )
    elif state == "NODE_FAIL" and outcome.get("kind") == "lost":
        out.update(state="failed", reason=f"{outcome.get('reason')}; {text}")
    elif state == "NODE_FAIL":
        # Slurm lost a node (its slurmd stopped answering) and ended the job: the ranks elsewhere were stopped
        # by Slurm, and their errors are the consequence. Name the node Slurm marks unresponsive.
        node, why = next(iter((lost_nodes or {}).items()), (None, ""))
        where = f"Slurm lost {node} ({why})" if node else "Slurm lost a node of the job"
        out.update(
            state="failed",
            kind="node_fail",
            node=node,
            reason=f"{text}: {where} and ended the job; the ranks on the other nodes were stopped by Slurm, not "
            "crashed. Check the node (slurmd, network), then run train.yml again: it resumes from the last checkpoint",
        )
    elif state in ("FAILED", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED") and outcome.get("state") in (
        "failed",
        "finished",
    ):
        reason = outcome.get("reason")
        hint = " (a task used more host memory than Slurm allows)" if state == "OUT_OF_MEMORY" else ""
        out.update(
            state="failed",
            reason=f"{reason}; {text}{hint}" if reason else f"{text}{hint}",
        )
        out.setdefault("kind", "exited")
    return out


def allocation_hosts(slurm_names: Sequence[str], inventory: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """The inventory hosts of the allocation, in Slurm's node order (``SLURM_NODEID`` 0, 1, ...), and the Slurm
    node names the inventory lacks. ``inventory``: Slurm node name -> inventory host (``slurm_node_name``,
    default the inventory name)."""
    hosts, unknown = [], []
    for name in slurm_names:
        if name in inventory:
            hosts.append(inventory[name])
        else:
            unknown.append(name)
    return hosts, unknown


def go_table(plan: Mapping[str, Any], slurm_name_of: Mapping[str, str]) -> str:
    """The file each node's Slurm task waits for (``<run dir>/slurm-go``, written after the run's files): one line
    per node, ``<Slurm node name> <inventory name> <node rank>``."""
    return "".join(
        f"{slurm_name_of.get(node['name'], node['name'])} {node['name']} {node['node_rank']}\n"
        for node in plan["nodes"]
    )


def unresponsive_nodes(sinfo_text: str) -> dict[str, str]:
    """Slurm nodes that are down, failing, drained or not responding (``*``), with Slurm's reason, from
    ``sinfo --noheader --Node --format=%N|%T|%E`` (a node of two partitions shows twice)."""
    found: dict[str, str] = {}
    for line in sinfo_text.splitlines():
        parts = line.split("|", 2)
        if len(parts) < 3:
            continue
        name, state, reason = (part.strip() for part in parts)
        if state.endswith("*") or state.startswith(("down", "fail", "drain")):
            found.setdefault(name, f"{state}: {reason}" if reason and reason != "none" else state)
    return found


def bundle_jobs(queue: Sequence[Mapping[str, str]]) -> list[dict[str, str]]:
    """The jobs of the queue that this bundle submitted (their comment)."""
    return [dict(job) for job in queue if job.get("comment", "").startswith(COMMENT_PREFIX)]
