"""A small seeded discrete-event simulation of a serving plan on a Poisson trace: checks
the queueing model's P50/P99 TTFT and TPOT (docs/serving.md).

It uses the evaluator's step times (decode step ``t_d`` at the configured concurrency,
prefill occupancy per prompt token, prefill latency, KV transfer) and replaces only the
queueing formulas by simulation: requests arrive as a Poisson stream and are routed to
replicas uniformly at random. Aggregated replicas run continuous batching: every step
decodes one token of each running sequence and prefills up to ``prefill_chunk`` prompt
tokens first come, first served (a prompt's first token comes with the step that ends
its prefill); a sequence needs a free slot of the ``concurrency`` to start. Disaggregated:
FCFS prefill servers, then decode replicas with ``concurrency`` slots.
"""

from __future__ import annotations

import random
import statistics
from collections import deque
from dataclasses import dataclass

from planner.costmodel.serve_eval import ReplicaPerf, _fleet
from planner.errors import InputError
from planner.specs.cluster import ClusterSpec
from planner.specs.model import ModelSpec
from planner.specs.serve import ServeEngine, ServePlan, ServeWorkload


@dataclass
class SimResult:
    requests: int
    ttft_p50_ms: float
    ttft_p99_ms: float
    tpot_p50_ms: float
    tpot_p99_ms: float

    def to_json(self) -> dict:
        return dict(vars(self))


def _quantile(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=1000, method="inclusive")[round(q * 1000) - 1] \
        if len(xs) > 1 else xs[0]


def _aggregated_replica(arrivals: list[float], perf: ReplicaPerf, plan: ServePlan,
                        w: ServeWorkload) -> tuple[list[float], list[float]]:
    """(TTFTs, TPOTs) of one aggregated replica's requests, step by step."""
    t_d, per_token = perf.decode_step_s, perf.prefill.occupancy_s / w.isl
    extra = max(perf.prefill.latency_s - perf.prefill.occupancy_s, 0.0)  # overhead, stages
    waiting: deque = deque()  # [arrival, prompt tokens left]
    running: list = []  # [tokens left, first-token time]
    ttft, tpot, t, i = [], [], 0.0, 0
    while i < len(arrivals) or waiting or running:
        while i < len(arrivals) and arrivals[i] <= t:
            waiting.append([arrivals[i], w.isl])
            i += 1
        if not waiting and not running:
            t = arrivals[i]
            continue
        budget, done = plan.prefill_chunk, []
        for req in waiting:  # FCFS prompt tokens up to the budget, while slots remain
            if budget <= 0 or len(running) + len(done) >= plan.concurrency:
                break
            take = min(budget, req[1])
            req[1] -= take
            budget -= take
            if req[1] == 0:
                done.append(req)
        step = (t_d if running else 0.0) + (plan.prefill_chunk - budget) * per_token
        t += step
        for seq in running:
            seq[0] -= 1
        for seq in [s for s in running if s[0] <= 0]:
            tpot.append((t - seq[1]) / max(w.osl - 1, 1))
        running = [s for s in running if s[0] > 0]
        for req in done:
            waiting.remove(req)
            ttft.append(t - req[0] + extra)
            running.append([w.osl - 1, t]) if w.osl > 1 else tpot.append(0.0)
    return ttft, tpot


def _disaggregated(arrivals: list[float], f, w: ServeWorkload, rng: random.Random):
    """FCFS prefill servers (random routing), then decode replicas with slots."""
    o_p, t_d = f.perf_p.prefill.occupancy_s, f.perf_d.decode_step_s
    tail = f.perf_p.prefill.latency_s - o_p + f.transfer_s
    free = [0.0] * f.n_p
    ready = []
    ttft = []
    for a in arrivals:
        k = rng.randrange(f.n_p)
        free[k] = max(free[k], a) + o_p
        ttft.append(free[k] + tail - a)
        ready.append(free[k] + tail)
    slots = [[0.0] * f.plan.concurrency for _ in range(f.plan.replicas)]
    tpot = []
    for r in ready:  # each decode slot serves one sequence at a time, steps of t_d
        slot = slots[rng.randrange(f.plan.replicas)]
        j = min(range(len(slot)), key=slot.__getitem__)
        start = max(slot[j], r)
        slot[j] = start + (w.osl - 1) * t_d
        tpot.append((slot[j] - r) / max(w.osl - 1, 1))
    return ttft, tpot


def simulate(model: ModelSpec, cluster: ClusterSpec, plan: ServePlan, w: ServeWorkload,
             requests: int = 20000, seed: int = 0,
             engine: ServeEngine = ServeEngine()) -> SimResult:
    """P50/P99 of TTFT and TPOT over ``requests`` Poisson arrivals at ``w.rate_rps``."""
    if w.rate_rps is None:
        raise InputError("--simulate needs --rate (the Poisson arrival rate)")
    f, reasons = _fleet(model, cluster, plan, w, engine)
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
    return SimResult(len(ttft), _quantile(ttft, 0.5) * 1e3, _quantile(ttft, 0.99) * 1e3,
                     _quantile(tpot, 0.5) * 1e3, _quantile(tpot, 0.99) * 1e3)
