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
    # [step of its last token, first-token time]: every sequence decodes osl - 1 tokens,
    # so they finish in the order they started
    running: deque = deque()
    ttft, tpot, t, i, step, n = [], [], 0.0, 0, 0, len(arrivals)
    while i < n or waiting or running:
        if running and (not waiting or len(running) >= plan.concurrency):
            # decode-only steps (nothing to prefill, or no free slot) until a sequence
            # finishes or, with a slot free, a request arrives: the same additions to t
            full, last = len(running) >= plan.concurrency, running[0][0] - 1
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
        t += (t_d if running else 0.0) + (plan.prefill_chunk - budget) * per_token
        step += 1
        while running and running[0][0] <= step:
            tpot.append((t - running.popleft()[1]) / max(w.osl - 1, 1))
        for _ in range(done):
            ttft.append(t - waiting.popleft()[0] + extra)
            running.append([step + w.osl - 1, t]) if w.osl > 1 else tpot.append(0.0)
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
    check_requests(requests, w.osl)
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
