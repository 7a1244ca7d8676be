"""The run's notifications (train.yml -e notify=URL[,URL...], docs/monitoring.md): what the run's supervisor tells
the people who are not watching, through Apprise (Slack, DingTalk, WeCom, Feishu/Lark, e-mail, JSON webhooks...).

:func:`events` reads one observation of the run, the same the metrics endpoint serves (the attempt's plan, its
watch's result, the attempts' view), and says every event it shows: the run started, a progress milestone, a hang
with its culprit, a node lost, a restart and why, a straggler, a save not verified, the checkpoint disk low, the run
finished, failed or stopped. Each event has a key that names it once in the run, so that an observation made again
(every probe) or a supervisor taken up again sends nothing twice. :class:`Notifier` sends each new event from a
thread of its own and keeps the keys it tried (in a file of the run's state): a target that fails or hangs never
slows or fails the run, and its failure is said once in the supervisor's events.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .checkpoints import BAD
from .records import write_json
from .run_metrics import run_state

#: The share of the planned iterations at which a milestone is sent (the highest reached, once).
MILESTONES = (0.25, 0.5, 0.75)
#: Seconds a send may take before the next one is tried (Apprise's own timeouts bound each request).
SEND_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Event:
    key: str  # names the event once in the run
    kind: str  # started, milestone, hang, lost, restart, straggler, unverified, disk, finished, failed, stopped
    level: str  # Apprise's notify types: info, success, warning, failure
    title: str
    body: str


def _nodes(plan: Mapping[str, Any]) -> str:
    return ", ".join(node["name"] for node in plan.get("nodes") or [])


def events(plan: Mapping[str, Any], watch: Mapping[str, Any] | None, view: Mapping[str, Any] | None) -> list[Event]:
    """Every event the observation shows, in the order they happened (the caller drops the keys already sent)."""
    watch, view = watch or {}, view or {}
    exp = plan["exp_name"]
    number = int(view.get("number") or watch.get("attempt") or 1)
    run = f"{exp} {plan['run_id']}"
    last = watch.get("last_iteration") or {}
    iteration, planned = last.get("iteration"), last.get("train_iters") or plan.get("train_iters")
    found: list[Event] = []
    if iteration is not None:
        step = last.get("elapsed_ms")
        pace = f", {step / 1000:.2f} s per iteration" if step else ""
        body = f"{run}: iteration {iteration}/{planned} on {_nodes(plan)} (attempt {number}){pace}."
        found.append(Event("started", "started", "info", f"{exp}: the run trains",
                           f"{body} Follow it: playbooks/status.yml -e follow=true"))  # fmt: skip
        reached = [share for share in MILESTONES if planned and iteration >= share * planned]
        if reached:
            percent, loss = round(reached[-1] * 100), (last.get("losses") or {}).get("lm loss")
            body = f"{run}: iteration {iteration}/{planned}" + (f", lm loss {loss:.4g}" if loss else "")
            found.append(Event(f"milestone:{percent}", "milestone", "info", f"{exp}: {percent}% trained", body))
    if finding := watch.get("hang"):
        found.append(_hang(finding, run, exp, number))
    for row in watch.get("stragglers") or []:
        where = f"{row['node']} rank {row['rank']}"
        body = (f"{run}, attempt {number}: its compute takes {float(row['ratio']):.2f}x the other ranks' median. "
                f"Look at {row['node']}'s cards and host; health.yml -e level=full compares the nodes")  # fmt: skip
        found.append(Event(f"straggler:{number}:{row['node']}:{row['rank']}", "straggler", "warning",
                           f"{exp}: {where} is a straggler", body))  # fmt: skip
    checkpoints = watch.get("checkpoints") or {}
    for save in checkpoints.get("saves") or []:
        if isinstance(save, Mapping) and save.get("verdict") == BAD:  # not a save still being written (pending)
            why = "; ".join(str(reason) for reason in save.get("reasons") or []) or save["verdict"]
            body = f"{run}: {why}. A restart resumes from an older verified save (docs/checkpoints.md)"
            title = f"{exp}: the save of iteration {save.get('iteration')} is not verified"
            found.append(Event(f"unverified:{save.get('name') or save.get('iteration')}", "unverified", "warning",
                               title, body))  # fmt: skip
    free, size = (checkpoints.get("disk") or {}).get("free_bytes"), plan.get("checkpoint_bytes")
    if isinstance(free, (int, float)) and isinstance(size, (int, float)) and size and free < 2 * size:
        body = (f"{run}: {free / 2**30:.1f} GiB free where checkpoints go, a save takes {size / 2**30:.1f} GiB. "
                "Free space, or keep fewer saves (-e keep_checkpoints=N)")  # fmt: skip
        found.append(Event(f"disk:{number}", "disk", "warning", f"{exp}: room for fewer than two saves", body))
    return found + _ending(view, number, run, exp, iteration, planned)


def _hang(finding: Mapping[str, Any], run: str, exp: str, number: int) -> Event:
    """A hang's culprit, with where its stack stands (the top of its frames) and where the evidence is."""
    from .hang import culprit_text

    lines = [
        f"{run}, attempt {number}: no new iteration for {finding.get('seconds_since_progress', 0):.0f} s after "
        f"iteration {finding.get('last_iteration')}: {finding['finding']}",
        *(f"culprit {culprit_text(line)}" for line in finding.get("culprits") or []),
        *([f"evidence: {finding['evidence']}"] if finding.get("evidence") else []),
        "playbooks/status.yml names it again (docs/train.md, 'When a run hangs or slows down')",
    ]
    title = f"{exp}: hang suspected ({finding['confidence']} confidence)"
    return Event(f"hang:{number}", "hang", "failure", title, "\n".join(lines))


