"""provision.yml on the testbed: real SSH to real node containers, real sshd, real torchrun.

Marked `testbed`: `make test` (and CI) run them; `make test-fast` does not. That a second provision.yml changes
nothing is molecule's idempotence step (`make test` runs `molecule test` after these).
"""

from __future__ import annotations

import contextlib
import re
import socket
import urllib.request

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from trainops import node_package
from trainops.gmi import parse_mthreads_gmi

from testbed import NODE_CONTAINERS as NODE_CONTAINERS_BY_NAME
from testbed import ROOT, docker, images, in_container, in_node, inventory_copy, playbook, recap, wait_for_ssh

pytestmark = pytest.mark.testbed

#: This checkout's core and node programs (the node package provision.yml installs).
PACKAGE = ROOT / "plugins" / "module_utils" / "trainops"


#: the other build put under the archive's tag on node2 before the converging run
DRIFT = {}


@pytest.fixture(scope="module")
def converged(testbed):
    """provision.yml's own output, over a testbed where node2 holds another build under the archive's tag (an image
    built again keeps its tag; here an empty image); afterwards, provisioned again for the next module (these tests
    break nodes in ways the shared fixture's quick check does not look for: a changed container, a held port)."""
    DRIFT["other"] = in_node("node2", "tar cf - -T /dev/null | docker import - mtt-another-build:1").stdout.strip()
    in_node("node2", f"docker tag mtt-another-build:1 {images()['standin_image']}")
    result = playbook("provision.yml")
    in_node("node2", "docker image rm mtt-another-build:1", check=False)
    assert result.returncode == 0, result.stdout[-6000:]
    yield result.stdout
    again = playbook("provision.yml")
    assert again.returncode == 0, again.stdout[-6000:]


def test_converge_reports_every_node(converged):
    assert "node1" in converged and "node2" in converged
    report = sorted((ROOT / "runs").glob("provision-*.json"))[-1]
    rows = yaml.safe_load(report.read_text())["nodes"]
    assert [r["node"] for r in rows] == ["node1", "node2"]
    assert all(r["status"] == "running" and r["sshd_port"] == 2222 for r in rows)
    # the gloo all-reduce across both nodes was measured and correct
    assert rows[0]["collective"]["inter"]["wrong"] == 0
    assert rows[0]["collective"]["inter"]["busbw_gbps"] > 0


def test_another_build_under_the_archives_tag_is_replaced_by_the_archives_image(converged):
    """node2 held another build under the archive's tag: it loaded the archive again, and every node runs the
    archive's image, not whichever the tag pointed at."""
    loaded = re.search(
        r"TASK \[container : Load the archive into the node's engine\][^\n]*\n(.*?)\n\n", converged, re.S
    )
    assert loaded and "changed: [node2]" in loaded.group(1), converged[-6000:]
    images = {in_node(n, "docker inspect -f '{{.Image}}' train").stdout.strip() for n in ("node1", "node2")}
    assert len(images) == 1 and DRIFT["other"] not in images, images


def test_verify_playbook(converged):
    """The molecule scenario's verify.yml: real assertions over SSH."""
    result = playbook("molecule/default/verify.yml")
    assert result.returncode == 0, result.stdout[-4000:]
    assert recap(result.stdout)["node1"]["failed"] == 0


def test_a_stale_sshd_pid_file_is_not_taken_for_a_running_sshd(converged):
    """After a container restart its pid file names a pid that another process may hold (even one whose command
    line names the sshd config): provision.yml must start sshd again, not trust the file."""
    decoy = "python3 -c 'import time; time.sleep(600)' /etc/ssh/sshd_config_mtt_train_ops"
    in_container(
        "node2",
        "kill $(cat /run/sshd-mtt-train-ops.pid) && sleep 1 && "
        f"setsid -f {decoy} > /dev/null 2>&1 && sleep 0.5 && "
        "pgrep -n -f 'time[.]sleep[(]600' > /run/sshd-mtt-train-ops.pid && "
        "grep -q sshd_config_mtt_train_ops /proc/$(cat /run/sshd-mtt-train-ops.pid)/cmdline",
    )
    try:
        result = playbook("provision.yml")
        assert result.returncode == 0, result.stdout[-4000:]
        with socket.create_connection(("172.30.0.12", 2222), timeout=5) as conn:
            assert conn.recv(64).startswith(b"SSH-2.0-OpenSSH")
    finally:
        in_container("node2", "pkill -f 'time[.]sleep[(]600' || true")


