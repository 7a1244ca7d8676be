"""Action plugin: watch a launched run from its master node until it ends, printing its progress.

Every ``poll_interval`` seconds it runs the run's ``probe.sh`` in the master's container (``docker exec`` over the
play's connection to the master node: see ``_exec``). The probe reports every node's launch state (over
the containers' sshd, the fan-out's own path), the new lines of the last rank's stdout, which prints Megatron's
iteration lines, and the new lines of rank 0's stdout and stderr (checkpoint saves, Megatron's straggler
report). A progress line is printed every ``progress_interval`` seconds when there is a new iteration; it names
the stragglers of the last 20 straggler reports, if any. Watching ends when

* every node's torchrun exited 0: ``finished``;
* a node's torchrun exited non-zero, a node's process group vanished without an exit status, a node stayed
  unreachable for two probes, or a node did not start within ``start_timeout``: ``failed``, naming the node;
* no new iteration line came for the hang limit (``hang_timeout``, or ``max(10 x p90 time between iteration
  lines, 300 s)``; at least 1,800 s before the first iteration and while a checkpoint is saved): the run's
  ``diagnose.sh`` reads every rank on every node (state, wait channel, CPU, py-spy stack) and the culprit is
  named (:func:`trainops.hang.diagnose`); the evidence goes to ``<evidence_dir>/hang/``. With ``on_hang: stop``
  the run is ``failed`` (kind ``hang``); with ``warn`` the diagnosis is printed and watching goes on;
* ``wait`` seconds passed: ``running`` (the job goes on; status.yml follows it, stop.yml stops it).

With ``tail: true`` (status.yml) the first probe reads the last 256 KiB of the logs instead of their start, and
the time of the last iteration comes from the log's age, so a run already going is judged as it is now.

It changes nothing on any node.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import re
import shlex
import sys
import time
from collections import deque
from typing import Any

_CORE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _CORE not in sys.path:
    sys.path.insert(0, _CORE)

from ansible.errors import AnsibleActionFail, AnsibleConnectionFailure  # noqa: E402
from ansible.plugins.action import ActionBase  # noqa: E402
from ansible.utils.display import Display  # noqa: E402
from trainops import hang, straggler  # noqa: E402
from trainops.cluster import node_ranks, ranks_of  # noqa: E402
from trainops.megatron_log import parse_lines  # noqa: E402
from trainops.run_report import progress_line  # noqa: E402
from trainops.watch import parse_diagnosis  # noqa: E402

display = Display()

#: A node unreachable for this many probes in a row has failed (one lost probe is forgiven).
UNREACHABLE_PROBES = 2
#: Straggler reports the progress line looks back over (it names none before it has MIN_REPORTS of them).
RECENT_REPORTS = 2 * straggler.MIN_REPORTS


def parse_probe(text: str) -> tuple[dict[str, tuple[str, str]], dict[str, Any] | None, str]:
    """Split probe.sh's output into node states, the last rank's log header and its new log text.

    Rank 0's sections (``rank0-stdout`` and ``rank0-stderr``) are in the header under ``rank0``, the ``mark``
    lines (train.yml's restart mark) under ``marks``. Each section's ``start`` is the byte its text starts at (the
    offset asked for, or where a tail's first whole line starts).
    """
    nodes: dict[str, tuple[str, str]] = {}
    header: dict[str, Any] | None = None
    rank0: dict[str, dict[str, Any]] = {}
    marks: dict[str, str] = {}
    lines = text.split("\n")
    for index, line in enumerate(lines):
        fields = line.split("\t")
        if fields[0] == "mark" and len(fields) >= 3:
            marks[fields[1]] = fields[2].rstrip("\r")
        elif fields[0] == "node" and len(fields) >= 4:
            # a connection with a terminal ends lines with CR LF: the state's detail must not keep the CR
            nodes[fields[1]] = (fields[2], "\t".join(fields[3:]).rstrip("\r"))
        elif fields[0].startswith("rank0-") and len(fields) >= 7:
            rank0[fields[0][len("rank0-") :]] = {
                "path": fields[1],
                "size": int(fields[2]),
                "bytes": int(fields[3]),
                "start": int(fields[5]),
                "text": base64.b64decode(fields[6]).decode("utf-8", errors="replace"),
            }
        elif fields[0] == "log" and len(fields) >= 4:
            age = fields[4] if len(fields) >= 5 else "-"
            header = {
                "path": fields[1],
                "size": int(fields[2]),
                "bytes": int(fields[3]),
                "age_s": int(age) if age.isdigit() else None,
                "start": int(fields[5]) if len(fields) >= 6 else None,
                "rank0": rank0,
                "marks": marks,
            }
            return nodes, header, "\n".join(lines[index + 1 :])
    return nodes, header, ""


def _safe(name: str) -> str:
    """A node name as one path component of the evidence directory."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    return cleaned if cleaned not in ("", ".", "..") else "_"


def write_evidence(evidence_dir: str, finding: dict[str, Any]) -> str:
    """``hang/<node>/rank-<rank>.txt`` for every rank and ``hang/diagnosis.json``; returns the hang directory."""
    root = os.path.join(evidence_dir, "hang")
    stacks = finding.get("stacks") or {}
    for row in finding["ranks"]:
        folder = os.path.join(root, _safe(row["node"]))
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"rank-{row['rank']}.txt"), "w", encoding="utf-8") as handle:
            handle.write(hang.rank_evidence(row, stacks.get(str(row["rank"])), finding))
    kept = {k: v for k, v in finding.items() if k != "stacks"}
    with open(os.path.join(root, "diagnosis.json.tmp"), "w", encoding="utf-8") as handle:
        json.dump(kept, handle, indent=2, sort_keys=True)
        handle.write("\n")
    os.replace(os.path.join(root, "diagnosis.json.tmp"), os.path.join(root, "diagnosis.json"))
    return root


