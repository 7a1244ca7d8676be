"""No rendered vector asks Megatron core 0.14 for something it cannot do (issue 34, point 1).

Each rule is read from core 0.14's ``training/training.py`` and ``training/arguments.py``: either the vector is
corrected and the plan says so (evaluation without a validation split), or the plan refuses naming the option, the
value and the fix.
"""

from __future__ import annotations

import pytest
from presets import load_preset, make_plan
from trainops.errors import PlanError
from trainops.layout import LayoutRequest, plan_layout
from trainops.megatron_args import (
    MOCK_DATA,
    RunPaths,
    TrainingConfig,
    build_megatron_args,
    check_training,
    evaluation,
    split_parts,
)

HOSTS = [
    {"name": "node1", "ansible_host": "10.0.0.1", "slots": 8, "accelerator": "musa"},
    {"name": "node2", "ansible_host": "10.0.0.2", "slots": 8, "accelerator": "musa"},
]
REAL = RunPaths("/data/d", "/data/tok", "HuggingFaceTokenizer", "/w/ck", "/w/tb")
MOCK = RunPaths(MOCK_DATA, "", "NullTokenizer", "/w/ck", "/w/tb")


def value_of(args, flag):
    return args[args.index(flag) + 1]


@pytest.mark.parametrize(
    ("split", "parts"),
    [
        ("1", [1.0, 0.0, 0.0]),
        ("100,0,0", [100.0, 0.0, 0.0]),
        ("98,0,2", [98.0, 0.0, 2.0]),
        ("98,2,0", [98.0, 2.0, 0.0]),
        ("969, 30, 1", [969.0, 30.0, 1.0]),
        ("0.9,0.1", [0.9, 0.1, 0.0]),
        ("0,0,0", None),
        ("1,1,1,1", None),
        ("a,b", None),
        ("-1,2", None),
        ("", None),
    ],
)
def test_split_is_read_as_megatron_reads_it(split, parts):
    assert split_parts(split) == parts


@pytest.mark.parametrize("split", ["1", "100,0,0", "98,0,2", "1,0"])
@pytest.mark.parametrize("layout", [{"tp": 1, "pp": 2}, {"tp": 1, "pp": 1}, {"tp": 2, "pp": 2}, {"tp": 8, "pp": 2}])
def test_no_validation_part_renders_eval_iters_0_for_every_layout(split, layout):
    """With real data and a split without a validation part, core 0.14 would still evaluate ([None] loaders) and
    die at the first evaluation, before that iteration's save: the plan renders --eval-iters 0 and says why."""
    p = make_plan(
        model=load_preset("llama3-8b"),
        hosts=HOSTS,
        run_id="r1",
        layout=layout,
        training={"split": split, "eval_iters": 10},
        force=True,
    )
    args = p["megatron_args"]
    assert value_of(args, "--split") == split
    assert value_of(args, "--eval-iters") == "0"
    assert p["evaluation"]["eval_iters"] == 0
    line = next(x for x in p["summary"] if x.startswith("evaluation "))
    assert "no validation part" in line and "98,2,0" in line


@pytest.mark.parametrize("layout", [{"tp": 1, "pp": 2}, {"tp": 1, "pp": 1}])
def test_the_default_vector_evaluates_only_with_a_validation_part(layout):
    p = make_plan(model=load_preset("llama3-8b"), hosts=HOSTS, run_id="r1", layout=layout)
    split, eval_iters = value_of(p["megatron_args"], "--split"), value_of(p["megatron_args"], "--eval-iters")
    assert (split_parts(split)[1] == 0) == (eval_iters == "0")
    assert int(eval_iters) == p["evaluation"]["eval_iters"]


def test_a_validation_part_keeps_evaluation(tiny, one_node):
    lay = plan_layout(tiny, one_node, LayoutRequest(precision="bf16", seq_length=256))
    t = TrainingConfig(split="98,2,0", eval_iters=5)
    assert value_of(build_megatron_args(tiny, lay, REAL, t), "--eval-iters") == "5"
    assert evaluation(t, REAL.data_path)[0] == 5


def test_mock_data_has_a_validation_split(tiny, one_node):
    """Megatron's mock data builds its own 1,1,1 split (blended_megatron_dataset_config.py): evaluation works."""
    lay = plan_layout(tiny, one_node, LayoutRequest(precision="bf16", seq_length=256))
    args = build_megatron_args(tiny, lay, MOCK, TrainingConfig(eval_iters=3))
    assert value_of(args, "--eval-iters") == "3" and "--split" not in args


@pytest.mark.parametrize(
    ("training", "needle"),
    [
        ({"split": "0,0,0"}, "training.split='0,0,0' is not Megatron's --split"),
        ({"split": "90,5,4,1"}, "one to three non-negative proportions"),
        ({"eval_interval": 0}, "training.eval_interval=0 must be a whole number >= 1"),
        ({"log_interval": 0}, "training.log_interval=0 must be a whole number >= 1"),
        ({"eval_iters": -1}, "training.eval_iters=-1 must be a whole number >= 0"),
        ({"min_lr": -1e-6, "lr": 1e-5}, "training.min_lr=-1e-06 must be >= 0"),
    ],
)
def test_what_megatron_cannot_run_is_refused(training, needle):
    assert any(needle in problem for problem in check_training(TrainingConfig(**training), 1000))
    with pytest.raises(PlanError, match=needle.replace("(", r"\(").replace(".", r"\.")):
        make_plan(model=load_preset("llama3-8b"), hosts=HOSTS, run_id="r1", layout={"pp": 2}, training=training)
