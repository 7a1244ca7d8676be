"""The testbed fixtures: brought up once per session with the project's own entry points, provisioned once, and
provisioned again only when a check shows that an earlier test left it unfit (a node restarted, a rank left)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from trainops.run_report import INCIDENTS_RECORDED

from testbed import ROOT, env, playbook, unfit

#: Set by tools/test-all.sh (`make test`) once the molecule scenario has passed with the testbed left up: it brought
#: the testbed up (testbed/up.yml) and ran provision.yml on it twice (converge, idempotence) a moment before, so
#: the session starts from that testbed instead of doing both again.
CONVERGED_BY_MOLECULE = os.environ.get("MTT_TESTBED_CONVERGED_BY") == "molecule"


@pytest.fixture(scope="session")
def testbed():
    """N=2 node containers with their own dockerd and sshd; inventory/testbed/ generated.

    `make testbed-up` is idempotent: images are built once (cached by recipe hash); skipped when the molecule
    scenario has just brought the testbed up. The testbed is left up when MTT_KEEP_TESTBED=1, torn down otherwise."""
    if not CONVERGED_BY_MOLECULE:
        result = subprocess.run(["make", "testbed-up"], cwd=ROOT, env=env(), capture_output=True, text=True,
                                timeout=3600)  # fmt: skip
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    yield ROOT / "inventory" / "testbed"
    if os.environ.get("MTT_KEEP_TESTBED") != "1":
        subprocess.run(["make", "testbed-down"], cwd=ROOT, env=env(), capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="session")
def provisioned_once(testbed):
    """provision.yml once for the session (unless the molecule scenario has just converged the testbed and it is
    still fit), then stop.yml: every node provisioned and idle."""
    if not CONVERGED_BY_MOLECULE or unfit():
        result = playbook("provision.yml")
        assert result.returncode == 0, result.stdout[-6000:]
    stop = playbook("stop.yml")
    assert stop.returncode == 0, stop.stdout[-3000:]


@pytest.fixture(scope="module")
def provisioned(provisioned_once):
    """Every node provisioned and idle, shared by the modules: provision.yml and stop.yml run again only when the
    check finds the testbed unfit (a module's own fixture of this name replaces this one)."""
    if problems := unfit():
        result = playbook("provision.yml")
        assert result.returncode == 0, "\n".join(problems) + "\n" + result.stdout[-6000:]
        stop = playbook("stop.yml")
        assert stop.returncode == 0, stop.stdout[-3000:]
        assert not unfit(), f"provision.yml and stop.yml left the testbed unfit: {unfit()}"


@pytest.fixture(autouse=True)
def no_incidents_before(request):
    """Every testbed test starts with an empty incident record in the tests' runs dir: many tests kill a rank on
    node2, and two incidents would leave node2 out of every later test's run (docs/incidents.md). The record a test
    leaves is kept beside the runs, as incidents.jsonl.last-test. A test without the testbed leaves it alone: `make
    test` runs those beside the testbed's, whose record it would move away mid-test."""
    if request.node.get_closest_marker("testbed") is None:
        yield
        return
    record = ROOT / "runs" / "incidents.jsonl"
    if record.exists():
        record.replace(record.with_name("incidents.jsonl.last-test"))
    # and no earlier test's run that ended with no terminal following it is reported by this test's status.yml,
    # with its incidents (status_unfollowed.yml): each is marked as recorded, as the record was emptied
    for plan in (ROOT / "runs").glob("*/*/plan/plan.json"):
        marker = plan.parent.parent / INCIDENTS_RECORDED
        if not marker.exists():
            marker.write_text(json.dumps({"by": "tests/integration/conftest.py, before a test (an earlier test's)"}))
    yield
