"""Action plugin: wait for a submitted Slurm job to get its nodes, printing its place in the queue.

Every ``poll_interval`` seconds it runs ``squeue`` on the task's host (a node of the ``slurm_login`` group) and
prints the job's state and reason when they change, and every ``progress_interval`` seconds while they do not
(``job 12 PENDING (Resources)``). When the job runs, ``scontrol show hostnames`` expands its node list in Slurm's
order (``SLURM_NODEID`` 0, 1, ...) and the result maps each Slurm node to its inventory host. A job that ends
before it runs fails the task with sacct's account of it; a job still queued after ``timeout`` seconds is
cancelled (``scancel``) and the task fails, saying why it waited. The module file
(plugins/modules/slurm_wait.py) holds the documentation.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from typing import Any

_CORE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _CORE not in sys.path:
    sys.path.insert(0, _CORE)

from ansible.errors import AnsibleConnectionFailure  # noqa: E402
from ansible.plugins.action import ActionBase  # noqa: E402
from ansible.utils.display import Display  # noqa: E402
from trainops import slurm  # noqa: E402

display = Display()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("job_id", "inventory", "timeout", "poll_interval", "progress_interval"))

    def _run(self, argv: list[str]) -> dict[str, Any]:
        command = " ".join(shlex.quote(part) for part in argv)
        try:
            done = self._low_level_execute_command(command, sudoable=True)
        except AnsibleConnectionFailure as exc:
            return {"rc": None, "stdout": "", "stderr": str(exc)}
        return {"rc": done.get("rc"), "stdout": done.get("stdout", ""), "stderr": done.get("stderr", "")}

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        args = self._task.args
        job_id = str(args["job_id"]).strip()
        inventory = dict(args.get("inventory") or {})
        timeout = float(args.get("timeout", 3600))
        poll = max(1.0, float(args.get("poll_interval", 3)))
        every = max(poll, float(args.get("progress_interval", 30)))
        host = (task_vars or {}).get("inventory_hostname", "the login node")

        started = time.monotonic()
        last_line, printed_at, failures = None, 0.0, 0
        history: list[str] = []
        while True:
            reply = self._run(["squeue", "--noheader", "--jobs", job_id, f"--format={slurm.SQUEUE_FORMAT}"])
            jobs = slurm.parse_queue(reply["stdout"]) if reply["rc"] == 0 else []
            if reply["rc"] != 0 and "Invalid job id" not in reply["stderr"]:
                failures += 1
                if failures >= 3:
                    result.update(failed=True, msg=f"{host}: squeue does not answer: {reply['stderr'].strip()}")
                    return result
                time.sleep(poll)
                continue
            failures = 0
            job = next((j for j in jobs if j["job_id"] == job_id), None)
            waited = time.monotonic() - started
            if job is None or job["state"] not in slurm.ACTIVE:
                # The job ended before it ran (or between two polls): sacct says how.
                record = self._accounting(job_id)
                text = slurm.accounting_text(record) if record else f"Slurm job {job_id} left the queue"
                result.update(
                    failed=True,
                    job_id=job_id,
                    slurm=record,
                    history=history,
                    msg=f"{text} before train.yml started the run: nothing was launched",
                )
                return result
            line = slurm.queue_line(job)
            now = time.monotonic()
            if line != last_line or now - printed_at >= every:
                display.display(f"{host}: {line}, waited {waited:.0f} s")
                if line != last_line:
                    history.append(line)
                last_line, printed_at = line, now
            if job["state"] == "RUNNING" and job["nodelist"]:
                names = self._run(["scontrol", "show", "hostnames", job["nodelist"]])
                if names["rc"] != 0:
                    result.update(failed=True, msg=f"{host}: scontrol show hostnames failed: {names['stderr'].strip()}")
                    return result
                slurm_nodes = names["stdout"].split()
                hosts, unknown = slurm.allocation_hosts(slurm_nodes, inventory)
                result.update(
                    job_id=job_id,
                    slurm_nodes=slurm_nodes,
                    hosts=hosts,
                    unknown=unknown,
                    waited_s=round(waited, 1),
                    history=history,
                    changed=False,
                )
                return result
            if waited >= timeout:
                self._run(["scancel", job_id])
                result.update(
                    failed=True,
                    job_id=job_id,
                    history=history,
                    msg=f"Slurm job {job_id} did not start within {timeout:.0f} s ({line}); train.yml cancelled "
                    "it. Free the nodes, or wait longer with -e slurm_queue_timeout=SECONDS",
                )
                return result
            time.sleep(poll)

    def _accounting(self, job_id: str) -> dict[str, str] | None:
        for _ in range(10):
            reply = self._run(["sacct", "--jobs", job_id, *slurm.SACCT_ARGS])
            record = slurm.parse_accounting(reply["stdout"], job_id) if reply["rc"] == 0 else None
            if record and record["state"] not in slurm.ACTIVE:
                return record
            time.sleep(1)
        return None
