"""The controller's own records: written whole or not at all, read so that damage never stops a run, printed safely.

The records are the site's incident record (``runs/incidents.jsonl``, appended), and each run's ``attempts.json``,
``attempt-<k>/attempt.json``, ``hang/diagnosis.json``, ``checkpoints.json``, ``summary.json`` and the health
records (each written whole). A crash, a full disk or a hand edit can damage any of them; here:

* :func:`write_json` / :func:`write_jsonl` write a temporary file beside the record, fsync it and rename it into
  place: a reader sees the old record or the new one, never half of one.
* :func:`append_jsonl` ends every line with a newline and fsyncs it. A last line cut short by a crash mid-append
  (a *torn* line) is set aside in ``<record>.torn`` before anything is appended, never extended.
* :func:`read_jsonl` returns the good lines and a warning for each bad one, naming the file and the line: a line
  that is not UTF-8, not JSON, not an object, or lacks what the record needs. A record that is a directory or a
  link to nothing is a warning too (no line read), not "nothing recorded" in silence.
* :func:`read_json` reads a whole-file record, or raises :class:`RecordError` naming the file, what is wrong with
  it and the fix, never the parser's bare text.
* :func:`printable` escapes the control characters of a text read from a record (a cause holding terminal escape
  codes prints as ``\\x1b[2J``, and does not clear the screen).
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping
from typing import Any

#: Where an appended record's torn last line goes: ``<record>.torn``.
TORN_SUFFIX = ".torn"
_TYPES = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}


class RecordError(ValueError):
    """A record that cannot be read or written; the message names the file, what is wrong, and the fix."""


def printable(text: Any) -> str:
    """``text`` with every character that is not printable escaped as Python writes it (``\\x1b``, ``\\n``)."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(text))


def _kind(value: Any) -> str:
    return _TYPES.get(type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)


def _not_a_file(path: str) -> str | None:
    """Why ``path`` cannot be read as a record although something is there, or None (a file, or nothing)."""
    if os.path.islink(path) and not os.path.exists(path):
        return f"is a link to {os.readlink(path)}, which does not exist"
    if os.path.exists(path) and not os.path.isfile(path):
        return "is a directory, not a file" if os.path.isdir(path) else "is not a regular file"
    return None


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text(path: str, text: str, mode: int = 0o644) -> None:
    """Write ``path`` whole: a temporary file in its directory, fsynced, renamed over it (the directory fsynced)."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        if os.path.lexists(temporary):
            os.unlink(temporary)
        raise
    _fsync_dir(directory)


def write_json(path: str, value: Any, indent: int = 2, default: Callable[[Any], Any] | None = None) -> None:
    """Write ``value`` as ``path``'s JSON, whole (:func:`write_text`), with a final newline."""
    write_text(path, json.dumps(value, indent=indent, sort_keys=True, default=default) + "\n")


def write_jsonl(path: str, rows: Iterable[Mapping[str, Any]]) -> None:
    """Write ``rows`` as ``path``'s JSON lines, whole (:func:`write_text`)."""
    write_text(path, "".join(json.dumps(dict(r), sort_keys=True) + "\n" for r in rows))


def _tail(handle: Any, size: int) -> bytes:
    """The bytes after the file's last newline (empty when it ends with one)."""
    tail, position = b"", size
    while position > 0:
        step = min(65536, position)
        position -= step
        handle.seek(position)
        chunk = handle.read(step)
        cut = chunk.rfind(b"\n")
        if cut >= 0:
            return chunk[cut + 1 :] + tail
        tail = chunk + tail
    return tail


def _whole_line(raw: bytes) -> bool:
    """Whether a last line without its newline is still a whole JSON object (only the newline was lost)."""
    try:
        return isinstance(json.loads(raw.decode("utf-8")), dict)
    except ValueError:
        return False


