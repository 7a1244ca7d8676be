"""Shell rendering shared by the launch templates (through the ``trainops_shell_arg_lines`` filter) and the
tools that render them without Ansible (tools/card_check.py)."""

from __future__ import annotations

import shlex
from collections.abc import Sequence


def shell_arg_lines(args: Sequence[str], indent: int = 4) -> str:
    """Quote an argument vector for bash, one ``--flag value...`` group per continued line."""
    groups: list[list[str]] = []
    for arg in args:
        if arg.startswith("--") or not groups:
            groups.append([])
        groups[-1].append(shlex.quote(str(arg)))
    pad = " " * indent
    return " \\\n".join(pad + " ".join(group) for group in groups)