def _ending(view: Mapping[str, Any], number: int, run: str, exp: str, iteration: Any, planned: Any) -> list[Event]:
    """The attempt's end, and what the supervisor does next."""
    outcome = view.get("outcome") or {}
    if outcome.get("state") in (None, "running") or not view.get("decision"):
        return []  # running, or ended and being judged: what comes next is not decided yet
    state, found = run_state(None, view), []
    # the cause judged from the gathered logs, else what the watch saw; a stop is stop.yml's, whatever the ranks said
    judged = None if outcome.get("kind") == "stopped" else view.get("cause")
    reason = judged or outcome.get("reason") or (view.get("decision") or {}).get("reason") or ""
    # the judged cause names its node and rank; the watch's node is only where it saw the end first
    where = f" on {outcome['node']}" if outcome.get("node") and not judged else ""
    ended = f"attempt {number} ended {outcome.get('kind') or state}{where}: {reason}"
    if outcome.get("kind") == "lost":
        found.append(
            Event(f"lost:{number}", "lost", "failure", f"{exp}: {outcome.get('node')} lost", f"{run}, {ended}")
        )
    if state == "restarting":
        decision = (view.get("decision") or {}).get("reason") or view.get("message") or ""
        title = f"{exp}: attempt {number} failed, restarting"
        found.append(Event(f"restart:{number}", "restart", "warning", title,
                           f"{run}: {ended}. Attempt {number + 1} follows: {decision}"))  # fmt: skip
    elif state == "finished":
        body = f"{run}: {iteration}/{planned} iterations, {number} attempt(s). Its report: playbooks/report.yml"
        found.append(Event("end", "finished", "success", f"{exp}: the run finished", body))
    elif state in ("failed", "stopped"):
        body = f"{run}: {ended}. train.yml -e exp={exp} resumes it from its newest verified save"
        found.append(Event("end", state, "failure" if state == "failed" else "info", f"{exp}: the run {state}", body))
    return found


class Notifier:
    """Sends each new event of a run once, through ``send(event) -> error or None`` (Apprise's, by
    :func:`apprise_sender`), from a thread of its own. ``sent_path`` keeps the keys sent across supervisors."""

    def __init__(self, send: Callable[[Event], str | None], sent_path: str, say: Callable[[str], None]) -> None:
        self.send, self.sent_path, self.say = send, sent_path, say
        try:
            with open(sent_path, encoding="utf-8") as handle:
                self.sent: set[str] = set(json.load(handle))
        except (OSError, ValueError):
            self.sent = set()
        self.failed = False
        self._queued: set[str] = set()
        self._queue: queue.Queue[Event | None] = queue.Queue()
        self._thread = threading.Thread(target=self._sending, name="notify", daemon=True)
        self._thread.start()

    def update(self, plan: Mapping[str, Any], watch: Mapping[str, Any] | None, view: Mapping[str, Any] | None,
               state: Mapping[str, Any] | None = None) -> None:  # fmt: skip
        """The supervisor's observation after a probe or a step (the metrics endpoint's): each new event queued."""
        for event in events(plan, watch, view):
            if event.key not in self.sent and event.key not in self._queued:
                self._queued.add(event.key)
                self._queue.put(event)

    def _sending(self) -> None:
        while (event := self._queue.get()) is not None:
            try:
                error = self.send(event)
            except Exception as exc:  # noqa: BLE001 - a target's failure is the target's, never the run's
                error = type(exc).__name__  # its message may hold the URL, and so a token
            # kept once tried: a supervisor taken up again does not send it again (one killed before it tried
            # sends it then: an event is never lost to a restart of the supervisor, and rarely sent twice)
            self.sent.add(event.key)
            write_json(self.sent_path, sorted(self.sent))
            if error and not self.failed:
                self.failed = True
                self.say(f"supervisor: a notification could not be sent ({event.kind}: {error[:200]}); the run goes "
                         "on, and later ones are tried as they come")  # fmt: skip
            elif not error and self.failed:
                self.failed = False
                self.say("supervisor: notifications are sent again")

    def close(self, timeout: float = SEND_TIMEOUT_S) -> None:
        """Send what is queued (the run's end), waiting at most ``timeout`` seconds."""
        self._queue.put(None)
        self._thread.join(timeout)


def apprise_sender(urls: Sequence[str]) -> Callable[[Event], str | None]:
    """A sender through Apprise to every URL: None when each target took the event, else what failed (never the
    URLs: they may hold tokens)."""
    import apprise

    # Apprise logs a failed send with its URL (a token): its log goes nowhere, and a failure is said without it
    logger = logging.getLogger("apprise")
    logger.handlers, logger.propagate = [logging.NullHandler()], False
    targets = apprise.Apprise()
    for url in urls:
        targets.add(url)

    def send(event: Event) -> str | None:
        sent = targets.notify(title=event.title, body=event.body, notify_type=event.level)
        return None if sent else f"a target of -e notify did not take the event ({len(targets)} target(s))"

    return send


def urls(value: Any) -> list[str]:
    """-e notify's URLs: one string (several separated by commas or spaces, as Apprise takes them) or a list."""
    items = value if isinstance(value, (list, tuple)) else [value] if value else []
    return [part for item in items for part in str(item).replace(",", " ").split() if part]


def unknown_urls(value: Any) -> list[int]:
    """The positions (1-based) of -e notify's URLs that Apprise has no service for (checked on the controller)."""
    import apprise

    return [i for i, url in enumerate(urls(value), 1) if not apprise.Apprise().add(url)]


def sent_path(state_dir: str) -> str:
    return os.path.join(state_dir, "notified.json")
