"""Jinja filters over the core: a run's watch options and the texts of its outcome."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

_CORE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _CORE not in sys.path:
    sys.path.insert(0, _CORE)

from ansible.errors import AnsibleFilterError  # noqa: E402
from ansible.utils.display import Display  # noqa: E402
from trainops import identity as identity_core  # noqa: E402
from trainops import incidents as incidents_core  # noqa: E402
from trainops import invocation as invocation_core  # noqa: E402
from trainops import outcome as outcome_core  # noqa: E402
from trainops import provenance as provenance_core  # noqa: E402
from trainops import run_record as run_record_core  # noqa: E402
from trainops import run_report as run_report_core  # noqa: E402
from trainops import watch as watch_core  # noqa: E402
from trainops.errors import PlanError  # noqa: E402
from trainops.records import RecordError  # noqa: E402

display = Display()


def watch_options(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The watcher's options checked and converted (trainops.watch.watch_options); a bad one is refused."""
    try:
        return watch_core.watch_options(raw)
    except PlanError as exc:
        raise AnsibleFilterError("; ".join(exc.problems)) from None


def running_text(
    outcome: Mapping[str, Any],
    plan: Mapping[str, Any],
    run_dir: str,
    slurm_job: Mapping[str, Any] | None = None,
    given: Mapping[str, Any] | None = None,
) -> str:
    """train.yml's lines for a run that goes on; ``given``: trainops_invocation (the commands carry its -i)."""
    return outcome_core.running_text(plan, outcome, run_dir, slurm_job or None, given or None)


def command(given: Mapping[str, Any] | None, playbook: str, options: Mapping[str, Any] | None = None) -> str:
    """A command line for the user to run next, carrying this run's -i and site options (trainops.invocation):
    ``trainops_invocation | trainops_command('stop', {'launcher': 'slurm'})``."""
    return invocation_core.command(given, playbook, options)


def stop_lines(nodes: Sequence[Mapping[str, Any]]) -> list[str]:
    return outcome_core.stop_lines(nodes)


def _reply_json(result: Mapping[str, Any]) -> dict[str, Any] | None:
    """A task result's stdout as the JSON object a node program printed; None when it printed none (failed, silent)."""
    try:
        read = json.loads(result.get("stdout") or "")
    except ValueError:
        return None
    return read if isinstance(read, dict) else None


def status_text(
    probes: Sequence[Mapping[str, Any]], supervisors: Sequence[Mapping[str, Any]] | None = None, master: str = ""
) -> str:
    """status.yml's display, from its probe loop's results (each: ``item.item`` the run dir, ``watch``) and, when
    given, its supervisor loop's (each: ``item``, the plan's read: ``item.item`` the run dir, ``item.stdout`` its
    plan, whose ``supervisor`` names the node asked, else its master, else ``master``; ``stdout``, supervise.py
    status's JSON, or ``unreachable`` with ``msg`` when that node did not answer). A run with a supervisor's answer
    but no probe (its master was left out) is shown with its master silent."""
    seen, hosts, masters = {}, {}, {}
    for reply in supervisors or []:
        run_dir = (reply.get("item") or {}).get("item")
        plan = _reply_json(reply.get("item") or {}) or {}
        hosts[run_dir], masters[run_dir] = plan.get("supervisor") or plan.get("master") or master, plan.get("master")
        if reply.get("unreachable"):
            standby = watch_core.standby_node(plan) if plan.get("master") and plan.get("nodes") else None
            seen[run_dir] = {"silent": outcome_core.connection_error(reply.get("msg")), "standby": standby}
            continue
        answer = _reply_json(reply)
        if answer is None:
            continue
        seen[answer.get("run_dir") or run_dir] = answer
    runs = [{"run_dir": probe["item"]["item"], "watch": probe["watch"]} for probe in probes]
    # a run whose master was left out (it did not answer) is not probed (probe.sh runs there): shown as such
    probed = {run["run_dir"] for run in runs}
    runs += [{"run_dir": run_dir, "watch": {"master_silent": masters[run_dir]}} for run_dir in hosts
             if run_dir not in probed and masters.get(run_dir)]  # fmt: skip
    for run in runs if supervisors is not None else []:
        run.update(master=hosts.get(run["run_dir"]) or master, supervisor=seen.get(run["run_dir"]))
    return outcome_core.status_text(runs)


def moved_text(moves: Sequence[Mapping[str, Any]], node: str) -> str:
    """status.yml -e supervisor_host=NODE's lines, from its move loop's results (each: ``item.item.item`` the run
    dir, ``stdout``: supervise.py move's JSON), one per run whose supervision moved to ``node``."""
    runs = []
    for one in moves:
        answer = _reply_json(one) or {}
        if answer.get("pid"):
            runs.append(dict(answer, run_dir=one["item"]["item"]["item"], to=node))
    return outcome_core.moved_text(runs)


