"""export.yml's decisions on the controller (trainops.export): the save from the run's ledger, where it goes, the
controller's room, and the lines of the result; train.yml's -e init_from in the plan."""

from __future__ import annotations

import json
import shutil

import pytest
from presets import load_preset, make_plan
from trainops import export
from trainops.errors import PlanError
from trainops.plan import with_resume

PLAN = {"work_home": "/data/mtt-train-ops", "exp_name": "llama", "run_id": "20261206-000000-abcd",
        "parameters": 8_030_261_248, "precision": "bf16"}  # fmt: skip


def _save(iteration: int, verdict: str = "verified", reasons=()) -> dict:
    return {"iteration": iteration, "name": f"iter_{iteration:07d}", "verdict": verdict, "reasons": list(reasons)}


def _run(tmp_path, saves, removed=()):
    (tmp_path / "checkpoints.json").write_text(json.dumps({"saves": saves, "removed": list(removed)}))
    return str(tmp_path)


def test_the_newest_verified_save_is_taken_by_default(tmp_path):
    run = _run(tmp_path, [_save(10), _save(20), _save(30, "bad", ["shard __1_0.distcp is 0 bytes"])])
    assert export.choose_save(run) == {"save": _save(20), "problem": ""}


def test_a_save_the_ledger_does_not_trust_is_refused_unless_asked_for(tmp_path):
    run = _run(tmp_path, [_save(10), _save(30, "bad", ["shard __1_0.distcp is 0 bytes"])])
    refused = export.choose_save(run, 30)
    assert "iteration 30 is bad in the run's ledger (shard __1_0.distcp is 0 bytes)" in refused["problem"]
    assert "-e export_unverified=true" in refused["problem"]
    assert export.choose_save(run, 30, allow_unverified=True) == {"save": refused["save"], "problem": ""}
    assert export.choose_save(run, 10)["save"]["iteration"] == 10


def test_no_verified_save_unknown_or_removed_iterations_and_no_ledger_are_refused(tmp_path):
    run = _run(tmp_path, [_save(10, "pending")], removed=[{"iteration": 5, "name": "iter_0000005"}])
    assert "no save of the run is verified (saves: 10 pending)" in export.choose_save(run)["problem"]
    assert "iteration 5 was removed by the run's retention" in export.choose_save(run, 5)["problem"]
    assert "has no save of iteration 7 (saves: 10 pending)" in export.choose_save(run, 7)["problem"]
    (tmp_path / "checkpoints.json").unlink()
    assert "checkpoint ledger" in export.choose_save(str(tmp_path))["problem"]


def test_the_export_goes_beside_the_runs_work_home_unless_a_path_is_given():
    assert export.node_dir(PLAN, _save(20)) == "/data/mtt-train-ops/exports/llama/20261206-000000-abcd-iter_0000020"
    assert export.node_dir(PLAN, _save(20), "/scratch/llama-hf") == "/scratch/llama-hf"


def test_the_controller_needs_room_for_the_weights_and_a_new_directory(tmp_path):
    free = shutil.disk_usage(tmp_path).free
    assert export.controller_room(str(tmp_path / "new" / "hf"), {**PLAN, "parameters": 1000}) == ""
    huge = {**PLAN, "parameters": free}  # two bytes each in bf16: twice the free room
    problem = export.controller_room(str(tmp_path / "hf"), huge)
    assert "free at" in problem and "leave the export on the node" in problem
    assert "exists" in export.controller_room(str(tmp_path), PLAN)


def _result(passed: bool = True) -> dict:
    return {
        "out": "/x/hf", "save": "/c/iter_0000010", "iteration": 10, "tensors": 39, "bytes": 1630464,
        "dtype": "bfloat16", "vocab_size": 300, "padded_vocab_size": 384, "write_seconds": 0.4,
        "write_peak_rss_mib": 410.0, "seconds": 2.5, "peak_rss_mib": 520.0, "verified": passed,
        "parity": {"passed": passed, "sequences": 4, "length": 128, "tokens": "/data/d", "largest_logit": 2.0,
                   "largest_logit_difference": 0.0 if passed else 0.0368, "logit_tolerance": 2e-4,
                   "megatron_loss": 5.7, "hf_loss": 5.7 if passed else 5.701, "loss_relative_difference": 0.0,
                   "loss_tolerance": 1e-4, "first_differing_layer": None if passed else 2},
    }  # fmt: skip


