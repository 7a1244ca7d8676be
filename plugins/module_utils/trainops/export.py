"""export.yml's decisions on the controller, before any node is contacted (docs/export.md): which save of a run is
exported, where the export goes, whether it fits there, and what its result says; and the lines of an import
(train.yml's ``-e init_from``, whose plan fields :mod:`trainops.plan` makes).

The save comes from the run's checkpoint ledger (``<run>/checkpoints.json``, :mod:`trainops.checkpoints`): by
default its newest ``verified`` save; ``-e iteration=N`` names another, and a save the ledger does not call
verified (bad, pending, or never judged) is refused unless ``-e export_unverified=true`` says to take it anyway.
The node program (``trainops/node/export_hf.py``) writes the Hugging Face directory on the master, where the
checkpoints are, and checks it against Megatron's model; ``-e export_dir=DIR`` fetches it to the controller.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from typing import Any

from . import checkpoints, records, run_report

#: Bytes per parameter of the exported weights by the run's precision: the model's own parameters, as saved
#: (FP8 training keeps them in bf16).
_BYTES = {"bf16": 2, "fp16": 2, "fp8": 2, "fp32": 4}
#: The controller keeps this share free beyond the export (its tokenizer, the transfer's archive).
HEADROOM = 0.1


def _verdicts(saves: list[Mapping[str, Any]]) -> str:
    return ", ".join(f"{s.get('iteration')} {s.get('verdict')}" for s in saves) or "none"


def choose_save(run_dir: str, iteration: int | None = None, allow_unverified: bool = False) -> dict[str, Any]:
    """``{"save": <the ledger's entry>, "problem": ""}``, or the problem that refuses the export."""
    fix = "export.yml takes a save from the run's checkpoint ledger. No node was contacted and nothing was written."
    try:
        ledger = records.read_json(os.path.join(run_dir, checkpoints.LEDGER_FILE), "checkpoint ledger", fix)
    except records.RecordError as exc:
        return {"save": {}, "problem": str(exc)}
    saves = [s for s in (ledger or {}).get("saves") or [] if isinstance(s, dict) and "iteration" in s]
    if not saves:
        return {"save": {}, "problem": f"{run_dir}: the run's ledger lists no save (did it save?). {fix}"}
    if iteration is None:
        newest = checkpoints.newest_verified(saves)
        if newest is None:
            return {"save": {}, "problem": (
                f"{run_dir}: no save of the run is verified (saves: {_verdicts(saves)}). Name one with -e iteration=N "
                "and, knowing it is not verified, -e export_unverified=true. Nothing was written.")}  # fmt: skip
        return {"save": newest, "problem": ""}
    named = [s for s in saves if int(s["iteration"]) == int(iteration)]
    removed = [s for s in (ledger or {}).get("removed") or [] if isinstance(s, dict)]
    if not named and any(s.get("iteration") == iteration for s in removed):
        return {"save": {}, "problem": (
            f"{run_dir}: the save of iteration {iteration} was removed by the run's retention (keep_checkpoints); "
            f"the saves left: {_verdicts(saves)}. Nothing was written.")}  # fmt: skip
    if not named:
        return {"save": {}, "problem": (
            f"{run_dir}: the run's ledger has no save of iteration {iteration} (saves: {_verdicts(saves)}). "
            "Nothing was written.")}  # fmt: skip
    save = named[-1]
    if save.get("verdict") != checkpoints.VERIFIED and not allow_unverified:
        reasons = "; ".join(save.get("reasons") or []) or "not judged yet"
        return {"save": save, "problem": (
            f"{run_dir}: the save of iteration {iteration} is {save.get('verdict')} in the run's ledger ({reasons}): "
            "an export of it may hold a torn or partial model. Export a verified one (leave out -e iteration), or "
            "take this one anyway with -e export_unverified=true. Nothing was written.")}  # fmt: skip
    return {"save": save, "problem": ""}


def export_job(
    run_dir: str,
    hosts: Sequence[Mapping[str, Any]],
    iteration: int | None = None,
    allow_unverified: bool = False,
    export_path: str | None = None,
    export_dir: str | None = None,
    parity: bool = True,
) -> dict[str, Any]:
    """export.yml's whole decision on the controller: ``{"problem": ""}`` with the plan, the save's directory,
    where the export goes on the master and on the controller, whether it is checked, and the line that says so;
    or the first problem that refuses it (the run, the save, then the controller's directory). ``hosts``: the
    inventory's nodes (:func:`trainops.run_report.report_run`)."""
    run_dir = os.path.realpath(run_dir)
    run = run_report.report_run(run_dir, hosts, "export.yml")
    if run["problem"]:
        return {"problem": run["problem"]}
    choice = choose_save(run_dir, iteration, allow_unverified)
    if choice["problem"]:
        return {"problem": choice["problem"]}
    plan, save = run["plan"], choice["save"]
    fetch_to = os.path.realpath(export_dir) if export_dir else ""
    room = controller_room(fetch_to, plan) if fetch_to else ""
    if room:
        return {"problem": room}
    out = node_dir(plan, save, export_path)
    line = (
        f"export {save['name']} ({save['verdict']} in the run's ledger) of {run_dir} on {plan['master']}, to {out}"
        + (f", fetched to {fetch_to}" if fetch_to else "")
    )
    return {"problem": "", "plan": plan, "save": f"{plan['checkpoint_dir']}/{save['name']}", "out": out,
            "fetch_to": fetch_to, "parity": bool(parity), "line": line}  # fmt: skip


def node_dir(plan: Mapping[str, Any], save: Mapping[str, Any], export_path: str | None = None) -> str:
    """Where the export is written on the master: ``-e export_path``, or
    ``<work_home>/exports/<exp>/<run_id>-iter_NNNNNNN``."""
    if export_path:
        return export_path
    return f"{plan['work_home']}/exports/{plan['exp_name']}/{plan['run_id']}-{save['name']}"


def export_bytes(plan: Mapping[str, Any]) -> int:
    """The exported weights' size at most: every parameter of the plan's model at its saved width."""
    return int(plan.get("parameters") or 0) * _BYTES.get(str(plan.get("precision")), 4)


def controller_room(export_dir: str, plan: Mapping[str, Any]) -> str:
    """The problem with fetching the export to ``export_dir`` on the controller (it exists, or its file system
    lacks room for it), or ``""``."""
    if os.path.exists(export_dir):
        return f"-e export_dir={export_dir} exists: name a new directory (the export never writes over one)."
    parent = os.path.dirname(os.path.abspath(export_dir))
    while not os.path.isdir(parent):
        parent = os.path.dirname(parent)
    free = shutil.disk_usage(parent).free
    needed = int(export_bytes(plan) * (1 + HEADROOM))
    if free < needed:
        return (
            f"-e export_dir={export_dir}: {free / 2**20:,.1f} MiB free at {parent} on this controller, the export "
            f"takes about {needed / 2**20:,.1f} MiB ({plan.get('parameters'):,} parameters in "
            f"{plan.get('precision')}). Free room there, or name a directory on a larger disk, or leave the export "
            "on the node (leave out -e export_dir). Nothing was written."
        )
    return ""


def program_result(run: Mapping[str, Any], program: str) -> dict[str, Any]:
    """The result ``export_hf.py`` or ``import_hf.py`` printed (its last line, one JSON object), from the registered
    ``docker exec``; ``{"error": ...}`` with its exit status and the end of its stderr when it printed none."""
    lines = run.get("stdout_lines") or []
    if lines and lines[-1].startswith("{"):
        return json.loads(lines[-1])
    said = str(run.get("stderr") or run.get("msg") or "")[-1500:]
    return {"error": f"{program} ended with {run.get('rc')}: {said}"}


def _parity_text(parity: Mapping[str, Any]) -> str:
    return (
        f"Megatron's model and transformers' LlamaForCausalLM on {parity['sequences']} sequences of "
        f"{parity['length']} tokens ({parity['tokens']}): largest logit difference "
        f"{parity['largest_logit_difference']:.3g} (tolerance {parity['logit_tolerance']:.3g}), loss "
        f"{parity['megatron_loss']:.6f} vs {parity['hf_loss']:.6f} (relative {parity['loss_relative_difference']:.2g}, "
        f"tolerance {parity['loss_tolerance']:g})"
    )


def _failed_parity_text(parity: Mapping[str, Any], record: str) -> str:
    layer = parity.get("first_differing_layer")
    where_first = f"; the first layer whose output differs: {layer}" if layer is not None else ""
    return f"NOT VERIFIED, the parity check failed: {_parity_text(parity)}{where_first}. {record} says verified: false."


def import_text(result: Mapping[str, Any], node: str) -> str:
    """train.yml's lines for ``import_hf.py``'s result (``-e init_from``)."""
    if result.get("error"):
        return f"{node}: import failed: {result['error']}"
    if result.get("reused"):
        return f"init_from    {result['source']}: imported before to {node}:{result['out']} (verified), reused"
    head = (
        f"init_from    {result['source']} imported to {node}:{result['out']} ({result['dtype']}, vocabulary "
        f"{result['vocab_size']}) in {result['write_seconds']} s"
    )
    parity = result.get("parity")
    if parity and parity["passed"]:
        return f"{head}\nverified: {_parity_text(parity)}"
    return f"{head}\n{_failed_parity_text(parity, 'import.json')}" if parity else head


def result_text(result: Mapping[str, Any], node: str) -> str:
    """The playbook's lines for the node program's result."""
    if result.get("error"):
        return f"{node}: export failed: {result['error']}"
    where = f"{node}:{result['out']}"
    head = (
        f"exported iteration {result.get('iteration')} of {result['save']} to {where}: {result['tensors']} tensors, "
        f"{result['bytes'] / 2**20:,.1f} MiB in {result['dtype']}, vocabulary {result['vocab_size']} (padded "
        f"{result['padded_vocab_size']}); written in {result['write_seconds']} s with at most "
        f"{result['write_peak_rss_mib']:,.0f} MiB of memory, {result['seconds']} s and "
        f"{result['peak_rss_mib']:,.0f} MiB with the parity check"
    )
    parity = result.get("parity")
    if not parity:
        return head + "\nparity not checked (-e export_parity=false): the export is not verified"
    if parity["passed"]:
        return f"{head}\nverified: {_parity_text(parity)}"
    return f"{head}\n{_failed_parity_text(parity, 'export.json')}"
