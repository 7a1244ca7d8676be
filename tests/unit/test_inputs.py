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
        inventory_sources=kw.pop("inventory_sources", {"inventory/site": True}),
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


def test_a_selection_a_playbook_does_not_make_is_refused_not_ignored():
    """stop.yml -e exp=... stopped every run with a warning that exp is ignored: it acts on more than asked."""
    verdict = check(given("stop", extra={"exp": "myexp", "run_id": "first"}))
    assert verdict.problems == [
        f"-e {name}: stop.yml has no such selection: it stops every launch of this bundle on every node of the "
        f"inventory; drop -e {name}, or give --limit 'NODE,localhost' for the nodes to act on"
        for name in ("exp", "run_id")
    ]
    (problem,) = check(given("health", extra={"exclude_nodes": "node2"})).problems
    assert problem.startswith("-e exclude_nodes: health.yml has no such selection: it checks every node")
    assert check(given("stop", extra={"tp": "2"})).problems == []  # an option of another kind stays a warning


def test_a_value_wrong_as_written_too_is_said_where_it_was_written_with_the_one_meant(tmp_path):
    """recompute: off is YAML's false, and "off" is no recompute either: said of "off", at its line, with none."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  vars:\n    recompute: off\n")
    verdict = check(given("plan", inventory={"recompute": False}, inventory_sources={str(inventory): True}))
    assert verdict.problems == [
        f"inventory {inventory}:3 (all.vars): recompute: off is not one of auto, none, selective, full; did you mean "
        "none?"
    ]
    (problem,) = check(given("plan", extra={"recompute": "OFF"})).problems
    assert problem == "-e recompute='OFF' must be one of auto, none, selective, full; did you mean none?"


def test_every_problem_of_the_inventory_is_named_in_one_run():
    """A node's bad field and a rule between the nodes (a shared address) come together, not one run each."""
    hostvars = {"node1": {"ansible_host": "10.0.0.1", "slots": 8}, "node2": {"ansible_host": "10.0.0.1", "slots": 0}}
    problems = check(given("plan", hostvars=hostvars)).problems
    assert len(problems) == 2 and "slots" in problems[0], problems
    assert problems[1] == "inventory: nodes node1 and node2 share the address 10.0.0.1"


def test_ports_that_meet_on_a_node_are_refused():
    (problem,) = check(given("plan", extra={"master_port": "2222"})).problems
    assert problem.startswith("master_port=2222 meets container_ssh_port=2222")
    (problem,) = check(given("provision", extra={"container_ssh_port": "14389"})).problems  # master_port + 1
    assert problem.startswith("master_port=14388 meets container_ssh_port=14389")
    (problem,) = check(given("provision", extra={"container_ssh_port": "22"})).problems
    assert problem.startswith("container_ssh_port=22 is the host's own sshd")
    bridged = given("provision", extra={"container_ssh_port": "22"}, inventory={"container_network_mode": "bridge"})
    assert check(bridged).problems == []


def test_did_you_mean_points_only_at_what_this_playbook_reads():
    """data.yml's builder settings are not suggested to train.yml; a backend profile's key says where it is set."""
    (problem,) = check(given(extra={"megatron_home": "/x"})).problems
    assert "did you mean" not in problem and "data_build" not in problem
    assert "-e megatron_home: no such option; it is a key of the backend profile (backends/<accelerator>.yml" in problem
    (problem,) = check(given(extra={"data_build_work_dr": "/y"})).problems
    assert "did you mean" not in problem
    problems = check(given("data", extra={"data_build_work_dr": "/y"})).problems  # and data.yml's required ones
    assert any("-e data_build_work_dr: no such option; did you mean data_build_work_dir?" in p for p in problems)
    # health.yml writes its incidents into runs_dir: it reads the option, without a warning
    verdict = check(given("health", extra={"runs_dir": "/tmp/r"}))
    assert verdict.problems == [] and verdict.warnings == []


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
    gone = check(given("report", extra={"run": str(tmp_path / "exp" / "gone"), "runs_dir": str(tmp_path)}))
    assert (
        "does not exist (a relative -e run is taken from the current directory, not from -e runs_dir="
        in (gone.problems[0])
    )
    (tmp_path / "file").write_text("")
    (problem,) = check(given("health", extra={"health_dir": str(tmp_path / "file")})).problems
    assert problem.endswith("is not a directory; give a directory")


# --- inputs as written (the inventory's files and the -e arguments, before YAML 1.1 rewrote them) ---------------

