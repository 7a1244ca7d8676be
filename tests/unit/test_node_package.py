"""The node package (trainops.node_package) and its installer (trainops/node/package_install.py), run here as the
node_package role runs the installer in a container: ``python3 -c "<installer>" ROOT VERSION KEEP`` with the
archive on stdin, into a temporary directory instead of /opt/mtt-train-ops."""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from trainops import node_package

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "plugins" / "module_utils" / "trainops"
INSTALLER = (PACKAGE / "node" / "package_install.py").read_text()


def install(root: Path, version: str, archive: str, keep: int = node_package.KEEP) -> subprocess.CompletedProcess:
    # docker exec, as community.docker sends it, ends stdin with a newline
    return subprocess.run([sys.executable, "-c", INSTALLER, str(root), version, str(keep)], input=archive + "\n",
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def copy_package(tmp_path: Path, name: str) -> Path:
    copy = tmp_path / name / "trainops"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def three_versions(tmp_path: Path) -> list[tuple[str, str]]:
    """(version, archive) of three copies of the package, each with a file of its own."""
    versions = []
    for index in range(3):
        copy = copy_package(tmp_path, f"v{index}")
        (copy / "node" / "marker.py").write_text(f"VERSION = {index}\n")
        versions.append((node_package.version(str(copy)), node_package.archive(str(copy))))
    return versions


def test_the_package_holds_the_core_and_every_node_program_and_no_cache(tmp_path):
    names = node_package.files(str(PACKAGE))
    assert "trainops/watch.py" in names and "trainops/megatron_log/parser.py" in names
    for program in ("checkpoint_scan", "run_groups", "rank_probe", "pack_logs", "smoke_train", "build_dataset",
                    "node_facts", "package_install"):  # fmt: skip
        assert f"trainops/node/{program}.py" in names
    # Python files only (no cache, no compiled part of a library), and the one data file a library needs
    assert [name for name in names if "__pycache__" in name or not name.endswith(".py")] == ["certifi/cacert.pem"]
    assert not [name for name in names if name.endswith(".so")]
    # the libraries the node programs import, whatever the training image has: the supervisor's metrics
    assert "prometheus_client/__init__.py" in names and "prometheus_client/exposition.py" in names
    # and its notifications (Apprise, with the JSON webhook's plugin and what it sends with)
    assert {"apprise/__init__.py", "apprise/plugins/custom_json.py", "requests/api.py", "urllib3/__init__.py"} <= set(
        names
    )
    assert {name.split("/")[0] for name in names} == {"trainops", *node_package.LIBRARIES}


def test_the_version_follows_the_contents_and_names_not_times(tmp_path):
    copy = copy_package(tmp_path, "a")
    version = node_package.version(str(copy))
    assert version == node_package.version(str(PACKAGE)) and len(version) == 12
    os.utime(copy / "watch.py", (0, 0))
    (copy / "__pycache__").mkdir(exist_ok=True)
    (copy / "__pycache__" / "watch.cpython-311.pyc").write_bytes(b"x")
    assert node_package.version(str(copy)) == version
    (copy / "node" / "run_groups.py").write_text((copy / "node" / "run_groups.py").read_text() + "# edited\n")
    assert node_package.version(str(copy)) != version
    assert node_package.archive(str(copy)) != node_package.archive(str(PACKAGE))
    assert node_package.archive(str(PACKAGE)) == node_package.archive(str(PACKAGE))
    assert base64.b64decode(node_package.archive(str(PACKAGE)))[4:8] == bytes(4)  # gzip's date: 0, not now
    # the archive of a playbook that pinned the version before the edit is refused, naming both versions
    assert node_package.archive(str(copy), node_package.version(str(copy))) == node_package.archive(str(copy))
    with pytest.raises(node_package.PackageChanged, match=f"version {version} when it began, [0-9a-f]{{12}} now"):
        node_package.archive(str(copy), version)


def test_installs_once_per_version_checks_it_and_points_current_at_it(tmp_path):
    root = tmp_path / "opt"
    version, archive = node_package.version(str(PACKAGE)), node_package.archive(str(PACKAGE))
    done = install(root, version, archive)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"version": version, "installed": True, "pruned": []}
    assert (root / version / ".complete").read_text() == version + "\n"
    assert os.readlink(root / "current") == version
    assert [p.name for p in root.iterdir() if p.name.startswith(".")] == []
    # the installed programs run from there as the roles run them, importing the installed core
    scanned = subprocess.run([sys.executable, str(root / version / "trainops/node/checkpoint_scan.py"), "scan",
                              str(tmp_path / "none")], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert scanned.returncode == 0 and json.loads(scanned.stdout)["saves"] == [], scanned.stderr
    check = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                            "from trainops import node_package as p; print(p.version(sys.argv[1] + '/trainops'))",
                            str(root / version)], capture_output=True, text=True)  # fmt: skip
    assert check.stdout.strip() == version
    # the shipped library is imported from the installed version, not from this Python's own site-packages
    library = subprocess.run([sys.executable, "-S", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                              "import prometheus_client; print(prometheus_client.__file__)", str(root / version)],
                             capture_output=True, text=True)  # fmt: skip
    assert library.stdout.strip() == str(root / version / "prometheus_client" / "__init__.py"), library.stderr
    again = install(root, version, archive)
    assert json.loads(again.stdout) == {"version": version, "installed": False, "pruned": []}
    # roles/node_package asks first with no package on stdin: a whole version is used as it is, a missing one is
    # said, and nothing is written until the package comes
    assert json.loads(install(root, version, "").stdout) == {"version": version, "installed": False, "pruned": []}
    lacking = install(tmp_path / "empty", version, "")
    assert json.loads(lacking.stdout) == {"version": version, "installed": False, "missing": True}, lacking.stderr
    assert not (tmp_path / "empty").exists()


