"""An experiment's identity (trainops.identity): the default experiment name carries the model, its architecture,
the sequence length and the precision; a resume refuses a checkpoint directory whose newest save recorded another
configuration (the arguments Megatron keeps in common.pt, as checkpoint_scan.py scan --args reads them), and adopts
the old-style directory of the same experiment."""

from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path

import pytest
from bundle_filters import all_filters
from presets import load_preset, make_plan
from trainops import identity
from trainops.identity import architecture_digest, check_directory, experiment_name, saved_args_differences
from trainops.model import model_from_dict

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints"
RECORDED = json.loads((FIXTURES / "megatron-tiny-tp1pp2dp2.json").read_text())
SAVED = json.loads((FIXTURES / "megatron-tiny-saved-args.json").read_text())["args"]
HOSTS = [
    {"name": "node1", "ansible_host": "172.30.0.11", "slots": 2, "accelerator": "cpu"},
    {"name": "node2", "ansible_host": "172.30.0.12", "slots": 2, "accelerator": "cpu"},
]
#: the run that wrote SAVED (tests/integration/test_megatron_train.py's tp1 pp2 dp2 run)
RUN = {"tp": 1, "pp": 2, "seq_length": 128, "precision": "fp32", "mbs": 2, "gbs": 8, "train_iters": 30}
CKPT = "/data/mtt-train-ops/checkpoints/megatron-tp1pp2"


def plan(model="tiny", exp_name="megatron-tp1pp2", **layout):
    spec = load_preset(model) if isinstance(model, str) else model
    return make_plan(model=spec, hosts=HOSTS, layout=dict(RUN, **layout), run_id="r1", exp_name=exp_name,
                     data_path="mock", work_home="/data/mtt-train-ops")  # fmt: skip


def listing(args=SAVED, **changes) -> dict:
    out = copy.deepcopy(RECORDED)
    out["dir"] = CKPT
    out["saves"][-1]["args"] = copy.deepcopy(args)
    out.update(changes)
    return out


# --- the experiment name -------------------------------------------------------------------------------------------


def test_the_default_name_carries_model_architecture_sequence_and_precision_before_the_layout():
    p = plan(exp_name=None)
    digest = architecture_digest(model_from_dict(load_preset("tiny")))
    layout_part = "tp1_pp2_dp2_mbs2_numbs2_gbs8_gpus4"
    assert p["exp_name"] == f"tiny-{digest}_seq128_fp32_{layout_part}"
    assert p["checkpoint_dir"] == f"/data/mtt-train-ops/checkpoints/{p['exp_name']}"
    assert p["run_dir"] == f"/data/mtt-train-ops/runs/{p['exp_name']}/r1"
    assert p["checkpoint_dir_before"] == f"/data/mtt-train-ops/checkpoints/{layout_part}"  # the old-style name
    assert f"--save {p['checkpoint_dir']}" in " ".join(p["megatron_args"])


def test_runbook_name_for_llama3_8b():
    musa = [dict(h, slots=8, accelerator="musa") for h in HOSTS]
    p = make_plan(model=load_preset("llama3-8b"), hosts=musa, layout={"pp": 2}, run_id="r1")
    assert p["exp_name"].startswith("llama3-8b-") and p["exp_name"].endswith(
        "_seq4096_fp8_tp1_pp2_dp8_mbs1_numbs128_gbs1024_gpus16"
    )


def test_sequence_precision_and_architecture_each_change_the_name_and_a_given_name_is_kept():
    base = plan(exp_name=None)["exp_name"]
    assert plan(exp_name=None, seq_length=256)["exp_name"] != base
    assert plan(exp_name=None, precision="bf16")["exp_name"] != base
    deeper = dict(load_preset("tiny"), num_layers=6)  # a custom preset that keeps the name
    other = plan(model=deeper, exp_name=None, pp=2)["exp_name"]
    assert other.startswith("tiny-") and other != base
    same = dict(load_preset("tiny"), name="tiny", description="another text, the same model")
    assert plan(model=same, exp_name=None)["exp_name"] == base
    given = plan(exp_name="mine")
    assert given["exp_name"] == "mine" and given["checkpoint_dir_before"] is None


