"""Failures: the blocks being collected (Python tracebacks, torch.distributed.elastic ``ChildFailedError``
summaries), the parser's failure records (:class:`_FailureAssembly`) and the run's first root cause
(:func:`_primary_failure`)."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping
from typing import Any

from ..kinds import FATAL_LOG_KINDS, LOG_PRIORITY
from .patterns import (
    _CHILD_ENTRY,
    _CHILD_FIELD,
    _EXCEPTION_LINE,
    _ITER,
    _NAN,
    _NODE_IN_TEXT,
    _OOM,
    _RANK_IN_TEXT,
    _SECONDARY,
)

#: At most this many failure records are kept; the rest are only counted (``summary.failures_omitted``).
MAX_FAILURES = 1000
_TB_HEAD = 20  # lines kept from the start of a long traceback
_TB_TAIL = 180  # and from its end
_FAILURE_PRIORITY = LOG_PRIORITY
_FATAL_KINDS = FATAL_LOG_KINDS


# --- blocks being collected ------------------------------------------------------------------------------------
class _Traceback:
    """A Python traceback being collected (chained tracebacks stay in one record)."""

    __slots__ = ("line", "head", "tail", "omitted", "state", "exception_line")

    def __init__(self, line: int, first: str) -> None:
        self.line = line
        self.head: list[str] = [first]
        self.tail: deque[str] = deque(maxlen=_TB_TAIL)
        self.omitted = 0
        self.state = "frames"  # frames -> after (the exception line seen) -> chain -> frames ...
        self.exception_line: str | None = None

    def append(self, text: str) -> None:
        if len(self.head) < _TB_HEAD:
            self.head.append(text)
            return
        if len(self.tail) == self.tail.maxlen:
            self.omitted += 1
        self.tail.append(text)

    def lines(self) -> list[str]:
        middle = [f"... {self.omitted} line(s) omitted ..."] if self.omitted else []
        return self.head + middle + list(self.tail)


class _ChildFailed:
    """A torch.distributed.elastic ChildFailedError summary block being collected."""

    __slots__ = ("line", "program", "section", "entries", "current", "field", "borders")

    def __init__(self, line: int) -> None:
        self.line = line
        self.program: str | None = None
        self.section = "header"
        self.entries: dict[str, list[dict[str, Any]]] = {"other": [], "root": []}
        self.current: dict[str, Any] | None = None
        self.field: str | None = None
        self.borders = 0

    def feed(self, text: str) -> bool | None:
        """Consume one line: True (part of the block), False (not: the block ended before it), None (ended)."""
        stripped = text.strip()
        if not stripped:
            return True
        if stripped.startswith("==") and not stripped.strip("="):
            self.borders += 1
            return None if self.entries["root"] else True
        if stripped.startswith("--") and not stripped.strip("-"):
            self.field = None
            return True
        if stripped == "Failures:":
            self.section, self.field = "other", None
            return True
        if stripped.startswith("Root Cause"):
            self.section, self.field = "root", None
            return True
        if stripped == "<NO_OTHER_FAILURES>":
            return True
        if match := _CHILD_ENTRY.match(text):
            self.current = {"index": int(match.group(1))}
            self.entries["root" if self.section == "root" else "other"].append(self.current)
            self.field = None
            return True
        if self.current is not None and (match := _CHILD_FIELD.match(text)):
            self.field = match.group(1)
            self.current[self.field] = match.group(2).rstrip()
            return True
        if self.field == "traceback" and self.current is not None and text.startswith("  "):
            self.current["traceback"] += "\n" + text[2:].rstrip()
            return True
        if self.program is None and self.section == "header" and stripped.endswith(" FAILED"):
            self.program = stripped[: -len(" FAILED")]
            return True
        return False

    @staticmethod
    def entry(raw: Mapping[str, Any]) -> dict[str, Any]:
        """One failure of the summary with typed fields."""
        out: dict[str, Any] = {
            "time": raw.get("time"),
            "host": raw.get("host"),
            "rank": None,
            "local_rank": None,
            "exitcode": None,
            "pid": None,
            "error_file": None,
            "traceback": None,
            "error": None,
            "signal": None,
        }
        if match := re.match(r"\s*(-?\d+)(?:\s*\(local_rank:\s*(\d+)\))?", raw.get("rank", "")):
            out["rank"] = int(match.group(1))
            out["local_rank"] = int(match.group(2)) if match.group(2) else None
        if match := re.match(r"\s*(-?\d+)(?:\s*\(pid:\s*(\d+)\))?", raw.get("exitcode", "")):
            out["exitcode"] = int(match.group(1))
            out["pid"] = int(match.group(2)) if match.group(2) else None
        error_file = raw.get("error_file")
        out["error_file"] = None if error_file in (None, "", "<N/A>") else error_file
        tb = raw.get("traceback")
        if tb:
            out["traceback"] = tb
            if match := re.search(r"Signal (\d+) \((\w+)\) received", tb):
                out["signal"] = match.group(2)
                out["error"] = tb.strip()
            elif "To enable traceback" not in tb:
                last = [ln.strip() for ln in tb.splitlines() if ln.strip()]
                out["error"] = last[-1] if last else None
        return out


def _classify(message: str) -> str | None:
    if _OOM.search(message):
        return "oom"
    if _NAN.search(message):
        return "nan"
    return None


# --- the parser's failure records ------------------------------------------------------------------------------
class _FailureAssembly:
    """The failure half of :class:`.parser.MegatronLogParser` (its base class): blocks pending per torchrun
    prefix, finished into failure records. Uses the parser's state declared below."""

    failures: list[dict[str, Any]]
    failures_omitted: int
    _pending: dict[tuple[str, int] | None, _Traceback | _ChildFailed]
    _source: str | None
    _rank: int | None
    _local_rank: int | None
    _node: str | None
    _attempt: int | None
    _lineno: int

    def _rank_of(self, key: tuple[str, int] | None) -> tuple[int | None, int | None]:
        rank, local_rank = self._rank, self._local_rank
        if key is not None:
            if key[0] == "rank":
                rank = key[1]
            else:
                local_rank = key[1]
        return rank, local_rank

    def _add_failure(
        self,
        kind: str,
        message: str,
        key: tuple[str, int] | None,
        *,
        line: int | None = None,
        exception: str | None = None,
        traceback: list[str] | None = None,
        iteration: int | None = None,
        rank: int | None = None,
        local_rank: int | None = None,
        node: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        if len(self.failures) >= MAX_FAILURES:
            self.failures_omitted += 1
            return
        key_rank, key_local = self._rank_of(key)
        if rank is None:
            rank = key_rank
            if rank is None and (match := _RANK_IN_TEXT.search(message)):
                rank = int(match.group(1))
        if node is None and (match := _NODE_IN_TEXT.search(message)):
            node = match.group(1)
        self.failures.append(
            {
                "kind": kind,
                "message": message,
                "exception": exception,
                "file": self._source,
                "line": line if line is not None else self._lineno,
                "rank": rank,
                "local_rank": local_rank if local_rank is not None else key_local,
                "node": node if node is not None else self._node,
                "attempt": self._attempt,
                "iteration": iteration,
                "traceback": traceback,
                "details": details or {},
            }
        )

    def _continue(self, key: tuple[str, int] | None, line: str) -> bool:
        """Give the line to the block pending for this prefix; False when the block ended before it."""
        block = self._pending[key]
        if isinstance(block, _ChildFailed):
            consumed = block.feed(line)
            if consumed is None:
                self._finish(key)
                return True
            if not consumed:
                self._finish(key)
            return consumed
        if block.state == "frames":
            if line[:1] in (" ", "\t") and not (_ITER.search(line) if "iteration" in line else None):
                block.append(line)
                return True
            if _EXCEPTION_LINE.match(line):
                block.append(line)
                block.exception_line = line
                block.state = "after"
                if "ChildFailedError" in line:  # torchrun's own traceback: its summary block follows
                    del self._pending[key]
                    self._pending[key] = _ChildFailed(self._lineno)
                return True
            self._finish(key)
            return False
        # after the exception line: a chained traceback may follow
        stripped = line.strip()
        if not stripped:
            return True
        if stripped.startswith(("The above exception was the direct cause", "During handling of the above")):
            block.append(line)
            block.state = "chain"
            return True
        if block.state == "chain" and stripped.startswith("Traceback (most recent call last)"):
            block.append(line)
            block.state = "frames"
            return True
        self._finish(key)
        return False

    def _finish(self, key: tuple[str, int] | None) -> None:
        block = self._pending.pop(key, None)
        if block is None:
            return
        if isinstance(block, _ChildFailed):
            self._child_failed(block, key)
            return
        exc_line = block.exception_line
        exception = None
        if exc_line and (match := _EXCEPTION_LINE.match(exc_line)):
            exception = match.group(1)
        message = exc_line if exc_line else "(traceback without a final exception line)"
        kind = _classify(message) or "traceback"
        self._add_failure(kind, message, key, line=block.line, exception=exception, traceback=block.lines())

    def _child_failed(self, block: _ChildFailed, key: tuple[str, int] | None) -> None:
        roots = [_ChildFailed.entry(e) for e in block.entries["root"]]
        others = [_ChildFailed.entry(e) for e in block.entries["other"]]
        root = roots[0] if roots else None
        program = block.program or "the training program"
        if root is None:
            message = f"{program} FAILED (summary truncated: no root cause)"
        else:
            where = f"rank {root['rank']} (local_rank {root['local_rank']}) on {root['host']}"
            cause = root["error"] or (f"exitcode {root['exitcode']}" if root["exitcode"] is not None else "unknown")
            message = f"{program} FAILED: {where}: {cause}"
            if root["error"] and root["exitcode"] is not None and not root["signal"]:
                message += f" (exitcode {root['exitcode']})"
        self._add_failure(
            "child_failed",
            message,
            key,
            line=block.line,
            exception="torch.distributed.elastic.multiprocessing.errors.ChildFailedError",
            rank=root["rank"] if root else None,
            local_rank=root["local_rank"] if root else None,
            node=root["host"] if root else None,
            details={"program": block.program, "root_cause": root, "other_failures": others},
        )


# --- the run's first root cause --------------------------------------------------------------------------------
def _primary_failure(failures: list[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The first root cause. By kind: the elastic summary's root cause (torch's own verdict: the earliest
    error), else an out-of-memory error, else a traceback, else a worker's exit, else a NaN report; within a kind,
    errors that are usually consequences of another rank's failure (collective timeouts, aborted communicators,
    closed connections, signals) come last; then the earliest attempt, then the order of the input."""
    if not failures:
        return None

    def order(item: tuple[int, Mapping[str, Any]]) -> tuple[int, int, int, int]:
        index, failure = item
        secondary = int(bool(_SECONDARY.search(failure["message"] or "")))
        attempt = failure.get("attempt")
        return (_FAILURE_PRIORITY.get(failure["kind"], 9), secondary, -1 if attempt is None else attempt, index)

    _, chosen = min(enumerate(failures), key=order)
    out = {
        "kind": chosen["kind"],
        "message": chosen["message"],
        "exception": chosen["exception"],
        "node": chosen["node"],
        "file": chosen["file"],
        "line": chosen["line"],
        "rank": chosen["rank"],
        "local_rank": chosen["local_rank"],
        "attempt": chosen.get("attempt"),
        "iteration": chosen.get("iteration"),
        "exitcode": None,
        "signal": None,
        "error": None,
        "error_file": None,
        "error_source": None,
    }
    if chosen["kind"] == "child_failed":
        root = chosen["details"].get("root_cause") or {}
        for name in ("exitcode", "signal", "error", "error_file"):
            out[name] = root.get(name)
        # The root cause often says only "To enable traceback see ...": find the failing rank's own error.
        for other in failures:
            if other["kind"] not in ("oom", "traceback", "nan"):
                continue
            same_rank = out["rank"] is not None and other["rank"] == out["rank"]
            same_local = (
                other["rank"] is None
                and out["local_rank"] is not None
                and other["local_rank"] == out["local_rank"]
                and other["node"] in (None, out["node"])
            )
            if same_rank or same_local:
                if out["error"] is None:
                    out["error"] = other["message"]
                out["error_source"] = {"file": other["file"], "line": other["line"], "kind": other["kind"]}
                break
    elif chosen["kind"] == "worker_exit":
        out["exitcode"] = chosen["details"].get("exitcode")
    else:
        out["error"] = chosen["message"]
    return out
