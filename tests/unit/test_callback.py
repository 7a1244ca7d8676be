"""The stdout callback's pure parts: which failure is a refusal, what of it is printed, a traceback cut short."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
_SPEC = importlib.util.spec_from_file_location("trainops_callback", ROOT / "plugins" / "callback" / "trainops.py")
callback = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(callback)


def event(msg, *cause, source=None, traceback=None, help_text=None):
    """An Ansible error event (ansible.module_utils._internal._messages.Event's fields) with its chain."""
    chain = SimpleNamespace(event=event(*cause[0]) if isinstance(cause[0], tuple) else cause[0]) if cause else None
    return SimpleNamespace(
        msg=msg, chain=chain, formatted_source_context=source, formatted_traceback=traceback, help_text=help_text
    )


def summary(*msgs, **leaf):
    """An error summary whose chain holds these messages, outermost first; keywords go to the innermost."""
    inner = event(msgs[-1], **leaf)
    for msg in reversed(msgs[:-1]):
        inner = event(msg, inner, source=f"Origin: /p/play.yml:{len(msg)}:3\n\n1 - name: x\n  ^ column 3")
    return SimpleNamespace(event=inner)


def chain(*msgs, **leaf):
    return callback.chain_of(summary(*msgs, **leaf))


REFUSAL = "train.yml: 1 problem(s) in the inputs; nothing was changed and no node was contacted:\n- -e tp='two' ..."


def test_the_chain_is_read_outermost_first():
    assert [e.msg for e in chain("Task failed.", "Action failed.", "x")] == ["Task failed.", "Action failed.", "x"]
    assert callback.chain_of(None) == []


def test_the_bundles_modules_and_actions_are_known():
    assert {"trainops_inputs", "megatron_layout", "trainops_render", "train_watch"} <= callback.BUNDLE_ACTIONS


@pytest.mark.parametrize(
    ("action", "refused"),
    [
        ("trainops_inputs", True),
        ("ansible.legacy.megatron_layout", True),
        ("ansible.builtin.fail", True),
        ("ansible.builtin.assert", True),
        ("ansible.builtin.command", False),
        ("community.docker.docker_container", False),
    ],
)
def test_a_returned_failure_is_a_refusal_only_from_the_bundle_or_fail(action, refused):
    events = chain("Task failed.", "Action failed.", REFUSAL)
    assert callback.refusal_text(events, {"msg": REFUSAL}, action) == (REFUSAL if refused else None)


def test_an_action_fail_raised_by_a_bundle_action_is_a_refusal():
    msg = "cannot write the launch files into /x: [Errno 20] Not a directory: '/x'"
    events = chain("Task failed.", msg, "[Errno 20] Not a directory: '/x'")
    assert callback.refusal_text(events, {"msg": msg}, "trainops_render") == msg


@pytest.mark.parametrize(
    ("msgs", "result_msg"),
    [
        (("Task failed.", "Module failed.", "'nokey'"), "Task failed: Module failed: 'nokey'"),  # a module crashed
        (("Task failed.", "'nokey'"), "Task failed: 'nokey'"),  # an action plugin crashed
        (("Task failed.", "Finalization of task args failed.", "'x' is undefined"), "Task failed: ..."),
    ],
)
def test_a_crash_is_not_a_refusal_even_in_the_bundle(msgs, result_msg):
    events = chain(*msgs)
    assert not callback.returned_failure(events, result_msg)
    assert callback.refusal_text(events, {"msg": result_msg}, "trainops_inputs") is None


def test_failed_when_is_not_the_modules_refusal():
    events = chain("Task failed.", "Action failed.", "")
    assert callback.returned_failure(events, "")
    assert callback.refusal_text(events, {"msg": "", "failed_when_result": True}, "trainops_health") is None


FILTER_CHAIN = (
    "Task failed.",
    "Finalization of task args for 'ansible.builtin.set_fact' failed.",
    "Error while resolving value for 'train_left_out'.",
    "The filter plugin 'trainops_chosen_left_out' failed.",
)


def test_a_bundle_filters_refusal_is_its_message_and_its_name():
    events = chain(*FILTER_CHAIN, "-e use_nodes: no such node in the inventory: nodeX")
    text = callback.refusal_text(events, {"msg": "Task failed: ..."}, "ansible.builtin.set_fact")
    assert text == "-e use_nodes: no such node in the inventory: nodeX (in trainops_chosen_left_out)"


@pytest.mark.parametrize(
    "message",
    [
        "'kind'",
        "list indices must be integers or slices, not str",
        "string indices must be integers, not 'str'",
        "'NoneType' object has no attribute 'get'",
        "[Errno 2] No such file or directory: 'x'",
        "chosen_left_out() missing 1 required positional argument: 'options'",
        "division by zero",
        "'<' not supported between instances of 'int' and 'str'",
    ],
)
def test_a_bundle_filters_python_error_is_not_a_refusal(message):
    events = chain(*FILTER_CHAIN, message)
    assert callback.refusal_text(events, {"msg": "Task failed: ..."}, "ansible.builtin.set_fact") is None


@pytest.mark.parametrize(
    "message",
    [
        "-e exclude_nodes / -e use_nodes: no such node in the inventory: nodeX (the nodes: node1, node2)",
        "invalid inventory: node1: slots=0 must be a whole number >= 1",
        "'norm_epsilon' must be a finite number > 0, got 'abc'",
        "cannot write the plan: [Errno 20] Not a directory",
        "tp=3 does not divide 32 attention heads; valid tp: 1, 2, 4, 8",
    ],
)
def test_refusals_do_not_read_as_python_errors(message):
    assert not callback.PYTHON_ERROR.match(message)


def test_a_captured_traceback_decides_between_refusal_and_bug():
    refused = "Traceback ...\nansible.errors.AnsibleTemplatePluginError: list indices must be integers\n"
    bug = "Traceback ...\nKeyError: 'no such node'\n"
    assert callback.refusal_text(chain(*FILTER_CHAIN, "list indices must be integers", traceback=refused), {}, "x")
    assert callback.refusal_text(chain(*FILTER_CHAIN, "-e x: no such node", traceback=bug), {}, "x") is None


def test_the_bundles_filter_refusals_do_not_start_like_python_errors():
    """Every literal start of an AnsibleFilterError the bundle's filters raise: none reads as CPython's own."""
    starts = []
    for path in sorted((ROOT / "plugins" / "filter").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "AnsibleFilterError" and node.args:
                first = node.args[0]
                part = first.values[0] if isinstance(first, ast.JoinedStr) and first.values else first
                if isinstance(part, ast.Constant) and isinstance(part.value, str):
                    starts.append(part.value)
    assert starts, "no AnsibleFilterError message found in plugins/filter"
    assert not [start for start in starts if callback.PYTHON_ERROR.match(start)]


def test_extra_fields_are_the_plain_ones_the_message_does_not_say():
    result = {
        "msg": "cannot parse Megatron logs: bad line",
        "path": "/runs/x/launch.log",
        "problems": ["bad line"],
        "job_id": "17",
        "changed": False,
        "evaluated_to": False,
        "_ansible_no_log": False,
        "rc": 1,
    }
    text = "cannot parse Megatron logs: bad line (job 17)"
    assert callback.extra_fields(result, text) == ["    path: /runs/x/launch.log", "    rc: 1"]


TRACEBACK = """\
some output before
Traceback (most recent call last):
  File "/x/a.py", line 1, in <module>
    main()
  File "/x/a.py", line 9, in main
    table["key"]
    ~~~~~^^^^^^^
KeyError: 'key'
"""


def test_a_traceback_is_cut_to_its_last_frame_and_exception():
    assert callback.compact_traceback(TRACEBACK) == (
        "some output before\n"
        "Traceback (the last of 2 frames; -v shows all):\n"
        '  File "/x/a.py", line 9, in main\n'
        '    table["key"]\n'
        "KeyError: 'key'"
    )


def test_a_chained_traceback_keeps_a_few_lines_of_the_first():
    during = "\nDuring handling of the above exception, another exception occurred:\n\n"
    text = callback.compact_traceback(TRACEBACK + during + TRACEBACK.split("\n", 1)[1], before=2)
    assert text.splitlines()[:3] == [
        "(7 line(s) before left out; -v shows them)",
        "KeyError: 'key'",
        "During handling of the above exception, another exception occurred:",
    ]
    assert text.count("Traceback") == 1 and text.endswith("KeyError: 'key'")


def test_a_text_without_a_traceback_is_left_as_it_is():
    assert callback.compact_traceback("rc 1\nno such file") == "rc 1\nno such file"


def test_the_innermost_origin_and_the_help_are_found():
    events = chain("Task failed.", "Error while resolving value for 'x'.", "'y' is undefined", help_text="Define y.")
    assert callback.origin(events) == f"/p/play.yml:{len(events[1].msg)}:3"
    assert callback.helps(events) == ["Define y."]
    assert callback.brief(events) == "Task failed: Error while resolving value for 'x': 'y' is undefined"


def test_the_last_captured_traceback_is_compacted():
    events = chain("Task failed.", "Module failed.", "'key'", traceback=TRACEBACK.split("\n", 1)[1])
    assert callback.last_traceback(events).endswith("    table[\"key\"]\nKeyError: 'key'")
    assert callback.last_traceback(chain("Task failed.", "x")) is None


SSH_REFUSED = "ssh: connect to host 127.0.0.2 port 1: Connection refused"


@pytest.mark.parametrize(
    ("msg", "said"),
    [
        (f"Task failed: Failed to connect to the host via ssh: {SSH_REFUSED}", SSH_REFUSED),
        (  # ssh's warnings first, its error last
            "Task failed: Failed to connect to the host via ssh: Warning: Permanently added '10.0.0.2' (ED25519) to "
            "the list of known hosts.\r\nroot@10.0.0.2: Permission denied (publickey,password).",
            "root@10.0.0.2: Permission denied (publickey,password).",
        ),
        ("Task failed: Failed to connect to the host via ssh: ", "no answer"),
        (None, "no answer"),
        ("Data could not be sent to remote host", "Data could not be sent to remote host"),
    ],
)
def test_an_unreachable_hosts_error_is_the_connections_last_line(msg, said):
    assert callback.connection_error(msg) == said


def test_an_unreachable_host_is_one_line_with_its_address():
    msg = f"Task failed: Failed to connect to the host via ssh: {SSH_REFUSED}"
    assert callback.unreachable_text("node2", "127.0.0.2", msg, ignored=True) == (
        f"unreachable: [node2] (127.0.0.2): {SSH_REFUSED}"
    )
    fatal = callback.unreachable_text("node2", None, msg, ignored=False)
    assert fatal == f"fatal: [node2]: UNREACHABLE!: {SSH_REFUSED}"


@pytest.mark.parametrize(
    ("name", "host_vars", "address"),
    [
        ("node2", {"ansible_host": "127.0.0.2"}, "127.0.0.2"),
        ("node2", {}, None),  # reached by its name
        ("node2", {"ansible_host": "node2"}, None),
        ("node2", {"ansible_host": "{{ fabric_ip }}"}, None),  # a template: not what it connected to
    ],
)
def test_a_hosts_address_is_its_ansible_host(name, host_vars, address):
    assert callback.host_address(SimpleNamespace(name=name, vars=host_vars)) == address
