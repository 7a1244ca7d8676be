"""The run's lifecycle on the cluster: what the run's supervisor does from one attempt's launch to the next.

The supervisor (``node/supervise.py``) runs in the master's training container (or -e supervisor_host's: the plan's
``supervisor``), detached from every SSH session,
for as long as the run lives. It runs the core's steps (:class:`trainops.attempts.Attempts`, whose state it keeps in
``<run_dir>/supervisor/run/attempts.json``) in order, and reaches every node with the run's ``on-node.sh`` (the
containers' sshd, the cluster key, every host key pinned: the fan-out's own path):

* :meth:`Lifecycle.launch`: the attempt begins (:meth:`Attempts.begin`) and the run's ``fanout.sh`` starts every
  node's launch;
* the watch (:func:`trainops.watch.watch`, run by the supervisor), then :meth:`Lifecycle.ended`;
* after a failure, :meth:`Lifecycle.after_attempt`: every node of the plan is reached (a node that neither the
  master nor its sshd can reach is lost: called so from inside the cluster, never by the controller); what is left
  of the attempt is stopped on each node that answers (the node package's ``run_groups.py``); with
  ``-e max_restarts``, each node's logs are gathered here (``pack_logs.py --pack -``), the quick health check runs
  on the nodes that answer (``node_facts.py``, judged by :func:`trainops.health.judge`), the attempt is judged
  (:meth:`Attempts.judge`), the save the next attempt resumes from is chosen on its master
  (``checkpoint_scan.py``, :func:`trainops.identity.resume_choice`), the attempt's logs are set aside on every node
  that stays (reading the restart mark again: stop.yml ends the restarts) and the next attempt is launched.

Under ``-e launcher=slurm`` the job's tasks start every node's launch (one task per node, in the training
container), and with ``-e max_restarts`` they outlive an attempt: each says in ``<run dir>/slurm-task-<node>`` that it
waits, and the supervisor starts the next attempt in the same allocation by writing ``slurm-next`` on every node
(:meth:`Lifecycle.launch`), or ends the job's tasks with ``end`` when the run ends (:meth:`Lifecycle.finish`).

The state directory mirrors the run's directory on the controller (``attempts.json``, ``<node>/`` logs,
``attempt-<k>/``, ``health/``), which train.yml and status.yml fetch. Every step reads the state the last one wrote,
so a supervisor killed at any point and started again goes on from the step it was at (:meth:`Lifecycle.step`).

What the supervisor cannot see from inside the cluster: the container's image and state as the node's docker
reports them, and the node's kernel log (both the host's). Its health check after a failure reads everything
``node_facts.py`` reads (the cards, the software, the free space); the kernel log's check is marked skipped, and a
node whose container does not answer is lost, as an unreachable node. health.yml and train.yml's check before the
first launch look at both from the controller.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import time
from collections.abc import Callable, Mapping
from typing import Any

from . import health, identity, incidents, node_choice
from .attempts import Attempts, read_marks
from .errors import PlanError
from .plan import make_plan
from .plan_request import PlanRequest
from .records import RecordError
from .recovery import STOPPED
from .render import render_files
from .run_report import write_report
from .straggler import DEFAULT_RATIO
from .watch import supervisor_node

#: ``on_node(node, argv, stdin=None, binary=False)``: run argv on a node of the plan, answered as docker exec is
#: (``rc``, ``stdout``, ``stderr``; ``failed`` and ``msg`` when rc is not 0; ``unreachable`` when ssh could not
#: reach the node).
OnNode = Callable[..., dict[str, Any]]
#: Seconds a stop waits after SIGTERM before SIGKILL when the run's options do not say (-e stop_grace).
STOP_GRACE_S = 30
#: Seconds beyond the stop grace that a stop of a Slurm job's attempt waits for Slurm's cancel to stop the ranks.
SLURM_CANCEL_WAIT_S = 30
#: Seconds the steps after an attempt of a Slurm run wait for every node's job task to say it waits for the next.
SLURM_TASK_WAIT_S = 60
#: The state directory under the run's directory on the supervisor's host.
STATE_DIR = os.path.join("supervisor", "run")


def _why(reply: Mapping[str, Any], limit: int = 300) -> str:
    text = reply.get("msg") or reply.get("stderr") or reply.get("stdout") or "no answer"
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return " ".join(str(text).split())[:limit]


def _safe_members(tar: tarfile.TarFile, node: str):
    """The pack's regular files and directories under ``<node>/`` (nothing that leaves it, no link)."""
    for member in tar:
        name = os.path.normpath(member.name)
        if (member.isfile() or member.isdir()) and (name == node or name.startswith(f"{node}/")):
            yield member


