"""Jinja filters over the core's node package (trainops.node_package): its version, its archive, its programs."""

from __future__ import annotations

import os
import sys

_CORE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _CORE not in sys.path:
    sys.path.insert(0, _CORE)

from ansible.errors import AnsibleFilterError  # noqa: E402
from trainops import node_package  # noqa: E402

#: Where the archive of the checkout's version is kept between playbooks (git-ignored).
CACHE = os.path.join(".cache", "node-package")


def package_dir(project_dir: str) -> str:
    return os.path.join(project_dir, "plugins", "module_utils", "trainops")


def package(project_dir: str) -> dict[str, object]:
    """``{version, root, keep, programs}`` of the node package of the checkout at ``project_dir`` (``programs``:
    their directory in the container)."""
    try:
        version = node_package.version(package_dir(project_dir))
    except node_package.MissingLibrary as exc:
        raise AnsibleFilterError(str(exc)) from exc
    return {
        "version": version,
        "root": node_package.ROOT,
        "keep": node_package.KEEP,
        "programs": node_package.programs_dir(version),
    }


def archive(project_dir: str, version: str | None = None) -> str:
    """The package's archive, refused when its files no longer hash to ``version`` (pinned by inputs.yml)."""
    try:
        return node_package.archive(package_dir(project_dir), version, os.path.join(project_dir, CACHE))
    except (node_package.PackageChanged, node_package.MissingLibrary) as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    """mtt-train-ops filters: the node package."""

    def filters(self) -> dict[str, object]:
        return {"trainops_node_package": package, "trainops_node_package_archive": archive}
