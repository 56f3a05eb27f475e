"""The exact serving evaluator: one :class:`ServePlan` under one :class:`ServeWorkload` ->
a :class:`ServeEstimate` (latencies, throughput, memory, feasibility with reasons), and
the largest per-replica rate that meets the SLOs, which the search tabulates.

Aggregated replicas (continuous batching, chunked prefill): a request costs the replica
``w = o_p + osl t_d / B`` seconds (its packed prefill ``o_p`` and its share of ``osl``
decode steps of ``t_d`` at concurrency ``B``), so a replica serves at most ``1/w``
requests/s at utilization ``rho = lam w``. Prefill work stalls decode: the mean TPOT is
``t_d / (1 - lam o_p)``. TTFT waits in an M/D/1 queue (:mod:`planner.costmodel.queueing`).
Disaggregated: prefill replicas are M/D/1 servers of ``o_p``; decode replicas step at
``t_d``; the KV cache crosses the network between them. docs/serving.md.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache

from planner.costmodel.energy import energy_coefficients, price_per_gpu_hour
from planner.costmodel.network import PlacementError, p2p_time_s
from planner.costmodel.queueing import md1_wait_s, poisson_quantile
from planner.costmodel.serving import (
    Prefill,
    ServeMemory,
    decode_step_s,
    kv_bytes_per_sequence,
    max_concurrency,
    prefill,
    serve_memory,
    weight_dtype_error,
)
from planner.specs.cluster import ClusterSpec
from planner.specs.model import ModelSpec
from planner.specs.serve import ServeEngine, ServePlan, ServeWorkload

GiB = 2**30


@dataclass(frozen=True)
class ReplicaPerf:
    """What one replica of a layout does, independent of the load."""

    decode_step_s: float  # t_d: between two tokens at full concurrency (mean context)
    prefill: Prefill
    kv_transfer_s: float  # disaggregated: the prompt's KV cache to the decode replica
    memory: ServeMemory
    max_concurrency: int
    reasons: tuple[str, ...]  # why the layout cannot run at all (empty: it can)


def layout_reasons(model: ModelSpec, cluster: ClusterSpec, plan: ServePlan) -> list[str]:
    """Why a layout cannot exist on this cluster and model (before any timing)."""
    out = []
    if model.num_attention_heads % plan.tp:
        out.append(f"tp={plan.tp} does not divide the {model.num_attention_heads} attention heads")
    if plan.pp > model.num_layers:
        out.append(f"pp={plan.pp} exceeds the {model.num_layers} layers")
    if plan.ep > 1 and (model.moe is None or model.moe.num_experts % plan.ep):
        what = "a dense model" if model.moe is None else f"{model.moe.num_experts} experts"
        out.append(f"ep={plan.ep} does not divide the experts of {what}")
    if plan.tp * plan.pp > cluster.num_gpus:
        out.append(f"a replica of tp x pp = {plan.tp * plan.pp} GPUs exceeds the cluster's "
                   f"{cluster.num_gpus}")
    bad = weight_dtype_error(cluster.gpu, plan.weight_dtype)
    return out + ([bad] if bad else [])


@lru_cache(maxsize=65536)
def replica_perf(model: ModelSpec, cluster: ClusterSpec, plan: ServePlan, isl: int,
                 osl: int, engine: ServeEngine = ServeEngine()) -> ReplicaPerf | None:
    """Load-independent performance of one replica of ``plan`` (replica counts ignored);
    None when the layout cannot exist (:func:`layout_reasons`)."""
    if layout_reasons(model, cluster, plan):
        return None
    try:
        t_d = decode_step_s(model, cluster, plan, isl + osl / 2, engine)  # mean context
        pre = prefill(model, cluster, plan, isl, engine)
        pre = replace(pre, latency_s=pre.latency_s + engine.request_overhead_ms * 1e-3)
    except PlacementError:
        return None
    kv = kv_bytes_per_sequence(model, plan, isl)
    levels = tuple(cluster.topology)
    outer = tuple(1 for _ in levels[:-1]) + (2,)  # prefill and decode replicas: different nodes
    transfer = p2p_time_s(kv, outer, levels) if plan.mode == "disaggregated" else 0.0
    mem = serve_memory(model, cluster, plan, isl, osl)
    reasons = []
    if mem.total > mem.capacity:
        reasons.append(f"memory {mem.total / GiB:.1f} GiB per GPU exceeds the "
                       f"{mem.capacity / GiB:.1f} GiB of HBM (concurrency {plan.concurrency}; "
                       f"at most {max_concurrency(model, cluster, plan, isl, osl)} fit)")
    return ReplicaPerf(t_d, pre, transfer, mem, max_concurrency(model, cluster, plan, isl, osl),
                       tuple(reasons))


@dataclass(frozen=True)
class Latency:
    """Seconds; None where the queue is unstable at the offered load."""

    ttft_s: float | None
    ttft_q_s: float | None
    tpot_s: float | None
    tpot_q_s: float | None
    utilization: float


def aggregated_latency(perf: ReplicaPerf, plan: ServePlan, w: ServeWorkload,
                       lam: float) -> Latency:
    """Latencies of an aggregated replica offered ``lam`` requests/s (module docstring)."""
    o_p, t_d, pre = perf.prefill.occupancy_s, perf.decode_step_s, perf.prefill
    rho = lam * (o_p + w.osl * t_d / plan.concurrency)
    if rho >= 1 or lam * o_p >= 1:
        return Latency(None, None, None, None, rho)
    tpot = t_d / (1 - lam * o_p)
    arrivals = lam * w.osl * tpot  # prefills landing inside one request's decode (mean)
    tpot_q = t_d + poisson_quantile(arrivals, w.percentile) * o_p / w.osl
    # the prompt's chunks ride on decode steps of the sequences in flight (Little's law)
    in_flight = min(1.0, lam * w.osl * tpot / plan.concurrency)
    base = pre.latency_s + pre.chunks * t_d * in_flight
    service = o_p + pre.chunks * t_d * in_flight
    return Latency(base + md1_wait_s(rho, service), base + md1_wait_s(rho, service, w.percentile),
                   tpot, tpot_q, rho)


def disaggregated_latency(perf: ReplicaPerf, plan: ServePlan, w: ServeWorkload,
                          lam_prefill: float, lam_decode: float) -> Latency:
    """Prefill replicas offered ``lam_prefill`` each (M/D/1), decode replicas
    ``lam_decode`` each stepping at ``t_d``."""
    o_p, t_d = perf.prefill.occupancy_s, perf.decode_step_s
    rho_p = lam_prefill * o_p
    rho_d = lam_decode * w.osl * t_d / plan.concurrency
    rho = max(rho_p, rho_d)
    if rho >= 1:
        return Latency(None, None, None, None, rho)
    base = perf.prefill.latency_s + perf.kv_transfer_s
    return Latency(base + md1_wait_s(rho_p, o_p), base + md1_wait_s(rho_p, o_p, w.percentile),
                   t_d, t_d, rho)


def replica_rps(perf: ReplicaPerf, plan: ServePlan, osl: int) -> tuple[float, float]:
    """Saturation requests/s of one (prefill, decode) replica; aggregated: both the same."""
    decode = plan.concurrency / (osl * perf.decode_step_s)
    prefill_rps = 1.0 / perf.prefill.occupancy_s
    if plan.mode == "aggregated":
        one = 1.0 / (perf.prefill.occupancy_s + osl * perf.decode_step_s / plan.concurrency)
        return one, one
    return prefill_rps, decode


def slo_reasons(lat: Latency, w: ServeWorkload) -> list[str]:
    q = f"P{w.percentile * 100:g}"
    if lat.ttft_q_s is None or lat.tpot_q_s is None:
        return [f"the offered load saturates the replicas (utilization {lat.utilization:.2f} >= 1)"]
    out = []
    if w.ttft_ms is not None and lat.ttft_q_s * 1e3 > w.ttft_ms:
        out.append(f"{q} TTFT {lat.ttft_q_s * 1e3:.1f} ms exceeds the {w.ttft_ms:g} ms SLO")
    if w.tpot_ms is not None and lat.tpot_q_s * 1e3 > w.tpot_ms:
        out.append(f"{q} TPOT {lat.tpot_q_s * 1e3:.2f} ms exceeds the {w.tpot_ms:g} ms SLO")
    return out


def _largest(ok, hi: float) -> float:
    """Largest ``lam`` in [0, hi) with ``ok(lam)``, for ``ok`` true up to a threshold and
    false beyond it (latencies grow with the load); 0 when even a trickle fails."""
    if hi <= 0 or not ok(hi * 1e-12):
        return 0.0
    lo = hi * 1e-12
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def slo_capacity_rps(perf: ReplicaPerf, plan: ServePlan, w: ServeWorkload
                     ) -> tuple[float, float]:
    """Most requests/s one (prefill, decode) replica takes while every SLO holds at the
    percentile (aggregated: the same number twice); 0 where the layout cannot meet them."""
    rps_p, rps_d = replica_rps(perf, plan, w.osl)
    if perf.reasons:
        return 0.0, 0.0
    if plan.mode == "aggregated":
        cap = _largest(lambda lam: not slo_reasons(aggregated_latency(perf, plan, w, lam), w),
                       rps_d)
        return cap, cap
    cap_p = _largest(lambda lam: not slo_reasons(
        disaggregated_latency(perf, plan, w, lam, 0.0), w), rps_p)
    cap_d = _largest(lambda lam: not slo_reasons(
        disaggregated_latency(perf, plan, w, 0.0, lam), w), rps_d)
    return cap_p, cap_d


@dataclass
class ServeEstimate:
    """The evaluator's answer for one plan. Latencies in ms (means, and the SLO
    percentile under the ``*_p99_ms`` keys, P99 by default), rates for the whole fleet."""

    plan: dict
    feasible: bool
    reasons: list[str]
    num_gpus: int
    percentile: float
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    ttft_p99_ms: float | None = None
    tpot_p99_ms: float | None = None
    e2e_ms: float | None = None
    requests_per_s: float = 0.0
    capacity_rps: float = 0.0
    output_tokens_per_s: float = 0.0
    output_tokens_per_s_per_gpu: float = 0.0
    output_tokens_per_s_per_user: float | None = None
    utilization: float | None = None
    memory_per_gpu_gib: float | None = None
    memory_breakdown_gib: dict = field(default_factory=dict)
    max_concurrency: int | None = None
    usd_per_hour: float | None = None
    usd_per_million_tokens: float | None = None
    power_w: float | None = None
    offline: bool = False

    def to_json(self) -> dict:
        return asdict(self)


def _ms(x: float | None) -> float | None:
    return None if x is None else x * 1e3


def _offered(perf: ReplicaPerf, plan: ServePlan, w: ServeWorkload) -> tuple[float, float, float]:
    """(fleet requests/s served, per prefill replica, per decode replica): the offered
    rate, or offline the fleet's capacity under the SLOs (saturation without SLOs)."""
    n_p = plan.prefill_replicas if plan.mode == "disaggregated" else plan.replicas
    n_d = plan.replicas
    if w.rate_rps is not None:
        return w.rate_rps, w.rate_rps / n_p, w.rate_rps / n_d
    cap_p, cap_d = (slo_capacity_rps(perf, plan, w) if (w.ttft_ms or w.tpot_ms)
                    else replica_rps(perf, plan, w.osl))
    fleet = min(n_p * cap_p, n_d * cap_d)
    return fleet, fleet / n_p, fleet / n_d


