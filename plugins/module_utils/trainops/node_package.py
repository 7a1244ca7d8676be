"""The node package: this project's core and the programs the nodes run, as one versioned, installable unit.

Every program a node runs in its training container (the checks, the scanners, the stop and the log packer, the
smoke job, the dataset builder) lives in ``trainops/node/`` beside the core it may import. provision.yml (and every
playbook that runs one of them) installs the whole ``trainops`` package into the container once per version::

    /opt/mtt-train-ops/<version>/trainops/...      the package, as it was in the checkout
    /opt/mtt-train-ops/<version>/.complete         written last: the version is whole
    /opt/mtt-train-ops/current -> <version>        the newest installed

A version is the hash of the package's files (names and contents), so an edited checkout installs a new one and
an unchanged one installs nothing. A program runs as ``python3 /opt/mtt-train-ops/<version>/trainops/node/X.py``:
a run's files name the version they were launched with, which stays while newer ones are installed (the newest
``KEEP`` are kept). The installer (:mod:`trainops.node.package_install`, sent with ``python3 -c``: the one program that
cannot come from the package) checks the unpacked files against the version with :func:`version` before it
calls them installed.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import os
import tarfile

#: Where the package is installed inside the training container.
ROOT = "/opt/mtt-train-ops"
#: How many versions a container keeps (the newest; a long run's version stays while up to KEEP - 1 newer come).
KEEP = 8


def files(package_dir: str) -> list[str]:
    """The package's files, as paths relative to its parent (``trainops/...``), sorted; caches are not part of it."""
    found = []
    parent = os.path.dirname(os.path.abspath(package_dir))
    for directory, subdirs, names in os.walk(package_dir):
        subdirs[:] = sorted(name for name in subdirs if name != "__pycache__")
        found.extend(os.path.relpath(os.path.join(directory, name), parent) for name in names if name.endswith(".py"))
    return sorted(found)


def version(package_dir: str) -> str:
    """Twelve hex digits of the SHA-256 of the package's file names and contents."""
    digest = hashlib.sha256()
    parent = os.path.dirname(os.path.abspath(package_dir))
    for name in files(package_dir):
        with open(os.path.join(parent, name), "rb") as handle:
            digest.update(name.encode() + b"\0" + handle.read() + b"\0")
    return digest.hexdigest()[:12]


def archive(package_dir: str, expected: str | None = None) -> str:
    """The package as a gzipped tar, base64 text (what the installer reads on stdin); the same bytes each time.
    With ``expected`` (the version pinned when the playbook began), files that no longer hash to it are refused
    (:class:`PackageChanged`): the checkout was edited meanwhile."""
    parent = os.path.dirname(os.path.abspath(package_dir))
    buffer, digest = io.BytesIO(), hashlib.sha256()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in files(package_dir):
            with open(os.path.join(parent, name), "rb") as handle:
                data = handle.read()
            digest.update(name.encode() + b"\0" + data + b"\0")
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    if expected is not None and digest.hexdigest()[:12] != expected:
        raise PackageChanged(
            f"the checkout's node package changed while this playbook ran (version {expected} when it began, "
            f"{digest.hexdigest()[:12]} now: its files under {package_dir} were edited): nothing was installed; "
            "run the playbook again"
        )
    # gzip's header dated 0, not now: the same files give the same bytes in any second
    return base64.b64encode(gzip.compress(buffer.getvalue(), compresslevel=9, mtime=0)).decode()


class PackageChanged(ValueError):
    """The checkout's package is no longer the version pinned for this playbook."""


def programs_dir(package_version: str, root: str = ROOT) -> str:
    """The directory of the node programs of one installed version, in the container."""
    return f"{root}/{package_version}/trainops/node"
