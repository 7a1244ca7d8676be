#!/usr/bin/python
"""Ansible module: parse Megatron-LM training logs (a file or a torchrun log dir) into records and a summary."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: megatron_log
short_description: Parse Megatron-LM training logs into iteration, memory and failure records and a summary
description:
  - Reads a Megatron-LM log file, or every log file of a directory (a torchrun C(--log_dir) with its
    C(<run_id>_<random>/attempt_N/<local_rank>/stdout.log) and C(stderr.log), or several nodes' copies of it
    under one root), line by line, and returns one record per iteration line, one per memory line, the
    failures found, validation losses, theoretical memory, parameter counts and a summary of the run.
  - Iteration lines of every Megatron version are understood (with or without the C([timestamp]) prefix,
    C(.3E) or C(.6E) learning rates, any loss names such as C(lm loss), C(load_balancing_loss), C(mtp_1 loss),
    optional fields, forks' extra fields, which are kept in C(extra)). A field absent from the line is null.
    Megatron-DeepSpeed's look-alike lines (consumed tokens, samples per second, TFLOPs) are rejected and counted
    in C(rejected), never taken as iterations.
  - Failures are Python tracebacks (frames and final exception line), torch.distributed.elastic
    C(ChildFailedError) summaries (root cause with rank, local rank, host, exit code, error file, traceback),
    out-of-memory errors (CUDA, MUSA), NaN reports, and torchrun's line saying that a worker C(failed), each with its
    file, line, rank (when the line, its C([rankN]:) prefix or the same rank's memory lines tell it), local rank
    and attempt (from the torchrun path) and node.
  - Reads only; changes nothing (C(changed=false)); supports check mode. Run it where the logs are
    (usually the controller, after collecting them).
version_added: "0.1.0"
author: mtt-train-ops
options:
  path:
    description: A log file (plain or C(.gz)) or a directory searched recursively for C(*.log), C(*.out),
      C(*.err), C(*.txt) files (and their C(.gz)).
    type: path
    required: true
  seq_length:
    description: Sequence length of the run; with O(world_size), the summary gives tokens per second per card.
    type: int
  world_size:
    description: Number of cards of the run; with O(seq_length), the summary gives tokens per second per card.
    type: int
  peak_tflops:
    description: Dense peak TFLOP/s of one card; when given, the summary's C(tflops_per_gpu.mfu) is the median
      TFLOP/s per card divided by it.
    type: float
  warmup_iterations:
    description:
      - Iteration records logged within this many iterations of the start of a segment (a file, an attempt, or
        a restart inside a file) are warm-up and left out of the step-time, tokens/s and TFLOP/s statistics.
        The first record of a segment is always warm-up. When every record is warm-up, all are used and the
        summary says C(all_warmup=true).
    type: int
    default: 10
  rank:
    description: Global rank of the process that wrote O(path) when it is a single file and the caller knows it.
    type: int
  max_iterations_returned:
    description:
      - Return only the most recent N iteration records and the most recent N memory records; C(0) returns all.
        The summary always covers every line, and C(counts) tells how many records there were and how many are
        returned.
      - The default returns everything, so that a caller writing one record per iteration line (metrics.jsonl)
        loses none. Set it for progress checks on long runs, where a million records would make a result of
        hundreds of megabytes.
    type: int
    default: 0
notes:
  - Files are streamed line by line; the summary is accumulated as lines arrive, so memory use is bounded by the
    records returned.
  - Non-finite numbers (a C(nan) loss) are returned as the strings C(nan), C(inf), C(-inf), since JSON has no
    NaN.
  - Step-time percentiles interpolate linearly between closest ranks. TFLOP/s per card are Megatron's own
    figures (its C(num_floating_point_operations) convention).
"""

EXAMPLES = r"""
- name: Parse the logs collected from every node of a run
  megatron_log:
    path: "runs/{{ exp_name }}/{{ run_id }}"
    seq_length: 4096
    world_size: 16
    peak_tflops: 465
  register: parsed
  delegate_to: localhost

- name: Show where the run stands
  ansible.builtin.debug:
    msg: >-
      iteration {{ parsed.summary.last_iteration }}/{{ parsed.summary.train_iters }},
      {{ parsed.summary.step_time_ms.median | round(1) }} ms per iteration,
      failure: {{ parsed.summary.failure.message | default('none') }}

- name: Only the last 20 iterations of the last rank's log, for a progress line
  megatron_log:
    path: /data/mtt-train-ops/runs/exp/20261130-101500/logs/none_abc/attempt_0/7/stdout.log
    max_iterations_returned: 20
  register: progress
"""

