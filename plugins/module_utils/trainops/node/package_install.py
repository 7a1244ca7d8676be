"""Install one version of the node package into this container (stdlib only; sent as ``python3 -c``).

    python3 -c "$(cat package_install.py)" ROOT VERSION KEEP < archive.b64

Reads the package (base64 of a gzipped tar, :func:`trainops.node_package.archive`) from stdin, only when ROOT/VERSION
is not whole yet: when it is, it only marks it used now, and with no package on stdin (empty) and no whole version
it answers ``{"version", "installed": false, "missing": true}`` and changes nothing, so that the package is sent
only to a container that lacks it (roles/node_package). Otherwise it unpacks into a new directory beside it,
checks the files against VERSION with the package's own :func:`trainops.node_package.version`, marks the directory
whole and renames it into place. Either way it points ROOT/current at it and removes the versions least recently used
beyond KEEP, but never one that a live process runs from (a supervisor, a smoke job's ranks). One JSON line answers:
``{"version", "installed", "pruned"}``; a failure is said on stderr with exit status 1 and leaves no version that
looks whole.
"""

import base64
import binascii
import io
import json
import os
import shutil
import sys
import tarfile
import tempfile
import zlib


def whole(path):
    return os.path.isfile(os.path.join(path, ".complete"))


def unpack(data, into):
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar.getmembers():
            if not member.isfile() or member.name.startswith("/") or ".." in member.name.split("/"):
                raise ValueError(f"the archive holds {member.name!r}, which is not a file of the package")
        tar.extractall(into)


def check(into, wanted):
    sys.path.insert(0, into)
    try:
        from trainops import node_package  # the version's own code, just unpacked

        found = node_package.version(os.path.join(into, "trainops"))
    finally:
        sys.path.remove(into)
    if found != wanted:
        raise ValueError(f"the unpacked files hash to {found}, not {wanted}: the archive was cut short or altered")


def point_current(root, wanted):
    link = os.path.join(root, "current")
    new = os.path.join(root, f".current.{os.getpid()}")
    os.symlink(wanted, new)
    os.replace(new, link)


def in_use(root):
    """The versions a live process of this container runs from (its command line names ROOT/<version>/)."""
    used = set()
    prefix = root.rstrip("/").encode() + b"/"
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    cmdline = handle.read()
            except OSError:
                continue
            for part in cmdline.split(b"\0"):
                if part.startswith(prefix):
                    used.add(part[len(prefix) :].split(b"/", 1)[0].decode(errors="replace"))
    return used


def prune(root, wanted, keep):
    versions = [
        name
        for name in os.listdir(root)
        if not name.startswith(".") and name != "current" and whole(os.path.join(root, name))
    ]
    versions.sort(key=lambda name: os.path.getmtime(os.path.join(root, name, ".complete")), reverse=True)
    busy = in_use(root)
    old = [name for name in versions if name != wanted][max(keep - 1, 0) :]
    old = [name for name in old if name not in busy]
    for name in old:
        shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    return old


#: The oldest Python the package runs on (the core's dataclasses need 3.10).
PYTHON = (3, 10)


def main(argv):
    root, wanted, keep = argv[0], argv[1], int(argv[2])
    if sys.version_info < PYTHON:
        raise ValueError(
            f"the package needs Python {'.'.join(map(str, PYTHON))} or newer as python3; the container "
            f"has {sys.version.split()[0]} ({sys.executable})"
        )
    target = os.path.join(root, wanted)
    if whole(target):
        os.utime(os.path.join(target, ".complete"))  # used now: the last to be pruned
        if os.path.realpath(os.path.join(root, "current")) != os.path.realpath(target):
            point_current(root, wanted)
        return {"version": wanted, "installed": False, "pruned": prune(root, wanted, keep)}
    text = sys.stdin.read()
    if not text.strip():
        return {"version": wanted, "installed": False, "missing": True}
    os.makedirs(root, exist_ok=True)
    work = tempfile.mkdtemp(prefix=f".{wanted}.", dir=root)
    try:
        unpack(base64.b64decode(text.strip(), validate=True), work)  # docker exec adds a newline
        check(work, wanted)
        with open(os.path.join(work, ".complete"), "w") as handle:
            handle.write(wanted + "\n")
        os.chmod(work, 0o755)
        if os.path.lexists(target) and not whole(target):  # left part-way by an earlier, interrupted install
            shutil.rmtree(target)
        try:
            os.rename(work, target)
        except OSError:
            if not whole(target):  # else another install of the same version finished first
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    point_current(root, wanted)
    return {"version": wanted, "installed": True, "pruned": prune(root, wanted, keep)}


if __name__ == "__main__":
    try:
        print(json.dumps(main(sys.argv[1:])))
    except (OSError, ValueError, EOFError, zlib.error, binascii.Error, tarfile.TarError, IndexError) as exc:
        sys.exit(f"package_install.py: {type(exc).__name__}: {exc}")
