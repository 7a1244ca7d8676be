"""Shell rendering shared by the launch templates (through the ``trainops_shell_arg_lines`` filter) and the
tools that render them without Ansible (tools/card_check.py)."""

from __future__ import annotations

import shlex
from collections.abc import Sequence


def _quote(arg: str) -> str:
    """shlex.quote, and quotes around a comma too: inside a bash array a bare comma reads as a mistaken
    separator (shellcheck SC2054), although bash keeps it (``--split 98,2,0``)."""
    quoted = shlex.quote(arg)
    return f"'{arg}'" if quoted == arg and "," in arg else quoted


def shell_arg_lines(args: Sequence[str], indent: int = 4) -> str:
    """Quote an argument vector for bash, one ``--flag value...`` group per continued line."""
    groups: list[list[str]] = []
    for arg in args:
        if arg.startswith("--") or not groups:
            groups.append([])
        groups[-1].append(_quote(str(arg)))
    pad = " " * indent
    return " \\\n".join(pad + " ".join(group) for group in groups)
