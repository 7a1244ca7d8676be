"""The Jinja filters: thin wrappers that turn core errors into clear filter errors."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from bundle_filters import FILTER_DIR, all_filters, filter_files

ROOT = Path(__file__).resolve().parents[2]
FILTERS = all_filters()


def test_parsers_return_core_results():
    text = (ROOT / "tests" / "fixtures" / "mthreads-gmi" / "s5000-x8-gmi2.4.1.txt").read_text()
    parsed = FILTERS["trainops_device_cards"](text, "mthreads-gmi")
    assert len(parsed["cards"]) == 8 and parsed["driver_version"] == "5.1.0-server"


@pytest.mark.parametrize(
    ("name", "args", "words"),
    [
        ("trainops_device_cards", ("garbage", "mthreads-gmi"), "trainops_device_cards (mthreads-gmi): "),
        ("trainops_device_cards", ("x", "nvidia-smi"), "trainops_device_cards (nvidia-smi): "),
        ("trainops_device_cards", ("x", "rocm-smi"), "'rocm-smi' has no card parser"),
        ("parse_allreduce_perf", ("",), "parse_allreduce_perf: "),
    ],
)
def test_garbage_becomes_a_filter_error_naming_the_filter(name, args, words):
    with pytest.raises(AnsibleFilterError, match=words.replace("(", r"\(").replace(")", r"\)")):
        FILTERS[name](*args)


def test_every_profiles_device_tool_has_its_parser_and_its_task_file():
    from presets import BACKENDS
    from trainops.gmi import PARSERS

    tools = {profile["device_tool"] for profile in BACKENDS.values()} - {""}
    assert tools == set(PARSERS)
    for tool in tools:
        assert (ROOT / "roles" / "accelerator" / "tasks" / f"{tool}.yml").is_file(), tool


def test_cluster_in_rank_order():
    nodes = [
        {"name": "a", "ansible_host": "10.0.0.1", "slots": 4},
        {"name": "b", "ansible_host": "10.0.0.2", "slots": 4, "master": True},
    ]
    cluster = FILTERS["trainops_cluster"](nodes)
    assert (cluster["master"], cluster["world_size"]) == ("b", 8)
    with pytest.raises(AnsibleFilterError, match="invalid inventory"):
        FILTERS["trainops_cluster"]([dict(nodes[0], accelerator="tpu")])


def test_shell_arg_lines_quote_every_value():
    text = FILTERS["trainops_shell_arg_lines"](["--data-path", "/d $(x)", "--swiglu"], 2)
    assert text == "  --data-path '/d $(x)' \\\n  --swiglu"


def test_each_filter_file_keeps_to_one_concern_and_imports_the_core_it_wraps():
    """One file per concern, no name twice (all_filters checks), and each file's core imports visible at its top."""
    files = filter_files()
    assert set(files) == {
        "trainops_checkpoints",
        "trainops_cluster",
        "trainops_health",
        "trainops_monitoring",
        "trainops_provision",
        "trainops_render",
        "trainops_node_package",
        "trainops_run",
        "trainops_slurm",
    }
    assert all(name.startswith(("trainops_", "parse_")) for filters in files.values() for name in filters)
    for path in FILTER_DIR.glob("*.py"):
        text = path.read_text()
        assert "importlib" not in text, f"{path.name} loads the core through importlib: import it at the top"
        assert "from trainops" in text, f"{path.name} imports nothing of the core"


def test_the_nodes_a_run_leaves_out_before_any_ssh():
    chosen = FILTERS["trainops_chosen_left_out"]
    implicated = {"node2": "node2 left out: implicated 2 times in 14 days (...)"}
    nodes = ["node1", "node2", "node3"]
    assert chosen(implicated, nodes, {}) == implicated
    # -e use_nodes is the user's word: it keeps an implicated node, and leaves out the nodes it does not name
    assert chosen(implicated, nodes, {"use_nodes": ["node1", "node2"]}) == {
        "node3": "node3: left out, not in -e use_nodes"
    }
    assert chosen({}, nodes, {"exclude_nodes": ["node3"]}) == {"node3": "node3: left out by -e exclude_nodes"}
    with pytest.raises(AnsibleFilterError, match="no such node in the inventory: node9"):
        chosen({}, nodes, {"exclude_nodes": ["node9"]})


