"""The watcher: its options, what its probes report, and its verdicts on a run.

* :func:`watch_options` turns train.yml's ``-e`` options (or inventory variables) into numbers and refuses a bad one
  naming the option, the value and what is accepted, before any node is touched.
* :class:`WatchRequest` is the one definition of the ``train_watch`` action's arguments (types, defaults,
  descriptions); the module's documentation is held to :meth:`WatchRequest.argument_spec` by a unit test.
* :class:`Watcher` is the watch itself, fed one probe at a time: :func:`parse_probe` reads the probe's output,
  :class:`Progress` keeps the last iteration, its clock, the saves and the straggler reports, :func:`judge_nodes`
  judges the nodes' launch states, and a stall past the hang limit asks for ``diagnose.sh``, whose output names
  the culprit (:func:`.hang.diagnose`). The action plugin only runs the commands, sleeps and prints what it is given.

Every failure has a kind (:data:`.kinds.KINDS`): ``lost``, ``exited``, ``killed``, ``not started``, ``stopped``,
``hang``.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import re
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from . import hang, records, straggler
from .checkpoints import CheckpointWatch
from .cluster import node_ranks, ranks_of
from .errors import PlanError
from .kinds import KINDS
from .megatron_log import parse_lines
from .options import OPTIONS, OptionError, convert
from .run_report import progress_line

#: The run's options that the watch and its supervisor read (their types, ranges and defaults are
#: :data:`.options.OPTIONS`'): stop_grace for its stops, health_max_age for the full checks its health check carries,
#: supervisor_host for where it runs ("" or None: the master's container), metrics_port for its metrics endpoint.
NAMES = (
    "train_wait", "poll_interval", "progress_interval", "start_timeout", "wait", "fresh", "hang_timeout", "on_hang",
    "straggler_ratio", "max_restarts", "elastic", "min_nodes", "incident_limit", "incident_window_days",
    "health", "exclude_nodes", "use_nodes", "verify_checkpoints", "keep_checkpoints", "keep_every", "keep_dry_run",
    "stop_grace", "health_max_age", "supervisor_host", "metrics_port",
)  # fmt: skip


def watch_options(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Every option of the watcher, checked and converted; raises :class:`PlanError` listing each bad one.

    Each value is judged by its entry in :data:`.options.OPTIONS` (a missing one takes its default; ``hang_timeout``
    ``auto`` becomes None: ``max(10 x p90 time between iteration lines, 300 s)``). The rules between them:
    ``hang_timeout`` at least ``poll_interval``; ``elastic`` needs ``max_restarts``. (``max_restarts`` with
    ``wait=false`` is a run restarted by its supervisor with no terminal following it.)
    """
    problems: list[str] = []
    out: dict[str, Any] = {}
    for name in NAMES:
        option = OPTIONS[name]
        try:
            out[name] = convert(option, raw.get(name, option.default))
        except OptionError as exc:
            problems.append(str(exc))
            out[name] = None if name == "hang_timeout" else option.default
    if out["hang_timeout"] == "auto":
        out["hang_timeout"] = None
    hang, poll = out["hang_timeout"], out["poll_interval"]
    if hang is not None and poll and hang < poll:
        problems.append(
            f"-e hang_timeout={raw.get('hang_timeout')!r} is shorter than poll_interval ({poll:g} s): "
            "a hang could not be seen that fast"
        )
    if out["elastic"] and not out["max_restarts"]:
        problems.append("-e elastic=true re-plans at a restart: give -e max_restarts=N (N >= 1) too")
    if problems:
        raise PlanError(problems)
    return out


def parse_diagnosis(text: str, node_names: list[str]) -> dict[str, dict[str, Any]]:
    """``diagnose.sh``'s output: node -> rank_probe.py's report with ``reachable``, or why it is missing."""
    reports: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        fields = line.split("\t", 3)
        if len(fields) < 4 or fields[0] != "diag":
            continue
        name, verdict, detail = fields[1], fields[2], fields[3]
        if verdict == "ok":
            try:
                report = json.loads(detail)
            except ValueError:
                reports[name] = {"reachable": True, "probe_error": f"unreadable probe output: {detail[:200]}"}
                continue
            reports[name] = dict(report, reachable=True)
        elif verdict == "unreachable":
            reports[name] = {"reachable": False, "error": detail.strip() or "no answer"}
        else:
            reports[name] = {"reachable": True, "probe_error": detail.strip() or "the probe failed"}
    for name in node_names:
        reports.setdefault(name, {"reachable": True, "probe_error": "diagnose.sh printed nothing for this node"})
    return reports


