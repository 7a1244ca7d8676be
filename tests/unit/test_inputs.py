"""trainops.inputs.check: every input of a playbook judged at once, before any node (no Ansible needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from trainops.inputs import Inputs, check

ROOT = Path(__file__).resolve().parents[2]
NODES = {"nodes": ["node1", "node2"]}
HOSTVARS = {"node1": {"ansible_host": "10.0.0.1", "slots": 8}, "node2": {"ansible_host": "10.0.0.2", "slots": 8}}
PRESET = yaml.safe_load((ROOT / "models" / "llama3-8b.yml").read_text())


def given(playbook="train", extra=None, inventory=None, hostvars=None, groups=None, **kw):
    """``extra``: what -e gave; ``inventory``: all.vars (the play sees both, -e over them)."""
    extra = dict(extra or {})
    return Inputs(
        playbook=playbook,
        values={**(inventory or {}), **extra},
        extra_names=sorted(extra),
        groups=NODES if groups is None else groups,
        hostvars=HOSTVARS if hostvars is None else hostvars,
        inventory_sources={"inventory/site": True},
        backends_dir=str(ROOT / "backends"),
        role_parameters=["container_image", "data_build_poll_s"],
        model_path=str(ROOT / "models" / "llama3-8b.yml"),
        model=kw.pop("model", PRESET),
        **kw,
    )


def test_a_good_run_has_no_problem_and_converts_every_option_it_reads():
    verdict = check(given(extra={"tp": "2", "pp": "1", "hang_timeout": "60", "container_image": "x:1"}))
    assert verdict.problems == [] and verdict.warnings == []
    assert verdict.options["tp"] == 2 and verdict.options["hang_timeout"] == 60.0 and verdict.options["mbs"] == 1


def test_unknown_names_are_refused_with_the_nearest_unless_allowed():
    verdict = check(given(extra={"tpp": "2", "max_restart": "3", "ansible_user": "root"}))
    assert len(verdict.problems) == 2  # sorted by name; ansible_* passes
    assert "-e max_restart: no such option; did you mean max_restarts?" in verdict.problems[0]
    assert "-e tpp: no such option; did you mean tp?" in verdict.problems[1]
    lenient = check(given(extra={"tpp": "2", "allow_unknown": "true"}))
    assert lenient.problems == [] and "-e tpp: no such option" in lenient.warnings[0]


def test_an_option_another_playbook_reads_is_a_warning():
    verdict = check(given("stop", extra={"tp": "2"}))
    assert verdict.problems == []
    assert verdict.warnings == ["-e tp is not read by stop.yml (it is read by plan.yml, train.yml); ignored"]


def test_every_problem_at_once_and_none_of_the_rules_between_them_then():
    verdict = check(given(extra={"tp": "", "launcher": "k8s", "hang_timeout": "soon", "elastic": "true"}))
    assert len(verdict.problems) == 3  # elastic without max_restarts is a rule between values: judged after
    assert any("-e tp= is empty" in p for p in verdict.problems)


def test_the_rules_between_values():
    assert "give -e max_restarts=N" in check(given(extra={"elastic": "true"})).problems[0]
    assert "needs a slurm_login group" in check(given(extra={"launcher": "slurm"})).problems[0]
    assert "required" in check(given("data", extra={"input": "/d/x.jsonl"})).problems[0]


def test_an_inventory_value_is_named_as_the_inventory_s():
    verdict = check(given(inventory={"hang_timeout": "soon"}))
    assert verdict.problems == ["inventory: hang_timeout='soon' is not a number; give a number > 0 or auto"]


def test_hosts_fields_and_cluster_fields_that_differ():
    hostvars = {
        "node1": {"ansible_host": "127.0.0.1 ", "slots": "²", "backend_env": {"A": "1"}},
        "node2": {"ansible_host": "10.0.0.2", "slots": 8, "backend_env": {"A": "2"}},
    }
    problems = check(given(hostvars=hostvars)).problems
    assert "inventory node1: ansible_host='127.0.0.1 ' has spaces around it; remove them" in problems
    assert "inventory node1: slots='²' is not an integer; give a whole number >= 1 and <= 16" in problems
    assert any("backend_env differs between nodes" in p and "set it once under all.vars" in p for p in problems)


def test_no_nodes_group_or_no_inventory_is_a_plain_sentence():
    problems = check(given(groups={})).problems
    assert problems[0].startswith("the inventory (inventory/site) has no host in the group 'nodes'")
    missing = given(groups={})
    missing.inventory_sources = {"inventroy/site": False}
    assert check(missing).problems[0].startswith("-i inventroy/site: no such inventory file or directory")


def test_an_unknown_card_plans_once_its_memory_is_given():
    hostvars = {h: dict(v, accelerator="cuda", accelerator_card="A100") for h, v in HOSTVARS.items()}
    refused = check(given(hostvars=hostvars, inventory={"accelerator": "cuda", "accelerator_card": "A100"}))
    assert any("has no known memory size; set accelerator_memory_gib" in p for p in refused.problems)
    accepted = check(
        given(hostvars=hostvars, inventory={"accelerator": "cuda"}, extra={"accelerator_memory_gib": "80"})
    )
    assert accepted.problems == []


def test_backend_env_that_the_launch_sets_is_refused():
    hostvars = {h: dict(v, backend_env={"MUSA_VISIBLE_DEVICES": "0"}) for h, v in HOSTVARS.items()}
    problems = check(given(hostvars=hostvars, inventory={"backend_env": {"MUSA_VISIBLE_DEVICES": "0"}})).problems
    assert problems == [
        "backend_env sets MUSA_VISIBLE_DEVICES, which the musa profile's visible_devices_env (one per slot) sets "
        "itself for every launch (the site's value would be overridden): remove it from backend_env; set slots to "
        "change the cards a node uses"
    ]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"norm_epsilon": "abc"}, "'norm_epsilon' must be a finite number > 0, got 'abc'"),
        ({"num_query_groups": -4}, "'num_query_groups' must be an integer >= 0, got -4"),
        ({"kv_channels": "abc"}, "'kv_channels' must be an integer >= 0"),
        ({"swiglu": "yes"}, "'swiglu' must be true or false"),
        ({"normalization": "BatchNorm"}, "'normalization' must be one of RMSNorm, LayerNorm"),
        ({"tokenizer_options": []}, "'tokenizer_options' must be a mapping"),
    ],
)
def test_a_preset_is_checked_key_by_key(change, words):
    problems = check(given(model={**PRESET, **change})).problems
    assert len(problems) == 1 and problems[0].startswith("-e model='llama3-8b' (") and words in problems[0]


def test_a_missing_preset_names_those_available():
    problems = check(given(model=None, model_error="no such preset file", models_available=["tiny"])).problems
    assert problems[0].startswith("-e model='llama3-8b': no such preset file (")
    assert "available presets: tiny" in problems[0]


def test_controller_paths(tmp_path):
    (tmp_path / "file").write_text("x")
    assert "is not a directory" in check(given("plan", extra={"plan_dir": str(tmp_path / "file")})).problems[0]
    (tmp_path / "plan").mkdir()
    (tmp_path / "plan" / "launch-node3.sh").write_text("")
    assert check(given("plan", extra={"plan_dir": str(tmp_path / "plan")})).problems == []
    (tmp_path / "plan" / "notes.txt").write_text("")
    assert (
        "holds files that are not a plan's (notes.txt)"
        in check(given("plan", extra={"plan_dir": str(tmp_path / "plan")})).problems[0]
    )
    assert "has no plan/plan.json" in check(given("report", extra={"run": str(tmp_path)})).problems[0]
