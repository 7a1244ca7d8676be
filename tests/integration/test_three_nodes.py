"""What needs a third node, on a testbed grown to three for this module and shrunk back to two after it: the full
health check's pairs naming the node whose link is slowed (a real rate limit on node3's interface: tc tbf, since
this kernel has no netem), a spare taking the place of a hung rank's node in an elastic restart, and a supervisor
on a host of the supervisors group (a login node's container without cards: -e supervisor_host) whose supervision
moves to the master when that host is lost, and on to the next node when the master is lost in turn. Every
verdict comes from health.yml, train.yml or status.yml over SSH. An elastic re-plan without a spare (a lost node,
at half the dp) is test_megatron_train.py's."""

from __future__ import annotations

import contextlib
import json
import re
import time

import pytest
import yaml

from testbed import (
    INVENTORY,
    ROOT,
    SMALL,
    docker,
    in_container,
    in_node,
    inventory_copy,
    latest_run,
    node_container,
    playbook,
    rank_pid,
    train_in_background,
    wait_for_checkpoint,
)

pytestmark = pytest.mark.testbed
NODES = ("node1", "node2", "node3")


def _clean(exp: str) -> None:
    for node in NODES:
        in_container(node, f"rm -rf /data/mtt-train-ops/runs/{exp} /data/mtt-train-ops/checkpoints/{exp}")


@pytest.fixture(scope="module")
def three_nodes(provisioned):
    """node3 added to the testbed (testbed/up.yml with three nodes; node1 and node2 stay as they are, Slurm too:
    no test here uses it) and provision.yml over the three. At the end the two-node inventory is put back: node3
    stays up, idle and out of every inventory, until the session's testbed-down (removing it here would cost a
    minute of the suite)."""
    hosts = INVENTORY / "hosts.yml"
    two_nodes = hosts.read_text()
    try:
        up = playbook("testbed/up.yml", "-e", "testbed_nodes=3", "--skip-tags", "slurm")
        assert up.returncode == 0, up.stdout[-4000:]
        provision = playbook("provision.yml")
        assert provision.returncode == 0, provision.stdout[-6000:]
        yield
    finally:
        hosts.write_text(two_nodes)


@contextlib.contextmanager
def node_cut(node: str):
    """Every packet in or out of the node's interface dropped (its own network namespace), as when a host's link or
    power goes: no peer, no controller reaches it; loopback inside it is left alone."""
    rules = (("INPUT", "-i"), ("OUTPUT", "-o"))
    for chain, way in rules:
        in_node(node, f"iptables -I {chain} {way} eth0 -j DROP")
    try:
        yield
    finally:
        for chain, way in rules:
            in_node(node, f"iptables -D {chain} {way} eth0 -j DROP", check=False)


@contextlib.contextmanager
def link_slowed(node: str, rate: str):
    """A token-bucket rate limit on the node's interface (its own network namespace): every byte it sends to the
    other nodes goes out at ``rate`` at most, as through a link trained down to a lower speed."""
    in_node(node, f"tc qdisc add dev eth0 root tbf rate {rate} burst 256kb latency 50ms")
    try:
        yield
    finally:
        in_node(node, "tc qdisc del dev eth0 root", check=False)


def test_the_pairs_name_the_node_whose_link_is_slow(three_nodes, tmp_path):
    # the threshold: half the bus bandwidth provision.yml's all-reduce across the three nodes measured, unslowed.
    # node3's link is cut to an eighth of that figure (a bus bandwidth cannot exceed the slowest link's rate), not to
    # a fixed rate: gloo on these CPUs is CPU-bound, and on a loaded machine it measured 0.21 GB/s unslowed, so a
    # fixed 1 Gbit/s (0.125 GB/s) link left it at 0.12 GB/s, above the threshold.
    recorded = json.loads(in_container("node1", "cat /var/lib/mtt-train-ops/collective.json").stdout)
    unslowed = recorded["results"]["inter"]["busbw_gbps"]
    threshold = unslowed / 2
    with link_slowed("node3", f"{max(8, round(unslowed * 8000 / 8))}mbit"):
        result = playbook("playbooks/health.yml", "-e", "level=full", "-e", "health_burn_in_s=2",
                          "-e", f"health_min_busbw_gbps={threshold:.4f}", "-e", f"health_dir={tmp_path}")  # fmt: skip
    assert result.returncode != 0, result.stdout[-4000:]
    (path,) = tmp_path.glob("*-full/health.json")
    record = json.loads(path.read_text())
    fleet = {node: next(c for c in v["checks"] if c["check"] == "fleet_collective") for node, v in
             record["verdicts"].items()}  # fmt: skip
    assert fleet["node3"]["status"] == "sick", fleet
    assert record["verdicts"]["node3"]["verdict"] == "sick"
    assert re.match(r"gloo across 3 nodes \(6 ranks\): [\d.]+ GB/s bus bandwidth at 16\.00 MiB, under "
                    r"health_min_busbw_gbps=[\d.]+; every pair with node3 is slow: node1\+node3 [\d.]+ GB/s, "
                    r"node2\+node3 [\d.]+ GB/s; its best is 0\.\d\dx", fleet["node3"]["detail"])  # fmt: skip
    assert fleet["node3"]["field"] == "fleet_collective.pairs[].busbw_gbps"
    for node in ("node1", "node2"):
        assert fleet[node]["status"] == "ok" and "node3 explains it" in fleet[node]["detail"], fleet[node]
    # every pair was measured, in three rounds; the pair without node3 is the fast one
    pairs = {"+".join(p["nodes"]): p["busbw_gbps"] for p in record["facts"]["node1"]["fleet_collective"]["pairs"]}
    assert sorted(pairs) == ["node1+node2", "node1+node3", "node2+node3"]
    assert pairs["node1+node2"] > 2 * max(pairs["node1+node3"], pairs["node2+node3"]), pairs
    assert "node3  sick      " in result.stdout and "fleet_collective sick: " in result.stdout


