"""The multi-pool part of the mixed-fleet search, solved exactly.

The space (docs/mixed.md states it): every non-empty ordered choice of two or more pools,
the pipeline made of one contiguous block of stages per pool in that order, every pool
used whole (``k_p = N_p / (tp x cp x dp)`` stages on pool ``p``); every outer point of
the single-type space (:class:`formulations.train.space.SearchSpace` over the pools'
GPU total: tp, cp, dp, microbatch, ep/etp, cp exchange) with one virtual stage and the
placement its rank order fills; every inner choice (recomputation per layer type,
sequence parallelism, ZeRO stage; no offload); and every split of the layers into the
``pp`` stages with at least one layer each.

Per (point, inner choice, pool order) the split is found exactly. The iteration time is
the cost model's composition (:func:`planner.costmodel.compose.iteration_time_s`) with
one virtual stage::

    T(n) = (m max_r S_r(n_r) + b sum_r S_r(n_r) + max_r R_r(n_r)) (1 + s)

``S_r(n)`` and ``R_r(n)`` being stage ``r``'s per-microbatch time and tail holding ``n``
layers (from the exact evaluator's :func:`planner.costmodel.train.mixed.mixed_stage_result`).
For thresholds ``X`` and ``Y`` a dynamic programme over the stages gives the least
``sum_r S_r`` over the splits with every ``S_r <= X``, ``R_r <= Y`` and every stage in
its GPU's memory; the optimum is the least ``m X + b sum + Y`` over the thresholds (at
the optimal split's own maxima the programme finds a sum no larger), and thresholds are
visited in increasing order until ``m X + b sum_min + Y`` cannot beat the best found. A
point is skipped when a bound below any of its plans cannot beat the best: every stage's
time is at least its layers' own time ``n c_p`` (``c_p`` a layer's kernels and TP/CP/EP
exchanges on pool ``p``), so ``max_r S_r >= L / sum_p (k_p / c_p)`` and
``sum_r S_r >= L min_p c_p``. Nothing is approximated: the answer is optimal over the
space unless the time limit ends the search (status ``time_limit``).
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from formulations.train.options import SpaceOptions
from formulations.train.space import SearchSpace
from planner.costmodel.compose import bubble_coefficient, iteration_time_s, straggler_share
from planner.costmodel.network import PlacementError
from planner.costmodel.train.mixed import (
    MixedEstimate,
    PoolTerms,
    evaluate_mixed,
    mixed_stage_result,
    pool_terms,
    stage_p2p_s,
    stage_width,
)
from planner.specs.mixed import MixedClusterSpec, MixedPlan
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan

#: Relative margin for comparing the programme's composed time with the evaluator's (the
#: two sum the same floats in another order).
REL = 1e-9


@dataclass
class MixedCandidate:
    plan: MixedPlan
    estimate: MixedEstimate

    @property
    def iteration_time_s(self) -> float:
        assert self.estimate.iteration_time_s is not None
        return self.estimate.iteration_time_s


@dataclass
class MixedSearchStats:
    points: int = 0  # (point, inner choice, pool order) triples in the space
    pruned: int = 0  # skipped by their bound
    unplaceable: int = 0  # shapes a pool's topology cannot place
    splits_solved: int = 0  # triples whose best split was computed
    programmes: int = 0  # dynamic programmes run
    stage_evaluations: int = 0


@dataclass
class MixedSearchResult:
    status: str  # optimal | time_limit | infeasible
    best: MixedCandidate | None
    stats: MixedSearchStats = field(default_factory=MixedSearchStats)
    wall_s: float = 0.0


def pool_orders(mc: MixedClusterSpec) -> list[tuple[str, ...]]:
    """Every ordered choice of two or more pools."""
    names = mc.pool_names
    return [order for k in range(2, len(names) + 1)
            for subset in itertools.combinations(names, k)
            for order in itertools.permutations(subset)]


def shapes(model: ModelSpec, mc: MixedClusterSpec, subset: tuple[str, ...],
           base: dict[str, Any], fixed: dict[str, Any], options: SpaceOptions) -> list[Plan]:
    """The plans of the single-type space over the pools of ``subset`` (one virtual stage,
    the rank order's placement, no offload) whose stage width divides every pool."""
    sizes = [mc.pool(p).cluster.num_gpus for p in subset]
    first = mc.pool(subset[0]).cluster
    # the space of the pools' GPU total: tp, cp, pp, dp, microbatch and inner choices
    standin = first.model_copy(update={"num_gpus": sum(sizes), "offload": None})
    if fixed.get("virtual_stages", 1) != 1:
        return []  # a mixed plan has one virtual stage
    space = SearchSpace(model, standin, dict(base), fixed, options)
    out = []
    for o in space.outers:
        w = o.tp * o.cp * o.dp
        if o.v != 1 or any(n % w for n in sizes):
            continue
        for inner in space.inners(o):
            out.append(space.plan(o, None, inner))
    return out


def layer_time_s(t: PoolTerms) -> float:
    """The least time one layer takes on the pool: kernels and TP/CP/EP exchanges."""
    return min(c.fwd_s + c.bwd_s + c.recompute_s + c.tp_comm_s + c.cp_comm_s + c.ep_comm_s
               for c in t.costs.values())


def fluid_bound(model: ModelSpec, terms: dict[str, PoolTerms], pools: list[str],
                c: dict[str, float]) -> float:
    """A lower bound of the slowest stage's time over every layer split: stage ``r`` takes
    at least ``e_r + n_r c_r`` (its ends' kernels, its pipeline sends, and ``c_r`` per
    layer, :func:`layer_time_s`), so ``max_r S_r <= X`` needs ``sum_r (X - e_r) / c_r >= L``:
    ``X >= (L + sum_r e_r / c_r) / sum_r 1 / c_r``."""
    pp = len(pools)
    e = []
    for r in range(pp):
        t = terms[pools[r]]
        ends = 0.0
        for on, end in ((r == 0, t.emb), (r == pp - 1, t.head)):
            if on:
                ends += end.fwd_s + end.bwd_s + end.tp_comm_s
        e.append(ends + stage_p2p_s(terms, pools, r))
    inv = sum(1.0 / c[p] for p in pools)
    return (model.num_layers + sum(e[r] / c[pools[r]] for r in range(pp))) / inv


def _terms(model: ModelSpec, mc: MixedClusterSpec, plan: Plan, order: tuple[str, ...],
           cache: dict) -> dict[str, PoolTerms] | None:
    w = stage_width(plan)
    out = {}
    for p in order:
        k = mc.pool(p).cluster.num_gpus // w
        key = (p, k, plan)
        if key not in cache:
            try:
                cache[key] = pool_terms(model, mc, plan, p, k)
            except (PlacementError, ValueError):
                cache[key] = None
        if cache[key] is None:
            return None
        out[p] = cache[key]
    return out


def _stage_tables(model: ModelSpec, plan: Plan, terms: dict[str, PoolTerms], pools: list[str],
                  stats: MixedSearchStats) -> tuple[np.ndarray, np.ndarray]:
    """S[r][t, n], R[r][t, n]: the time per microbatch and the per-iteration tail of stage
    r holding n layers from layer t (inf: no such stage, or it does not fit in memory)."""
    L, pp = model.num_layers, len(pools)
    top = L - (pp - 1)  # most layers one stage can hold
    kinds = model.layer_kinds()
    S = np.full((pp, L + 1, top + 1), math.inf)
    R = np.full((pp, L + 1, top + 1), math.inf)
    if len(set(kinds)) == 1:
        _tabulate_homogeneous(model, plan, terms, pools, S, R, stats)
        return S, R
    memo: dict[tuple, tuple[float, float, bool]] = {}
    for r in range(pp):
        for t in range(r, L - (pp - r) + 1):  # layers before stage r
            for n in range(1, min(top, L - t - (pp - r - 1)) + 1):
                seg = kinds[t:t + n]
                key = (r, tuple(sorted((k, seg.count(k)) for k in set(seg))))
                if key not in memo:
                    res = mixed_stage_result(model, plan, terms, pools, r, t, n)
                    stats.stage_evaluations += 1
                    memo[key] = (float(res.total_s), float(sum(res.tail.values())),
                                 _fits(res, terms[pools[r]]))
                s, rr, fits = memo[key]
                if fits:
                    S[r, t, n], R[r, t, n] = s, rr
    return S, R


class _Splits:
    """The dynamic programme over the layer splits of tables S and R (:func:`_stage_tables`)
    and the composition of a split's iteration time."""

    def __init__(self, S: np.ndarray, R: np.ndarray, m: int, straggler: float,
                 stats: MixedSearchStats) -> None:
        self.S, self.R, self.m, self.straggler, self.stats = S, R, m, straggler, stats
        self.pp, self.L = S.shape[0], S.shape[1] - 1
        self.ok = np.isfinite(S)
        tot_i = np.arange(self.L + 1)[:, None]
        n_i = np.arange(S.shape[2])[None, :]
        t_i = tot_i - n_i
        self.valid = (n_i >= 1) & (t_i >= 0)
        self.t_c = np.where(self.valid, t_i, 0)
        self.n_c = np.broadcast_to(n_i, self.t_c.shape)

    def least_sum(self, X: float, Y: float) -> tuple[float, list[int]] | None:
        """Least sum of stage times with every S <= X, R <= Y; the split."""
        self.stats.programmes += 1
        S, L, pp = self.S, self.L, self.pp
        allowed = self.ok & (S <= X) & (self.R <= Y)
        f = np.full(L + 1, math.inf)
        f[0] = 0.0
        choice = np.zeros((pp, L + 1), dtype=int)
        t_c, n_c = self.t_c, self.n_c
        for r in range(pp):
            # a[tot, n]: the first r + 1 stages hold tot layers, stage r holds n of them
            a = np.where(self.valid & allowed[r][t_c, n_c], f[t_c] + S[r][t_c, n_c], math.inf)
            choice[r] = np.argmin(a, axis=1)
            f = a[np.arange(L + 1), choice[r]]
            if not np.isfinite(f).any():
                return None
        if not np.isfinite(f[L]):
            return None
        split, tot = [], L
        for r in range(pp - 1, -1, -1):
            n = int(choice[r, tot])
            split.append(n)
            tot -= n
        return float(f[L]), split[::-1]

    def composed(self, split: list[int]) -> float:
        """The split's iteration time, through the cost model's composition."""
        starts = np.cumsum([0] + split[:-1])
        s = np.array([self.S[r, starts[r], split[r]] for r in range(self.pp)])
        rr = np.array([self.R[r, starts[r], split[r]] for r in range(self.pp)])
        return iteration_time_s(self.m, self.pp, 1, s, np.ones(self.pp), rr,
                                straggler=self.straggler)


def _least(values: np.ndarray, feasible: Callable[[float], bool]) -> int:
    """Index of the least value at which ``feasible`` holds (monotone), len if none."""
    lo, hi = 0, len(values)
    while lo < hi:
        mid = (lo + hi) // 2
        if feasible(float(values[mid])):
            hi = mid
        else:
            lo = mid + 1
    return lo


def best_split(model: ModelSpec, plan: Plan, terms: dict[str, PoolTerms],
               pools: list[str], best_s: float, stats: MixedSearchStats,
               straggler: float) -> tuple[float, list[int]] | None:
    """The least iteration time over the layer splits of ``pools`` (one entry per stage),
    and that split; None when no split fits or none beats ``best_s``."""
    S, R = _stage_tables(model, plan, terms, pools, stats)
    dp = _Splits(S, R, max(1, math.ceil(plan.num_microbatches)), straggler, stats)
    if not dp.ok.any():
        return None
    b, m, ok = bubble_coefficient(len(pools), 1), dp.m, dp.ok
    base = dp.least_sum(math.inf, math.inf)
    if base is None:
        return None
    sum_min = base[0]
    xs, ys = np.unique(S[ok]), np.unique(R[ok])
    y_min = float(np.max(np.min(np.where(ok, R, math.inf).reshape(len(pools), -1), axis=1)))
    goal = best_s / (1 + straggler)
    found: tuple[float, list[int]] | None = None
    x0 = _least(xs, lambda X: dp.least_sum(X, math.inf) is not None)
    for X in xs[x0:]:
        if m * X + b * sum_min + y_min >= goal * (1 + REL):
            break
        first = dp.least_sum(X, math.inf)
        assert first is not None  # feasibility grows with X
        sum_x = first[0]
        cands = ys[ys >= y_min]
        y0 = _least(cands, lambda Y: dp.least_sum(X, Y) is not None)
        for Y in cands[y0:]:
            if m * X + b * sum_x + Y >= goal * (1 + REL):
                break
            got = dp.least_sum(X, Y)
            if got is None:
                continue
            t = dp.composed(got[1])
            if t < best_s:
                best_s, goal, found = t, t / (1 + straggler), (t, got[1])
    return found


def _fits(res, t: PoolTerms) -> bool:
    return sum(res.memory.values()) <= t.cluster.gpu.hbm_bytes


def _tabulate_homogeneous(model: ModelSpec, plan: Plan, terms: dict[str, PoolTerms],
                          pools: list[str], S: np.ndarray, R: np.ndarray,
                          stats: MixedSearchStats) -> None:
    """``S`` and ``R`` of a model whose layers are all of one kind: a stage's time and
    tail depend on its pool, its ends (embedding, head), its pipeline sends and its layer
    count, not on its rank (the rank sets only the in-flight activations, i.e. memory),
    so each such class is evaluated once per layer count; a rank's memory grows with its
    layers (weights, gradients, optimizer states and activations are per layer), so the
    most layers it holds in memory is found by bisection."""
    pp, L = len(pools), model.num_layers
    top = L - (pp - 1)
    times: dict[tuple, tuple[float, float]] = {}

    def run(r: int, n: int) -> bool:
        res = mixed_stage_result(model, plan, terms, pools, r, r, n)
        stats.stage_evaluations += 1
        times.setdefault(klass(r) + (n,), (float(res.total_s), float(sum(res.tail.values()))))
        return _fits(res, terms[pools[r]])

    def klass(r: int) -> tuple:
        return (pools[r], r == 0, r == pp - 1, stage_p2p_s(terms, pools, r))

    for r in range(pp):
        lo, hi = 0, top  # the most layers that fit: in [lo, hi]
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if run(r, mid):
                lo = mid
            else:
                hi = mid - 1
        for n in range(1, lo + 1):
            key = klass(r) + (n,)
            if key not in times:
                run(r, n)
            S[r, r:L - (pp - r) + 1, n], R[r, r:L - (pp - r) + 1, n] = times[key]


def run_mixed_search(model: ModelSpec, mc: MixedClusterSpec, base: dict[str, Any],
                     fixed: dict[str, Any] | None = None,
                     options: SpaceOptions | None = None, time_limit_s: float = 60.0,
                     incumbent_s: float = math.inf,
                     progress: Callable[[str], None] | None = None) -> MixedSearchResult:
    """The fastest multi-pool plan, proven over the space in the module's docstring, or
    None when no plan of that space beats ``incumbent_s`` (e.g. the best single-pool
    plan's time): then status ``optimal`` still says that none does."""
    t0 = time.perf_counter()
    opts = options or SpaceOptions()
    fixed = dict(fixed or {})
    stats = MixedSearchStats()
    best_s, best = incumbent_s, None
    cache: dict = {}
    work = []
    for order in pool_orders(mc):
        for plan in shapes(model, mc, order, base, fixed, opts):
            if time.perf_counter() - t0 > time_limit_s:  # set-up counts against the limit
                return MixedSearchResult("time_limit", None, stats, time.perf_counter() - t0)
            stats.points += 1
            terms = _terms(model, mc, plan, order, cache)
            if terms is None:
                stats.unplaceable += 1
                continue
            w = stage_width(plan)
            ks = [mc.pool(p).cluster.num_gpus // w for p in order]
            pools = [p for p, k in zip(order, ks) for _ in range(k)]
            if len(pools) > model.num_layers:
                continue
            c = {p: layer_time_s(terms[p]) for p in order}
            m = max(1, math.ceil(plan.num_microbatches))
            s = straggler_share(max(terms[p].cluster.step_time_cv for p in order),
                                w * len(pools))
            lb = (m * fluid_bound(model, terms, pools, c) + bubble_coefficient(len(pools), 1)
                  * model.num_layers * min(c.values())) * (1 + s)
            work.append((lb, stats.points, plan, terms, pools, s))
    work.sort(key=lambda x: (x[0], x[1]))
    status = "optimal"
    for i, (lb, _, plan, terms, pools, s) in enumerate(work):
        if lb >= best_s * (1 - REL):
            stats.pruned += len(work) - i
            break
        if time.perf_counter() - t0 > time_limit_s:
            status = "time_limit"
            break
        stats.splits_solved += 1
        got = best_split(model, plan, terms, pools, best_s, stats, s)
        if got is None:
            continue
        t, split = got
        mp = MixedPlan(plan=plan, stages=[{"pool": p, "layers": n} for p, n in zip(pools, split)])
        est = evaluate_mixed(model, mc, mp)
        assert est.feasible and est.iteration_time_s is not None, est.reasons
        assert abs(est.iteration_time_s - t) <= REL * t, (est.iteration_time_s, t)
        best_s, best = est.iteration_time_s, MixedCandidate(mp, est)
        if progress:
            progress(f"mixed: {stats.splits_solved} of {len(work)} shapes solved, best "
                     f"{best_s:.6g} s")
    if best is None and status == "optimal" and not math.isfinite(incumbent_s):
        status = "infeasible"
    return MixedSearchResult(status, best, stats, time.perf_counter() - t0)
