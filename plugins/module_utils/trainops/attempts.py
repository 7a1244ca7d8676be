"""The attempts of one training run: train.yml's lifecycle as a state machine, kept in ``<run_dir>/attempts.json``.

The run's supervisor steps it on the cluster (:class:`trainops.lifecycle.Lifecycle`, in the master's container),
doing the work each step needs on the nodes (launch, watch, stop, gather, set aside) itself. Every step reads the
state the last one wrote and writes it back, so a supervisor killed between two steps and started again goes on
from the state; train.yml collects it to the controller, where the report reads it.

::

    begin ─> launched ─> end [─> amend] ─(running, finished)───────────────────────────────────> (report)
                                     └─(failed)─> judge ─(end)────────────────────────────────────> (report)
                                                    ├─(relaunch)─────────> resume ─> prepare ─> begin
                                                    └─(replan)─> replanned ─> resume ─> prepare ─> begin
                                                                   └─(refused)  └─(refused)──> (report)

* :meth:`Attempts.begin`: attempt k starts with a plan fixed for the whole attempt: the first plan, or the
  re-plan of the attempt before.
* :meth:`Attempts.launched`: the fan-out's result, kept for :meth:`end`; :meth:`Attempts.after_done`: the steps
  after a failure are done (a supervisor started again launches the next attempt, not those steps again).
* :meth:`Attempts.end`: the attempt's outcome from the fan-out's result and the watcher's (:mod:`.outcome`).
* :meth:`Attempts.amend`: the outcome with Slurm's account of the job (``-e launcher=slurm``).
* :meth:`Attempts.judge` (``-e max_restarts``): the attempt's record (:func:`.recovery.attempt_record`) from the
  outcome, its parsed logs and the checkpoint it left, the nodes it lost, and the decision
  (:func:`.recovery.retry_decision`): ``end``, ``relaunch`` or ``replan`` (``-e elastic``). The record goes to
  ``attempt-<k>/attempt.json``.
* :meth:`Attempts.replanned`: the re-plan on the nodes that remain, or why it was refused (the run then ends).
* :meth:`Attempts.resume`: the save the next attempt resumes from, chosen from a scan of the checkpoints after the
  failed attempt's ranks are gone (:func:`.checkpoints.choose`: the newest verified save that no attempt failed to
  load), or why none can be (the run then ends).
* :meth:`Attempts.prepare`: just before the next launch, the restart mark read again (stop.yml ends the restarts),
  and the attempt's collected files set aside into ``attempt-<k>/``.
* :meth:`Attempts.result`: what the report reads: the last attempt's outcome, plan and decision.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from . import incidents, records, recovery
from .checkpoints import iteration_of
from .outcome import train_outcome
from .plan import tracker_iteration, with_resume

#: The state file in the run's state directory (kept there when an attempt's files are set aside).
STATE_FILE = recovery.STATE_FILE
#: What comes after a judged attempt.
NEXT = ("end", "relaunch", "replan")
#: What the collect role writes into the master's collected logs (pack_logs.py): the checkpoint the attempt left
#: and whether the run's restart mark was still there.
MARKS_FILE = "marks.json"


def read_marks(run_dir: str, master: str) -> dict[str, Any] | None:
    """The master's ``marks.json`` as collected into ``<run_dir>/<master>/``; None when the master's logs were
    not collected (it did not answer); :class:`.records.RecordError` when it is damaged."""
    fix = "the attempt is judged as if the master's marks were not collected"
    return records.read_json(os.path.join(run_dir, master, MARKS_FILE), "marks file of the master", fix)


class AttemptError(RuntimeError):
    """A step asked for out of order (a playbook bug, never a user's)."""


class Attempts:
    """The run's attempts, loaded from and saved to ``<run_dir>/attempts.json`` at every step."""

    def __init__(self, run_dir: str) -> None:
        self.run_dir = run_dir
        path = os.path.join(run_dir, STATE_FILE)
        fix = (
            f"move it aside (mv {path} {path}.damaged): a train.yml of this run then starts its attempts afresh, "
            "and playbooks/report.yml reports what the run left"
        )
        state = records.read_json(path, "state of this run's attempts", fix)
        if state is not None and not all(k in state for k in ("records", "current", "next")):
            raise records.RecordError(f"{path} lacks records, current or next: not a state train.yml wrote; {fix}")
        self.state: dict[str, Any] = state or {"records": [], "current": None, "next": None}
        #: Called after every save (the supervisor copies its record to the master: node/supervise.py RecordCopy).
        self.on_save: Callable[[], None] = lambda: None

    # --- the state -------------------------------------------------------------------------------------------
    @property
    def current(self) -> dict[str, Any]:
        if self.state["current"] is None:
            raise AttemptError("no attempt has begun in this run")
        return self.state["current"]

    def _save(self) -> None:
        records.write_json(os.path.join(self.run_dir, STATE_FILE), self.state)
        self.on_save()

    def view(self) -> dict[str, Any]:
        """The current attempt as the playbook reads it: number, plan, outcome, cause, decision, next, lost, message,
        and the plan of the next attempt (its nodes are set aside and checked before it begins)."""
        current = self.current
        step = current.get("next_step", "end")
        return {
            "number": current["number"],
            "plan": current["plan"],
            "resumes_from": current["resumes_from"],
            "outcome": current.get("outcome"),
            # the judged cause of a failed attempt, from its gathered logs (the outcome's reason is what the watch saw)
            "cause": current.get("cause"),
            "decision": current.get("decision"),
            "next": step,
            "next_plan": (self.state["next"] or current["plan"]) if step in ("relaunch", "replan") else None,
            "lost": current.get("lost") or {},
            "message": current.get("message"),
            # the saves judged before this attempt's launch (the watcher does not read them again), and the saves
            # an attempt of this run failed to resume from (iteration -> why: the next scan sets them aside)
            "checked_saves": current.get("checked_saves") or [],
            "failed_loads": self.state.get("failed_loads") or {},
        }

    # --- the steps -------------------------------------------------------------------------------------------
    def begin(
        self,
        plan: Mapping[str, Any],
        resumes_from: Any,
        now: float,
        run_started: float,
        checked_saves: Sequence[Mapping[str, Any]] = (),
    ) -> dict[str, Any]:
        """Attempt k begins. The first takes ``plan``, ``resumes_from`` (the save train.yml's check chose, as the
        tracker's text) and ``checked_saves`` (that scan's verdicts); a later one the re-plan, or the plan, of the
        attempt before and the save :meth:`resume` chose (the tracker's save when none was chosen).

        ``run_started`` names the train.yml run: a state left by another run under the same run id (``-e
        run_id``) is kept as ``attempts-<its start>.json`` and this run starts afresh."""
        if self.state.get("run_started") not in (None, run_started):
            os.replace(
                os.path.join(self.run_dir, STATE_FILE),
                os.path.join(self.run_dir, f"attempts-{self.state['run_started']:.0f}.json"),
            )
            self.state = {"records": [], "current": None, "next": None}
        self.state["run_started"] = run_started
        before = self.state["current"]
        if before is not None and before.get("next_step") not in ("relaunch", "replan"):
            raise AttemptError(f"attempt {before['number']} was not followed by another")
        if before is None:
            number, resumes, saves = 1, tracker_iteration(resumes_from), list(checked_saves)
        else:
            number, plan = before["number"] + 1, self.state["next"] or before["plan"]
            chosen = self.state.get("resume_next")
            if chosen is None:  # no scan chose (a playbook that skipped it): what the failed attempt left
                resumes, saves = self.state["records"][-1]["checkpoint_at_end"], []
            else:
                resumes, saves = chosen["iteration"], chosen["saves"]
            plan = with_resume(plan, resumes)
        self.state["current"] = {
            "number": number,
            "plan": dict(plan),
            "resumes_from": resumes,
            "started_at": now,
            "checked_saves": saves,
        }
        self.state["next"] = None
        self.state["resume_next"] = None
        self._save()
        return self.view()

    def launching(self) -> dict[str, Any]:
        """The fan-out is about to run: a supervisor killed before it returned, and started again, does not run it
        a second time (the watch finds out whether the ranks started)."""
        self.current["launching"] = True
        self._save()
        return self.view()

    def mark(self, step: str) -> dict[str, Any]:
        """One of the supervisor's steps after an attempt is done (``stopped``, ``replanned``, ``set_aside``): a
        supervisor started again does not take it again."""
        self.current.setdefault("done", []).append(step)
        self._save()
        return self.view()

    def done(self, step: str) -> bool:
        return step in (self.current.get("done") or [])

    def abandon(self, reason: str) -> dict[str, Any]:
        """End the run after an attempt with ``reason`` (a step after it failed in a way no restart can mend)."""
        self.current.update(decision={"retry": False, "reason": reason}, next_step="end")
        self.state["next"] = None
        self._save()
        return self.view()

    def stopped_on(self, node: str, groups: Sequence[Mapping[str, Any]]) -> None:
        """What the stop after the attempt stopped on ``node`` (run_groups.py's groups), for stop.yml's account."""
        if groups:
            self.current.setdefault("stopped_groups", {})[node] = [dict(group) for group in groups]
            self._save()

    def leave_out(self, nodes: Mapping[str, str]) -> None:
        """Nodes kept out of the rest of the run (a health check after an attempt found them sick), each with why."""
        if nodes:
            self.state["left_out"] = {**(self.state.get("left_out") or {}), **nodes}
            self._save()

    def left_out(self) -> dict[str, str]:
        return dict(self.state.get("left_out") or {})

    def launched(self, fanout: Mapping[str, Any]) -> dict[str, Any]:
        """The attempt's fan-out has returned (the run's supervisor launches): kept for :meth:`end`."""
        self.current["fanout"] = dict(fanout)
        self._save()
        return self.view()

    def after_done(self) -> dict[str, Any]:
        """The steps after a failed attempt are done (the supervisor's: stopped, judged, resumed, set aside): a
        supervisor started again goes on from the next launch, not from them."""
        self.current["after_done"] = True
        self._save()
        return self.view()

    def end(self, fanout: Mapping[str, Any], watch: Mapping[str, Any] | None, now: float) -> dict[str, Any]:
        """The attempt's outcome: a failed fan-out (named on the master), else what the watcher saw, else running
        (``-e wait=false``)."""
        current = self.current
        current.update(outcome=train_outcome(current["plan"]["master"], fanout, watch), ended_at=now)
        current["watch"] = dict(watch) if watch else None  # the watch's own result, for whoever follows the run
        self._save()
        return self.view()

    def amend(self, outcome: Mapping[str, Any]) -> dict[str, Any]:
        """The attempt's outcome with what another source adds (Slurm's account of the job: a time limit, a
        cancel, a lost node), before it is judged."""
        current = self.current
        if current.get("outcome") is None:
            raise AttemptError(f"attempt {current['number']} has not ended")
        current["outcome"] = dict(outcome)
        self._save()
        return self.view()

    def judge(
        self,
        options: Mapping[str, Any],
        summary: Mapping[str, Any] | None,
        marks: Mapping[str, Any] | None,
        answering: Sequence[str],
        reach: Mapping[str, Any],
        unhealthy: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Record the attempt and decide what comes next.

        ``summary``: the report's summary of the attempt's logs; ``marks``: the master's collected marks
        (:func:`read_marks`: the checkpoint tracker's text, whether the restart mark is still there; None when the
        master did not answer); ``answering``: the nodes still in the play; ``reach``: each node's ping after the
        failure; ``unhealthy``: the nodes the quick health check after the failure found sick (node -> why)."""
        current = self.current
        outcome, plan = current["outcome"], current["plan"]
        marks = marks or {}
        lost = recovery.lost_nodes(plan, list(answering), reach) if outcome.get("state") == "failed" else {}
        record = recovery.attempt_record(
            current["number"],
            current["started_at"],
            current.get("ended_at", current["started_at"]),
            outcome,
            summary,
            current["resumes_from"],
            tracker_iteration(marks.get("checkpoint")),
        )
        self.state["records"].append(record)
        if record.get("save_failure"):
            self.state.setdefault("failed_loads", {})[str(record["resumed_from"])] = record["save_failure"]
        # a save that failed to load is no node's fault: no node is isolated for it
        suspect = None if record.get("save_failure") else incidents.suspect(record)
        in_plan = [n["name"] for n in plan["nodes"]]
        if suspect and options.get("elastic") and record["node"] in in_plan and record["node"] not in lost:
            # a hang's culprit, or a device error: the next attempt goes on without that node (isolate first)
            lost[record["node"]] = f"isolated as {suspect}"
        if outcome.get("state") == "failed":
            for node, why in (unhealthy or {}).items():
                if node in in_plan and node not in lost:
                    lost[node] = f"sick in the health check before the next attempt ({why})"
        decision = recovery.retry_decision(
            self.state["records"],
            int(options["max_restarts"]),
            not marks.get("restarting", True),
            lost,
            bool(options.get("elastic")),
            int(options.get("min_nodes") or 1),
            len(plan["nodes"]),
        )
        step = "end" if not decision["retry"] else ("replan" if decision.get("replan") else "relaunch")
        current.update(decision=decision, next_step=step, lost=lost, cause=record["cause"])
        recovery.write_attempt(self.run_dir, record, set_aside=False, plan=plan)
        self._say()
        self._save()
        return self.view()

    def replanned(self, new_plan: Mapping[str, Any] | None = None, refused: str | None = None) -> dict[str, Any]:
        """The re-plan on the nodes that remain (resuming from the attempt's last checkpoint), or why it was
        refused: then the run ends."""
        current = self.current
        if current.get("next_step") != "replan":
            raise AttemptError(f"attempt {current['number']} was not to be re-planned")
        lost = current.get("lost") or {}
        if new_plan is None:
            current["decision"] = {
                "retry": False,
                "reason": f"the re-plan without {', '.join(lost)} was refused: {(refused or 'see above').strip()}",
            }
            current["next_step"] = "end"
        else:
            mark = self.state["records"][-1]["checkpoint_at_end"]
            self.state["next"] = with_resume(new_plan, mark)
            note = recovery.replan_note(current["plan"], new_plan, lost)
            current["decision"] = dict(current["decision"], reason=f"{current['decision']['reason']}: {note}")
        self._say()
        self._save()
        return self.view()

    def resume(self, choice: Mapping[str, Any]) -> dict[str, Any]:
        """The save the next attempt resumes from: ``choice`` is the scan's (``trainops_resume_choice``: ``resume``
        as the iteration's text, '' for none; ``refused`` when saves exist and none can be trusted; ``lines``; the
        verdicts as ``saves``). A refusal ends the run with its reason; a save that an attempt failed to load is
        never chosen (the scan is judged with :attr:`failed_loads`)."""
        current = self.current
        if current.get("next_step") not in ("relaunch", "replan"):
            raise AttemptError(f"attempt {current['number']} is not followed by another")
        lines = list(choice.get("lines") or [])
        if choice.get("refused"):
            current["decision"] = {"retry": False, "reason": f"no save to resume from: {choice['refused']}"}
            current["next_step"] = "end"
            self.state["next"] = None
            lines.append(f"attempt {current['number'] + 1} is not started: {current['decision']['reason']}")
        else:
            text = str(choice.get("resume") or "").strip()
            iteration = int(text) if text else None
            # a save set aside is gone from the directory: a new save of that iteration is another save
            moved = {iteration_of(name) for name in choice.get("set_aside") or []}
            failed = self.state.get("failed_loads") or {}
            self.state["failed_loads"] = {k: why for k, why in failed.items() if int(k) not in moved}
            self.state["resume_next"] = {"iteration": iteration, "saves": list(choice.get("saves") or [])}
            checked = "verified" if choice.get("saves") else "the tracker's, not checked: -e verify_checkpoints=false"
            start = "a fresh start (no save)" if iteration is None else f"iteration {iteration}'s save ({checked})"
            lines.append(f"resume       attempt {current['number'] + 1} resumes from {start}")
        current["message"] = "\n".join(lines)
        self._save()
        return self.view()

    def prepare(self, restarting: bool) -> dict[str, Any]:
        """Just before the next launch: end the restarts when stop.yml removed the restart mark meanwhile, else
        set the attempt's collected files aside into ``attempt-<k>/``. ``next`` says whether to begin again."""
        current = self.current
        if current.get("next_step") not in ("relaunch", "replan"):
            raise AttemptError(f"attempt {current['number']} is not followed by another")
        if not restarting:
            current["decision"] = {"retry": False, "reason": recovery.STOPPED}
            current["next_step"] = "end"
            self.state["next"] = None
        else:
            recovery.write_attempt(self.run_dir, self.state["records"][-1], set_aside=True)
        self._save()
        return self.view()

    def _say(self) -> None:
        """The line train.yml prints after a judged attempt: how it ended, the decision, what starts next."""
        current = self.current
        decision, outcome = current["decision"], current["outcome"]
        if outcome.get("state") != "failed":
            current["message"] = f"attempt {current['number']} {outcome.get('state')}"
            return
        cause = f": {current['cause']}" if current.get("cause") else ""
        text = f"attempt {current['number']} failed{cause} -> {decision['reason']}"
        if decision["retry"]:
            mark = self.state["records"][-1]["checkpoint_at_end"]
            start = f"checkpoint {mark}" if mark is not None else "the start"
            if decision.get("fallback") is not None:
                start = f"the verified save before iteration {decision['fallback']}"
            text += f"; starting attempt {current['number'] + 1} from {start}"
        current["message"] = text
