"""What the user wrote, read as text: the inventory's files and the ``-e`` arguments, before YAML 1.1, an INI
literal or Ansible made anything of them.

The input check judges the values Ansible hands it, but YAML 1.1 has already rewritten some of those (an
unquoted ``off`` is the boolean false, ``010`` the octal 8, ``1:30:00`` the base-60 5400, ``2026-12-01`` a date,
``0.10`` the number 0.1), and Ansible keeps only the last of a host listed twice. :func:`read_inventory` and
:func:`read_extra` give every variable as written (:class:`Setting`: its text, whether it was unquoted, where it
was set) and what the text itself shows to be wrong (a host listed twice, a key set twice, an ``-e`` that a
space split in two); :mod:`.inputs` holds each setting to the schema.

Static inventories only: YAML files (``.yml``, ``.yaml``, ``.json``) and INI files, in a directory or named
alone, with their ``group_vars/`` and ``host_vars/``; an inventory plugin's configuration is skipped.
"""

from __future__ import annotations

import ast
import datetime
import os
import re
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

#: Files Ansible's directory inventory skips (INVENTORY_IGNORE_EXTS).
_IGNORED = (".pyc", ".pyo", ".swp", ".bak", "~", ".rpm", ".md", ".txt", ".rst", ".orig", ".cfg", ".retry")
_YAML = (".yml", ".yaml", ".json")
#: Scalars YAML 1.1 turns into something other than text.
_REWRITTEN = {f"tag:yaml.org,2002:{t}" for t in ("bool", "int", "float", "timestamp")}
_INI = "the INI inventory (a Python literal)"


@dataclass(frozen=True)
class Setting:
    """One variable as written."""

    name: str
    #: The scalar's text (None: a mapping, a list, or nothing).
    text: str | None
    #: What the loader made of the text: the text itself, unless YAML 1.1 or an INI literal made it something else.
    read: Any
    #: ``all``, ``group G``, ``host H`` (the inventory) or ``-e``.
    scope: str
    #: Where: ``inventory/site/hosts.yml:5``, ``-e @vars.yml:3`` or ``-e '{"exp": no}'``.
    place: str
    #: What read the text.
    reader: str = "YAML 1.1"

    @property
    def rewritten(self) -> bool:
        """The loader made something else of the text than the text (a boolean, a number, a date)."""
        return self.text is not None and not isinstance(self.read, str)


@dataclass
class Written:
    settings: list[Setting] = field(default_factory=list)
    #: What the text shows to be wrong, one sentence each.
    problems: list[str] = field(default_factory=list)
    #: The names whose -e argument a space split (their value is only a part: that problem is theirs).
    split: set[str] = field(default_factory=set)


def read_inventory(sources: Sequence[str]) -> Written:
    """Every variable the inventory ``sources`` (``-i``) set, and every host listed twice or key set twice."""
    out = Written()
    for source in sources:
        if not os.path.exists(source):
            continue  # a host list ("a,b,") or a missing source: the check names the latter
        for path in _inventory_files(source):
            _inventory_file(path, out)
        base = source if os.path.isdir(source) else os.path.dirname(source)
        for kind in ("group", "host"):
            for name, path in _vars_files(os.path.join(base, f"{kind}_vars")):
                scope = "all" if (kind, name) == ("group", "all") else f"{kind} {name}"
                _yaml_vars(path, scope, out)
    return out


def read_extra(arguments: Sequence[str]) -> Written:
    """The ``-e`` arguments as given: ``@file`` and ``{...}`` read as YAML, ``name=value`` as text; an argument
    that a space split (``-e 'exclude_nodes=node1, node2'``: Ansible reads ``node2`` as a word of its own) is a
    problem that says so."""
    out = Written()
    for argument in arguments:
        if argument.startswith("@"):
            node = _compose(argument[1:], out, f"-e {argument}")
            for key, value in _pairs(node):
                out.settings.append(_setting(key, value, "-e", f"-e @{argument[1:]}:{key.start_mark.line + 1}"))
                out.problems += _nested_rewrites(key.value, value, f"-e @{argument[1:]}:{key.start_mark.line + 1}")
        elif argument.startswith(("{", "[")):
            node = _compose_text(argument, out, f"-e {_short(argument)}")
            for key, value in _pairs(node):
                out.settings.append(_setting(key, value, "-e", f"-e {_short(argument)}"))
                out.problems += _nested_rewrites(key.value, value, f"-e {_short(argument)}")
        elif argument:
            _kv(argument, out)
    return out


