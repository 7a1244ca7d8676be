"""trainops.invocation: no default cluster, and follow-up commands that carry the run's -i and site options."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from trainops import incidents, inputs, invocation, outcome
from trainops.node import run_groups

ROOT = Path(__file__).resolve().parents[2]
PROJECT = str(ROOT)


def test_ansible_cfg_names_the_empty_inventory_and_it_has_no_host():
    cfg = (ROOT / "ansible.cfg").read_text()
    assert f"inventory = {invocation.NO_INVENTORY}" in cfg.splitlines()
    text = (ROOT / invocation.NO_INVENTORY).read_text()
    assert all(line.startswith("#") for line in text.splitlines() if line.strip()), "it must hold no host"


def test_no_inventory_is_ansible_cfgs_empty_one_or_nothing():
    empty = os.path.join(PROJECT, invocation.NO_INVENTORY)
    assert invocation.no_inventory([empty], PROJECT)
    assert invocation.no_inventory([], PROJECT)
    assert not invocation.no_inventory([os.path.join(PROJECT, "inventory", "example")], PROJECT)
    assert not invocation.no_inventory([empty, "/srv/site/hosts.yml"], PROJECT)
    assert not invocation.no_inventory(["10.0.0.1,10.0.0.2"], PROJECT)


def test_the_example_is_recognised_by_directory_or_file():
    assert invocation.uses_example([os.path.join(PROJECT, "inventory", "example")], PROJECT)
    assert invocation.uses_example([os.path.join(PROJECT, "inventory", "example", "hosts.yml")], PROJECT)
    assert not invocation.uses_example([os.path.join(PROJECT, "inventory", "examples")], PROJECT)
    assert not invocation.uses_example(["/srv/inventory/example"], PROJECT)


def test_sources_are_shown_relative_to_the_project_when_inside_it():
    assert invocation.shown_source(os.path.join(PROJECT, "inventory", "site"), PROJECT) == "inventory/site"
    assert invocation.shown_source("/srv/sites/a/hosts.yml", PROJECT) == "/srv/sites/a/hosts.yml"
    assert invocation.shown_source("10.0.0.1,", PROJECT) == "10.0.0.1,"


def test_only_the_site_options_given_are_carried():
    extra = {"tp": 2, "work_home": "/srv/w", "launcher": "slurm", "runs_dir": "r", "container_name": "c", "x": 1}
    assert invocation.carried(extra) == {"work_home": "/srv/w", "launcher": "slurm", "runs_dir": "r",
                                         "container_name": "c"}  # fmt: skip


def test_command_carries_the_inventory_and_the_options_the_next_playbook_reads():
    given = invocation.invocation(
        [os.path.join(PROJECT, "inventory", "site"), "/srv/my inv/hosts.yml"],
        PROJECT,
        {"tp": 2, "work_home": "/srv/w", "launcher": "slurm", "runs_dir": "/r", "master_port": 15000},
    )
    assert given == {
        "inventory": ["inventory/site", "/srv/my inv/hosts.yml"],
        "extra": {"work_home": "/srv/w", "launcher": "slurm", "runs_dir": "/r", "master_port": 15000},
        "given": {"tp": 2, "work_home": "/srv/w", "launcher": "slurm", "runs_dir": "/r", "master_port": 15000},
    }
    status = invocation.command(given, "status")
    assert status == (
        "ansible-playbook -i inventory/site -i '/srv/my inv/hosts.yml' playbooks/status.yml -e work_home=/srv/w "
        "-e launcher=slurm"
    )  # status.yml reads neither runs_dir nor master_port
    assert shlex.split(status)[:5] == ["ansible-playbook", "-i", "inventory/site", "-i", "/srv/my inv/hosts.yml"]
    assert " stop.yml -e work_home=/srv/w -e launcher=slurm" in invocation.command(given, "stop.yml")
    report = invocation.command(given, "playbooks/report.yml", {"run": "/r/exp/a b"})
    assert report == (
        "ansible-playbook -i inventory/site -i '/srv/my inv/hosts.yml' playbooks/report.yml -e runs_dir=/r "
        "-e run='/r/exp/a b'"
    )  # report.yml reads runs_dir, not work_home


def test_command_quotes_every_value_and_gives_mappings_as_json():
    given = {"inventory": ["inv;rm -rf /"], "extra": {"backend_env": {"A": "x y"}}}
    line = invocation.command(given, "train", {"exp": "$(id)", "fresh": True})
    words = shlex.split(line)
    assert words == ["ansible-playbook", "-i", "inv;rm -rf /", "train.yml", "-e", '{"backend_env": {"A": "x y"}}',
                     "-e", "exp=$(id)", "-e", "fresh=true"]  # fmt: skip


def test_command_without_an_invocation_names_the_playbook_only():
    assert invocation.command(None, "incidents", {"clear": "node2"}) == (
        "ansible-playbook playbooks/incidents.yml -e clear=node2"
    )


def test_a_run_without_inventory_is_refused_with_the_fix_and_the_example_is_named():
    refused = inputs.check(inputs.Inputs(playbook="status", values={}, no_inventory=True))
    assert refused.problems[0].startswith("no inventory given (-i): playbooks/status.yml needs your cluster's")
    assert "-i inventory/<site>" in refused.problems[0] and "docs/inventory.md" in refused.problems[0]
    assert not any("group 'nodes'" in p for p in refused.problems), "one sentence, not the empty-inventory one too"
    example = inputs.check(
        inputs.Inputs(playbook="plan", values={}, example_inventory=True, groups={"nodes": ["node1"]},
                      hostvars={"node1": {"ansible_host": "10.10.142.133", "slots": 8}})
    )  # fmt: skip
    assert any("is the example cluster" in w and "this plan is the example's" in w for w in example.warnings)


def test_printed_follow_ups_carry_the_inventory():
    given = {"inventory": ["inventory/site"], "extra": {"work_home": "/srv/w"}}
    plan = {"run_id": "r1", "exp_name": "e"}
    text = outcome.running_text(plan, {"state": "running"}, "/runs/e/r1", None, given)
    assert text.splitlines()[1:] == [
        "follow it:  ansible-playbook -i inventory/site playbooks/status.yml -e work_home=/srv/w",
        "stop it:    ansible-playbook -i inventory/site stop.yml -e work_home=/srv/w",
        "report:     ansible-playbook -i inventory/site playbooks/report.yml -e run=/runs/e/r1",
    ]
    slurm = outcome.running_text(plan, {"state": "running"}, "/runs/e/r1", {"id": 7, "slurm_nodes": ["n1"]}, given)
    assert "stop it:    ansible-playbook -i inventory/site stop.yml -e work_home=/srv/w -e launcher=slurm" in slurm
    found = [{"kind": "hang", "run": "e/r1", "attempt": 1, "cause": "x"}]
    assert incidents.exclusion_text("node2", found, 14, given).endswith(
        "after a repair, ansible-playbook -i inventory/site playbooks/incidents.yml -e clear=node2"
    )
    group = {"exp": "e", "run_id": "r1", "pgid": 1, "processes": 2, "started": "t", "run_dir": "/w/runs/e/r1"}
    told = run_groups.refusal("node1", [group], invocation.command(given, "stop"), invocation.command(given, "status"))
    assert "stop it with `ansible-playbook -i inventory/site stop.yml -e work_home=/srv/w`" in told
    assert "`ansible-playbook -i inventory/site playbooks/status.yml -e work_home=/srv/w` shows its progress" in told


def test_the_plan_says_the_train_command_that_runs_it_exactly():
    """The plan's command to copy (issue 38, point 9): this run's -i, the options given that train.yml reads (not
    plan.yml's own, not the run id), and the plan's resolved values written out; it runs as one shell command."""
    given = invocation.invocation(
        [os.path.join(PROJECT, "inventory", "site")],
        PROJECT,
        {"tp": "2", "plan_dir": "/tmp/p", "run_id": "r1", "training": {"lr": 3e-4}, "work_home": "/srv/a b"},
    )
    plan = {"model": "tiny", "tp": 2, "pp": 1, "cp": 1, "vpp": None, "micro_batch_size": 1,
            "global_batch_size": 64, "seq_length": 256, "precision": "bf16", "recompute": "none",
            "train_iters": 500, "exp_name": "tiny-abc123_seq256_bf16_tp2_pp1_dp2_mbs1_numbs32_gbs64_gpus4"}  # fmt: skip
    words = shlex.split(invocation.reproduce(given, plan))
    assert words[:4] == ["ansible-playbook", "-i", "inventory/site", "train.yml"]
    options = [words[i + 1] for i in range(4, len(words), 2)]
    assert options == [
        "tp=2",
        '{"training": {"lr": 0.0003}}',
        "work_home=/srv/a b",
        "model=tiny",
        "pp=1",
        "mbs=1",
        "gbs=64",
        "seq_length=256",
        "precision=bf16",
        "recompute=none",
        "train_iters=500",
        f"exp={plan['exp_name']}",
    ]