#: A node unreachable for this many probes in a row has failed (one lost probe is forgiven).
UNREACHABLE_PROBES = 2
#: Straggler reports the progress line looks back over (it names none before it has MIN_REPORTS of them).
RECENT_REPORTS = 2 * straggler.MIN_REPORTS
#: Seconds between probes once the run's end is near (its last iteration seen, or a node's launch exited), so
#: that train.yml returns within about a second of the run's end, not up to a whole poll_interval after it.
ENDING_POLL_S = 1.0
#: A stall's diagnoses by confidence: a run's finding is its most confident diagnosis (the latest of equals).
CONFIDENCE = {"low": 0, "medium": 1, "high": 2}
#: How many later, less confident diagnoses a finding lists (on_hang=warn diagnoses again after every limit).
LATER_KEPT = 5


def _arg(kind: str, doc: str, default: Any = MISSING, choices: tuple[str, ...] = (), option: str = "") -> Any:
    """One argument; ``option``: the train.yml option it also is (its default is the schema's)."""
    if option:
        default = OPTIONS[option].default
    return field(default=default, metadata={"kind": kind, "doc": doc, "choices": choices, "option": option})


@dataclass(frozen=True, kw_only=True)
class WatchRequest:
    """The arguments of the ``train_watch`` action (train.yml watches a run; status.yml probes it once)."""

    plan: Mapping[str, Any] = _arg(
        "dict", "The run's plan (C(plan.json)) with its master, nodes, ranks, tokens per iteration and train_iters."
    )
    probe: str = _arg(
        "str", "The run's C(probe.sh) inside the container (C(<run_dir>/probe.sh), rendered with the run)."
    )
    container: str = _arg("str", "Name of the training container on the master.", "train")
    programs: str = _arg(
        "str",
        "The node package's programs in the container (C(/opt/mtt-train-ops/<version>/trainops/node), installed by "
        "the node_package role); the checkpoint scanner runs from there.",
    )
    attempt: int = _arg("int", "The attempt's number (the supervisor sets it for each attempt it watches).", 1)
    diagnose: str | None = _arg(
        "str", "The run's C(diagnose.sh) inside the container; defaults to the one beside O(probe).", None
    )
    wait: float = _arg(
        "float",
        "Seconds to follow the run's supervisor before returning C(running) while the run goes on (the supervisor "
        "watches on); 0 probes once from the controller.",
        None,
        option="train_wait",
    )
    poll_interval: float = _arg("float", "Seconds between probes (at least 1).", None, option="poll_interval")
    progress_interval: float = _arg(
        "float",
        "Seconds between progress lines; 0 prints one at every new iteration.",
        None,
        option="progress_interval",
    )
    start_timeout: float = _arg(
        "float",
        "Seconds a node may take to start its launch before the run is failed, naming it.",
        None,
        option="start_timeout",
    )
    hang_timeout: Any = _arg(
        "raw",
        "Seconds without a new iteration line before the run is diagnosed as hung, or C(auto) (C(max(10 x p90 time "
        "between iteration lines, 300 s)); at least 1,800 s before the first iteration and while a checkpoint is "
        "being saved).",
        None,
        option="hang_timeout",
    )
    on_hang: str = _arg("str", "What a diagnosed hang does.", None, ("stop", "warn"), option="on_hang")
    straggler_ratio: float = _arg(
        "float",
        "A rank whose compute time over a window of straggler reports is at least this many times the median of the "
        "other ranks' is named a straggler.",
        None,
        option="straggler_ratio",
    )
    evidence_dir: str | None = _arg(
        "path", "Controller directory of the run; a hang's evidence goes to its C(hang/) subdirectory.", None
    )
    tail: bool = _arg(
        "bool",
        "Judge a run already going (status.yml, or a supervisor taking a watch up): the first probe reads the last "
        "256 KiB of the logs, and the last iteration is dated by the log's age.",
        False,
    )
    options: Mapping[str, Any] | None = _arg(
        "dict",
        "train.yml's checked options as one mapping (the C(trainops_watch_options) filter's), each of C(train_wait), "
        "C(poll_interval), C(progress_interval), C(start_timeout), C(hang_timeout), C(on_hang) and "
        "C(straggler_ratio) sets its argument unless that argument is given itself; C(max_restarts) > 0 sets "
        "O(restart_mark).",
        None,
    )
    verify_checkpoints: bool = _arg(
        "bool",
        "After each save Megatron reports, scan the checkpoint directory on the master "
        "(O(programs)C(/checkpoint_scan.py)) "
        "and judge the new save (docs/checkpoints.md).",
        None,
        option="verify_checkpoints",
    )
    keep_checkpoints: int = _arg(
        "int", "Keep the newest N verified saves and remove older ones (0 keeps all).", None, option="keep_checkpoints"
    )
    keep_every: int = _arg(
        "int",
        "With O(keep_checkpoints), also keep every save whose iteration is a multiple of M.",
        None,
        option="keep_every",
    )
    keep_dry_run: bool = _arg(
        "bool", "With O(keep_checkpoints), only say what would be removed.", None, option="keep_dry_run"
    )
    known_checkpoints: list | None = _arg(
        "list", "The verdicts an earlier attempt of the run gave (the saves it judged are not read again).", None
    )
    restart_mark: bool = _arg(
        "bool",
        "The run has train.yml's restart mark (C(<run_dir>/restarting), C(-e max_restarts)); when stop.yml removes "
        "it, the watch ends the attempt as C(failed) with kind C(stopped), so no attempt outlives stop.yml.",
        False,
    )

    @classmethod
    def from_args(cls, args: Mapping[str, Any], given: Sequence[str]) -> WatchRequest:
        """The request from the action's validated ``args``: ``options`` fills each argument not in ``given``."""
        values = dict(args)
        options = values.pop("options", None) or {}
        for f in fields(cls):
            name = f.metadata["option"]
            if name and name in options and f.name not in given:
                values[f.name] = options[name]
        if "max_restarts" in options and "restart_mark" not in given:
            values["restart_mark"] = int(options["max_restarts"] or 0) > 0
        if values.get("hang_timeout") is None:
            values["hang_timeout"] = "auto"
        return cls(**values)

    def to_json(self) -> str:
        """The request as JSON (what the supervisor reads back with ``WatchRequest(**json.loads(text))``)."""
        return json.dumps({f.name: getattr(self, f.name) for f in fields(self)})

    @classmethod
    def argument_spec(cls) -> dict[str, dict[str, Any]]:
        """The Ansible ``argument_spec`` of the action, in field order."""
        spec: dict[str, dict[str, Any]] = {}
        for f in fields(cls):
            entry: dict[str, Any] = {"type": f.metadata["kind"]}
            if f.default is MISSING:
                entry["required"] = True
            elif f.default is not None:
                entry["default"] = f.default
            if f.metadata["choices"]:
                entry["choices"] = list(f.metadata["choices"])
            spec[f.name] = entry
        return spec

    @property
    def hang_limit(self) -> float | None:
        """The configured hang limit in seconds; None for ``auto``."""
        return None if self.hang_timeout in (None, "", "auto") else float(self.hang_timeout)

    @property
    def diagnose_script(self) -> str:
        return self.diagnose or os.path.join(os.path.dirname(self.probe), "diagnose.sh")