def test_a_spare_takes_the_place_of_a_node_left_out_with_its_rank():
    plan_nodes, replan_nodes = FILTERS["trainops_plan_nodes"], FILTERS["trainops_replan_nodes"]
    nodes = ["node1", "node2", "node3"]
    hostvars = {"node1": {}, "node2": {"master": True}, "node3": {"spare": True}}
    assert plan_nodes({}, nodes, hostvars, {}) == {"nodes": ["node2", "node1"], "in_order": False, "lines": []}
    out = plan_nodes({"node2": "sick"}, nodes, hostvars, {})
    assert out["nodes"] == ["node3", "node1"] and out["in_order"]
    assert out["lines"] == ["spare        node3 takes the place of node2 (node rank 0): the layout stays as planned"]
    # no spare left: the node is dropped (the planner makes the run on fewer nodes)
    assert plan_nodes({"node2": "sick", "node3": "sick"}, nodes, hostvars, {})["nodes"] == ["node1"]
    # -e use_nodes names the nodes to plan on, spares among them
    assert plan_nodes({}, nodes, hostvars, {"use_nodes": ["node1", "node3"]})["nodes"] == ["node1", "node3"]
    with pytest.raises(AnsibleFilterError, match="every node is left out"):
        plan_nodes({"node1": "x", "node2": "y", "node3": "z"}, nodes, hostvars, {})
    # an elastic re-plan: the lost node's place, if a spare answered the ping after the failure
    assert replan_nodes(["node2", "node1"], {"node1": "hang"}, nodes, hostvars, {}) == ["node2", "node3"]
    gone = dict(hostvars, node3={"spare": True, "train_reach": {"unreachable": True}})
    assert replan_nodes(["node2", "node1"], {"node1": "hang"}, nodes, gone, {}) == ["node2"]


def test_a_spare_with_fewer_slots_is_said_and_an_inventory_of_spares_named():
    plan_nodes = FILTERS["trainops_plan_nodes"]
    nodes = ["node1", "node2", "node3"]
    hostvars = {"node1": {"slots": 8}, "node2": {"slots": 8}, "node3": {"slots": "4", "spare": "true"}}
    out = plan_nodes({"node2": "node2: sick"}, nodes, hostvars, {})
    assert out["nodes"] == ["node1", "node3"]
    assert "with 4 slot(s) for its 8: the world size goes from 16 to 12 ranks" in out["lines"][0]
    spares = {n: {"spare": True} for n in nodes}
    with pytest.raises(AnsibleFilterError, match=r"^inventory: every node is a spare \(spare: true on node1, node2"):
        plan_nodes({}, nodes, spares, {})
    assert FILTERS["trainops_spares"](nodes, hostvars) == ["node3"]
    first = {"node3": hostvars["node3"], "node1": hostvars["node1"], "node2": hostvars["node2"]}
    assert FILTERS["trainops_spares_last"](["node3", "node1", "node2"], first) == ["node1", "node2", "node3"]


def test_a_nodes_gathered_results_become_its_health_facts():
    facts = FILTERS["trainops_health_facts"]
    missing = facts({"exists": False}, {}, {}, "train", 8, "nvidia-smi")
    assert missing == {"error": "the training container 'train' does not exist", "action": "run provision.yml"}
    running = {"exists": True, "container": {"State": {"Running": True}, "Image": "sha256:abc"}}
    out = facts(
        running,
        {"stdout": '{"stack": {"torch": "2.5.1"}, "disk": {}}'},
        {"stdout": "UNREADABLE dmesg: no"},
        "train",
        "2",
        "",
    )
    assert out["stack"] == {"torch": "2.5.1", "image": "sha256:abc"} and out["slots"] == 2
    assert out["kernel_log"] == {"readable": False, "error": "dmesg: no"}
    broken = facts(running, {"stdout": "", "stderr": "Traceback ... SyntaxError"}, {}, "train", 2, "")
    assert broken["error"].startswith("the facts could not be read in 'train': Traceback")


