"""Layout derivation and validation against Megatron's rules."""

from __future__ import annotations

import pytest
from presets import BACKENDS
from trainops.cluster import uniform_cluster
from trainops.errors import PlanError
from trainops.layout import LayoutRequest, padded_vocab_size, plan_layout, split_stages


def test_runbook_two_nodes_tp1_pp2(llama8b, two_nodes):
    lay = plan_layout(llama8b, two_nodes, LayoutRequest(tp=1, pp=2, mbs=1, num_microbatches=128))
    assert (lay.world_size, lay.dp, lay.global_batch_size) == (16, 8, 1024)
    assert lay.exp_name == "tp1_pp2_dp8_mbs1_numbs128_gbs1024_gpus16"
    assert sum(lay.stage_layers) == 32


def test_runbook_one_node_tp1_pp2(llama8b, one_node):
    lay = plan_layout(llama8b, one_node, LayoutRequest(tp=1, pp=2, mbs=1, num_microbatches=128))
    assert (lay.world_size, lay.dp, lay.global_batch_size) == (8, 4, 512)
    assert lay.exp_name == "tp1_pp2_dp4_mbs1_numbs128_gbs512_gpus8"


def test_pp1_never_passes_stage_flags(llama8b, two_nodes):
    lay = plan_layout(llama8b, two_nodes, LayoutRequest(tp=1, pp=1))
    assert lay.stage_layers == (32,)
    assert lay.decoder_first_pipeline_num_layers is None
    assert lay.decoder_last_pipeline_num_layers is None


def test_pp2_moves_layers_off_the_output_stage(llama8b, two_nodes):
    """The output layer costs about two layers of Llama3-8B: the last stage gets fewer."""
    lay = plan_layout(llama8b, two_nodes, LayoutRequest(tp=1, pp=2))
    assert lay.stage_layers == (17, 15)
    assert lay.decoder_first_pipeline_num_layers is None
    assert lay.decoder_last_pipeline_num_layers == 15


def test_even_split_when_it_is_as_good(llama8b, two_nodes):
    lay = plan_layout(llama8b, two_nodes, LayoutRequest(tp=2, pp=4, vpp=2))
    assert lay.stage_layers == (8, 8, 8, 8)
    assert lay.decoder_last_pipeline_num_layers is None


def test_sequence_parallel_follows_tp(llama8b, two_nodes):
    assert not plan_layout(llama8b, two_nodes, LayoutRequest(tp=1)).sequence_parallel
    assert plan_layout(llama8b, two_nodes, LayoutRequest(tp=2)).sequence_parallel


def test_gbs_given_derives_microbatches(llama8b, two_nodes):
    lay = plan_layout(llama8b, two_nodes, LayoutRequest(tp=2, pp=1, mbs=2, gbs=256))
    assert (lay.dp, lay.num_microbatches) == (8, 16)


@pytest.mark.parametrize(("tp", "padded"), [(1, 128256), (2, 128256), (4, 128512), (8, 129024)])
def test_padded_vocab(tp, padded):
    assert padded_vocab_size(128256, tp) == padded


def problems_of(model, cluster, **kwargs) -> list[str]:
    with pytest.raises(PlanError) as info:
        plan_layout(model, cluster, LayoutRequest(**kwargs))
    return info.value.problems


def test_bad_tp_names_valid_alternatives(llama8b, two_nodes):
    problems = problems_of(llama8b, two_nodes, tp=3)
    assert "tp=3 does not divide 32 attention heads; valid tp: 1, 2, 4, 8" in problems[0]


def test_every_problem_reported_at_once(llama8b, two_nodes):
    problems = problems_of(llama8b, two_nodes, tp=3, pp=5, gbs=1001, seq_length=16384)
    text = "\n".join(problems)
    assert "tp=3 does not divide" in text
    assert "not divisible by tp*pp*cp" in text
    assert "exceeds the model's max_position_embeddings" in text
    assert len(problems) >= 3


def test_gbs_not_divisible_suggests_neighbours(llama8b, two_nodes):
    (problem,) = problems_of(llama8b, two_nodes, tp=1, pp=2, gbs=1001)
    assert "global batch 1001 is not divisible by mbs*dp = 1*8 = 8" in problem
    assert "nearest valid gbs: 1000, 1008" in problem


def test_query_groups_rule_depends_on_version(llama70b):
    cluster = uniform_cluster(2, 8, BACKENDS)
    problems = problems_of(llama70b, cluster, tp=16, megatron_version="0.14")
    assert "must be a divisor of the 8 query groups" in problems[0]
    assert plan_layout(llama70b, cluster, LayoutRequest(tp=16, megatron_version="0.16")).tp == 16


def test_vpp_needs_pp_and_microbatches_multiple(llama8b, two_nodes):
    assert any("needs pp > 1" in p for p in problems_of(llama8b, two_nodes, pp=1, vpp=2))
    problems = problems_of(llama8b, two_nodes, tp=2, pp=4, vpp=2, num_microbatches=6)
    assert any("multiple of pp=4" in p and "use num_microbatches 4 or 8" in p for p in problems)


def test_vpp_without_a_split_lists_valid_vpp(llama8b, two_nodes):
    problems = problems_of(llama8b, two_nodes, tp=2, pp=4, vpp=3, num_microbatches=8)
    assert any("valid vpp: 2, 4, 8" in p for p in problems)


def test_context_parallel_sequence_rule(llama8b, two_nodes):
    problems = problems_of(llama8b, two_nodes, cp=4, seq_length=4100)
    assert any("not divisible by 2*cp = 8" in p for p in problems)


def test_strings_and_garbage_types_are_refused(llama8b, two_nodes):
    problems = problems_of(llama8b, two_nodes, tp=0, mbs=-1)
    assert any("tp must be a positive integer" in p for p in problems)
    assert any("mbs must be a positive integer" in p for p in problems)


def test_explicit_stage_override_is_checked(llama8b, two_nodes):
    lay = plan_layout(llama8b, two_nodes, LayoutRequest(pp=2, last_stage_layers=14))
    assert lay.stage_layers == (18, 14) and lay.decoder_last_pipeline_num_layers == 14
    problems = problems_of(llama8b, two_nodes, pp=4, first_stage_layers=6)
    assert any("do not split evenly" in p for p in problems)


def test_split_stages_rules():
    stages, first, last = split_stages(32, 3, None, 2.0)
    assert sum(stages) == 32 and min(stages) >= 1
    assert stages[-1] < stages[0]  # the output stage is lighter
    assert split_stages(32, 4, 3, 2.0) is None  # no split into multiples of 3
    assert split_stages(32, 1, None, 2.0) == ((32,), None, None)
    stages, _, _ = split_stages(32, 4, 2, 2.0)
    assert all(n % 2 == 0 for n in stages)
