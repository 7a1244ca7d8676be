"""Every kind of failure a run can end with: where it is found, whether a restart may cure it, what a user reads.

One table (:data:`KINDS`), read by recovery (which kinds a restart may cure), the log parser (which of its kinds
end a run, and which names the root cause first), the report and the watcher, and held to docs/train.md's table by
a unit test. A new kind is a row here plus the code that finds it.

Sources:

* ``watcher``: the watcher's verdict on the nodes' launch states and the hang clock (:mod:`.watch`);
* ``launch``: the fan-out from the master failed before anything was watched (:mod:`.outcome`);
* ``slurm``: Slurm's account of the job (:mod:`.slurm`);
* ``log``: the ranks' own logs (:mod:`.megatron_log`), the error behind a run that failed;
* ``report``: the report's name for a failure the logs do not explain (:mod:`.run_report`).

``restart``: for a watcher, launch or Slurm kind, whether train.yml starts another attempt (``-e max_restarts``);
for a log kind, False when the error fails the same way again whatever the watcher saw.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    name: str
    source: str
    restart: bool
    text: str
    #: Log kinds: whether the error ends the run (not a NaN the run goes on after) and its rank as a root cause.
    fatal: bool = True
    priority: int = 9


_ROWS = (
    Kind("exited", "watcher", True, "a node's torchrun exited non-zero"),
    Kind("killed", "watcher", True, "a node's launch vanished without an exit status (killed)"),
    Kind("lost", "watcher", True, "a node stayed unreachable for two probes (the master's, or from the master)"),
    Kind("hang", "watcher", True, "no iteration line for the hang limit; diagnose.sh named the culprit rank"),
    Kind("not started", "watcher", False, "a node's launch did not start within start_timeout"),
    Kind("stopped", "watcher", False, "stop.yml removed the run's restart mark: the attempt is stopped too"),
    Kind("launch", "launch", False, "the fan-out from the master failed before the run started"),
    Kind("timeout", "slurm", False, "the Slurm job reached its --time (-e slurm_time); not a crash"),
    Kind("cancelled", "slurm", False, "the Slurm job was cancelled outside stop.yml (scancel, preemption)"),
    Kind("node_fail", "slurm", False, "Slurm lost a node of the job and ended it"),
    Kind("child_failed", "log", True, "torch.distributed.elastic's ChildFailedError summary of a failed rank",
         priority=0),
    Kind("oom", "log", False, "out of memory: the same layout runs out again (lower mbs, recompute more, or raise "
         "tp/pp)", priority=1),
    Kind("traceback", "log", True, "a Python traceback of a rank", priority=2),
    Kind("worker_exit", "log", True, "torchrun's line on a worker that exited", priority=3),
    Kind("nan", "log", True, "a NaN in the loss (the run goes on; Megatron skips the iteration)", fatal=False,
         priority=4),
    Kind("node", "report", False, "a node lost during the run; its ranks' peers only lost their connections"),
    Kind("watch", "report", False, "the watcher's verdict, where the logs show no error"),
)  # fmt: skip

#: Every failure kind by name.
KINDS: dict[str, Kind] = {kind.name: kind for kind in _ROWS}
SOURCES = ("watcher", "launch", "slurm", "log", "report")


def of_source(source: str) -> tuple[Kind, ...]:
    return tuple(kind for kind in _ROWS if kind.source == source)


#: The watcher's, the launch's and Slurm's kinds after which train.yml may start another attempt.
RESTARTED = tuple(k.name for k in _ROWS if k.source in ("watcher", "launch", "slurm") and k.restart)
#: Log kinds that no restart cures, with the sentence the decision gives.
NEVER_RESTARTED = {k.name: k.text for k in of_source("log") if not k.restart}
#: Log kinds that end a run, and the order in which they name its root cause (lowest first).
FATAL_LOG_KINDS = tuple(k.name for k in of_source("log") if k.fatal)
LOG_PRIORITY = {k.name: k.priority for k in of_source("log")}


def markdown_table() -> str:
    """docs/train.md's table of failure kinds."""
    lines = ["| kind | found by | restarted (`max_restarts`) | meaning |", "|---|---|---|---|"]
    for kind in _ROWS:
        if kind.source == "log":
            restart = "yes, unless another rule refuses" if kind.restart else "never"
        elif kind.source == "report":
            restart = "-"
        else:
            restart = "yes" if kind.restart else "no"
        lines.append(f"| `{kind.name}` | {kind.source} | {restart} | {kind.text} |")
    return "\n".join(lines) + "\n"
