"""A refusal is read once: the bundle's callback prints its problems once, without Ansible's source excerpt or its
"caused by" chain, and a few lines in all; -v still prints Ansible's whole report; a failure that is not a refusal
of the bundle (a crashed script, module or filter, an undefined variable) stays visible, its traceback cut short.

Real refused ansible-playbook runs (loopback inventory at port 9: nothing is contacted), run side by side to keep
the module's time down. No testbed needed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from testbed import nodes_contacted

pytestmark = pytest.mark.playbook

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
NODES = "        node1: {ansible_host: 127.0.0.1, slots: 8}\n        node2: {ansible_host: 127.0.0.2, slots: 8}\n"
#: What Ansible's default callback adds to a failure, that a refusal never prints at the default verbosity.
ANSIBLE_DETAIL = ("Origin:", "<<< caused by >>>", "The error appears to be in", "offending line", "^ column", "[ERROR]")

# (id, playbook, arguments, inventory's hosts or None for a plan_dir case, the refusal's lines, most output lines)
REFUSALS = [
    (
        "layout",  # train.yml plans the same way, with more tasks before
        "playbooks/plan.yml",
        ("-e", "tp=3"),
        NODES,
        [
            "fatal: [localhost]: the layout is refused (3 problem(s)); nothing was written:",
            "- tp=3 does not divide 32 attention heads; valid tp: 1, 2, 4, 8",
            "- seq_length 4096 is not divisible by tp=3, which sequence parallelism splits it over; use a seq_length "
            "that is a multiple of 3, or sequence_parallel=false",
        ],
        16,
    ),
    (
        "use-nodes",
        "train.yml",
        ("-e", "use_nodes=nodeX"),
        NODES,
        # the input check's words, or trainops_chosen_left_out's (in train.yml's plan play) where it does not look
        ["-e exclude_nodes / -e use_nodes: no such node in the inventory: nodeX (the nodes: node1, node2)"],
        12,
    ),
    (
        "one-input",
        "playbooks/plan.yml",
        ("-e", "tp=two"),
        NODES,
        [
            "fatal: [localhost]: plan.yml: 1 problem(s) in the inputs; nothing was changed and no node was contacted:",
            "- -e tp='two' is not an integer; give a whole number >= 1",
        ],
        10,
    ),
    (
        "accelerator",
        "playbooks/plan.yml",
        (),
        "        node1: {ansible_host: 127.0.0.1, slots: 8, accelerator: nvidia}\n",
        ["- inventory node1: accelerator='nvidia' must be one of cpu, cuda, musa"],
        10,
    ),
    (
        "action-fails",  # a real task's failure after the checks: the render action cannot write the plan's files
        "playbooks/plan.yml",
        ("-e", "tp=1"),
        None,
        ["fatal: [localhost]: cannot write the launch files into {tmp}/file/plan: [Errno 20] Not a directory"],
        None,  # after the plan's own lines: the failure is its one line, checked below
    ),
]


#: Two nodes where nothing answers (loopback, port 1: each SSH is refused at once).
UNREACHABLE = """\
all:
  vars: {accelerator: musa, ansible_user: root, ansible_port: 1}
  children:
    nodes:
      hosts:
        node1: {ansible_host: 127.0.0.1, slots: 8, master: true}
        node2: {ansible_host: 127.0.0.2, slots: 8}
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", PATH=f"{BIN}{os.pathsep}{env['PATH']}")
    return dict(env, **extra)


