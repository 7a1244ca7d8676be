"""make_plan's experiment name, job and resume; the plan_with_resume filter."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from bundle_filters import all_filters
from presets import load_preset, make_plan
from trainops.errors import PlanError
from trainops.plan import exp_name_problems, with_resume

ROOT = Path(__file__).resolve().parents[2]
plan_with_resume = all_filters()["trainops_plan_with_resume"]

CPU_HOSTS = [
    {"name": "node1", "ansible_host": "172.30.0.11", "slots": 2, "accelerator": "cpu"},
    {"name": "node2", "ansible_host": "172.30.0.12", "slots": 2, "accelerator": "cpu"},
]
MUSA_HOSTS = [dict(host, accelerator="musa") for host in CPU_HOSTS]
LAYOUT = {"train_iters": 20, "seq_length": 256, "gbs": 8, "precision": "bf16"}
ODD_EXP = 'it\'s a "test"; $(touch x) `y` & | > < *'


def plan(hosts=CPU_HOSTS, **kwargs):
    kwargs.setdefault("layout", LAYOUT)
    kwargs.setdefault("run_id", "20261130-060020")
    return make_plan(model=load_preset("tiny"), hosts=hosts, work_home="/data/mtt-train-ops", **kwargs)


@pytest.mark.parametrize(
    "name",
    ["", " ", ".", "..", "a/b", "/", "a\0b", "a\nb", "a\rb", "my run", ODD_EXP, ".hidden", "\u00fcmlaut", "x" * 101],
)
def test_exp_names_refused(name):
    problems = exp_name_problems(name)
    assert len(problems) == 1 and problems[0].startswith("-e exp="), problems


@pytest.mark.parametrize("name", [None, "kill-a-rank", "run+lr=3e-4@v2", "a.b_c", "5", "x" * 100])
def test_exp_names_accepted(name):
    assert exp_name_problems(name) == []


def test_make_plan_refuses_a_bad_exp_name_with_the_other_problems():
    with pytest.raises(PlanError) as caught:
        plan(exp_name="a/b", layout=dict(LAYOUT, tp="x"))
    text = str(caught.value)
    assert "-e exp='a/b' must be one directory name" in text and "tp must be an integer" in text


def test_make_plan_refuses_a_run_id_that_is_not_one_safe_name():
    for run_id in ("r1\ntouch /tmp/PWNED #", "../../../x", "a b"):
        with pytest.raises(PlanError, match="-e run_id="):
            plan(run_id=run_id)


def test_exp_name_names_the_run_and_checkpoint_dirs():
    name = "run+lr=3e-4@v2"
    p = plan(exp_name=name)
    assert p["exp_name"] == name
    assert p["run_dir"] == f"/data/mtt-train-ops/runs/{name}/20261130-060020"
    assert p["checkpoint_dir"] == f"/data/mtt-train-ops/checkpoints/{name}"
    assert p["tensorboard_dir"] == f"{p['run_dir']}/tensorboard"
    assert f"experiment   {name}  (model tiny" in p["summary"][0]
    default = plan()
    # the model (with its architecture's digest), the sequence length and the precision, then the layout
    assert re.fullmatch(r"tiny-[0-9a-f]{6}_seq256_bf16_tp1_pp1_dp4_mbs1_numbs2_gbs8_gpus4", default["exp_name"])
    assert default["run_dir"] == f"/data/mtt-train-ops/runs/{default['exp_name']}/20261130-060020"


CUDA_HOSTS = [dict(host, accelerator="cuda") for host in CPU_HOSTS]


@pytest.mark.parametrize(
    ("hosts", "smoke", "job", "peak"),
    [(CPU_HOSTS, False, "megatron", None), (CPU_HOSTS, True, "smoke", None), (MUSA_HOSTS, False, "megatron", None)]
    + [(MUSA_HOSTS, True, "smoke", None), (CUDA_HOSTS, False, "megatron", 989.0)],
)
def test_job_and_peak(hosts, smoke, job, peak):
    p = plan(hosts=hosts, smoke=smoke)
    assert p["job"] == job
    assert p["peak_tflops_per_card"] == peak
    assert p["resume"] is None
    assert any(line.startswith("job          the smoke job") for line in p["summary"]) is (job == "smoke")


def test_accelerator_peak_override():
    given = plan(hosts=MUSA_HOSTS, accelerator_peak_tflops=500)
    assert given["peak_tflops_per_card"] == 500.0
    assert given["peak_source"] == "500 TFLOP/s set by -e accelerator_peak_tflops"


def test_the_peak_follows_the_runs_precision():
    layout = dict(LAYOUT, precision="fp8")
    fp8 = plan(hosts=CUDA_HOSTS, layout=layout)
    assert fp8["peak_tflops_per_card"] == 1979.0
    assert "peak         dense FP8 peak of the H100, 1979 TFLOP/s" in fp8["summary"]
    unknown = plan(hosts=MUSA_HOSTS, layout=layout)
    assert unknown["peak_tflops_per_card"] is None
    assert "peak         unknown peak for S5000 fp8 (set -e accelerator_peak_tflops=...)" in unknown["summary"]


def test_smoke_args_carry_the_plan():
    p = plan(hosts=MUSA_HOSTS, smoke=True, exp_name="smoke-test", training={"save_interval": 5})
    args = p["smoke_args"]
    pairs = dict(zip(args[::2], args[1::2], strict=True))
    assert len(pairs) * 2 == len(args)
    assert pairs == {
        "--tp": str(p["tp"]),
        "--pp": str(p["pp"]),
        "--cp": str(p["cp"]),
        "--train-iters": "20",
        "--micro-batch-size": str(p["micro_batch_size"]),
        "--global-batch-size": "8",
        "--seq-length": "256",
        "--data-path": p["data_path"],
        "--save": "/data/mtt-train-ops/checkpoints/smoke-test",
        "--load": "/data/mtt-train-ops/checkpoints/smoke-test",
        "--save-interval": "5",
        "--distributed-timeout-minutes": "10",
    }
    # Every flag is one that trainops/node/smoke_train.py's parser defines.
    smoke_job = ROOT / "plugins" / "module_utils" / "trainops" / "node" / "smoke_train.py"
    defined = set(re.findall(r'add_argument\(\s*"(--[a-z-]+)"', smoke_job.read_text()))
    assert set(pairs) <= defined


def test_with_resume_from_a_checkpoint():
    p = plan(exp_name="kill-a-rank")
    out = with_resume(p, 20)
    assert out["resume"] == {"iteration": 20, "from": "/data/mtt-train-ops/checkpoints/kill-a-rank"}
    assert out["summary"][-1] == (
        "resume       from iteration 20 in /data/mtt-train-ops/checkpoints/kill-a-rank (-e fresh=true: start anew)"
    )
    assert out["summary"][:-1] == p["summary"]
    assert p["resume"] is None and not any(x.startswith("resume ") for x in p["summary"])  # the input is kept
    again = with_resume(out, 40)
    assert [x for x in again["summary"] if x.startswith("resume ")] == [
        "resume       from iteration 40 in /data/mtt-train-ops/checkpoints/kill-a-rank (-e fresh=true: start anew)"
    ]


def test_with_resume_fresh_start():
    p = plan(exp_name="kill-a-rank")
    out = with_resume(with_resume(p, 20), None, moved_to="/data/mtt-train-ops/checkpoints/kill-a-rank.old")
    assert out["resume"] is None
    assert [x for x in out["summary"] if x.startswith("resume ")] == [
        "resume       none: a fresh start, checkpoints go to /data/mtt-train-ops/checkpoints/kill-a-rank "
        "(fresh=true: the earlier ones were moved to /data/mtt-train-ops/checkpoints/kill-a-rank.old)"
    ]
    assert with_resume(p, None)["summary"][-1] == (
        "resume       none: a fresh start, checkpoints go to /data/mtt-train-ops/checkpoints/kill-a-rank"
    )


@pytest.mark.parametrize(
    ("tracker", "iteration"), [("20\n", 20), (" 7 ", 7), ("release", 0), ("release\n", 0), ("", None), (None, None)]
)
def test_plan_with_resume_reads_the_tracker(tracker, iteration):
    out = plan_with_resume(plan(), tracker)
    assert (out["resume"] or {}).get("iteration") == iteration
    assert out["summary"][-1].startswith(
        "resume       from iteration" if iteration is not None else "resume       none"
    )


def test_plan_with_resume_passes_moved_to_and_ignores_an_empty_one():
    assert plan_with_resume(plan(), "", "/old")["summary"][-1].endswith(
        "(fresh=true: the earlier ones were moved to /old)"
    )
    assert plan_with_resume(plan(), "", "")["summary"][-1].endswith("_seq256_bf16_tp1_pp1_dp4_mbs1_numbs2_gbs8_gpus4")


@pytest.mark.parametrize("tracker", ["garbage", "-1", "1.5", "20 release"])
def test_plan_with_resume_refuses_garbage(tracker):
    with pytest.raises(AnsibleFilterError, match="latest_checkpointed_iteration.txt holds"):
        plan_with_resume(plan(), tracker)


def test_the_cpu_testbed_renders_megatron_with_gloo_and_no_fused_kernels():
    """The cpu backend's Megatron launch (behind the CPU patch): its profile's distributed backend and no fusions."""
    p = plan(distributed_backend="gloo", training={"fused_kernels": False})
    args = p["megatron_args"]
    assert p["job"] == "megatron"
    assert args[args.index("--distributed-backend") + 1] == "gloo"
    for flag in ("--no-gradient-accumulation-fusion", "--no-masked-softmax-fusion", "--no-persist-layer-norm"):
        assert flag in args
    assert "--distributed-backend" in plan()["megatron_args"] and "nccl" in plan()["megatron_args"]


def test_local_layers_without_apex_turn_sequence_parallelism_off_or_refuse_it():
    """Megatron core 0.14's torch norm (no Apex) asserts that sequence parallelism is off (torch_norm.py:32): seen
    when the testbed first ran the planner's tp=2 launch with real Megatron."""
    layout = dict(LAYOUT, tp=2, transformer_impl="local")
    p = plan(layout=layout, distributed_backend="gloo", training={"fused_kernels": False})
    assert p["sequence_parallel"] is False and "--sequence-parallel" not in p["megatron_args"]
    assert any("Megatron's local layers without Apex use torch's norm" in w for w in p["warnings"])
    with pytest.raises(PlanError, match="sequence_parallel=true with transformer_impl=local needs Apex"):
        plan(layout=dict(layout, sequence_parallel=True), training={"fused_kernels": False})
    assert plan(layout=layout)["sequence_parallel"] is True  # with the fused kernels (Apex), as before