def _latency(perf: ReplicaPerf, plan: ServePlan, w: ServeWorkload, lam_p: float,
             lam_d: float) -> Latency:
    offline = w.rate_rps is None and not (w.ttft_ms or w.tpot_ms)
    if offline:  # saturated batch: prompts without queueing, decode at full load
        full = perf.decode_step_s + plan.concurrency * perf.prefill.occupancy_s / w.osl \
            if plan.mode == "aggregated" else perf.decode_step_s
        ttft = perf.prefill.latency_s + perf.kv_transfer_s
        return Latency(ttft, ttft, full, full, 1.0)
    if plan.mode == "aggregated":
        return aggregated_latency(perf, plan, w, lam_d)
    return disaggregated_latency(perf, plan, w, lam_p, lam_d)


def evaluate_serve(model: ModelSpec, cluster: ClusterSpec, plan: ServePlan,
                   w: ServeWorkload, engine: ServeEngine = ServeEngine()) -> ServeEstimate:
    """Latencies, throughput, memory and cost of ``plan`` serving ``w`` on ``cluster``'s
    GPU type (module docstring); infeasible with the reasons when a layout cannot run,
    does not fit, saturates or misses an SLO."""
    base = dict(plan=plan.to_dict(), num_gpus=plan.num_gpus, percentile=w.percentile)
    why = layout_reasons(model, cluster, plan)
    perf = None if why else replica_perf(model, cluster, plan, w.isl, w.osl, engine)
    if perf is None:
        return ServeEstimate(feasible=False, reasons=why or ["the replica cannot be placed"],
                             **base)
    rate, lam_p, lam_d = _offered(perf, plan, w)
    lat = _latency(perf, plan, w, lam_p, lam_d)
    reasons = list(perf.reasons) + (slo_reasons(lat, w) if lat.ttft_q_s is not None or rate
                                    else [])
    if rate <= 0 and not reasons:
        reasons.append("no load meets the SLOs on this plan")
    rps_p, rps_d = replica_rps(perf, plan, w.osl)
    n_p = plan.prefill_replicas if plan.mode == "disaggregated" else plan.replicas
    tokens = rate * w.osl
    price = price_per_gpu_hour(cluster)
    usd_h = None if price is None else price * plan.num_gpus
    a, b = energy_coefficients(cluster, plan.num_gpus)
    mem = perf.memory
    e2e = (None if lat.ttft_s is None or lat.tpot_s is None
           else lat.ttft_s + (w.osl - 1) * lat.tpot_s)
    return ServeEstimate(
        feasible=not reasons, reasons=reasons, **base,
        ttft_ms=_ms(lat.ttft_s), tpot_ms=_ms(lat.tpot_s), ttft_p99_ms=_ms(lat.ttft_q_s),
        tpot_p99_ms=_ms(lat.tpot_q_s), e2e_ms=_ms(e2e), requests_per_s=rate,
        capacity_rps=min(n_p * rps_p, plan.replicas * rps_d),
        output_tokens_per_s=tokens, output_tokens_per_s_per_gpu=tokens / plan.num_gpus,
        output_tokens_per_s_per_user=None if not lat.tpot_s else 1.0 / lat.tpot_s,
        utilization=lat.utilization, memory_per_gpu_gib=mem.total / GiB,
        memory_breakdown_gib={k: v / GiB for k, v in asdict(mem).items()},
        max_concurrency=perf.max_concurrency, usd_per_hour=usd_h,
        usd_per_million_tokens=(None if usd_h is None or tokens <= 0
                                else usd_h / (tokens * 3600) * 1e6),
        power_w=a + b, offline=w.rate_rps is None)
