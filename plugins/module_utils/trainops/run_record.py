"""The record of one train.yml run: what was decided before and between its attempts, in one place.

``<run_dir>/run.json`` holds the run's options (checked), its launcher's settings and Slurm job, when it started,
the nodes left out of it and why, the master the checks ran on, the dataset's manifest and the resume choice; the
attempts themselves (each plan, outcome and decision) are :mod:`.attempts`' ``attempts.json`` beside it.
``<run_dir>/events.jsonl`` is appended once per change: when, what, and which keys. Both are written whole or not
at all (:mod:`.records`).

train.yml's plays read the record through the ``trainops_run`` variable (the ``trainops_run_record`` filter) and
change it only through the ``train_run`` action, so that no play keeps a part of the run's state in its own facts
and no play reads another host's facts for it.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Mapping
from typing import Any

from . import records

RECORD_FILE = "run.json"
EVENTS_FILE = "events.jsonl"
LOCK_FILE = ".run.lock"
#: What the record holds. ``left_out`` only grows: a change adds nodes to it (with why), never removes one.
KEYS = {
    "started": "the run's start, in seconds since the epoch",
    "options": "the watch and restart options, checked (trainops.watch.watch_options)",
    "slurm": "the launcher's settings, checked (-e launcher=slurm: the Slurm ones)",
    "slurm_job": "the Slurm job of the run: id, nodes, login node ({} with launcher=ssh)",
    "left_out": "node -> why it gets no rank (the incident record, -e exclude_nodes, a health check)",
    "checked_master": "the master of the plan the checks before the launch ran on",
    "manifest": "the dataset's manifest as the master read it (a re-plan plans with it again)",
    "resume": "the resume choice on the master before the first attempt (trainops.checkpoints: resume, saves, adopt, "
    "refused); each attempt's own, later ones included, is in the supervisor's attempts.json",
    "provenance": "what the run runs: the bundle's version, each node's image and stack, the launch environment",
}


class RunRecordError(ValueError):
    """A change the record does not hold (a playbook bug, never a user's)."""


def read(run_dir: str) -> dict[str, Any]:
    """The run's record; {} before train.yml wrote one (a plan.yml plan, a run of an older bundle)."""
    path = os.path.join(run_dir, RECORD_FILE)
    fix = f"move it aside (mv {path} {path}.damaged) and run train.yml again: the run is planned anew"
    return records.read_json(path, "record of this run", fix) or {}


def update(run_dir: str, changes: Mapping[str, Any], event: str, now: float | None = None) -> dict[str, Any]:
    """The record with ``changes`` applied (``left_out`` merged), written whole, and one line in the events."""
    unknown = sorted(set(changes) - set(KEYS))
    if unknown:
        raise RunRecordError(f"the run's record holds no {', '.join(unknown)} (it holds {', '.join(KEYS)})")
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, LOCK_FILE), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two changes at once: the second reads what the first wrote
        record = read(run_dir)
        for key, value in changes.items():
            record[key] = dict(record.get("left_out") or {}, **(value or {})) if key == "left_out" else value
        records.write_json(os.path.join(run_dir, RECORD_FILE), record)
    when = time.time() if now is None else now
    records.append_jsonl(os.path.join(run_dir, EVENTS_FILE), [{"t": round(when, 3), "event": event,
                                                                 "keys": sorted(changes)}])  # fmt: skip
    return record
