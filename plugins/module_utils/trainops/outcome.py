"""What train.yml, stop.yml and status.yml tell the user at the end: the run's outcome and each node's state.

The playbooks gather plain facts per node (what the fan-out returned, what the watcher saw, what stop did) and
these functions turn them into the outcome and the lines printed, so that the wording lives in one tested place.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from .invocation import command

#: Longest part of a failed fan-out's output kept in the outcome's reason.
REASON_CHARS = 600


def clip(text: str, limit: int) -> str:
    """``text`` cut at a word boundary to at most ``limit`` characters, ``...`` marking the cut."""
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return text
    head = text[: limit - 3]
    cut = head.rsplit(" ", 1)[0] if " " in head[-40:] else head
    return cut + "..."


#: What Ansible puts before an unreachable host's error: the task's failure, the connection plugin's sentence.
_UNREACHABLE_HEADS = re.compile(r"^(Task failed:\s*)?(Failed to connect to the host via \w+:\s*)?")


def connection_error(msg: Any) -> str:
    """An unreachable node's error (its ping result's ``msg``) as the connection said it: its last line (ssh's
    error, after its warnings), without Ansible's "Task failed: Failed to connect to the host via ssh: "."""
    lines = [line.strip() for line in str(msg or "").splitlines() if line.strip()]
    last = _UNREACHABLE_HEADS.sub("", lines[-1]) if lines else ""
    return last or (_UNREACHABLE_HEADS.sub("", lines[0]) if lines else "") or "no answer"


def train_outcome(master: str, fanout: Mapping[str, Any], watch: Mapping[str, Any] | None) -> dict[str, Any]:
    """The run's outcome: a failed fan-out (named on the master), else what the watcher saw, else running
    (``-e wait=false``: nothing watched)."""
    if fanout.get("rc") != 0:
        output = f"{fanout.get('stderr') or ''} {fanout.get('stdout') or ''}"
        return {
            "state": "failed",
            "kind": "launch",
            "node": master,
            "reason": f"the fan-out failed (rc {fanout.get('rc')}): {clip(output, REASON_CHARS)}",
        }
    return dict(watch) if watch else {"state": "running"}


def running_text(
    plan: Mapping[str, Any],
    outcome: Mapping[str, Any],
    run_dir: str,
    slurm_job: Mapping[str, Any] | None = None,
    given: Mapping[str, Any] | None = None,
) -> str:
    """What train.yml prints when it returns while the run goes on: its state and how to follow, stop and report;
    with ``slurm_job`` (launcher=slurm: ``id``, ``slurm_nodes``) the job too, and the commands take the launcher.
    Each command carries this run's -i and site options (``given``: :func:`.invocation.invocation`)."""
    if outcome.get("progress") is None and "watched_s" not in outcome:
        state = "started"
    else:
        state = f"is still running after {outcome.get('watched_s')} s"
    progress = f": {outcome['progress']}" if outcome.get("progress") else ""
    launcher = {"launcher": "slurm"} if slurm_job else {}
    lines = [
        f"run {plan['run_id']} ({plan['exp_name']}) {state}{progress}",
        f"follow it:  {command(given, 'status', launcher)}",
        f"stop it:    {command(given, 'stop', launcher)}",
        f"report:     {command(given, 'report', {'run': run_dir})}",
    ]
    if slurm_job:
        nodes = ",".join(slurm_job.get("slurm_nodes") or [])
        lines.insert(1, f"slurm:      job {slurm_job['id']} on {nodes} (squeue --jobs {slurm_job['id']})")
    return "\n".join(lines)


def stopped_by_supervisors(answers: Sequence[Mapping[str, Any] | None], node: str) -> list[dict[str, Any]]:
    """The process groups the runs' supervisors stopped on ``node``, from every node's answer to ``supervise.py
    stop`` (each ``{"runs": [{"stopped": {node: groups}}]}``; a node that asked nothing answers None)."""
    return [
        dict(group)
        for answer in answers
        for run in (answer or {}).get("runs") or []
        for group in (run.get("stopped") or {}).get(node) or []
    ]


def _supervisor_line(name: str, run: Mapping[str, Any]) -> str:
    where = "/".join(str(run["run_dir"]).rstrip("/").split("/")[-2:])
    if not run.get("ended"):
        return (
            f"{name}: run {where}: its supervisor (pid {run.get('pid')}) did not end within "
            f"{run.get('waited_s'):.0f} s of being asked to stop; what is left is stopped here directly"
        )
    attempt = f"attempt {run['attempt']}" if run.get("attempt") else "the run"
    return f"{name}: run {where}: stopped by its supervisor (pid {run.get('pid')}): {attempt} ended, no new attempt"