def _kv(argument: str, out: Written) -> None:
    try:
        words = shlex.split(argument)
    except ValueError:
        words = argument.split()
    for word in words:
        if "=" in word:
            name, _, value = word.partition("=")
            out.settings.append(Setting(name, value, value, "-e", f"-e {_short(argument)}"))
    stray = [w for w in words if "=" not in w]
    if not stray or "{{" in argument or "{%" in argument:  # a template's spaces are Ansible's to split
        return
    before = next((w for w in reversed(words[: words.index(stray[0])]) if "=" in w), "")
    name = before.partition("=")[0]
    fix = "quote the value or drop the space"
    name_given, _, value_given = argument.partition("=")
    out.split.add((before or argument).partition("=")[0])
    if value_given.lstrip().startswith(("{", "[")):  # a mapping or list after name=: Ansible splits it at its spaces
        fix = f"give it as one JSON argument: -e '{{\"{name_given}\": {value_given.strip()}}}'"
    elif before:
        spaced = argument[argument.rfind(before) + len(name) + 1 :]
        fix = f"drop the space (-e {before}{''.join(stray)}) or quote the value (-e \"{name}='{spaced}'\")"
    out.problems.append(
        f"-e {_short(argument)}: a space split it, and {' '.join(map(repr, stray))} is not name=value (Ansible "
        f"reads -e name=value pairs separated by spaces): {fix}"
    )


def _short(text: str, width: int = 60) -> str:
    shown = text if len(text) <= width else text[: width - 3] + "..."
    return shlex.quote(shown)


