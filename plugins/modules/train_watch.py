#!/usr/bin/python
"""Documentation of the train_watch action plugin (plugins/action/train_watch.py); the plugin does the work."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: train_watch
short_description: Follow a launched training run from its master until it ends, naming a failed, hung or slow rank
description:
  - Starts the run's supervisor (the node package's C(supervise.py)) in the master's training container, detached
    from every SSH session, and follows what it says (one docker CLI call over the play's connection to the master
    node, waiting up to 5 s for a new line) until the run ends. The supervisor runs the run's lifecycle
    (C(trainops.lifecycle)), which launches each attempt, watches it, and after a failure stops, judges, chooses the
    save to resume from and launches again (C(-e max_restarts)). A connection to the master that fails is said once
    and tried again; it judges no node. A supervisor found dead before the run ended is started again, and goes on
    from the run's state.
  - The supervisor, every O(poll_interval) seconds, runs the run's C(probe.sh) in that container. The probe reports
    each node's launch state (over the containers' sshd) and the new bytes of the last rank's log and of rank 0's
    stdout and stderr.
  - Prints a progress line every O(progress_interval) seconds (iteration, loss, step time, tokens/s and TFLOP/s
    per card, memory, ETA, and the stragglers of the last 200 straggler reports).
  - Ends the watch C(finished) when every node's torchrun exited 0; C(failed), naming the node, when one exited
    non-zero, vanished, stayed unreachable for two probes or did not start within O(start_timeout); and
    C(running) when O(wait) seconds passed (the job goes on).
  - When no new iteration line came for the hang limit, runs C(diagnose.sh) (every rank's state, wait channel,
    CPU and py-spy stack on every node) and names the culprit; with O(on_hang=stop) the run ends C(failed) with
    kind C(hang), with C(warn) the finding is printed and watching goes on. The evidence goes to the run
    directory's C(hang/) on the master, and is copied to C(<evidence_dir>/hang/).
  - Changes nothing on any node but the supervisor's files (C(<run_dir>/supervisor/)).
version_added: "0.2.0"
author: mtt-train-ops
options:
  plan:
    description: The run's plan (C(plan.json)) with its master, nodes, ranks, tokens per iteration and train_iters.
    type: dict
    required: true
  probe:
    description: The run's C(probe.sh) inside the container (C(<run_dir>/probe.sh), rendered with the run).
    type: str
    required: true
  container:
    description: Name of the training container on the master.
    type: str
    default: train
  programs:
    description: The node package's programs in the container (C(/opt/mtt-train-ops/<version>/trainops/node),
      installed by the node_package role); the checkpoint scanner runs from there.
    type: str
    required: true
  attempt:
    description: The attempt's number (the supervisor sets it for each attempt it watches).
    type: int
    default: 1
  diagnose:
    description: The run's C(diagnose.sh) inside the container; defaults to the one beside O(probe).
    type: str
  wait:
    description: Seconds to follow the run's supervisor before returning C(running) while the run goes on (the
      supervisor watches on); 0 probes once from the controller.
    type: float
    default: 86400.0
  poll_interval:
    description: Seconds between probes (at least 1).
    type: float
    default: 5.0
  progress_interval:
    description: Seconds between progress lines; 0 prints one at every new iteration.
    type: float
    default: 30.0
  start_timeout:
    description: Seconds a node may take to start its launch before the run is failed, naming it.
    type: float
    default: 120.0
  hang_timeout:
    description: Seconds without a new iteration line before the run is diagnosed as hung, or C(auto) (C(max(10 x p90
      time between iteration lines, 300 s)); at least 1,800 s before the first iteration and while a checkpoint is being
      saved).
    type: raw
    default: auto
  on_hang:
    description: What a diagnosed hang does.
    type: str
    default: stop
    choices:
    - stop
    - warn
  straggler_ratio:
    description: A rank whose compute time over a window of straggler reports is at least this many times the median
      of the other ranks' is named a straggler.
    type: float
    default: 1.2
  evidence_dir:
    description: Controller directory of the run; a hang's evidence goes to its C(hang/) subdirectory.
    type: path
  tail:
    description: 'Judge a run already going (status.yml, or a supervisor taking a watch up): the first probe reads the
      last 256 KiB of the logs, and the last iteration is dated by the log''s age.'
    type: bool
    default: false
  options:
    description: train.yml's checked options as one mapping (the C(trainops_watch_options) filter's), each of
      C(train_wait), C(poll_interval), C(progress_interval), C(start_timeout), C(hang_timeout), C(on_hang) and
      C(straggler_ratio) sets its argument unless that argument is given itself; C(max_restarts) > 0 sets
      O(restart_mark).
    type: dict
  verify_checkpoints:
    description: After each save Megatron reports, scan the checkpoint directory on the master
      (O(programs)C(/checkpoint_scan.py)) and judge the new save (docs/checkpoints.md).
    type: bool
    default: true
  keep_checkpoints:
    description: Keep the newest N verified saves and remove older ones (0 keeps all).
    type: int
    default: 0
  keep_every:
    description: With O(keep_checkpoints), also keep every save whose iteration is a multiple of M.
    type: int
    default: 0
  keep_dry_run:
    description: With O(keep_checkpoints), only say what would be removed.
    type: bool
    default: false
  known_checkpoints:
    description: The verdicts an earlier attempt of the run gave (the saves it judged are not read again).
    type: list
  restart_mark:
    description: The run has train.yml's restart mark (C(<run_dir>/restarting), C(-e max_restarts)); when stop.yml
      removes it, the watch ends the attempt as C(failed) with kind C(stopped), so no attempt outlives stop.yml.
    type: bool
    default: false
  detach:
    description: Start the run's supervisor and return C(running) at once (train.yml C(-e wait=false)).
    type: bool
    default: false
  notify:
    description: The Apprise URLs the run's supervisor sends the run's events to (C(-e notify)); they may hold
      tokens, so they go into the supervisor's request on its node and nowhere else.
    type: list
    elements: str
    default: []
  run:
    description: The lifecycle's request (C(trainops.lifecycle.Lifecycle)), with C(options), C(run_started),
      C(resumes_from), C(checked_saves), C(health), and C(launched) (who started the first attempt's launches
      when the supervisor does not, as a Slurm job's tasks).
    type: dict
    default: {}
notes:
  - An action plugin; run it on the master node of the plan (train.yml and status.yml do). The options are
    checked on the controller first by C(trainops.watch.watch_options) (train.yml's C(-e) options).
  - These options are C(trainops.watch.WatchRequest)'s fields, then O(detach) and O(run); a unit test holds this
    page to them.
"""

