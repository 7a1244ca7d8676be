"""trainops.written: the inventory's files and the -e arguments read as the user wrote them."""

from __future__ import annotations

import datetime

from trainops.written import read_extra, read_inventory

INVENTORY = """\
all:
  vars:
    exp: no
    run_id: 2026-12-01
    megatron_version: "0.10"
    slurm_time: 1:30:00
  children:
    nodes:
      vars:
        tp: 2
      hosts:
        node1: {ansible_host: 10.0.0.1, slots: 010}
        node2: {ansible_host: 10.0.0.2}
        node1: {ansible_host: 10.0.0.3}
"""


def _by_name(written):
    return {(s.name, s.scope): s for s in written.settings}


def test_a_yaml_inventory_as_written(tmp_path):
    (tmp_path / "hosts.yml").write_text(INVENTORY)
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("health: off\n")
    (tmp_path / "host_vars" / "node2").mkdir(parents=True)
    (tmp_path / "host_vars" / "node2" / "x.yml").write_text("spare: true\n")
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "config.yml").write_text("exp: hidden\n")
    written = read_inventory([str(tmp_path)])
    found = _by_name(written)
    exp = found["exp", "all"]
    assert (exp.text, exp.read, exp.rewritten) == ("no", False, True) and exp.place.endswith("hosts.yml:3")
    assert found["run_id", "all"].read == datetime.date(2026, 12, 1)
    assert found["megatron_version", "all"].read == "0.10" and not found["megatron_version", "all"].rewritten
    assert found["slurm_time", "all"].read == 5400
    assert found["tp", "group nodes"].text == "2"
    assert found["slots", "host node1"].read == 8
    assert found["health", "all"].read is False and found["spare", "host node2"].read is True
    assert not any(s.text == "hidden" for s in written.settings)
    assert written.problems == [
        f"inventory {tmp_path / 'hosts.yml'}:14: host node1 is listed twice in one mapping (lines 12 and 14); only "
        "the last is kept (one node, not two): list it once"
    ]


def test_an_ini_inventory_as_written(tmp_path):
    (tmp_path / "hosts").write_text(
        "[nodes]\nnode1 ansible_host=10.0.0.1 slots=8 megatron_version=0.10\nnode1\n[all:vars]\nexp=no\n"
    )
    written = read_inventory([str(tmp_path / "hosts")])
    found = _by_name(written)
    assert found["megatron_version", "host node1"].read == 0.1  # a Python literal
    assert found["exp", "all"].read == "no" and not found["exp", "all"].rewritten
    assert "host node1 is listed twice in [nodes] (lines 2 and 3)" in written.problems[0]


def test_an_inventory_plugin_s_configuration_and_a_host_list_are_skipped(tmp_path):
    (tmp_path / "aws.yml").write_text("plugin: amazon.aws.aws_ec2\nexp: no\n")
    assert read_inventory([str(tmp_path / "aws.yml"), "node1,node2,", str(tmp_path / "missing")]).settings == []


def test_the_extra_arguments_as_written(tmp_path):
    (tmp_path / "vars.yml").write_text("health: off\nslots: 8\n")
    written = read_extra(["tp=1 pp=2", '{"exp": no}', f"@{tmp_path / 'vars.yml'}", "run_id=2026-12-01"])
    found = _by_name(written)
    assert found["tp", "-e"].read == "1" and found["run_id", "-e"].read == "2026-12-01"  # name=value: text
    assert found["exp", "-e"].read is False and found["exp", "-e"].place == "-e '{\"exp\": no}'"
    assert found["health", "-e"].place == f"-e @{tmp_path / 'vars.yml'}:1"
    assert written.problems == []


def test_an_extra_argument_a_space_split_says_so():
    problems = read_extra(["exclude_nodes=node1, node2"]).problems
    assert problems == [
        "-e 'exclude_nodes=node1, node2': a space split it, and 'node2' is not name=value (Ansible reads -e "
        "name=value pairs separated by spaces): drop the space (-e exclude_nodes=node1,node2) or quote the value "
        "(-e \"exclude_nodes='node1, node2'\")"
    ]
    assert read_extra(["msg={{ a }}"]).problems == []  # a template's spaces are Ansible's to split
    # a mapping after name= is split at its spaces too: the fix that works is the one JSON argument
    split = read_extra(['training={"save_interval": 0}'])
    assert split.problems[0].endswith('give it as one JSON argument: -e \'{"training": {"save_interval": 0}}\'')
    assert split.split == {"training"}  # its value's own problem is this one


def test_a_number_yaml_rewrote_inside_a_mapping_is_said_where_it_was_written(tmp_path):
    """training: {save_interval: 0500} planned saves every 320 iterations: the nested value as written."""
    (tmp_path / "vars.yml").write_text("training:\n  lr: 3.0e-4\n  save_interval: 0500\n  bias_fusions: no\n")
    problems = read_extra([f"@{tmp_path / 'vars.yml'}", '{"training": {"lr_warmup_iters": 0x10}}']).problems
    assert problems == [
        f"-e @{tmp_path / 'vars.yml'}:3: training.save_interval: 0500 is read by YAML 1.1 as the number 320, not as "
        "written; write the decimal number you mean, without a leading zero",
        '-e \'{"training": {"lr_warmup_iters": 0x10}}\': training.lr_warmup_iters: 0x10 is read by YAML 1.1 as the '
        "number 16, not as written; write the decimal number you mean, without a leading zero",
    ]