RETURN = r"""
iterations:
  description:
    - One record per Megatron iteration line, in file order (attempts in order), or the most recent
      O(max_iterations_returned).
    - Keys C(iteration), C(train_iters), C(consumed_samples), C(elapsed_ms), C(tflops_per_gpu), C(learning_rate),
      C(global_batch_size), C(losses) (name to value), C(loss_scale), C(grad_norm), C(num_zeros),
      C(skipped_iterations), C(nan_iterations) (counts of the log interval), C(timestamp) (as printed), C(extra)
      (unknown fields under their printed name); null when absent from the line.
  returned: always
  type: list
  elements: dict
  sample:
    - iteration: 10
      train_iters: 10
      consumed_samples: 5120
      elapsed_ms: 4647.8
      tflops_per_gpu: null
      learning_rate: 1.5e-06
      global_batch_size: 512
      losses: {lm loss: 9.763827}
      loss_scale: 1.0
      grad_norm: 33.055
      num_zeros: null
      skipped_iterations: 0
      nan_iterations: 0
      timestamp: "2025-10-06 03:27:07"
      extra: {}
memory:
  description: One record per memory line, with C(rank), C(after_iteration), C(allocated_mb), C(max_allocated_mb),
    C(reserved_mb), C(max_reserved_mb), C(extra) (for example C(total device memory used)) and C(file).
  returned: always
  type: list
  elements: dict
failures:
  description:
    - Every failure found (at most 1000), each with C(kind) (C(child_failed), C(oom), C(traceback),
      C(worker_exit), C(nan)), C(message), C(exception), C(file), C(line), C(rank), C(local_rank), C(node),
      C(attempt), C(iteration), C(traceback) (lines) and C(details) (for C(child_failed), the C(program),
      C(root_cause) and C(other_failures) of torch's summary).
  returned: always
  type: list
  elements: dict
validation:
  description: Validation and test loss lines, with C(iteration), C(split), C(losses), C(ppl), C(extra), C(file).
  returned: always
  type: list
  elements: dict
theoretical_memory:
  description: Megatron's theoretical memory lines (C(weight_and_optimizer_mb), C(activation_mb), C(total_mb)).
  returned: always
  type: list
  elements: dict
parameters:
  description: Parameter counts in billions printed by Megatron, by what they count (C(total),
    C(transformer block), C(embedding layers), C(most loaded shard)).
  returned: always
  type: dict
events:
  description: The C([label] datetime ...) markers, such as C(after training is done).
  returned: always
  type: list
  elements: dict
stragglers:
  description: Megatron's straggler reports (C(--log-straggler), printed by rank 0), in order, each with
    C(time), C(fields) (by metric such as C(Rtt) or C(Etpt), C(min) and C(max) as C([value, unit, rank])),
    C(etpt) (every rank the C(^^^^ Bottom/Top) lines list, rank to Etpt) and C(file).
  returned: always
  type: list
  elements: dict
files:
  description: Every file read, with C(path), C(node), C(attempt), C(local_rank), C(stream), C(rank) (given or
    learned from its content), C(lines), C(iterations), C(memory), C(failures), C(first_iteration),
    C(last_iteration).
  returned: always
  type: list
  elements: dict
rejected:
  description: Lines of other tools that look like iteration lines, by tool, with a count and the first one's
    file and line.
  returned: always
  type: dict
counts:
  description: C(lines) read, C(iterations_total) and C(iterations_returned), C(memory_total) and
    C(memory_returned), C(failures_omitted).
  returned: always
  type: dict
summary:
  description:
    - "State: C(state) (C(failed), C(finished), C(running), C(empty)), C(last_iteration), C(train_iters),
      C(progress), C(consumed_samples), C(first_timestamp), C(last_timestamp), C(training_done)."
    - "Speed without warm-up: C(step_time_ms) (count, median, p90, mean, min, max, C(warmup_iterations),
      C(warmup_records_excluded), C(all_warmup)); C(tokens_per_second_per_gpu) (with O(seq_length) and
      O(world_size); median, p90, mean, min, max, overall); C(tflops_per_gpu) (with C(mfu) when O(peak_tflops))."
    - "Training: C(losses) (first and last value of every loss, with their iterations); C(nan_iterations),
      C(skipped_iterations) (sums over the iteration lines); C(nan_reports); C(last_validation)."
    - "Memory: C(max_reserved_mb_by_rank) (rank as a string), C(max_reserved_mb), C(max_allocated_mb_by_rank),
      C(theoretical_memory)."
    - "Failure: C(failure), the first root cause, with C(kind), C(message), C(error), C(node), C(file), C(line),
      C(rank), C(local_rank), C(attempt), C(exitcode), C(signal), C(error_file), C(error_source), or null;
      C(failures_by_kind); C(attempts) (the torchrun C(attempt_N) found); C(rejected_lines)."
  returned: always
  type: dict
"""

import json  # noqa: E402  (after the documentation, as Ansible expects)
import math  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.trainops.megatron_log import LogPathError, parse_path  # noqa: E402


def _finite(value):
    """JSON has no NaN: non-finite floats become the strings nan, inf, -inf."""
    if isinstance(value, float):
        return value if math.isfinite(value) else ("nan" if value != value else ("inf" if value > 0 else "-inf"))
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "seq_length": {"type": "int"},
            "world_size": {"type": "int"},
            "peak_tflops": {"type": "float"},
            "warmup_iterations": {"type": "int", "default": 10},
            "rank": {"type": "int"},
            "max_iterations_returned": {"type": "int", "default": 0},
        },
        supports_check_mode=True,
    )
    p = module.params
    for name in ("seq_length", "world_size", "peak_tflops", "max_iterations_returned", "warmup_iterations"):
        if p[name] is not None and p[name] < 0:
            module.fail_json(msg=f"{name} must not be negative, got {p[name]}")
    try:
        log = parse_path(
            p["path"],
            rank=p["rank"],
            seq_length=p["seq_length"],
            world_size=p["world_size"],
            warmup_iterations=p["warmup_iterations"],
            peak_tflops=p["peak_tflops"],
            max_records=p["max_iterations_returned"] or None,
        )
    except LogPathError as exc:
        module.fail_json(msg=f"cannot parse Megatron logs: {exc}", path=p["path"])
    result = log.to_dict()
    del result["attempts"]  # a task result's "attempts" belongs to until/retries; it is in summary.attempts
    if not log.files:
        module.warn(f"{p['path']}: no log files (*.log, *.out, *.err, *.txt) found")
    try:
        json.dumps(result, allow_nan=False)
    except ValueError:
        result = _finite(result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
