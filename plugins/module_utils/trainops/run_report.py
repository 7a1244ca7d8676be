"""A training run's numbers: the progress line printed while it runs, and the report written at its end.

The report of a run directory on the controller (``runs/<exp>/<run_id>/``, one sub-directory per node with
that node's torchrun logs) is

* ``metrics.jsonl``: one record per iteration line (from the last rank, which prints them);
* ``memory.jsonl``: one record per device-memory line (``[Rank R] (after N iterations) memory (MB) ...``);
* ``summary.json``: the last iteration, step time (median, p90) without warm-up, tokens/s per card, TFLOP/s per
  card in two conventions (Megatron's printed figure, and the plan's model FLOPs with causal attention), MFU
  against the card's stated dense BF16 peak, the largest reserved memory per rank, first and last loss, NaN and
  skipped counts, the failure with its node and rank, the stragglers (``stragglers``: ranks whose compute
  time over the run is at least ``straggler_ratio`` times the median of the others', from rank 0's straggler
  report) and, when the watcher suspected a hang, its diagnosis (``hang``);
* ``loss.png`` and ``throughput.png`` (tokens/s per card; below it each rank's compute time relative to the
  median rank, stragglers marked, when the run printed straggler reports), with matplotlib when installed.

Beside them, ``tensorboard/`` holds the run's TensorBoard event files from every node and attempt, as the collect
role unpacked them; the summary counts them (``tensorboard``) and the table says how to view them.
"""

from __future__ import annotations

import math
import os
import re
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from . import provenance, records, recovery, run_record, straggler
from .cluster import node_address, node_ranks, ranks_of
from .megatron_log import _SECONDARY, MegatronLog, _primary_failure, parse_path, summarize

#: Iterations left out of step-time statistics at the start of a run (compilation, allocator warm-up).
WARMUP_ITERATIONS = 3


def _duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def card_peak_tflops(plan: Mapping[str, Any]) -> float | None:
    """One card's dense peak at the run's precision; none for a CPU or a card without a stated peak."""
    if plan.get("accelerator") == "cpu":
        return None
    return plan.get("peak_tflops_per_card")


def progress_line(record: Mapping[str, Any], plan: Mapping[str, Any], memory: Mapping[str, Any] | None = None) -> str:
    """One line for an iteration record: i/N, loss, ms/iteration, tokens/s and TFLOP/s per card, memory, ETA."""
    total = record.get("train_iters") or plan.get("train_iters") or 0
    iteration = record["iteration"]
    parts = [f"iteration {iteration}/{total}" + (f" ({iteration / total:.0%})" if total else "")]
    losses = record.get("losses") or {}
    if losses:
        name, value = next(iter(losses.items()))
        parts.append(f"{name} {value:.4g}" if isinstance(value, float) else f"{name} {value}")
    ms = record.get("elapsed_ms")
    if isinstance(ms, (int, float)) and ms > 0:
        parts.append(f"{ms:,.0f} ms/it")
        gbs = record.get("global_batch_size") or plan["global_batch_size"]
        parts.append(f"{gbs * plan['seq_length'] / (ms / 1000) / plan['world_size']:,.0f} tokens/s/card")
    tflops = record.get("tflops_per_gpu")
    if isinstance(tflops, (int, float)):
        parts.append(f"{tflops:.3g} TFLOP/s/card")
    if memory and memory.get("max_reserved_mb") is not None:
        parts.append(f"mem {memory['max_reserved_mb'] / 1024:.1f} GiB max reserved (rank {memory.get('rank')})")
    elif plan.get("accelerator") == "cpu":
        parts.append("mem n/a (cpu)")
    if isinstance(ms, (int, float)) and ms > 0 and total:
        parts.append(f"ETA {_duration((total - iteration) * ms / 1000)}")
    return " | ".join(parts)


