"""Enumerate every valid layout of a cluster and rank it by estimated throughput.

The cost model (documented in docs/cost-model.md) is first-order and explains
itself: one iteration's time per card is

* compute: the iteration's model FLOPs (x 4/3 with full recompute) over
  ``world x peak x efficiency``; efficiency falls with narrower GEMMs
  (hidden/TP) and shorter micro-batches (MBS x seq);
* the pipeline bubble: ``(PP-1) / (VPP x micro-batches)`` of the compute, and
  the slowest stage's excess over the mean (uneven splits);
* tensor-parallel traffic: 8 all-gathers/reduce-scatters of ``s*b*h`` BF16
  per layer and micro-batch (forward and backward), at the intra-node bus
  bandwidth, or the inter-node one when a TP group spans nodes;
* pipeline traffic: activations and their gradients across every stage boundary;
* data-parallel traffic: the gradient reduce-scatter (FP32) and parameter
  all-gather (BF16) of the card's shard, not overlapped.

Layouts whose most loaded stage does not fit the card minus headroom are
listed after all that fit, marked as such.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .cluster import Cluster
from .errors import PlanError
from .flops import flops_per_iteration, layer_flops_per_token, output_layer_flops_per_token
from .layout import (
    Layout,
    LayoutRequest,
    divisors,
    memory_limit_gib,
    parse_version,
    plan_layout,
    stage_memory,
    tp_allowed,
)
from .memory import GIB, parameter_counts
from .model import ModelSpec

MBS_CHOICES = (1, 2, 4, 8)
BASE_EFFICIENCY = 0.55  # the best GEMM efficiency assumed for large, wide GEMMs


@dataclass(frozen=True)
class Estimate:
    """The cost model's verdict on one layout."""

    layout: Layout
    iteration_s: float
    tokens_per_s_per_card: float
    memory_gib: float
    fits: bool
    terms_s: dict[str, float]

    def explain(self) -> str:
        total = self.iteration_s
        parts = [f"{name} {100 * value / total:.0f}%" for name, value in self.terms_s.items() if value / total >= 0.005]
        return ", ".join(parts)


def estimate(model: ModelSpec, cluster: Cluster, layout: Layout, headroom_fraction: float) -> Estimate:
    """Time one iteration of ``layout`` with the cost model."""
    req = layout.request
    tp, pp, dp = layout.tp, layout.pp, layout.dp
    vpp = layout.vpp or 1
    m = layout.num_microbatches
    s, b, h = layout.seq_length, layout.micro_batch_size, model.hidden_size
    world = layout.world_size
    nodes = len(cluster.nodes)
    per_node = cluster.slots_per_node
    intra = cluster.intra_busbw_gbps * 1e9
    inter = cluster.inter_busbw_gbps * 1e9

    flops = flops_per_iteration(model, s, layout.padded_vocab, layout.global_batch_size)["causal"]
    hardware = flops * (4 / 3 if req.recompute == "full" else 1.0)
    width = h / tp
    tokens = b * s / layout.cp
    efficiency = BASE_EFFICIENCY * (width / (width + 512)) * (tokens / (tokens + 1024))
    rate, _ = cluster.cost_model_tflops(req.precision)
    compute = hardware / (world * rate * 1e12 * efficiency)

    unit = layer_flops_per_token(model, s)
    stage_cost = [n * unit for n in layout.stage_layers]
    stage_cost[-1] += output_layer_flops_per_token(model, layout.padded_vocab)
    imbalance = max(stage_cost) / (sum(stage_cost) / pp) - 1
    bubble = compute * ((pp - 1) / (vpp * m) + imbalance)

    layers_here = max(layout.stage_layers)
    tp_bw = intra if tp <= per_node else inter
    tp_bytes = 8 * s * b * h * 2 * (tp - 1) / tp * layers_here * m / layout.cp
    tp_time = tp_bytes / tp_bw

    cross_node = nodes > 1 and world // pp >= per_node
    pp_bytes = 2 * 2 * s * b * h / tp * m * vpp / layout.cp if pp > 1 else 0.0
    pp_time = pp_bytes / (inter if cross_node else intra)

    counts = parameter_counts(model, layout.padded_vocab)
    shard_params = (layers_here * counts["layer"] + counts["embedding"]) / tp
    grad_bytes = 4 if req.distributed_optimizer else 8
    dp_bytes = shard_params * (grad_bytes + 2) * (dp - 1) / dp if dp > 1 else 0.0
    dp_group_span = tp * layout.cp * dp
    dp_time = dp_bytes / (inter if nodes > 1 and dp_group_span > per_node else intra)

    stages = stage_memory(model, layout)
    peak_gib = max(st.total for st in stages) / GIB
    terms = {"compute": compute, "bubble": bubble, "tp-comm": tp_time, "pp-comm": pp_time, "dp-comm": dp_time}
    total = sum(terms.values())
    return Estimate(
        layout=layout,
        iteration_s=total,
        tokens_per_s_per_card=layout.global_batch_size * s / total / world,
        memory_gib=peak_gib,
        fits=peak_gib <= memory_limit_gib(cluster, headroom_fraction),
        terms_s=terms,
    )


