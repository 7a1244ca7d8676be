"""The bundle's Jinja filters as Ansible loads them: every plugins/filter/*.py's FilterModule, merged."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

FILTER_DIR = Path(__file__).resolve().parents[1] / "plugins" / "filter"


def filter_files() -> dict[str, dict[str, Any]]:
    """Each filter file's name -> its filters, loaded by path as Ansible loads them."""
    found = {}
    for path in sorted(FILTER_DIR.glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"bundle_filters_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        found[path.stem] = module.FilterModule().filters()
    return found


def all_filters() -> dict[str, Any]:
    """Every filter by name; a name defined by two files is an error (Ansible would keep one silently)."""
    merged: dict[str, Any] = {}
    for file, filters in filter_files().items():
        twice = sorted(set(merged) & set(filters))
        if twice:
            raise AssertionError(f"{file}.py defines filters another file defines too: {twice}")
        merged.update(filters)
    return merged