def parse_probe(text: str) -> tuple[dict[str, tuple[str, str]], dict[str, Any] | None, str]:
    """Split probe.sh's output into node states, the last rank's log header and its new log text.

    Rank 0's sections (``rank0-stdout`` and ``rank0-stderr``) are in the header under ``rank0``, the ``mark``
    lines (train.yml's restart mark) under ``marks``. Each section's ``start`` is the byte its text starts at (the
    offset asked for, or where a tail's first whole line starts).
    """
    nodes: dict[str, tuple[str, str]] = {}
    rank0: dict[str, dict[str, Any]] = {}
    marks: dict[str, str] = {}
    lines = text.split("\n")
    for index, line in enumerate(lines):
        fields_ = line.split("\t")
        if fields_[0] == "mark" and len(fields_) >= 3:
            marks[fields_[1]] = fields_[2].rstrip("\r")
        elif fields_[0] == "node" and len(fields_) >= 4:
            # a connection with a terminal ends lines with CR LF: the state's detail must not keep the CR
            nodes[fields_[1]] = (fields_[2], "\t".join(fields_[3:]).rstrip("\r"))
        elif fields_[0].startswith("rank0-") and len(fields_) >= 7:
            rank0[fields_[0][len("rank0-") :]] = {
                "path": fields_[1],
                "size": int(fields_[2]),
                "bytes": int(fields_[3]),
                "start": int(fields_[5]),
                "text": base64.b64decode(fields_[6]).decode("utf-8", errors="replace"),
            }
        elif fields_[0] == "log" and len(fields_) >= 4:
            age = fields_[4] if len(fields_) >= 5 else "-"
            header = {
                "path": fields_[1],
                "size": int(fields_[2]),
                "bytes": int(fields_[3]),
                "age_s": int(age) if age.isdigit() else None,
                "start": int(fields_[5]) if len(fields_) >= 6 else None,
                "rank0": rank0,
                "marks": marks,
            }
            return nodes, header, "\n".join(lines[index + 1 :])
    return nodes, None, ""


