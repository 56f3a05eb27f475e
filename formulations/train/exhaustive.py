"""Brute force, the reference every other backend is tested against: every plan of the
space, costed by the vectorized evaluator (:func:`planner.costmodel.train.batch.evaluate_columns`,
the evaluator's own terms and composition), the best ones re-evaluated one by one with
the scalar evaluator, which decides the answer."""

from __future__ import annotations

import math
import time
from typing import Callable, Iterator

import numpy as np

from formulations.train.search import Candidate, SearchResult, SearchStats, evaluate_key
from planner.costmodel.train.batch import evaluate_columns, inner_columns
from planner.costmodel.objective import Objective
from planner.costmodel.train.tables import Tables, build_tables

#: Points costed per vectorized call: bounds memory (a few hundred MB at most).
CHUNK_PLANS = 200_000
#: Plans whose vectorized objective is within this relative margin of the K-th best are
#: re-evaluated exactly (the two evaluators agree to ~1e-15).
MARGIN = 1e-9


def _chunks(tb: Tables) -> Iterator[tuple[np.ndarray, ...]]:
    """Inner choices of the space as columns, point after point, in pieces of about
    ``CHUNK_PLANS`` plans."""
    q, rc, sp, z = inner_columns(tb)
    for start in range(0, len(q), CHUNK_PLANS):
        sl = slice(start, start + CHUNK_PLANS)
        yield q[sl], rc[sl], sp[sl], z[sl]


def run_exhaustive(space, objective: Objective | str = "time", top_k: int = 1,
                   time_limit_s: float = 1e9,
                   progress: Callable[[int, int], None] | None = None,
                   max_time_s: float | None = None) -> SearchResult:
    """The ``top_k`` best plans of ``space`` by evaluating all of them (within
    ``max_time_s`` of iteration time when given)."""
    t0 = time.perf_counter()
    tb = build_tables(space, Objective.of(objective))
    stats = SearchStats(points_total=tb.num_points, space_size=space.size())
    status, done = "optimal", 0
    kept: list[tuple] = []  # keys that may be among the K best
    kth = math.inf
    for q, rc, sp, z in _chunks(tb):
        # past the limit only once a plan is in hand: a limit spent before the first
        # feasible plan still answers with the first one found (never "no plan" for lack
        # of time while plans are there to evaluate)
        if math.isfinite(kth) and time.perf_counter() - t0 > time_limit_s:
            status = "time_limit"
            break
        est = evaluate_columns(tb, q, rc, sp, z)
        obj = tb.terms.time_weight[q] * est.iteration_time_s \
            + tb.terms.busy_weight[q] * est.gpu_busy_s
        ok = est.feasible if max_time_s is None else (
            est.feasible & (est.iteration_time_s <= max_time_s * (1 + MARGIN)))
        obj = np.where(ok, obj, math.inf)
        if np.isfinite(obj).any():
            kth = min(kth, float(np.partition(obj, min(top_k, len(obj)) - 1)[
                min(top_k, len(obj)) - 1]))
        kept += [(int(q[i]), tuple(int(x) for x in rc[i]), int(sp[i]), int(z[i]))
                 for i in np.flatnonzero(obj <= kth * (1 + MARGIN))]
        done += len(q)
        if progress:
            progress(done, stats.space_size)
    stats.evaluations = done
    cands = [evaluate_key(tb, k, max_time_s) for k in kept]
    cands = sorted((c for c in cands if math.isfinite(c.objective)),
                   key=lambda c: (c.objective, repr(_order_key(tb, c.key))))[:top_k]
    if not cands and status == "optimal":
        status = "infeasible"
    return SearchResult("exhaustive", status, cands, cands[0].objective if cands else None,
                        stats, time.perf_counter() - t0)


def _order_key(tb: Tables, key: tuple) -> tuple:
    """The plan's place in the space, for a stable order among exact ties."""
    q, rc, sp, z = key
    o, dom = tb.points[q]
    return (o, dom, rc, sp, z)


__all__ = ["run_exhaustive", "Candidate"]
