"""The exact serving evaluator: one :class:`ServePlan` under one :class:`ServeWorkload` ->
a :class:`ServeEstimate` (latencies, throughput, memory, feasibility with reasons), and
the largest per-replica rate that meets the SLOs, which the search tabulates.

Aggregated replicas (continuous batching, chunked prefill): at saturation a request
costs the replica ``w = o_p + osl t_d(C) / C`` seconds (its packed prefill ``o_p`` and
its share of ``osl`` decode steps at the concurrency cap ``C``), so a replica serves at
most ``1/w`` requests/s. Below saturation the decode batch is what the load keeps in
flight (:func:`decode_batch`: Little's law against the step time, a fixed point), and
the step is timed at that batch. Prefill work stalls decode: the mean TPOT is
``t_d(B) / (1 - lam o_p)``; its percentile adds to the step at the batch's quantile the
prefills landing in a request's ``osl - 1`` steps at their quantile, each prefill
lengthening the window more land in (the arrivals of an M/D/1 busy period started by the
steps' work, :func:`planner.costmodel.serve.queueing.busy_arrivals_quantile`). TTFT waits in an M/D/1 queue
(:mod:`planner.costmodel.serve.queueing`). Disaggregated: prefill replicas are M/D/1 servers
of ``o_p``; decode replicas step at ``t_d(B)``; the KV cache crosses the network between
them. docs/serving.md.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache

from planner.costmodel.energy import energy_coefficients, price_per_gpu_hour
from planner.costmodel.network import PlacementError, p2p_time_s
from planner.costmodel.serve.queueing import (
    busy_arrivals_quantile,
    md1_wait_s,
    mdc_wait_s,
    normal_quantile,
)
from planner.costmodel.serve.step import (
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
from planner.specs.loaders import load_gpu

GiB = 2**30


def batch_grid(cap: int) -> tuple[int, ...]:
    """The batches the decode step is timed at: 1, 2, 3, 4, 6, 8, 12, ... (powers of two
    and their halfway points) below the cap, and the cap."""
    out, b = {cap}, 1
    while b < cap:
        out.add(b)
        if b >= 2 and b * 3 // 2 < cap:
            out.add(b * 3 // 2)
        b *= 2
    return tuple(sorted(out))


@dataclass(frozen=True)
class ReplicaPerf:
    """What one replica of a layout does, independent of the load."""

    # (batch, t_d(batch)) on :func:`batch_grid`, from 1 to the cap (mean context): the
    # step between two tokens, linear between the points
    decode_steps: tuple[tuple[int, float], ...]
    prefill: Prefill
    memory: ServeMemory
    max_concurrency: int
    reasons: tuple[str, ...]  # why the layout cannot run at all (empty: it can)

    @property
    def decode_step_s(self) -> float:
        """t_d(C): the step at the concurrency cap (saturation)."""
        return self.decode_steps[-1][1]

    def step_s(self, batch: float) -> float:
        """t_d(batch), linear between the grid's batches; clamped to [1, C]."""
        pts = self.decode_steps
        if batch <= pts[0][0]:
            return pts[0][1]
        for (b0, t0), (b1, t1) in zip(pts, pts[1:]):
            if batch <= b1:
                return t0 + (t1 - t0) * (batch - b0) / (b1 - b0)
        return pts[-1][1]


def decode_batch(perf: ReplicaPerf, tokens_rps: float, stretch: float = 1.0) -> float:
    """The mean batch a decoding sequence is in, offered ``tokens_rps`` decode tokens/s
    (requests/s x (osl - 1)) whose steps each take ``stretch`` x t_d (prefill stalls):
    itself and the others in flight, ``B = 1 + tokens_rps stretch t_d(B)`` (Little's law:
    the others decoding are the rate times the decode time; with Poisson arrivals a
    sequence sees the time-average). The least fixed point, found exactly: t_d is linear
    between the grid's batches, so ``f(B) = 1 + k t_d(B) - B`` (k = tokens_rps stretch) is
    linear on each segment; ``f(1) > 0`` and the first grid point where ``f <= 0`` closes
    the segment holding the root. At most one pass over the grid, so it terminates. No
    root below the cap: the replica is saturated and decodes at the cap."""
    k = tokens_rps * stretch
    pts = perf.decode_steps
    if k <= 0:
        return float(pts[0][0])
    f0 = 1.0 + k * pts[0][1] - pts[0][0]
    for (b0, _), (b1, t1) in zip(pts, pts[1:]):
        f1 = 1.0 + k * t1 - b1
        if f1 <= 0:
            return b0 + (b1 - b0) * f0 / (f0 - f1)
        f0 = f1
    return float(pts[-1][0])


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


