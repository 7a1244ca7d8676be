"""The bundle's screen output: Ansible's default callback, with the warnings of the results it hides and refusals
printed once, and no banner over a play that prints nothing.

``ansible.cfg`` hides the lines of hosts that skip a task or end it ``ok`` (``display_skipped_hosts``,
``display_ok_hosts``), so that a run prints what a person reads. ansible-core 2.19's default callback then drops
the warnings of those results with their lines: a warning raised in a task that ended ``ok`` (a deprecation, a
module's warning, train.yml's "-e option ignored") would never reach the screen. This callback prints the warnings
and deprecations of an ``ok`` result it does not show, under the task's banner.

A failed task, in the default callback, prints its message two or three times: an ``[ERROR]`` block with each link of
Ansible's "caused by" chain and a source excerpt of the playbook at each link, then the whole result (where the
bundle's modules also return their problems as a list). For the bundle's refusals, written for a person, this
callback prints the message once, ``fatal: [host]: <message>``, and nothing of Ansible's. A refusal is

- a failure that one of the bundle's own modules or action plugins (``plugins/modules``, ``plugins/action``), or a
  ``fail`` or ``assert`` task, returned with its message, or
- a bundle filter (``trainops_*``) that raised while a task's arguments were templated: its message, with the
  filter's name after it, since a filter's bug (a Python error) reads the same way as its refusal.

A filter's message that reads as CPython's own ("'key'", "list indices must be integers ...") is taken for a bug, and
so is any filter error whose traceback Ansible captured (``ANSIBLE_DISPLAY_TRACEBACK=error``) and that is not an
``AnsibleFilterError``: Ansible's chain does not say the exception's type otherwise.

Every other failure (a command's non-zero exit, another collection's module, a module or plugin that crashed, an
undefined variable) keeps the default's result, printed once: ``fatal: [host]: FAILED! => <message>`` on one line,
then the result's other fields (a Python traceback in them cut to its last frame and the exception, ``stdout_lines``
left out as ``stdout`` again) and Ansible's help; one that is not a returned failure (a crash, a template error)
also names where it happened (``origin: path:line:column``), the traceback Ansible captured, if any, cut the same
way, and how to see more.

A host that cannot be reached prints one line, ``unreachable: [host] (address): <the connection's last line>`` where
the task ignores it (``ignore_unreachable``: reach.yml and stop.yml ping so, then say themselves which nodes did not
answer and what it means), ``fatal: [host]: UNREACHABLE! (address): ...`` where it does not; not the default's
``[ERROR]`` block (the chain, the task's source excerpt), the result dumped and ``...ignoring``.

``-v`` and above print exactly what the default callback prints (the chain, the source excerpts, every field of the
result); ``ANSIBLE_DISPLAY_TRACEBACK=error`` adds the tracebacks Ansible captured.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ansible import constants as C
from ansible.playbook.task_include import TaskInclude
from ansible.plugins.callback.default import CallbackModule as DefaultCallback

DOCUMENTATION = """
    name: trainops
    type: stdout
    short_description: Ansible's default screen output, keeping hidden results' warnings, refusals printed once
    description:
        - The default callback, except that with C(display_ok_hosts=false) it still prints the warnings and
          deprecations of a result that ended C(ok).
        - A refusal of the bundle (a failure returned by one of its modules or action plugins, a fail or assert task,
          or a trainops_* filter's error) prints its message once, without Ansible's source excerpt or its
          "caused by" chain. Other failures print the default's result once, with Python tracebacks cut to their
          last frame and the exception.
        - An unreachable host prints one line (the host, its address, the connection's error).
        - With -v or more, failures and unreachable hosts print what the default callback prints.
    extends_documentation_fragment:
      - default_callback
      - result_format_callback
    requirements:
      - set as stdout_callback in ansible.cfg (the bundle's does)
"""

_PLUGINS = Path(__file__).resolve().parents[1]

#: The bundle's own modules and action plugins: a failure they return carries a message written for a person.
BUNDLE_ACTIONS = frozenset(
    path.stem for folder in ("modules", "action") for path in (_PLUGINS / folder).glob("*.py") if path.stem[0] != "_"
)
#: Tasks whose failure is the playbook's own words.
REFUSING_ACTIONS = frozenset({"fail", "assert"})

_FILTER = re.compile(r"The filter plugin '(trainops_\w+)' failed\.?")
_RETURNED = ("Module failed.", "Action failed.")
TRACEBACK_HEAD = "Traceback (most recent call last):"
_ORIGIN = re.compile(r"^Origin: (.+)$", re.MULTILINE)


def chain_of(summary: Any) -> list[Any]:
    """The events of an error summary, outermost first: Ansible's "caused by" chain as a list."""
    events: list[Any] = []
    event = getattr(summary, "event", None)
    while event is not None and len(events) < 32:
        events.append(event)
        event = getattr(getattr(event, "chain", None), "event", None)
    return events


def _msg(event: Any) -> str:
    return str(getattr(event, "msg", "") or "").strip()


def brief(events: Sequence[Any]) -> str:
    """The chain's messages in one, as Ansible's result message joins them ("a: b: c")."""
    text = ""
    for part in reversed([_msg(e) for e in events]):
        if not text:
            text = part
        elif not part.endswith(text):
            text = f"{part.rstrip('.')}: {text}"
        else:
            text = part
    return text


def action_name(action: str) -> str:
    """``ansible.builtin.fail`` and ``ansible.legacy.fail`` as ``fail``; a bundle module's name as it is."""
    for prefix in ("ansible.builtin.", "ansible.legacy."):
        if action.startswith(prefix):
            return action[len(prefix) :]
    return action


def returned_failure(events: Sequence[Any], result_msg: Any) -> bool:
    """Whether a failure is one its module or action meant, with its message, not an exception it did not catch:
    a result with ``failed`` (``fail_json``: Ansible's chain is "Task failed." / "Module failed." or "Action
    failed." / the message), or an action's ``AnsibleActionFail`` (the chain: "Task failed." / the message / its
    cause). Ansible's message of an uncaught exception joins the whole chain ("Task failed: 'key'"), never one link."""
    msg = str(result_msg if result_msg is not None else "").strip()
    if len(events) < 2 or _msg(events[0]) != "Task failed.":
        return False
    if _msg(events[1]) in _RETURNED:
        return len(events) == 3 and _msg(events[2]) == msg
    return bool(msg) and _msg(events[1]) == msg


#: The start of what CPython's own exceptions say (a KeyError's bare key, a TypeError's "indices must be
#: integers", an uncaught OSError's "[Errno 2] ..."): a filter's message that starts so is a bug, not a refusal,
#: since the bundle's refusals say what was wrong and with what; a Python error inside one follows its words.
PYTHON_ERROR = re.compile(
    r"""('[^']*'|"[^"]*"|-?\d+)$"""
    r"|(string|list|tuple|byte) ind(ices|ex) (must be|out of range)"
    r"|'\w+' object (has no attribute|is not|does not support|cannot be)"
    r"|(unsupported operand|unhashable type|can only concatenate|argument of type|cannot unpack|too many values"
    r"|not enough values|invalid literal for|'\S+' not supported between|(integer )?(division|modulo)( or modulo)? "
    r"by zero|maximum recursion depth|\[Errno \d+\])"
    r"|\w+\(\) (missing \d+ required|takes \d+|got an unexpected|argument)"
)


def filter_refused(cause: Sequence[Any]) -> bool:
    """Whether a bundle filter's error is its refusal (an AnsibleFilterError) and not a bug. Ansible's chain does not
    name the exception's type: a traceback it captured does (ANSIBLE_DISPLAY_TRACEBACK=error); without one, a
    message that reads as CPython's own (``PYTHON_ERROR``) is a bug."""
    traceback = str(getattr(cause[-1], "formatted_traceback", "") or "").rstrip() if cause else ""
    if traceback:
        return traceback.splitlines()[-1].split(":", 1)[0].startswith("ansible.errors.")  # AnsibleFilterError's
    return not PYTHON_ERROR.match(brief(cause))


def refusal_text(events: Sequence[Any], result: Mapping[str, Any], action: str) -> str | None:
    """What to print, alone, for a failure that is one of the bundle's refusals; None for any other failure (and
    for a ``failed_when`` that failed a result: its message, if any, is not why)."""
    result_msg = result.get("msg")
    if "failed_when_result" in result:
        return None
    for at, event in enumerate(events[:-1]):
        found = _FILTER.fullmatch(_msg(event))
        if found:
            if not filter_refused(events[at + 1 :]):
                return None
            return f"{brief(events[at + 1 :])} (in {found[1]})"
    if returned_failure(events, result_msg) and action_name(action) in BUNDLE_ACTIONS | REFUSING_ACTIONS:
        return str(result_msg).strip()
    return None


def extra_fields(result: Mapping[str, Any], text: str) -> list[str]:
    """A refusal's other plain fields that its message does not already say (a path, a job id), one line each;
    lists and mappings (a problem list that repeats the message) are left to -v."""
    lines = []
    for key, value in sorted(result.items()):
        if key.startswith("_") or key in ("msg", "changed", "failed") or isinstance(value, bool):
            continue
        said = re.search(rf"(?<![\w.]){re.escape(str(value).strip())}(?![\w])", text)  # "1" is not said by "17"
        if isinstance(value, str | int | float) and str(value).strip() and not said:
            lines.append(f"    {key}: {value}")
    return lines


def compact_traceback(text: str, before: int = 5) -> str:
    """A text holding a Python traceback (a crashed script's stderr, a module's), with the traceback cut to its last
    frame and the exception: what follows the exception is kept, and at most ``before`` lines of what precedes the
    traceback (the end of the output, or of the traceback it was raised while handling)."""
    start = text.rfind(TRACEBACK_HEAD)
    if start < 0:
        return text
    head = [line for line in text[:start].splitlines() if line.strip()]
    lines = text[start:].splitlines()[1:]
    frames: list[list[str]] = []
    at = 0
    while at < len(lines) and (lines[at].startswith("  ") or not lines[at].strip()):
        if lines[at].startswith("  File "):
            frames.append([lines[at]])
        elif frames and lines[at].strip().strip("^~ "):  # its source line, not the ^^^ markers under it
            frames[-1].append(lines[at])
        at += 1
    kept = head[len(head) - before :] if before > 0 else []
    out = [f"({len(head) - len(kept)} line(s) before left out; -v shows them)"] if len(head) > len(kept) else []
    said = f"Traceback (the last of {len(frames)} frames; -v shows all):" if len(frames) > 1 else TRACEBACK_HEAD
    return "\n".join([*out, *kept, said, *(frames[-1] if frames else []), *lines[at:]])


def origin(events: Iterable[Any]) -> str | None:
    """Where the innermost link of the chain that has a source excerpt points (``path:line:column``)."""
    where = None
    for event in events:
        found = _ORIGIN.search(str(getattr(event, "formatted_source_context", "") or ""))
        if found:
            where = found[1].strip()
    return where


def helps(events: Iterable[Any]) -> list[str]:
    """The help texts of the chain's links (Ansible's "Consider overriding the interpreter path ..."), once each."""
    return [text for text in dict.fromkeys(str(getattr(e, "help_text", "") or "").strip() for e in events) if text]


#: What Ansible puts before an unreachable host's error: the task's failure, the connection plugin's sentence.
_UNREACHABLE_HEADS = re.compile(r"^(Task failed:\s*)?(Failed to connect to the host via \w+:\s*)?")


def connection_error(msg: Any) -> str:
    """An unreachable result's error as one line: the last line the connection said (ssh's own, after its warnings:
    "ssh: connect to host 10.0.0.2 port 22: Connection refused", "Host key verification failed."), without
    Ansible's "Task failed: Failed to connect to the host via ssh: " before it."""
    lines = [line.strip() for line in str(msg or "").splitlines() if line.strip()]
    last = _UNREACHABLE_HEADS.sub("", lines[-1]) if lines else ""
    return last or (_UNREACHABLE_HEADS.sub("", lines[0]) if lines else "") or "no answer"


def host_address(host: Any) -> str | None:
    """How the controller reaches a host (its ``ansible_host`` in the inventory), None when that is its name, is
    not set on the host itself or is a template."""
    address = (getattr(host, "vars", None) or {}).get("ansible_host")
    if not isinstance(address, str) or not address.strip() or "{{" in address or address == getattr(host, "name", None):
        return None
    return address.strip()


def unreachable_text(label: str, address: str | None, msg: Any, ignored: bool) -> str:
    """An unreachable host in one line: the host, its address and the connection's error. ``ignored``
    (``ignore_unreachable``: the playbook checks the result itself and says what it means) reads as a note,
    not as the run's end."""
    where = f" ({address})" if address else ""
    if ignored:
        return f"unreachable: [{label}]{where}: {connection_error(msg)}"
    return f"fatal: [{label}]: UNREACHABLE!{where}: {connection_error(msg)}"


def last_traceback(events: Iterable[Any]) -> str | None:
    """The innermost traceback Ansible captured (with ANSIBLE_DISPLAY_TRACEBACK=error), compacted."""
    found = [t for t in (getattr(e, "formatted_traceback", None) for e in events) if t]
    return compact_traceback(found[-1].rstrip(), before=0) if found else None


#: The bundle's actions that print for the person themselves (the plan, the progress, the summary): a play that
#: runs one shows its banner first.
PRINTING_ACTIONS = frozenset({"trainops_show", "train_watch"})


class CallbackModule(DefaultCallback):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "trainops"

    def __init__(self) -> None:
        super().__init__()
        self._pending_play: Any = None

    # --- a play's banner only over what it prints ----------------------------------------------------------
    def v2_playbook_on_play_start(self, play: Any) -> None:
        """A play's banner waits until the play prints something (a task's banner, or one of the bundle's
        printing actions starts): a play whose tasks all skip or end ``ok`` prints nothing at all. -v prints
        every banner."""
        if self._display.verbosity > 0:
            super().v2_playbook_on_play_start(play)
            return
        self._play, self._pending_play = play, play

    def v2_playbook_on_no_hosts_matched(self) -> None:
        """A play for an optional group the inventory leaves empty (supervisors) says nothing; -v says so."""
        if self._display.verbosity > 0:
            super().v2_playbook_on_no_hosts_matched()

    def _show_play(self) -> None:
        play, self._pending_play = self._pending_play, None
        if play is not None:
            super().v2_playbook_on_play_start(play)

    def _print_task_banner(self, task: Any) -> None:
        self._show_play()
        super()._print_task_banner(task)

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        super().v2_playbook_on_task_start(task, is_conditional)
        if action_name(str(task.action)).rsplit(".", 1)[-1] in PRINTING_ACTIONS:
            self._show_play()

    def v2_playbook_on_include(self, included_file: Any) -> None:
        """An included task file or role is no news to the person (``-v`` says which): its tasks print."""
        if self._display.verbosity > 0:
            super().v2_playbook_on_include(included_file)

    def v2_runner_on_ok(self, result: Any) -> None:
        include = isinstance(result.task, TaskInclude) and self._display.verbosity == 0
        if not include:  # an include's banner alone (the default prints it) says nothing: its tasks print
            super().v2_runner_on_ok(result)
        hidden = include or (not self.get_option("display_ok_hosts") and not result.result.get("changed", False))
        if hidden and (result.result.get("warnings") or result.result.get("deprecations")):
            if self._last_task_banner != result.task._uuid:
                self._print_task_banner(result.task)
            self._handle_warnings_and_exception(result)

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        loop = result.task.loop and "results" in result.result  # its items were printed one by one
        head = f"fatal: [{self.host_label(result)}]"
        if self._display.verbosity > 0 or loop or not self._failure_once(result, head, f"{head}: FAILED! =>"):
            super().v2_runner_on_failed(result, ignore_errors)
        elif ignore_errors:
            self._display.display("...ignoring", color=C.COLOR_SKIP)

    def v2_runner_on_unreachable(self, result: Any) -> None:
        """An unreachable host in one line (:func:`unreachable_text`), instead of the default's ``[ERROR]`` block
        (the chain, the task's source excerpt), the result dumped and ``...ignoring``; -v prints the default's."""
        if self._display.verbosity > 0:
            super().v2_runner_on_unreachable(result)
            return
        if self._last_task_banner != result.task._uuid:
            self._print_task_banner(result.task)
        res = result.result
        self._handle_warnings(res)
        res.pop("exception", None)  # the [ERROR] block's, said here in the one line
        text = unreachable_text(
            self.host_label(result), host_address(result.host), res.get("msg"), bool(result.task.ignore_unreachable)
        )
        self._display.display(text, color=C.COLOR_UNREACHABLE, stderr=self.get_option("display_failed_stderr"))

    def v2_runner_item_on_failed(self, result: Any) -> None:
        head = f"failed: [{self.host_label(result)}] (item={self._get_item_label(result.result)})"
        if self._display.verbosity > 0 or not self._failure_once(result, head, f"{head} =>"):
            super().v2_runner_item_on_failed(result)

    def _failure_once(self, result: Any, head: str, dump: str) -> bool:
        """Print a failure with its message once (``head: message`` for a refusal, ``dump`` and the result for
        another); False, having printed nothing, where the default's way is the one (no exception to print twice:
        ``failed_when``, a result without one)."""
        events = chain_of(getattr(result, "exception", None))
        if not events:
            return False
        res = result.result
        action = str(getattr(result.task, "resolved_action", None) or result.task.action)
        text = refusal_text(events, res, action)
        if self._last_task_banner != result.task._uuid:
            self._print_task_banner(result.task)
        self._handle_warnings(res)
        res.pop("exception", None)  # said here, once, instead of the default's [ERROR] block
        if text is not None:
            lines = [f"{head}: {text}", *extra_fields(res, text)]
        else:
            returned = returned_failure(events, res.get("msg"))
            self._clean_results(res, result.task.action)
            msg = str(res.pop("msg", "") or "").strip()  # first, on one line as the [ERROR] block said it
            for key, value in list(res.items()):
                if key.endswith("_lines") and key[: -len("_lines")] in res:  # stdout_lines: stdout again
                    del res[key]
                elif isinstance(value, str) and TRACEBACK_HEAD in value:
                    res[key] = compact_traceback(value)
            rest = self._dump_results(res) if any(not key.startswith("_") for key in res) else ""
            lines = [f"{dump} {msg}{rest if rest.startswith(chr(10)) else ' ' + rest}".rstrip()]  # yaml or json
            lines += [f"    help: {text}" for text in helps(events)]
            if not returned:  # an exception (a crash, a template error)
                if where := origin(events):
                    lines.append(f"    origin: {where}")
                if traceback := last_traceback(events):
                    lines.append("    " + traceback.replace("\n", "\n    "))
                    lines.append("    (-v shows Ansible's whole report and the whole traceback)")
                else:
                    lines.append("    (-v shows Ansible's whole report; ANSIBLE_DISPLAY_TRACEBACK=error its traceback)")
        self._display.display("\n".join(lines), color=C.COLOR_ERROR, stderr=self.get_option("display_failed_stderr"))
        return True