WRITTEN = """\
all:
  vars:
    exp: no
    health: off
    megatron_version: 0.10
    slurm_time: 1:30:00
    run_id: 2026-12-01
    hang_timout: 5
    container_image: site/image:1
  children:
    nodes:
      vars:
        max_restarts: 2
      hosts:
        node1: {ansible_host: 10.0.0.1, slots: 010, tp: 2, slot: 4}
        node2: {ansible_host: 10.0.0.2}
        node2: {ansible_host: 10.0.0.3}
    other:
      hosts:
        web1: {http_port: 80}
"""
#: What Ansible hands the check from that inventory.
AS_READ = {"exp": False, "health": False, "megatron_version": 0.1, "slurm_time": 5400, "run_id": "2026-12-01"}


def test_the_inventory_is_checked_as_written(tmp_path):
    (tmp_path / "hosts.yml").write_text(WRITTEN)
    hostvars = {"node1": {"ansible_host": "10.0.0.1", "slots": 8}, "node2": {"ansible_host": "10.0.0.3"}}
    place = f"inventory {tmp_path / 'hosts.yml'}"
    verdict = check(given(inventory=AS_READ, hostvars=hostvars, inventory_sources={str(tmp_path): True}))
    assert verdict.problems == [
        f"{place}:17: host node2 is listed twice in one mapping (lines 16 and 17); only the last is kept (one node, "
        "not two): list it once",
        f'{place}:3 (all.vars): exp: no is read by YAML 1.1 as the boolean false, not as written; quote it: exp: "no"',
        f"{place}:4 (all.vars): health: off is read by YAML 1.1 as the boolean false, not as written; quote it: "
        'health: "off"',
        f"{place}:5 (all.vars): megatron_version: 0.10 is read by YAML 1.1 as the number 0.1, not as written; quote "
        'it: megatron_version: "0.10"',
        f"{place}:6 (all.vars): slurm_time: 1:30:00 is read by YAML 1.1 as 5400 (base 60), not as written; quote it: "
        'slurm_time: "1:30:00"',
        f"{place}:7 (all.vars): run_id: 2026-12-01 is read by YAML 1.1 as a date (2026-12-01), not as written; quote "
        'it: run_id: "2026-12-01"',
        f"{place}:8 (all.vars): hang_timout: no such option; did you mean hang_timeout? (docs/options.md lists "
        "every option; -e allow_unknown=true passes it on)",
        f"{place}:13 (the vars of group nodes): max_restarts: not read here: a run option is read from -e or the "
        "inventory's all.vars only (on a host or in a group's vars it is ignored); move it under all.vars, or give "
        "-e max_restarts",
        f"{place}:15 (host node1): slots: 010 is read by YAML 1.1 as the octal number 8, not as written; write 10 "
        "without the leading zero",
        f"{place}:15 (host node1): tp: not read here: a run option is read from -e or the inventory's all.vars only "
        "(on a host or in a group's vars it is ignored); move it under all.vars, or give -e tp",
        f"{place}:15 (host node1): slot: no such option; did you mean slots? (docs/options.md lists every option; "
        "-e allow_unknown=true passes it on)",
    ]  # the site's container_image passes; another group's variables are its own


def test_what_yaml_keeps_as_written_passes(tmp_path):
    (tmp_path / "hosts.yml").write_text(
        'all:\n  vars:\n    exp: "no"\n    megatron_version: 0.14\n    distributed_optimizer: no\n    tp: 2\n'
        "  children:\n    nodes:\n      hosts:\n        node1: {ansible_host: 10.0.0.1, slots: 8, master: yes}\n"
    )
    inventory = {"exp": "no", "megatron_version": 0.14, "distributed_optimizer": False, "tp": 2}
    assert check(given(inventory=inventory, inventory_sources={str(tmp_path): True})).problems == []


def test_an_extra_argument_is_checked_as_written():
    values = {"health": False, "exclude_nodes": "node1,", "_raw_params": "node2"}  # what Ansible made of them
    typed = given(extra=values)
    typed.extra_arguments = ['{"health": off}', "exclude_nodes=node1, node2"]
    assert check(typed).problems == [
        "-e 'exclude_nodes=node1, node2': a space split it, and 'node2' is not name=value (Ansible reads -e "
        "name=value pairs separated by spaces): drop the space (-e exclude_nodes=node1,node2) or quote the value "
        "(-e \"exclude_nodes='node1, node2'\")",
        "-e '{\"health\": off}': health: off is read by YAML 1.1 as the boolean false, not as written; quote it: "
        'health: "off"',
    ]
    # without the arguments, the value's own problem says what YAML did, and the stray word is named
    problems = " ".join(check(given(extra=values)).problems)
    assert "-e health=False must be one of off, warn, exclude (not the boolean false: YAML reads" in problems
    assert "-e: a word that is not name=value: a space split an -e" in problems