def _has_gpu(cluster: ClusterSpec, gpu: str) -> bool:
    return gpu.lower() in [cluster.gpu.name.lower(), *map(str.lower, cluster.gpu.aliases)]


def cluster_for(cluster: ClusterSpec, plan: ServePlan,
                others: tuple[ClusterSpec, ...] = ()) -> ClusterSpec:
    """The cluster a pool of ``plan`` runs on: ``cluster`` when it has the plan's GPU type
    (``plan.gpu``; always when None), else the first of ``others`` that has it (each GPU
    type on its own cluster, as the search tabulated it), else ``cluster``'s network with
    that GPU."""
    if plan.gpu is None or _has_gpu(cluster, plan.gpu):
        return cluster
    own = next((c for c in others if _has_gpu(c, plan.gpu)), None)
    if own is not None:
        return own

    return cluster.model_copy(update={"gpu": load_gpu(plan.gpu)})


@lru_cache(maxsize=65536)
def replica_perf(model: ModelSpec, cluster: ClusterSpec, plan: ServePlan, isl: int,
                 osl: int, engine: ServeEngine) -> ReplicaPerf | None:
    """Load-independent performance of one replica of ``plan`` on ``cluster``'s GPU
    (replica counts and the prefill pool ignored); None when the layout cannot exist
    (:func:`layout_reasons`)."""
    if layout_reasons(model, cluster, plan):
        return None
    try:
        steps = tuple((b, _decode_step_at(model, cluster, plan, isl + osl / 2, engine, b))
                      for b in batch_grid(plan.concurrency))  # mean context
        pre = prefill(model, cluster, plan, isl, engine)
        pre = replace(pre, latency_s=pre.latency_s + engine.request_overhead_ms * 1e-3)
    except PlacementError:
        return None
    mem = serve_memory(model, cluster, plan, isl, osl)
    most = max_concurrency(model, cluster, plan, isl, osl)
    reasons = []
    if mem.total > mem.capacity:
        reasons.append(f"memory {mem.total / GiB:.1f} GiB per GPU exceeds the "
                       f"{mem.capacity / GiB:.1f} GiB of HBM on {cluster.gpu.name} "
                       f"(concurrency {plan.concurrency}; at most {most} fit)")
    return ReplicaPerf(steps, pre, mem, most, tuple(reasons))


@lru_cache(maxsize=65536)
def _decode_step_at(model: ModelSpec, cluster: ClusterSpec, plan: ServePlan, context: float,
                    engine: ServeEngine, batch: int) -> float:
    """t_d(batch), shared by the layouts that differ only in their cap."""
    return decode_step_s(model, cluster, plan.model_copy(update={"concurrency": 1}), context,
                         engine, batch)


def kv_transfer_s(model: ModelSpec, cluster: ClusterSpec, prefill_plan: ServePlan,
                  isl: int) -> float:
    """A prompt's KV cache from a prefill replica to a decode replica on another node:
    each prefill GPU sends its shard at once over the cluster's outermost level."""
    kv = kv_bytes_per_sequence(model, prefill_plan, isl)
    levels = tuple(cluster.topology)
    outer = tuple(1 for _ in levels[:-1]) + (2,)
    return p2p_time_s(kv, outer, levels)


@dataclass(frozen=True)
class Latency:
    """Seconds; None where the queue is unstable at the offered load. ``batch``: the mean
    decode batch a sequence is in (:func:`decode_batch`)."""

    ttft_s: float | None
    ttft_q_s: float | None
    tpot_s: float | None
    tpot_q_s: float | None
    utilization: float
    batch: float | None = None


def batch_quantile(batch: float, quantile: float, cap: int) -> float:
    """The ``quantile`` of the batch averaged over one sequence's decode: the others
    overlapping a window of length D are Poisson arrivals from (-D, D), each present for
    D - |a| of it, so their time-average has mean m = batch - 1 and variance 2m/3 (normal
    approximation); at most the cap."""
    others = batch - 1
    if others <= 0:
        return batch
    return min(float(cap), batch + normal_quantile(quantile) * math.sqrt(2 * others / 3))


