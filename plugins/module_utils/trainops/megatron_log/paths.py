"""Log files on disk: a torchrun log tree's files found and described (node, attempt, local rank, stream), and
:func:`parse_path`, which streams them through one parser."""

from __future__ import annotations

import gzip
import os
from collections.abc import Sequence
from typing import IO, Any

from .parser import MegatronLogParser, _NoGC
from .patterns import _ATTEMPT_DIR, DEFAULT_WARMUP_ITERATIONS, LOG_SUFFIXES
from .result import MegatronLog, summarize


class LogPathError(ValueError):
    """The path given to :func:`parse_path` does not exist or cannot be read."""


def _open(path: str) -> IO[str]:
    if path.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")  # closed by the caller's with


def _describe(root: str, path: str) -> dict[str, Any]:
    """Node, attempt, local rank and stream of a file from its place in a torchrun log tree.

    torchrun writes ``<log_dir>/<run_id>_<random>/attempt_N/<local_rank>/{stdout,stderr}.log``; several nodes'
    log dirs may be copied under one root, whose first level then names the node. A single file given directly
    still gets its attempt and local rank from its path, but no node (nothing says which part would name it).
    """
    single = not os.path.isdir(root)
    parts = os.path.normpath(path if single else os.path.relpath(path, root)).split(os.sep)
    info: dict[str, Any] = {"path": path, "node": None, "attempt": None, "local_rank": None, "stream": None}
    name = parts[-1]
    base = name[:-3] if name.endswith(".gz") else name
    if base in ("stdout.log", "stderr.log"):
        info["stream"] = base[:-4]
    for i, part in enumerate(parts[:-1]):
        match = _ATTEMPT_DIR.match(part)
        if match is None:
            continue
        info["attempt"] = int(match.group(1))
        if i + 1 < len(parts) - 1 and parts[i + 1].isdigit():
            info["local_rank"] = int(parts[i + 1])
        node_parts = parts[: max(i - 1, 0)]  # what lies above <run_id>_<random>
        info["node"] = "/".join(node_parts) if node_parts and not single else None
        break
    else:
        if len(parts) > 1 and not single:
            info["node"] = parts[0]
    return info


def find_log_files(root: str, exclude: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Every log file under ``root`` (see :data:`LOG_SUFFIXES`) but in its top-level directories named in
    ``exclude`` (a run's earlier attempts), described and in a stable order.

    Order: files outside torchrun's tree first (launcher logs), then by attempt, node, local rank, stdout before
    stderr, path; so each attempt's iterations come after the previous attempt's.
    """
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath == root:
            dirnames[:] = [d for d in dirnames if d not in exclude]
        dirnames.sort()
        for name in sorted(filenames):
            base = name[:-3] if name.endswith(".gz") else name
            if base.endswith(LOG_SUFFIXES):
                found.append(_describe(root, os.path.join(dirpath, name)))

    def order(info: dict[str, Any]) -> tuple:
        return (
            -1 if info["attempt"] is None else info["attempt"],
            info["node"] or "",
            -1 if info["local_rank"] is None else info["local_rank"],
            {"stdout": 0, "stderr": 1}.get(info["stream"] or "", 2),
            info["path"],
        )

    return sorted(found, key=order)


def _read(parser: MegatronLogParser, path: str) -> None:
    """Stream one file into the parser, line by line."""
    with _open(path) as handle:
        parser.feed_lines(handle)


def parse_path(
    path: str | os.PathLike[str],
    *,
    rank: int | None = None,
    seq_length: int | None = None,
    world_size: int | None = None,
    warmup_iterations: int = DEFAULT_WARMUP_ITERATIONS,
    peak_tflops: float | None = None,
    max_records: int | None = None,
    exclude: Sequence[str] = (),
) -> MegatronLog:
    """Parse a log file, or every log file of a directory (a torchrun ``--log_dir``, or several nodes' copies).

    Each file is streamed line by line. For torchrun's tree the attempt, local rank and node come from the path
    and every attempt is read (``attempts`` lists them; every failure names its attempt); the global rank of a
    rank's files is learned from its content (``[Rank R]`` memory lines, ``[rankN]:`` prefixes) and given to the
    failures of both its stdout and stderr. ``rank`` applies to a single file. ``exclude``: top-level
    directories of a directory that are not read (a run's earlier attempts, ``attempt-<k>/``).
    """
    root = os.fspath(path)
    if not os.path.exists(root):
        raise LogPathError(f"{root}: no such file or directory")
    if os.path.isdir(root):
        files = find_log_files(root, exclude)
    elif os.path.isfile(root):
        files = [_describe(root, root)]
    else:
        raise LogPathError(f"{root}: not a regular file or directory")
    parser = MegatronLogParser(max_records=max_records)
    described: list[dict[str, Any]] = []
    groups: dict[tuple, list[tuple[int, dict[str, Any]]]] = {}
    for info in files:
        start = len(parser.failures)
        parser.begin_source(
            info["path"],
            rank=rank if len(files) == 1 else None,
            local_rank=info["local_rank"],
            node=info["node"],
            attempt=info["attempt"],
        )
        try:
            with _NoGC():
                _read(parser, info["path"])
        except OSError as exc:
            raise LogPathError(f"{info['path']}: cannot be read: {exc}") from exc
        result = parser.end_source()
        entry = {**info, **result}
        described.append(entry)
        if info["local_rank"] is not None:
            group = (info["node"], info["attempt"], info["local_rank"])
            groups.setdefault(group, []).append((start, entry))
    for members in groups.values():  # stdout's [Rank R] gives stderr's traceback its rank
        learned = next((e["rank"] for _, e in members if e["rank"] is not None), None)
        if learned is None:
            continue
        for start, entry in members:
            end = start + entry["failures"]
            for failure in parser.failures[start:end]:
                if failure["rank"] is None and failure["kind"] != "child_failed":
                    failure["rank"] = learned
            entry["rank"] = learned
    if len(files) == 1 and rank is None and described and described[0]["rank"] is not None:
        parser.fill_rank(0, described[0]["rank"])
    log = parser.result()
    log.files = described
    log.attempts = sorted({f["attempt"] for f in described if f["attempt"] is not None})
    log.summary = summarize(
        log, seq_length=seq_length, world_size=world_size, warmup_iterations=warmup_iterations, peak_tflops=peak_tflops
    )
    return log
