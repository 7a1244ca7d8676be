"""recompute=auto: the least recomputation that fits, from the planner's own memory model (issue 34, point 4)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from presets import load_preset, make_plan
from trainops.errors import PlanError
from trainops.layout import LayoutRequest, plan_layout, stage_memory
from trainops.memory import GIB
from trainops.options import OPTIONS
from trainops.recommend import recommend

HOSTS = [
    {"name": "node1", "ansible_host": "10.0.0.1", "slots": 8, "accelerator": "musa"},
    {"name": "node2", "ansible_host": "10.0.0.2", "slots": 8, "accelerator": "musa"},
]


def plan(**kwargs):
    kwargs.setdefault("model", load_preset("llama3-8b"))
    kwargs.setdefault("hosts", HOSTS)
    kwargs.setdefault("run_id", "r1")
    return make_plan(**kwargs)


def test_auto_is_the_default():
    assert LayoutRequest().recompute == "auto" and OPTIONS["recompute"].default == "auto"


@pytest.mark.parametrize(("pp", "gib"), [(2, 46.6), (1, 68.5)])
def test_the_runbook_job_recomputes_nothing(pp, gib):
    """2 x 8 S5000, llama3-8b, tp=1, seq 4096, fp8: no recompute fits at both layouts (of 72 GiB allowed)."""
    p = plan(layout={"tp": 1, "pp": pp})
    assert p["recompute"] == "none" and p["recompute_requested"] == "auto"
    assert round(p["memory_gib"]["total"], 1) == gib
    assert not any(a.startswith("--recompute") for a in p["megatron_args"])
    line = next(x for x in p["summary"] if x.startswith("recompute "))
    assert "auto: none" in line and f"{gib} GiB" in line
    assert "recompute none" in p["summary"][0]


def test_auto_picks_selective_when_it_is_the_least_that_fits(llama8b, two_nodes):
    """Without flash attention the s x s scores are kept: selective recompute drops exactly them."""
    lay = plan_layout(llama8b, two_nodes, LayoutRequest(tp=1, pp=2, flash_attention=False))
    assert lay.request.recompute == "selective"
    assert "auto: selective, the least that fits" in lay.recompute_reason and "none " in lay.recompute_reason
    none = plan_layout(llama8b, two_nodes, LayoutRequest(tp=1, pp=2, flash_attention=False, recompute="none"))
    assert max(st.total for st in stage_memory(llama8b, none)) / GIB > 72


def test_auto_picks_full_when_selective_does_not_fit(llama8b, two_nodes):
    lay = plan_layout(llama8b, two_nodes, LayoutRequest(tp=1, pp=1, mbs=2))
    assert lay.request.recompute == "full"
    assert "auto: full, the least that fits" in lay.recompute_reason


def test_full_renders_the_explicit_vector_as_before():
    for layout in ({"tp": 1, "pp": 1, "mbs": 2}, {"tp": 1, "pp": 2, "recompute": "full"}):
        args = plan(layout=layout)["megatron_args"]
        i = args.index("--recompute-granularity")
        assert args[i : i + 6] == [
            "--recompute-granularity",
            "full",
            "--recompute-method",
            "uniform",
            "--recompute-num-layers",
            "1",
        ]


def test_a_given_recompute_is_kept_and_said():
    p = plan(layout={"tp": 1, "pp": 2, "recompute": "selective"})
    assert p["recompute"] == "selective" and "given" in p["recompute_reason"]
    assert p["megatron_args"][p["megatron_args"].index("--recompute-granularity") + 1] == "selective"


def test_nothing_fits_even_full_is_refused_without_suggesting_full():
    with pytest.raises(PlanError) as info:
        plan(layout={"tp": 1, "pp": 1, "mbs": 4, "flash_attention": False})
    assert "or pass -e force=true" in str(info.value)
    p = plan(layout={"tp": 1, "pp": 1, "mbs": 4, "flash_attention": False}, force=True)
    assert p["recompute"] == "full" and "still does not fit" in p["recompute_reason"]


def test_the_headroom_is_the_plans(llama8b, two_nodes):
    """At 20 % headroom (64 GiB of 80) pp=1's 68.5 GiB no longer fits without recompute."""
    assert plan_layout(llama8b, two_nodes, LayoutRequest(pp=1), 0.1).request.recompute == "none"
    assert plan_layout(llama8b, two_nodes, LayoutRequest(pp=1), 0.2).request.recompute != "none"
    p = plan(layout={"pp": 1}, memory_headroom_fraction=0.2)
    assert p["recompute"] != "none" and "20% headroom" in p["recompute_reason"]


def test_the_recommendation_ranks_by_the_same_rule(llama8b, two_nodes):
    ranked = recommend(llama8b, two_nodes, LayoutRequest(), 1024)
    for est in ranked[:40]:
        lay = est.layout
        chosen = lay.request.recompute
        assert chosen in ("none", "selective", "full")
        if est.fits and chosen != "none":
            # a layout that recomputes does not fit with less
            for less in ("none", "selective")[: ("none", "selective", "full").index(chosen)]:
                cheaper = replace(lay, request=replace(lay.request, recompute=less))
                assert max(st.total for st in stage_memory(llama8b, cheaper)) / GIB > 72
    row = next(e for e in ranked if e.layout.tp == 1 and e.layout.pp == 2 and e.layout.micro_batch_size == 1)
    assert row.layout.request.recompute == "none"
