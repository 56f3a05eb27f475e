"""A small seeded discrete-event simulation of a serving plan on a Poisson trace: checks
the queueing model's P50/P99 TTFT and TPOT (docs/serving.md).

It uses the evaluator's step times (the decode step ``t_d(n)`` of the ``n`` sequences
actually running in that step, prefill occupancy per prompt token, prefill latency, KV
transfer) and replaces the queueing formulas and the in-flight batch by simulation:
requests arrive as a Poisson stream and are routed to replicas uniformly at random.
Aggregated replicas run continuous batching: every step decodes one token of each running
sequence and prefills up to ``prefill_chunk`` prompt tokens first come, first served (a
prompt's first token comes with the step that ends its prefill); a sequence needs a free
slot of the ``concurrency`` to start. Disaggregated: FCFS prefill servers, then decode
replicas stepping their running sequences, with ``concurrency`` slots.
"""

from __future__ import annotations

import random
import statistics
from collections import deque
from dataclasses import dataclass

from planner.costmodel.serve.evaluate import ReplicaPerf, _fleet
from planner.errors import InputError
from planner.specs.cluster import ClusterSpec
from planner.specs.model import ModelSpec
from planner.specs.serve import ServeEngine, ServePlan, ServeWorkload


#: The most requests ``--simulate`` runs, and the most output tokens (requests x osl) it
#: decodes: its work grows with both (about 10 s at the token limit on one core).
MAX_REQUESTS = 1_000_000
MAX_TOKENS = 50_000_000


def check_requests(requests: int, osl: int) -> None:
    """InputError unless ``requests`` is within the simulation's bounds."""
    if isinstance(requests, bool) or not isinstance(requests, int) or not (
            100 <= requests <= MAX_REQUESTS):
        raise InputError(f"--simulate {requests!r}: expected 100 to {MAX_REQUESTS:,} requests")
    if requests * osl > MAX_TOKENS:
        raise InputError(f"--simulate {requests:,}: {requests:,} requests of {osl:,} output "
                         f"tokens exceed the {MAX_TOKENS:,} tokens a simulation decodes at "
                         f"most; at --osl {osl} simulate at most {MAX_TOKENS // osl:,} requests")


@dataclass
class SimResult:
    """Percentiles, and means with the half-width of their 95 % confidence interval (batch
    means: 20 batches of consecutive requests, Student's t with 19 degrees of freedom)."""

    requests: int
    ttft_p50_ms: float
    ttft_p99_ms: float
    tpot_p50_ms: float
    tpot_p99_ms: float
    ttft_mean_ms: float = 0.0
    ttft_mean_ci_ms: float = 0.0
    tpot_mean_ms: float = 0.0
    tpot_mean_ci_ms: float = 0.0

    def to_json(self) -> dict:
        return dict(vars(self))


def _quantile(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=1000, method="inclusive")[round(q * 1000) - 1] \
        if len(xs) > 1 else xs[0]


BATCHES = 20
T_975_19 = 2.093  # Student's t, 97.5 % quantile, 19 degrees of freedom


def mean_ci(xs: list[float]) -> tuple[float, float]:
    """(mean, 95 % half-width) by batch means over ``BATCHES`` consecutive batches, which
    absorbs the correlation of neighbouring requests' latencies; half-width 0 with fewer
    values than batches."""
    mean = statistics.fmean(xs)
    size = len(xs) // BATCHES
    if size < 1:
        return mean, 0.0
    means = [statistics.fmean(xs[i * size:(i + 1) * size]) for i in range(BATCHES)]
    return mean, T_975_19 * statistics.stdev(means) / BATCHES ** 0.5


def _aggregated_replica(arrivals: list[float], perf: ReplicaPerf, plan: ServePlan,
                        w: ServeWorkload) -> tuple[list[float], list[float]]:
    """(TTFTs, TPOTs) of one aggregated replica's requests, step by step."""
    per_token = perf.prefill.occupancy_s / w.isl
    extra = max(perf.prefill.latency_s - perf.prefill.occupancy_s, 0.0)  # overhead, stages
    waiting: deque = deque()  # [arrival, prompt tokens left]
    # [step of its last token, first-token time]: every sequence decodes osl - 1 tokens,
    # so they finish in the order they started
    running: deque = deque()
    ttft, tpot, t, i, step, n = [], [], 0.0, 0, 0, len(arrivals)
    while i < n or waiting or running:
        if running and (not waiting or len(running) >= plan.concurrency):
            # decode-only steps (nothing to prefill, or no free slot) until a sequence
            # finishes or, with a slot free, a request arrives: the same additions to t
            full, last = len(running) >= plan.concurrency, running[0][0] - 1
            t_d = perf.step_s(len(running))  # the batch is fixed until one finishes
            while step < last and (full or i >= n or arrivals[i] > t):
                t += t_d
                step += 1
        while i < n and arrivals[i] <= t:
            waiting.append([arrivals[i], w.isl])
            i += 1
        if not waiting and not running:
            t = arrivals[i]
            continue
        budget, done = plan.prefill_chunk, 0
        for req in waiting:  # FCFS prompt tokens up to the budget, while slots remain
            if budget <= 0 or len(running) + done >= plan.concurrency:
                break
            take = min(budget, req[1])
            req[1] -= take
            budget -= take
            if req[1] == 0:
                done += 1  # the finished prompts are the first ``done`` in the queue
        t += (perf.step_s(len(running)) if running else 0.0) \
            + (plan.prefill_chunk - budget) * per_token
        step += 1
        while running and running[0][0] <= step:
            tpot.append((t - running.popleft()[1]) / max(w.osl - 1, 1))
        for _ in range(done):
            ttft.append(t - waiting.popleft()[0] + extra)
            running.append([step + w.osl - 1, t]) if w.osl > 1 else tpot.append(0.0)
    return ttft, tpot


