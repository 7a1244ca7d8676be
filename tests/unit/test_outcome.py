"""The texts and checks the playbooks used to compute in Jinja: the run's outcome, stop.yml's and status.yml's
lines, data.yml's request, the provision report's rows, the collective record's reuse, the dataset comparison,
and the backend profiles."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainops import backend, collective, data_request, dataset_manifest, outcome, provision_report
from trainops.errors import PlanError

ROOT = Path(__file__).resolve().parents[2]
PLAN = {"run_id": "20261201-050000", "exp_name": "smoke"}


def test_a_failed_fanout_is_the_outcome_named_on_the_master():
    got = outcome.train_outcome("node1", {"rc": 255, "stderr": "ssh: connect refused", "stdout": ""}, None)
    assert got == {
        "state": "failed",
        "kind": "launch",
        "node": "node1",
        "reason": "the fan-out failed (rc 255): ssh: connect refused",
    }


def test_a_long_fanout_output_is_clipped_at_a_word():
    got = outcome.train_outcome("node1", {"rc": 1, "stderr": "word " * 300, "stdout": ""}, None)
    assert len(got["reason"]) < 650 and got["reason"].endswith("word...")


def test_the_watchers_outcome_else_running():
    watch = {"state": "finished", "progress": "iteration 10/10"}
    assert outcome.train_outcome("node1", {"rc": 0}, watch) == watch
    assert outcome.train_outcome("node1", {"rc": 0}, None) == {"state": "running"}


def test_running_text_says_how_to_follow_stop_and_report():
    started = outcome.running_text(PLAN, {"state": "running"}, "/runs/smoke/x y")
    assert started.splitlines() == [
        "run 20261201-050000 (smoke) started",
        "follow it:  ansible-playbook playbooks/status.yml",
        "stop it:    ansible-playbook stop.yml",
        "report:     ansible-playbook playbooks/report.yml -e run='/runs/smoke/x y'",
    ]
    going = outcome.running_text(PLAN, {"state": "running", "watched_s": 60.0, "progress": "iteration 5/10"}, "/r")
    assert going.splitlines()[0] == "run 20261201-050000 (smoke) is still running after 60.0 s: iteration 5/10"


def _node(name, **facts):
    return {"name": name, **facts}


RUNNING = {"exists": True, "container": {"State": {"Running": True}}}


def test_stop_lines_for_each_state_of_a_node():
    group = {"exp": "smoke", "run_id": "r1", "pgid": 42, "processes": 3, "result": "stopped by SIGTERM", "seconds": 2}
    lines = outcome.stop_lines(
        [
            _node("n1", stop_ping={"unreachable": True, "msg": "timed out\n"}),
            _node("n2", stop_ping={}, stop_container_info={"exists": False}),
            _node("n3", stop_ping={}, stop_container_info={"exists": True, "container": {"State": {"Running": False}}}),
            _node("n4", stop_ping={}, stop_container_info=RUNNING, run_groups_stopped=[], accelerator_cards=[{}]),
            _node(
                "n5",
                stop_ping={},
                stop_container_info=RUNNING,
                run_groups_stopped=[group],
                stop_removed={"changed": True},
            ),  # fmt: skip
        ]
    )
    assert lines == [
        "n1: DID NOT ANSWER (timed out)",
        "n2: no training container; nothing runs",
        "n3: the training container is stopped; nothing runs",
        "n4: idle, nothing to stop; cards idle",
        "n5: run smoke/r1 (process group 42, 3 processes) stopped by SIGTERM in 2 s",
        "n5: container removed",
    ]


def test_silent_nodes_are_named_with_their_address_and_error():
    text = outcome.silent_nodes_text(
        [_node("node2", ansible_host="172.30.0.12", reach_ping={"msg": "Connection timed out"})],
        "reach_ping",
        "is unreachable",
        "Nothing was changed on any node.",
    )
    assert text == "node2 (172.30.0.12) is unreachable: Connection timed out. Nothing was changed on any node."


def test_a_silent_nodes_error_is_the_connections_last_line():
    refused = "ssh: connect to host 127.0.0.1 port 1: Connection refused"
    ping = {"unreachable": True, "msg": f"Task failed: Failed to connect to the host via ssh: {refused}"}
    node = _node("node1", ansible_host="127.0.0.1", reach_ping=ping)
    assert outcome.silent_nodes_text([node], "reach_ping", "is", "") == f"node1 (127.0.0.1) is: {refused}. "
    assert outcome.stop_lines([_node("node1", stop_ping=ping)]) == [f"node1: DID NOT ANSWER ({refused})"]
    warned = "Failed to connect to the host via ssh: Warning: Permanently added 'x'.\r\nroot@x: Permission denied."
    assert outcome.connection_error(warned) == "root@x: Permission denied."
    assert outcome.connection_error(None) == outcome.connection_error("Task failed: ") == "no answer"


def test_when_every_node_is_silent_the_text_says_so_not_the_others():
    silent = [_node(f"node{i}", reach_ping={"msg": "refused"}) for i in (1, 2)]
    args = ("reach_ping", "did not answer", "The nodes that answered were stopped.")
    every = "No node answered: nothing was stopped or checked."
    assert outcome.silent_nodes_text(silent, *args, every, 2) == (
        "node1 (node1) did not answer: refused. node2 (node2) did not answer: refused. " + every
    )
    assert outcome.silent_nodes_text(silent[:1], *args, every, 2).endswith(" refused. " + args[2])
    assert outcome.silent_nodes_text(silent, *args).endswith(" refused. " + args[2])  # no when_all: then


def test_status_text_shows_each_runs_nodes_progress_and_hang():
    watch = {
        "nodes": {"node1": {"state": "running", "detail": "4242"}, "node2": {"state": "exited", "detail": "rc 1"}},
        "progress": None,
        "seconds_since_progress": 31.7,
        "hang_limit_s": 30,
        "hang": {"confidence": "high", "finding": "node2 rank 2: stopped"},
    }
    assert outcome.status_text([{"run_dir": "/w/runs/smoke/r1", "watch": watch}]).splitlines() == [
        "run /w/runs/smoke/r1",
        "  node1    running (process group 4242)",
        "  node2    exited rc 1",
        "  progress no iteration yet",
        "  quiet    31 s since the last iteration (hang limit 30 s)",
        "  hang     high confidence: node2 rank 2: stopped",
    ]
    assert outcome.status_text([]) == "No run of this bundle is running on any node."


GOOD = {"input": "/d/raw.jsonl", "output_prefix": "/d/ds/x", "tokenizer": "/d/tok", "workers": 0, "max_bad_lines": 5}


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"input": None}, "-e input=... is required: Raw JSONL inside the training container."),
        ({"input": ""}, "-e input= is empty: give an absolute path inside the containers, or leave input out"),
        (
            {"tokenizer": "tok"},
            "-e tokenizer='tok' must be an absolute path inside the containers (it starts with '/')",
        ),
        ({"workers": "-1"}, "-e workers='-1' must be a whole number >= 0"),
        ({"max_bad_lines": "x"}, "-e max_bad_lines='x' is not an integer; give a whole number >= 0"),
        ({"output_prefix": "/d/x.idx"}, "-e output_prefix='/d/x.idx' must not end in .bin/.idx (they are added)"),
        ({"json_key": ""}, "-e json_key= is empty: give a value, or leave json_key out for its default 'text'"),
    ],
)
def test_a_bad_data_request_is_named(change, problem):
    assert data_request.problems({**GOOD, **change}) == [problem]


def test_a_good_data_request_has_no_problem():
    assert data_request.problems(GOOD) == []


def test_provision_rows_from_what_the_roles_found():
    rows = provision_report.provision_rows(
        [
            {"name": "n1", "ansible_host": "10.0.0.1", "container_ssh_port": 2222,
             "container_facts": {"name": "train", "status": "running", "image": "img"},
             "accelerator_facts": {"count": 8, "names": ["MTT S5000"], "driver": "3.1"},
             "collective_results": {"intra": {"largest_busbw_gbps": 90.5}}, "dataset_sizes": {"/d/x.bin": 1}},
            {"name": "n2", "container_ssh_port": 2222},
        ]
    )  # fmt: skip
    assert rows[0]["status"] == "running" and rows[0]["busbw_node_gbps"] == 90.5 and rows[0]["cards"] == 8
    assert rows[0]["busbw_cluster_gbps"] is None and rows[0]["data"] == {"/d/x.bin": 1}
    assert rows[1] == {
        "node": "n2", "address": "n2", "container": "-", "status": "not provisioned", "image": "-",
        "sshd_port": 2222, "cards": "-", "card_names": [], "driver": "", "busbw_node_gbps": None,
        "busbw_cluster_gbps": None, "collective": {}, "data": {}, "card_metrics": None,
        "supervisors_host": False,
    }  # fmt: skip


def test_a_collective_record_is_reused_only_when_every_node_has_a_fresh_matching_one():
    fresh = {"collective_record": {"signature": "abc", "epoch": 1000.0}, "collective_signature": "abc"}
    assert collective.records_reusable([fresh, fresh], now_epoch=1500.0, max_age_s=3600)
    assert not collective.records_reusable([fresh, fresh], now_epoch=9000.0, max_age_s=3600)
    changed = {**fresh, "collective_signature": "def"}
    assert not collective.records_reusable([fresh, changed], now_epoch=1500.0, max_age_s=3600)
    assert not collective.records_reusable([fresh, {"collective_signature": "abc"}], now_epoch=1500.0, max_age_s=3600)


def test_dataset_sizes_that_differ_between_nodes_are_listed():
    same = {"/d/x.bin": 10, "/d/x.idx": 2}
    assert dataset_manifest.size_mismatch({"n1": same, "n2": dict(same)}) == []
    missing = {"/d/x.bin": None, "/d/x.idx": 2}
    assert dataset_manifest.size_mismatch({"n1": same, "n2": {"/d/x.bin": 9, "/d/x.idx": 2}, "n3": missing}) == [
        "/d/x.bin: n1=10 n2=9 n3=?",
    ]
    # a node not measured (left out of the run, a spare) is not compared
    assert dataset_manifest.size_mismatch({"n1": same, "n2": dict(same), "n3": None, "n4": {}}) == []


BACKENDS = str(ROOT / "backends")


def test_every_backend_profile_loads_with_a_sites_environment_over_its_launch_env():
    assert backend.names(BACKENDS) == ["cpu", "cuda", "musa"]
    for name in backend.names(BACKENDS):
        assert backend.load_profile(BACKENDS, name)["name"] == name
    cpu = backend.load_profile(BACKENDS, "cpu", {"OMP_NUM_THREADS": 8, "GLOO_SOCKET_IFNAME": "eth0"})
    assert cpu["launch_env"] == {"OMP_NUM_THREADS": "8", "GLOO_SOCKET_IFNAME": "eth0"}


@pytest.mark.parametrize(
    ("accelerator", "site_env", "words"),
    [
        ("tpu", None, "accelerator 'tpu' has no backend profile: use one of cpu, cuda, musa"),
        ("cpu", {"BAD NAME": "1"}, "backend_env must map environment variable names"),
        ("cpu", {"FLAG": True}, "got 'FLAG': True"),
        ("cpu", ["A=1"], "got ['A=1']"),
    ],
)
def test_a_bad_backend_or_site_environment_is_refused_naming_it(accelerator, site_env, words):
    with pytest.raises(PlanError) as caught:
        backend.load_profile(BACKENDS, accelerator, site_env)
    assert words in str(caught.value)