def _run(args: list[str], **env: str) -> tuple[int, str]:
    done = subprocess.run(
        [str(BIN / "ansible-playbook"), *args],
        cwd=ROOT,
        env=_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    return done.returncode, done.stdout


#: Failures that are not the bundle's refusals, in one play on the controller, with the bundle's ansible.cfg.
OTHERS = """\
- hosts: localhost
  connection: local
  gather_facts: false
  vars:
    ansible_python_interpreter: "{python}"
  tasks:
    - name: A script that crashes
      ansible.builtin.command: "{python} -c 'import json; json.loads(chr(120))'"
      ignore_errors: true
    - name: A module that crashes
      crashing_module: {{}}
      ignore_errors: true
    - name: An undefined variable
      ansible.builtin.debug:
        msg: "{{{{ no_such_variable }}}}"
      ignore_errors: true
    - name: A bundle filter with a bug
      ansible.builtin.debug:
        msg: "{{{{ 1 | trainops_test_bug }}}}"
      ignore_errors: true
    - name: A bundle filter that refuses
      ansible.builtin.debug:
        msg: "{{{{ 1 | trainops_test_refusal }}}}"
      ignore_errors: true
"""
MODULE = """\
from ansible.module_utils.basic import AnsibleModule


def lookup(table):
    return table["no such key"]


AnsibleModule(argument_spec={})
lookup({})
"""
FILTERS = """\
from ansible.errors import AnsibleFilterError


def bug(value):
    return {}["no such key"]


def refusal(value):
    raise AnsibleFilterError(f"-e test={value}: refused for the test")


class FilterModule:
    def filters(self):
        return {"trainops_test_bug": bug, "trainops_test_refusal": refusal}
"""


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[str, tuple[int, str]]:
    """Each case's (exit status, stdout and stderr), the runs side by side."""
    tmp = tmp_path_factory.mktemp("messages")
    (tmp / "file").write_text("a file where plan_dir wants a directory\n")
    runs: dict[str, tuple[list[str], dict[str, str]]] = {}
    for case, playbook, extra, hosts, _, _ in REFUSALS:
        inventory = tmp / f"{case}.yml"
        inventory.write_text(
            f"all:\n  vars: {{ansible_port: 9}}\n  children:\n    nodes:\n      hosts:\n{hosts or NODES}"
        )
        places = ["-e", f"runs_dir={tmp / case / 'runs'}"]
        if playbook == "playbooks/plan.yml":
            places += ["-e", f"plan_dir={tmp / 'file' / 'plan' if hosts is None else tmp / case / 'plan'}"]
        runs[case] = (["-i", str(inventory), playbook, *places, *extra], {})
    runs["verbose"] = ([*runs["layout"][0], "-v"], {})
    (tmp / "unreachable.yml").write_text(UNREACHABLE)
    runs["unreachable"] = (["-i", str(tmp / "unreachable.yml"), "playbooks/status.yml"], {})
    runs["unreachable-verbose"] = ([*runs["unreachable"][0], "-v"], {})
    runs["unreachable-stop"] = (["-i", str(tmp / "unreachable.yml"), "playbooks/stop.yml"], {})
    (tmp / "library").mkdir()
    (tmp / "library" / "crashing_module.py").write_text(MODULE)
    (tmp / "filters").mkdir()
    (tmp / "filters" / "trainops_test.py").write_text(FILTERS)
    (tmp / "others.yml").write_text(OTHERS.format(python=sys.executable))
    plugins = {"ANSIBLE_LIBRARY": str(tmp / "library"), "ANSIBLE_FILTER_PLUGINS": str(tmp / "filters")}
    runs["others"] = (["-i", "localhost,", str(tmp / "others.yml")], plugins)
    runs["others-traceback"] = (runs["others"][0], dict(plugins, ANSIBLE_DISPLAY_TRACEBACK="error"))
    with ThreadPoolExecutor(min(len(runs), os.cpu_count() or 1)) as pool:
        futures = {case: pool.submit(_run, args, **env) for case, (args, env) in runs.items()}
        found = {case: future.result() for case, future in futures.items()}
    found["tmp"] = (0, str(tmp))
    return found


@pytest.mark.parametrize(("case", "most"), [(c[0], c[5]) for c in REFUSALS], ids=[c[0] for c in REFUSALS])
def test_a_refusal_is_said_once_in_a_few_lines(outputs, case, most):
    status, output = outputs[case]
    tmp = outputs["tmp"][1]
    said = next(c[4] for c in REFUSALS if c[0] == case)
    assert status != 0, output
    for line in said:
        line = line.format(tmp=tmp)
        assert output.count(line) == 1, f"{line!r} is said {output.count(line)} times:\n{output}"
    assert not [detail for detail in ANSIBLE_DETAIL if detail in output], output
    assert "problems:" not in output and "msg:" not in output and "FAILED!" not in output, output
    assert not nodes_contacted(output), output
    lines = output.rstrip("\n").splitlines()
    if most is not None:
        assert len(lines) <= most, f"{len(lines)} lines:\n{output}"
    # after the refusal, nothing but the recap (no result dump, no "caused by")
    rest = lines[next(i for i, text in enumerate(lines) if text.startswith("fatal: [localhost]: ")) :]
    assert rest[rest.index("") + 1].startswith("PLAY RECAP"), output


def test_a_problem_is_said_once_even_when_the_inventory_repeats_it(outputs):
    """The refusal's every line once (inputs may name one wrong value at each place it is set: each once)."""
    output = outputs["accelerator"][1]
    refusal = output.split("fatal: [localhost]: ")[1].split("\n\nPLAY RECAP")[0].splitlines()
    assert all(output.count(line) == 1 for line in refusal if line.strip()), output


def test_verbose_shows_ansibles_whole_report(outputs):
    status, output = outputs["verbose"]
    assert status != 0
    # the planner is an action plugin (plugins/action/megatron_layout.py)
    assert "[ERROR]: Task failed: Action failed: the layout is refused" in output and "Origin:" in output, output
    assert "FAILED! =>" in output and "problems:" in output and "^ column" in output, output


def test_other_failures_stay_visible_and_short(outputs):
    status, output = outputs["others"]
    assert status == 0, output  # every task ignore_errors
    tasks = dict(re.findall(r"TASK \[(.+?)\] \**\n(.*?)(?=\n\nTASK |\n\nPLAY RECAP)", output, re.S))
    script = tasks["A script that crashes"]
    assert "FAILED! => non-zero return code" in script and "rc: 1" in script
    assert "Traceback (the last of" in script and "in raw_decode" in script, script
    assert "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)" in script
    assert 'File "<string>"' not in script  # the first frames, left to -v
    module = tasks["A module that crashes"]
    assert "FAILED! => Task failed: Module failed: 'no such key'" in module, module
    assert "origin: " in module and "ANSIBLE_DISPLAY_TRACEBACK=error" in module
    undefined = tasks["An undefined variable"]
    assert undefined.count("'no_such_variable' is undefined") == 1 and "origin: " in undefined, undefined
    bug = tasks["A bundle filter with a bug"]
    assert "The filter plugin 'trainops_test_bug' failed: 'no such key'" in bug and "origin: " in bug, bug
    refusal = tasks["A bundle filter that refuses"]
    said = "fatal: [localhost]: -e test=1: refused for the test (in trainops_test_refusal)"
    assert refusal.strip() == f"{said}\n...ignoring", refusal
    for task, said in tasks.items():
        assert not [detail for detail in ANSIBLE_DETAIL if detail in said], f"{task}:\n{said}"
        assert len(said.splitlines()) <= 20, f"{task}:\n{said}"


def test_a_captured_traceback_is_cut_to_its_last_frame(outputs):
    _, output = outputs["others-traceback"]
    module = output.split("TASK [A module that crashes]")[1].split("TASK [")[0]
    assert "KeyError: 'no such key'" in module and ", in lookup" in module, module
    assert "Traceback (the last of" in module and ", in <module>" not in module, module
    bug = output.split("TASK [A bundle filter with a bug]")[1].split("TASK [")[0]
    assert "KeyError: 'no such key'" in bug and ", in bug" in bug, bug
    refusal = output.split("TASK [A bundle filter that refuses]")[1].split("TASK [")[0]
    assert "Traceback" not in refusal and "refused for the test (in trainops_test_refusal)" in refusal, refusal


def test_an_unreachable_node_is_one_line_then_the_bundles_summary(outputs):
    """reach.yml pings every node with ignore_unreachable, then says which did not answer: each node is one line
    (host, address, ssh's error), none of Ansible's error block, result dump or "...ignoring"."""
    status, output = outputs["unreachable"]
    assert status != 0, output
    refused = "ssh: connect to host 127.0.0.1 port 1: Connection refused"
    assert f"unreachable: [node1] (127.0.0.1): {refused}\n" in output, output
    assert "unreachable: [node2] (127.0.0.2): ssh: connect to host 127.0.0.2 port 1" in output, output
    summary = (
        "fatal: [localhost]: node1 (127.0.0.1) is unreachable: ",
        "Nothing was changed on any node. Check that the host is up and that SSH as root works, then run again.",
    )
    assert all(output.count(part) == 1 for part in summary), output
    assert f"node1 (127.0.0.1) is unreachable: {refused}. node2 (127.0.0.2)" in output, output
    for detail in (*ANSIBLE_DETAIL, "caused by", "...ignoring", "UNREACHABLE!", "msg:", "Task failed"):
        assert detail not in output, f"{detail!r} in:\n{output}"
    # the unreachable line, the summary, the recap
    assert len([line for line in output.splitlines() if "node1" in line]) <= 3, output


def test_an_unreachable_node_shows_ansibles_detail_with_verbose(outputs):
    status, output = outputs["unreachable-verbose"]
    assert status != 0, output
    assert "fatal: [node1]: UNREACHABLE! =>" in output and "Origin:" in output and "...ignoring" in output, output


def test_stop_with_every_node_silent_says_nothing_was_stopped(outputs):
    status, output = outputs["unreachable-stop"]
    assert status != 0, output
    assert "No node answered: nothing was stopped or checked. When the nodes answer, run stop.yml again." in output
    assert "the nodes that answered were" not in output and "the other nodes" not in output, output
