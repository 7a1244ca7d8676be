"""The run's metrics, as the run's supervisor serves them to Prometheus (``-e metrics_port``, docs/monitoring.md).

:func:`families` turns what the supervisor knows after each probe (the plan, its watch's result, the attempts'
state) into metric families of plain data; ``node/supervise.py`` hands them to prometheus-client, which writes the
exposition format. Every family is labelled with the run (``exp``, ``run_id``); a rank's with its ``node`` and
``rank`` too. Nothing else goes into a label: no path, no argument, no environment (docs/monitoring.md, "What the
endpoint exposes").

:data:`METRICS` lists every family, its type, unit and help, once: the docs' table is held to it by a test.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .checkpoints import BAD, VERIFIED

#: The run states of ``trainops_run_state`` (one series each, 1 for the current one).
STATES = ("starting", "running", "judging", "restarting", "finished", "failed", "stopped")


@dataclass(frozen=True)
class Metric:
    name: str
    kind: str  # gauge | counter
    help: str
    labels: tuple[str, ...] = ("exp", "run_id")


#: Every family the endpoint serves, in the order served.
METRICS = (
    Metric("trainops_iteration", "gauge", "The last training iteration the run's logs reported."),
    Metric("trainops_iterations_planned", "gauge", "The iterations the run is planned to train (train_iters)."),
    Metric("trainops_lm_loss", "gauge", "The language-model loss of the last iteration reported."),
    Metric("trainops_step_seconds", "gauge", "Seconds per iteration, as the last iteration line reported it."),
    Metric("trainops_tokens_per_second_per_card", "gauge", "Tokens per second per card at the last step time."),
    Metric("trainops_tflops_per_card", "gauge", "TFLOP/s per card that Megatron reported for the last iteration."),
    Metric(
        "trainops_mfu_ratio",
        "gauge",
        "Model FLOPs utilisation: TFLOP/s per card over the card's stated peak "
        "for the plan's precision (served only where the peak is known).",
    ),  # fmt: skip
    Metric("trainops_attempt", "gauge", "The attempt now running or last run (1 for the first launch)."),
    Metric("trainops_restarts_total", "counter", "Attempts launched after a failed one."),
    Metric("trainops_run_state", "gauge", "1 for the run's state now, 0 for the others.", ("exp", "run_id", "state")),
    Metric("trainops_seconds_since_progress", "gauge", "Seconds since the last new iteration line."),
    Metric(
        "trainops_hang_limit_seconds", "gauge", "Seconds without progress after which the run is diagnosed as hung."
    ),
    Metric("trainops_checkpoint_verified_iteration", "gauge", "The iteration of the newest verified save."),
    Metric("trainops_checkpoint_verified_age_seconds", "gauge", "Seconds since the newest verified save was written."),
    Metric("trainops_checkpoint_unverified_saves", "gauge", "Saves of this run the verification does not trust."),
    Metric("trainops_checkpoint_disk_free_bytes", "gauge", "Free bytes where the run's checkpoints go."),
    Metric("trainops_checkpoint_bytes", "gauge", "Bytes one checkpoint of this plan takes (the plan's estimate)."),
    Metric(
        "trainops_straggler_slowness_ratio",
        "gauge",
        "A straggler rank's compute time over the median of the other ranks' (only ranks named stragglers).",
        ("exp", "run_id", "node", "rank"),
    ),  # fmt: skip
    Metric(
        "trainops_goodput_ratio",
        "gauge",
        "The share of the run's wall time that trained iterations kept: the "
        "iterations gained since the run began at the last step time, over the seconds since it began.",
    ),  # fmt: skip
    Metric("trainops_run_started_timestamp_seconds", "gauge", "When the run began (train.yml), Unix time."),
)
BY_NAME = {metric.name: metric for metric in METRICS}


@dataclass
class Family:
    """One metric family's samples: ``(label values in the order of its labels, value)``."""

    metric: Metric
    samples: list[tuple[tuple[str, ...], float]] = field(default_factory=list)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def run_state(watch: Mapping[str, Any] | None, view: Mapping[str, Any] | None) -> str:
    """The run's state for ``trainops_run_state``: from the attempt's outcome and the decision after it."""
    outcome = (view or {}).get("outcome") or watch or {}
    state = outcome.get("state")
    if state in (None, "running"):
        iteration = ((watch or {}).get("last_iteration") or {}).get("iteration")
        return "running" if iteration is not None else "starting"
    if state == "failed":
        if outcome.get("kind") == "stopped":
            return "stopped"
        if view is not None and not view.get("decision"):
            return "judging"  # the supervisor gathers the logs and checks the nodes before it decides
        return "restarting" if (view or {}).get("next") in ("relaunch", "replan") else "failed"
    return "finished" if state == "finished" else "failed"