def followed_text(followed: Sequence[Mapping[str, Any]]) -> str:
    """status.yml -e follow=true's last lines, from its follow loop's results (each: ``item.item`` the run dir,
    ``attempt``, ``watch``)."""
    runs = [
        {"run_dir": one["item"]["item"], "attempt": (one.get("attempt") or {}).get("number")
         or one["watch"].get("attempt") or 1, "watch": one["watch"]}
        for one in followed
    ]  # fmt: skip
    return outcome_core.followed_text(runs)


def run_record(run_dir: str) -> dict[str, Any]:
    """The record of a train.yml run (trainops.run_record: ``<run_dir>/run.json``); {} before one is written."""
    try:
        return run_record_core.read(run_dir)
    except RecordError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def left_out(runs_dir: str, options: Mapping[str, Any], given: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The nodes the site's incident record leaves out of a new run (trainops.incidents), each with why (the
    command that clears one carries ``given``'s -i: trainops_invocation)."""
    window, limit = float(options["incident_window_days"]), int(options["incident_limit"])
    records, warnings = incidents_core.read(incidents_core.path_in(runs_dir))
    for warning in warnings:  # a damaged line is named and skipped; the run goes on
        display.warning(warning)
    found = incidents_core.implicated(records, time.time(), window, limit)
    return {node: incidents_core.exclusion_text(node, rows, window, given) for node, rows in sorted(found.items())}


def report_run(run_dir: str, hosts: Sequence[Mapping[str, Any]], playbook: str = "report.yml") -> dict[str, Any]:
    """report.yml's (and export.yml's) run: its plan, or the problem that refuses it before any SSH
    (trainops.run_report.report_run; ``hosts``: trainops_inventory_nodes)."""
    return run_report_core.report_run(run_dir, hosts, playbook)


def provenance(hosts: Sequence[Mapping[str, Any]], project_dir: str, node_package: str, launch_env: Mapping) -> dict:
    """The run's provenance for its record (trainops.provenance.record) from the nodes' hostvars that hold their
    ``train_stack``; the bundle's version read from the checkout at ``project_dir`` now, at the launch."""
    stacks = {str(h["inventory_hostname"]): h["train_stack"] for h in hosts if "train_stack" in h}
    return provenance_core.record(provenance_core.bundle_version(project_dir), node_package, stacks, launch_env)


def unrecorded_runs(
    runs_dir: str, hosts: Sequence[Mapping[str, Any]], supervisors: Sequence[str], window_days: float
) -> list[dict[str, Any]]:
    """The runs this controller launched whose end no terminal followed (trainops.run_report.unrecorded_runs)."""
    return run_report_core.unrecorded_runs(runs_dir, hosts, supervisors, time.time(), float(window_days))


def unrecorded_plans(reads: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """status_unfollowed.yml's plan reads (each: ``item`` an :func:`unrecorded_runs` entry, ``stdout`` the plan on
    its master) as status_probe.yml's are shaped: ``item`` the run's directory, ``stdout`` its plan, with ``run``
    and ``supervisor`` (the plan's there: a moved supervision's host, else the one it was started on). A run whose
    plan could not be read there (its master silent, its directory gone) is left for a later status.yml."""
    plans = []
    for read in reads:
        run, plan = read.get("item") or {}, _reply_json(read)
        if read.get("rc") == 0 and plan is not None and plan.get("run_dir") == run.get("run_dir"):
            plans.append({"item": run["run_dir"], "stdout": read["stdout"], "run": run.get("run"),
                          "supervisor": plan.get("supervisor") or run.get("supervisor")})  # fmt: skip
    return plans


def ended_unrecorded(asked: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Of status_unfollowed.yml's supervisor answers (each: ``item`` an :func:`unrecorded_plans` entry, ``stdout``
    supervise.py status's JSON), the runs that have ended on that host (not one whose supervision moved away)."""
    ended = []
    for answer in asked:
        said = _reply_json(answer) or {}
        if said.get("ended") and not said.get("superseded") and said.get("attempt"):
            ended.append(answer["item"])
    return ended


class FilterModule:
    """mtt-train-ops filters: a run's watch options and the texts of its outcome."""

    def filters(self) -> dict[str, Any]:
        return {
            "trainops_running_text": running_text,
            "trainops_command": command,
            "trainops_reproduce": invocation_core.reproduce,
            "trainops_stop_lines": stop_lines,
            "trainops_stopped_by_supervisors": outcome_core.stopped_by_supervisors,
            "trainops_silent_nodes_text": outcome_core.silent_nodes_text,
            "trainops_status_text": status_text,
            "trainops_followed_text": followed_text,
            "trainops_moved_text": moved_text,
            "trainops_standby_node": watch_core.standby_node,
            "trainops_watch_options": watch_options,
            "trainops_left_out": left_out,
            "trainops_incident_line": incidents_core.line,
            "trainops_report_run": report_run,
            "trainops_unrecorded_runs": unrecorded_runs,
            "trainops_unrecorded_plans": unrecorded_plans,
            "trainops_ended_unrecorded": ended_unrecorded,
            "trainops_run_record": run_record,
            "trainops_new_run_id": identity_core.new_run_id,
            "trainops_claim_run_dir": identity_core.claim_run_dir,
            "trainops_provenance": provenance,
        }