def test_an_odd_preset_name_is_made_one_safe_directory_name():
    spec = model_from_dict(dict(load_preset("tiny"), name="my model/v2 " + "x" * 60))
    name = experiment_name(spec, _layout_like(plan()))
    assert name.startswith("my-model-v2-xxx") and " " not in name and "/" not in name and len(name) <= 100


def _layout_like(p):
    class _Request:
        precision = p["precision"]

    class _Lay:
        seq_length = p["seq_length"]
        request = _Request()
        exp_name = "tp1_pp2_dp2_mbs2_numbs2_gbs8_gpus4"

    return _Lay()


# --- the saved arguments against the plan --------------------------------------------------------------------------


def test_the_run_that_wrote_the_directory_matches_it():
    assert saved_args_differences(SAVED, plan()) == {"fatal": [], "stated": [], "schedule": []}
    found = check_directory(listing(), plan(), "node1")
    assert found == {"refused": "", "lines": [], "compared": 15}


def test_tp_pp_and_dp_differences_are_not_compared():
    assert saved_args_differences(SAVED, plan(tp=2, pp=1, gbs=8))["fatal"] == []


def test_another_sequence_length_is_refused_naming_node_directory_values_and_the_fix():
    found = check_directory(listing(), plan(seq_length=256), "node1")
    text = found["refused"]
    assert text.startswith(f"node1: the checkpoint directory {CKPT} was written by another configuration")
    assert "iteration 15's save" in text and "seq_length: saved 128, planned 256" in text
    assert "Nothing was started or changed" in text
    assert "-e exp=NAME" in text and "-e fresh=true" in text and "-e seq_length=128" in text


def test_another_model_is_refused_with_every_differing_argument():
    bigger = dict(load_preset("tiny"), num_layers=6, hidden_size=256, ffn_hidden_size=704, swiglu=False)
    text = check_directory(listing(), plan(model=bigger), "node1")["refused"]
    for needle in (
        "num_layers: saved 4, planned 6",
        "hidden_size: saved 128, planned 256",
        "ffn_hidden_size: saved 352, planned 704",
        "kv_channels: saved 16, planned 32",
        "swiglu: saved true, planned false",
        "-e model=<the preset it was written with>",
    ):
        assert needle in text, text


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"num_query_groups": 2}, "num_query_groups: saved 4, planned 2"),
        ({"num_query_groups": 8}, "num_query_groups: saved 4, planned 8"),  # plain multi-head attention
        ({"normalization": "LayerNorm"}, "normalization: saved RMSNorm, planned LayerNorm"),
        ({"untie_embeddings_and_output_weights": False}, "untie_embeddings_and_output_weights: saved true"),
        ({"rotary_base": 500000}, "rotary_base: saved 10000, planned 500000"),
        ({"add_bias_linear": True}, "add_bias_linear: saved false, planned true"),
        ({"vocab_size": 32000}, "padded_vocab_size: saved 4096, planned 32000"),
    ],
)
def test_each_architecture_difference_is_fatal(change, needle):
    text = check_directory(listing(), plan(model=dict(load_preset("tiny"), **change)), "node1")["refused"]
    assert needle in text, text


def test_precision_and_vocabulary_padding_are_only_stated():
    found = check_directory(listing(), plan(precision="bf16"), "node1")
    assert found["refused"] == ""
    assert found["lines"] == [
        "checkpoint   iteration 15's save differs: precision: saved fp32, planned bf16 (the same weights train on; "
        "results are not comparable; resumed)"
    ]
    padded = dict(SAVED, padded_vocab_size=4352, vocab_size=4100, tensor_model_parallel_size=2)  # 4100 at tp 2
    stated = saved_args_differences(padded, plan(model=dict(load_preset("tiny"), vocab_size=4100)))
    assert stated["fatal"] == [] and [e["arg"] for e in stated["stated"]] == ["padded_vocab_size"]


def test_fp8_is_named_with_its_format():
    saved = dict(SAVED, bf16=True, fp8="hybrid")
    found = saved_args_differences(saved, plan(precision="bf16"))
    assert found["stated"][0]["saved"] == "bf16+fp8 hybrid" and found["stated"][0]["planned"] == "bf16"


