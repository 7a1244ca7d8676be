"""Jinja filters over the core: a run's watch options, outcome texts and attempts."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

_CORE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _CORE not in sys.path:
    sys.path.insert(0, _CORE)

from ansible.errors import AnsibleFilterError  # noqa: E402
from trainops import outcome as outcome_core  # noqa: E402
from trainops import plan as plan_core  # noqa: E402
from trainops import recovery as recovery_core  # noqa: E402
from trainops import watch as watch_core  # noqa: E402
from trainops.errors import PlanError  # noqa: E402


def watch_options(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The watcher's options checked and converted (trainops.watch.watch_options); a bad one is refused."""
    try:
        return watch_core.watch_options(raw)
    except PlanError as exc:
        raise AnsibleFilterError("; ".join(exc.problems)) from None


# Thin wrappers over the core's texts and checks; each is documented where it is defined.
def train_outcome(master: str, fanout: Mapping[str, Any], watch: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return outcome_core.train_outcome(master, fanout, watch)


def running_text(
    outcome: Mapping[str, Any], plan: Mapping[str, Any], run_dir: str, slurm_job: Mapping[str, Any] | None = None
) -> str:
    return outcome_core.running_text(plan, outcome, run_dir, slurm_job or None)


def stop_lines(nodes: Sequence[Mapping[str, Any]]) -> list[str]:
    return outcome_core.stop_lines(nodes)


def silent_nodes_text(nodes: Sequence[Mapping[str, Any]], result_key: str, verb: str, then: str) -> str:
    return outcome_core.silent_nodes_text(nodes, result_key, verb, then)


def status_text(probes: Sequence[Mapping[str, Any]]) -> str:
    """status.yml's display, from its probe loop's results (each: ``item.item`` the run dir, ``watch``)."""
    runs = [{"run_dir": probe["item"]["item"], "watch": probe["watch"]} for probe in probes]
    return outcome_core.status_text(runs)


def attempt_record(outcome: Mapping[str, Any], attempt: Any, times: Sequence[Any], summary: Any, marks: Any) -> dict:
    """One attempt's record (trainops.recovery.attempt_record): ``times`` its start and end (epoch seconds),
    ``marks`` the checkpoint it resumed from and the one it left, as the tracker's text ('' for none)."""
    started_at, ended_at = (float(t) for t in times)
    resumed_from, left = (_tracker_iteration(m) for m in marks)
    return recovery_core.attempt_record(int(attempt), started_at, ended_at, outcome, summary, resumed_from, left)


def retry_decision(attempts: Sequence[Mapping[str, Any]], options: Mapping[str, Any], stop: Any, lost: Any, nodes: Any):
    """trainops.recovery.retry_decision with train.yml's options (max_restarts, elastic, min_nodes)."""
    return recovery_core.retry_decision(
        attempts, int(options["max_restarts"]), bool(stop), lost, bool(options.get("elastic")),
        int(options.get("min_nodes") or 1), int(nodes),
    )  # fmt: skip


def replan_note(new: Mapping[str, Any], old: Mapping[str, Any], lost: Mapping[str, str]) -> str:
    return recovery_core.replan_note(old, new, lost)


def lost_nodes(plan: Mapping[str, Any], answering: Sequence[str], hostvars: Mapping[str, Any], key: str) -> dict:
    """The plan's nodes that cannot take part in another attempt (trainops.recovery.lost_nodes); ``key``: the
    registered ping of each node."""
    reach = {n["name"]: hostvars[n["name"]].get(key) if n["name"] in hostvars else None for n in plan["nodes"]}
    return recovery_core.lost_nodes(plan, list(answering), reach)


def _tracker_iteration(text: Any) -> int | None:
    try:
        return plan_core.tracker_iteration(text)
    except PlanError as exc:
        raise AnsibleFilterError("; ".join(exc.problems)) from None


class FilterModule:
    """mtt-train-ops filters: a run's watch options, outcome texts and attempts."""

    def filters(self) -> dict[str, Any]:
        return {
            "trainops_train_outcome": train_outcome,
            "trainops_running_text": running_text,
            "trainops_stop_lines": stop_lines,
            "trainops_silent_nodes_text": silent_nodes_text,
            "trainops_status_text": status_text,
            "trainops_attempt_record": attempt_record,
            "trainops_retry_decision": retry_decision,
            "trainops_lost_nodes": lost_nodes,
            "trainops_replan_note": replan_note,
            "trainops_watch_options": watch_options,
        }