def _supervisors_node(plan: dict[str, Any]) -> str:
    """Where the supervisor looks from, in its lines: ``the master``, or ``node3, the supervisor's node`` (-e
    supervisor_host: the plan's ``supervisor``)."""
    here = supervisor_node(plan)
    return "the master" if here == plan["master"] else f"{here}, the supervisor's node"


class Lifecycle:
    """One run's attempts, stepped by the supervisor. ``request``: what train.yml gave it (``supervise.py start``):

    * ``plan``: the first attempt's plan; ``resumes_from``, ``checked_saves``: the save train.yml's check chose
      and that scan's verdicts; ``run_started``: the train.yml run (names the state); ``launched``: who started
      the first attempt's launches when the supervisor does not (a Slurm job's tasks), else empty; ``slurm_job``:
      the Slurm job's id under -e launcher=slurm, whose tasks start every attempt's launches; ``watch_only``:
      the run's ranks were launched before it had a supervisor (status.yml -e follow=true starts one): it watches,
      and changes nothing after a failure;
    * ``options``: the run's options (``max_restarts``, ``elastic``, ``min_nodes``, ``health``,
      ``verify_checkpoints``, ``straggler_ratio``);
    * ``programs``: the node package's programs in the containers; ``health``: ``device_tool``,
      ``megatron_home``, ``expected`` (the card's memory, the checkpoint's size), ``full`` (the site's recent full
      checks, :func:`trainops.health.full_records`) and ``max_age_h`` (how long one stands) for the check after a
      failure.
    """

    def __init__(
        self,
        run_dir: str,
        request: Mapping[str, Any],
        on_node: OnNode,
        say: Callable[[str], None],
        stopping: Callable[[], Mapping[str, Any] | None] = lambda: None,
    ):
        """``stopping()``: stop.yml's request to stop the run (``grace``: its seconds between SIGTERM and SIGKILL),
        None until it asks. Once asked, no new attempt is launched; what is left of the attempt is stopped with its
        restart mark removed, and no health check runs."""
        self.run_dir, self.request, self.on_node, self.say = run_dir, request, on_node, say
        self.stopping = stopping
        self.state_dir = os.path.join(run_dir, STATE_DIR)
        os.makedirs(self.state_dir, exist_ok=True)
        self.attempts = Attempts(self.state_dir)
        self.options = dict(request.get("options") or {})
        self.programs = request["programs"]
        self._reached: dict[str, dict[str, Any]] = {}  # the nodes reached in the steps after an attempt

    # --- where the run is -------------------------------------------------------------------------------------
    def step(self) -> str:
        """The step the run is at, from its state: ``launch``, ``watch``, ``after`` (an ended attempt's stop, gather,
        judge, re-plan, resume choice and set-aside), ``next`` (the next attempt's launch), or ``done``."""
        current = self.attempts.state.get("current")
        if current is None or "fanout" not in current:
            return "launch"
        if current.get("outcome") is None:
            return "watch"
        if current.get("after_done"):
            return "next" if current.get("next_step") in ("relaunch", "replan") else "done"
        failed = current["outcome"].get("state") == "failed"
        # a finished attempt is judged too where restarts are on: its record is the run's last
        return "after" if failed or int(self.options.get("max_restarts") or 0) > 0 else "done"

    def view(self) -> dict[str, Any]:
        return self.attempts.view()

    def last_watch(self) -> dict[str, Any] | None:
        """The current attempt's watch result, as :meth:`ended` kept it."""
        return (self.attempts.state.get("current") or {}).get("watch")

    # --- the steps --------------------------------------------------------------------------------------------
    def launch(self) -> dict[str, Any]:
        """Begin the attempt (the first, or the next a failure's steps prepared) unless it has begun, and start
        every node's launch with the run's fanout.sh on its master. A fan-out that a supervisor killed meanwhile
        may have run is not run again: the watch finds whether the ranks started."""
        current = self.attempts.state.get("current")
        if current is None or "fanout" in current:
            request = self.request
            view = self.attempts.begin(
                request["plan"],
                request.get("resumes_from") or "",
                time.time(),
                float(request["run_started"]),
                request.get("checked_saves") or [],
            )
            self.say(f"attempt {view['number']} begins on {', '.join(self._names(view['plan']))}")
        current = self.attempts.current
        plan = current["plan"]
        if current["number"] == 1 and self.request.get("launched"):
            # a Slurm job's tasks start the launches (train.yml wrote slurm-go), or status.yml follows ranks that
            # were launched before the run had a supervisor: nothing is started here
            return self.attempts.launched({"rc": 0, "stdout": str(self.request["launched"]), "stderr": ""})
        if current.get("launching"):
            self.say(f"supervisor: attempt {current['number']}'s fan-out was run by a supervisor that ended before "
                     "it returned; it is not run again (the watch finds whether every node started)")  # fmt: skip
            return self.attempts.launched({"rc": 0, "stdout": "run by an earlier supervisor", "stderr": ""})
        if self.stopping():
            # stop.yml asked before this attempt's fan-out ran (in the seconds between train.yml starting the
            # supervisor and its first launch): no rank is started; the attempt ends stopped, and the steps after
            # it find nothing left on the nodes
            reason = f"stop.yml asked the run's supervisor to stop the run before attempt {current['number']}'s launch"
            self.say(f"supervisor: {reason}: no rank is started")
            self.attempts.launched({"rc": 0, "stdout": "", "stderr": "", "not_run": STOPPED})
            stopped = {"state": "failed", "kind": "stopped", "node": plan["master"], "reason": f"{reason} ({STOPPED})"}
            return self.attempts.end(self.attempts.current["fanout"], stopped, time.time())
        self.attempts.launching()
        if self.request.get("slurm_job"):  # a later attempt of a Slurm run: its job's tasks start it
            fanout = self._slurm_write(plan, str(current["number"]))
        else:
            fanout = self.on_node(plan["master"], ["bash", f"{plan['run_dir']}/fanout.sh"])
        fanout = {k: fanout.get(k) for k in ("rc", "stdout", "stderr", "msg") if fanout.get(k) is not None}
        view = self.attempts.launched(fanout)
        if fanout.get("rc") != 0:  # nothing to watch: the attempt failed on the master (trainops.outcome names it)
            self.say(f"{plan['master']}: the fan-out failed: {_why(fanout)}")
            view = self.attempts.end(fanout, None, time.time())
        return view

    def ended(self, watched: Mapping[str, Any] | None) -> dict[str, Any]:
        """The attempt's outcome from its fan-out and the supervisor's watch; a failed one is said with the steps
        that follow."""
        view = self.attempts.end(self.attempts.current.get("fanout") or {}, watched, time.time())
        outcome = view.get("outcome") or {}
        if outcome.get("state") == "failed" and self.step() == "after":
            restarts = int(self.options.get("max_restarts") or 0) > 0 and not self.stopping()
            then = ", gathering the logs and checking the nodes before the decision" if restarts else ""
            failed = f"{outcome.get('kind')}, {outcome.get('node')}"
            self.say(f"supervisor: attempt {view['number']} ended failed ({failed}): stopping what is left{then}")
        return view

    def finish(self) -> None:
        """The run has ended: under Slurm with restarts, every node's job task waits for another attempt; told
        ``end``, each exits with its last launch's status, and the job ends with the run."""
        if self.request.get("slurm_job") and int(self.options.get("max_restarts") or 0) > 0:
            current = self.attempts.state.get("current") or {}
            reply = self._slurm_write(current.get("plan") or self.request["plan"], "end")
            if reply["rc"] != 0:
                self.say(f"supervisor: {reply['stderr']}: Slurm ends that task when the job's time is up, or "
                         "stop.yml cancels the job")  # fmt: skip

    def end_restarts(self) -> dict[str, Any]:
        """stop.yml asked for the run to stop between two attempts: the next one is not launched."""
        self.say(f"attempt {self.attempts.current['number'] + 1} is not started: {STOPPED}")
        self.attempts.abandon(STOPPED)
        return self.attempts.after_done()

    def after_attempt(self) -> dict[str, Any]:
        """An ended attempt's steps on the cluster (the module's docstring), each said as it is done and marked in
        the state, so that a supervisor started again takes none twice; returns the current attempt, whose
        ``next`` says whether another is launched. A step that fails in a way no restart can mend ends the run
        with its reason."""
        try:
            return self._after_attempt()
        except Exception as exc:  # noqa: BLE001 - the run ends with the reason, and the supervisor with it
            reason = f"the supervisor's step after attempt {self.attempts.current['number']} failed: {exc!r}"
            self.say(f"{reason}; the run ends (report.yml reports it; a new train.yml resumes from its checkpoints)")
            self.attempts.abandon(reason)
            return self.attempts.after_done()

    def _after_attempt(self) -> dict[str, Any]:
        self._reached = {}
        current = self.attempts.current
        plan = current["plan"]
        failed = current["outcome"].get("state") == "failed"
        names = self._names(plan)
        if current.get("decision") is None:  # not judged yet
            reach = {name: self._reach(name) for name in names} if failed else {name: {} for name in names}
            answering = [name for name in names if not reach[name].get("unreachable")]
            seen_from = _supervisors_node(plan)
            for name in names:
                if reach[name].get("unreachable"):
                    self.say(f"{name}: unreachable from {seen_from} ({_why(reach[name])}): it gets no rank again")
            if failed:
                # survivors of SIGKILL: no rank there again
                for name, why in self._stop(plan, answering, self.stopping()).items():
                    reach[name] = {"unreachable": True, "msg": why}
                    answering.remove(name)
            if int(self.options.get("max_restarts") or 0) <= 0:
                return self._after_done()
            for name in answering:
                self._gather(plan, name)
            checked = failed and self.options.get("health", "exclude") != "off" and not self.stopping()
            unhealthy = self._health(plan, answering) if checked else {}
            ratio = float(self.options.get("straggler_ratio") or DEFAULT_RATIO)
            summary = write_report(self.state_dir, plan, current["outcome"], ratio)
            try:
                marks = read_marks(self.state_dir, plan["master"])
            except RecordError as exc:  # judged as if not collected: the run goes on
                self.say(f"warning: {exc}")
                marks = None
            # no node "leaves a play" here: one the master cannot reach is lost by its reach alone
            view = self.attempts.judge(self.options, summary, marks, names, reach, unhealthy)
            self.say(view["message"])
        view = self.attempts.view()
        if view["next"] in ("relaunch", "replan") and self.stopping():
            return self.end_restarts()
        if view["next"] == "relaunch" and self.request.get("slurm_job") and not self.attempts.done("slurm_waits"):
            gone = self._slurm_tasks_gone(plan, current["number"])
            if gone:
                reason = (f"Slurm job {self.request['slurm_job']} can start no attempt: its task on "
                          + "; on ".join(f"{name} {why}" for name, why in gone.items())
                          + "; train.yml run again resumes from the newest verified save")  # fmt: skip
                self.say(f"attempt {current['number'] + 1} is not started: {reason}")
                self.attempts.abandon(reason)
                return self._after_done()
            self.attempts.mark("slurm_waits")
        if view["next"] == "replan" and not self.attempts.done("replanned"):
            view = self._replan(view)
            self.attempts.mark("replanned")
        if view["next"] in ("relaunch", "replan") and self.attempts.state.get("resume_next") is None:
            view = self._resume(view)
        if view["next"] in ("relaunch", "replan"):
            view = self._set_aside(view)
        return self._after_done()

    # --- what the steps do on the nodes -------------------------------------------------------------------------
    @staticmethod
    def _names(plan: Mapping[str, Any]) -> list[str]:
        return [node["name"] for node in plan["nodes"]]

    def _reach(self, name: str) -> dict[str, Any]:
        """Whether the master reaches ``name`` ({} or ``unreachable`` with why): asked once per node in the steps
        after an attempt (the health check and the re-plan both ask of a spare)."""
        if name not in self._reached:
            reply = self.on_node(name, ["true"])
            self._reached[name] = {} if reply.get("rc") == 0 else {"unreachable": True, "msg": _why(reply)}
        return self._reached[name]

    def _stop(
        self, plan: Mapping[str, Any], answering: list[str], asked: Mapping[str, Any] | None = None
    ) -> dict[str, str]:
        """What is left of the attempt stopped on every node that answers (SIGTERM, grace, SIGKILL); when stop.yml
        ``asked`` for the stop, with its grace and the restart mark removed. Returns the nodes where processes
        survive SIGKILL, each with why (no rank goes there again: the launch would refuse)."""
        if self.attempts.done("stopped"):
            return {}
        survivors = {}
        given = [(asked or {}).get("grace"), self.options.get("stop_grace")]
        grace = int(next((value for value in given if value is not None), STOP_GRACE_S))
        if (asked or {}).get("slurm_cancels"):
            self._await_slurm_cancel(plan, answering, grace)
        for name in answering:
            argv = ["python3", f"{self.programs}/run_groups.py", "stop", name, plan["work_home"],
                    "--run-dir", plan["run_dir"], "--grace", str(grace)]  # fmt: skip
            reply = self.on_node(name, argv + (["--cancel-restarts"] if asked else []))
            try:
                stopped = json.loads(reply.get("stdout") or "")
            except ValueError:
                self.say(f"{name}: the stop of attempt {self.attempts.current['number']} failed: {_why(reply)}")
                continue
            if stopped.get("stopped"):
                self.attempts.stopped_on(name, stopped["stopped"])
                groups = ", ".join(str(group.get("pgid")) for group in stopped["stopped"])
                self.say(f"{name}: stopped what was left of the attempt (process groups {groups})")
            if reply.get("rc") != 0:
                survivors[name] = f"processes of the attempt survive SIGKILL ({_why(reply)})"
                self.say(f"{name}: {survivors[name]}: check the node's driver and file systems; a reboot may be "
                         "needed")  # fmt: skip
        self.attempts.mark("stopped")
        return survivors

    def _await_slurm_cancel(self, plan: Mapping[str, Any], answering: list[str], grace: int) -> None:
        """stop.yml asked, and cancels the run's Slurm job next (scancel): the job's tasks stop the ranks on every
        node, so that Slurm's account says CANCELLED rather than a job whose ranks ended under it. Wait up to the
        grace plus :data:`SLURM_CANCEL_WAIT_S` for every node's launches to end that way; :meth:`_stop` then stops
        what is left."""
        left, deadline = list(answering), time.monotonic() + grace + SLURM_CANCEL_WAIT_S
        self.say(f"supervisor: stop.yml cancels the Slurm job: waiting for its tasks to stop the ranks on "
                 f"{', '.join(left)}")  # fmt: skip
        while left and time.monotonic() < deadline:
            for name in list(left):
                argv = ["python3", f"{self.programs}/run_groups.py", "list", name, plan["work_home"],
                        "--run-dir", plan["run_dir"]]  # fmt: skip
                try:
                    live = json.loads(self.on_node(name, argv).get("stdout") or "")["live"]
                except (ValueError, KeyError, TypeError):
                    live = []  # no answer to read: the stop that follows finds what is left
                if not live:
                    left.remove(name)
            if left:
                time.sleep(1)

    def _slurm_write(self, plan: Mapping[str, Any], word: str) -> dict[str, Any]:
        """``slurm-next`` written on every node of the plan: the next attempt's number, or ``end``. Answered as a
        fan-out is (rc, stdout, stderr)."""
        failed = []
        for name in self._names(plan):
            path = f"{plan['run_dir']}/slurm-next"
            reply = self.on_node(name, ["sh", "-c", 'printf "%s\\n" "$2" > "$1.tmp" && mv -f -- "$1.tmp" "$1"',
                                        "slurm-next", path, word])  # fmt: skip
            if reply.get("rc") != 0:
                failed.append(f"{name}: {path} could not be written ({_why(reply)})")
        if failed:
            return {"rc": 1, "stdout": "", "stderr": "; ".join(failed)}
        told = f"start attempt {word}" if word != "end" else "end: the run has ended"
        return {"rc": 0, "stdout": f"Slurm job {self.request['slurm_job']}'s tasks told to {told}", "stderr": ""}

    def _slurm_tasks_gone(self, plan: Mapping[str, Any], number: int) -> dict[str, str]:
        """Every node's Slurm job task waits for the attempt after ``number`` (its ``slurm-task-<node>`` says
        ``waiting <number>``), within :data:`SLURM_TASK_WAIT_S`: the nodes whose task does not, each with what it
        says (``ended ...``: the job's time is up or it was cancelled; no answer: the node left the job)."""
        gone: dict[str, str] = {}
        deadline = time.monotonic() + SLURM_TASK_WAIT_S
        left = self._names(plan)
        while left:
            gone = {}
            for name in list(left):
                reply = self.on_node(name, ["cat", f"{plan['run_dir']}/slurm-task-{name}"])
                said = " ".join(str(reply.get("stdout") or "").split())
                if said.split()[:2] == ["waiting", str(number)]:
                    left.remove(name)
                elif said.startswith("ended"):
                    gone[name] = f"has {said}"
                else:
                    gone[name] = f"does not wait for another attempt ({said or _why(reply)})"
            if not left or time.monotonic() >= deadline or any(why.startswith("has ended") for why in gone.values()):
                break
            time.sleep(2)
        return gone

    def _gather(self, plan: Mapping[str, Any], name: str) -> None:
        """The node's logs of the attempt (with the master's marks), unpacked into the state directory."""
        argv = ["python3", f"{self.programs}/pack_logs.py", f"--run-dir={plan['run_dir']}", f"--node={name}"]
        argv.append("--pack=-")
        if name == plan["master"]:
            argv.append(f"--checkpoint-dir={plan['checkpoint_dir']}")
        reply = self.on_node(name, argv, binary=True)
        if reply.get("rc") != 0:
            self.say(f"{name}: no logs gathered: {_why(reply)}")
            return
        try:
            with tarfile.open(fileobj=io.BytesIO(reply["stdout"]), mode="r:gz") as tar:
                tar.extractall(self.state_dir, members=list(_safe_members(tar, name)))  # noqa: S202 - members checked
        except (tarfile.TarError, OSError, EOFError) as exc:
            self.say(f"{name}: its logs could not be unpacked: {exc}")

    def _health(self, plan: Mapping[str, Any], answering: list[str]) -> dict[str, str]:
        """The quick health check of the nodes that answer (``node_facts.py`` on each), judged here; the nodes the
        policy leaves out, each with its verdict's reason. The record goes to the state's ``health/``."""
        checked = self.request.get("health") or {}
        inventory = {host["name"]: host for host in (self.request.get("replan") or {}).get("inventory") or []}
        slots = {name: host.get("slots") for name, host in inventory.items()}
        slots.update({node["name"]: node["slots"] for node in plan["nodes"]})
        # a spare an elastic re-plan may bring in is checked too (a sick one stands in for no one)
        spares = [name for name in (self.request.get("replan") or {}).get("spares") or []
                  if name not in answering and not self._reach(name).get("unreachable")]  # fmt: skip
        facts = {}
        for name in answering + spares:
            tool = checked.get("device_tool") or ""
            argv = ["python3", f"{self.programs}/node_facts.py", f"--device-tool={tool}",
                    f"--megatron-home={checked.get('megatron_home', '')}",
                    f"--disk-path={plan['checkpoint_dir']}"]  # fmt: skip
            facts[name] = health.node_facts(self.on_node(name, argv), slots.get(name), tool)
        if not facts:
            return {}
        now = time.time()
        # the full checks train.yml handed it that are still young enough: carried, as health.yml's quick check does
        carried = health.carry(checked.get("full") or [], list(facts), now, float(checked.get("max_age_h") or 0) * 3600)
        verdicts = health.judge(facts, checked.get("expected") or {}, None, carried)
        health_dir = os.path.join(self.state_dir, "health")
        path = health.record(health_dir, "quick", verdicts, facts, now,
                             f"the run's supervisor, after attempt {self.attempts.current['number']}")  # fmt: skip
        # the sick nodes' incidents, for the site's record: train.yml's report adds them when it collects the run
        name = os.path.relpath(os.path.dirname(path), self.state_dir)
        incidents.record(
            os.path.join(self.state_dir, incidents.HEALTH_FILE), health.incidents(verdicts, name, path, now), now
        )
        seen_from = _supervisors_node(self.attempts.current["plan"])
        self.say("\n".join([f"health       after the failure, from {seen_from}:", *health.lines(verdicts)]))
        use = set(self.options.get("use_nodes") or [])
        left = health.left_out(verdicts, self.options.get("health") or "exclude")
        sick = {name: verdicts[name]["reason"] for name in left if name not in use}
        # kept out of the rest of the run: a later re-plan does not bring a sick node or spare back
        self.attempts.leave_out({name: f"sick in the health check after attempt {self.attempts.current['number']}: "
                                       f"{why}" for name, why in sick.items()})  # fmt: skip
        return sick

    def _replan(self, view: dict[str, Any]) -> dict[str, Any]:
        """The elastic re-plan (``-e elastic=true``): the same run planned on the nodes that remain, a spare that
        answers in the place of each node lost (tp, pp, cp and the global batch kept), its launch files rendered
        here from train.yml's templates and variables and written into every node of the new plan; or, when they
        cannot hold it, the run ends with why."""
        replan = self.request.get("replan") or {}
        plan = self.attempts.current["plan"]
        left_out = {**(replan.get("left_out") or {}), **self.attempts.left_out(), **view["lost"]}
        spares = [name for name in replan.get("spares") or [] if name not in self._names(plan)]
        free = [name for name in spares if name not in left_out and not self._reach(name).get("unreachable")]
        inventory = {host["name"]: host for host in replan.get("inventory") or []}
        slots = {name: host.get("slots") for name, host in inventory.items()}
        nodes, lines = node_choice.plan_nodes(self._names(plan), free, left_out, slots)
        for line in lines:
            self.say(line)
        try:
            if not replan:
                raise PlanError(["train.yml gave the supervisor no re-plan request (a run of an older bundle)"])
            layout = dict(replan["request"]["layout"], gbs=plan["global_batch_size"], num_microbatches=None)
            request = dict(replan["request"], layout=layout, exp_name=plan["exp_name"], run_id=plan["run_id"],
                           recommend=False, hosts=[{k: v for k, v in inventory[name].items() if k != "master"}
                                                   for name in nodes])  # fmt: skip
            new_plan = make_plan(PlanRequest.from_options(request))
            if plan.get("supervisor"):  # the supervisor stays where it runs (-e supervisor_host, else the master)
                new_plan["supervisor"] = plan["supervisor"]
        except (PlanError, KeyError, TypeError) as exc:
            why = "; ".join(exc.problems) if isinstance(exc, PlanError) else f"a bad re-plan request ({exc})"
            view = self.attempts.replanned(None, why)
            self.say(view["message"])
            return view
        view = self.attempts.replanned(new_plan)
        self.say(view["message"])
        render = replan["render"]
        files = {
            name: text for name, (text, _) in render_files(new_plan, render["templates"], render["variables"]).items()
        }
        ran = set(self._names(plan))
        for name in self._names(new_plan):
            extra = {} if name in ran else {"restarting": "the run restarts after a failure (-e max_restarts)\n"}
            argv = ["python3", f"{self.programs}/write_run_files.py", "--run-dir", new_plan["run_dir"], "--node", name,
                    "--work-home", new_plan["work_home"], *replan.get("write_args", [])]  # fmt: skip
            written = self.on_node(name, argv, json.dumps(dict(files, **extra)))
            if written.get("rc") != 0:
                self.say(f"{name}: the re-plan's files could not be written: {_why(written)}")
        return view

    def _resume(self, view: dict[str, Any]) -> dict[str, Any]:
        """The save the next attempt resumes from, chosen on its master (newer saves set aside, the tracker set)."""
        plan, master = view["next_plan"], view["next_plan"]["master"]
        scan = self.on_node(master, ["python3", f"{self.programs}/checkpoint_scan.py", "scan", plan["checkpoint_dir"],
                                     "--args"])  # fmt: skip
        verify = self.options.get("verify_checkpoints", True)
        try:
            choice = identity.resume_choice(scan, plan, bool(verify), master, view["failed_loads"])
        except PlanError as exc:
            choice = {"refused": "; ".join(exc.problems), "lines": []}
        if not choice.get("refused") and (choice.get("set_aside") or choice.get("tracker") is not None):
            argv = ["python3", f"{self.programs}/checkpoint_scan.py", "resume", plan["checkpoint_dir"],
                    "--tag", plan["run_id"]]  # fmt: skip
            argv += ["--tracker", str(choice["tracker"])] if choice.get("tracker") is not None else []
            argv += ["--set-aside", *choice.get("set_aside", [])]
            applied = self.on_node(master, argv)
            if applied.get("rc") != 0:
                choice = {"refused": f"{master}: the saves could not be set aside: {_why(applied)}", "lines": []}
        view = self.attempts.resume(choice)
        self.say(view["message"])
        return view

    def _set_aside(self, view: dict[str, Any]) -> dict[str, Any]:
        """The attempt's logs set aside on every node that ran it and answers (one that leaves the plan too, so
        that its logs are never taken for a later attempt's), reading the restart mark again (stop.yml removes it:
        the restarts end); then the state's files of the attempt."""
        lost = view["lost"]
        stays = [
            name
            for name in self._names(self.attempts.current["plan"])
            if not str(lost.get(name, "")).startswith("unreachable")
        ]
        target = f"{view['next_plan']['run_dir']}/attempt-{view['number']}"
        restarting = None
        for name in stays:
            reply = self.on_node(name, ["python3", f"{self.programs}/pack_logs.py",
                                        f"--run-dir={view['next_plan']['run_dir']}", f"--node={name}",
                                        f"--set-aside={target}"])  # fmt: skip
            try:
                read = json.loads(reply.get("stdout") or "")
            except ValueError:
                self.say(f"{name}: its logs of attempt {view['number']} could not be set aside: {_why(reply)}")
                continue
            restarting = read["restarting"] if restarting is None else restarting
        view = self.attempts.prepare(True if restarting is None else bool(restarting))
        if view["next"] == "end":
            self.say(f"attempt {view['number'] + 1} is not started: {view['decision']['reason']}")
        return view

    def _after_done(self) -> dict[str, Any]:
        return self.attempts.after_done()
