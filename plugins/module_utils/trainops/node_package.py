"""The node package: this project's core and the programs the nodes run, as one versioned, installable unit.

Every program a node runs in its training container (the checks, the scanners, the stop and the log packer, the
smoke job, the dataset builder) lives in ``trainops/node/`` beside the core it may import. provision.yml (and every
playbook that runs one of them) installs the whole ``trainops`` package into the container once per version::

    /opt/mtt-train-ops/<version>/trainops/...      the package, as it was in the checkout
    /opt/mtt-train-ops/<version>/prometheus_client/...   each library of LIBRARIES, as the controller has it
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
import contextlib
import gzip
import hashlib
import importlib.util
import io
import os
import sys
import tarfile
import tempfile
import time

#: Where the package is installed inside the training container.
ROOT = "/opt/mtt-train-ops"
#: How many versions a container keeps (the newest; a long run's version stays while up to KEEP - 1 newer come).
KEEP = 8
#: Seconds after which a file of the archive cache that is not the current archive is a killed writer's leftover.
STALE_TMP_S = 600


#: Third-party libraries the node programs import, shipped in the package beside ``trainops`` so that a training
#: image need not have them: prometheus-client (the run supervisor's metrics endpoint, the card exporter), and
#: Apprise with what it imports (the supervisor's notifications, -e notify). Each is taken from beside the package
#: when that is an installed version, else from where this Python imports it (on the controller: the venv of
#: requirements.txt, so its pinned version is the one the nodes get). Only their Python files go, so a library with
#: an optional compiled part (PyYAML, charset-normalizer) runs as pure Python on any node's Python.
LIBRARIES = (
    "prometheus_client", "apprise", "requests", "urllib3", "idna", "charset_normalizer", "certifi",
    "requests_oauthlib", "oauthlib", "yaml", "markdown",
)  # fmt: skip
#: The files beside the Python files that a library needs: certifi's CA bundle (HTTPS to a notification service).
DATA = {"certifi": ("cacert.pem",)}


class MissingLibrary(ValueError):
    """A library of :data:`LIBRARIES` is neither beside the package nor importable here."""


def _tops(package_dir: str) -> list[tuple[str, str]]:
    """Each top-level directory of the package and where its files lie: the core, then each library."""
    package_dir = os.path.abspath(package_dir)
    parent = os.path.dirname(package_dir)
    tops = [(os.path.basename(package_dir), package_dir)]
    for name in LIBRARIES:
        beside = os.path.join(parent, name)
        if os.path.isdir(beside):
            tops.append((name, beside))
            continue
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise MissingLibrary(
                f"the node package needs the library {name}, which {sys.executable} cannot import: run `make setup` "
                "(it installs requirements.txt into .venv) and use that venv's ansible-playbook"
            )
        tops.append((name, list(spec.submodule_search_locations)[0]))
    return tops


def _listing(package_dir: str) -> list[tuple[str, str]]:
    """``(name in the package, path here)`` of every file, sorted by name; caches are not part of it."""
    found = []
    for top, where in _tops(package_dir):
        for directory, subdirs, names in os.walk(where):
            subdirs[:] = sorted(name for name in subdirs if name != "__pycache__")
            for name in names:
                if name.endswith(".py") or name in DATA.get(top, ()):
                    path = os.path.join(directory, name)
                    found.append((os.path.join(top, os.path.relpath(path, where)), path))
    return sorted(found)


def files(package_dir: str) -> list[str]:
    """The package's files, as paths relative to its root (``trainops/...``, ``prometheus_client/...``), sorted."""
    return [name for name, _ in _listing(package_dir)]


def version(package_dir: str) -> str:
    """Twelve hex digits of the SHA-256 of the package's file names and contents (its libraries' too)."""
    digest = hashlib.sha256()
    for name, path in _listing(package_dir):
        with open(path, "rb") as handle:
            digest.update(name.encode() + b"\0" + handle.read() + b"\0")
    return digest.hexdigest()[:12]


def archive(package_dir: str, expected: str | None = None, cache_dir: str | None = None) -> str:
    """The package as a gzipped tar, base64 text (what the installer reads on stdin); the same bytes each time.
    With ``expected`` (the version pinned when the playbook began), files that no longer hash to it are refused
    (:class:`PackageChanged`): the checkout was edited meanwhile. With ``cache_dir`` too, the archive of that
    version is kept there (the newest only) and read from there again: every playbook installs the same version
    on every node, and building it takes about a second."""
    cached = os.path.join(cache_dir, f"{expected}.b64") if cache_dir and expected else None
    if cached and os.path.isfile(cached):
        with open(cached, encoding="ascii") as handle:
            return handle.read()
    text = _archive(package_dir, expected)
    if cached:
        os.makedirs(cache_dir, exist_ok=True)
        # other versions' archives, and what a killed writer left; not the temporary file of another writer now (a
        # playbook's hosts build the archive at once, in parallel workers)
        for old in os.listdir(cache_dir):
            path = os.path.join(cache_dir, old)
            with contextlib.suppress(OSError):
                if (old.endswith(".b64") and path != cached) or time.time() - os.path.getmtime(path) > STALE_TMP_S:
                    os.remove(path)
        with tempfile.NamedTemporaryFile("w", dir=cache_dir, suffix=".tmp", delete=False, encoding="ascii") as tmp:
            tmp.write(text)
        os.replace(tmp.name, cached)  # whole or not there: two writers at once write the same bytes
    return text


def _archive(package_dir: str, expected: str | None) -> str:
    buffer, digest = io.BytesIO(), hashlib.sha256()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, path in _listing(package_dir):
            with open(path, "rb") as handle:
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
    return base64.b64encode(gzip.compress(buffer.getvalue(), compresslevel=6, mtime=0)).decode()


class PackageChanged(ValueError):
    """The checkout's package is no longer the version pinned for this playbook."""


def programs_dir(package_version: str, root: str = ROOT) -> str:
    """The directory of the node programs of one installed version, in the container."""
    return f"{root}/{package_version}/trainops/node"