def test_the_result_says_verified_or_names_the_difference_and_the_layer():
    text = export.result_text(_result(), "node1")
    assert text.startswith("exported iteration 10 of /c/iter_0000010 to node1:/x/hf: 39 tensors, 1.6 MiB")
    assert "\nverified: Megatron's model and transformers' LlamaForCausalLM on 4 sequences of 128 tokens" in text
    failed = export.result_text(_result(passed=False), "node1")
    assert "NOT VERIFIED" in failed and "largest logit difference 0.0368" in failed
    assert "the first layer whose output differs: 2" in failed
    unchecked = {**_result(), "parity": None, "verified": False}
    assert "parity not checked (-e export_parity=false)" in export.result_text(unchecked, "node1")
    assert export.result_text({"error": "no metadata.json"}, "node1") == "node1: export failed: no metadata.json"


def test_init_from_imports_before_a_fresh_start_and_renders_the_pretrained_checkpoint():
    hosts = [{"name": "node1", "ansible_host": "10.0.0.1", "slots": 8, "accelerator": "musa"}]
    common = {"model": load_preset("llama3-8b"), "hosts": hosts, "run_id": "r1", "layout": {"tp": "1", "pp": "1"}}
    plan = make_plan(**common, init_from="/data/hf/Meta-Llama-3-8B")
    imported = f"{plan['checkpoint_dir']}.imported"
    assert (plan["init_from"], plan["init_checkpoint"]) == ("/data/hf/Meta-Llama-3-8B", imported)
    # what Meta-Llama-3-8B's config.json says (the preset is that model, with the tokenizer's 128,256 tokens)
    assert plan["init_expect"] == {
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256, "rope_theta": 500000.0,
        "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
    }  # fmt: skip
    args = plan["megatron_args"]
    assert args[args.index("--pretrained-checkpoint") + 1] == imported
    fresh = with_resume(plan, None)["summary"][-1]
    assert f"a fresh start from the weights of /data/hf/Meta-Llama-3-8B (imported to {imported})" in fresh
    assert "--pretrained-checkpoint" not in make_plan(**common)["megatron_args"]
    with pytest.raises(PlanError) as refused:
        make_plan(**common, init_from="/data/hf/x", smoke=True, data_path="mock")
    assert any("the smoke job does not load weights" in p for p in refused.value.problems)
    assert any("mock data has no tokenizer" in p for p in refused.value.problems)
    with pytest.raises(PlanError) as refused:
        make_plan(**common, init_from="/data/hf/x", training={"save_interval": 0})
    assert any("training.save_interval is 0 (no checkpoints)" in p for p in refused.value.problems)


def test_a_node_programs_result_is_its_last_json_line_or_why_there_is_none():
    printed = {"rc": 0, "stdout_lines": ["a warning", '{"verified": true}'], "stderr": ""}
    assert export.program_result(printed, "export_hf.py") == {"verified": True}
    crashed = {"rc": 1, "stdout_lines": [], "stderr": "Traceback ...\nRuntimeError: out of memory"}
    assert export.program_result(crashed, "import_hf.py") == {
        "error": "import_hf.py ended with 1: Traceback ...\nRuntimeError: out of memory"
    }
    unreachable = {"msg": "Failed to connect to the host via ssh"}
    assert "ended with None: Failed to connect" in export.program_result(unreachable, "export_hf.py")["error"]


def test_the_whole_decision_refuses_the_run_then_the_save_then_the_controllers_directory(tmp_path):
    hosts = [{"name": "node1", "ansible_host": "10.0.0.1"}]
    run = tmp_path / "runs" / "llama" / "r1"
    (run / "plan").mkdir(parents=True)
    plan = {**PLAN, "run_id": "r1", "master": "node1", "checkpoint_dir": "/data/mtt-train-ops/checkpoints/llama",
            "nodes": [{"name": "node1", "addr": "10.0.0.1"}], "parameters": 1000}  # fmt: skip
    assert "no plan/plan.json" in export.export_job(str(run), hosts)["problem"]
    (run / "plan" / "plan.json").write_text(json.dumps(plan))
    assert "checkpoint ledger" in export.export_job(str(run), hosts)["problem"]
    (run / "checkpoints.json").write_text(json.dumps({"saves": [_save(10)]}))
    assert "exists" in export.export_job(str(run), hosts, export_dir=str(tmp_path))["problem"]
    job = export.export_job(str(run), hosts, export_dir=str(tmp_path / "hf"), parity=False)
    assert job["problem"] == "" and job["save"] == "/data/mtt-train-ops/checkpoints/llama/iter_0000010"
    assert job["out"] == "/data/mtt-train-ops/exports/llama/r1-iter_0000010" and job["parity"] is False
    assert job["line"] == (f"export iter_0000010 (verified in the run's ledger) of {run} on node1, to {job['out']}, "
                           f"fetched to {tmp_path / 'hf'}")  # fmt: skip