def test_container_sshd_answers_and_password_login_is_off(converged):
    for address in ("172.30.0.11", "172.30.0.12"):
        with socket.create_connection((address, 2222), timeout=5) as conn:
            assert conn.recv(64).startswith(b"SSH-2.0-OpenSSH")
    config = in_container("node2", "cat /etc/ssh/sshd_config_mtt_train_ops").stdout
    assert "PasswordAuthentication no" in config and "PermitRootLogin prohibit-password" in config


def test_keys_are_private_and_host_keys_pinned(converged):
    key = ROOT / ".keys" / "testbed" / "id_ed25519"
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    assert in_container("node1", "stat -c %a /root/.ssh/mtt_cluster_ed25519").stdout.strip() == "600"
    known = in_container("node1", "cat /root/.ssh/known_hosts").stdout
    for address, name in (("172.30.0.11", "node1"), ("172.30.0.12", "node2")):
        assert f"[{address}]:2222,[{name}]:2222 ssh-ed25519 " in known
    # the fan-out's path: master's container -> worker's container, strict host keys, no prompt
    hop = in_container(
        "node1",
        "ssh -p 2222 -i /root/.ssh/mtt_cluster_ed25519 -o BatchMode=yes "
        "-o StrictHostKeyChecking=yes root@172.30.0.12 hostname",
    )
    assert hop.stdout.strip() == "node2"


def test_a_stopped_node_is_named_and_nothing_changes(converged):
    before = in_node("node1", "docker inspect -f '{{.Id}} {{.State.StartedAt}}' train").stdout
    docker("stop", "mtt-node-2")
    try:
        result = playbook("provision.yml")
        assert result.returncode != 0
        assert "node2 (172.30.0.12) is unreachable" in result.stdout
        assert "Nothing was changed on any node" in result.stdout
        assert recap(result.stdout)["node1"]["changed"] == 0
        assert in_node("node1", "docker inspect -f '{{.Id}} {{.State.StartedAt}}' train").stdout == before
    finally:
        docker("start", "mtt-node-2")
        wait_for_ssh("172.30.0.12")
    # node2 back: the next provision.yml that is meant to pass (test_a_taken_sshd_port_is_named's) heals it, and the
    # module's own closing provision.yml after that


def test_a_wrong_image_is_named_and_the_other_node_untouched(converged, tmp_path):
    inventory = inventory_copy(
        tmp_path, node2={"container_image": "mtt-no-such-image:1", "container_image_archive": ""}
    )
    before = in_node("node1", "docker inspect -f '{{.Id}}' train").stdout
    result = playbook("provision.yml", inventory=inventory)
    assert result.returncode != 0
    assert "node2: cannot pull mtt-no-such-image:1" in result.stdout
    assert recap(result.stdout)["node1"]["changed"] == 0
    assert in_node("node1", "docker inspect -f '{{.Id}}' train").stdout == before


@contextlib.contextmanager
def _port_held(node: str, port: int):
    """A process on the node (host network: the containers' too) that holds `port` while the block runs."""
    listener = in_node(
        node,
        f"setsid nohup python3 -c \"import socket,time; s=socket.socket(); s.bind(('0.0.0.0',{port}));"
        ' s.listen(); time.sleep(300)" >/dev/null 2>&1 & echo $!',
    ).stdout.strip()
    try:
        yield
    finally:
        in_node(node, f"kill {listener}", check=False)


