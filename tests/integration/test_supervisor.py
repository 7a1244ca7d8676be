"""The run's supervisor on the testbed: the watch of an attempt runs in the master's training container, and the
controller only follows it, so that a fault of the controller's own path to the nodes, or of the controller itself,
is not a fault of the run.

The faults are real, one after the other in one run: every SSH packet from this machine (the controller) to the
nodes answered with a TCP reset by iptables for 20 s (what a laptop that changes network, or a VPN that
reconnects, does to open connections), then dropped for 60 s (a cut link); then train.yml killed with SIGKILL, then the
supervisor killed with SIGKILL; then a terminal that follows (status.yml -e follow=true) killed with SIGKILL just as
a rank is killed, so that the recovery runs with no controller; then stop.yml, which asks the supervisor, while a
follower collects and reports the run's end and records its incidents. With the controller gone, the supervisor's
metrics endpoint (the default -e metrics_port) serves the run's progress, then its restart. Before the supervisor,
the reset alone made train.yml call the master lost, end a healthy run ``failed`` and record ``lost`` incidents
against both nodes while their ranks trained on unwatched.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from trainops import monitoring, node_package

from testbed import (
    BIN,
    INVENTORY,
    RESET,
    ROOT,
    Webhook,
    clean_experiment,
    controller_ssh,
    env,
    in_container,
    inventory_copy,
    kill_controller,
    latest_run,
    playbook,
    train_in_background,
)

pytestmark = pytest.mark.testbed


#: The newest rank on node2 (global rank 3) of the smoke job, killed as a crash would.
KILL_RANK_3 = "kill -9 $(pgrep -n -f 'python3 -u .*smoke_trai[n].py')"


def rank_is_running(node: str) -> bool:
    return bool(in_container(node, "pgrep -f 'python3 -u .*smoke_trai[n].py'", check=False).stdout.strip())


def iterations(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"iteration (\d+)/100000", text)]


#: The controller's faults of issue 35 (item 5), as long as it gives them: its SSH to the nodes reset for 20 s, then
#: cut (every packet dropped) for 60 s, in the middle of a run.
RESET_S = 20
CUT_S = 60


def wait_for(predicate, what: str, job: subprocess.Popen | None, log, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert job is None or job.poll() is None, log.read_text()[-4000:]
        assert time.monotonic() < deadline, f"no {what} within {timeout} s: {log.read_text()[-4000:]}"
        time.sleep(1)


def scrape(node_address: str = "172.30.0.11", port: int = 9465) -> dict[str, list]:
    """The run supervisor's metrics endpoint (default -e metrics_port) on the master's address, read with
    prometheus-client's parser: family name -> its samples."""
    text = urllib.request.urlopen(f"http://{node_address}:{port}/metrics", timeout=10).read().decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


#: Prometheus and Alertmanager on this controller, the inventory's monitoring host (playbooks/monitoring.yml), with
#: a scrape and a rule evaluation every 15 s (the default -e scrape_interval_s, as a site gets it); on ports of their
#: own (defaults overridden, and why: the default ports may be taken on a developer's machine).
PROMETHEUS, ALERTMANAGER = 19090, 19093
MONITORING = ("-e", f"prometheus_port={PROMETHEUS}", "-e", f"alertmanager_port={ALERTMANAGER}")
CARD_EXPORTER = f"{node_package.ROOT}/current/trainops/node/card_exporter.py"