def _with_ranks(failure: Mapping[str, Any] | None, plan: Mapping[str, Any], root: str) -> dict[str, Any] | None:
    """The failure with its inventory node (the collected file's first directory) and global rank."""
    if failure is None:
        return None
    out = dict(failure)
    file = out.get("file")
    if file and os.path.isabs(file) and file.startswith(root.rstrip("/") + "/"):
        out["file"] = os.path.relpath(file, root)
    inventory_node = out["file"].split("/", 1)[0] if out.get("file") else None
    node_ranks = ranks_of(plan, inventory_node) if inventory_node else []
    if node_ranks:
        if out.get("node") not in (None, inventory_node):
            out["host"] = out["node"]
        out["node"] = inventory_node
        if out.get("rank") is None and out.get("local_rank") is not None:
            out["rank"] = node_ranks[0] + out["local_rank"]
    return out


#: Ranks stopped by a signal of the launcher (torchrun's teardown, stop.yml) did not cause the failure.
_TEARDOWN = re.compile(r"SIGTERM|Signal 15\b|exitcode -15\b")


def is_consequence(failure: Mapping[str, Any] | None) -> bool:
    """Whether a failure is usually the result of another rank's (lost peers, timeouts, teardown signals)."""
    if not failure:
        return False
    text = f"{failure.get('error') or ''} {failure.get('message') or ''}"
    return bool(_SECONDARY.search(text) or _TEARDOWN.search(text))


