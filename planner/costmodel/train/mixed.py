"""The exact evaluator of a mixed plan: pipeline stages on different GPU pools.

Each stage is costed by the single-type evaluator's own per-stage function
(:func:`planner.costmodel.train.evaluator.stage_result`) with its pool's GPU and network;
the stages combine through the cost model's composition
(:func:`planner.costmodel.compose.iteration_time_s`: ``m`` microbatches at the pace of
the slowest stage, the bubble over the summed stage times, the longest tail). What is
new here is only where each term's inputs come from:

- a stage's tensor, context and data-parallel groups lie inside its pool: their spans are
  those of the plan with ``pp = k`` (the stages on that pool) on the pool resized to
  ``tp x cp x dp x k`` GPUs;
- the join between pools is appended to every pool's levels as an outermost level
  (:meth:`planner.specs.mixed.PoolLink.level`), which no in-pool group crosses;
- a pipeline send to a neighbour on another pool crosses the join
  (:func:`planner.costmodel.network.p2p_time_s` over that level); to a neighbour on the
  same pool it costs what the single-type evaluator charges (the slowest level the
  pool's pipeline group crosses). A stage sends activations forward and gradients
  backward; the end stages, which send one way only, are charged their one link twice,
  as the single-type evaluator charges every stage ``2 x`` its link
  (:func:`planner.costmodel.train.stage.p2p_time_per_microbatch_s`);
- the tied-embedding sync between the first and last stages crosses the join when they
  are on different pools;
- each stage's memory is checked against its own GPU's HBM (less its pool's headroom).

With every stage on one pool this is the single-type evaluator (tested).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from pydantic import Field

from planner.costmodel import constants as C
from planner.costmodel.compose import (
    bubble_s,
    busy_s,
    iteration_time_s,
    straggler_share,
)
from planner.costmodel.energy import iteration_energy_j
from planner.costmodel.layer import (
    LayerCost,
    LayerShape,
    Net,
    layer_cost,
    masked_attention_flops_per_sequence,
    model_flops_per_sequence,
)
from planner.costmodel.moe import expert_spans
from planner.costmodel.network import PlacementError, combine, group_spans, p2p_time_s
from planner.costmodel.pipeline import Stage, inflight_chunks
from planner.costmodel.train.evaluator import (
    TIME_KEYS,
    Estimate,
    StageResult,
    Uncostable,
    check_structure,
    layer_setup,
    layer_strategy,
    stage_result,
)
from planner.costmodel.train.stage import EndCost, embedding_cost, head_cost, p2p_bytes
from planner.specs.base import Spec
from planner.specs.cluster import ClusterSpec
from planner.specs.mixed import MixedClusterSpec, MixedPlan
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan


class MixedStageReport(Spec):
    """What one stage of a mixed plan costs."""

    rank: int = Field(..., description="pipeline rank, 0 first")
    pool: str = Field(..., description="the stage's pool")
    gpu: str = Field(..., description="the pool's GPU")
    layers: int = Field(..., description="transformer layers on the stage")
    stage_time_s: float = Field(..., description="per microbatch")
    tail_s: float = Field(..., description="once per iteration: exposed DP traffic, optimizer")
    p2p_s: float = Field(..., description="pipeline sends per microbatch, before overlap")
    memory_bytes: float = Field(..., description="HBM the stage needs per GPU")
    hbm_bytes: float = Field(..., description="the stage's GPU's HBM")


class MixedEstimate(Estimate):
    """What a mixed plan costs: the plan-level figures of :class:`Estimate` (MFU over the
    pools' summed peak) and each stage's."""

    stages: list[MixedStageReport] = Field(default_factory=list)
    gpus_per_pool: dict[str, int] = Field(default_factory=dict)

    def to_json(self) -> dict:
        out = super().to_json()
        out["stages"] = [s.model_dump(mode="json") for s in self.stages]
        out["gpus_per_pool"] = dict(self.gpus_per_pool)
        return out


@dataclass(frozen=True)
class PoolTerms:
    """The per-layer and per-end costs of the plan's shape on one pool, and its spans."""

    cluster: ClusterSpec  # the pool resized to its stages, the join appended outermost
    costs: dict[str, LayerCost]
    emb: EndCost
    head: EndCost
    dp_spans: tuple[int, ...]
    edp_spans: tuple[int, ...]
    pp_spans: tuple[int, ...]  # the pool's own pipeline group, join included (span 1)
    link_s: float  # one send to a neighbour on the same pool
    join_s: float  # one send to a neighbour on another pool
    num_gpus: int


def stage_width(plan: Plan) -> int:
    """GPUs of one pipeline stage: ``tp x cp x dp``."""
    return plan.tp * plan.cp * plan.dp


def local_plan(plan: Plan, k: int) -> Plan:
    """The plan's shape on a pool holding ``k`` of its stages."""
    return plan.model_copy(update={"pp": k, "uneven_pipeline": True})


def pool_terms(model: ModelSpec, mc: MixedClusterSpec, plan: Plan, pool: str, k: int
               ) -> PoolTerms:
    """Terms of ``plan`` (its tp/cp/dp/ep shape) on ``pool`` holding ``k`` stages. Raises
    PlacementError or ValueError when the shape cannot be placed on the pool."""
    base = mc.pool(pool).cluster
    n = stage_width(plan) * k
    sized = base if n == base.num_gpus else base.resized(n)
    lp = local_plan(plan, k)
    spans = group_spans(lp, sized)
    join = mc.join.level(len(mc.pools))
    levels = tuple(sized.topology) + (join,)
    cluster = sized.model_copy(update={"topology": list(levels)})

    def ext(s: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(s) + (1,)

    ep_s, etp_s, edp_s = expert_spans(spans["tp"], spans["cp"], spans["dp"], plan.ep,
                                      plan.etp, tuple(plan.placement.order))
    chunks = sized.collective_chunks
    setup = layer_setup(model, levels, chunks, plan.tp, plan.cp, plan.microbatch_size,
                        plan.seq_len, plan.ep, plan.etp, ext(spans["tp"]), ext(spans["cp"]),
                        ext(ep_s), ext(etp_s))
    costs = {t: layer_cost(model, sized.gpu, setup[t][1], setup[t][0], layer_strategy(plan, t))
             for t in model.layer_types}
    net = Net(levels, ext(spans["tp"]), ext(spans["cp"]), chunks)
    shape = LayerShape(plan.tp, plan.cp, plan.microbatch_size, plan.seq_len)
    strat0 = layer_strategy(plan, model.layer_types[0])
    size = p2p_bytes(model, shape)
    return PoolTerms(
        cluster=cluster,
        costs=costs,
        emb=embedding_cost(model, sized.gpu, net, shape, strat0),
        head=head_cost(model, sized.gpu, net, shape, strat0),
        dp_spans=ext(combine(spans["dp"], spans["cp"])),
        edp_spans=ext(edp_s),
        pp_spans=ext(spans["pp"]),
        link_s=p2p_time_s(size, spans["pp"], tuple(sized.topology)),
        join_s=p2p_time_s(size, (2,), (join,)),
        num_gpus=n,
    )


def stage_counts(pools: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in pools:
        out[p] = out.get(p, 0) + 1
    return out


def stage_p2p_s(terms: dict[str, PoolTerms], pools: list[str], r: int) -> float:
    """Pipeline sends of stage ``r`` per microbatch: forward to ``r + 1``, backward to
    ``r - 1``, each over the join when the neighbour is on another pool; an end stage
    counts its one link twice (the single-type evaluator's ``2 x`` link)."""
    pp = len(pools)
    if pp <= 1:
        return 0.0

    def link(a: int, b: int) -> float:
        t = terms[pools[a]]
        return t.link_s if pools[a] == pools[b] else t.join_s

    fwd = link(r, r + 1) if r < pp - 1 else link(r, r - 1)
    bwd = link(r, r - 1) if r > 0 else link(r, r + 1)
    return fwd + bwd


def tied_spans(terms: dict[str, PoolTerms], pools: list[str], pool: str) -> tuple[int, ...]:
    """The pipeline spans the tied-embedding sync between the first and last stages sees:
    the pool's own when both ends are on it, else the join (the outermost level)."""
    t = terms[pool]
    if pools[0] == pools[-1]:
        return t.pp_spans
    return (1,) * (len(t.pp_spans) - 1) + (2,)


def make_stage(model: ModelSpec, pp: int, m: int, r: int, start: int, n: int) -> Stage:
    """Pipeline rank ``r`` holding layers ``start .. start + n - 1``."""
    counts: dict[str, int] = {}
    for kind in model.layer_kinds()[start:start + n]:
        counts[kind] = counts.get(kind, 0) + 1
    return Stage(rank=r, layers=counts, embedding=(r == 0), head=(r == pp - 1),
                 inflight_chunks=inflight_chunks(pp, 1, m, r))


def mixed_stage_result(model: ModelSpec, plan: Plan, terms: dict[str, PoolTerms],
                       pools: list[str], r: int, start: int, n: int) -> StageResult:
    """Stage ``r`` of ``plan`` on ``pools[r]`` holding ``n`` layers from ``start``: the
    single-type evaluator's :func:`stage_result` with the pool's terms."""
    m = max(1, math.ceil(plan.num_microbatches))
    st = make_stage(model, len(pools), m, r, start, n)
    t = terms[pools[r]]
    return stage_result(model, t.cluster, plan, st, t.costs, t.emb, t.head,
                        stage_p2p_s(terms, pools, r), t.dp_spans,
                        tied_spans(terms, pools, pools[r]), plan.dp * plan.cp, m, t.edp_spans)


def check_mixed(model: ModelSpec, mc: MixedClusterSpec, mp: MixedPlan,
                allow_idle_gpus: bool = False) -> list[str]:
    """Every reason the mixed plan cannot run, short of memory."""
    r: list[str] = []
    plan = mp.plan
    names = set(mc.pool_names)
    bad = sorted({p for p in mp.pools if p not in names})
    if bad:
        r.append(Uncostable(f"stages name pools {bad} that the cluster does not have "
                            f"(expected {', '.join(mc.pool_names)})"))
    if sum(mp.layers) != model.num_layers:
        r.append(Uncostable(f"stages hold {sum(mp.layers)} layers ({'+'.join(map(str, mp.layers))})"
                            f" but {model.name} has {model.num_layers}"))
    if plan.offloads:
        r.append(Uncostable("offload_optimizer/offload_params are not modelled on mixed "
                            "clusters"))
    if r:
        return r
    w = stage_width(plan)
    for pool, k in stage_counts(mp.pools).items():
        have = mc.pool(pool).cluster.num_gpus
        if w * k > have:
            r.append(Uncostable(f"pool '{pool}': {k} stages x tp x cp x dp = {k} x {w} = "
                                f"{w * k} GPUs, but the pool has {have}"))
        elif w * k < have and not allow_idle_gpus:
            r.append(f"pool '{pool}': {k} stages x tp x cp x dp = {w * k} GPUs but the pool "
                     f"has {have}; a pool a plan uses is used whole (or allow idle GPUs)")
    # the shape rules of one stage (heads, batch, MoE), as the single-type evaluator
    # states them; the pipeline split is the stages' own
    first = mc.pool(mp.pools[0]).cluster
    shape_plan = plan.model_copy(update={"pp": 1, "uneven_pipeline": True})
    r += check_structure(model, first, shape_plan, allow_idle_gpus=True)
    return r


def evaluate_mixed(model: ModelSpec, mc: MixedClusterSpec, mp: MixedPlan,
                   allow_idle_gpus: bool = False) -> MixedEstimate:
    """Cost of the mixed plan: time, memory per stage against its GPU, FLOPs."""
    plan = mp.plan
    reasons = check_mixed(model, mc, mp, allow_idle_gpus)
    counts = stage_counts(mp.pools)
    base = dict(num_gpus=sum(stage_width(plan) * k for k in counts.values()),
                num_microbatches=plan.num_microbatches)
    if any(isinstance(x, Uncostable) for x in reasons):
        return MixedEstimate(feasible=False, reasons=reasons, **base)
    try:
        terms = {p: pool_terms(model, mc, plan, p, k) for p, k in counts.items()}
    except (PlacementError, ValueError) as err:
        return MixedEstimate(feasible=False, reasons=reasons + [str(err)], **base)
    m = max(1, math.ceil(plan.num_microbatches))
    pools, layers = mp.pools, mp.layers
    starts = [sum(layers[:i]) for i in range(len(layers))]
    results = [mixed_stage_result(model, plan, terms, pools, r, starts[r], layers[r])
               for r in range(len(pools))]
    return compose_mixed(model, mc, mp, terms, results, reasons, m, base)


def compose_mixed(model: ModelSpec, mc: MixedClusterSpec, mp: MixedPlan,
                  terms: dict[str, PoolTerms], results: list[StageResult], reasons: list[str],
                  m: int, base: dict) -> MixedEstimate:
    """The plan's figures from its stages, through the cost model's composition."""
    plan, pools = mp.plan, mp.pools
    pp = len(pools)
    stage_s = np.array([r.total_s for r in results])
    ones = np.ones(pp)
    tails = np.array([sum(r.tail.values()) for r in results])
    world = base["num_gpus"]
    # the step waits for the slowest of all the GPUs: the largest spread of the pools used
    cv = max(terms[p].cluster.step_time_cv for p in terms)
    s = straggler_share(cv, world)
    t_iter = iteration_time_s(m, pp, 1, stage_s, ones, tails, straggler=s)
    bott = max(results, key=lambda x: x.total_s)
    tail = max(results, key=lambda x: sum(x.tail.values()))
    breakdown = {k: m * bott.time.get(k, 0.0) for k in TIME_KEYS}
    breakdown["straggler"] = t_iter * s / (1 + s)
    breakdown["bubble"] = bubble_s(pp, 1, stage_s, ones)
    breakdown["dp_comm"] += tail.tail["dp_comm"]
    breakdown["optimizer"] = tail.tail["optimizer"]

    reports, worst = _stage_reports(terms, pools, results, reasons)
    wres = results[worst]

    busy_by_pool, energy, peak = {}, 0.0, 0.0
    for p, t in terms.items():
        idx = [r for r in range(pp) if pools[r] == p]
        work = np.array([sum(results[r].time[k] for k in ("forward", "backward", "recompute"))
                         for r in idx])
        opt = np.array([results[r].tail["optimizer"] for r in idx])
        busy_by_pool[p] = busy_s(m, len(idx), np.ones(len(idx)), work, opt)
        energy += iteration_energy_j(t.cluster, t.num_gpus, t_iter, busy_by_pool[p])
        peak += t.num_gpus * t.cluster.gpu.peak_flops(plan.dtype)
    busy = sum(busy_by_pool[p] * terms[p].num_gpus for p in terms) / world

    model_flops = plan.global_batch_size * model_flops_per_sequence(model, plan.seq_len)
    rec = sum(n * (terms[pools[r]].costs[t].recompute_flops
                   + terms[pools[r]].costs[t].padding_flops)
              for r, res in enumerate(results) for t, n in res.stage.layers.items())
    masked = (masked_attention_flops_per_sequence(model, plan.seq_len) * plan.global_batch_size
              if plan.attention == "flash" else 0.0)
    hw_flops = model_flops - masked + rec * plan.tp * plan.cp * m * plan.dp
    return MixedEstimate(
        feasible=not reasons,
        reasons=reasons,
        iteration_time_s=t_iter,
        time_breakdown_s=breakdown,
        memory_per_gpu_bytes=sum(wres.memory.values()),
        memory_breakdown_bytes=dict(wres.memory),
        hbm_capacity_bytes=terms[pools[worst]].cluster.gpu.hbm_bytes,
        worst_memory_stage=worst,
        bottleneck_stage=bott.stage.rank,
        model_flops=model_flops,
        hardware_flops=hw_flops,
        mfu=model_flops / (t_iter * peak),
        hfu=hw_flops / (t_iter * peak),
        tokens_per_s=plan.global_batch_size * plan.seq_len / t_iter,
        tflops_per_gpu=model_flops / t_iter / world / 1e12,
        gpu_busy_s=busy,
        energy_j=energy,
        stages=reports,
        gpus_per_pool={p: t.num_gpus for p, t in terms.items()},
        **base,
    )


def _stage_reports(terms: dict[str, PoolTerms], pools: list[str], results: list[StageResult],
                   reasons: list[str]) -> tuple[list[MixedStageReport], int]:
    """Each stage's report, its memory checked against its own GPU's HBM (a reason added
    per stage that does not fit), and the stage fullest for its HBM."""
    reports = []
    worst, worst_share = 0, -1.0
    for r, res in enumerate(results):
        gpu = terms[pools[r]].cluster.gpu
        mem = sum(res.memory.values())
        if mem > gpu.hbm_bytes:
            top = ", ".join(f"{k} {v / C.GiB:.1f}" for k, v in
                            sorted(res.memory.items(), key=lambda kv: -kv[1])[:3])
            reasons.append(f"needs {mem / C.GiB:.1f} GiB per GPU on pipeline stage {r} (pool "
                           f"'{pools[r]}', {top}); {gpu.name} HBM is {gpu.hbm_gib:g} GiB")
        if mem / gpu.hbm_bytes > worst_share:
            worst, worst_share = r, mem / gpu.hbm_bytes
        reports.append(MixedStageReport(
            rank=r, pool=pools[r], gpu=gpu.name, layers=res.stage.num_layers,
            stage_time_s=float(res.total_s), tail_s=float(sum(res.tail.values())),
            p2p_s=stage_p2p_s(terms, pools, r), memory_bytes=mem, hbm_bytes=gpu.hbm_bytes))
    return reports, worst