def test_the_full_levels_runs_become_the_nodes_burn_in_and_all_reduce_facts():
    burn = FILTERS["trainops_burn_in_facts"]
    printed = '{"precision": "bf16", "cards": [{"card": 0, "tflops": 0.14, "products": 9}]}'
    assert burn({"rc": 0, "stdout": printed})["cards"][0]["tflops"] == 0.14
    assert burn({"rc": 1, "stdout": "", "stderr": "ModuleNotFoundError: torch"}) == {
        "error": "exit 1: ModuleNotFoundError: torch"
    }
    coll = FILTERS["trainops_collective_run_facts"]
    gloo = '{"backend": "gloo", "world": 2, "bytes": 16777216, "time_us": 9000.0, "busbw_gbps": 1.8641, "wrong": 0}'
    assert coll({"rc": 0, "stdout": "W1203 torchrun warning\n" + gloo}, ["node1"], 2, "") == {
        "nodes": ["node1"], "tool": "gloo", "ranks": 2, "bytes": 16777216, "busbw_gbps": 1.8641, "wrong": 0
    }  # fmt: skip
    table = (ROOT / "tests" / "fixtures" / "allreduce" / "no-check.txt").read_text()  # 8 x S5000, 1 GiB
    assert coll({"rc": 0, "stdout": table}, ["node1"], 8, "/usr/local/bin/all_reduce_perf") == {
        "nodes": ["node1"], "tool": "all_reduce_perf", "ranks": 8, "bytes": 1073741824, "busbw_gbps": 234.55,
        "wrong": 0,
    }  # fmt: skip
    assert coll({"rc": 127}, ["n"], 8, "/x/all_reduce_perf")["skipped"].startswith("no all_reduce_perf at /x/all_red")
    assert coll({"skipped": True}, ["n"], 1, "")["skipped"] == "one card: nothing to all-reduce within the node"
    assert coll({"rc": 1, "stdout": "", "stderr": "RuntimeError: Connection reset"}, ["n"], 2, "")["error"].startswith(
        "exit 1"
    )


def test_the_runs_across_nodes_become_the_fleets_facts_with_its_pairs():
    run = FILTERS["trainops_collective_run_facts"]
    gloo = '{"backend": "gloo", "world": 6, "bytes": 16777216, "time_us": 61575.8, "busbw_gbps": 0.4541, "wrong": 0}'
    nodes = ["node1", "node2", "node3"]
    fleet = run({"rc": 0, "stdout": gloo}, nodes, 2, "")
    assert fleet == {"tool": "gloo", "ranks": 6, "bytes": 16777216, "busbw_gbps": 0.4541, "wrong": 0, "nodes": nodes}
    assert run({"rc": 126}, nodes, 8, "/t")["skipped"].startswith("no mpirun in the training image")
    assert run({"rc": 0, "stdout": gloo}, ["node1", "node2"], 1, "")["ranks"] == 2  # one card each: still a run
    timed_out = run({"rc": 124, "stdout": "", "stderr": "torch.distributed.DistNetworkError: timed out"}, nodes, 2, "")
    assert timed_out["error"].startswith("exit 124: torch.distributed.DistNetworkError")
    missed = FILTERS["trainops_fleet_missed"]
    assert (missed([fleet], nodes, 0.2), missed([fleet], nodes, 0.5), missed([timed_out], nodes, 0)) == (
        False, True, True
    )  # fmt: skip
    pair = dict(fleet, nodes=["node1", "node3"], busbw_gbps=0.02)
    first = dict(fleet, nodes=["node2", "node3"], busbw_gbps=0.03)
    facts = FILTERS["trainops_fleet_collective_facts"]([pair, fleet, first], nodes, "0.5")
    assert (facts["busbw_gbps"], facts["min_busbw_gbps"]) == (0.4541, 0.5)
    assert [p["nodes"] for p in facts["pairs"]] == [["node1", "node3"], ["node2", "node3"]]
    assert FILTERS["trainops_fleet_collective_facts"]([], nodes, 0)["error"] == "no all-reduce across the nodes ran"
    assert FILTERS["trainops_pair_rounds"](nodes) == [[["node2", "node3"]], [["node1", "node3"]], [["node1", "node2"]]]