def _ride_s(perf: ReplicaPerf, others: float) -> float:
    """Mean decode step a prompt's chunk rides on when ``others`` sequences decode on
    average (Poisson): ``E[t_d(N); N >= 1]``, exact for a step linear in the batch:
    ``P(N >= 1) t_d(E[N | N >= 1])``."""
    if others <= 0:
        return 0.0
    busy = -math.expm1(-others)
    return busy * perf.step_s(others / busy)


def aggregated_latency(perf: ReplicaPerf, plan: ServePlan, w: ServeWorkload,
                       lam: float) -> Latency:
    """Latencies of an aggregated replica offered ``lam`` requests/s (module docstring)."""
    o_p, pre = perf.prefill.occupancy_s, perf.prefill
    rho = lam * (o_p + w.osl * perf.decode_step_s / plan.concurrency)
    if rho >= 1 or lam * o_p >= 1:
        return Latency(None, None, None, None, rho)
    stretch = 1 / (1 - lam * o_p)
    batch = decode_batch(perf, lam * max(w.osl - 1, 0), stretch)
    t_d = perf.step_s(batch)
    tpot = t_d * stretch
    # the prefills landing in one request's osl - 1 decode steps, each lengthening the
    # window it lands in (an M/D/1 busy period started by the steps' own work)
    gaps = max(w.osl - 1, 1)
    stalls = busy_arrivals_quantile(lam, gaps * t_d, o_p, w.percentile)
    tpot_q = perf.step_s(batch_quantile(batch, w.percentile, plan.concurrency)) \
        + stalls * o_p / gaps
    # the prompt's chunks ride on decode steps of the sequences in flight, the first
    # once the step in progress ends (half a step on average)
    ride = pre.chunks * _ride_s(perf, batch - 1)
    base = pre.latency_s + ride + _ride_s(perf, batch - 1) / 2
    service = o_p + ride
    # a prompt starts once one of the concurrency slots is free (held for its whole life)
    hold = base + w.osl * tpot
    slot = mdc_wait_s(lam, hold, plan.concurrency)
    slot_q = mdc_wait_s(lam, hold, plan.concurrency, w.percentile)
    if math.isinf(slot):
        return Latency(None, None, None, None, max(rho, lam * hold / plan.concurrency))
    return Latency(base + md1_wait_s(rho, service) + slot,
                   base + md1_wait_s(rho, service, w.percentile) + slot_q, tpot, tpot_q, rho,
                   batch)


def disaggregated_latency(perf_p: ReplicaPerf, perf_d: ReplicaPerf, plan: ServePlan,
                          w: ServeWorkload, lam_p: float, lam_d: float,
                          transfer_s: float) -> Latency:
    """Prefill replicas offered ``lam_p`` each (M/D/1 servers of the packed prefill),
    decode replicas ``lam_d`` each stepping at ``t_d`` of the batch in flight; the KV
    transfer adds to TTFT."""
    o_p = perf_p.prefill.occupancy_s
    rho_p = lam_p * o_p
    rho = max(rho_p, lam_d * w.osl * perf_d.decode_step_s / plan.concurrency)
    if rho >= 1:
        return Latency(None, None, None, None, rho)
    batch = decode_batch(perf_d, lam_d * max(w.osl - 1, 0))
    t_d = perf_d.step_s(batch)
    t_q = perf_d.step_s(batch_quantile(batch, w.percentile, plan.concurrency))
    base = perf_p.prefill.latency_s + transfer_s
    # a sequence arriving at a full decode replica waits for a slot: its second token is
    # late by the wait, spread over its osl - 1 token intervals
    hold, gaps = max(w.osl - 1, 1) * t_d, max(w.osl - 1, 1)
    join = _ride_s(perf_d, batch - 1) / 2  # it joins when the step in progress ends
    tpot = t_d + (join + mdc_wait_s(lam_d, hold, plan.concurrency)) / gaps
    tpot_q = t_q + (join + mdc_wait_s(lam_d, hold, plan.concurrency, w.percentile)) / gaps
    return Latency(base + md1_wait_s(rho_p, o_p), base + md1_wait_s(rho_p, o_p, w.percentile),
                   tpot, tpot_q, rho, batch)


def aggregated_rps(perf: ReplicaPerf, plan: ServePlan, osl: int) -> float:
    """Saturation requests/s of one aggregated replica: 1 / (o_p + osl t_d / B)."""
    return 1.0 / (perf.prefill.occupancy_s + osl * perf.decode_step_s / plan.concurrency)


def prefill_rps(perf: ReplicaPerf) -> float:
    return 1.0 / perf.prefill.occupancy_s


