"""The table of failure kinds: every kind the code can end a run with is in it, and docs/train.md shows it."""

from __future__ import annotations

import re
from pathlib import Path

from trainops import kinds, recovery
from trainops.megatron_log import failures

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "plugins" / "module_utils" / "trainops"

#: Where each source's kinds are written, and how.
EMITTED = {
    "watcher": (CORE / "watch.py", r'_failed\(\s*"([a-z_ ]+)"'),
    "launch": (CORE / "outcome.py", r'"kind": "([a-z_ ]+)"'),
    "slurm": (CORE / "slurm.py", r'kind="([a-z_ ]+)"'),
    "report": (CORE / "run_report.py", r'"kind": "([a-z_ ]+)"'),
    "log": (CORE / "megatron_log", r'(?:_add_failure\(\s*|return |_classify\(message\) or )"([a-z_]+)"'),
}


def _written(path: Path, pattern: str) -> set[str]:
    files = sorted(path.glob("*.py")) if path.is_dir() else [path]
    return {m for f in files for m in re.findall(pattern, f.read_text())}


def test_every_kind_the_code_writes_is_in_the_table():
    for source, (path, pattern) in EMITTED.items():
        written = _written(path, pattern)
        assert written, f"no {source} kind found in {path}: the pattern is stale"
        stray = {k for k in written if k not in kinds.KINDS or kinds.KINDS[k].source not in (source, "watcher")}
        if source == "report":  # the report repeats the watcher's hang as the failure's kind
            stray -= {"hang"}
        assert not stray, f"{source} kinds missing from trainops.kinds.KINDS: {sorted(stray)}"


def test_every_kind_in_the_table_is_written_somewhere():
    written = {k for path, pattern in EMITTED.values() for k in _written(path, pattern)}
    assert set(kinds.KINDS) - written == set()


def test_readers_take_the_table():
    assert recovery.RETRIED_OUTCOMES == ("exited", "killed", "lost", "hang")
    assert set(recovery.NEVER_RETRIED_KINDS) == {"oom"}
    assert failures._FATAL_KINDS == ("child_failed", "oom", "traceback", "worker_exit")
    assert sorted(failures._FAILURE_PRIORITY, key=failures._FAILURE_PRIORITY.get)[0] == "child_failed"
    assert all(kind.source in kinds.SOURCES for kind in kinds.KINDS.values())


def test_the_guide_shows_the_table():
    assert kinds.markdown_table() in (ROOT / "docs" / "train.md").read_text()