def test_a_spare_takes_the_place_of_a_hung_ranks_node_in_the_elastic_restart(three_nodes, tmp_path):
    """node3 is a spare: the run is planned on node1 and node2; rank 2 (node2) is stopped with SIGSTOP; the elastic
    restart isolates node2 and node3 takes its node rank, so the world size, layout and global batch stay."""
    exp = "spare-hang"
    _clean(exp)
    inventory = inventory_copy(tmp_path, node3={"spare": True})
    job = train_in_background("-e", "train_iters=200", "-e", f"exp={exp}", "-e", "max_restarts=1",
                              "-e", "elastic=true", "-e", "hang_timeout=15", "-e", f"health_dir={tmp_path / 'health'}",
                              "-e", json.dumps({"training": {"save_interval": 5}}), inventory=inventory)  # fmt: skip
    try:
        wait_for_checkpoint(exp, 5)
        in_container("node2", f"kill -STOP {rank_pid('node2', exp, 2)}")
        output, _ = job.communicate(timeout=900)
    finally:
        job.kill()
    assert job.returncode == 0, output[-6000:]
    said = " ".join(output.split())
    change = re.search(r"re-planned without node2 \(-e elastic=true\): (.*?); starting attempt 2", said)
    assert change, said[-6000:]
    assert change.group(1).startswith("nodes 2 -> 2, global batch 8 unchanged, node2 left out: isolated as the "
                                      "hang's culprit in attempt 1 (node2 rank 2 (local rank 0): hung: state T"), (
        change.group(1)
    )  # fmt: skip
    assert change.group(1).endswith("node3 (a spare) takes a place"), change.group(1)
    run_dir = latest_run(exp)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["state"] == "finished" and summary["last_iteration"] == 200
    first = summary["attempts"][0]
    assert (first["kind"], first["node"], first["rank"]) == ("hang", "node2", 2)
    plan = json.loads((run_dir / "plan" / "plan.json").read_text())
    assert [(n["name"], n["node_rank"]) for n in plan["nodes"]] == [("node1", 0), ("node3", 1)]
    assert (plan["world_size"], plan["dp"], plan["global_batch_size"]) == (4, 4, 8)
    incidents = [json.loads(line) for line in (ROOT / "runs" / "incidents.jsonl").read_text().splitlines()]
    assert [(i["node"], i["kind"], i["rank"], i["counts"]) for i in incidents] == [("node2", "hang", 2, True)]
    assert (
        incidents[0]["run"] == f"{exp}/{run_dir.name}" and incidents[0]["evidence"] == f"{exp}/{run_dir.name}/attempt-1"
    )
    assert f"incident     node2: hang, attempt 1 of {exp}/{run_dir.name} (counts against it)" in output
    for node in NODES:  # stop.yml after the run: no rank left anywhere, node2's stopped one included
        running = in_container(node, "ps -eo args").stdout
        assert "smoke_train.py" not in running, f"ranks left on {node}"