def _group_line(name: str, group: Mapping[str, Any], by: str = "") -> str:
    return (
        f"{name}: run {group['exp']}/{group['run_id']} (process group {group['pgid']}, {group['processes']} "
        f"processes) {group['result']} in {group['seconds']} s{by}"
    )


def stop_lines(nodes: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line or more per node of what stop.yml did. Each node: ``name``, ``stop_ping`` (its ping result),
    ``stop_container_info`` (docker_container_info's result), ``stop_supervisors`` (its answer to ``supervise.py
    stop``: the runs whose supervisor lived there), ``stop_by_supervisors`` (the groups the supervisors stopped on
    it), ``run_groups_stopped``, ``accelerator_cards`` (set when the cards were checked idle),
    ``run_groups_restarts_cancelled`` (runs whose restart mark stop.yml removed), ``stop_removed`` (the removal's
    result)."""
    lines = []
    for node in nodes:
        name = node["name"]
        ping = node.get("stop_ping") or {}
        info = node.get("stop_container_info") or {}
        cards = "; cards idle" if node.get("accelerator_cards") else ""
        supervised = (node.get("stop_supervisors") or {}).get("runs") or []
        by_supervisors = node.get("stop_by_supervisors") or []
        if ping.get("unreachable"):
            lines.append(f"{name}: DID NOT ANSWER ({clip(connection_error(ping.get('msg')), 200)})")
        elif not info.get("exists"):
            lines.append(f"{name}: no training container; nothing runs")
        elif not ((info.get("container") or {}).get("State") or {}).get("Running"):
            lines.append(f"{name}: the training container is stopped; nothing runs")
        elif not node.get("run_groups_stopped") and not supervised and not by_supervisors:
            lines.append(f"{name}: idle, nothing to stop{cards}")
        else:
            lines += [_supervisor_line(name, run) for run in supervised]
            lines += [_group_line(name, group, f", by the run's supervisor{cards}") for group in by_supervisors]
            lines += [_group_line(name, group, cards) for group in node.get("run_groups_stopped") or []]
            if cards and not by_supervisors and not node.get("run_groups_stopped"):
                lines.append(f"{name}: nothing left to stop{cards}")
        for run_dir in node.get("run_groups_restarts_cancelled") or []:
            lines.append(f"{name}: run {run_dir}: restarts cancelled (train.yml starts no new attempt)")
        if (node.get("stop_removed") or {}).get("changed"):
            lines.append(f"{name}: container removed")
    return lines


def silent_nodes_text(
    nodes: Sequence[Mapping[str, Any]],
    result_key: str,
    verb: str,
    then: str,
    when_all: str | None = None,
    total: int | None = None,
) -> str:
    """The nodes that did not answer, each named with its address (``ansible_host``), ``verb`` and the error of
    its ping result (``node[result_key].msg``, as :func:`connection_error`), then ``then`` (what happened to the
    others and what to do); or ``when_all`` instead where every node was silent (``nodes`` are all ``total`` of
    them): then there were no others."""
    named = " ".join(
        f"{node['name']} ({node.get('ansible_host') or node['name']}) {verb}: "
        f"{clip(connection_error((node.get(result_key) or {}).get('msg')), 200)}."
        for node in nodes
    )
    every = when_all is not None and total is not None and len(nodes) >= total
    return f"{named} {when_all if every else then}"


def supervisor_text(master: str, seen: Mapping[str, Any] | None) -> str:
    """Who watches a live run, from its supervisor's ``status`` (the node package's supervise.py) on ``master`` (the
    node whose container runs it: -e supervisor_host's, else the master); ``{"silent": why, "standby": the node that
    holds a copy of the run's record}`` when that node did not answer."""
    if seen and seen.get("silent"):
        standby = seen.get("standby")
        move = (f"; status.yml -e supervisor_host={standby} moves its supervision to {standby}, which holds a copy of "
                "its record") if standby else ""  # fmt: skip
        return (
            f"nobody that answers: its supervisor's node {master} did not answer ({clip(seen['silent'], 200)}); the "
            f"ranks go on unwatched (no restart, no hang diagnosis) until {master} answers again and status.yml "
            f"starts its supervisor again there, or stop.yml ends the run{move}"
        )
    if seen and seen.get("superseded"):
        return f"nobody on {master}: {seen['superseded']}"
    if not seen or not seen.get("attempt"):
        return (
            "nobody on the cluster: no supervisor was started for this run (train.yml of an older bundle); it is "
            "judged only when status.yml looks; status.yml -e follow=true starts one, which warns of a hang"
        )
    attempt, pid, events = seen["attempt"], seen.get("pid"), seen.get("events")
    since = seen.get("since")
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(since)) if since else "an unknown time"
    if seen.get("taken_up_from"):
        return (
            f"its supervisor, started again now (pid {pid} in {master}'s container): its process "
            f"{seen['taken_up_from']} had ended before the run did; it goes on from the run's state, at attempt "
            f"{attempt} (events: {events})"
        )
    if pid and not seen.get("ended"):
        return f"its supervisor (pid {pid} in {master}'s container since {when}), attempt {attempt} (events: {events})"
    if seen.get("ended"):
        return (
            f"nobody: its supervisor ended the run ({seen.get('state')}, attempt {attempt}) while ranks still run; "
            f"stop.yml ends them (events: {events})"
        )
    return f"nobody: its supervisor is gone and was not started again, at attempt {attempt} (events: {events})"