def decode_rps(perf: ReplicaPerf, plan: ServePlan, osl: int) -> float:
    return plan.concurrency / (osl * perf.decode_step_s)


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
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi or hi - lo < 1e-9:  # below the tables' 1e-6 req/s grain
            break
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def aggregated_capacity_rps(perf: ReplicaPerf, plan: ServePlan, w: ServeWorkload) -> float:
    """Most requests/s one aggregated replica takes with every SLO met at the percentile
    (0 when it does not fit or cannot meet them)."""
    if perf.reasons:
        return 0.0
    return _largest(lambda lam: not slo_reasons(aggregated_latency(perf, plan, w, lam), w),
                    aggregated_rps(perf, plan, w.osl))


def prefill_capacity_rps(perf: ReplicaPerf, w: ServeWorkload, transfer_s: float) -> float:
    """Most requests/s one prefill replica takes with the TTFT SLO met."""
    if perf.reasons:
        return 0.0
    no_tpot = w.model_copy(update={"tpot_ms": None})
    return _largest(lambda lam: not slo_reasons(
        disaggregated_latency(perf, perf, _one(), no_tpot, lam, 0.0, transfer_s), no_tpot),
        prefill_rps(perf))


def decode_capacity_rps(perf: ReplicaPerf, plan: ServePlan, w: ServeWorkload) -> float:
    """Most requests/s one decode replica takes with the TPOT SLO met (the decode step
    at the batch in flight plus the wait for a free slot)."""
    if perf.reasons or (w.tpot_ms is not None and perf.step_s(1) * 1e3 > w.tpot_ms):
        return 0.0
    no_ttft = w.model_copy(update={"ttft_ms": None})
    return _largest(lambda lam: not slo_reasons(
        disaggregated_latency(perf, perf, plan, no_ttft, 0.0, lam, 0.0), no_ttft),
        decode_rps(perf, plan, w.osl))


@lru_cache(maxsize=1)
def _one() -> ServePlan:
    """A placeholder decode plan for prefill-only checks (no decode load); built on first
    use, not at import (planner --help builds no spec)."""
    return ServePlan()


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
    decode_batch: float | None = None  # mean sequences in a decode step (cap: saturated)
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


@dataclass(frozen=True)
class _Fleet:
    """The plan's pools resolved: decode (or aggregated) and prefill performance."""

    plan: ServePlan
    perf_d: ReplicaPerf
    perf_p: ReplicaPerf
    n_p: int
    transfer_s: float


def _capacity(f: _Fleet, w: ServeWorkload, slo: bool) -> float:
    """Fleet requests/s: under the SLOs, or at saturation."""
    plan, osl = f.plan, w.osl
    if plan.prefill is None:
        one = aggregated_capacity_rps(f.perf_d, plan, w) if slo else aggregated_rps(f.perf_d, plan, osl)
        return plan.replicas * one
    p = prefill_capacity_rps(f.perf_p, w, f.transfer_s) if slo else prefill_rps(f.perf_p)
    d = decode_capacity_rps(f.perf_d, plan, w) if slo else decode_rps(f.perf_d, plan, osl)
    return min(f.n_p * p, plan.replicas * d)


def _latency(f: _Fleet, w: ServeWorkload, rate: float) -> Latency:
    plan = f.plan
    if w.rate_rps is None and not (w.ttft_ms or w.tpot_ms):
        # offline, saturated: prompts without queueing, decode at full load
        full = f.perf_d.decode_step_s
        if plan.prefill is None:
            full += plan.concurrency * f.perf_d.prefill.occupancy_s / w.osl
        ttft = f.perf_p.prefill.latency_s + f.transfer_s
        return Latency(ttft, ttft, full, full, 1.0, float(plan.concurrency))
    if plan.prefill is None:
        return aggregated_latency(f.perf_d, plan, w, rate / plan.replicas)
    return disaggregated_latency(f.perf_p, f.perf_d, plan, w, rate / f.n_p,
                                 rate / plan.replicas, f.transfer_s)


def _pools(cluster: ClusterSpec, plan: ServePlan, others: tuple[ClusterSpec, ...] = ()
           ) -> list[tuple[str, ServePlan, ClusterSpec]]:
    out = [("" if plan.prefill is None else "decode pool: ", plan,
            cluster_for(cluster, plan, others))]
    if plan.prefill is not None:
        out.append(("prefill pool: ", plan.prefill, cluster_for(cluster, plan.prefill, others)))
    return out