def _safe(name: str) -> str:
    """A node name as one path component of the evidence directory."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    return cleaned if cleaned not in ("", ".", "..") else "_"


def write_evidence(evidence_dir: str, finding: Mapping[str, Any]) -> str:
    """``hang/<node>/rank-<rank>.txt`` for every rank and ``hang/diagnosis.json``; returns the hang directory."""
    root = os.path.join(evidence_dir, "hang")
    stacks = finding.get("stacks") or {}
    for row in finding["ranks"]:
        folder = os.path.join(root, _safe(row["node"]))
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"rank-{row['rank']}.txt"), "w", encoding="utf-8") as handle:
            handle.write(hang.rank_evidence(row, stacks.get(str(row["rank"])), finding))
    records.write_json(os.path.join(root, "diagnosis.json"), {k: v for k, v in finding.items() if k != "stacks"})
    return root


class Progress:
    """What the watcher knows of the run's progress: the last iteration, when it came, saves, stragglers."""

    def __init__(self, plan: Mapping[str, Any], started: float, tail: bool = False) -> None:
        self.plan = plan
        self.last: dict[str, Any] | None = None
        self.memory: dict[str, Any] | None = None
        self.progress_at = started  # monotonic time of the last new iteration line (or of the start)
        self.first_iteration_s: float | None = None
        self.intervals: deque[float] = deque(maxlen=200)
        self.saving = False
        self.saved: list[int] = []  # the saves Megatron said were done, not yet handed to the checkpoint watch
        self.reports: deque[dict[str, Any]] = deque(maxlen=RECENT_REPORTS)
        self.node_of = node_ranks(plan)
        # -1: the probe starts at the last 256 KiB's first whole line (a run already going, status.yml)
        self.offsets = dict.fromkeys(("log", "stdout", "stderr"), -1 if tail else 0)

    def feed(self, header: Mapping[str, Any] | None, text: str, now: float, started: float) -> None:
        if header is None:
            return
        for stream, section in header["rank0"].items():
            self.offsets[stream] = section["start"] + section["bytes"]
            lines = section["text"].splitlines()
            for kind, iteration in hang.checkpoint_events(lines):
                self.saving = kind == "start"
                if kind == "done":
                    self.saved.append(iteration)
            self.reports.extend(straggler.reports_from_lines(lines))
        if not header["bytes"]:
            return
        start = header["start"] if header["start"] is not None else max(self.offsets["log"], 0)
        self.offsets["log"] = start + header["bytes"]
        # the lines read were written at the latest when the log was (its age, by the clock of its node): on the
        # first probe of a run already going, that is long before now
        written = now - header["age_s"] if header.get("age_s") is not None else now
        log = parse_lines(text.splitlines(), source=header["path"])
        for record in log.iterations:
            gap = hang.line_interval_s(self.last, record)
            if gap is not None:
                self.intervals.append(gap)
            self.last = record
            self.progress_at = written
            self.saving = False  # an iteration after a save's start: the save is over
            if self.first_iteration_s is None:
                self.first_iteration_s = round(now - started, 1)
        if log.memory:
            self.memory = max(log.memory, key=lambda m: m.get("max_reserved_mb") or 0)

    def limit(self, configured: float | None) -> float:
        return hang.hang_limit(list(self.intervals), configured, started=self.last is not None, saving=self.saving)

    def straggler_rows(self, ratio: float) -> list[dict[str, Any]]:
        """The ranks named stragglers over the recent reports: node, rank, ratio (their compute time over the
        median of the others')."""
        found = straggler.assess(list(self.reports), self.plan["world_size"], ratio, self.node_of, skip=0)
        return [{"node": s["node"], "rank": s["rank"], "ratio": s["ratio"]} for s in found]

    def stragglers(self, ratio: float) -> str:
        found = self.straggler_rows(ratio)
        return straggler.describe({s["rank"]: s["ratio"] for s in found}, self.node_of)

    def line(self, ratio: float) -> str:
        text = progress_line(self.last, self.plan, self.memory) if self.last else ""
        slow = self.stragglers(ratio)
        return f"{text} | {slow}" if slow and text else text