def test_a_taken_sshd_port_is_named(converged):
    with _port_held("node2", 2299):
        result = playbook("provision.yml", "-e", "container_ssh_port=2299")
        assert result.returncode != 0
        assert "node2: the sshd of container 'train' cannot listen on port 2299" in result.stdout
        assert "Address already in use" in result.stdout
    restored = playbook("provision.yml")
    assert restored.returncode == 0, restored.stdout[-4000:]


def test_a_taken_rendezvous_port_on_the_master_is_named_and_nothing_changes(converged):
    """With host networking the master's rendezvous port is the node's: a process holding it (a job still
    running, say) is named before train.yml would collide with it."""
    with _port_held("node1", 14391):
        result = playbook("provision.yml", "-e", "master_port=14391")
        assert result.returncode != 0
        assert "master node1: the rendezvous port 14391 is taken (port 14391 is in use" in result.stdout
        assert "stop.yml" in result.stdout
        assert all(c["changed"] == 0 for c in recap(result.stdout).values())


def test_a_different_container_is_left_alone_unless_recreate(converged):
    result = playbook("provision.yml", "-e", '{"container_volumes": ["/data:/data", "/tmp:/host-tmp"]}')
    assert result.returncode != 0
    assert "a container named 'train' exists with another" in result.stdout
    assert "recreate=true" in result.stdout
    assert in_node("node1", "docker inspect -f '{{.State.Running}}' train").stdout.strip() == "true"


MUSA_ON_THE_TESTBED = {
    # the musa backend's path, with the stand-in image's replay stand-ins for mthreads-gmi and all_reduce_perf;
    # a second container beside `train`, with its own sshd port and rendezvous port
    "accelerator": "musa",
    "container_name": "train-musa",
    "container_ssh_port": 2223,
    "master_port": 14390,
}


@pytest.fixture
def musa_inventory(converged, tmp_path):
    inventory = inventory_copy(tmp_path)
    (inventory / "group_vars").mkdir()
    (inventory / "group_vars" / "all.yml").write_text(yaml.safe_dump(MUSA_ON_THE_TESTBED))
    yield inventory
    for node in ("node1", "node2"):
        in_node(node, "docker rm -f train-musa >/dev/null 2>&1 || true", check=False)


def test_musa_path_runs_end_to_end_with_replay_stand_ins(musa_inventory):
    result = playbook("provision.yml", inventory=musa_inventory)
    assert result.returncode == 0, result.stdout[-5000:]
    rows = yaml.safe_load(sorted((ROOT / "runs").glob("provision-*.json"))[-1].read_text())["nodes"]
    for row in rows:
        assert (row["container"], row["cards"], row["card_names"]) == ("train-musa", 8, ["MTT S5000"])
        assert row["driver"] == "5.1.0-server"
        assert row["busbw_node_gbps"] == 300.52  # the recorded run's 32 MiB in-place bus bandwidth
    assert "no mpirun in the image" in result.stdout

    # each node's card exporter serves the replayed cards, read by the health check's parsers (docs/monitoring.md)
    urls = {row["node"]: row["card_metrics"] for row in rows}
    assert f"card metrics: node1 {urls['node1']}, node2 {urls['node2']}" in result.stdout
    replayed = parse_mthreads_gmi(in_container("node1", "mthreads-gmi", container="train-musa").stdout)["cards"]
    for node, url in urls.items():
        assert url.endswith(":9466/metrics"), url
        with urllib.request.urlopen(url, timeout=10) as response:
            served = {f.name: f for f in text_string_to_metric_families(response.read().decode())}
        temperatures = {s.labels["card"]: s.value for s in served["trainops_card_temperature_celsius"].samples}
        assert temperatures == {str(c["index"]): float(c["temperature_c"]) for c in replayed}, node
        totals = {s.labels["node"] for s in served["trainops_card_memory_total_bytes"].samples}
        assert totals == {node} and served["trainops_card_query_up"].samples[0].value == 1.0
        assert served["trainops_card_processes"].samples[0].value == 0.0  # the table: no running processes