def test_the_resume_choice_sets_aside_a_truncated_save_and_refuses_when_none_is_left():
    recorded = json.loads((ROOT / "tests" / "fixtures" / "checkpoints" / "megatron-tiny-tp1pp2dp2.json").read_text())
    plan = {"tp": 1, "pp": 2, "job": "megatron", "checkpoint_bytes": 25034240, "checkpoint_dir": recorded["dir"]}
    choose = FILTERS["trainops_resume_choice"]
    cut = copy.deepcopy(recorded)
    cut["saves"][-1]["files"]["__0_0.distcp"] = 1000  # iteration 15's first shard, cut short
    choice = choose({"rc": 0, "stdout": json.dumps(cut)}, plan, True, "node1")
    assert (choice["resume"], choice["set_aside"], choice["tracker"]) == ("10", ["iter_0000015"], "10")
    assert "iteration 15 set aside (not resumed from): __0_0.distcp is truncated" in choice["lines"][0]
    # -e verify_checkpoints=false: the tracker as it is
    assert choose({"rc": 0, "stdout": json.dumps(cut)}, plan, False, "node1")["resume"] == "15"
    for entry in cut["saves"]:
        entry["files"]["__0_0.distcp"] = 1000
    refused = choose({"rc": 0, "stdout": json.dumps(cut)}, plan, True, "node1")
    assert refused["resume"] == "" and refused["refused"].startswith(f"node1: not one checkpoint in {recorded['dir']}")
    assert "-e fresh=true" in refused["refused"] and "-e verify_checkpoints=false" in refused["refused"]
    with pytest.raises(AnsibleFilterError, match="node1: the checkpoints in .* could not be scanned: no python3"):
        choose({"rc": 127, "stdout": "", "stderr": "no python3"}, plan, True, "node1")


def test_status_names_the_node_each_runs_supervisor_is_asked_on_and_one_that_did_not_answer():
    status_text = FILTERS["trainops_status_text"]
    watch = {"nodes": {"node1": {"state": "running", "detail": "41"}}, "progress": "iteration 5/50"}
    plans = {
        run: {"item": run, "stdout": json.dumps({"master": "node1", "supervisor": host})}
        for run, host in (("/w/runs/a/r1", "node3"), ("/w/runs/b/r2", ""))
    }
    probes = [{"item": plan, "watch": watch} for plan in plans.values()]
    supervisors = [
        {"item": plans["/w/runs/a/r1"], "unreachable": True, "msg": "ssh: connect to host 10.0.0.3: No route to host"},
        {"item": plans["/w/runs/b/r2"], "stdout": json.dumps({"run_dir": "/w/runs/b/r2", "attempt": 1, "pid": 7})},
    ]
    text = status_text(probes, supervisors, "node1")
    assert "watched  by nobody that answers: its supervisor's node node3 did not answer (" in text
    assert "No route to host" in text and "the ranks go on unwatched" in text
    assert "watched  by its supervisor (pid 7 in node1's container since" in text
    # a run whose master was left out (--limit) with its supervisor on it: not probed, its record's copy on node2
    lost = {"item": "/w/runs/c/r3", "stdout": json.dumps({
        "master": "node1", "supervisor": "", "nodes": [{"name": "node1"}, {"name": "node2"}]})}  # fmt: skip
    silent = {"item": lost, "unreachable": True, "msg": "ssh: connect to host 10.0.0.1 port 22: Connection timed out"}
    text = status_text(probes, [*supervisors, silent], "node1")
    run = text[text.index("run /w/runs/c/r3") :]
    assert "its supervisor's node node1 did not answer (" in run and "Connection timed out" in run
    assert "status.yml -e supervisor_host=node2 moves its supervision to node2, which holds a copy of its record" in run
    assert "  master   node1 did not answer (left out): this run was not probed" in run
    assert "progress" not in run  # no probe: nothing said of its ranks' progress