def test_a_date_names_no_internal_type():
    import datetime

    problems = check(given(extra={"run_id": datetime.date(2026, 12, 1)})).problems
    assert problems == [
        "-e run_id=2026-12-01 must be a text value, not a date (2026-12-01): YAML reads an unquoted "
        "YYYY-MM-DD as a date; quote the value"
    ]


def test_a_role_s_own_parameter_is_refused_and_a_site_setting_passes():
    typed = given(extra={"render_dest": "/tmp/x", "container_image": "x:1", "data_build_poll_s": "1"})
    typed.role_parameters = ["render_dest", "container_image", "data_build_poll_s"]
    assert check(typed).problems == [
        "-e render_dest: no such option; it is a role's own parameter, which the playbooks set from the options "
        "(docs/options.md lists every option; -e allow_unknown=true passes it on)"
    ]


def test_a_cluster_field_only_the_nodes_see_is_refused():
    hostvars = {h: dict(v, work_home="/y") for h, v in HOSTVARS.items()}
    assert check(given(hostvars=hostvars)).problems == [
        "inventory: work_home='/y' is set for the nodes (in a group's or the hosts' vars), but the controller, which "
        "plans the run, reads all.vars ('/data/mtt-train-ops'): set it once under all.vars (or with -e)"
    ]
    assert check(given(hostvars=hostvars, inventory={"work_home": "/y"})).problems == []


@pytest.mark.parametrize(
    ("playbook", "extra", "words"),
    [
        ("train", {"keep_every": "5"}, "-e keep_every=5 keeps milestone saves from retention"),
        ("train", {"keep_dry_run": "true"}, "-e keep_dry_run=true says what retention would remove"),
        ("train", {"keep_checkpoints": "2", "verify_checkpoints": "false"}, "verify_checkpoints=false verifies none"),
        ("train", {"keep_checkpoints": "2", "training": {"save_interval": 0}}, "training.save_interval=0 makes none"),
        ("train", {"min_nodes": "2"}, "-e min_nodes=2 is the fewest nodes an elastic re-plan may use"),
        ("train", {"use_nodes": "node1,node2", "exclude_nodes": "node2"}, "name each node in one of them"),
        ("train", {"health_max_age": "3", "health": "off"}, "health=off skips the check"),
        ("health", {"health_burn_in_s": "3"}, "-e health_burn_in_s=3 is the full level's burn-in"),
        ("health", {"health_min_busbw_gbps": "3"}, "the quick level runs no all-reduce"),
        ("data", {"input": "/d/x.bin", "output_prefix": "/d/x", "tokenizer": "/t"}, "would replace its own input"),
        ("data", {"input": "/d/x", "output_prefix": "/d/x.BIN", "tokenizer": "/t"}, "must not end in .bin/.idx"),
    ],
)
def test_options_that_need_or_exclude_others(playbook, extra, words):
    problems = check(given(playbook, extra=extra)).problems
    assert len(problems) == 1 and words in problems[0]


def test_a_run_that_no_terminal_follows_still_restarts_and_keeps_its_retention():
    # the run's supervisor on the cluster restarts it and applies retention, with no train.yml following it
    assert check(given("train", extra={"max_restarts": "1", "keep_checkpoints": "2", "wait": "false"})).problems == []


def test_a_site_default_in_the_inventory_is_not_held_to_the_rules():
    assert check(given(inventory={"min_nodes": "2", "keep_every": "10"})).problems == []


def test_the_rules_are_judged_with_every_other_problem_at_once():
    problems = check(given(extra={"keep_every": "5", "min_nodes": "2", "tp": "0"})).problems
    assert len(problems) == 3 and "-e tp='0'" in problems[0]
    assert check(given(extra={"keep_every": "5", "keep_checkpoints": "2", "min_nodes": "1", "elastic": "true",
                              "max_restarts": "1"})).problems == []  # fmt: skip


def test_min_nodes_above_the_nodes_a_run_starts_on():
    three = {**HOSTVARS, "node3": {"ansible_host": "10.0.0.3", "slots": 8, "spare": True}}
    elastic = {"elastic": "true", "max_restarts": "1"}
    groups = {"nodes": ["node1", "node2", "node3"]}
    out = check(given(extra={**elastic, "min_nodes": "2", "exclude_nodes": "node2"}, hostvars=HOSTVARS)).problems
    assert out == [
        "-e min_nodes=2 is more than the 1 node(s) the run starts on after -e exclude_nodes / use_nodes (node1): an "
        "elastic re-plan keeps at least min_nodes of them; lower min_nodes"
    ]
    # a spare takes the excluded node's place: two nodes start
    spared = given(extra={**elastic, "min_nodes": "2", "exclude_nodes": "node2"}, hostvars=three, groups=groups)
    assert check(spared).problems == []
    assert (
        "-e exclude_nodes / -e use_nodes: no such node in the inventory: node9"
        in (check(given(extra={"exclude_nodes": "node9"})).problems[0])
    )


