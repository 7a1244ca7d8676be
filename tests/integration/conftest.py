"""The testbed fixture: brought up once per session with the project's own entry points."""

from __future__ import annotations

import os
import subprocess

import pytest

from testbed import ROOT, env, playbook


@pytest.fixture(scope="session")
def testbed():
    """N=2 node containers with their own dockerd and sshd; inventory/testbed/ generated.

    `make testbed-up` is idempotent: images are built once (cached by recipe hash). The testbed is left up
    when MTT_KEEP_TESTBED=1, torn down otherwise."""
    result = subprocess.run(["make", "testbed-up"], cwd=ROOT, env=env(), capture_output=True, text=True, timeout=3600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    yield ROOT / "inventory" / "testbed"
    if os.environ.get("MTT_KEEP_TESTBED") != "1":
        subprocess.run(["make", "testbed-down"], cwd=ROOT, env=env(), capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def provisioned(testbed):
    """Every node provisioned and idle (a module's own fixture of this name replaces this one)."""
    result = playbook("provision.yml")
    assert result.returncode == 0, result.stdout[-6000:]
    stop = playbook("stop.yml")
    assert stop.returncode == 0, stop.stdout[-3000:]