def _decode_replica(ready: list[float], perf: ReplicaPerf, plan: ServePlan,
                   w: ServeWorkload) -> list[float]:
    """TPOTs of one decode replica's sequences (ready times ascending): each step decodes
    one token of every running sequence in ``t_d`` of their number; a sequence joins at a
    step boundary when one of the ``concurrency`` slots is free, and its TPOT counts the
    wait from its arrival."""
    gaps = w.osl - 1
    if gaps <= 0:
        return [0.0] * len(ready)
    waiting: deque = deque()
    running: deque = deque()  # [step of its last token, ready time], in finishing order
    tpot, t, i, step, n = [], 0.0, 0, 0, len(ready)
    while i < n or waiting or running:
        while i < n and ready[i] <= t:
            waiting.append(ready[i])
            i += 1
        while waiting and len(running) < plan.concurrency:
            running.append([step + gaps, waiting.popleft()])
        if not running:
            t = ready[i]
            continue
        t_d, last = perf.step_s(len(running)), running[0][0]
        full = len(running) >= plan.concurrency
        while True:  # the batch is fixed until one finishes or one may join
            t += t_d
            step += 1
            if step >= last or (not full and i < n and ready[i] <= t):
                break
        while running and running[0][0] <= step:
            tpot.append((t - running.popleft()[1]) / gaps)
    return tpot


def _disaggregated(arrivals: list[float], f, w: ServeWorkload, rng: random.Random):
    """FCFS prefill servers (random routing), then decode replicas stepping their batch."""
    o_p = f.perf_p.prefill.occupancy_s
    tail = f.perf_p.prefill.latency_s - o_p + f.transfer_s
    free = [0.0] * f.n_p
    ready = []
    ttft = []
    for a in arrivals:
        k = rng.randrange(f.n_p)
        free[k] = max(free[k], a) + o_p
        ttft.append(free[k] + tail - a)
        ready.append(free[k] + tail)
    per = [[] for _ in range(f.plan.replicas)]
    for r in sorted(ready):
        per[rng.randrange(f.plan.replicas)].append(r)
    tpot = [x for rs in per if rs for x in _decode_replica(rs, f.perf_d, f.plan, w)]
    return ttft, tpot


def simulate(model: ModelSpec, cluster: ClusterSpec, plan: ServePlan, w: ServeWorkload,
             requests: int = 20000, seed: int = 0,
             *, engine: ServeEngine,
             others: tuple[ClusterSpec, ...] = ()) -> SimResult:
    """P50/P99 of TTFT and TPOT over ``requests`` Poisson arrivals at ``w.rate_rps``
    (``others``: the clusters of a fleet's other GPU types, as for ``evaluate_serve``)."""
    if w.rate_rps is None:
        raise InputError("--simulate needs --rate (the Poisson arrival rate)")
    check_requests(requests, w.osl)
    f, reasons = _fleet(model, cluster, plan, w, engine, tuple(others))
    if f is None:
        raise InputError("cannot simulate: " + "; ".join(reasons))
    rng = random.Random(seed)
    t, arrivals = 0.0, []
    for _ in range(requests):
        t += rng.expovariate(w.rate_rps)
        arrivals.append(t)
    if plan.prefill is not None:
        ttft, tpot = _disaggregated(arrivals, f, w, rng)
    else:
        per = [[] for _ in range(plan.replicas)]
        for a in arrivals:
            per[rng.randrange(plan.replicas)].append(a)
        ttft, tpot = [], []
        for arr in per:
            if arr:
                a, b = _aggregated_replica(arr, f.perf_d, plan, w)
                ttft += a
                tpot += b
    warm = len(ttft) // 10  # the first tenth warms the queues up
    ttft, tpot = ttft[warm:], tpot[warm:]
    (ttft_m, ttft_ci), (tpot_m, tpot_ci) = mean_ci(ttft), mean_ci(tpot)
    return SimResult(len(ttft), _quantile(ttft, 0.5) * 1e3, _quantile(ttft, 0.99) * 1e3,
                     _quantile(tpot, 0.5) * 1e3, _quantile(tpot, 0.99) * 1e3,
                     ttft_m * 1e3, ttft_ci * 1e3, tpot_m * 1e3, tpot_ci * 1e3)
