"""One meaning of a spare (trainops.node_choice): the nodes plan.yml and train.yml plan on, what a spare with
other slots changes, and the inventories a spare contradicts."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from trainops import node_choice
from trainops.inputs import Inputs, check


def _hosts(**spec):
    """node -> 'slots[,master][,spare]'."""
    hosts = []
    for name, text in spec.items():
        slots, *flags = text.split(",")
        hosts.append({"name": name, "slots": int(slots), "master": "master" in flags, "spare": "spare" in flags})
    return hosts


THREE = _hosts(node1="8", node2="8,spare", node3="8")


def test_a_spare_gets_no_rank_until_it_takes_a_place():
    assert node_choice.choose(THREE, {}) == {"nodes": ["node1", "node3"], "in_order": False, "lines": []}
    out = node_choice.choose(THREE, {"node3": "node3: left out by -e exclude_nodes"})
    assert out["nodes"] == ["node1", "node2"] and out["in_order"]
    assert out["lines"] == ["spare        node2 takes the place of node3 (node rank 1): the layout stays as planned"]


def test_the_master_comes_first_and_a_spare_takes_its_rank():
    hosts = _hosts(node1="8", node2="8,master", node3="8,spare")
    assert node_choice.choose(hosts, {})["nodes"] == ["node2", "node1"]
    assert node_choice.choose(hosts, {"node2": "node2: sick"})["nodes"] == ["node3", "node1"]


def test_use_nodes_names_the_nodes_spares_among_them():
    assert node_choice.choose(THREE, {"node3": "x"}, use=["node1", "node2"])["nodes"] == ["node1", "node2"]


def test_a_spare_with_the_same_slots_is_taken_before_one_with_fewer():
    hosts = _hosts(node1="8", node2="8", small="4,spare", big="8,spare")
    out = node_choice.choose(hosts, {"node2": "node2: sick"})
    assert out["nodes"] == ["node1", "big"]
    assert out["lines"] == ["spare        big takes the place of node2 (node rank 1): the layout stays as planned"]


def test_a_spare_with_fewer_slots_says_the_world_size_changes():
    hosts = _hosts(node1="8", node2="8", small="4,spare")
    out = node_choice.choose(hosts, {"node2": "node2: sick"})
    assert out["nodes"] == ["node1", "small"]
    assert out["lines"] == [
        "spare        small takes the place of node2 (node rank 1) with 4 slot(s) for its 8: the world size goes "
        "from 16 to 12 ranks, so the layout is not the one planned for 16: the plan below gives the data-parallel "
        "size and the global batch on 12"
    ]
    assert "layout stays as planned" not in " ".join(out["lines"])


def test_an_exact_spare_does_not_hide_a_node_dropped_without_one():
    hosts = _hosts(node1="8", node2="8", node3="8", node4="8,spare")
    out = node_choice.choose(hosts, {"node2": "node2: sick", "node3": "node3: sick"})
    assert out["nodes"] == ["node1", "node4"]
    assert out["lines"] == [
        "spare        node4 takes the place of node2 (node rank 1): the world size goes from 24 to 16 ranks, so the "
        "layout is not the one planned for 24: the plan below gives the data-parallel size and the global batch on 16"
    ]


def test_nothing_to_plan_on_says_why_with_every_node_named():
    with pytest.raises(ValueError) as caught:
        node_choice.choose(THREE, {"node1": "node1: sick", "node3": "node3: left out by -e exclude_nodes",
                                   "node2": "node2: unreachable"})  # fmt: skip
    assert str(caught.value) == (
        "every node is left out, nothing to plan on:\n- node1: sick\n- node3: left out by -e exclude_nodes\n"
        "the spares cannot stand in:\n- node2: unreachable\n"
        "Repair and clear a node (the commands above), or for this run only give -e use_nodes=node1,node3 (over the "
        "incident record and the health check)"
    )
    with pytest.raises(ValueError, match=r"\n- node1: x\nthe inventory has no spare \(spare: true\) to stand in"):
        node_choice.choose(_hosts(node1="8"), {"node1": "node1: x"})


def test_an_inventory_of_spares_only_is_named_not_an_empty_list():
    spares = _hosts(node1="8,spare", node2="8,spare")
    with pytest.raises(ValueError) as caught:
        node_choice.choose(spares, {})
    assert "()" not in str(caught.value)
    assert str(caught.value).startswith("inventory: every node is a spare (spare: true on node1, node2)")
    assert node_choice.problems(spares, plans=True) == [str(caught.value)]
    # provision.yml, health.yml, stop.yml: spares are provisioned and checked like the others
    assert node_choice.problems(spares, plans=False) == []
    # -e use_nodes names what to plan on
    assert node_choice.problems(spares, plans=True, use=["node1"]) == []


def test_the_shared_cluster_puts_the_spares_last_so_its_master_is_train_yml_s():
    """trainops_cluster_facts (status.yml's master, provision.yml's checks, data.yml's build host) orders the
    nodes this way: a spare listed first is not the cluster's master."""
    hosts = _hosts(node0="8,spare", node1="8", node2="8")
    assert node_choice.spares_last(hosts) == ["node0", "node1", "node2"][1:] + ["node0"]
    assert node_choice.spares_last(hosts)[0] == node_choice.choose(hosts, {})["nodes"][0] == "node1"


def test_a_master_cannot_be_a_spare():
    hosts = _hosts(node1="8,master,spare", node2="8")
    assert node_choice.problems(hosts) == [
        "inventory node1: master: true and spare: true: the master has node rank 0 and a spare has no rank until it "
        "takes the place of a node left out, so a node cannot be both; drop spare: true on it, or set master: true "
        "on a node that is not a spare (docs/health.md, Spares)"
    ]


def test_an_elastic_replan_keeps_the_ranks_and_prefers_an_exact_spare():
    slots = {"node1": 8, "node2": 8, "small": 4, "big": 8}
    chosen, lines = node_choice.plan_nodes(["node2", "node1"], ["small", "big"], {"node1": "hang"}, slots)
    assert chosen == ["node2", "big"] and lines[0].endswith("(node rank 1): the layout stays as planned")
    chosen, _ = node_choice.plan_nodes(["node2", "node1"], ["small"], {"node1": "hang"}, slots)
    assert chosen == ["node2", "small"]


# the input check (trainops.inputs), before any node: the same choice, on the controller
ROOT = Path(__file__).resolve().parents[2]
HOSTVARS = {
    "node1": {"ansible_host": "10.0.0.1", "slots": 8},
    "node2": {"ansible_host": "10.0.0.2", "slots": 8, "spare": True},
    "node3": {"ansible_host": "10.0.0.3", "slots": 8},
}


def _check(playbook="train", extra=None, hostvars=None, inventory=None, login=False):
    extra = dict(extra or {})
    hostvars = HOSTVARS if hostvars is None else hostvars
    groups = {"nodes": list(hostvars), **({"slurm_login": ["login1"]} if login else {})}
    return check(
        Inputs(
            playbook=playbook, values={**(inventory or {}), **extra}, extra_names=sorted(extra), groups=groups,
            hostvars=hostvars, inventory_sources={"inventory/site": True}, backends_dir=str(ROOT / "backends"),
            model_path=str(ROOT / "models" / "tiny.yml"),
            model=yaml.safe_load((ROOT / "models" / "tiny.yml").read_text()),
        )
    ).problems  # fmt: skip


def test_the_input_check_refuses_a_master_that_is_a_spare_in_every_playbook():
    hostvars = dict(HOSTVARS, node2={**HOSTVARS["node2"], "master": True})
    for playbook in ("plan", "train", "provision", "stop"):
        problems = _check(playbook, hostvars=hostvars)
        assert any(p.startswith("inventory node2: master: true and spare: true") for p in problems), problems


def test_the_input_check_refuses_an_inventory_of_spares_where_a_run_is_planned():
    spares = {n: {**hv, "spare": True} for n, hv in HOSTVARS.items()}
    for playbook in ("plan", "train"):
        assert _check(playbook, hostvars=spares) == [
            "inventory: every node is a spare (spare: true on node1, node2, node3): a spare gets no rank until it "
            "takes the place of a node left out, so there is no node to plan on; drop spare: true on the nodes to "
            "train on (docs/health.md, Spares)"
        ]
    assert _check("provision", hostvars=spares) == []
    assert _check("train", {"use_nodes": "node1"}, hostvars=spares) == []


def test_the_input_check_refuses_a_choice_that_leaves_nothing_to_plan_on():
    problems = _check("train", {"exclude_nodes": "node1,node2,node3"})
    assert problems == [
        "-e exclude_nodes / -e use_nodes: every node is left out, nothing to plan on:\n- node1: left out by -e "
        "exclude_nodes\n- node3: left out by -e exclude_nodes\nthe spares cannot stand in:\n- node2: left out by "
        "-e exclude_nodes; name fewer nodes"
    ]
    assert _check("train", {"exclude_nodes": "node1,node3"}) == []  # node2, the spare, takes a place


def test_the_input_check_refuses_what_slurm_cannot_honour_naming_the_option():
    slurm = {"launcher": "slurm"}
    assert _check("train", slurm, login=True) == []  # the spare is excluded from the job, not refused
    problems = _check("train", {**slurm, "exclude_nodes": "node3", "health": "exclude"}, login=True)
    assert [p.split(" is not honoured")[0] for p in problems] == ["-e exclude_nodes=node3", "-e health=exclude"]
    # a site's default in the inventory is not refused (its health=exclude runs as warn under Slurm)
    assert _check("train", slurm, inventory={"health": "exclude"}, login=True) == []
    # slurm_nodes counts the nodes that are not spares
    assert any("slurm_nodes='3' must be a whole number from 1 to 2" in p
               for p in _check("train", {**slurm, "slurm_nodes": "3"}, login=True))  # fmt: skip