def test_a_wrong_backend_in_all_vars_is_named_once_with_the_name_it_meant():
    """Issue 38 point 8: `accelerator: nvidia` under all.vars was reported three times (all.vars, then each host that
    inherits it) with no hint; once now, with "did you mean cuda?". A host's own different value is still named."""
    hostvars = {h: dict(v, accelerator="nvidia") for h, v in HOSTVARS.items()}
    refused = check(given(hostvars=hostvars, inventory={"accelerator": "nvidia"}))
    named = [p for p in refused.problems if "nvidia" in p]
    assert named == ["inventory: accelerator='nvidia' must be one of cpu, cuda, musa; did you mean cuda?"], named
    hostvars["node2"]["accelerator"] = "mthreads"
    refused = check(given(hostvars=hostvars, inventory={"accelerator": "nvidia"}))
    assert any(p.startswith("inventory node2: accelerator='mthreads'") and "did you mean musa?" in p
               for p in refused.problems), refused.problems  # fmt: skip
    assert not any(p.startswith("inventory node1:") for p in refused.problems), refused.problems


def test_the_names_molecule_puts_in_its_inventory_are_not_the_bundles_options(tmp_path):
    """molecule test runs the playbooks with its own generated inventory beside the testbed's, whose all.vars holds
    molecule_file, molecule_yml, ...: they are Molecule's, like Ansible's own ansible_* names, never refused."""
    (tmp_path / "ansible_inventory.yml").write_text(
        "all:\n  vars:\n    molecule_file: /tmp/m/molecule.yml\n    molecule_no_log: false\n    hang_timout: 5\n"
    )
    verdict = check(given(inventory_sources={str(tmp_path / "ansible_inventory.yml"): True}))
    assert [p for p in verdict.problems if "): molecule_" in p] == [], verdict.problems
    assert any("hang_timout: no such option" in p for p in verdict.problems), verdict.problems


def test_a_host_in_no_group_the_playbooks_read_is_said():
    groups = {"all": ["node1", "node2", "node3"], "nodes": ["node1", "node2"], "workers": ["node3"]}
    verdict = check(given("plan", groups=groups))
    assert verdict.problems == []
    assert verdict.warnings == [
        "inventory: node3 (group workers) is in no group the playbooks read (nodes, supervisors, slurm_login, "
        "monitoring): no playbook plans on or contacts it; list a training server under all.children.nodes"
    ]
    assert check(given("plan", groups={"all": ["node1", "node2"], **NODES})).warnings == []


def test_supervisor_host_names_a_node_of_the_inventory():
    assert check(given(extra={"supervisor_host": "node2"})).problems == []
    (problem,) = check(given(extra={"supervisor_host": "node3"})).problems
    assert problem.startswith("-e supervisor_host=node3: not a host of the inventory's nodes (node1, node2) group; ")
    assert "the supervisor runs in a provisioned training container" in problem
    slurm = check(
        given(extra={"supervisor_host": "node2", "launcher": "slurm"}, groups={**NODES, "slurm_login": ["node1"]})
    )
    assert any(
        p.startswith("-e supervisor_host=node2 is not honoured with -e launcher=slurm") for p in slurm.problems
    ), slurm.problems


def test_supervisor_host_may_be_a_host_of_the_supervisors_group_and_none_of_them_is_a_node():
    """A login or management node listed under supervisors (docs/inventory.md) may run the supervisor; a host in
    both groups is refused, for every playbook (it would be planned on and card-checked as a node)."""
    groups = {"all": ["node1", "node2", "login1"], **NODES, "supervisors": ["login1"]}
    verdict = check(given(extra={"supervisor_host": "login1"}, groups=groups))
    assert verdict.problems == [] and verdict.warnings == [], verdict
    (problem,) = check(given(extra={"supervisor_host": "login2"}, groups=groups)).problems
    assert problem.startswith(
        "-e supervisor_host=login2: not a host of the inventory's nodes (node1, node2) or supervisors (login1) group; "
        "did you mean login1?"
    ), problem
    both = {**groups, "supervisors": ["login1", "node2"]}
    for playbook in ("provision", "train", "stop"):
        assert check(given(playbook, groups=both)).problems == [
            "inventory: node2 is in both the nodes and the supervisors group: a supervisors host gets no rank and no "
            "card check; keep it in one group (nodes: it may still run a supervisor with -e supervisor_host)"
        ]