def test_a_cut_short_or_altered_archive_installs_nothing_that_looks_whole(tmp_path):
    root = tmp_path / "opt"
    version, archive = node_package.version(str(PACKAGE)), node_package.archive(str(PACKAGE))
    cut = install(root, version, archive[: len(archive) // 2])
    assert cut.returncode == 1 and cut.stderr.startswith("package_install.py: ")
    assert not (root / version).exists() and [p.name for p in root.iterdir()] == []
    wrong = install(root, "0123456789ab", archive)
    assert wrong.returncode == 1 and f"hash to {version}, not 0123456789ab" in wrong.stderr
    assert not (root / "0123456789ab").exists()
    # an archive with a path out of the package is refused before anything is written
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("../escape.py")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    bad = install(root, version, base64.b64encode(buffer.getvalue()).decode())
    assert bad.returncode == 1 and "'../escape.py'" in bad.stderr and not (tmp_path / "escape.py").exists()


def test_an_interrupted_install_is_replaced_and_the_oldest_versions_pruned(tmp_path):
    root = tmp_path / "opt"
    versions = three_versions(tmp_path)
    (root / versions[0][0]).mkdir(parents=True)  # left part-way: no .complete
    (root / versions[0][0] / "half.py").write_text("")
    assert install(root, *versions[0], keep=2).returncode == 0
    assert not (root / versions[0][0] / "half.py").exists()
    assert install(root, *versions[1], keep=2).returncode == 0
    os.utime(root / versions[0][0] / ".complete", (1, 1))  # the oldest
    third = install(root, *versions[2], keep=2)
    assert json.loads(third.stdout)["pruned"] == [versions[0][0]]
    assert sorted(p.name for p in root.iterdir()) == sorted([versions[1][0], versions[2][0], "current"])


def test_a_version_used_again_is_current_and_one_a_live_process_runs_from_is_never_pruned(tmp_path):
    root = tmp_path / "opt"
    versions = three_versions(tmp_path)
    for version in versions[:2]:
        assert install(root, *version, keep=2).returncode == 0
    # a long run's supervisor runs from the first version
    runner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                               f"{root}/{versions[0][0]}/trainops/node/supervise.py"])  # fmt: skip
    try:
        third = install(root, *versions[2], keep=1)
        assert json.loads(third.stdout)["pruned"] == [versions[1][0]]  # the first is in use: kept
        assert (root / versions[0][0] / ".complete").is_file()
    finally:
        runner.kill()
        runner.wait()
    # the first again (a playbook of an older checkout): nothing unpacked, it is current, and the newest used
    again = install(root, *versions[0], keep=1)
    assert json.loads(again.stdout) == {"version": versions[0][0], "installed": False, "pruned": [versions[2][0]]}
    assert os.readlink(root / "current") == versions[0][0]


def test_the_archive_of_a_version_is_built_once_and_kept_alone_in_the_cache(tmp_path):
    copy, cache = copy_package(tmp_path, "a"), tmp_path / "cache"
    version = node_package.version(str(copy))
    built = node_package.archive(str(copy), version, str(cache))
    assert [p.name for p in cache.iterdir()] == [f"{version}.b64"] and (cache / f"{version}.b64").read_text() == built
    # the pinned version's archive is what was built for it, even after an edit of the checkout
    (copy / "watch.py").write_text((copy / "watch.py").read_text() + "# edited\n")
    assert node_package.archive(str(copy), version, str(cache)) == built
    newer = node_package.version(str(copy))
    assert node_package.archive(str(copy), newer, str(cache)) != built
    assert [p.name for p in cache.iterdir()] == [f"{newer}.b64"]  # the older version's archive is gone
    with pytest.raises(node_package.PackageChanged):  # without a cached archive, an edit is refused as before
        node_package.archive(str(copy), version, str(tmp_path / "empty"))


def test_building_the_archive_leaves_another_writers_file_alone(tmp_path):
    """A playbook's hosts build the archive at once, in parallel workers: one that finds no archive must not remove
    the temporary file another is writing (seen: provision.yml failing on node2 with the file gone under it); a
    killed writer's leftover, older than STALE_TMP_S, is removed."""
    copy, cache = copy_package(tmp_path, "a"), tmp_path / "cache"
    cache.mkdir()
    writing, left = cache / "tmpwriting.tmp", cache / "tmpleft.tmp"
    for path in (writing, left):
        path.write_text("partial")
    old = time.time() - node_package.STALE_TMP_S - 60
    os.utime(left, (old, old))
    version = node_package.version(str(copy))
    node_package.archive(str(copy), version, str(cache))
    assert sorted(p.name for p in cache.iterdir()) == sorted([f"{version}.b64", writing.name])