def test_keys_an_older_megatron_did_not_record_are_not_compared():
    older = {k: v for k, v in SAVED.items() if k not in ("rotary_base", "kv_channels", "bf16", "fp16")}
    assert saved_args_differences(older, plan(model=dict(load_preset("tiny"), rotary_base=500000))) == {
        "fatal": [],
        "stated": [],
        "schedule": [],
    }
    # a save without the scheduler's state (an older Megatron, no optimizer saved): its schedule is not compared
    assert saved_args_differences(SAVED, plan(train_iters=40))["schedule"] == []
    assert saved_args_differences(SAVED, plan(train_iters=40), {"max_lr": 1.5e-05})["schedule"] == []


def test_the_newest_save_with_arguments_is_compared_and_none_means_no_comparison():
    two = listing()
    two["saves"][0]["args"] = dict(SAVED, seq_length=64)  # an old save of another run: the newest decides
    assert check_directory(two, plan(), "node1")["refused"] == ""
    none = copy.deepcopy(RECORDED)
    assert check_directory(none, plan(seq_length=256), "node1") == {"refused": "", "lines": [], "compared": None}


def test_the_smoke_jobs_saves_and_megatrons_do_not_mix():
    smoky = copy.deepcopy(RECORDED)
    smoky["saves"][-1]["files"] = {"smoke.pt": 1000}
    text = check_directory(smoky, plan(), "node1")["refused"]
    assert "holds saves written by the smoke job (iteration 15)" in text and "-e exp=NAME" in text
    smoke_plan = dict(plan(), job="smoke")
    assert "written by Megatron's pretrain_gpt.py" in check_directory(listing(), smoke_plan, "node1")["refused"]


# --- the old-style directory ---------------------------------------------------------------------------------------


def test_an_old_style_directory_of_the_same_configuration_is_adopted():
    p = plan(exp_name=None)
    old = listing(dir=p["checkpoint_dir_before"], legacy_of=p["checkpoint_dir"])
    found = check_directory(old, p, "node1")
    assert found["refused"] == ""
    assert found["adopt"] == {"from": p["checkpoint_dir_before"], "to": p["checkpoint_dir"]}
    assert f"the old-style directory {p['checkpoint_dir_before']}" in found["lines"][-1]
    assert f"moved to {p['checkpoint_dir']} and resumed from" in found["lines"][-1]


def test_an_old_style_directory_of_another_configuration_is_refused_and_left_alone():
    p = plan(exp_name=None, seq_length=256)
    old = listing(dir=p["checkpoint_dir_before"], legacy_of=p["checkpoint_dir"])
    found = check_directory(old, p, "node1")
    assert "adopt" not in found
    text = found["refused"]
    assert f"node1: {p['checkpoint_dir']} has no saves, and the old-style checkpoint directory" in text
    assert "seq_length: saved 128, planned 256" in text
    assert f"-e fresh=true to start anew in {p['checkpoint_dir']} ({p['checkpoint_dir_before']} is left" in text
    assert "-e seq_length=128" in text
    unknown = copy.deepcopy(RECORDED)
    unknown.update(dir=p["checkpoint_dir_before"], legacy_of=p["checkpoint_dir"])
    assert "records no arguments" in check_directory(unknown, p, "node1")["refused"]


# --- the resume choice (the filter checkpoint_resume.yml calls) ----------------------------------------------------

choose = all_filters()["trainops_resume_choice"]


def test_the_resume_choice_refuses_another_configuration_even_unverified():
    scan = {"stdout": json.dumps(listing())}
    for verify in (True, False):
        refused = choose(scan, plan(seq_length=256), verify, "node1")
        assert "seq_length: saved 128, planned 256" in refused["refused"] and refused["resume"] == ""
    ok = choose(scan, plan(), True, "node1")
    assert ok["refused"] == "" and ok["resume"] == "15" and ok["adopt"] is None