def _failed(kind: str, node: str, reason: str) -> dict[str, Any]:
    """A failed outcome of one of the watcher's kinds (:data:`.kinds.KINDS`: a new kind is a row there first)."""
    if KINDS[kind].source != "watcher":
        raise ValueError(f"{kind!r} is not a watcher kind")
    return {"state": "failed", "kind": kind, "node": node, "reason": reason}


class ProbeError(ValueError):
    """The probe's output does not fit the plan (not this run's probe)."""


def judge_nodes(
    plan: Mapping[str, Any],
    nodes: Mapping[str, tuple[str, str]],
    unreachable: dict[str, int],
    elapsed: float,
    start_timeout: float,
) -> dict[str, Any]:
    """The run's state from its nodes' launch states: ``finished``, ``running``, or ``failed`` naming the node.

    ``unreachable`` counts each node's unreachable probes in a row (updated here); raises when
    the probe reported no state for a node of the plan (:class:`ProbeError`)."""
    names = [n["name"] for n in plan["nodes"]]
    missing = [n for n in names if n not in nodes]
    if missing:
        raise ProbeError(f"probe.sh reported no state for {', '.join(missing)}: is it this run's probe?")
    for name in names:
        state, detail = nodes[name]
        if state == "unreachable":
            unreachable[name] = unreachable.get(name, 0) + 1
            if unreachable[name] >= UNREACHABLE_PROBES:
                return _failed(
                    "lost", name, f"the master's container cannot reach {name}'s container any more ({detail})"
                )
            continue
        unreachable.pop(name, None)
        if state == "exited" and detail.strip() != "0":
            return _failed("exited", name, f"torchrun on {name} exited with status {detail}")
        if state == "stopped":
            return _failed(
                "killed", name, f"the launch on {name} (process group {detail}) is gone without an exit status: killed"
            )
        if state == "waiting" and elapsed > start_timeout:
            return _failed(
                "not started",
                name,
                f"the launch did not start on {name} within {start_timeout:.0f} s (see logs/launch-{name}.out in the "
                "run dir)",
            )
    if all(nodes[name][0] == "exited" for name in names):
        return {"state": "finished"}
    return {"state": "running"}