def _fleet(model: ModelSpec, cluster: ClusterSpec, plan: ServePlan, w: ServeWorkload,
           engine: ServeEngine, others: tuple[ClusterSpec, ...] = ()
           ) -> tuple[_Fleet | None, list[str]]:
    why, perfs = [], []
    pools = _pools(cluster, plan, others)
    for label, p, c in pools:
        bad = layout_reasons(model, c, p)
        perf = None if bad else replica_perf(model, c, p, w.isl, w.osl, engine)
        why += [label + r for r in bad] or ([] if perf else [label + "the replica cannot be placed"])
        why += [label + r for r in (perf.reasons if perf else ())]
        perfs.append(perf)
    if any(p is None for p in perfs):
        return None, why
    if plan.prefill is None:
        return _Fleet(plan, perfs[0], perfs[0], plan.replicas, 0.0), why
    transfer = kv_transfer_s(model, pools[1][2], plan.prefill, w.isl)
    return _Fleet(plan, perfs[0], perfs[1], plan.prefill.replicas, transfer), why


def _money(cluster: ClusterSpec, plan: ServePlan, others: tuple[ClusterSpec, ...]
           ) -> tuple[float | None, float]:
    """($ per hour or None without prices, watts at full load with PUE) of every pool."""
    usd, watts = 0.0, 0.0
    for _, p, c in _pools(cluster, plan, others):
        gpus = p.gpus_per_replica * p.replicas
        price = price_per_gpu_hour(c)
        usd = None if usd is None or price is None else usd + price * gpus
        a, b = energy_coefficients(c, gpus)
        watts += a + b
    return usd, watts


def evaluate_serve(model: ModelSpec, cluster: ClusterSpec, plan: ServePlan,
                   w: ServeWorkload, engine: ServeEngine,
                   others: tuple[ClusterSpec, ...] = ()) -> ServeEstimate:
    """Latencies, throughput, memory and cost of ``plan`` serving ``w`` on ``cluster``
    (each pool on its ``gpu``, on the cluster of ``others`` that has it where the plan
    mixes GPU types; module docstring). Infeasible with the reasons when a layout
    cannot run, does not fit, saturates or misses an SLO. Without a rate the fleet is
    offered its capacity: under the SLOs when there are SLOs, at saturation otherwise."""
    base = dict(plan=plan.to_dict(), num_gpus=plan.num_gpus, percentile=w.percentile,
                offline=w.rate_rps is None)
    f, reasons = _fleet(model, cluster, plan, w, engine, tuple(others))
    if f is None:
        return ServeEstimate(feasible=False, reasons=reasons, **base)
    slo = bool(w.ttft_ms or w.tpot_ms)
    rate = w.rate_rps if w.rate_rps is not None else _capacity(f, w, slo)
    lat = _latency(f, w, rate)
    if rate <= 0:
        reasons.append("no load meets the SLOs on this plan")
    else:
        reasons += slo_reasons(lat, w)
    tokens = rate * w.osl
    usd_h, watts = _money(cluster, plan, tuple(others))
    mem = max((f.perf_d.memory, f.perf_p.memory), key=lambda m: m.total)
    e2e = None if lat.ttft_s is None or lat.tpot_s is None else lat.ttft_s + (w.osl - 1) * lat.tpot_s
    return ServeEstimate(
        feasible=not reasons, reasons=reasons, **base,
        ttft_ms=_ms(lat.ttft_s), tpot_ms=_ms(lat.tpot_s), ttft_p99_ms=_ms(lat.ttft_q_s),
        tpot_p99_ms=_ms(lat.tpot_q_s), e2e_ms=_ms(e2e), requests_per_s=rate,
        capacity_rps=_capacity(f, w, False), output_tokens_per_s=tokens,
        output_tokens_per_s_per_gpu=tokens / plan.num_gpus,
        output_tokens_per_s_per_user=None if not lat.tpot_s else 1.0 / lat.tpot_s,
        utilization=lat.utilization, decode_batch=lat.batch, memory_per_gpu_gib=mem.total / GiB,
        memory_breakdown_gib={k: v / GiB for k, v in asdict(mem).items()},
        max_concurrency=f.perf_d.max_concurrency, usd_per_hour=usd_h,
        usd_per_million_tokens=(None if usd_h is None or tokens <= 0
                                else usd_h / (tokens * 3600) * 1e6),
        power_w=watts)