def append_jsonl(path: str, rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """Append ``rows`` to ``path``, one JSON line each, fsynced; returns what was said about the record.

    A torn last line (a crash mid-append left it without its newline) is moved to ``<path>.torn`` first, so the
    new lines never continue it; a whole object that lost only its newline gets it back. Raises
    :class:`RecordError` when ``path`` is a directory or a link to nothing (naming it and the fix), OSError when it
    cannot be written."""
    text = "".join(json.dumps(dict(r), sort_keys=True) + "\n" for r in rows).encode("utf-8")
    if not text:
        return []
    if problem := _not_a_file(path):
        raise RecordError(f"{path} {problem}: nothing was added to it; {_fix(path)}")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    said = []
    with open(path, "ab+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # another playbook appending at the same time waits
        size = handle.seek(0, os.SEEK_END)
        tail = _tail(handle, size)
        if tail and _whole_line(tail):
            handle.write(b"\n")
        elif tail:
            with open(path + TORN_SUFFIX, "ab") as aside:
                aside.write(tail + b"\n")
                aside.flush()
                os.fsync(aside.fileno())
            handle.truncate(size - len(tail))
            said.append(
                f"{path}: its last line was cut short ({len(tail)} bytes, a write that did not finish); "
                f"set aside in {path + TORN_SUFFIX}"
            )
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    return [printable(s) for s in said]


def _fix(path: str) -> str:
    return f"move it away (mv {path} {path}.damaged) or restore it"


def read_jsonl(
    path: str, check: Callable[[dict[str, Any]], str | None] | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """Every good line of the JSON-lines record ``path`` in file order, and a warning for each bad one (``<path>
    line <n>: <what is wrong>; skipped``); ``check``: what a line that is an object still lacks, or None. A missing
    record is empty; a directory or a link to nothing in its place is one warning and no line."""
    if problem := _not_a_file(path):
        return [], [printable(f"{path} {problem}: nothing in it was read; {_fix(path)}")]
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        return [], [printable(f"{path}: cannot be read ({exc.strerror or exc}): nothing in it was read")]
    records, warnings = [], []
    lines = data.removeprefix(b"\xef\xbb\xbf").split(b"\n")  # an editor's byte-order mark is not the record's
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        problem = None
        try:
            record = json.loads(raw.decode("utf-8"))  # a Windows editor's \r\n ends in JSON's white space
        except UnicodeDecodeError as exc:
            problem = f"is not UTF-8 text (byte {exc.start + 1})"
        except ValueError:
            torn = number == len(lines)  # the last line, without its newline
            problem = "is not JSON"
            if torn:
                problem = "was cut short (a write that did not finish: the next one sets it aside)"
        else:
            if not isinstance(record, dict):
                problem = f"holds {_kind(record)}, not a record (an object)"
            elif check:
                problem = check(record)
        if problem:
            warnings.append(printable(f"{path} line {number} {problem}; skipped"))
        else:
            records.append(record)
    return records, warnings


def read_json(path: str, what: str, fix: str, expect: type = dict) -> Any:
    """The JSON record ``path`` (``what``: what it is, for the message), None when there is none; raises
    :class:`RecordError` naming the file, what is wrong and ``fix`` when it cannot be read or is not ``expect``."""
    problem = _not_a_file(path)
    if problem is None:
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            problem = f"cannot be read ({exc.strerror or exc})"
    if problem is None:
        try:
            value = json.loads(data.decode("utf-8"))
        except UnicodeDecodeError as exc:
            problem = f"is not UTF-8 text (byte {exc.start + 1})"
        except json.JSONDecodeError as exc:
            if exc.pos >= len(data.rstrip()) or exc.msg.startswith("Unterminated string"):  # the end came early
                problem = f"was cut short after {len(data)} bytes (a write that did not finish)"
            else:
                problem = f"is not JSON (line {exc.lineno}, column {exc.colno})"
        else:
            if isinstance(value, expect):
                return value
            problem = f"holds {_kind(value)}, not {_TYPES.get(expect, expect.__name__)}"
    raise RecordError(printable(f"{path} {problem}: it is not a readable {what}; {fix}"))