class _Progress:
    """What the watcher knows of the run's progress: the last iteration, when it came, saves, stragglers."""

    def __init__(self, plan: dict[str, Any], started: float, tail: bool = False) -> None:
        self.plan = plan
        self.last: dict[str, Any] | None = None
        self.memory: dict[str, Any] | None = None
        self.progress_at = started  # monotonic time of the last new iteration line (or of the start)
        self.first_iteration_s: float | None = None
        self.intervals: deque[float] = deque(maxlen=200)
        self.saving = False
        self.reports: deque[dict[str, Any]] = deque(maxlen=RECENT_REPORTS)
        self.node_of = node_ranks(plan)
        # -1: the probe starts at the last 256 KiB's first whole line (a run already going, status.yml)
        self.offsets = dict.fromkeys(("log", "stdout", "stderr"), -1 if tail else 0)

    def feed(self, header: dict[str, Any] | None, text: str, now: float, started: float) -> None:
        if header is None:
            return
        for stream, section in header["rank0"].items():
            self.offsets[stream] = section["start"] + section["bytes"]
            lines = section["text"].splitlines()
            for kind, _ in hang.checkpoint_events(lines):
                self.saving = kind == "start"
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

    def stragglers(self, ratio: float) -> str:
        found = straggler.assess(list(self.reports), self.plan["world_size"], ratio, self.node_of, skip=0)
        return straggler.describe({s["rank"]: s["ratio"] for s in found}, self.node_of)

    def line(self, ratio: float) -> str:
        text = progress_line(self.last, self.plan, self.memory) if self.last else ""
        slow = self.stragglers(ratio)
        return f"{text} | {slow}" if slow and text else text


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(
        (
            "container",
            "probe",
            "diagnose",
            "plan",
            "wait",
            "poll_interval",
            "progress_interval",
            "start_timeout",
            "hang_timeout",
            "on_hang",
            "straggler_ratio",
            "evidence_dir",
            "tail",
            "restart_mark",
        )
    )

    def _exec(self, task_vars: dict[str, Any], container: str, argv: list[str]) -> dict[str, Any]:
        """``docker exec`` in the master's container, over the play's connection to the master node.

        The docker CLI, not community.docker's module: the watcher probes every few seconds for days, and a module
        run starts a Python interpreter on the node each time (about 5 % of a 2-core testbed node's CPU at one
        probe every 5 s, measured; the CLI's cost is within noise). Results look like the module's.
        """
        command = " ".join(shlex.quote(part) for part in ["docker", "exec", container, *argv])
        try:
            done = self._low_level_execute_command(command, sudoable=True)
        except AnsibleConnectionFailure as exc:
            return {"unreachable": True, "msg": str(exc)}
        out = {"rc": done.get("rc"), "stdout": done.get("stdout", ""), "stderr": done.get("stderr", "")}
        if done.get("rc") != 0:
            out.update(failed=True, msg=(out["stderr"] or out["stdout"] or f"docker exec exited {out['rc']}").strip())
        return out

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        args = self._task.args
        plan = args["plan"]
        container = args.get("container", "train")
        probe = args["probe"]
        diagnose = args.get("diagnose") or os.path.join(os.path.dirname(probe), "diagnose.sh")
        wait = float(args.get("wait", 86400))
        poll = max(1.0, float(args.get("poll_interval", 5)))
        every = max(0.0, float(args.get("progress_interval", 30)))
        start_timeout = float(args.get("start_timeout", 120))
        configured = float(args["hang_timeout"]) if args.get("hang_timeout") not in (None, "", "auto") else None
        on_hang = args.get("on_hang", "stop")
        ratio = float(args.get("straggler_ratio", straggler.DEFAULT_RATIO))
        evidence_dir = args.get("evidence_dir") or None
        watch_mark = bool(args.get("restart_mark", False))
        master = plan["master"]
        label = f"{plan['exp_name']} / {plan['run_id']}"

        started = time.monotonic()
        progress = _Progress(plan, started, tail=bool(args.get("tail", False)))
        printed_at, last_printed = None, None
        unreachable: dict[str, int] = {}
        nodes: dict[str, tuple[str, str]] = {}
        outcome: dict[str, Any] = {"state": "running"}
        finding: dict[str, Any] | None = None
        while True:
            now = time.monotonic()
            elapsed = now - started
            offsets = progress.offsets
            reply = self._exec(
                task_vars,
                container,
                ["bash", probe, str(offsets["log"]), str(offsets["stdout"]), str(offsets["stderr"])],
            )
            if reply.get("unreachable") or reply.get("failed"):
                count = unreachable[master] = unreachable.get(master, 0) + 1
                if count >= UNREACHABLE_PROBES:
                    reason = (reply.get("msg") or reply.get("stderr") or "no answer").strip()
                    outcome = {
                        "state": "failed",
                        "kind": "lost",
                        "node": master,
                        "reason": f"the master does not answer: {reason}",
                    }
                    break
            else:
                unreachable.pop(master, None)
                nodes, header, text = parse_probe(reply.get("stdout", ""))
                progress.feed(header, text, now, started)
                last = progress.last
                due = printed_at is None or elapsed - printed_at >= every
                if last is not None and last is not last_printed and due:
                    display.display(f"{label}: {progress.line(ratio)}")
                    printed_at, last_printed = elapsed, last
                outcome = self._judge(plan, nodes, unreachable, elapsed, start_timeout)
                if outcome["state"] != "running":
                    break
                if watch_mark and ((header or {}).get("marks") or {}).get("restarting") == "absent":
                    outcome = {
                        "state": "failed",
                        "kind": "stopped",
                        "node": master,
                        "reason": "stop.yml was run: the run's restart mark is gone, so this attempt is stopped too",
                    }
                    break
                stalled = now - progress.progress_at
                limit = progress.limit(configured)
                if all(state == "running" for state, _ in nodes.values()) and stalled >= limit:
                    finding = self._diagnose(task_vars, container, diagnose, plan, progress, stalled, limit)
                    if evidence_dir:
                        finding["evidence"] = write_evidence(evidence_dir, finding)
                    text_of = hang.summary_text(finding, stalled, (last or {}).get("iteration"))
                    if on_hang == "stop":
                        culprit = (finding["culprits"] or [{}])[0]
                        outcome = {
                            "state": "failed",
                            "kind": "hang",
                            "node": culprit.get("node") or master,
                            "reason": text_of,
                        }
                        break
                    # display(), not warning(): Ansible holds a task's warnings until the task ends
                    display.display(f"[WARNING] {label}: {text_of} (on_hang=warn: watching goes on)")
                    for line in finding["culprits"]:
                        display.display(f"  culprit {hang.culprit_text(line)}")
                    if finding.get("evidence"):
                        display.display(f"  evidence: {finding['evidence']}")
                    progress.progress_at = now  # the next warning only after another full limit
            if elapsed >= wait:
                break
            time.sleep(poll)

        last = progress.last
        if last is not None and last is not last_printed:
            display.display(f"{label}: {progress.line(ratio)}")
        if finding is not None:
            outcome["hang"] = {k: v for k, v in finding.items() if k != "stacks"}
        outcome.update(
            nodes={name: {"state": state, "detail": detail} for name, (state, detail) in nodes.items()},
            last_iteration=last,
            watched_s=round(time.monotonic() - started, 1),
            first_iteration_s=progress.first_iteration_s,
            progress=progress.line(ratio) if last else None,
            seconds_since_progress=round(time.monotonic() - progress.progress_at, 1),
            hang_limit_s=round(progress.limit(configured), 1),
        )
        if outcome.get("node"):
            outcome["ranks"] = ranks_of(plan, outcome["node"])
        result.update(changed=False, watch=outcome)
        return result

    def _diagnose(
        self,
        task_vars: dict[str, Any],
        container: str,
        diagnose: str,
        plan: dict[str, Any],
        progress: _Progress,
        stalled: float,
        limit: float,
    ) -> dict[str, Any]:
        """Run diagnose.sh from the master and name the culprit."""
        names = [n["name"] for n in plan["nodes"]]
        reply = self._exec(task_vars, container, ["bash", diagnose])
        if reply.get("unreachable") or (reply.get("failed") and not reply.get("stdout")):
            why = (reply.get("msg") or reply.get("stderr") or "no answer").strip()
            reports = {plan["master"]: {"reachable": False, "error": f"the master's container does not answer: {why}"}}
            reports.update({n: {"reachable": True, "probe_error": "not probed: the master is lost"} for n in names[1:]})
        else:
            reports = parse_diagnosis(reply.get("stdout", ""), names)
        finding = hang.diagnose(plan, reports)
        finding.update(
            detected_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            last_iteration=(progress.last or {}).get("iteration"),
            seconds_since_progress=round(stalled, 1),
            hang_timeout_s=round(limit, 1),
            saving_checkpoint=progress.saving,
        )
        return finding

    @staticmethod
    def _judge(
        plan: dict[str, Any],
        nodes: dict[str, tuple[str, str]],
        unreachable: dict[str, int],
        now: float,
        start_timeout: float,
    ) -> dict[str, Any]:
        names = [n["name"] for n in plan["nodes"]]
        missing = [n for n in names if n not in nodes]
        if missing:
            raise AnsibleActionFail(f"probe.sh reported no state for {', '.join(missing)}: is it this run's probe?")
        for name in names:
            state, detail = nodes[name]
            if state == "unreachable":
                unreachable[name] = unreachable.get(name, 0) + 1
                if unreachable[name] >= UNREACHABLE_PROBES:
                    return {
                        "state": "failed",
                        "kind": "lost",
                        "node": name,
                        "reason": f"the master's container cannot reach {name}'s container any more ({detail})",
                    }
                continue
            unreachable.pop(name, None)
            if state == "exited" and detail.strip() != "0":
                return {
                    "state": "failed",
                    "kind": "exited",
                    "node": name,
                    "reason": f"torchrun on {name} exited with status {detail}",
                }
            if state == "stopped":
                return {
                    "state": "failed",
                    "kind": "killed",
                    "node": name,
                    "reason": f"the launch on {name} (process group {detail}) is gone without an exit status: killed",
                }
            if state == "waiting" and now > start_timeout:
                return {
                    "state": "failed",
                    "kind": "not started",
                    "node": name,
                    "reason": f"the launch did not start on {name} within {start_timeout:.0f} s "
                    f"(see logs/launch-{name}.out in the run dir)",
                }
        if all(nodes[name][0] == "exited" for name in names):
            return {"state": "finished"}
        return {"state": "running"}