def test_a_supervisor_on_a_login_node_restarts_the_run_and_moves_to_the_master_when_its_host_is_lost(
    three_nodes, tmp_path
):
    """node3 moves from the nodes group to the supervisors group (a login or management node): provision.yml makes
    its training container anew, without cards, and proves that it reaches both nodes' containers. -e
    supervisor_host=node3: the run is planned on node1 and node2, and its supervisor lives in node3's container (its
    probes reach the master over the containers' sshd), which copies its record to the master. A rank killed on the
    master is restarted from node3. Then node3 is lost (its node container stopped: its engine, its training
    container and the supervisor with them): the ranks go on; status.yml names the silent supervisors host (no
    --limit: a supervisors host is not one of the run's nodes); status.yml -e supervisor_host=node1 moves the
    supervision to the master, from the copy, without launching ranks; a rank killed on node2 is restarted by it,
    which copies the record to node2 in turn (the supervisor is on the master now). Then the master is lost with its
    supervisor (its link cut, the supervisor killed): one status.yml names it, moves the supervision to node2 from
    that copy (-e supervisor_host=node2) and follows the run there to its end: node2's supervisor finds the master
    lost, and with no restart left the run ends, reporting all three attempts and the master's loss as an incident.
    -e wait=false: no terminal follows the run while a host is lost."""
    exp = "supervisor-elsewhere"
    _clean(exp)
    inventory = _as_supervisors_host(inventory_copy(tmp_path), "node3")
    without_node1 = ("--limit", "localhost,all,!node1")
    in_node("node3", "docker rm -f train")  # provision.yml makes it anew, as a supervisors host's
    provisioned = playbook("provision.yml", inventory=inventory)
    assert provisioned.returncode == 0, provisioned.stdout[-6000:]
    row = next(line for line in provisioned.stdout.splitlines() if line.strip().startswith("node3 "))
    assert "train" in row and row.rstrip().endswith("supervisors host"), row
    assert "running" in in_node("node3", "docker inspect -f '{{.State.Status}}' train").stdout
    # it pins the host keys the nodes' containers gave in the same provision.yml: without them, it is refused
    alone = playbook("provision.yml", "--limit", "localhost,node3", inventory=inventory)
    said = " ".join(alone.stdout.split())
    assert alone.returncode != 0 and "node3: the host keys of node1, node2 were not read in this run" in said, said
    assert "Run provision.yml over the nodes too (--limit 'localhost,nodes,node3')" in said, said
    # overridden, and why: train_iters so that the run outlasts every step (stop.yml ends it), save_interval 5 so
    # that saves come within seconds, wait=false so that no terminal follows while node3 is lost; the defaults as
    # rendered run in test_megatron_defaults.py and test_train.py
    started = playbook("train.yml", *SMALL, "-e", "train_iters=100000", "-e", f"exp={exp}", "-e", "max_restarts=2",
                       "-e", "wait=false", "-e", "supervisor_host=node3", "-e", f"health_dir={tmp_path / 'health'}",
                       "-e", json.dumps({"training": {"save_interval": 5}}), inventory=inventory)  # fmt: skip
    assert started.returncode == 0, started.stdout[-4000:]
    record = f"/data/mtt-train-ops/runs/{exp}/*/supervisor"
    copied = f"/data/mtt-train-ops/runs/{exp}/*/supervisor.copy"
    try:
        wait_for_checkpoint(exp, 5)
        for node, lives in (("node3", True), ("node1", False), ("node2", False)):
            # [s]: the pattern does not match the shell that runs pgrep
            found = in_container(node, f"pgrep -f '[s]upervise.py start --run-dir .*/{exp}/'", check=False)
            assert (found.returncode == 0) == lives, f"{node}: supervisor {'missing' if lives else 'found'} there"
        status = playbook("playbooks/status.yml", inventory=inventory)
        assert status.returncode == 0, status.stdout[-4000:]
        assert re.search(r"watched +by its supervisor \(pid \d+ in node3's container since ", status.stdout), (
            status.stdout[-4000:]
        )
        in_container("node1", f"kill -9 {rank_pid('node1', exp, 1)}")
        _wait_until(lambda: _attempt(in_container("node1", f"cat {copied}/run/attempts.json", check=False)) == 2,
                    "attempt 2 in the master's copy of the record")  # fmt: skip
        saved = _tracker(exp)
        wait_for_checkpoint(exp, saved + 10)  # attempt 2 trains
        docker("stop", "-t", "1", node_container("node3"))  # node3 lost
        later = _tracker(exp)
        wait_for_checkpoint(exp, later + 10)  # the ranks go on without their supervisor
        silent = playbook("playbooks/status.yml", inventory=inventory)
        assert silent.returncode == 0, silent.stdout[-4000:]
        assert "watched  by nobody that answers: its supervisor's node node3 did not answer" in silent.stdout, (
            silent.stdout[-4000:]
        )
        moved = playbook("playbooks/status.yml", "-e", "supervisor_host=node1", inventory=inventory)
        assert moved.returncode == 0, moved.stdout[-4000:]
        assert re.search(rf"run \S+/{exp}/\S+: its supervision moved from node3 to node1 \(pid \d+\)", moved.stdout), (
            moved.stdout[-4000:]
        )
        events = in_container("node1", f"cat {record}/events").stdout
        assert "supervisor: the run's supervision moved here (node1, pid " in events, events[-3000:]
        assert "taking the run up at its step 'watch'" in events and "attempt 3" not in events, events[-3000:]
        in_container("node2", f"kill -9 {rank_pid('node2', exp, 3)}")
        _wait_until(lambda: _attempt(in_container("node1", f"cat {record}/run/attempts.json", check=False)) == 3,
                    "attempt 3, launched by the supervisor moved to node1")  # fmt: skip
        wait_for_checkpoint(exp, _tracker(exp) + 5)
        # the supervisor, now on the master, copies the record to the plan's next node (node2, its standby)
        _wait_until(lambda: _attempt(in_container("node2", f"cat {copied}/run/attempts.json", check=False)) == 3,
                    "attempt 3 in node2's copy of the record")  # fmt: skip
        # then the master is lost with its supervisor: its link drops every packet, its supervisor is killed
        with node_cut("node1"):
            # (the supervisor a move started is its `supervise.py move` process, detached)
            in_container("node1", f"pkill -9 -f '[s]upervise.py .*--run-dir .*/{exp}/'")
            # one status.yml says so, moves the supervision to node2 and follows the run there to its end
            lost = playbook("playbooks/status.yml", *without_node1, "-e", "supervisor_host=node2",
                            "-e", "follow=true", "-e", "train_wait=600", inventory=inventory)  # fmt: skip
        said = " ".join(lost.stdout.split())
        assert lost.returncode == 0, lost.stdout[-5000:]
        assert "watched by nobody that answers: its supervisor's node node1 did not answer" in said, said[-5000:]
        assert "status.yml -e supervisor_host=node2 moves its supervision to node2" in said
        assert "master node1 did not answer (left out): this run was not probed" in said
        assert re.search(rf"run \S+/{exp}/\S+: its supervision moved from node1 to node2 \(pid \d+\)", said), said
        # judged from inside the cluster: node2's supervisor cannot reach the master; no restart is left (2 used)
        assert re.search(r"attempt 3: failed \(lost, node1\)", said), said[-5000:]
        events = in_container("node2", f"cat {record}/events").stdout
        assert "supervisor: the run's supervision moved here (node2, pid " in events, events[-3000:]
        assert "attempt 4" not in events, events[-3000:]
    finally:
        docker("start", node_container("node3"))
    stop = playbook("stop.yml", inventory=inventory)  # node1 back: its ranks, cut off from node2, are stopped here
    assert stop.returncode == 0, stop.stdout[-3000:]
    summary = json.loads((latest_run(exp) / "summary.json").read_text())
    assert [(a["attempt"], a["state"], a["node"]) for a in summary["attempts"]] == [
        (1, "failed", "node1"),
        (2, "failed", "node2"),
        (3, "failed", "node1"),
    ], summary["attempts"]
    assert summary["attempts"][2]["kind"] == "lost", summary["attempts"][2]
    plan = json.loads((latest_run(exp) / "plan" / "plan.json").read_text())
    assert plan["supervisor"] == "node2" and [n["name"] for n in plan["nodes"]] == ["node1", "node2"]
    recorded = [json.loads(line) for line in (ROOT / "runs" / "incidents.jsonl").read_text().splitlines()]
    assert [(r["node"], r["kind"], r["attempt"]) for r in recorded if r["kind"] == "lost"] == [("node1", "lost", 3)]
    for node in ("node1", "node2"):
        assert "smoke_train.py" not in in_container(node, "ps -eo args").stdout, f"ranks left on {node}"


def _as_supervisors_host(inventory, host: str):
    """The inventory copy with ``host`` moved from the nodes group to the supervisors group (docs/inventory.md)."""
    hosts = inventory / "hosts.yml"
    read = yaml.safe_load(hosts.read_text())
    groups = read["all"]["children"]
    address = groups["nodes"]["hosts"].pop(host)["ansible_host"]
    groups["supervisors"] = {"hosts": {host: {"ansible_host": address}}}  # no slots: it has no card
    hosts.write_text(yaml.safe_dump(read))
    return inventory


def _attempt(read) -> int:
    try:
        return json.loads(read.stdout)["current"]["number"]
    except (ValueError, KeyError, TypeError):
        return 0


def _tracker(exp: str) -> int:
    tracker = in_container("node1", f"cat /data/mtt-train-ops/checkpoints/{exp}/latest_checkpointed_iteration.txt")
    return int(tracker.stdout.strip())


def _wait_until(predicate, what: str, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(1)
    raise AssertionError(f"no {what} within {timeout:.0f} s")