def families(
    plan: Mapping[str, Any],
    watch: Mapping[str, Any] | None,
    view: Mapping[str, Any] | None,
    run_started: float,
    now: float,
    stragglers: Sequence[Mapping[str, Any]] = (),
    began_at_iteration: int | None = None,
) -> list[Family]:
    """The run's metric families now. ``watch``: the current attempt's :meth:`trainops.watch.Watcher.result` (None
    before its first probe); ``view``: the attempts' :meth:`trainops.attempts.Attempts.view` (None before the first
    launch); ``stragglers``: the watch's named stragglers (node, rank, ratio); ``began_at_iteration``: the iteration
    the run's first attempt resumed from (None: from scratch); ``now``: the wall clock."""
    watch = watch or {}
    base = (str(plan["exp_name"]), str(plan["run_id"]))
    last = watch.get("last_iteration") or {}
    values: dict[str, float | None] = {}
    iteration = _number(last.get("iteration"))
    values["trainops_iteration"] = iteration
    values["trainops_iterations_planned"] = _number(last.get("train_iters") or plan.get("train_iters"))
    values["trainops_lm_loss"] = _number((last.get("losses") or {}).get("lm loss"))
    step_ms = _number(last.get("elapsed_ms"))
    step = step_ms / 1000 if step_ms else None
    values["trainops_step_seconds"] = step
    batch = last.get("global_batch_size") or plan.get("global_batch_size")
    if step and batch and plan.get("seq_length") and plan.get("world_size"):
        values["trainops_tokens_per_second_per_card"] = batch * plan["seq_length"] / step / plan["world_size"]
    tflops = _number(last.get("tflops_per_gpu"))
    values["trainops_tflops_per_card"] = tflops
    peak = _number(plan.get("peak_tflops_per_card"))
    values["trainops_mfu_ratio"] = tflops / peak if tflops is not None and peak else None
    number = int((view or {}).get("number") or watch.get("attempt") or 1)
    values["trainops_attempt"] = float(number)
    values["trainops_restarts_total"] = float(number - 1)
    values["trainops_seconds_since_progress"] = _number(watch.get("seconds_since_progress"))
    values["trainops_hang_limit_seconds"] = _number(watch.get("hang_limit_s"))
    checkpoints = watch.get("checkpoints") or {}
    saves = [save for save in checkpoints.get("saves") or [] if isinstance(save, Mapping)]
    verified = [save for save in saves if save.get("verdict") == VERIFIED]
    if verified:
        newest = max(verified, key=lambda save: save["iteration"])
        values["trainops_checkpoint_verified_iteration"] = float(newest["iteration"])
        written = _number(newest.get("mtime"))
        values["trainops_checkpoint_verified_age_seconds"] = max(0.0, now - written) if written else None
    # saves the verification does not trust (bad), not those still being written (pending)
    values["trainops_checkpoint_unverified_saves"] = float(len([save for save in saves if save.get("verdict") == BAD]))
    disk = checkpoints.get("disk") or {}
    values["trainops_checkpoint_disk_free_bytes"] = _number(disk.get("free_bytes"))
    values["trainops_checkpoint_bytes"] = _number(plan.get("checkpoint_bytes"))
    if iteration is not None and step and now > run_started:
        gained = iteration - (began_at_iteration or 0)
        values["trainops_goodput_ratio"] = min(1.0, max(0.0, gained * step / (now - run_started)))
    values["trainops_run_started_timestamp_seconds"] = _number(run_started)

    state = run_state(watch, view)
    found = []
    for metric in METRICS:
        family = Family(metric)
        if metric.name == "trainops_run_state":
            family.samples = [((*base, name), 1.0 if name == state else 0.0) for name in STATES]
        elif metric.name == "trainops_straggler_slowness_ratio":
            family.samples = [
                ((*base, str(row["node"]), str(row["rank"])), float(row["ratio"]))
                for row in stragglers
                if _number(row.get("ratio")) is not None
            ]
        elif values.get(metric.name) is not None:
            family.samples = [(base, float(values[metric.name]))]
        found.append(family)
    return found