def shown(path: str) -> str:
    """``path`` relative to the current directory when it is below it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def _inventory_files(source: str) -> Iterator[str]:
    if os.path.isfile(source):
        yield source
        return
    for entry in sorted(os.listdir(source)):
        path = os.path.join(source, entry)
        if entry.startswith(".") or entry.endswith(_IGNORED) or entry in ("group_vars", "host_vars"):
            continue
        if os.path.isdir(path):
            yield from _inventory_files(path)
        elif os.path.isfile(path) and not os.access(path, os.X_OK):  # an executable is an inventory script
            yield path


def _vars_files(directory: str) -> Iterator[tuple[str, str]]:
    """(group or host name, file) of ``group_vars/`` or ``host_vars/``: ``<name>[.yml]`` or ``<name>/*``."""
    if not os.path.isdir(directory):
        return
    for entry in sorted(os.listdir(directory)):
        path = os.path.join(directory, entry)
        if entry.startswith("."):
            continue
        if os.path.isdir(path):
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(files):
                    if not name.startswith(".") and (name.endswith(_YAML) or "." not in name):
                        yield entry, os.path.join(root, name)
        elif entry.endswith(_YAML) or "." not in entry:
            yield os.path.splitext(entry)[0] if entry.endswith(_YAML) else entry, path


def _compose(path: str, out: Written, label: str) -> yaml.Node | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return _compose_text(handle.read(), out, label)
    except (OSError, UnicodeDecodeError):
        return None  # Ansible could not read it either, and says so


def _compose_text(text: str, out: Written, label: str) -> yaml.Node | None:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None  # Ansible refuses it with its own message
    _duplicates(node, label, out)
    return node


def _pairs(node: yaml.Node | None) -> list[tuple[yaml.ScalarNode, yaml.Node]]:
    if not isinstance(node, yaml.MappingNode):
        return []
    return [(k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value != "<<"]


def _duplicates(node: yaml.Node | None, label: str, out: Written, parent: str = "", seen: set | None = None) -> None:
    """Every key a mapping of ``node`` holds twice (YAML keeps only the last); ``parent``: the key that holds it."""
    seen = set() if seen is None else seen
    if node is None or id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        lines: dict[str, int] = {}
        for key, value in _pairs(node):
            line = key.start_mark.line + 1
            if key.value in lines:
                host = parent == "hosts"
                what = f"host {key.value} is listed" if host else f"{key.value} is set"
                out.problems.append(
                    f"{label}:{line}: {what} twice in one mapping (lines {lines[key.value]} and {line}); only the "
                    f"last is kept{' (one node, not two)' if host else ''}: {'list' if host else 'set'} it once"
                )
            lines.setdefault(key.value, line)
            _duplicates(value, label, out, key.value, seen)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _duplicates(item, label, out, parent, seen)


#: An integer YAML 1.1 reads from text that is not a plain decimal: octal (0500), hexadecimal, binary, base 60.
_NOT_DECIMAL = re.compile(r"[-+]?(0[0-7_]+|0x[0-9a-fA-F_]+|0b[01_]+|[0-9][0-9_]*(:[0-5]?[0-9])+)")


def _nested_rewrites(name: str, node: yaml.Node, place: str) -> list[str]:
    """In a mapping's values (``training: {save_interval: 0500}``), every plain number YAML 1.1 reads as other
    than its decimal text, and every date: the schema checks the nested values as read, so it is said here."""
    problems = []
    for key, item in _pairs(node):
        full = f"{name}.{key.value}"
        if isinstance(item, yaml.MappingNode):
            problems += _nested_rewrites(full, item, place)
        elif isinstance(item, yaml.ScalarNode) and item.style is None and item.tag in _REWRITTEN:
            read = yaml.safe_load(item.value)
            if isinstance(read, int) and not isinstance(read, bool) and _NOT_DECIMAL.fullmatch(item.value):
                made = f"{read} (base 60)" if ":" in item.value else f"the number {read}"
                fix = "write the decimal number you mean, without a leading zero"
            elif isinstance(read, datetime.date):
                made, fix = f"a date ({read.isoformat()})", f'quote it: "{item.value}"'
            else:
                continue
            line = re.sub(r":\d+$", f":{key.start_mark.line + 1}", place)
            problems.append(f"{line}: {full}: {item.value} is read by YAML 1.1 as {made}, not as written; {fix}")
    return problems


def _setting(key: yaml.ScalarNode, value: yaml.Node, scope: str, place: str) -> Setting:
    if not isinstance(value, yaml.ScalarNode):
        return Setting(key.value, None, None, scope, place)
    rewritten = value.style is None and value.tag in _REWRITTEN  # plain (unquoted), and not text to YAML 1.1
    return Setting(key.value, value.value, yaml.safe_load(value.value) if rewritten else value.value, scope, place)


def _inventory_file(path: str, out: Written) -> None:
    """A YAML inventory (by its extension, or a file without one that holds a YAML mapping), else an INI one."""
    if not path.endswith(_YAML):
        scratch = Written()
        if os.path.splitext(path)[1] or not isinstance(_compose(path, scratch, ""), yaml.MappingNode):
            _ini_inventory(path, out)
            return
    root = _compose(path, out, f"inventory {shown(path)}")
    if any(key.value == "plugin" for key, _ in _pairs(root)):
        return  # an inventory plugin's configuration, not hosts
    for group, body in _pairs(root):
        _yaml_group(shown(path), group.value, body, out)


def _yaml_group(path: str, group: str, body: yaml.Node, out: Written) -> None:
    for part, value in _pairs(body):
        if part.value == "vars":
            scope = "all" if group == "all" else f"group {group}"
            for key, item in _pairs(value):
                out.settings.append(_setting(key, item, scope, f"{path}:{key.start_mark.line + 1}"))
                out.problems += _nested_rewrites(key.value, item, f"inventory {path}:{key.start_mark.line + 1}")
        elif part.value == "hosts":
            for host, host_vars in _pairs(value):
                for key, item in _pairs(host_vars):
                    out.settings.append(_setting(key, item, f"host {host.value}", f"{path}:{key.start_mark.line + 1}"))
        elif part.value == "children":
            for child, child_body in _pairs(value):
                _yaml_group(path, child.value, child_body, out)


def _yaml_vars(path: str, scope: str, out: Written) -> None:
    for key, value in _pairs(_compose(path, out, f"inventory {shown(path)}")):
        out.settings.append(_setting(key, value, scope, f"{shown(path)}:{key.start_mark.line + 1}"))
        out.problems += _nested_rewrites(key.value, value, f"inventory {shown(path)}:{key.start_mark.line + 1}")


def _ini_value(text: str) -> Any:
    """What Ansible's INI inventory makes of a value: a Python literal where it is one, else the text."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def _ini_inventory(path: str, out: Written) -> None:
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return
    group, kind, listed = "ungrouped", "hosts", {}
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            group, _, kind = line[1:-1].partition(":")
            kind, listed = kind or "hosts", {}
            continue
        place = f"{shown(path)}:{number}"
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        if not words:
            continue
        if kind == "vars":
            name, _, text = line.partition("=")
            text = text.strip()
            scope = "all" if group == "all" else f"group {group}"
            out.settings.append(Setting(name.strip(), text, _ini_value(text), scope, place, _INI))
        elif kind == "hosts":
            host = words[0]
            if host in listed:
                out.problems.append(
                    f"inventory {place}: host {host} is listed twice in [{group}] (lines {listed[host]} and "
                    f"{number}); Ansible keeps one (one node, not two): list it once"
                )
            listed.setdefault(host, number)
            for word in words[1:]:
                name, _, text = word.partition("=")
                out.settings.append(Setting(name, text, _ini_value(text), f"host {host}", place, _INI))