def test_the_resume_choice_adopts_an_old_style_directory():
    p = plan(exp_name=None)
    scan = {"stdout": json.dumps(listing(dir=p["checkpoint_dir_before"], legacy_of=p["checkpoint_dir"]))}
    choice = choose(scan, replace_job(p), True, "node1")
    assert choice["refused"] == "" and choice["resume"] == "15"
    assert choice["adopt"] == {"from": p["checkpoint_dir_before"], "to": p["checkpoint_dir"]}


def replace_job(p):
    # the recorded saves are the tp1 pp2 dp2 run's: its plan's checkpoint size is the one they are judged against
    return dict(p, checkpoint_bytes=25034240)


def _record(runs: Path, earlier: dict, run_id: str, verdicts=("verified",), mtime: float = 1000.0) -> Path:
    """An earlier run's controller records, as train.yml leaves them: plan/plan.json and the ledger."""
    where = runs / earlier["exp_name"] / run_id
    (where / "plan").mkdir(parents=True)
    (where / "plan" / "plan.json").write_text(json.dumps(dict(earlier, run_id=run_id)))
    saves = [{"iteration": 10 * (i + 1), "verdict": v} for i, v in enumerate(verdicts)]
    (where / "checkpoints.json").write_text(json.dumps({"saves": saves}))
    saved = [{"iteration": s["iteration"]} for s in saves]
    (where / "summary.json").write_text(json.dumps({"checkpoints": {"saved": saved, "loaded": []}}))
    os.utime(where / "plan" / "plan.json", (mtime, mtime))
    return where


def test_the_controllers_records_refuse_another_configuration_before_any_node_is_contacted(tmp_path):
    """Issue 34: the run at seq 128 that saved (verified) in the directory, recorded on this controller, refuses a
    run at seq 256 with the same -e exp before any SSH, naming the record, the save, the values and the fix; the
    same configuration, -e fresh=true, another cluster's record (other addresses) and a run without a verified
    save do not."""
    from trainops.identity import earlier_run_refusal

    runs = tmp_path / "runs"
    earlier = plan()
    record = _record(runs, earlier, "20261204-100000", ("verified", "verified", "bad"))
    wanted = plan(seq_length=256)
    text = earlier_run_refusal(str(runs), wanted, fresh=False)
    assert f"the checkpoint directory {CKPT} was written by another configuration" in text
    assert f"recorded on this controller in {record}" in text and "verified iteration 20's save" in text
    assert "seq_length: saved 128, planned 256" in text and "no node was contacted" in text
    assert "-e seq_length=128" in text and "-e fresh=true" in text
    assert earlier_run_refusal(str(runs), plan(tp=2, pp=1, gbs=8), fresh=False) == ""  # tp/pp re-shard
    longer = earlier_run_refusal(str(runs), plan(train_iters=40), fresh=False)
    assert longer.startswith(f"train.yml: the checkpoint directory {CKPT} (run megatron-tp1pp2/20261204-100000")
    assert "the learning-rate schedule differs" in longer and longer.endswith("no node was contacted.")
    assert earlier_run_refusal(str(runs), wanted, fresh=True) == ""
    assert earlier_run_refusal(str(tmp_path / "none"), wanted, fresh=False) == ""
    # a plan that has not read the dataset's manifest yet (train.yml's first) is not refused for its vocabulary
    from_manifest = dict(earlier, padded_vocab_size=384, vocab_source="the tokenizer's (dataset manifest)")
    _record(runs, from_manifest, "20261204-110000", mtime=2000)
    assert earlier_run_refusal(str(runs), plan(), fresh=False) == ""
    assert "padded_vocab_size: saved 384, planned 4096" in earlier_run_refusal(
        str(runs), dict(plan(), vocab_source="the tokenizer's (dataset manifest)"), fresh=False
    )
    elsewhere = dict(wanted, nodes=[dict(n, addr="10.9.9." + str(i)) for i, n in enumerate(wanted["nodes"])])
    assert earlier_run_refusal(str(runs), elsewhere, fresh=False) == ""