class Watcher:
    """One watch of a run, fed by its probes; knows nothing of how the commands run.

    The caller loops: run :meth:`probe_argv` in the master's container and give the reply (``stdout``, or
    ``unreachable``/``failed`` with ``msg``) to :meth:`on_probe`, which returns the lines to print; when
    :attr:`wants_diagnosis`, run :meth:`diagnose_argv` and give its reply to :meth:`on_diagnosis`; stop once
    :meth:`ended`, else sleep :meth:`next_probe_in`. :meth:`result` is the watch's outcome."""

    def __init__(self, request: WatchRequest, started: float) -> None:
        self.request = request
        self.plan = request.plan
        self.started = started
        self.label = f"{self.plan['exp_name']} / {self.plan['run_id']}"
        self.progress = Progress(self.plan, started, tail=request.tail)
        self.checkpoints = CheckpointWatch(
            self.plan,
            request.programs,
            {
                # a single look (status.yml) judges no save; a watch taken up from the logs' tail does
                "verify_checkpoints": request.verify_checkpoints is not False
                and not (request.tail and not request.wait),
                "keep_checkpoints": request.keep_checkpoints,
                "keep_every": request.keep_every,
                "keep_dry_run": request.keep_dry_run,
            },
            request.known_checkpoints or (),
        )
        self.outcome: dict[str, Any] = {"state": "running"}
        self.finding: dict[str, Any] | None = None
        self.nodes: dict[str, tuple[str, str]] = {}
        self.wants_diagnosis = False
        self._unreachable: dict[str, int] = {}
        self._printed_at: float | None = None
        self._last_printed: dict[str, Any] | None = None
        self._stalled = 0.0
        self._now = started
        self.wall = 0.0  # the wall clock of the last probe (a save's age is by the clock of its files)

    def probe_argv(self) -> list[str]:
        offsets = self.progress.offsets
        return ["bash", self.request.probe, str(offsets["log"]), str(offsets["stdout"]), str(offsets["stderr"])]

    def diagnose_argv(self) -> list[str]:
        return ["bash", self.request.diagnose_script]

    def ended(self, now: float) -> bool:
        return self.outcome["state"] != "running" or now - self.started >= self.request.wait

    def next_probe_in(self) -> float:
        """Seconds until the next probe: ``poll_interval``, or :data:`ENDING_POLL_S` once the end is near (the
        plan's last iteration seen, or a node's launch exited while others still run); never under a second."""
        last = (self.progress.last or {}).get("iteration")
        total = self.plan.get("train_iters")
        exited = any(state == "exited" for state, _ in self.nodes.values())
        near = exited or (last is not None and bool(total) and last >= total)
        return max(1.0, min(self.request.poll_interval, ENDING_POLL_S) if near else self.request.poll_interval)

    def on_probe(self, reply: Mapping[str, Any], now: float) -> list[str]:
        """Judge one probe; the lines to print (a progress line when one is due)."""
        self._now = now
        master = self.plan["master"]
        if reply.get("unreachable") or reply.get("failed"):
            count = self._unreachable[master] = self._unreachable.get(master, 0) + 1
            if count >= UNREACHABLE_PROBES:
                why = (reply.get("msg") or reply.get("stderr") or "no answer").strip()
                self.outcome = _failed("lost", master, f"the master does not answer: {why}")
            return []
        self._unreachable.pop(master, None)
        self.nodes, header, text = parse_probe(reply.get("stdout", ""))
        progress = self.progress
        progress.feed(header, text, now, self.started)
        for iteration in progress.saved:
            self.checkpoints.note_saved(iteration)
        progress.saved.clear()
        printed: list[str] = []
        elapsed = now - self.started
        due = self._printed_at is None or elapsed - self._printed_at >= self.request.progress_interval
        if progress.last is not None and progress.last is not self._last_printed and due:
            printed.append(f"{self.label}: {self._line()}")
            self._printed_at, self._last_printed = elapsed, progress.last
        self.outcome = judge_nodes(self.plan, self.nodes, self._unreachable, elapsed, self.request.start_timeout)
        if self.outcome["state"] != "running":
            return printed
        if self.request.restart_mark and ((header or {}).get("marks") or {}).get("restarting") == "absent":
            self.outcome = _failed(
                "stopped", master, "stop.yml was run: the run's restart mark is gone, so this attempt is stopped too"
            )
            return printed
        self._stalled = now - progress.progress_at
        running = all(state == "running" for state, _ in self.nodes.values())
        self.wants_diagnosis = running and self._stalled >= progress.limit(self.request.hang_limit)
        return printed

    def on_diagnosis(self, reply: Mapping[str, Any], now: float) -> list[str]:
        """Name the culprit of a stall from diagnose.sh's reply; the lines to print, at once (the culprit is
        printed when it is found, before any stop)."""
        self.wants_diagnosis = False
        plan, progress = self.plan, self.progress
        names = [n["name"] for n in plan["nodes"]]
        if reply.get("unreachable") or (reply.get("failed") and not reply.get("stdout")):
            why = (reply.get("msg") or reply.get("stderr") or "no answer").strip()
            reports = {plan["master"]: {"reachable": False, "error": f"the master's container does not answer: {why}"}}
            reports.update({n: {"reachable": True, "probe_error": "not probed: the master is lost"} for n in names[1:]})
        else:
            reports = parse_diagnosis(reply.get("stdout", ""), names)
        limit = progress.limit(self.request.hang_limit)
        finding = hang.diagnose(plan, reports)
        ranks = finding.get("ranks") or []
        if len(ranks) == plan["world_size"] and all(row.get("state") == "gone" for row in ranks):
            # every rank has exited and torchrun has not yet said how: its exit (or its exit barrier, slow on a
            # busy node) ends the attempt with the true outcome; no rank is stuck, so nothing is stopped
            progress.progress_at = now
            return [f"{self.label}: every rank has exited; waiting for each node's torchrun to end the attempt"]
        finding.update(
            detected_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            last_iteration=(progress.last or {}).get("iteration"),
            seconds_since_progress=round(self._stalled, 1),
            hang_timeout_s=round(limit, 1),
            saving_checkpoint=progress.saving,
        )
        earlier = self.finding
        kept = earlier is None or CONFIDENCE[finding["confidence"]] >= CONFIDENCE[earlier["confidence"]]
        if kept:
            finding["diagnoses"] = (earlier or {}).get("diagnoses", 0) + 1
            finding["less_confident_later"] = []
            if self.request.evidence_dir:
                finding["evidence"] = write_evidence(self.request.evidence_dir, finding)
            self.finding = finding
        else:
            # on_hang=warn looks again after every further limit: a later look that names less (the stopped rank
            # continued meanwhile, every rank back in its collective) is said and counted, but the run's finding,
            # and its evidence, stay the earlier, more confident one
            earlier["diagnoses"] += 1
            later = {k: finding[k] for k in ("detected_at", "confidence", "finding", "last_iteration")}
            earlier["less_confident_later"] = [*earlier["less_confident_later"], later][-LATER_KEPT:]
        summary = hang.summary_text(finding, self._stalled, (progress.last or {}).get("iteration"))
        stopping = self.request.on_hang == "stop"
        then = "the run is stopped" if stopping else "on_hang=warn: watching goes on"
        # display(), not warning(), in the caller: Ansible holds a task's warnings until the task ends
        printed = [f"[WARNING] {self.label}: {summary} ({then})"]
        printed += [f"  culprit {hang.culprit_text(line)}" for line in finding["culprits"]]
        if kept and finding.get("evidence"):
            printed.append(f"  evidence: {finding['evidence']}")
        elif not kept:
            printed.append(
                f"  less confident than the diagnosis of {earlier['detected_at']} ({earlier['confidence']} confidence:"
                f" {earlier['finding']}), which stays the run's finding"
            )
        if stopping:
            culprit = (finding["culprits"] or [{}])[0]
            self.outcome = _failed("hang", culprit.get("node") or plan["master"], summary)
        else:
            progress.progress_at = now  # the next warning only after another full limit
        return printed

    def _line(self) -> str:
        """The progress line, with the last verified save and its age (and a disk that fills)."""
        text = self.progress.line(self.request.straggler_ratio)
        saved = self.checkpoints.suffix(self.wall)
        return f"{text} | {saved}" if saved else text

    def stop(self, reason: str) -> None:
        """End the watch of a running attempt as C(failed), kind C(stopped), on the master: someone asked for the
        run to stop (stop.yml asks the run's supervisor)."""
        if self.outcome["state"] == "running":
            self.outcome = _failed("stopped", self.plan["master"], reason)

    def finish(self) -> list[str]:
        """The last progress line, when the last iteration was not printed yet."""
        last = self.progress.last
        if last is not None and last is not self._last_printed:
            self._last_printed = last
            return [f"{self.label}: {self._line()}"]
        return []

    def result(self, now: float) -> dict[str, Any]:
        """The watch's outcome: state, kind, node and reason of a failure, the nodes, the progress and the hang."""
        progress, ratio = self.progress, self.request.straggler_ratio
        outcome = dict(self.outcome)
        if self.finding is not None:
            outcome["hang"] = {k: v for k, v in self.finding.items() if k != "stacks"}
        outcome.update(
            nodes={name: {"state": state, "detail": detail} for name, (state, detail) in self.nodes.items()},
            last_iteration=progress.last,
            watched_s=round(now - self.started, 1),
            first_iteration_s=progress.first_iteration_s,
            progress=progress.line(ratio) if progress.last else None,
            seconds_since_progress=round(now - progress.progress_at, 1),
            hang_limit_s=round(progress.limit(self.request.hang_limit), 1),
            stragglers=progress.straggler_rows(ratio),
        )
        if outcome.get("node"):
            outcome["ranks"] = ranks_of(self.plan, outcome["node"])
        outcome["checkpoints"] = self.checkpoints.result()
        return outcome