@contextlib.contextmanager
def monitoring_stack(tmp_path: Path):
    """monitoring.yml with this controller as the monitoring host: Debian's Prometheus and Alertmanager scraping
    both nodes, the bundle's rules, a webhook receiver here. The testbed's cpu backend has no device tool, so each
    node's card exporter is started as provision.yml's card_exporter role starts it on a musa node, reading the
    stand-in image's replay mthreads-gmi."""
    webhook = Webhook()
    inventory = inventory_copy(tmp_path)
    here = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    (inventory / "monitoring.yml").write_text(yaml.safe_dump({"all": {"children": {"monitoring": {"hosts": {
        "localhost": here}}}}}))  # fmt: skip
    for node in ("node1", "node2"):
        in_container(node, f"python3 {CARD_EXPORTER} ensure --dir /tmp/card-exporter-test --node {node} "
                           "--device-tool mthreads-gmi --port 9466 --version test")  # fmt: skip
    directory = tmp_path / "monitoring"
    url = f"http://127.0.0.1:{webhook.server_address[1]}/alerts"
    started = playbook("playbooks/monitoring.yml", *MONITORING, "-e", f"monitoring_dir={directory}",
                       "-e", f"alert_webhook_url={url}", inventory=inventory)  # fmt: skip
    try:
        assert started.returncode == 0, started.stdout[-4000:]
        assert f"monitoring: Prometheus http://localhost:{PROMETHEUS} (started; 2 node(s) scraped every 15 s" in (
            started.stdout
        )
        assert url not in started.stdout  # the webhook's URL may hold a token: never shown
        yield webhook
    finally:
        for state in directory.glob("*.json"):
            with contextlib.suppress(ProcessLookupError, ValueError, OSError):
                os.kill(int(json.loads(state.read_text())["pid"]), signal.SIGTERM)
        for node in ("node1", "node2"):
            in_container(node, f"python3 {CARD_EXPORTER} ensure --dir /tmp/card-exporter-test --node {node} "
                               "--port 0", check=False)  # fmt: skip
        webhook.shutdown()


def prometheus(path: str, **query: str) -> dict:
    url = f"http://127.0.0.1:{PROMETHEUS}{path}?{urllib.parse.urlencode(query)}"
    answer = json.loads(urllib.request.urlopen(url, timeout=30).read())
    assert answer["status"] == "success", answer
    return answer["data"]


def follow_in_background(output: Path) -> subprocess.Popen:
    """status.yml -e follow=true in the background, its output to ``output``. train_wait overridden (default
    86,400 s) only to bound how long this terminal would follow a run that failed to end; the run ends earlier."""
    return subprocess.Popen(
        [str(BIN / "ansible-playbook"), "-i", str(INVENTORY), "playbooks/status.yml", "-e", "follow=true",
         "-e", "train_wait=300"],
        cwd=ROOT, env=env(), stdout=open(output, "w"), stderr=subprocess.STDOUT, text=True,  # noqa: SIM115
    )  # fmt: skip


