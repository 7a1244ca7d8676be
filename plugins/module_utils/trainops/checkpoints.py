"""Checkpoints the run can trust: each save's verdict, the save to resume from, retention and the disk guard.

The node side (``trainops/node/checkpoint_scan.py``, in the training container) only reads: for every
``iter_NNNNNNN/`` of the checkpoint directory its files and sizes, what the format's own index says each file must
hold (torch_dist's ``.metadata``: every shard's file and end offset), a fingerprint of sampled tensor bytes, the
tracker's text and the free space. Everything here is pure and judges that listing:

* :func:`judge`: one verdict per save: ``verified``, ``bad`` (with every reason) or ``pending`` (newer than the
  tracker while the run goes on: Megatron writes the tracker after a save is complete);
* :func:`choose`: the save to resume from (the newest verified one that has not failed to load) and the newer ones
  to set aside (moved, never deleted), with the tracker to write;
* :func:`retention`: the verified saves ``keep_checkpoints`` / ``keep_every`` let go, never the newest verified
  one, the tracker's or an unverified one, and nothing while the newest save is unverified;
* :func:`disk`: the free space against the plan's checkpoint size.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

VERIFIED, BAD, PENDING = "verified", "bad", "pending"
#: A save's total size against the plan's prediction: within a factor of this either way (the prediction counts
#: weights and Adam's state, 14 B per parameter; formats add a little, and the smoke job's model is its own).
PLAN_SIZE_FACTOR = 2.0
#: ... and against the save before it (the same model and optimizer: the same bytes, give or take metadata).
PREVIOUS_SIZE_TOLERANCE = 0.25
#: The files a torch_dist save needs besides its shards: the index, the common state, Megatron's own marker.
TORCH_DIST_FILES = (".metadata", "common.pt", "metadata.json")
_ITER = re.compile(r"^iter_(\d{7,})$")
_SHARD = re.compile(r"^__(\d+)_(\d+)\.distcp$")


def iteration_of(name: str) -> int | None:
    """10 for ``iter_0000010``; None for any other name."""
    match = _ITER.match(name)
    return int(match.group(1)) if match else None


def save_format(files: Mapping[str, int]) -> str:
    """``torch_dist`` (a ``.metadata`` or ``*.distcp`` shards), ``torch`` (Megatron's legacy ``mp_rank_*``),
    ``smoke`` (the smoke job's ``smoke.pt``) or ``unknown``."""
    if ".metadata" in files or any(_SHARD.match(name) for name in files):
        return "torch_dist"
    if any(name.startswith("mp_rank_") for name in files):
        return "torch"
    if "smoke.pt" in files:
        return "smoke"
    return "unknown"


def _mib(value: float) -> str:
    return f"{value / 2**20:,.2f} MiB"


def _file_reasons(save: Mapping[str, Any], plan: Mapping[str, Any]) -> list[str]:
    """What the save's files lack: the format's files, a shard its index names, bytes its index promises."""
    files: Mapping[str, int] = save.get("files") or {}
    kind = save_format(files)
    reasons = [f"{name} is empty" for name, size in sorted(files.items()) if size == 0]
    if kind == "torch_dist":
        reasons += [f"{name} is missing" for name in TORCH_DIST_FILES if name not in files]
        if save.get("index_error"):
            reasons.append(f".metadata cannot be read ({save['index_error']})")
        for name, need in sorted((save.get("needed") or {}).items()):
            if name not in files:
                reasons.append(f"{name} is missing (.metadata names it)")
            elif files[name] < need:
                reasons.append(f"{name} is truncated: {files[name]:,} of the {need:,} bytes .metadata names")
    elif kind == "torch":
        ranks = int(plan.get("tp") or 1) * int(plan.get("pp") or 1)
        found = {name.split("/")[0] for name in files if name.startswith("mp_rank_")}
        if len(found) < ranks:
            reasons.append(f"{len(found)} of the {ranks} mp_rank_* directories the plan's tp x pp needs")
    elif kind == "unknown":
        reasons.append(
            "no checkpoint files (no .metadata, mp_rank_* or smoke.pt)" if files else "the directory is empty"
        )
    return reasons


def _size_reasons(entry: Mapping[str, Any], plan: Mapping[str, Any], previous: Mapping[str, Any] | None) -> list[str]:
    total = entry["bytes"]
    reasons = []
    predicted = plan.get("checkpoint_bytes")
    if predicted and plan.get("job") != "smoke" and entry["format"] != "smoke":
        if not predicted / PLAN_SIZE_FACTOR <= total <= predicted * PLAN_SIZE_FACTOR:
            reasons.append(
                f"{_mib(total)} in all, the plan predicts {_mib(predicted)} (more than {PLAN_SIZE_FACTOR:g} x apart)"
            )
    if (
        previous is not None
        and previous["bytes"]
        and abs(total - previous["bytes"]) > PREVIOUS_SIZE_TOLERANCE * previous["bytes"]
    ):
        reasons.append(
            f"{_mib(total)} in all, iteration {previous['iteration']}'s save has {_mib(previous['bytes'])} "
            f"(more than {PREVIOUS_SIZE_TOLERANCE:.0%} apart)"
        )
    return reasons


def judge(
    listing: Mapping[str, Any],
    plan: Mapping[str, Any],
    running: bool = False,
    failed_loads: Mapping[str, Any] | None = None,
    known: Sequence[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """Every save of ``listing`` (the node's scan) with its verdict, oldest first.

    ``running``: the run goes on, so a save newer than the tracker is being written (``pending``); otherwise it
    did not finish (``bad``). ``failed_loads``: iteration (as text) -> why an attempt could not resume from it.
    ``known``: the verdicts of an earlier scan; a save the scan lists by name alone (``partial``) keeps its known
    verdict. Each save is compared with the newest verified save before it (size, fingerprint)."""
    tracker = tracker_value(listing.get("tracker"))
    failed_loads = failed_loads or {}
    before = {entry["name"]: entry for entry in known}
    out: list[dict[str, Any]] = []
    previous: dict[str, Any] | None = None
    for save in sorted(listing.get("saves") or [], key=lambda s: s["iteration"]):
        if save.get("partial"):
            entry = before.get(save["name"])
            if entry is None or entry["verdict"] == PENDING:
                continue  # not read this time and not known: the next full scan judges it
            entry = dict(entry)
            if str(save["iteration"]) in failed_loads and entry["verdict"] == VERIFIED:
                entry.update(verdict=BAD, reasons=[_failed_load(save["iteration"], failed_loads)])
            out.append(entry)
            if entry["verdict"] == VERIFIED:
                previous = entry
            continue
        files = save.get("files") or {}
        entry = {
            "iteration": save["iteration"],
            "name": save["name"],
            "format": save_format(files),
            "bytes": sum(files.values()),
            "files": len(files),
            "mtime": save.get("mtime"),
            "fingerprint": save.get("fingerprint"),
        }
        if tracker is None or save["iteration"] > tracker:
            if running:
                out.append(dict(entry, verdict=PENDING, reasons=["newer than the tracker: being written"]))
                continue
            shown = f"({tracker})" if tracker is not None else "(none)"
            reasons = [f"newer than the tracker {shown}: the save did not finish"]
        else:
            reasons = []
        reasons += _file_reasons(save, plan) + _size_reasons(entry, plan, previous)
        if save.get("read_error"):
            reasons.append(f"cannot be read ({save['read_error']})")
        if previous is not None and entry["fingerprint"] and entry["fingerprint"] == previous.get("fingerprint"):
            reasons.append(
                f"the same sampled tensor bytes as iteration {previous['iteration']}'s save "
                "(a save of a training run that changed nothing, or a copy)"
            )
        if str(save["iteration"]) in failed_loads:
            reasons.append(_failed_load(save["iteration"], failed_loads))
        entry.update(verdict=BAD if reasons else VERIFIED, reasons=reasons)
        out.append(entry)
        if not reasons:
            previous = entry
    return out


def _failed_load(iteration: int, failed_loads: Mapping[str, Any]) -> str:
    return f"an attempt could not resume from it ({failed_loads[str(iteration)]})"


def tracker_value(text: Any) -> int | None:
    """The tracker's iteration (``release`` is 0); None for no tracker or text that is not an iteration."""
    if text is None:
        return None
    value = str(text).strip()
    if value == "release":
        return 0
    return int(value) if value.isascii() and value.isdigit() else None


def choose(saves: Sequence[Mapping[str, Any]], tracker_text: Any) -> dict[str, Any]:
    """The save to resume from and what must change for it.

    ``{"iteration": N | None, "set_aside": [{"name", "iteration", "reasons"}], "tracker": "N" | None, "lines"}``:
    the newest verified save; every save newer than it is set aside (it is unverified, or failed to load), and the
    tracker is written anew when it does not name the chosen save (``None``: leave it as it is). With saves but
    none verified, ``iteration`` is None and ``refused`` says why (a fresh start would throw their work away)."""
    tracker = tracker_value(tracker_text)
    verified = [s for s in saves if s["verdict"] == VERIFIED]
    chosen = max(verified, key=lambda s: s["iteration"]) if verified else None
    newest = chosen["iteration"] if chosen else -1
    aside = [
        {"name": s["name"], "iteration": s["iteration"], "reasons": list(s["reasons"])}
        for s in saves
        if s["iteration"] > newest
    ]
    lines = [
        f"checkpoint   iteration {s['iteration']} set aside (not resumed from): {'; '.join(s['reasons'])}"
        for s in aside
    ]
    out: dict[str, Any] = {"iteration": chosen["iteration"] if chosen else None, "set_aside": aside, "lines": lines}
    out["tracker"] = str(chosen["iteration"]) if chosen and tracker != chosen["iteration"] else None
    if tracker is not None and tracker > 0 and all(s["iteration"] != tracker for s in saves):
        lines.append(f"checkpoint   the tracker names iteration {tracker}, which is not there (no iter_{tracker:07d}/)")
    if str(tracker_text or "").strip() and tracker is None:
        lines.append(f"checkpoint   the tracker holds {str(tracker_text).strip()!r}, not an iteration")
    if chosen is None and saves:
        out["refused"] = f"none of the {len(saves)} saves is verified: " + "; ".join(
            f"iteration {s['iteration']}: {'; '.join(s['reasons'])}" for s in saves
        )
    elif chosen and aside:
        lines.append(f"checkpoint   resuming from iteration {chosen['iteration']}, the newest verified save")
    return out


def retention(
    saves: Sequence[Mapping[str, Any]], keep: int, keep_every: int = 0, tracker_text: Any = None
) -> dict[str, Any]:
    """The saves ``keep`` (the newest K verified) and ``keep_every`` (milestones: iteration % M == 0) let go.

    Never the newest verified save, the one the tracker names, an unverified one; nothing at all while the newest
    save is unverified (it may be the one a resume needs next). ``{"delete": [...], "frees_bytes", "held": why}``."""
    none: dict[str, Any] = {"delete": [], "frees_bytes": 0, "held": None}
    if keep <= 0 or not saves:
        return none
    newest = max(saves, key=lambda s: s["iteration"])
    if newest["verdict"] != VERIFIED:
        return dict(none, held=f"iteration {newest['iteration']}'s save is {newest['verdict']}: nothing is removed")
    tracker = tracker_value(tracker_text)
    verified = sorted((s for s in saves if s["verdict"] == VERIFIED), key=lambda s: -s["iteration"])
    kept = {s["iteration"] for s in verified[: max(keep, 1)]}
    delete = [
        s
        for s in verified
        if s["iteration"] not in kept
        and s["iteration"] != tracker
        and not (keep_every and s["iteration"] % keep_every == 0)
    ]
    delete.sort(key=lambda s: s["iteration"])
    return {
        "delete": [{"name": s["name"], "iteration": s["iteration"], "bytes": s["bytes"]} for s in delete],
        "frees_bytes": sum(s["bytes"] for s in delete),
        "held": None,
    }


def disk(free_bytes: int | None, checkpoint_bytes: int | None, where: str) -> dict[str, Any]:
    """The disk guard: ``{"level": ok|warn|refuse|unknown, "line", "free_bytes", "checkpoint_bytes"}``: under two
    saves' worth of free space where checkpoints go warns, under one refuses a launch (and is reported mid-run)."""
    sizes = {"free_bytes": free_bytes, "checkpoint_bytes": checkpoint_bytes}
    if free_bytes is None or not checkpoint_bytes:
        return {"level": "unknown", "line": "", **sizes}
    saves = free_bytes / checkpoint_bytes
    text = f"{_mib(free_bytes)} free at {where}, a checkpoint of this plan takes {_mib(checkpoint_bytes)}"
    if saves < 1:
        level, text = "refuse", f"{text}: not one checkpoint fits"
    elif saves < 2:
        level, text = "warn", f"{text}: room for {saves:.1f} checkpoint(s), under two"
    else:
        level = "ok"
    return {"level": level, "line": text, **sizes}


def newest_verified(saves: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The newest verified save, or None."""
    verified = [s for s in saves if s["verdict"] == VERIFIED]
    return dict(max(verified, key=lambda s: s["iteration"])) if verified else None


#: The run's ledger in its controller directory (and the node's copy in the run directory on the master).
LEDGER_FILE = "checkpoints.json"


class CheckpointWatch:
    """The watcher's side of the checkpoints, fed one scan at a time; knows nothing of how commands run.

    After Megatron (or the smoke job) says a save is done, :attr:`wants_scan`: the caller runs :meth:`scan_argv`
    in the master's container and gives the reply to :meth:`on_scan`, which judges the new saves (those already
    judged are listed by name alone), prints one line per verdict, and, with ``keep_checkpoints``, asks
    (:attr:`wants_apply`) to remove what retention lets go: :meth:`apply_argv` with :meth:`apply_input` on stdin,
    whose reply goes to :meth:`on_apply`. :meth:`suffix` is the progress line's part, :meth:`result` the ledger."""

    def __init__(
        self, plan: Mapping[str, Any], programs: str, options: Mapping[str, Any], known: Sequence[Mapping] = ()
    ) -> None:
        self.plan = plan
        self.scanner = f"{programs}/checkpoint_scan.py"  # the node package's, in the master's container
        self.enabled = bool(options.get("verify_checkpoints", True))
        self.keep = int(options.get("keep_checkpoints") or 0)
        self.keep_every = int(options.get("keep_every") or 0)
        self.dry_run = bool(options.get("keep_dry_run"))
        self.saves: list[dict[str, Any]] = [dict(s) for s in known]
        self.removed: list[dict[str, Any]] = []
        self.would_remove: list[dict[str, Any]] = []
        self.disk: dict[str, Any] = {"level": "unknown", "line": ""}
        self.tracker: str | None = None
        self.wants_scan = False
        self.wants_apply = False
        self._remove: list[dict[str, Any]] = []
        self.scan_error: str | None = None

    def note_saved(self, iteration: int) -> None:
        """Megatron's "successfully saved checkpoint" line: a scan is due."""
        self.wants_scan = self.enabled

    def scan_argv(self) -> list[str]:
        final = sorted(s["iteration"] for s in self.saves if s["verdict"] in (VERIFIED, BAD))
        return ["python3", self.scanner, "scan", self.plan["checkpoint_dir"], "--skip", ",".join(map(str, final))]

    def on_scan(self, reply: Mapping[str, Any], wall: float, running: bool = True) -> list[str]:
        self.wants_scan = False
        if reply.get("unreachable") or reply.get("failed"):
            self.scan_error = (reply.get("msg") or reply.get("stderr") or "no answer").strip()[:300]
            return [f"checkpoint   the scan of {self.plan['checkpoint_dir']} failed: {self.scan_error}"]

        listing = json.loads(reply.get("stdout") or "{}")
        self.tracker = listing.get("tracker")
        before = {s["name"]: s["verdict"] for s in self.saves}
        judged = judge(listing, self.plan, running=running, known=self.saves)
        lines = []
        for entry in judged:
            if before.get(entry["name"]) in (VERIFIED, BAD) or entry["verdict"] == PENDING:
                continue
            entry["judged_at"] = round(wall, 1)
            after = f" ({wall - entry['mtime']:.1f} s after it was written)" if entry.get("mtime") else ""
            if entry["verdict"] == VERIFIED:
                lines.append(
                    f"checkpoint   iteration {entry['iteration']} verified: {_mib(entry['bytes'])}, "
                    f"{entry['files']} files{after}"
                )
            else:
                lines.append(
                    f"[WARNING] checkpoint iteration {entry['iteration']} is not to be trusted: "
                    f"{'; '.join(entry['reasons'])} (no resume will use it; it is kept)"
                )
        self.saves = judged
        disk_now = disk(listing.get("free_bytes"), self.plan.get("checkpoint_bytes"), self.plan["checkpoint_dir"])
        if disk_now["level"] in ("warn", "refuse") and disk_now["level"] != self.disk["level"]:
            lines.append(f"[WARNING] checkpoint disk: {disk_now['line']}")
        self.disk = disk_now
        lines += self._retention()
        return lines

    def _retention(self) -> list[str]:
        if not self.keep:
            return []
        plan = retention(self.saves, self.keep, self.keep_every, self.tracker)
        if self.dry_run:
            new = [s for s in plan["delete"] if s not in self.would_remove]
            self.would_remove += new
            return [
                f"checkpoint   keep_dry_run: keep_checkpoints={self.keep} would remove iteration {s['iteration']} "
                f"({_mib(s['bytes'])} freed)"
                for s in new
            ]
        self._remove = plan["delete"]
        self.wants_apply = bool(self._remove)
        return []

    def apply_argv(self) -> list[str]:
        return ["python3", self.scanner, "apply", self.plan["checkpoint_dir"]]

    def apply_input(self) -> dict[str, Any]:
        return {
            "remove": [s["name"] for s in self._remove],
            "ledger": self.result(),
            "ledger_path": f"{self.plan['run_dir']}/{LEDGER_FILE}",
        }

    def on_apply(self, reply: Mapping[str, Any], wall: float) -> list[str]:
        self.wants_apply = False
        if reply.get("unreachable") or reply.get("failed"):
            why = (reply.get("msg") or reply.get("stderr") or "no answer").strip()[:300]
            return [f"checkpoint   retention could not remove saves: {why}"]

        gone = set(json.loads(reply.get("stdout") or "{}").get("removed") or [])
        lines = []
        for save in self._remove:
            if save["name"] in gone:
                self.removed.append(dict(save, removed_at=round(wall, 1)))
                lines.append(
                    f"checkpoint   removed iteration {save['iteration']} (keep_checkpoints={self.keep}): "
                    f"{_mib(save['bytes'])} freed"
                )
        self.saves = [s for s in self.saves if s["name"] not in gone]
        self._remove = []
        return lines

    def suffix(self, wall: float) -> str:
        """``ckpt 10 verified 12 s ago`` (and the disk's warning) for the progress line; empty before any save."""
        last = newest_verified(self.saves)
        parts = []
        if last is not None:
            age = wall - (last.get("mtime") or wall)
            parts.append(f"ckpt {last['iteration']} verified {age:.0f} s ago")
        if self.disk["level"] in ("warn", "refuse"):
            parts.append("ckpt disk " + ("full" if self.disk["level"] == "refuse" else "low"))
        return ", ".join(parts)

    def result(self) -> dict[str, Any]:
        return {
            "saves": self.saves,
            "removed": self.removed,
            "would_remove": self.would_remove,
            "disk": self.disk,
            "tracker": self.tracker,
            "scan_error": self.scan_error,
        }