def moved_text(runs: Sequence[Mapping[str, Any]]) -> str:
    """One line per run whose supervision status.yml moved (``run_dir``, ``from``, ``to``, ``pid``, ``copied_at``,
    ``plans_written``: node -> "" or why its plan.json could not be rewritten)."""
    lines = []
    for run in runs:
        copied = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(run.get("copied_at") or 0)))
        unwritten = "; ".join(f"{name}: {why}" for name, why in (run.get("plans_written") or {}).items() if why)
        moved = f"its supervision moved from {run.get('from')} to {run['to']} (pid {run.get('pid')})"
        left = f". The plan could not be rewritten on: {unwritten}" if unwritten else ""
        lines.append(
            f"run {run['run_dir']}: {moved}, from its record as copied at {copied}; it takes the run up without "
            f"launching ranks that are alive{left}"
        )
    return "\n".join(lines)


def followed_text(runs: Sequence[Mapping[str, Any]]) -> str:
    """status.yml -e follow=true's last lines: per followed run (``run_dir``, ``attempt``: its number, ``watch``:
    the last attempt's watch, or the current one's so far when train_wait ran out), how the run ended or where it
    stands."""
    lines = []
    for run in runs:
        watch, head = run["watch"], f"run {run['run_dir']}, attempt {run['attempt']}"
        progress = f"; last progress: {watch['progress']}" if watch.get("progress") else ""
        if watch.get("state") == "running":
            lines.append(f"{head}: still running, its supervisor watches on{progress}")
        elif watch.get("state") == "failed":
            lines.append(
                f"{head}: failed ({watch.get('kind')}, {watch.get('node')}): {clip(watch.get('reason') or '', 400)}"
                f"{progress}. The run has ended: its supervisor stopped what was left of it (the report below says "
                "whether and why it was not restarted)"
            )
        else:
            lines.append(f"{head}: {watch.get('state')}{progress}")
    return "\n".join(lines)


def status_text(runs: Sequence[Mapping[str, Any]]) -> str:
    """status.yml's display: per live run (``run_dir``, ``watch``: the watcher's one probe, ``master``,
    ``supervisor``: its supervisor's status), who watches it, each node's state, the progress, the time since the
    last iteration against the hang limit, and a hang diagnosed."""
    if not runs:
        return "No run of this bundle is running on any node."
    lines = []
    for run in runs:
        watch = run["watch"]
        lines.append(f"run {run['run_dir']}")
        if "supervisor" in run:
            seen = run["supervisor"] or {}
            lines.append(f"  watched  by {supervisor_text(run.get('master') or '', seen)}")
            if seen.get("nodes"):
                out = "; ".join(f"{name} ({clip(why, 160)})" for name, why in (seen.get("left_out") or {}).items())
                lines.append(f"  nodes    attempt {seen.get('attempt')} on {', '.join(seen['nodes'])}"
                             f"{'; left out: ' + out if out else ''}")  # fmt: skip
            if seen.get("last_verified") is not None:
                lines.append(f"  saved    iteration {seen['last_verified']} (the newest verified save)")
        if watch.get("master_silent"):
            lines.append(
                f"  master   {watch['master_silent']} did not answer (left out): this run was not probed; its rank 0 "
                "was there, so its ranks elsewhere cannot train on without it"
            )
            continue
        for name, node in (watch.get("nodes") or {}).items():
            detail = node.get("detail")
            shown = f"(process group {detail})" if node.get("state") == "running" else detail
            lines.append(f"  {name:<8} {node.get('state')} {shown}")
        lines.append(f"  progress {watch.get('progress') or 'no iteration yet'}")
        lines.append(
            f"  quiet    {int(watch.get('seconds_since_progress') or 0)} s since the last iteration "
            f"(hang limit {int(watch.get('hang_limit_s') or 0)} s)"
        )
        if watch.get("hang"):
            lines.append(f"  hang     {watch['hang']['confidence']} confidence: {watch['hang']['finding']}")
    return "\n".join(lines)