def test_provenance_takes_the_stacks_of_the_nodes_that_hold_one(tmp_path):
    """trainops_provenance over the nodes' hostvars: a node without ``train_stack`` (left out, ended) is not a node
    of the record; the bundle outside a git checkout says so."""
    stack = {"image": "sha256:" + "ab" * 32, "python": "3.11.2"}
    hosts = [{"inventory_hostname": "node1", "train_stack": stack}, {"inventory_hostname": "node2"}]
    found = FILTERS["trainops_provenance"](hosts, str(tmp_path), "ae69124582e7", {"OMP_NUM_THREADS": "1"})
    assert list(found["nodes"]) == ["node1"] and found["nodes"]["node1"]["image"] == stack["image"]
    assert found["bundle"]["commit"] is None and found["launch_env"] == {"OMP_NUM_THREADS": "1"}


def test_status_reads_a_run_whose_end_nobody_followed_only_once_it_has_ended_on_its_supervisors_host():
    """status_unfollowed.yml: the plan read on the master names the supervisor's host (a moved supervision's);
    a plan not read (its master silent, its directory gone) waits for a later status.yml; of the supervisors'
    answers, only the runs that ended there are read (not one still running, moved away, or never supervised)."""
    unrecorded = {"run": "e/1", "run_dir": "/data/runs/e/1", "master": "node1", "supervisor": "node3"}
    moved = dict(unrecorded, run="e/2", run_dir="/data/runs/e/2")
    reads = [
        {"item": unrecorded, "rc": 0, "stdout": json.dumps({"run_dir": "/data/runs/e/1", "supervisor": "node3"})},
        {"item": moved, "rc": 0, "stdout": json.dumps({"run_dir": "/data/runs/e/2", "supervisor": "node1"})},
        {"item": dict(unrecorded, run="e/3", run_dir="/data/runs/e/3"), "rc": 1, "stdout": ""},
        {"item": dict(unrecorded, run="e/4", run_dir="/data/runs/e/4"), "unreachable": True, "msg": "no route"},
    ]
    plans = FILTERS["trainops_unrecorded_plans"](reads)
    assert [(p["item"], p["run"], p["supervisor"]) for p in plans] == [
        ("/data/runs/e/1", "e/1", "node3"),
        ("/data/runs/e/2", "e/2", "node1"),
    ]
    assert json.loads(plans[0]["stdout"])["run_dir"] == "/data/runs/e/1"
    answers = [
        {"item": plans[0], "stdout": json.dumps({"attempt": 2, "ended": True, "state": "failed"})},
        {"item": plans[1], "stdout": json.dumps({"attempt": 1, "ended": False, "state": "running"})},
        {"item": plans[1], "stdout": json.dumps({"ended": True, "superseded": "moved to node2"})},
        {"item": plans[1], "stdout": json.dumps({"attempt": 0, "run_dir": "/data/runs/e/2"})},
        {"item": plans[1], "unreachable": True, "msg": "timed out"},
    ]
    assert FILTERS["trainops_ended_unrecorded"](answers) == [plans[0]]