def root_cause(failures: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The failure that explains a run, from failures already placed on inventory nodes (:func:`_with_ranks`).

    Every node's torchrun prints its own ChildFailedError summary: the one whose rank's own error is not a
    consequence of another rank's failure (lost connections, timeouts, teardown signals) is chosen, then the
    earliest by the summary's time, then the first node.
    """
    summaries = [f for f in failures if f["kind"] == "child_failed"]
    others = [f for f in failures if f["kind"] != "child_failed"]
    if not summaries:
        return _primary_failure(list(failures))

    def order(item: tuple[int, Mapping[str, Any]]) -> tuple[bool, str, int]:
        index, summary = item
        told = _primary_failure([summary, *others]) or {}
        consequence = is_consequence({"error": told.get("error"), "message": summary["message"]})
        time = (summary.get("details") or {}).get("root_cause", {}) or {}
        return (consequence, time.get("time") or "~", index)

    _, chosen = min(enumerate(summaries), key=order)
    return _primary_failure([chosen, *others])


def failure_text(failure: Mapping[str, Any] | None) -> str:
    """``node2 rank 3 (local rank 1): <error>`` for a failure of the report."""
    if not failure:
        return ""
    if failure.get("kind") in ("timeout", "cancelled"):  # Slurm stopped the whole job: no node or rank to name
        return str(failure.get("message") or failure["kind"])
    where = [failure.get("node") or "unknown node"]
    if failure.get("rank") is not None:
        where.append(f"rank {failure['rank']}")
    if failure.get("local_rank") is not None:
        where.append(f"(local rank {failure['local_rank']})")
    cause = failure.get("error") or failure.get("message") or "failed"
    if failure.get("signal") and failure["signal"] not in cause:
        cause += f" [{failure['signal']}]"
    source = f" ({failure['file']}:{failure['line']})" if failure.get("file") else ""
    return f"{' '.join(where)}: {cause}{source}"


def build_report(
    log: MegatronLog,
    plan: Mapping[str, Any],
    root: str,
    incident: Mapping[str, Any] | None = None,
    missing: Sequence[str] = (),
    straggler_ratio: float = straggler.DEFAULT_RATIO,
) -> dict[str, Any]:
    """The summary of a parsed run, in the plan's terms.

    ``incident`` is what the watcher saw (a node lost, a torchrun that exited, a hang and its diagnosis under
    ``hang``); ``missing`` the nodes whose logs could not be collected.
    """
    summary = dict(log.summary)
    peak = card_peak_tflops(plan)
    step = summary.get("step_time_ms")
    model_tflops = None
    if step and step.get("median") and plan.get("job") != "smoke":
        model_tflops = plan["flops_per_iteration"] / (step["median"] / 1000) / plan["world_size"] / 1e12
    if plan.get("accelerator") == "cpu":
        peak_source = "no peak on a CPU (an MFU would mean nothing)"
    else:
        peak_source = plan.get("peak_source") or f"dense peak of the {plan.get('card')}"
    summary["model_tflops_per_card"] = {
        "median": model_tflops,
        "convention": "model FLOPs of the plan's preset, causal attention",
        "peak_tflops": peak,
        "peak_source": peak_source,
        "mfu": (model_tflops / peak) if (model_tflops and peak) else None,
    }
    if plan.get("job") == "smoke":
        summary["model_tflops_per_card"]["note"] = (
            "the smoke job trains a small model of its own, not the preset: only Megatron-format figures it "
            "printed (its own model FLOPs) apply"
        )
    megatron = summary.get("tflops_per_gpu")
    if megatron:
        # what the job printed, in its own convention: not comparable with the plan's causal figure when it
        # counts full attention (the vendor MUSA patch), which runs 6.7 % (seq 4096) to 12.5 % (8192) higher
        megatron["convention"] = (
            "the smoke job's own model, 6 x parameters x tokens"
            if plan.get("job") == "smoke"
            else f"{plan.get('printed_flops_convention', 'causal')} attention, as this backend's Megatron counts"
        )
        if peak:
            megatron["mfu"] = megatron["median"] / peak
            megatron["peak_tflops"] = peak
    placed = [f for f in (_with_ranks(f, plan, root) for f in log.failures) if f]
    summary["failure"] = _with_ranks(root_cause(placed), plan, root) if placed else None
    summary["stragglers"] = straggler.assess(log.stragglers, plan["world_size"], straggler_ratio, node_ranks(plan))
    summary["straggler_ratio"] = straggler_ratio
    summary["straggler_reports"] = len(log.stragglers)
    summary["hang"] = (incident or {}).get("hang")
    summary["slurm"] = (incident or {}).get("slurm")
    if incident and incident.get("state") == "failed":
        summary["incident"] = dict(incident)
        summary["state"] = "failed"
        lost = incident.get("node") if incident.get("kind") == "lost" else None
        if incident.get("kind") == "hang":
            # The watcher stopped a hung run: the ranks' own errors are the teardown's; the culprit explains it.
            summary["failure"] = _hang_failure(incident, plan)
        elif incident.get("kind") in ("timeout", "cancelled", "node_fail"):
            # Slurm stopped the job (its --time, an scancel outside stop.yml, a node it lost): the ranks' errors
            # are the teardown's, not a crash.
            summary["failure"] = {
                "kind": incident["kind"],
                "node": incident.get("node"),
                "rank": None,
                "local_rank": None,
                "message": incident.get("reason"),
            }
        elif lost:
            # The watcher lost that node: its own errors explain the run, not those of the ranks elsewhere
            # that lost their peers (closed connections, timeouts).
            here = [f for f in placed if f.get("node") == lost]
            summary["failure"] = (_with_ranks(root_cause(here), plan, root) if here else None) or {
                "kind": "node",
                "node": lost,
                "ranks": ranks_of(plan, lost),
                "rank": None,
                "local_rank": None,
                "message": f"{incident.get('reason')} (its ranks {', '.join(map(str, ranks_of(plan, lost)))})",
            }
        elif summary["failure"] is None:
            summary["failure"] = {
                "kind": "watch",
                "node": incident.get("node"),
                "rank": None,
                "local_rank": None,
                "message": incident.get("reason"),
            }
    if summary["state"] == "failed" and missing and (summary["failure"] is None or is_consequence(summary["failure"])):
        # Only the ranks that lost their peers left errors, and a node is gone with its logs: that node went first.
        lost = missing[0]
        ranks = ", ".join(map(str, ranks_of(plan, lost)))
        seen = failure_text(summary["failure"]) if summary["failure"] else "no error in the logs"
        summary["failure"] = {
            "kind": "node",
            "node": lost,
            "ranks": ranks_of(plan, lost),
            "rank": None,
            "local_rank": None,
            "message": f"{lost} (ranks {ranks}) was lost during the run: it no longer answers and its logs could "
            f"not be collected; the ranks elsewhere only lost their connections to it ({seen})",
        }
    summary["failure_text"] = failure_text(summary["failure"])
    # the first NaN any rank reported (a loss, a grad norm), even when another error names the root cause: a NaN
    # just after a resume blames the save resumed from (trainops.recovery)
    nans = [f for f in log.failures if f.get("kind") == "nan"]
    summary["first_nan"] = (
        {"iteration": min((f["iteration"] for f in nans if f.get("iteration") is not None), default=None),
         "message": nans[0].get("message")}
        if nans else None
    )  # fmt: skip
    # the watcher's checkpoint ledger: every save's verdict, what retention removed, the disk (docs/checkpoints.md)
    summary["checkpoint_ledger"] = (incident or {}).get("checkpoints")
    summary["run_id"] = plan["run_id"]
    summary["exp_name"] = plan["exp_name"]
    summary["job"] = plan.get("job")
    summary["world_size"] = plan["world_size"]
    return summary


def _hang_failure(incident: Mapping[str, Any], plan: Mapping[str, Any]) -> dict[str, Any]:
    finding = incident.get("hang") or {}
    culprit = (finding.get("culprits") or [{}])[0]
    node = culprit.get("node") or incident.get("node")
    return {
        "kind": "hang",
        "node": node,
        "rank": culprit.get("rank"),
        "local_rank": culprit.get("local_rank"),
        "ranks": culprit.get("ranks")
        or ([culprit["rank"]] if culprit.get("rank") is not None else ranks_of(plan, node)),
        "error": f"hung: {culprit['reason']}" if culprit.get("reason") else None,
        "message": incident.get("reason"),
    }


def summary_table(summary: Mapping[str, Any]) -> list[str]:
    """The printed summary of a run."""

    def num(value: Any, fmt: str = ",.1f") -> str:
        return format(value, fmt) if isinstance(value, (int, float)) and math.isfinite(value) else "-"

    step = summary.get("step_time_ms") or {}
    tokens = summary.get("tokens_per_second_per_gpu") or {}
    megatron = summary.get("tflops_per_gpu") or {}
    model = summary.get("model_tflops_per_card") or {}
    losses = summary.get("losses") or {}
    lines = [
        f"run          {summary.get('exp_name')} / {summary.get('run_id')} ({summary.get('job')}): {summary['state']}",
        f"iterations   {summary.get('last_iteration') or 0}/{summary.get('train_iters') or '-'}",
        f"step time    median {num(step.get('median'))} ms, p90 {num(step.get('p90'))} ms "
        f"({step.get('count', 0)} iterations after {step.get('warmup_iterations', '-')} of warm-up)",
        f"tokens/s     {num(tokens.get('median'), ',.0f')} per card (median), "
        f"overall {num(tokens.get('overall'), ',.0f')}",
        f"TFLOP/s      {num(megatron.get('median'), '.3g')} per card as the job prints it "
        f"({megatron.get('convention', '-')}); {num(model.get('median'), '.3g')} from the plan's model FLOPs "
        f"({model.get('convention', '-')})",
        "MFU          "
        + (
            f"{model['mfu'] * 100:.1f} % (the plan's model FLOPs) against {model.get('peak_source', '-')}"
            if model.get("mfu")
            else f"- ({model.get('peak_source', '-')})"
        ),
    ]
    for name, value in losses.items():
        lines.append(
            f"loss         {name}: {num(value.get('first'), '.4g')} (iteration {value.get('first_iteration')}) -> "
            f"{num(value.get('last'), '.4g')} (iteration {value.get('last_iteration')})"
        )
    reserved = summary.get("max_reserved_mb_by_rank") or {}
    if reserved:
        top = max(reserved.items(), key=lambda kv: kv[1])
        lines.append(
            f"memory       max reserved {num(top[1] / 1024, '.2f')} GiB (rank {top[0]}); {len(reserved)} rank(s)"
        )
    else:
        lines.append("memory       no device-memory lines (a CPU run, or Megatron's memory report is off)")
    lines.append(
        f"anomalies    {summary.get('nan_iterations', 0)} NaN iteration(s), "
        f"{summary.get('skipped_iterations', 0)} skipped iteration(s)"
    )
    slow = summary.get("stragglers") or []
    if slow:
        for item in slow:
            lines.append(
                f"straggler    {item['node']} rank {item['rank']} (local rank {item['local_rank']}): compute "
                f"{item['ratio']:.2f}x the median of the other ranks' over the run (worst report "
                f"{item['worst']:.2f}x; slow in {item['reports_flagged']} of {item['reports']} reports)"
            )
    elif summary.get("straggler_reports", 0) > straggler.MIN_REPORTS:
        lines.append(
            f"stragglers   none: no rank's compute time reached {summary.get('straggler_ratio', 1.2):g}x the median "
            f"of the others' ({summary['straggler_reports']} reports)"
        )
    elif summary.get("straggler_reports"):
        lines.append(
            f"stragglers   not judged: {summary['straggler_reports']} straggler reports, a verdict needs "
            f"{straggler.MIN_REPORTS + 1} (one per log interval, the first left out)"
        )
    lines += checkpoint_lines(summary)
    finding = summary.get("hang")
    if finding:
        lines.append(
            f"hang         no iteration for {finding.get('seconds_since_progress', 0):.0f} s after iteration "
            f"{finding.get('last_iteration')}; {finding.get('confidence')} confidence: {finding.get('finding')}"
        )
        if finding.get("evidence"):
            lines.append(f"evidence     {finding['evidence']}/<node>/rank-<rank>.txt (state, wait channel, stack)")
    if (summary.get("slurm") or {}).get("text"):
        lines.append(f"slurm        {summary['slurm']['text']}")
    if summary.get("failure_text"):
        label = "failure" if summary["state"] == "failed" else "reported"
        lines.append(f"{label:<12} {summary['failure_text']}")
    return lines


def checkpoint_lines(summary: Mapping[str, Any]) -> list[str]:
    """The report's lines on the run's saves: their verdicts, the newest verified one, what each save stalled the
    run (Megatron's save-checkpoint timer, the slowest rank), what retention removed, the disk where they go."""
    ledger = summary.get("checkpoint_ledger") or {}
    saves = ledger.get("saves") or []
    stalls = [s["stall_ms"] for s in (summary.get("checkpoints") or {}).get("saved") or [] if "stall_ms" in s]
    if not saves and not stalls:
        return []
    lines = []
    if saves:
        verified = [s for s in saves if s.get("verdict") == "verified"]
        bad = [s for s in saves if s.get("verdict") == "bad"]
        newest = max(verified, key=lambda s: s["iteration"]) if verified else None
        text = f"checkpoints  {len(verified)} verified, {len(bad)} not to be trusted"
        if newest:
            text += f"; newest verified: iteration {newest['iteration']} ({newest['bytes'] / 2**20:,.2f} MiB)"
        lines.append(text)
        lines += [f"not trusted  iteration {s['iteration']}: {'; '.join(s.get('reasons') or [])}" for s in bad]
    if stalls:
        lines.append(
            f"save stall   {len(stalls)} save(s): median {statistics.median(stalls):,.0f} ms, "
            f"max {max(stalls):,.0f} ms (Megatron's save-checkpoint timer, the slowest rank)"
        )
    removed = ledger.get("removed") or []
    if removed:
        lines.append(
            f"retention    removed iteration(s) {', '.join(str(s['iteration']) for s in removed)}, "
            f"{sum(s['bytes'] for s in removed) / 2**20:,.2f} MiB freed"
        )
    if (ledger.get("disk") or {}).get("line"):
        lines.append(f"ckpt disk    {ledger['disk']['line']}")
    return lines


def plot(
    dest: str,
    iterations: Sequence[Mapping[str, Any]],
    plan: Mapping[str, Any],
    reports: Sequence[Mapping[str, Any]] = (),
    stragglers: Sequence[Mapping[str, Any]] = (),
    ratio: float = straggler.DEFAULT_RATIO,
) -> list[str]:
    """Write ``loss.png`` and ``throughput.png``; returns the files written (none without matplotlib).

    ``throughput.png`` shows tokens/s per card over the iterations (Megatron's TFLOP/s is proportional to it, so
    it is not drawn again); with straggler ``reports``, a second panel shows each rank's compute time relative to
    the median rank's, report by report, the ``stragglers`` drawn thick and named, and the ``ratio`` line.
    """
    if not iterations:
        return []
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written = []
    steps = [r["iteration"] for r in iterations]
    losses: dict[str, list[tuple[int, float]]] = {}
    for rec in iterations:
        for name, value in (rec.get("losses") or {}).items():
            if isinstance(value, float) and math.isfinite(value):
                losses.setdefault(name, []).append((rec["iteration"], value))
    if losses:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for name, points in losses.items():
            ax.plot([p[0] for p in points], [p[1] for p in points], label=name)
        ax.set(xlabel="iteration", ylabel="loss", title=f"{plan['exp_name']} / {plan['run_id']}: loss")
        ax.legend()
        ax.grid(alpha=0.3)
        fig.savefig(os.path.join(dest, "loss.png"), dpi=100, bbox_inches="tight")
        plt.close(fig)
        written.append("loss.png")
    tokens = [
        (r.get("global_batch_size") or plan["global_batch_size"])
        * plan["seq_length"]
        / (r["elapsed_ms"] / 1000)
        / plan["world_size"]
        if isinstance(r.get("elapsed_ms"), (int, float)) and r["elapsed_ms"] > 0
        else math.nan
        for r in iterations
    ]
    xs, relative = straggler.rolling_ratios(reports, plan["world_size"])
    ranks = sorted(relative)
    if ranks:
        fig, (ax, lower) = plt.subplots(2, 1, figsize=(8, 7), sharex=False, height_ratios=(1, 1))
    else:
        fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(steps, tokens, linewidth=0.5, alpha=0.5, label="tokens/s per card")
    if len(tokens) >= 20:
        span = max(5, len(tokens) // 50)
        smooth = [statistics.median(tokens[max(0, i - span + 1) : i + 1]) for i in range(len(tokens))]
        ax.plot(steps, smooth, linewidth=1.8, color="tab:blue", label=f"median of the last {span}")
        ax.legend(fontsize=8)
    ax.set(xlabel="iteration", ylabel="tokens/s per card", title=f"{plan['exp_name']} / {plan['run_id']}: throughput")
    ax.grid(alpha=0.3)
    if ranks:
        slow = {s["rank"]: s for s in stragglers}
        node_of = node_ranks(plan)
        window = min(straggler.MIN_REPORTS, len(reports))
        for rank in ranks:
            if rank in slow:
                lower.plot(
                    xs,
                    relative[rank],
                    linewidth=2.2,
                    label=f"{node_of.get(rank, ('?',))[0]} rank {rank}: straggler ({slow[rank]['ratio']:.2f}x)",
                )
            else:
                lower.plot(xs, relative[rank], linewidth=0.8, alpha=0.7, color="tab:gray")
        lower.axhline(ratio, color="tab:red", linestyle="--", linewidth=1, label=f"straggler threshold {ratio:g}x")
        lower.set(
            xlabel="straggler report (one per log interval)",
            ylabel="compute time / others' median",
            title=f"each rank's compute time over the last {window} reports (grey: not a straggler over the run)",
        )
        lower.grid(alpha=0.3)
        lower.legend(fontsize=8)
        fig.tight_layout()
    fig.savefig(os.path.join(dest, "throughput.png"), dpi=100, bbox_inches="tight")
    plt.close(fig)
    written.append("throughput.png")
    return written


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _provenance(root: str, warnings: list[str]) -> dict[str, Any] | None:
    """The provenance the run recorded before its launch (run.json), with the hash of its plan/plan.json."""
    try:
        recorded = run_record.read(root).get("provenance")
    except records.RecordError as exc:
        warnings.append(str(exc))
        return None
    if not recorded:
        return None
    return dict(recorded, plan_sha256=provenance.file_digest(os.path.join(root, "plan", "plan.json")))


def tensorboard_files(root: str) -> list[str]:
    """The TensorBoard event files collected under ``root/tensorboard`` (paths relative to it), oldest first: their
    names start with the time their writer opened them."""
    board = os.path.join(root, "tensorboard")
    found = [os.path.relpath(os.path.join(parent, name), board)
             for parent, _, files in os.walk(board) for name in files if ".tfevents." in name]  # fmt: skip
    return sorted(found, key=os.path.basename)


def write_report(
    root: str,
    plan: Mapping[str, Any],
    incident: Mapping[str, Any] | None = None,
    straggler_ratio: float = straggler.DEFAULT_RATIO,
) -> dict[str, Any]:
    """Parse every node's logs under ``root`` and write the report files there; returns the summary and table.

    A hang diagnosis kept by the watcher in ``hang/diagnosis.json`` is used when ``incident`` holds none (as
    when report.yml rebuilds the report). A record of the run that cannot be read (that diagnosis, an attempt's
    ``attempt.json``) is left out and named, with the fix, in the summary's ``warnings`` and the table.
    """
    root = os.path.abspath(root)
    warnings = []
    if not (incident or {}).get("hang"):
        kept = os.path.join(root, "hang", "diagnosis.json")
        fix = f"the report goes without it (each rank's state and stack are in {os.path.dirname(kept)}/<node>/)"
        try:
            diagnosis = records.read_json(kept, "hang diagnosis", fix)
        except records.RecordError as exc:
            diagnosis, warnings = None, [str(exc)]
        if diagnosis is not None:
            incident = dict(incident or {}, hang=diagnosis)
    node_dirs = [n["name"] for n in plan["nodes"] if os.path.isdir(os.path.join(root, n["name"]))]
    log = MegatronLog()
    if node_dirs:
        log = parse_path(
            root,
            exclude=recovery.attempt_dirs(root),
            seq_length=plan["seq_length"],
            world_size=plan["world_size"],
            warmup_iterations=WARMUP_ITERATIONS,
            peak_tflops=card_peak_tflops(plan),
        )
    else:
        log.summary = summarize(log, seq_length=plan["seq_length"], world_size=plan["world_size"])
    missing = [n["name"] for n in plan["nodes"] if n["name"] not in node_dirs]
    summary = build_report(log, plan, root, incident, missing, straggler_ratio)
    summary["nodes_collected"] = node_dirs
    summary["nodes_missing"] = missing
    attempts, unread = recovery.read_attempts(root)
    summary["provenance"] = _provenance(root, warnings)
    summary["warnings"] = warnings + unread
    step = (summary.get("step_time_ms") or {}).get("median")
    summary["attempts"] = attempts
    summary["recovery"] = recovery.goodput(attempts, step / 1000 if step else None) if attempts else {}
    records.write_jsonl(os.path.join(root, "metrics.jsonl"), [_finite(r) for r in log.iterations])
    records.write_jsonl(os.path.join(root, "memory.jsonl"), [_finite(r) for r in log.memory])
    summary["plots"] = plot(root, log.iterations, plan, log.stragglers, summary["stragglers"], straggler_ratio)
    summary["tensorboard"] = tensorboard_files(root)
    table = summary_table(summary) + recovery.attempts_table(attempts, summary["recovery"])
    if summary["tensorboard"]:
        board = os.path.join(root, "tensorboard")
        table.append(f"tensorboard  {len(summary['tensorboard'])} event file(s), every attempt's: "
                     f"tensorboard --logdir {board}")  # fmt: skip
    table[1:1] = provenance.lines(summary["provenance"])  # after the run's line: what ran
    if summary["nodes_missing"]:
        table.append(f"missing      no logs from {', '.join(summary['nodes_missing'])} (not collected)")
    table += [f"warning      {w}" for w in summary["warnings"]]
    summary["table"] = table
    if summary["checkpoint_ledger"]:  # the ledger beside the run on the controller, as on the master
        records.write_json(os.path.join(root, "checkpoints.json"), _finite(summary["checkpoint_ledger"]))
    records.write_json(os.path.join(root, "summary.json"), _finite(summary))
    return _finite(summary)


def report_run(run_dir: str, hosts: Sequence[Mapping[str, Any]], playbook: str = "report.yml") -> dict[str, Any]:
    """report.yml's run, read on the controller before any node is contacted: ``{"plan": <plan/plan.json>,
    "problem": ""}``, or the problem that refuses it: not a run directory, a plan that cannot be read, or a plan
    for other nodes than this inventory's (``hosts``: each node's name and inventory keys). A node of the plan
    must be in the inventory at the address it was planned at; an inventory node the plan left out (a spare, a
    node left out) is no matter."""
    path = os.path.join(run_dir, "plan", "plan.json")
    fix = f"{playbook} needs the plan train.yml wrote. No node was contacted and nothing was changed."
    try:
        plan = records.read_json(path, "plan", fix)
    except records.RecordError as exc:
        return {"plan": {}, "problem": str(exc)}
    nodes = plan.get("nodes") if plan else None
    if plan is None or not isinstance(nodes, list) or not all(isinstance(n, dict) and n.get("name") for n in nodes):
        problem = f"{run_dir} has no plan/plan.json with its nodes: it is not a run directory of train.yml"
        return {"plan": {}, "problem": records.printable(f"{problem} (runs/<exp>/<run_id>); {fix}")}
    have = {str(h["name"]): node_address(h, str(h["name"])) for h in hosts}
    wrong = []
    for node in nodes:
        name, addr = str(node["name"]), str(node.get("addr") or node["name"])
        if name not in have:
            wrong.append(f"{name} ({addr}) is not in it")
        elif have[name] != addr:
            wrong.append(f"{name} is at {have[name]} in it, at {addr} in the plan")
    if not wrong:
        return {"plan": plan, "problem": ""}
    planned = ", ".join(str(n["name"]) for n in nodes)
    return {
        "plan": plan,
        "problem": records.printable(
            f"{run_dir} was planned for other nodes than this inventory's ({planned}): {'; '.join(wrong)}. "
            f"{playbook} works on the nodes the run ran on: give the inventory it was planned with (-i). "
            "No node was contacted and nothing was changed."
        ),
    }


#: Written into a run's directory on the controller once its incidents are in the site's record (by the terminal
#: that reported its end: train.yml, or status.yml): the incidents it found, and when.
INCIDENTS_RECORDED = "incidents-recorded.json"


def unrecorded_runs(
    runs_dir: str, hosts: Sequence[Mapping[str, Any]], supervisors: Sequence[str], now: float, window_days: float
) -> list[dict[str, Any]]:
    """The runs this controller launched whose incidents are not in the site's record yet (their end was followed
    by no terminal: -e wait=false, a train.yml killed): each ``{"run": "<exp>/<run_id>", "run_dir": the run's
    directory on the nodes, "supervisor": the host its supervisor was started on}``, oldest first. A run counts
    when train.yml rendered it for a supervisor (its plan names ``supervisor``) within ``window_days`` (older
    incidents count against no node), it was planned for this inventory's nodes (``hosts``, as
    :func:`report_run`) and its supervisor's host is one of them or of ``supervisors``, and its directory holds no
    :data:`INCIDENTS_RECORDED`."""
    found = []
    try:
        experiments = sorted(os.listdir(runs_dir))
    except OSError:
        return []
    names = {str(h["name"]) for h in hosts} | {str(s) for s in supervisors}
    for exp in experiments:
        try:
            run_ids = sorted(os.listdir(os.path.join(runs_dir, exp)))
        except OSError:
            continue
        for run_id in run_ids:
            run_dir = os.path.join(runs_dir, exp, run_id)
            plan_path = os.path.join(run_dir, "plan", "plan.json")
            try:
                planned_at = os.path.getmtime(plan_path)
            except OSError:
                continue
            if now - planned_at > window_days * 86400 or os.path.exists(os.path.join(run_dir, INCIDENTS_RECORDED)):
                continue
            read = report_run(run_dir, hosts)
            plan = read["plan"]
            if read["problem"] or not plan.get("supervisor") or plan["supervisor"] not in names:
                continue
            found.append((planned_at, {"run": f"{exp}/{run_id}", "run_dir": plan.get("run_dir"),
                                       "master": plan.get("master"), "supervisor": plan["supervisor"]}))  # fmt: skip
    return [run for _, run in sorted(found, key=lambda pair: pair[0])]