def test_a_newer_run_that_moved_the_directory_aside_or_damaged_records_end_no_run(tmp_path):
    from trainops.identity import earlier_run_refusal

    runs = tmp_path / "runs"
    _record(runs, plan(), "old", ("verified",), mtime=1000)
    wanted = plan(seq_length=256)
    # a newer run whose ledger judged the old run's saves but which saved none itself (it failed at load) is passed
    # over: the old run wrote them
    failed = _record(runs, plan(seq_length=256), "failed-at-load", ("verified",), mtime=1500)
    (failed / "summary.json").write_text(json.dumps({"checkpoints": {"saved": [], "loaded": []}}))
    assert "run megatron-tp1pp2/old" in earlier_run_refusal(str(runs), wanted, fresh=False)
    # a run that kept an earlier save's schedule (lr_schedule_on_resume=checkpoint) leaves the schedule to the master
    kept = dict(plan(train_iters=40), megatron_args=[*plan()["megatron_args"], "--use-checkpoint-opt_param-scheduler"])
    kept_dir = _record(runs, kept, "kept", ("verified",), mtime=1700)
    assert earlier_run_refusal(str(runs), plan(train_iters=50), fresh=False) == ""
    shutil.rmtree(kept_dir)
    # the smoke job has no Megatron scheduler: a longer smoke run resumes (a longer Megatron run would not)
    smoke_runs = tmp_path / "smoke-runs"
    _record(smoke_runs, dict(plan(), job="smoke"), "smoke-old")
    assert earlier_run_refusal(str(smoke_runs), dict(plan(train_iters=50), job="smoke"), fresh=False) == ""
    assert "schedule differs" in earlier_run_refusal(str(runs), plan(train_iters=50), fresh=False)
    # a newer run without a verified save is passed over; the older one that saved still refuses
    newer = _record(runs, plan(), "newer", ("bad",), mtime=2000)
    assert "run megatron-tp1pp2/old" in earlier_run_refusal(str(runs), wanted, fresh=False)
    # a damaged record is skipped, never an error
    (newer / "checkpoints.json").write_bytes(b'{"saves": [{"iter')
    assert "run megatron-tp1pp2/old" in earlier_run_refusal(str(runs), wanted, fresh=False)
    # the newest run moved the directory aside (fresh=true) and saved nothing verified: nothing to refuse
    _record(runs, dict(plan(), checkpoint_dir_before=CKPT + ".before-moved"), "moved", (), mtime=3000)
    assert earlier_run_refusal(str(runs), wanted, fresh=False) == ""


#: The learning-rate scheduler's state Megatron core 0.14 saves with the tp1 pp2 dp2 run's iteration 15
#: (``opt_param_scheduler`` in common.pt, OptimizerParamScheduler.state_dict): gbs 8, train_iters 30,
#: --lr-warmup-iters 3 (a tenth), the decay over all 30 iterations, in samples.
SCHEDULER = {
    "max_lr": 1.5e-05, "lr_warmup_steps": 24, "num_steps": 120, "lr_decay_style": "cosine", "lr_decay_steps": 240,
    "min_lr": 1.5e-06, "start_wd": 0.1, "end_wd": 0.1, "wd_incr_style": "constant", "wd_incr_steps": 240,
}  # fmt: skip