#: Seconds the master's container may stay silent to the controller that follows its supervisor before the
#: attempt is called failed, kind ``lost``, naming the master. Shorter silences are the controller's own path
#: (a reset, a cut, a laptop asleep) and judge nothing; the supervisor watches on meanwhile. (The controller cannot
#: yet ask the other nodes whether they reach the master: a longer silence of the controller's own path is still
#: taken for a lost master.)
MASTER_SILENT_S = 120.0


def supervisor_node(plan: Mapping[str, Any]) -> str:
    """The node whose container runs the plan's supervisor: the plan's ``supervisor`` (-e supervisor_host), else
    its master (a plan of an older bundle names none)."""
    return str(plan.get("supervisor") or plan["master"])


def standby_node(plan: Mapping[str, Any]) -> str | None:
    """The node that holds a copy of the run's record (the supervisor's RecordCopy), where its supervision can be
    moved should the supervisor's node be lost: the master while the supervisor runs on another node (-e
    supervisor_host), else the plan's first other node; None for a run on the supervisor's node alone."""
    here = supervisor_node(plan)
    if here != plan["master"]:
        return str(plan["master"])
    return next((str(node["name"]) for node in plan["nodes"] if node["name"] != here), None)


def silent_master(plan: Mapping[str, Any], silent_s: float, why: str) -> dict[str, Any] | None:
    """The follower's verdict on the supervisor's node (the plan's ``supervisor``, else its master) that has not
    answered it for ``silent_s`` seconds: None (keep trying) below :data:`MASTER_SILENT_S`; else, for the master, a
    failed outcome, kind ``lost``, naming it; for another node (-e supervisor_host), the run still ``running`` as far
    as anyone knows (its ranks are elsewhere), with why the follower stopped."""
    if silent_s < MASTER_SILENT_S:
        return None
    host = supervisor_node(plan)
    if host != plan["master"]:
        return {"state": "running", "reason": f"the supervisor's node {host} has not answered this controller for "
                                              f"{silent_s:.0f} s ({why.strip()[:300]})"}  # fmt: skip
    lost = _failed("lost", plan["master"], f"the master has not answered for {silent_s:.0f} s: {why.strip()[:300]}")
    return dict(lost, ranks=ranks_of(plan, plan["master"]))


