"""Property tests over random clusters, models and layouts."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from presets import BACKENDS
from trainops.cluster import uniform_cluster
from trainops.errors import PlanError
from trainops.layout import LayoutRequest, plan_layout
from trainops.model import ModelSpec

models = st.builds(
    lambda layers, heads_pow, groups_pow, head_dim: ModelSpec(
        name="random",
        num_layers=layers,
        hidden_size=(2**heads_pow) * head_dim,
        ffn_hidden_size=4 * (2**heads_pow) * head_dim,
        num_attention_heads=2**heads_pow,
        num_query_groups=2 ** min(groups_pow, heads_pow),
        vocab_size=32000,
        max_position_embeddings=8192,
    ),
    st.integers(1, 96),
    st.integers(0, 6),
    st.integers(0, 6),
    st.sampled_from([16, 64, 128]),
)
requests = st.builds(
    LayoutRequest,
    tp=st.sampled_from([1, 2, 3, 4, 8, 16]),
    pp=st.integers(1, 12),
    cp=st.sampled_from([1, 1, 2]),
    vpp=st.sampled_from([None, None, 2, 3, 4]),
    mbs=st.sampled_from([1, 2, 4]),
    num_microbatches=st.sampled_from([None, 1, 4, 8, 12, 128]),
    seq_length=st.sampled_from([1024, 4096, 4100]),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=models, nodes=st.integers(1, 16), slots=st.sampled_from([1, 2, 4, 6, 8]), req=requests)
def test_accepted_layouts_are_consistent_and_refusals_have_reasons(model, nodes, slots, req):
    cluster = uniform_cluster(nodes, slots, BACKENDS)
    try:
        lay = plan_layout(model, cluster, req)
    except PlanError as exc:
        assert exc.problems, "a refusal must name its reasons"
        assert all(isinstance(p, str) and len(p) > 20 for p in exc.problems)
        return
    assert lay.tp * lay.pp * lay.cp * lay.dp == cluster.world_size
    assert lay.global_batch_size == lay.micro_batch_size * lay.dp * lay.num_microbatches
    assert sum(lay.stage_layers) == model.num_layers
    assert len(lay.stage_layers) == lay.pp
    assert min(lay.stage_layers) >= 1
    assert model.num_attention_heads % lay.tp == 0
    if lay.vpp:
        assert all(n % lay.vpp == 0 for n in lay.stage_layers)
        assert lay.num_microbatches % lay.pp == 0
    if lay.pp == 1:
        assert lay.decoder_first_pipeline_num_layers is None and lay.decoder_last_pipeline_num_layers is None
    if lay.pp > 2:
        middles = lay.stage_layers[1:-1]
        assert len(set(middles)) == 1, "Megatron needs equal middle stages"
    if lay.decoder_last_pipeline_num_layers is not None:
        assert lay.stage_layers[-1] == lay.decoder_last_pipeline_num_layers
    if lay.decoder_first_pipeline_num_layers is not None:
        assert lay.stage_layers[0] == lay.decoder_first_pipeline_num_layers