def candidate_requests(model: ModelSpec, cluster: Cluster, base: LayoutRequest, gbs: int):
    """Every (tp, pp, vpp, mbs) that can be valid for the cluster at a fixed global batch."""
    world = cluster.world_size
    version = parse_version(base.megatron_version)
    cp = base.cp
    for tp in divisors(world):
        if not tp_allowed(model, tp, version) or world % (tp * cp):
            continue
        for pp in divisors(world // (tp * cp)):
            if pp > model.num_layers:
                continue
            dp = world // (tp * pp * cp)
            for mbs in MBS_CHOICES:
                if gbs % (mbs * dp):
                    continue
                m = gbs // (mbs * dp)
                vpps: list[int | None] = [None]
                if pp > 1 and m % pp == 0:
                    vpps += list(range(2, model.num_layers // pp + 1))
                for vpp in vpps:
                    yield replace(
                        base,
                        tp=tp,
                        pp=pp,
                        vpp=vpp,
                        mbs=mbs,
                        gbs=gbs,
                        num_microbatches=None,
                        first_stage_layers=None,
                        last_stage_layers=None,
                        sequence_parallel=None,
                    )


def recommend(
    model: ModelSpec,
    cluster: Cluster,
    base: LayoutRequest,
    gbs: int,
    headroom_fraction: float = 0.1,
    vocab_size: int | None = None,
) -> list[Estimate]:
    """All valid layouts: those that fit first, by tokens/s/card (best first), then those that do not, by the memory
    they need (closest to fitting first). With ``recompute=auto``
    (the default) each layout gets the least recomputation that fits, as the plan does
    (:func:`.layout.choose_recompute`), and is timed with it (full recompute costs a third more compute).
    ``vocab_size``: the tokenizer's vocabulary, as :func:`.layout.plan_layout` takes it."""
    results = []
    for request in candidate_requests(model, cluster, base, gbs):
        try:
            layout = plan_layout(model, cluster, request, headroom_fraction, vocab_size)
        except PlanError:
            continue
        results.append(estimate(model, cluster, layout, headroom_fraction))
    # those that fit by speed; those that do not by how close they come to fitting (-e force=true shows them)
    results.sort(key=lambda e: (False, -e.tokens_per_s_per_card) if e.fits else (True, e.memory_gib))
    return results


def describe(rank: int, est: Estimate) -> dict:
    """One row of recommendations.json / the printed table."""
    lay = est.layout
    return {
        "rank": rank,
        "tp": lay.tp,
        "pp": lay.pp,
        "cp": lay.cp,
        "vpp": lay.vpp,
        "dp": lay.dp,
        "mbs": lay.micro_batch_size,
        "num_microbatches": lay.num_microbatches,
        "global_batch_size": lay.global_batch_size,
        "stage_layers": list(lay.stage_layers),
        "recompute": lay.request.recompute,
        "memory_gib": round(est.memory_gib, 2),
        "fits": est.fits,
        "iteration_s": round(est.iteration_s, 4),
        "tokens_per_s_per_card": round(est.tokens_per_s_per_card, 1),
        "time_split": {k: round(v / est.iteration_s, 4) for k, v in est.terms_s.items()},
        "why": est.explain(),
    }
