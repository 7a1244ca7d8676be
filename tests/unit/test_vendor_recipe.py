"""recipe=vendor renders the vendor's Llama3-8B recipe (issue 34, point 8).

The plan is made for inventory/example (2 x 8 S5000, accelerator musa) through the planner the layout role calls,
with the training settings the role passes from the MUSA backend profile, and its argument vector is compared flag by
flag with the vendor's (tests/fixtures/vendor-launch/, copied from shared/reference/mt-llama3-8b-vendor-launch.md).
Only the argument lists are compared: the entry point is the backend profile's (megatron_entrypoint).
Every difference is listed below with its reason; any other difference fails.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from presets import BACKENDS, ROOT, load_preset, make_plan
from trainops.errors import PlanError

FIXTURES = ROOT / "tests" / "fixtures" / "vendor-launch"

#: Flags the vendor passes that the recipe does not render, and why (core 0.14 ignores each, or it is equivalent).
ONLY_VENDOR = {
    "--use-mcore-models": "ignored by core 0.14 (the core GPT model is the only one pretrain_gpt.py builds)",
    "--use-flash-attn": "read only by the legacy model and by the vendor's local DotProductAttention; with "
    "--transformer-impl transformer_engine the attention follows --attention-backend",
    "--sequence-parallel": "validate_args turns it off at tp=1",
    "--initial-loss-scale": "acts only with --fp16 (the run is bf16/fp8)",
    "--min-loss-scale": "acts only with --fp16",
    "--recompute-granularity": "the vendor's full/block/0 recomputes no layer (transformer_block.py checkpoints the "
    "first 0 layers of each stage): the recipe renders recompute none as no recompute flag",
    "--recompute-method": "as --recompute-granularity",
    "--recompute-num-layers": "as --recompute-granularity",
}
#: Flags the recipe renders that the vendor does not, and why (ours by design, or Megatron's default made explicit).
ONLY_OURS = {
    "--data-cache-path": "ours by design: the sample indexes go to the shared checkpoint dir, so ranks on another "
    "node find them",
    "--attention-backend": "Megatron's default (auto), rendered so the plan states the attention it estimates",
    "--ckpt-format": "Megatron 0.14's default (torch_dist), rendered so a resume at another layout is stated",
    "--distributed-timeout-minutes": "Megatron's default (10), rendered from the plan",
}
#: Flags both pass with other values, and why.
OTHER_VALUE = {
    "--save": "ours by design: <work_home>/checkpoints/<exp> (the vendor's $WORK_HOME/checkpoints/<EXP>)",
    "--load": "ours by design, as --save",
    "--tensorboard-dir": "ours by design: in the run dir (<work_home>/runs/<exp>/<run id>/tensorboard)",
    "--save-interval": "ours by design: a checkpoint every 1000 iterations, so a restart loses at most 1000; the "
    "vendor's 200000 is above its 23841 iterations (one save, at the end)",
}


def read_fixture(name: str) -> list[str]:
    lines = (FIXTURES / name).read_text().splitlines()
    return [tok for line in lines if line and not line.startswith("#") for tok in line.split()]


def flags(args: list[str]) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    key = None
    for tok in args:
        if tok.startswith("--"):
            assert tok not in out, f"{tok} twice"
            key, out[tok] = tok, ()
        else:
            out[key] += (tok,)
    return out


def same(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Equal values, numbers compared as numbers (1e-5 is 1e-05)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        try:
            if float(x) != float(y):
                return False
        except ValueError:
            if x != y:
                return False
    return True


def example_hosts() -> list[dict]:
    """inventory/example's nodes as the layout role passes them (cluster variables on every host)."""
    inv = yaml.safe_load((ROOT / "inventory" / "example" / "hosts.yml").read_text())["all"]
    common = {k: v for k, v in inv["vars"].items() if k in ("accelerator", "accelerator_card")}
    return [{"name": name, **common, **host} for name, host in inv["children"]["nodes"]["hosts"].items()]


