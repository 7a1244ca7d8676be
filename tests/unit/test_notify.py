"""The run's notifications (trainops.notify): the events a watch fed with a real Megatron line shows, each sent once
through Apprise for real (its json:// service) to a webhook receiver on loopback, and a target that fails or
hangs never holding the run."""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest
from metric_samples import HOSTS, watched
from presets import load_preset, make_plan
from trainops import notify
from trainops.options import OptionError, convert


@pytest.fixture(scope="module")
def plan():
    layout = {"train_iters": 20, "seq_length": 256, "gbs": 8, "precision": "bf16"}
    made = make_plan(model=load_preset("tiny"), hosts=HOSTS, layout=layout, run_id="r1", exp_name="notes")
    return dict(made, checkpoint_bytes=2**30)


class Receiver(http.server.ThreadingHTTPServer):
    """A JSON webhook on loopback: what Apprise's json:// posts, or a target that answers 500, or one that hangs."""

    def __init__(self, status: int = 200, delay: float = 0.0) -> None:
        self.posted: list[dict] = []
        posted = self.posted

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                posted.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                time.sleep(delay)
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"json://127.0.0.1:{self.server_address[1]}/trainops"


def wait_until(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_the_events_of_a_watch_and_of_an_attempts_end(plan):
    watch = watched(plan)
    kinds = {event.key: event for event in notify.events(plan, watch, {"number": 1, "outcome": None})}
    assert list(kinds) == ["started", "milestone:50"]  # iteration 12 of 20: past 25 % and 50 %, the highest once
    assert kinds["started"].body.startswith("notes r1: iteration 12/20 on node1, node2 (attempt 1), 0.25 s per")
    assert kinds["milestone:50"].body == "notes r1: iteration 12/20, lm loss 5.521"
    watch = dict(watch, stragglers=[{"node": "node2", "rank": 3, "ratio": 1.9}],
                 checkpoints={"saves": [{"iteration": 10, "name": "iter_0000010", "verdict": "bad",
                                         "reasons": ["shard 3 of 4 is missing"]},
                                        {"iteration": 12, "name": "iter_0000012", "verdict": "pending",
                                         "reasons": ["newer than the tracker: being written"]}],
                              "disk": {"free_bytes": 1.5 * 2**30}},
                 hang={"confidence": "high", "finding": "node2 rank 3 is stopped", "last_iteration": 12,
                       "seconds_since_progress": 95.0, "evidence": "/runs/notes/r1/hang",
                       "culprits": [{"node": "node2", "rank": 3, "local_rank": 1, "reason": "stopped (SIGSTOP)",
                                     "where": "all_reduce (torch/distributed/distributed_c10d.py:2501)"}]})  # fmt: skip
    restart = {"number": 1, "outcome": {"state": "failed", "kind": "hang", "node": "node2", "reason": "rank 3 hung"},
               "cause": "node2 rank 3 (local rank 1): Signal 9 (SIGKILL) received by PID 4564",
               "decision": {"reason": "a restart is left (1 of 1)"}, "next": "relaunch"}  # fmt: skip
    found = {event.key: event for event in notify.events(plan, watch, restart)}
    assert list(found)[2:] == ["hang:1", "straggler:1:node2:3", "unverified:iter_0000010", "disk:1", "restart:1"]
    assert "culprit node2 rank 3 (local rank 1): stopped (SIGSTOP) at all_reduce (torch/distributed" in (
        found["hang:1"].body
    )
    assert found["hang:1"].level == "failure" and "evidence: /runs/notes/r1/hang" in found["hang:1"].body
    assert found["restart:1"].body == ("notes r1: attempt 1 ended hang: node2 rank 3 (local rank 1): Signal "
                                       "9 (SIGKILL) received by PID 4564. Attempt 2 follows: a restart is left (1 "
                                       "of 1)")  # fmt: skip
    assert "shard 3 of 4 is missing" in found["unverified:iter_0000010"].body
    assert "1.5 GiB free where checkpoints go, a save takes 1.0 GiB" in found["disk:1"].body
    lost = {"number": 2, "outcome": {"state": "failed", "kind": "lost", "node": "node2", "reason": "no answer"},
            "decision": {"reason": "no restart left"}, "next": "end"}  # fmt: skip
    judging = dict(lost, decision=None)  # ended, not yet judged: nothing is said of what comes next
    assert notify.events(plan, None, judging) == []
    assert [(e.key, e.kind) for e in notify.events(plan, None, lost)] == [("lost:2", "lost"), ("end", "failed")]
    stopped = {
        "number": 2,
        "outcome": {
            "state": "failed",
            "kind": "stopped",
            "reason": "stop.yml asked the run's supervisor to stop the run",
        },
        "cause": "node1: SignalException: got signal: 15",
        "decision": {"reason": "stop.yml stopped the run"},
        "next": "end",
    }
    (end,) = notify.events(plan, None, stopped)
    assert (end.kind, end.level, end.title) == ("stopped", "info", "notes: the run stopped")
    assert "ended stopped: stop.yml asked the run's supervisor to stop the run." in end.body  # not the ranks' signal
    done = {"number": 1, "outcome": {"state": "finished"}, "decision": {"reason": "attempt 1 finished"}, "next": "end"}
    (end,) = notify.events(plan, None, done)
    assert (end.key, end.kind, end.level) == ("end", "finished", "success")


def test_each_event_is_sent_once_through_apprise_and_a_supervisor_taken_up_sends_none_again(plan, tmp_path):
    receiver, said = Receiver(), []
    sent_path = str(tmp_path / "notified.json")
    notifier = notify.Notifier(notify.apprise_sender([receiver.url]), sent_path, said.append)
    watch = watched(plan)
    for _ in range(3):  # every probe observes the run again
        notifier.update(plan, watch, {"number": 1}, {})
    notifier.close()
    assert [post["title"] for post in receiver.posted] == ["notes: the run trains", "notes: 50% trained"]
    assert receiver.posted[1]["type"] == "info" and receiver.posted[1]["message"].startswith("notes r1: iteration 12")
    again = notify.Notifier(notify.apprise_sender([receiver.url]), sent_path, said.append)
    finished = {"number": 1, "outcome": {"state": "finished"}, "decision": {"retry": False}, "next": "end"}
    again.update(plan, watch, finished, {})
    again.close()
    assert [post["title"] for post in receiver.posted][2:] == ["notes: the run finished"] and said == []
    receiver.shutdown()


def test_a_failing_or_hanging_target_never_holds_the_run_and_is_said_once(plan, tmp_path):
    failing, hanging, said = Receiver(status=500), Receiver(delay=3.0), []
    notifier = notify.Notifier(notify.apprise_sender([failing.url]), str(tmp_path / "a.json"), said.append)
    started = time.monotonic()
    notifier.update(plan, watched(plan), {"number": 1}, {})
    notifier.update(plan, None, {"number": 1, "outcome": {"state": "finished"}, "decision": {"retry": False},
                                 "next": "end"}, {})  # fmt: skip
    assert time.monotonic() - started < 0.5  # the observation only queues; the sending thread waits for targets
    notifier.close()
    assert len(failing.posted) == 3 and len(said) == 1, said  # tried each time, said once
    assert "a notification could not be sent (started: a target of -e notify did not take the event" in said[0]
    assert failing.url not in said[0]  # a URL may hold a token
    slow = notify.Notifier(notify.apprise_sender([hanging.url]), str(tmp_path / "b.json"), said.append)
    started = time.monotonic()
    slow.update(plan, watched(plan), {"number": 1}, {})
    assert time.monotonic() - started < 0.5
    wait_until(lambda: len(hanging.posted) == 1)
    slow.close(timeout=10)
    failing.shutdown()
    hanging.shutdown()


def test_the_option_takes_apprise_urls_and_never_shows_one():
    assert convert("notify", "json://127.0.0.1:9/x, slack://T1/B2/C3") == "json://127.0.0.1:9/x slack://T1/B2/C3"
    with pytest.raises(OptionError, match=r"names a service Apprise does not know.*\(URL 2 of 2\)") as refused:
        convert("notify", "json://127.0.0.1:9/x,nosuchservice://T0K3N")
    assert "T0K3N" not in str(refused.value) and "its value is not shown" in str(refused.value)
    with pytest.raises(OptionError, match="one or more Apprise URLs"):
        convert("notify", "hooks.example.org/T0K3N")