def test_the_controller_reset_cut_and_killed_mid_run_stops_nothing_and_status_takes_a_killed_supervisor_up(
    provisioned, tmp_path
):
    exp = "controller-faults"
    clean_experiment(exp)
    supervisor = f"/data/mtt-train-ops/runs/{exp}/*/supervisor"
    log = tmp_path / "train.out"
    # Defaults overridden, and why: train_wait (default 86,400 s) bounds how long this terminal follows a run of
    # 100,000 iterations (it is killed before); max_restarts=1 (default 0) so that a wrongly failed attempt would be
    # restarted, and the single attempt asserted below proves none was. Every default as rendered runs in
    # test_megatron_defaults.py.
    stack = contextlib.ExitStack()
    webhook = stack.enter_context(monitoring_stack(tmp_path))
    notices = Webhook("172.30.0.1")  # the run's own notifications (-e notify), sent by its supervisor
    stack.callback(notices.shutdown)
    token = "T0K3N-" + os.urandom(6).hex()  # a webhook's URL is a credential (issue 36 item 8)
    notify = f"json://172.30.0.1:{notices.server_address[1]}/trainops/{token}"
    job = train_in_background("-e", "train_iters=100000", "-e", "train_wait=600", "-e", "max_restarts=1",
                              "-e", f"exp={exp}", "-e", f"notify={notify}", output=log)  # fmt: skip
    stack.callback(job.kill)
    with stack:
        # mid-run: the supervisor watches and this terminal follows it (its first progress line is printed)
        wait_for(lambda: iterations(log.read_text()), "progress line", job, log)
        with controller_ssh(RESET):
            reset_at = time.monotonic()
            # the reset is real: the controller's own SSH to node1 is refused meanwhile
            refused = playbook("playbooks/status.yml", timeout=120)
            assert refused.returncode != 0 and "node1" in refused.stdout, refused.stdout[-3000:]
            # and it says how to look at the runs meanwhile: leave the silent nodes out (the reset is of every node)
            assert "leave the silent ones out: --limit 'localhost,all,!node1,!node2'" in " ".join(
                refused.stdout.split()
            ), refused.stdout[-3000:]
            time.sleep(max(0.0, RESET_S - (time.monotonic() - reset_at)))  # the status.yml above included
        wait_for(lambda: "the master answers again" in log.read_text(), "contact again", job, log)
        output = log.read_text()
        lost = output.index("no answer from the master's container")
        again = re.search(r"node1: the master answers again, after \d+ s", output)
        assert again and again.start() > lost, output[-5000:]
        # the ranks trained on through the reset, watched on the cluster: progress after contact came back
        wait_for(lambda: iterations(log.read_text()[again.end() :]), "progress after the reset", job, log)
        # then a cut: every packet dropped for 60 s, longer than Ansible's connection timeout (10 s) and than the
        # 30 s after which SSH gives up a silent connection (ansible.cfg's ServerAlive): the follower tries again
        # until the master answers
        cut_at = len(log.read_text())
        with controller_ssh(["DROP"]):
            time.sleep(CUT_S)
        wait_for(lambda: iterations(log.read_text()[cut_at:]), "progress after the cut", job, log)
        # then the controller killed: the supervisor watches on, the ranks train on
        kill_controller(job)
        output = log.read_text()
        before, after = iterations(output[:lost]), iterations(output[again.end() :])
        assert before and after and min(after) > max(before), output[-5000:]
        assert "attempt 2" not in output, output[-5000:]
        # no restart, no failure, no incident: one attempt, never ended (the run's state is its supervisor's)
        attempts = json.loads(in_container("node1", f"cat {supervisor}/run/attempts.json").stdout)
        assert attempts["current"]["number"] == 1 and attempts["records"] == [], attempts
        assert "outcome" not in attempts["current"], attempts
        assert not (ROOT / "runs" / "incidents.jsonl").exists() or not (ROOT / "runs" / "incidents.jsonl").read_text()
        first = in_container("node1", f"cat {supervisor}/pid").stdout.strip()
        assert in_container("node1", f"test -d /proc/{first}", check=False).returncode == 0
        # with the controller gone, the supervisor's metrics endpoint (the default port) serves the run as it goes
        served = scrape()
        iteration = served["trainops_iteration"][0]
        assert iteration.labels["exp"] == exp and iteration.value >= max(after), served["trainops_iteration"]
        assert served["trainops_iterations_planned"][0].value == 100000
        assert [s.labels["state"] for s in served["trainops_run_state"] if s.value == 1] == ["running"]
        assert served["trainops_attempt"][0].value == 1 and served["trainops_restarts"][0].value == 0
        assert served["trainops_lm_loss"][0].value > 0 and served["trainops_step_seconds"][0].value > 0
        # each scrape serves what the last probe saw (every poll_interval, 5 s): a later one, a later iteration
        wait_for(lambda: scrape()["trainops_iteration"][0].value > iteration.value, "a later scrape's progress",
                 None, log, 30)  # fmt: skip
        # the supervisor killed: the ranks go on; the next status.yml starts it again and follows it from here
        in_container("node1", f"kill -KILL {first}")
        wait_for(lambda: in_container("node1", f"test -d /proc/{first}", check=False).returncode != 0, "death",
                 None, log, 30)  # fmt: skip
        followed = playbook("playbooks/status.yml", "-e", "follow=true", "-e", "train_wait=20", timeout=300)
        assert followed.returncode == 0, followed.stdout[-5000:]
        shown = followed.stdout
        taken = re.search(rf"watched  by its supervisor, started again now \(pid (\d+) in node1's container\): its "
                          rf"process {first} had ended before the run did; it goes on from the run's state, at "
                          rf"attempt 1", shown)  # fmt: skip
        assert taken, shown[-5000:]
        assert f"supervisor: its process {first} ended before the run did; taking the run up again" in shown
        assert re.search(r"attempt 1: still running, its supervisor watches on; last progress: iteration \d+", shown)
        assert in_container("node1", f"test -d /proc/{taken.group(1)}", check=False).returncode == 0
        # the taken-up watch dates the last verified save by the wall clock, as its first supervisor did
        ages = [int(n) for n in re.findall(r"ckpt \d+ verified (-?\d+) s ago", shown)]
        assert ages and all(0 <= age < 600 for age in ages), shown[-3000:]
        # a status.yml after that sees it watching, and starts nothing
        seen = playbook("playbooks/status.yml", timeout=300).stdout
        assert re.search(rf"watched  by its supervisor \(pid {taken.group(1)} in node1's container since ", seen), seen
        # a terminal follows the run (status.yml -e follow=true); a rank is killed and the follower with it, at
        # once, during the recovery (the restart's steps run on the cluster): the supervisor stops what is left,
        # judges the attempt from the logs it gathers, and launches attempt 2 itself
        follower = follow_in_background(tmp_path / "follow-1.out")
        wait_for(lambda: iterations((tmp_path / "follow-1.out").read_text()), "the follower's progress", follower,
                 tmp_path / "follow-1.out")  # fmt: skip
        in_container("node2", KILL_RANK_3)
        kill_controller(follower)
        state = f"{supervisor}/run/attempts.json"
        assert json.loads(in_container("node1", f"cat {state}").stdout)["current"]["number"] == 1
        wait_for(lambda: json.loads(in_container("node1", f"cat {state}").stdout)["current"]["number"] == 2,
                 "attempt 2", None, log, 240)  # fmt: skip
        wait_for(lambda: rank_is_running("node2"), "attempt 2's ranks", None, log, 120)
        # the restart, in the metrics of the supervisor that made it
        served = scrape()
        assert served["trainops_attempt"][0].value == 2 and served["trainops_restarts"][0].value == 1, served
        later = playbook("playbooks/status.yml", timeout=300).stdout
        assert re.search(rf"watched  by its supervisor \(pid {taken.group(1)} in node1's container since .*\), "
                         r"attempt 2 ", later), later[-3000:]  # fmt: skip
        # a follower attached when stop.yml asks the supervisor to stop the run: the run ends, and the follower
        # collects it (the supervisor's record with the nodes' logs) and reports both attempts
        follower = follow_in_background(tmp_path / "follow-2.out")
        wait_for(lambda: iterations((tmp_path / "follow-2.out").read_text()), "the follower's progress", follower,
                 tmp_path / "follow-2.out")  # fmt: skip
        # the restart fired its alert, and Alertmanager sent it to the webhook (a scrape and a rule evaluation, 15 s
        # each at most, then Alertmanager's group_wait of 30 s)
        wait_for(lambda: any(alert["labels"]["alertname"] == "TrainopsRunRestarted" and alert["labels"]["exp"] == exp
                             for notice in webhook.notices for alert in notice["alerts"]),
                 "the restart's alert at the webhook", None, log, 150)  # fmt: skip
        stop = playbook("stop.yml")
        assert stop.returncode == 0, stop.stdout[-3000:]
        assert re.search(r"node1: run controller-faults/\S+: stopped by its supervisor \(pid \d+\): attempt 2 ended",
                         stop.stdout), stop.stdout[-3000:]  # fmt: skip
        follower.wait(timeout=300)
        followed = (tmp_path / "follow-2.out").read_text()
        assert follower.returncode == 0, followed[-5000:]
        assert "supervisor: stop.yml asked for the run to stop: attempt 2 is stopped" in followed, followed[-5000:]
        assert re.search(r"run +controller-faults / \S+ \(smoke\): failed", followed), followed[-5000:]
        summary = json.loads((latest_run(exp) / "summary.json").read_text())
        assert [(a["attempt"], a["state"], a["node"]) for a in summary["attempts"]][:1] == [(1, "failed", "node2")]
        assert [a["attempt"] for a in summary["attempts"]] == [1, 2], summary["attempts"]
        # the follower that saw the end recorded the run's incidents in the site's record, as train.yml would have
        # (the train.yml that launched the run was killed long before): attempt 1's killed rank, against node2
        recorded = [json.loads(line) for line in (ROOT / "runs" / "incidents.jsonl").read_text().splitlines()]
        assert [(i["run"].split("/")[0], i["attempt"], i["node"], i["kind"]) for i in recorded] == [
            (exp, 1, "node2", "dead_rank")
        ], recorded  # fmt: skip
        assert re.search(rf"incident +node2: dead_rank, attempt 1 of {exp}/\S+ \(counts against it\)", followed)

        # the supervisor told the webhook, once each, while no controller followed: the run trains, the restart and
        # why, the stop; the URL (it may hold a token) is in no line the controller printed
        expected = [f"{exp}: the run trains", f"{exp}: attempt 1 failed, restarting", f"{exp}: the run stopped"]
        wait_for(lambda: expected[-1] in [notice["title"] for notice in notices.notices], "the stop's notice", None,
                 log, 60)  # fmt: skip
        titles = [notice["title"] for notice in notices.notices]
        assert [title for title in titles if title in expected] == expected, titles  # a straggler's may come too
        restart = next(notice["message"] for notice in notices.notices if notice["title"] == expected[1])
        assert "node2 rank 3" in restart, restart
        # the token is in no file the run left, on the controller or a node, but the supervisor's request (root's)
        # and its copy on the standby node (node2: the supervisor runs on the master), where a moved supervision
        # would notify from
        printed = log.read_text() + followed + stop.stdout + (tmp_path / "follow-1.out").read_text()
        assert token not in printed
        assert not subprocess.run(["grep", "-rl", token, str(ROOT / "runs"), str(tmp_path)], capture_output=True,
                                  text=True).stdout  # fmt: skip
        for node, record in (("node1", supervisor), ("node2", f"{supervisor}.copy")):
            holding = in_container(node, f"grep -rl {token} /data /opt /tmp /root 2>/dev/null; true").stdout.split()
            requests = [f"{p}/request.json" for p in in_container(node, f"ls -d {record}").stdout.split()]
            assert holding == requests and len(requests) == 1, (node, holding)
            assert in_container(node, f"stat -c %a {record}/request.json").stdout.split() == ["600"], node

        # Prometheus scraped the run and the cards all along: every panel of the dashboard has data
        dashboard = json.loads((ROOT / "monitoring" / "grafana" / "trainops-dashboard.json").read_text())
        answered: dict[str, bool] = {}
        for title, expr in monitoring.panel_queries(dashboard, {"exp": exp, "run_id": ".*", "node": ".*"}):
            found = prometheus("/api/v1/query", query=f"last_over_time(({expr})[15m:1s])")["result"]
            answered[title] = answered.get(title, False) or bool(found)
        empty = [title for title, found in answered.items() if not found]
        assert empty == [], f"panels without data: {empty}"
        rules = [rule for group in prometheus("/api/v1/rules")["groups"] for rule in group["rules"]]
        assert len(rules) == 14 and {rule["health"] for rule in rules} == {"ok"}, rules