EXAMPLES = r"""
- name: Follow the run until it ends
  train_watch:
    container: train
    probe: "{{ plan.run_dir }}/probe.sh"
    plan: "{{ plan }}"
    wait: 86400
    hang_timeout: auto
    on_hang: stop
    evidence_dir: "{{ run_dir }}"
  register: watched
  when: inventory_hostname == plan.master
"""

RETURN = r"""
ended:
  description: Whether the run ended while followed (its supervisor's record then holds every attempt).
  returned: always
  type: bool
attempt:
  description: The last attempt as the supervisor's record holds it (number, plan, outcome, decision), once the
    run ended.
  returned: when ended
  type: dict
silent:
  description: The master stopped answering this controller for C(trainops.watch.MASTER_SILENT_S) seconds.
  returned: always
  type: bool
watch:
  description: How the last attempt's watch went (or the current one's so far).
  returned: always
  type: dict
  contains:
    state: {description: "finished, failed or running.", type: str}
    kind: {description: "For a failed run: exited, killed, lost, not started, hang or stopped.", type: str}
    node: {description: "The node a failure is named on.", type: str}
    reason: {description: "The cause in words.", type: str}
    ranks: {description: "The global ranks of that node.", type: list}
    hang: {description: "The hang diagnosis (finding, confidence, culprits, evidence), when one was made.", type: dict}
    nodes: {description: "Each node's last launch state and detail.", type: dict}
    last_iteration: {description: "The last iteration record seen.", type: dict}
    progress: {description: "The last progress line.", type: str}
    watched_s: {description: "Seconds watched.", type: float}
    first_iteration_s: {description: "Seconds from the start of watching to the first iteration.", type: float}
    seconds_since_progress: {description: "Seconds since the last new iteration line.", type: float}
    hang_limit_s: {description: "The hang limit in force at the end.", type: float}
"""
