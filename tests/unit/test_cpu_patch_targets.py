"""The testbed's CPU patch of Megatron-LM still has something to patch: every target it declares exists.

The patch (testbed/images/training-suite-standin/rootfs/home/megatron-lm-musa-patch/) replaces functions and
attributes of Megatron-LM from outside. A Megatron version that moves or renames one of them would make a patch
a silent no-op, so each declared target is checked here against the tree's source, read as text and parsed
with ast (no torch needed): the line holds the declared text, and the declared symbol is defined in that file
around that line. The tree is third_party/Megatron-LM (`make megatron-src`), else the vendored tarball.
"""

from __future__ import annotations

import ast
import importlib.util
import io
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PATCH_DIR = ROOT / "testbed" / "images" / "training-suite-standin" / "rootfs" / "home" / "megatron-lm-musa-patch"
TREE = ROOT / "third_party" / "Megatron-LM"
TARBALL = ROOT.parent / "shared" / "vendor" / "megatron-lm-core_v0.14.0.tar.gz"


def _load_targets():
    spec = importlib.util.spec_from_file_location("patch_targets", PATCH_DIR / "patch_targets.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


TARGETS = _load_targets()


class Tree:
    """Megatron-LM's source files, from the directory or from the tarball (prefix Megatron-LM/)."""

    def __init__(self):
        self._tar = None
        if (TREE / "pretrain_gpt.py").is_file():
            self.where = str(TREE)
        elif TARBALL.is_file():
            self.where = str(TARBALL)
            self._tar = tarfile.open(TARBALL)
        else:
            pytest.skip(f"no Megatron-LM tree: neither {TREE} (make megatron-src) nor {TARBALL}")
        self._cache: dict[str, str] = {}

    def read(self, path: str) -> str:
        if path not in self._cache:
            if self._tar is None:
                file = TREE / path
                assert file.is_file(), f"{path} is not in the Megatron tree {self.where}"
                self._cache[path] = file.read_text()
            else:
                try:
                    member = self._tar.extractfile(f"Megatron-LM/{path}")
                except KeyError:
                    member = None
                assert member is not None, f"{path} is not in the Megatron tree {self.where}"
                self._cache[path] = io.TextIOWrapper(member, encoding="utf-8").read()
        return self._cache[path]


@pytest.fixture(scope="module")
def tree():
    return Tree()


def _definitions(source: str) -> dict[str, tuple[int, int]]:
    """Every name a module defines -> (first line, last line): functions, classes, Class.method, assignments,
    imports."""
    found: dict[str, tuple[int, int]] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found[node.name] = (node.lineno, node.end_lineno)
        elif isinstance(node, ast.ClassDef):
            found[node.name] = (node.lineno, node.end_lineno)
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    found[f"{node.name}.{item.name}"] = (item.lineno, item.end_lineno)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                found[alias.asname or alias.name.split(".")[0]] = (node.lineno, node.end_lineno)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = (node.lineno, node.end_lineno)
    return found


ALL = [(name, target) for name, patch in TARGETS.PATCHES.items() for target in patch.targets]


@pytest.mark.parametrize(("patch", "target"), ALL, ids=[f"{n}:{t.path}:{t.line}" for n, t in ALL])
def test_each_patched_megatron_target_still_exists(tree, patch, target):
    lines = tree.read(target.path).splitlines()
    where = f"{target.path}:{target.line} (patch {patch!r}, Megatron {TARGETS.MEGATRON_TAG}, tree {tree.where})"
    assert target.line <= len(lines), f"{where}: the file has only {len(lines)} lines"
    assert target.text in lines[target.line - 1], (
        f"{where}: expected {target.text!r} on that line, found {lines[target.line - 1].strip()!r}; "
        "the patch and its table in patch_targets.py must follow the Megatron version"
    )
    if target.symbol:
        defined = _definitions(tree.read(target.path))
        assert target.symbol in defined, f"{where}: {target.symbol} is no longer defined in {target.path}"
        first, last = defined[target.symbol]
        assert first <= target.line <= last, f"{where}: the line is outside {target.symbol} (lines {first}-{last})"


def test_every_patch_is_declared_and_every_declared_patch_exists():
    """cpu_patch.py's @patch("name") functions and patch_targets.PATCHES name the same patches."""
    source = (PATCH_DIR / "cpu_patch.py").read_text()
    registered = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef):
            for deco in node.decorator_list:
                if isinstance(deco, ast.Call) and getattr(deco.func, "id", "") == "patch" and deco.args:
                    registered.add(deco.args[0].value)
    assert registered == set(TARGETS.PATCHES), (registered, set(TARGETS.PATCHES))
    readme = (PATCH_DIR / "README.md").read_text()
    for name, patch in TARGETS.PATCHES.items():
        assert f"`{name}`" in readme, f"README.md's table lacks the patch {name}"
        for target in patch.targets:
            assert f"{target.path}:{target.line}" in readme, f"README.md lacks {target.path}:{target.line} ({name})"


def test_the_patch_table_needs_no_torch():
    source = (PATCH_DIR / "patch_targets.py").read_text()
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")])
    }
    assert imported <= {"__future__", "dataclasses"}, imported