def test_another_learning_rate_schedule_is_refused_before_megatron_asserts_on_load_unless_chosen():
    """Megatron's OptimizerParamScheduler asserts on load that the warm-up, decay and weight-decay steps (in samples),
    the rates and the decay style equal the save's (core 0.14): a resume with another train_iters (the warm-up is a
    tenth of it, the decay and weight-decay steps all of it) died at load. Compared with the scheduler's state the
    save holds, it is refused before the launch, naming each value, unless training.lr_schedule_on_resume chooses
    (then the Megatron flag is rendered and a line says)."""
    from trainops.identity import schedule_verdict

    assert saved_args_differences(SAVED, plan(), SCHEDULER)["schedule"] == []
    longer = plan(train_iters=40)
    found = saved_args_differences(SAVED, longer, SCHEDULER)
    assert found["fatal"] == [] and {e["arg"]: (e["saved"], e["planned"]) for e in found["schedule"]} == {
        "lr_warmup_steps": (24, 32),
        "lr_decay_steps": (240, 320),
        "wd_incr_steps": (240, 320),
    }
    scanned = listing()
    scanned["saves"][-1]["scheduler"] = SCHEDULER
    result = check_directory(scanned, longer, "node1")
    assert result["refused"].startswith(f"node1: the checkpoint directory {CKPT}: the learning-rate schedule differs")
    assert "lr_decay_steps: saved 240, planned 320" in result["refused"]
    assert (
        "Megatron's scheduler refuses to load it" in result["refused"] and "lr_schedule_on_resume" in result["refused"]
    )
    # the same schedule with another layout (tp/pp re-shard; the global batch kept) is not a difference; the steps
    # are samples, so another global batch is; older names of the state are read as Megatron reads them
    assert saved_args_differences(SAVED, plan(tp=2, pp=1), SCHEDULER)["schedule"] == []
    assert saved_args_differences(SAVED, plan(gbs=16), SCHEDULER)["schedule"]
    old_names = {"start_lr": 1.5e-05, "warmup_iter": 24, "end_iter": 240, "decay_style": "cosine", "min_lr": 1.5e-06}
    assert saved_args_differences(SAVED, plan(), old_names)["schedule"] == []
    for choice, flag, said in (
        ("checkpoint", "--use-checkpoint-opt_param-scheduler", "the save's is kept"),
        ("override", "--override-opt_param-scheduler", "this run's applies from the resumed iteration on"),
    ):
        chosen = make_plan(model=load_preset("tiny"), hosts=HOSTS, layout=dict(RUN, train_iters=40), run_id="r1",
                           exp_name="megatron-tp1pp2", data_path="mock", work_home="/data/mtt-train-ops",
                           training={"lr_schedule_on_resume": choice})  # fmt: skip
        assert flag in chosen["megatron_args"]
        result = check_directory(scanned, chosen, "node1")
        assert result["refused"] == "" and any(said in line for line in result["lines"]), result
    assert schedule_verdict([], longer, 30) == ("", "")
    with pytest.raises(Exception, match="lr_schedule_on_resume='later' must be one of refuse, checkpoint, override"):
        make_plan(model=load_preset("tiny"), hosts=HOSTS, layout=RUN, run_id="r1", data_path="mock",
                  training={"lr_schedule_on_resume": "later"})  # fmt: skip


def test_a_new_run_id_sorts_by_time_and_differs_within_one_second():
    ids = {identity.new_run_id(1764896100.0) for _ in range(50)}
    assert len(ids) > 40 and all(i.startswith("20251205-005500-") for i in ids)
    assert identity.new_run_id(1764896100.0) < identity.new_run_id(1764896101.0)


def test_a_run_directory_is_claimed_once(tmp_path):
    assert identity.claim_run_dir(str(tmp_path), "exp", "r1", "plan.yml", True) == ""
    assert (tmp_path / "exp" / "r1").is_dir()
    refused = identity.claim_run_dir(str(tmp_path), "exp", "r1", "train.yml", True)
    assert refused.startswith("train.yml: run id r1 names an earlier run of exp on this controller")
    assert "Leave -e run_id out" in refused and "resumes from its checkpoints" in refused
    assert "claimed by a run refused before it wrote anything: remove the empty" in refused  # r1 holds nothing
    (tmp_path / "exp" / "r1" / "run.json").write_text("{}")  # the record of a train.yml refused before its launch
    assert "refused before its launch, which left only its record: remove" in identity.claim_run_dir(
        str(tmp_path), "exp", "r1", "train.yml", True
    )
    (tmp_path / "exp" / "r1" / "plan").mkdir()
    assert "refused before" not in identity.claim_run_dir(str(tmp_path), "exp", "r1", "train.yml", True)
    generated = identity.claim_run_dir(str(tmp_path), "exp", "r1", "plan.yml", False)
    assert "Run it again" in generated and "resumes" not in generated
    (tmp_path / "file").write_text("")
    unwritable = identity.claim_run_dir(str(tmp_path / "file"), "exp", "r2", "plan.yml", False)
    assert "cannot be made on this controller" in unwritable and "-e runs_dir" in unwritable