def vendor_plan(pp: int, **layout):
    profile = BACKENDS["musa"]
    return make_plan(
        model=load_preset("llama3-8b"),
        hosts=example_hosts(),
        run_id="r1",
        layout={"tp": 1, "pp": pp, "recipe": "vendor", **layout},
        # what roles/layout passes from the backend profile
        training={
            "fused_kernels": profile["megatron_fused_kernels"],
            "log_straggler": profile["megatron_log_straggler"],
        },
        distributed_backend=profile["megatron_distributed_backend"],
        printed_flops_convention=profile["megatron_flops_convention"],
    )


@pytest.mark.parametrize(("pp", "fixture"), [(2, "tp1-pp2.args"), (1, "tp1-pp1.args")])
def test_the_recipe_is_the_vendors_vector(pp, fixture):
    plan = vendor_plan(pp)
    ours, vendor = flags(plan["megatron_args"]), flags(read_fixture(fixture))
    assert sorted(set(vendor) - set(ours)) == sorted(ONLY_VENDOR)
    assert sorted(set(ours) - set(vendor)) == sorted(ONLY_OURS)
    differ = sorted(f for f in set(ours) & set(vendor) if not same(ours[f], vendor[f]))
    assert differ == sorted(OTHER_VALUE), {f: (ours[f], vendor[f]) for f in differ}
    assert ours["--save"] == (plan["checkpoint_dir"],) and ours["--save-interval"] == ("1000",)


def test_the_recipe_in_numbers():
    p2, p1 = vendor_plan(2), vendor_plan(1)
    a2, a1 = flags(p2["megatron_args"]), flags(p1["megatron_args"])
    assert a2["--train-samples"] == a1["--train-samples"] == ("24414062",)
    assert a2["--lr-warmup-samples"] == ("2048000",) and a1["--lr-warmup-samples"] == ("4096000",)
    assert "--train-iters" not in a2 and "--lr-warmup-iters" not in a2 and "--rotary-base" not in a2
    assert p2["stage_layers"] == [18, 14] and a2["--decoder-last-pipeline-num-layers"] == ("14",)
    assert "--decoder-last-pipeline-num-layers" not in a1
    # Megatron trains train_samples // gbs iterations; the plan says as many
    assert p2["train_iters"] == 24414062 // 1024 and p1["train_iters"] == 24414062 // 2048
    assert p2["recipe"] == "vendor" and p2["recompute"] == "none"
    assert p2["recompute_reason"] == "none (the vendor's recipe recomputes nothing)"  # not "given"
    assert any(line.startswith("recipe       vendor") for line in p2["summary"])


def test_what_the_user_gives_wins_over_the_recipe():
    p = vendor_plan(2, recompute="full", last_stage_layers=15)
    args = flags(p["megatron_args"])
    assert args["--recompute-granularity"] == ("full",) and args["--decoder-last-pipeline-num-layers"] == ("15",)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"layout": {"recipe": "vendor", "train_iters": 10}}, "recipe=vendor trains by samples"),
        ({"layout": {"recipe": "vendor"}, "model": "tiny"}, "recipe=vendor is the vendor's llama3-8b script"),
        ({"layout": {"recipe": "vendor"}, "training": {"train_samples": 100}}, "less than one global batch"),
        (
            {"layout": {"recipe": "vendor"}, "training": {"train_samples": 2048000}},
            "the warm-up of 2048000 samples is not shorter than train_samples=2048000",
        ),
    ],
)
def test_a_recipe_megatron_cannot_run_is_refused(kwargs, needle):
    model = load_preset(kwargs.pop("model", "llama3-8b"))
    layout = {"pp": 2, **kwargs.pop("layout")}
    with pytest.raises(PlanError, match=needle):
        make_plan(model=model, hosts=example_hosts(), run_id="r1", layout=layout, force=True, **kwargs)


def test_the_default_recipe_is_unchanged():
    args = flags(
        make_plan(model=load_preset("llama3-8b"), hosts=example_hosts(), run_id="r1", layout={"pp": 2})["megatron_args"]
    )
    assert args["--rotary-base"] == ("500000",) and "--train-iters" in args and "--no-bias-swiglu-fusion" not in args


def test_the_fixtures_say_where_they_came_from():
    for name in ("tp1-pp2.args", "tp1-pp1.args"):
        text = Path(FIXTURES / name).read_text()
        assert "mt-llama3-8b-vendor-launch.md" in text and text.startswith("# ")
