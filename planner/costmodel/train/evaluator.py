"""The exact evaluator: the single source of truth for what a plan costs.

``evaluate(model, cluster, plan)`` composes the pure terms of :mod:`layer` and
:mod:`stage`:

    t_stage(r)  = sum over layers of r (fwd + bwd + recompute + exposed TP/CP/EP comm)
                  + embedding (r = 0) + LM head (r = pp-1) + p2p + ZeRO-2/3 exposure
    T_iteration = (m + (pp-1)/v) * max_r t_stage(r) + max_r (exposed DP + optimizer)

and the memory of the worst pipeline rank. docs/cost-model.md states every formula.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pydantic import Field

import numpy as np

from planner.costmodel import constants as C
from planner.costmodel.compose import (
    Overlap,
    bubble_s,
    busy_s,
    dp_window_microbatches,
    headroom_bytes,
    iteration_time_s,
    straggler_share,
    split_p2p,
    stage_memory,
    stage_time,
    tail_time,
)
from planner.costmodel.layer import (
    MFU_CONVENTION,
    masked_attention_flops_per_sequence,
    LayerCost,
    LayerShape,
    LayerStrategy,
    Net,
    layer_cost,
    model_flops_per_sequence,
)
from planner.costmodel.energy import iteration_energy_j
from planner.costmodel.numerics import Numerics
from planner.costmodel.network import PlacementError, combine, group_spans
from planner.costmodel.pipeline import (END_ONLY_CHUNKS, Stage, chunk_sizes, distinct_stages,
                                         stage_layout)
from planner.costmodel.moe import expert_spans
from planner.costmodel.train.offload import (
    OffloadTimes,
    host_state_bytes,
    missing_tier_reason,
    offload_times,
)
from planner.costmodel.train.stage import (
    EndCost,
    add_dp_comm,
    add_states,
    dp_comm,
    dp_overlap_units,
    expert_dp_size,
    stage_params_split,
    comm_buffer_bytes,
    reduce_bucket_bytes,
    embedding_cost,
    head_cost,
    optimizer_step_s,
    p2p_time_per_microbatch_s,
    state_bytes,
    tied_embedding_sync_s,
)
from planner.specs.base import Spec
from planner.specs.cluster import ClusterSpec
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan
from planner.costmodel.moe import shared_ffn

TIME_KEYS = ("forward", "backward", "recompute", "tp_comm", "cp_comm", "ep_comm", "pp_comm",
             "dp_comm", "bubble", "optimizer", "straggler")
MEMORY_KEYS = ("weights", "gradients", "optimizer", "activations", "workspace", "comm_buffers",
               "reserve")
#: Iteration-time component of the offload tier (PCIe/C2C transfers and the CPU optimizer
#: step); in the breakdown only when the cluster has an offload tier.
OFFLOAD_KEY = "offload"
#: Host (offload tier) memory per GPU: what the offloads put there.
HOST_MEMORY_KEYS = ("weights", "gradients", "optimizer")


class Estimate(Spec):
    """What one plan costs on one cluster. Times in seconds, memory in bytes."""

    feasible: bool
    reasons: list[str] = Field(default_factory=list)
    iteration_time_s: float | None = None
    time_breakdown_s: dict[str, float] = Field(default_factory=dict)
    memory_per_gpu_bytes: float | None = None
    memory_breakdown_bytes: dict[str, float] = Field(default_factory=dict)
    hbm_capacity_bytes: float = 0.0
    worst_memory_stage: int | None = None
    bottleneck_stage: int | None = None
    num_gpus: int = 0
    num_microbatches: float = 0.0
    model_flops: float = 0.0
    hardware_flops: float = 0.0
    mfu: float | None = None
    hfu: float | None = None
    tokens_per_s: float | None = None
    tflops_per_gpu: float | None = None
    gpu_busy_s: float | None = Field(None, description="mean kernel time per GPU per iteration")
    energy_j: float | None = Field(None, description="energy of one iteration, PUE included")
    host_memory_per_gpu_bytes: float | None = Field(
        None, description="offload-tier memory of the worst stage (clusters with a tier)")
    host_memory_breakdown_bytes: dict[str, float] = Field(default_factory=dict)
    host_capacity_bytes: float | None = Field(None, description="offload tier per GPU")
    expected_error_pct: float | None = Field(
        None, description="symmetric band, percent of the iteration time, that the measured "
        "time is expected within (planner.validation.band: runs held out by source near "
        "this regime); None: no band, expected_error_note says why")
    expected_error_note: str | None = Field(
        None, description="what the band rests on, or why there is none")

    def to_json(self) -> dict:
        """The stable JSON object of ``planner evaluate --json``."""
        gib = lambda b: None if b is None else b / C.GiB  # noqa: E731
        return {
            "feasible": self.feasible,
            "reasons": list(self.reasons),
            "iteration_time_s": self.iteration_time_s,
            "memory_per_gpu_gib": gib(self.memory_per_gpu_bytes),
            "time_breakdown_s": dict(self.time_breakdown_s),
            "memory_breakdown_gib": {k: v / C.GiB for k, v in self.memory_breakdown_bytes.items()},
            "hbm_capacity_gib": self.hbm_capacity_bytes / C.GiB,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "flops_convention": MFU_CONVENTION,
            "tokens_per_s": self.tokens_per_s,
            "tflops_per_gpu": self.tflops_per_gpu,
            "gpu_busy_s": self.gpu_busy_s,
            "energy_per_iteration_j": self.energy_j,
            "model_flops": self.model_flops,
            "num_gpus": self.num_gpus,
            "num_microbatches": self.num_microbatches,
            "bottleneck_stage": self.bottleneck_stage,
            "worst_memory_stage": self.worst_memory_stage,
            "expected_error_pct": self.expected_error_pct,
            "expected_error_note": self.expected_error_note,
            **({} if self.host_capacity_bytes is None else {
                "host_memory_per_gpu_gib": gib(self.host_memory_per_gpu_bytes),
                "host_memory_breakdown_gib": {
                    k: v / C.GiB for k, v in self.host_memory_breakdown_bytes.items()},
                "host_capacity_gib": self.host_capacity_bytes / C.GiB,
            }),
        }


# ---- structural checks -----------------------------------------------------------------
class Uncostable(str):
    """A structural reason after which the plan cannot be costed at all (more GPUs than
    the cluster has, more stages than layers, offloads without a tier)."""


def check_structure(model: ModelSpec, cluster: ClusterSpec, plan: Plan,
                    allow_idle_gpus: bool = False) -> list[str]:
    """Every reason the plan cannot run, short of memory."""
    r: list[str] = []
    world = plan.world_size
    n = cluster.num_gpus
    if world > n:
        r.append(Uncostable(f"tp x cp x dp x pp = {plan.tp} x {plan.cp} x {plan.dp} x "
                            f"{plan.pp} = {world} GPUs, but the cluster has {n}"))
    elif world < n and not allow_idle_gpus:
        r.append(f"tp x cp x dp x pp = {world} but the cluster has {n} GPUs; the product must "
                 "equal the GPU count (or allow idle GPUs)")
    heads, kv = model.num_attention_heads, model.kv_heads
    if heads % plan.tp:
        r.append(f"tp={plan.tp} does not divide num_attention_heads={heads}")
    elif kv % plan.tp:
        # no KV-head replication: Megatron-Core core_v0.15.3 transformer_config.py
        # (__post_init__: "num_query_groups must be a multiple of tensor_model_parallel_size")
        # and torchtitan's attention (its view of n_kv_heads / tp heads) both split whole groups
        r.append(f"tp={plan.tp} does not divide num_kv_heads={kv} (the query groups: "
                 "Megatron-Core and torchtitan give each TP rank whole KV heads)")
    # the divisibility first: the layer types are counted afresh on every read
    if model.ffn_hidden_size % plan.tp and "dense" in model.layer_types:
        r.append(f"tp={plan.tp} does not divide ffn_hidden_size={model.ffn_hidden_size}")
    if plan.seq_len % plan.cp:
        r.append(f"cp={plan.cp} does not divide seq_len={plan.seq_len}")
    if plan.cp > 1 and plan.cp_comm == "all_to_all" and (heads // max(plan.tp, 1)) % plan.cp:
        r.append(f"cp_comm=all_to_all needs cp={plan.cp} to divide the heads per TP rank "
                 f"({heads}/{plan.tp})")
    if plan.global_batch_size % (plan.dp * plan.microbatch_size):
        r.append(f"global_batch_size={plan.global_batch_size} is not divisible by dp x "
                 f"microbatch_size = {plan.dp} x {plan.microbatch_size}")
    r += _moe_structure(model, plan)
    if plan.overlap_moe_ep_comm:
        r += _ep_overlap_structure(model, plan)
    if plan.offloads and cluster.offload is None:
        r.append(Uncostable(missing_tier_reason(plan.offload_optimizer, plan.offload_params,
                                                cluster.name)))
    s = plan.pp * plan.virtual_stages
    if chunk_sizes(model.num_layers, s, plan.uneven_pipeline) is None and s > model.num_layers:
        r.append(Uncostable(
            f"pp x virtual_stages = {s} exceeds num_layers={model.num_layers}" + (
                f" + {END_ONLY_CHUNKS} (an embedding-only and a loss-only end chunk)"
                if plan.uneven_pipeline else "")))
    elif model.num_layers % s and not plan.uneven_pipeline:
        r.append(f"num_layers={model.num_layers} is not divisible by pp x virtual_stages = {s} "
                 "(set uneven_pipeline: true to give the end stages fewer layers)")
    if plan.virtual_stages > 1:
        m = plan.num_microbatches
        if plan.pp == 1:
            r.append("virtual_stages > 1 needs pp > 1")
        elif m == int(m) and int(m) % plan.pp:
            r.append(f"the interleaved schedule needs the microbatch count {int(m)} to be a "
                     f"multiple of pp={plan.pp} (Megatron-LM)")
    return r


def _moe_structure(model: ModelSpec, plan: Plan) -> list[str]:
    """Expert-parallel rules, as Megatron-Core checks them (MoE parallel folding): ep
    divides the experts, and expert-TP x EP x PP divides the world, i.e. ``etp x ep``
    divides the ``tp x cp x dp`` ranks of a pipeline stage, so the EP group may span the
    attention's TP, CP and DP ranks (megatron/core/parallel_state.py
    initialize_model_parallel: "world_size ... is not divisible by
    expert_tensor_model_pipeline_parallel size", NVIDIA/Megatron-LM commit 00caa53); it does
    not ask expert_tp to divide tp. The expert tensor-parallel degree divides the expert
    FFN width."""
    r: list[str] = []
    moe = model.moe
    if moe is None:
        if plan.ep > 1:
            r.append(f"ep={plan.ep} needs a mixture-of-experts model")
        if plan.expert_tp not in (None, plan.tp):
            r.append(f"expert_tp={plan.expert_tp} needs a mixture-of-experts model")
        return r
    if moe.num_experts % plan.ep:
        r.append(f"ep={plan.ep} does not divide moe.num_experts={moe.num_experts}")
    etp = plan.etp
    stage = plan.tp * plan.cp * plan.dp
    if stage % (etp * plan.ep):
        # no expert-data-parallel group exists: nothing to cost (a zero-sized group before)
        r.append(Uncostable(f"expert_tp x ep = {etp} x {plan.ep} must divide tp x cp x dp = "
                            f"{stage} (Megatron-Core: expert-TP x EP x PP divides the world "
                            "size)"))
    if moe.expert_ffn_hidden_size % etp:
        r.append(f"expert_tp={etp} does not divide moe.expert_ffn_hidden_size="
                 f"{moe.expert_ffn_hidden_size}")

    if shared_ffn(model) % plan.tp:
        r.append(f"tp={plan.tp} does not divide the shared experts' FFN width {shared_ffn(model)}")
    return r


def _ep_overlap_structure(model: ModelSpec, plan: Plan) -> list[str]:
    """Combined 1F1B's hard requirements (Megatron-LM docs/user-guide/features/
    moe_a2a_overlap.md, "Hard requirements"): EP > 1 (an all-to-all to overlap) and, with
    PP > 1, the interleaved schedule (VPP). Full recomputation is outside what the paired
    schedule is modelled for here (Megatron-Bridge's EP-overlap guide advises against it)."""
    r: list[str] = []
    if model.moe is None or plan.ep <= 1:
        r.append(f"overlap_moe_ep_comm needs a mixture-of-experts model with ep > 1 "
                 f"(ep={plan.ep})")
    if plan.pp > 1 and plan.virtual_stages <= 1:
        r.append(f"overlap_moe_ep_comm with pp={plan.pp} needs virtual_stages > 1 (Megatron-"
                 "Core runs combined 1F1B inside the interleaved schedule)")
    if model.moe is not None and plan.recompute_for("moe") in ("full", "half"):
        r.append("overlap_moe_ep_comm with full recomputation of the MoE layers is not "
                 "modelled (recompute the MoE layers selectively or not at all)")
    return r


# ---- evaluation ------------------------------------------------------------------------
@dataclass(frozen=True)
class StageResult:
    stage: Stage
    time: dict[str, float]  # per microbatch
    total_s: float  # per microbatch
    tail: dict[str, float]  # once per iteration: dp_comm, optimizer (, offload)
    memory: dict[str, float]
    host: dict[str, float] = field(default_factory=dict)  # offload-tier bytes


def layer_strategy(plan: Plan, layer_type: str) -> LayerStrategy:
    return strategy_from(plan, plan.recompute_for(layer_type),
                         plan.sequence_parallel and plan.tp > 1, plan.tp_comm or "allreduce",
                         layer_type)


def strategy_from(plan: Plan, recompute: str, sequence_parallel: bool, tp_comm: str,
                  layer_type: str = "dense", cp_comm: str | None = None) -> LayerStrategy:
    """A layer strategy: the per-layer-type decisions plus the plan's global settings."""
    return LayerStrategy(
        recompute=recompute,
        sequence_parallel=sequence_parallel,
        tp_comm=tp_comm,
        attention=plan.attention,
        cp_comm=cp_comm or plan.cp_comm,
        overlap_tp_comm=plan.overlap_tp_comm,
        dtype=plan.dtype,
        layer_type=layer_type,
        fused_elementwise=plan.fused_elementwise,
        overlap_ep_comm=plan.overlap_moe_ep_comm,
    )


def layer_setup(model: ModelSpec, levels: tuple, chunks: int, tp: int, cp: int, mbs: int,
                seq: int, ep: int, etp: int, tp_s: tuple[int, ...], cp_s: tuple[int, ...],
                ep_s: tuple[int, ...], etp_s: tuple[int, ...]
                ) -> dict[str, tuple[LayerShape, Net]]:
    """The shape and network view of each layer type: dense layers see the TP and CP
    groups, MoE layers also the EP and ETP groups (spans from :func:`expert_spans`)."""
    out = {}
    for t in model.layer_types:
        if t == "moe":
            out[t] = (LayerShape(tp, cp, mbs, seq, ep, etp),
                      Net(levels, tp_s, cp_s, chunks, ep_s, etp_s))
        else:
            out[t] = (LayerShape(tp, cp, mbs, seq), Net(levels, tp_s, cp_s, chunks))
    return out


def state_shape(model: ModelSpec, tp: int, cp: int, mbs: int, seq: int, ep: int, etp: int
                ) -> LayerShape:
    """The shape whose ep/etp size the stage's weights (ZeRO-3 prefetch buffers)."""
    if model.moe is None:
        return LayerShape(tp, cp, mbs, seq)
    return LayerShape(tp, cp, mbs, seq, ep, etp)


@dataclass(frozen=True)
class Prepared:
    """Everything shared by the stages of one plan."""

    m: int
    stages: list[Stage]
    results: list[StageResult]
    counts: dict[int, int]  # stage rank -> how many ranks share its profile
    costs: dict[str, LayerCost]


def prepare(model: ModelSpec, cluster: ClusterSpec, plan: Plan) -> Prepared:
    """Per-layer costs and per-stage results (raises PlacementError)."""
    spans = group_spans(plan, cluster)
    gpu = cluster.gpu
    m = max(1, math.ceil(plan.num_microbatches))
    stages = stage_layout(model, plan.pp, plan.virtual_stages, m, uneven=True)
    assert stages is not None
    levels = tuple(cluster.topology)
    net = Net(levels, spans["tp"], spans["cp"], cluster.collective_chunks)
    shape = LayerShape(plan.tp, plan.cp, plan.microbatch_size, plan.seq_len)
    dp_spans = combine(spans["dp"], spans["cp"])
    dp_cp = plan.dp * plan.cp

    ep_spans, etp_spans, edp_spans = expert_spans(spans["tp"], spans["cp"], spans["dp"],
                                                  plan.ep, plan.etp, tuple(plan.placement.order))
    setup = layer_setup(model, levels, cluster.collective_chunks, plan.tp, plan.cp,
                        plan.microbatch_size, plan.seq_len, plan.ep, plan.etp, spans["tp"],
                        spans["cp"], ep_spans, etp_spans)
    costs = {t: layer_cost(model, gpu, setup[t][1], setup[t][0], layer_strategy(plan, t))
             for t in model.layer_types}
    strat0 = layer_strategy(plan, model.layer_types[0])
    emb = embedding_cost(model, gpu, net, shape, strat0)
    head = head_cost(model, gpu, net, shape, strat0)
    p2p = p2p_time_per_microbatch_s(model, shape, plan.virtual_stages, plan.pp, spans["pp"], levels)

    uniq = distinct_stages(stages)
    counts = {u.rank: 0 for u in uniq}
    rep = {profile_key(u): u.rank for u in uniq}
    for st in stages:
        counts[rep[profile_key(st)]] += 1
    results = [
        stage_result(model, cluster, plan, st, costs, emb, head, p2p, dp_spans, spans["pp"],
                     dp_cp, m, edp_spans)
        for st in uniq
    ]
    return Prepared(m, stages, results, counts, costs)


def evaluate(model: ModelSpec, cluster: ClusterSpec, plan: Plan,
             allow_idle_gpus: bool = False) -> Estimate:
    """Cost of ``plan`` for ``model`` on ``cluster``: time, memory, FLOPs, feasibility."""
    reasons = check_structure(model, cluster, plan, allow_idle_gpus)
    gpu = cluster.gpu
    base = dict(hbm_capacity_bytes=gpu.hbm_bytes, num_gpus=plan.world_size,
                num_microbatches=plan.num_microbatches)
    if any(isinstance(x, Uncostable) for x in reasons):
        return Estimate(feasible=False, reasons=reasons, **base)
    try:
        prep = prepare(model, cluster, plan)
    except PlacementError as err:
        return Estimate(feasible=False, reasons=reasons + [str(err)], **base)
    m, results = prep.m, prep.results
    bott = max(results, key=lambda s: s.total_s)
    tail = max(results, key=lambda s: sum(s.tail.values()))
    worst = max(results, key=lambda s: sum(s.memory.values()))
    stage_s = np.array([r.total_s for r in results])
    counts = np.array([prep.counts[r.stage.rank] for r in results], float)
    tails = np.array([sum(r.tail.values()) for r in results])
    s = straggler_share(cluster.step_time_cv, plan.world_size)
    t_iter = iteration_time_s(m, plan.pp, plan.virtual_stages, stage_s, counts, tails, straggler=s)
    breakdown = {k: m * bott.time.get(k, 0.0) for k in TIME_KEYS} | {"straggler": t_iter * s / (1 + s)}
    breakdown["bubble"] = bubble_s(plan.pp, plan.virtual_stages, stage_s, counts)
    breakdown["dp_comm"] += tail.tail["dp_comm"]
    breakdown["optimizer"] = tail.tail["optimizer"]
    tier = cluster.offload
    host: dict = {}
    if tier is not None:
        breakdown[OFFLOAD_KEY] = m * bott.time[OFFLOAD_KEY] + tail.tail[OFFLOAD_KEY]
        worst_host = max(results, key=lambda s: sum(s.host.values()))
        host_total = sum(worst_host.host.values())
        host = dict(host_memory_per_gpu_bytes=host_total,
                    host_memory_breakdown_bytes=dict(worst_host.host),
                    host_capacity_bytes=tier.capacity_bytes)
        if host_total > tier.capacity_bytes:
            reasons.append(
                f"needs {host_total / C.GiB:.1f} GiB of offload-tier memory per GPU on pipeline "
                f"stage {worst_host.stage.rank} ({_top_memory(worst_host.host)}); "
                f"{tier.name} has {tier.capacity_gib_per_gpu:g} GiB per GPU")

    mem_total = sum(worst.memory.values())
    if mem_total > gpu.hbm_bytes:
        reasons.append(
            f"needs {mem_total / C.GiB:.1f} GiB per GPU on pipeline stage {worst.stage.rank} "
            f"({_top_memory(worst.memory)}); HBM is {gpu.hbm_gib:g} GiB"
        )

    work = np.array([sum(r.time[k] for k in ("forward", "backward", "recompute"))
                     for r in results])
    busy = busy_s(m, plan.pp, counts, work, np.array([r.tail["optimizer"] for r in results]))

    model_flops = plan.global_batch_size * model_flops_per_sequence(model, plan.seq_len)
    rec_flops = sum(model.layer_counts()[t] * (c.recompute_flops + c.padding_flops)
                    for t, c in prep.costs.items())
    masked = (masked_attention_flops_per_sequence(model, plan.seq_len) * plan.global_batch_size
              if plan.attention == "flash" else 0.0)
    hw_flops = model_flops - masked + rec_flops * plan.tp * plan.cp * m * plan.dp
    n = plan.world_size
    peak = gpu.peak_flops(plan.dtype)
    return Estimate(
        feasible=not reasons,
        reasons=reasons,
        iteration_time_s=t_iter,
        time_breakdown_s=breakdown,
        memory_per_gpu_bytes=mem_total,
        memory_breakdown_bytes=dict(worst.memory),
        worst_memory_stage=worst.stage.rank,
        bottleneck_stage=bott.stage.rank,
        model_flops=model_flops,
        hardware_flops=hw_flops,
        mfu=model_flops / (t_iter * n * peak),
        hfu=hw_flops / (t_iter * n * peak),
        tokens_per_s=plan.global_batch_size * plan.seq_len / t_iter,
        tflops_per_gpu=model_flops / t_iter / n / 1e12,
        gpu_busy_s=busy,
        energy_j=iteration_energy_j(cluster, n, t_iter, busy),
        **host,
        **base,
    )


def profile_key(st: Stage) -> tuple:
    return (tuple(sorted(st.layers.items())), st.embedding, st.head, st.inflight_chunks)


def _top_memory(mem: dict[str, float]) -> str:
    parts = sorted(mem.items(), key=lambda kv: -kv[1])[:3]
    return ", ".join(f"{k} {v / C.GiB:.1f}" for k, v in parts)


def stage_result(model: ModelSpec, cluster: ClusterSpec, plan: Plan, st: Stage,
                 costs: dict[str, LayerCost], emb: EndCost, head: EndCost, p2p: float,
                 dp_spans: tuple[int, ...], pp_spans: tuple[int, ...], dp_cp: int, m: int,
                 edp_spans: tuple[int, ...] = ()) -> StageResult:
    """Per-microbatch time, per-iteration tail and memory of one pipeline rank."""
    gpu = cluster.gpu
    pairs = [(n, costs[t]) for t, n in st.layers.items()]
    time = {
        "forward": sum(n * c.fwd_s for n, c in pairs),
        "backward": sum(n * c.bwd_s for n, c in pairs),
        "recompute": sum(n * c.recompute_s for n, c in pairs),
        "tp_comm": sum(n * c.tp_comm_s for n, c in pairs),
        "cp_comm": sum(n * c.cp_comm_s for n, c in pairs),
        "ep_comm": sum(n * c.ep_comm_s for n, c in pairs),
        "pp_comm": p2p,
        "dp_comm": 0.0,
    }
    for on, end in ((st.embedding, emb), (st.head, head)):
        if on:
            time["forward"] += end.fwd_s
            time["backward"] += end.bwd_s
            time["tp_comm"] += end.tp_comm_s
    window_f = time["forward"]
    window_b = time["backward"] + time["recompute"]

    layers = max(st.num_layers, 1)
    ov = Overlap(plan.overlap_param_gather, plan.overlap_dp_grad_reduce,
                 gpu.efficiency.overlap_slowdown, gpu.efficiency.sharded_overlap)
    comm, tied, optimizer, states, (ot, host) = _stage_states(
        model, cluster, plan, st, dp_spans, pp_spans, dp_cp, edp_spans)
    compute = sum(time[k] for k in ("forward", "backward", "recompute", "tp_comm", "cp_comm",
                                    "ep_comm"))
    p2p_out, p2p_ovl = split_p2p(p2p, plan.virtual_stages, plan.overlap_p2p_comm)
    stage = stage_time(compute, window_f, window_b, p2p_out, p2p_ovl, comm.mb_fwd_s,
                       comm.mb_bwd_s, ot.fetch_s, layers, ov)
    time["pp_comm"] = stage.p2p_exposed_s
    dense, _ = stage_params_split(model, plan.tp, plan.pp, st.layers, st.embedding, st.head,
                                  plan.ep, plan.etp)
    last = tail_time(optimizer, ot.step_s + ot.param_copy_s, tied, comm.grad_s, comm.param_s,
                     ot.grad_down_s, window_f, window_b, layers, ov,
                     dp_window_microbatches(plan.pp, plan.virtual_stages,
                                            max(1, math.ceil(plan.num_microbatches))),
                     dp_units=dp_overlap_units(dense, dp_cp, layers))
    time["dp_comm"] = stage.dp_exposed_s
    tail = {"dp_comm": last.dp_s, "optimizer": last.optimizer_s}
    if cluster.offload is not None:
        time[OFFLOAD_KEY] = stage.offload_exposed_s
        tail[OFFLOAD_KEY] = last.offload_s
    layer_act = sum(n * costs[t].act_bytes for t, n in st.layers.items())
    workspace = max([costs[t].workspace_bytes for t in st.layers] + [0.0])
    if st.head:
        workspace = max(workspace, head.workspace_bytes)
    shape = state_shape(model, plan.tp, plan.cp, plan.microbatch_size, plan.seq_len, plan.ep,
                        plan.etp)
    buffers = comm_buffer_bytes(model, shape, plan.zero_stage, tuple(st.layers) or model.layer_types)
    buffers += reduce_bucket_bytes(gpu.efficiency.reduce_bucket_elements, plan.zero_stage, plan.dp,
                                   plan.overlap_dp_grad_reduce, plan.dtype)
    mem = stage_memory(states.weights + states.gradients + states.optimizer, buffers, layer_act,
                       st.inflight_chunks, plan.virtual_stages, workspace,
                       head.act_bytes if st.head else 0.0, headroom_bytes(cluster))
    memory = {
        "weights": states.weights,
        "gradients": states.gradients,
        "optimizer": states.optimizer,
        "activations": mem.activations,
        "workspace": mem.workspace,
        "comm_buffers": mem.comm_buffers,
        "reserve": mem.reserve,
    }
    return StageResult(st, time, stage.total_s, tail, memory, host)


_NO_OFFLOAD = OffloadTimes(0.0, 0.0, 0.0, 0.0)


def _stage_states(model: ModelSpec, cluster: ClusterSpec, plan: Plan, st: Stage,
                  dp_spans: tuple[int, ...], pp_spans: tuple[int, ...], dp_cp: int,
                  edp_spans: tuple[int, ...]):
    """A stage's data-parallel traffic, tied-embedding sync, optimizer step, HBM states and
    offload terms (its own parameters over dp x cp, routed experts over their group)."""
    gpu, levels = cluster.gpu, tuple(cluster.topology)
    params, experts = stage_params_split(model, plan.tp, plan.pp, st.layers, st.embedding,
                                         st.head, plan.ep, plan.etp)
    edp = expert_dp_size(plan.tp, plan.cp, plan.dp, plan.ep, plan.etp)
    nm, z = Numerics.of(plan), plan.zero_stage
    oo, op = plan.offload_optimizer, plan.offload_params
    comm = dp_comm(params, z, dp_spans, levels, cluster.collective_chunks, nm)
    optimizer = optimizer_step_s(gpu, params, z, dp_cp, oo)
    states = state_bytes(params, z, dp_cp, nm, oo, op)
    if experts:
        comm = add_dp_comm(comm, dp_comm(experts, z, edp_spans, levels,
                                         cluster.collective_chunks, nm))
        optimizer += optimizer_step_s(gpu, experts, z, edp, oo)
        states = add_states(states, state_bytes(experts, z, edp, nm, oo, op))
    tied = 0.0
    if st.embedding or st.head:
        tied = tied_embedding_sync_s(model, plan.tp, plan.pp, pp_spans, levels, nm)
    return comm, tied, optimizer, states, _offload(cluster, plan, params, experts, dp_cp, edp)


def _offload(cluster: ClusterSpec, plan: Plan, params: float, experts: float, dp_cp: int,
             edp: int) -> tuple[OffloadTimes, dict[str, float]]:
    """Offload-tier times and host bytes of a stage (zero without a tier)."""
    if cluster.offload is None:
        return _NO_OFFLOAD, {}
    z, dt, oo, op = plan.zero_stage, Numerics.of(plan), plan.offload_optimizer, plan.offload_params
    ot = offload_times(cluster.offload, params, z, dp_cp, dt, oo, op)
    hs = host_state_bytes(params, z, dp_cp, dt, oo, op)
    if experts:
        ot = _add_times(ot, offload_times(cluster.offload, experts, z, edp, dt, oo, op))
        hs = add_states(hs, host_state_bytes(experts, z, edp, dt, oo, op))
    return ot, dict(zip(HOST_MEMORY_KEYS, (hs.weights, hs.gradients, hs.optimizer)))


def _add_times(a: OffloadTimes, b: OffloadTimes) -> OffloadTimes:
    return OffloadTimes(a.grad_down_s + b.grad_down_s, a.step_s + b.step_s,
                        a.param_copy_s + b.param_copy_s, a.fetch_s + b.fetch_s)