def test_more_slots_than_cards_is_named(musa_inventory):
    (musa_inventory / "host_vars").mkdir(exist_ok=True)
    (musa_inventory / "host_vars" / "node2.yml").write_text("slots: 9\n")
    result = playbook("provision.yml", inventory=musa_inventory)
    assert result.returncode != 0
    assert "node2: mthreads-gmi shows 8 card(s) (0, 1, 2, 3, 4, 5, 6, 7), but slots=9 asks for 9" in result.stdout


def test_the_node_package_of_this_checkout_is_installed_whole_in_every_container(converged):
    """provision.yml's node_package role: /opt/mtt-train-ops/<version> with its .complete mark, current pointing at
    it, and its programs importing the installed core (the version is checked again from inside the container)."""
    version = node_package.version(str(PACKAGE))
    for node in ("node1", "node2"):
        root = node_package.ROOT
        check = (f"import sys; sys.path.insert(0, '{root}/{version}'); from trainops import node_package as p; "
                 f"print(p.version('{root}/{version}/trainops'))")  # fmt: skip
        shown = in_container(node, f"cat {root}/{version}/.complete && readlink {root}/current && "
                                   f"cd / && python3 -c \"{check}\"").stdout  # fmt: skip
        assert shown.split() == [version, version, version], (node, shown)


def test_smoke_job_trains_across_nodes_and_logs_megatron_lines(converged):
    """The smoke job (trainops/node/smoke_train.py) under torchrun on both provisioned containers: megatron-core's
    groups for tp=2 over 2 nodes x 2 ranks, an all-reduce checked in each, real training on the testbed dataset,
    and Megatron-format iteration lines that megatron_log parses."""
    import subprocess

    from trainops.megatron_log import parse_lines

    # the node package provision.yml installed: this checkout's version, in both containers
    program = f"{node_package.programs_dir(node_package.version(str(PACKAGE)))}/smoke_train.py"
    command = [
        "torchrun",
        "--nnodes",
        "2",
        "--nproc_per_node",
        "2",
        "--master_addr",
        "172.30.0.11",
        "--master_port",
        "14395",
    ]
    job = [
        program,
        "--tp",
        "2",
        "--train-iters",
        "6",
        "--global-batch-size",
        "8",
        "--data-path",
        "/data/datasets/testbed_text_document",
    ]
    ranks = [
        subprocess.Popen(
            [
                "docker",
                "exec",
                NODE_CONTAINERS_BY_NAME[node],
                "docker",
                "exec",
                "train",
                *command,
                "--node_rank",
                str(rank),
                *job,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank, node in enumerate(("node1", "node2"))
    ]
    outputs = [proc.communicate(timeout=300)[0] for proc in ranks]
    assert [proc.returncode for proc in ranks] == [0, 0], outputs
    last_node = outputs[1]  # Megatron prints from the last rank, which lives on the last node
    assert "all-reduce checked in every group (tp=2 pp=1 dp=2)" in last_node
    log = parse_lines(last_node.splitlines(), source="node2").to_dict()
    iterations = log["iterations"]
    assert [r["iteration"] for r in iterations] == [1, 2, 3, 4, 5, 6]
    assert all(r["global_batch_size"] == 8 and r["elapsed_ms"] > 0 for r in iterations)
    assert iterations[-1]["losses"]["lm loss"] < iterations[0]["losses"]["lm loss"]
    assert log["failures"] == [] and log["summary"]["training_done"]


def test_a_missing_dataset_is_named(converged):
    result = playbook("provision.yml", "-e", "data_path=/data/datasets/no_such_document")
    assert result.returncode != 0
    assert "node1: missing in container 'train': /data/datasets/no_such_document.bin, " in result.stdout
    assert "/data/datasets/no_such_document.idx" in result.stdout