#: Runs one command where the watch runs (``argv``, optional stdin); answers as ``docker_container_exec`` does:
#: ``rc``, ``stdout``, ``stderr``, and ``failed`` with ``msg``, or ``unreachable`` with ``msg``.
Runner = Callable[..., Mapping[str, Any]]


def checkpoint_commands(watcher: Watcher, run: Runner, running: bool) -> list[str]:
    """The checkpoint watch's commands, when it wants them: the scan after a save, then retention's removal."""
    found, ckpt = [], watcher.checkpoints
    watcher.wall = time.time()
    if ckpt.wants_scan:
        found += ckpt.on_scan(run(ckpt.scan_argv()), time.time(), running=running)
    if ckpt.wants_apply:
        found += ckpt.on_apply(run(ckpt.apply_argv(), json.dumps(ckpt.apply_input())), time.time())
    return found


def watch(
    watcher: Watcher,
    run: Runner,
    show: Callable[[str], None],
    probed: Callable[[Watcher], None] = lambda watcher: None,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """One watch, to its end: probe, diagnose a suspected hang, verify each save, sleep, again; then the last save
    and the last progress line. ``show`` gets each line to print, ``probed`` the watcher after each probe; returns
    :meth:`Watcher.result`. Raises :class:`ProbeError` as :meth:`Watcher.on_probe` does. The supervisor runs it on
    the cluster (trainops/node/supervise.py); the train_watch action runs it on the controller only for status.yml's
    single probe."""
    while True:
        watcher.wall = time.time()  # the progress line a probe prints dates the last save by it
        for line in watcher.on_probe(run(watcher.probe_argv()), time.monotonic()):
            show(line)
        probed(watcher)
        if watcher.wants_diagnosis:
            for line in watcher.on_diagnosis(run(watcher.diagnose_argv()), time.monotonic()):
                show(line)
        for line in checkpoint_commands(watcher, run, running=True):
            show(line)
        if watcher.ended(time.monotonic()):
            break
        sleep(watcher.next_probe_in())
    if watcher.outcome["state"] == "finished" and watcher.checkpoints.enabled:
        watcher.checkpoints.wants_scan = True  # the save at the end, made just before the ranks exited
    for line in [*checkpoint_commands(watcher, run, running=False), *watcher.finish()]:
        show(line)
    return watcher.result(time.monotonic())
