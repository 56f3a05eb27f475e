"""Solve, re-rank with the exact evaluator, and prove.

1. **Presolve** (optional, on by default): a separable lower bound of the objective for
   every point q (each term at its smallest value over the inner choices that can fit in
   memory), and an upper bound from exactly evaluating the inner choices of the few most
   promising points. Points whose lower bound exceeds the upper bound cannot be optimal
   and are dropped. Nothing here approximates: the bound is a bound.
2. **Model**: :func:`formulations.train.build.build_model` over the remaining points, solved by
   CP-SAT or by HiGHS through PuLP.
3. **Loop**: each answer is evaluated exactly; a no-good cut removes it, and a bound cut
   keeps only plans whose model objective could still beat the K-th best exact value. The
   loop ends when the solver's optimum cannot beat it (the answer is then *proven*), when
   the model becomes infeasible, or at the time limit.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, fields, replace
from typing import Callable

import numpy as np

from formulations.train.build import VarMap, build_model
from formulations.linear import Constraint, CpsatSession, MilpSession
from formulations.train.space import RECOMPUTE, Inner
from planner.costmodel.train.tables import Key, Tables
from planner.costmodel.compose import (
    Overlap,
    busy_s,
    dp_window_microbatches,
    headroom_bytes,
    iteration_time_s,
    stage_time,
    tail_time,
)
from planner.costmodel.objective import TIME
from planner.costmodel.train.evaluator import Estimate, evaluate
from planner.specs.plan import Plan
from planner.costmodel.train.batch import evaluate_columns, inner_columns, objective_values



@dataclass
class Candidate:
    key: Key
    plan: Plan
    estimate: Estimate
    objective: float  # exact, from the evaluator
    bound: float | None = None  # the model's objective for this plan (a lower bound)


@dataclass
class SearchStats:
    points_total: int = 0
    points_model: int = 0
    space_size: int = 0
    solver_calls: int = 0
    evaluations: int = 0
    plans_enumerated: int = 0  # plans of the points left, costed all at once (no model)
    build_s: float = 0.0
    solve_s: float = 0.0


@dataclass
class SearchResult:
    backend: str
    status: str  # optimal | feasible | infeasible | time_limit
    candidates: list[Candidate] = field(default_factory=list)  # feasible, best first
    bound: float | None = None  # proven lower bound of the objective over the space (also
    # when time-limited: then below the best plan by the gap left)
    stats: SearchStats = field(default_factory=SearchStats)
    wall_s: float = 0.0

    @property
    def best(self) -> Candidate | None:
        return self.candidates[0] if self.candidates else None


def exact_objective(tb: Tables, est: Estimate, world: int) -> float:
    assert est.iteration_time_s is not None and est.gpu_busy_s is not None
    return tb.objective.value(tb.space.cluster, world, est.iteration_time_s, est.gpu_busy_s)


def within(est: Estimate, max_time_s: float | None) -> bool:
    """Feasible, and within the iteration-time limit when there is one."""
    return est.feasible and (max_time_s is None or (
        est.iteration_time_s is not None and est.iteration_time_s <= max_time_s))


def evaluate_key(tb: Tables, key: Key, max_time_s: float | None = None) -> Candidate:
    """The plan of ``key``, evaluated; its objective is infinite unless it is feasible and
    within ``max_time_s``."""
    q, rc, sp, z = key
    plan = tb.plan(q, rc, sp, z)
    est = evaluate(tb.space.model, tb.space.cluster, plan, tb.space.options.allow_idle_gpus)
    obj = exact_objective(tb, est, plan.world_size) if est.iteration_time_s is not None else math.inf
    return Candidate(key, plan, est, obj if within(est, max_time_s) else math.inf)


# ---- presolve ----------------------------------------------------------------------------
def lower_bounds(tb: Tables) -> np.ndarray:
    return np.min(state_lower_bounds(tb), axis=1)


#: Points bounded at a time: the bound's temporaries are (points x state options x layer
#: types x recomputation modes x 2) arrays; in chunks they stay in cache instead of
#: paging hundreds of MB in a large space. Each point's bound is its own: the same values.
BOUND_CHUNK = 4096


def state_lower_bounds(tb: Tables) -> np.ndarray:
    """A lower bound of the objective at every point and state option, shape (Q, Z)."""
    with np.errstate(invalid="ignore"):  # inf x 0 for infeasible ZeRO stages, masked below
        if tb.num_points <= BOUND_CHUNK:
            return _lower_bounds(tb)
        return np.concatenate([_lower_bounds(points_slice(tb, a, a + BOUND_CHUNK))
                               for a in range(0, tb.num_points, BOUND_CHUNK)])


def points_slice(tb: Tables, start: int, stop: int) -> Tables:
    """The tables of points ``start:stop`` (every term but the per-type ``rc_ok``)."""
    A = tb.terms
    cut = {f.name: getattr(A, f.name)[start:stop] for f in fields(A) if f.name != "rc_ok"}
    return replace(tb, points=tb.points[start:stop], terms=replace(A, **cut))


def fold_last(ufunc: np.ufunc, x: np.ndarray) -> np.ndarray:
    """``ufunc.reduce(x, axis=-1)`` (``np.minimum``, ``np.maximum`` or ``np.add``) as a
    left-to-right fold of the last axis' slices: numpy reduces a short last axis row by
    row, 7-10x slower on the bounds' (points x options x types x 8) arrays. The same
    values: a minimum or maximum in any order, a sum of fewer than 8 terms in numpy's own
    order (its pairwise summation starts at 8; tests/test_bound_speed.py checks it)."""
    n = x.shape[-1]
    if n == 0 or (ufunc is np.add and n >= 8):
        return ufunc.reduce(x, axis=-1)
    out = x[..., 0].copy()
    for k in range(1, n):
        ufunc(out, x[..., k], out=out)
    return out


def _fitting(tb: Tables) -> np.ndarray:
    """``feasible[q, z, t, k, b]``: layer option (recompute k, sp b) of type t can fit in
    every group next to state option z, with every other type at its smallest."""
    A = tb.terms
    cluster = tb.space.cluster
    cap = cluster.gpu.hbm_bytes
    reserve = headroom_bytes(cluster)
    inf = np.inf
    Q, G = A.group_valid.shape
    ok = (A.rc_ok[None, :, :, None] & A.rc_point_ok[:, None, :, None]
          & A.sp_ok[:, None, None, :])  # (Q, T, R, 2)
    valid = A.group_valid
    spmask = np.where(A.sp_ok, 0.0, inf)
    head_act = np.min(A.head_act_bytes + spmask, axis=1)
    # memory without layer activations, per ZeRO stage: (Q, G, Z)
    base = (A.states_bytes + A.buffers_bytes[:, None, :] + reserve
            + (A.group_head * head_act[:, None])[:, :, None])
    host_ok = (A.host_bytes <= (cluster.offload.capacity_bytes if cluster.offload else 0.0)) \
        | ~A.group_valid[:, :, None]  # the offload tier's capacity, (Q, G, Z)
    base = np.where(A.state_ok[:, None, :] & host_ok, base, inf)
    infl_v = A.group_inflight / A.v[:, None]
    act = infl_v[:, :, None, None, None] * A.group_type_layers[:, :, :, None, None] * A.layer_act_bytes[:, None]
    act = np.where(ok[:, None], act, inf)  # (Q, G, T, R, 2)
    act_min = fold_last(np.minimum, act.reshape(Q, G, act.shape[2], -1))
    others = act_min.sum(axis=2, keepdims=True) - act_min
    # option (k, b) of type t fits in every group g next to state option z; one group at a
    # time keeps the temporaries at (Q, Z, T, R, 2)
    need = act + others[..., None, None]  # (Q, G, T, R, 2)
    feasible = np.broadcast_to(ok[:, None], (Q, base.shape[2]) + ok.shape[1:]).copy()
    for g in range(G):
        fits = base[:, g, :, None, None, None] + need[:, g, None] <= cap
        feasible &= fits | ~valid[:, g, None, None, None, None]
    return feasible  # (Q, Z, T, R, 2)


def _lower_bounds(tb: Tables) -> np.ndarray:
    """A lower bound of the objective at every point and state option (``inf`` where
    nothing fits).

    Exact over the state option (ZeRO stage and offloads); for each option, each layer
    type takes its fastest recomputation/SP option that fits in memory next to that
    option's states (separately per type, so a bound), and every overlapped collective
    is charged its exposure behind the *longest* window any fitting option offers
    (exposure falls with the window).
    """
    A = tb.terms
    cluster = tb.space.cluster
    base_plan = tb.plan(0, tuple(0 for _ in tb.layer_types), 0, 0) if tb.num_points else None
    kappa = cluster.gpu.efficiency.overlap_slowdown
    ovl_param = base_plan.overlap_param_gather if base_plan else True
    ovl_grad = base_plan.overlap_dp_grad_reduce if base_plan else True
    inf = np.inf
    Q, Z = A.state_ok.shape
    valid = A.group_valid
    spmask = np.where(A.sp_ok, 0.0, inf)
    feasible = _fitting(tb)

    def best(name: str, fn, fill: float) -> np.ndarray:
        vals = np.where(feasible, getattr(A, f"layer_{name}")[:, None], fill)
        return fold_last(fn, vals.reshape(Q, Z, vals.shape[2], -1))  # (Q, Z, T)

    lmin = best("total_s", np.minimum, inf)
    fmax = best("fwd_s", np.maximum, 0.0)
    bmax = best("bwd_s", np.maximum, 0.0)
    n = A.group_type_layers  # (Q, G, T)

    def per_group(x: np.ndarray) -> np.ndarray:  # (Q, Z, T) -> (Q, Z, G)
        with np.errstate(invalid="ignore"):
            return fold_last(np.add, np.where(n[:, None] > 0, n[:, None] * x[:, :, None, :],
                                              0.0))

    emb = np.min(A.emb_total_s + spmask, axis=1)[:, None, None]
    head = np.min(A.head_total_s + spmask, axis=1)[:, None, None]
    e_emb, e_head = A.group_embedding[:, None, :], A.group_head[:, None, :]
    s_lb = per_group(lmin) + e_emb * emb + e_head * head  # kernels and TP/CP/EP exchanges
    wf = per_group(fmax) + e_emb * np.max(A.emb_fwd_s, axis=1)[:, None, None] \
        + e_head * np.max(A.head_fwd_s, axis=1)[:, None, None]
    wb = per_group(bmax) + e_emb * np.max(A.emb_bwd_s, axis=1)[:, None, None] \
        + e_head * np.max(A.head_bwd_s, axis=1)[:, None, None]

    def gz(arr: np.ndarray) -> np.ndarray:  # (Q, Z, G) -> (Q, G, Z), the tables' layout
        return np.ascontiguousarray(np.transpose(arr, (0, 2, 1)))

    # the evaluator's composition over the optimistic terms (fetch, down and the CPU step
    # are zero on the state options that do not use the offload tier); groups on axis 1
    s_lb, wf, wb = gz(s_lb), gz(wf), gz(wb)
    layers = A.group_layers[:, :, None]
    ov = Overlap(ovl_param, ovl_grad, kappa)
    stage = stage_time(s_lb, wf, wb, A.p2p_s[:, None, None], A.p2p_overlap_s[:, None, None],
                       A.dp_fwd_s, A.dp_bwd_s, A.fetch_s, layers, ov)
    tail = tail_time(A.optimizer_s, A.cpu_step_s, A.tied_s[:, :, None], A.dp_grad_s,
                     A.dp_param_s, A.grad_down_s, wf, wb, layers, ov,
                     dp_window_microbatches(A.pp, A.v, A.m)[:, None, None],
                     dp_units=A.group_dp_units[:, :, None])
    gmask = valid[:, :, None]
    m, v, pp = A.m[:, None], A.v[:, None], A.pp[:, None]
    cnt = A.group_count[:, :, None] * gmask
    t_lb = iteration_time_s(m, pp, v, np.where(gmask, stage.total_s, 0.0), cnt,
                            np.where(gmask, tail.total_s, 0.0), axis=1,
                            straggler=A.straggler[:, None])
    out = A.time_weight[:, None] * t_lb
    if np.any(A.busy_weight > 0):
        fb = np.where(feasible, (A.layer_fwd_s + A.layer_bwd_s)[:, None], inf)
        fb_min = fold_last(np.minimum, fb.reshape(Q, Z, fb.shape[2], -1))
        ends = (np.min(A.emb_fwd_s + A.emb_bwd_s + spmask, axis=1)[:, None, None] * e_emb
                + np.min(A.head_fwd_s + A.head_bwd_s + spmask, axis=1)[:, None, None] * e_head)
        work = np.where(gmask, gz(per_group(fb_min) + ends), 0.0)
        busy = busy_s(m, pp, cnt, work, np.where(gmask, A.optimizer_s, 0.0), axis=1)
        out = out + A.busy_weight[:, None] * busy
    return np.where(np.isfinite(lmin).all(axis=2) & A.state_ok, out, inf)


def time_lower_bounds(tb: Tables) -> np.ndarray:
    """A lower bound of the iteration time at every point, whatever the objective."""
    if not tb.objective.uses_busy_time and tb.objective.name in ("time", "tokens"):
        return lower_bounds(tb)
    A = tb.terms
    timed = replace(tb, objective=TIME, terms=replace(
        A, time_weight=np.ones_like(A.time_weight), busy_weight=np.zeros_like(A.busy_weight)))
    return lower_bounds(timed)


def inner_keys(tb: Tables, q: int) -> list[Key]:
    """The keys of every inner choice at point q, in the order of ``space.inners``."""
    o, _ = tb.points[q]
    space = tb.space
    rcs = [tuple(RECOMPUTE.index(r) for r in rc) for rc in space.recompute_options()]
    rcs = [rc for rc in rcs if tb.terms.rc_point_ok[q, list(rc)].all()]
    sps, zs = space.sp_options(o), space.state_options(o)
    return [(q, rc, int(sp), z) for rc in rcs for sp in sps for z in zs]


#: Relative margin of the vectorized evaluator's screen: it composes the same float terms
#: as the exact evaluator in another order (they agree to ~1e-12, benchmarks/
#: bench_entry_points.py asserts 1e-9); plans within the margin of the K-th best are
#: evaluated exactly, so ties are broken as before.
SCREEN_REL = 1e-6
#: Points screened per call of the vectorized evaluator (its cost per call grows with the
#: space, its cost per plan is small).
SCREEN_POINTS = 64


class _Screen:
    """The inner keys of the points in bound order and their objectives by the vectorized
    evaluator (``inf``: infeasible or over ``max_time_s``), a chunk of points at a time."""

    def __init__(self, tb: Tables, order: list[int], max_time_s: float | None) -> None:
        self.tb, self.order, self.max_time_s = tb, order, max_time_s
        self.done: dict[int, tuple[list[Key], np.ndarray]] = {}

    def at(self, i: int) -> tuple[list[Key], np.ndarray]:
        if i not in self.done:
            self._fill(i)
        return self.done[i]

    def _fill(self, start: int) -> None:
        idx = range(start, min(start + SCREEN_POINTS, len(self.order)))
        per = [inner_keys(self.tb, self.order[i]) for i in idx]
        flat = [k for keys in per for k in keys]
        vals = screened_objectives(self.tb, flat, self.max_time_s)
        pos = 0
        for i, keys in zip(idx, per):
            self.done[i] = (keys, vals[pos:pos + len(keys)])
            pos += len(keys)


def screened_objectives(tb: Tables, keys: list[Key], max_time_s: float | None = None
                        ) -> np.ndarray:
    """The objective of each plan by the vectorized evaluator (``inf`` where infeasible or,
    past the margin, slower than ``max_time_s``)."""
    if not keys:
        return np.zeros(0)
    q = np.array([k[0] for k in keys], np.int64)
    rc = np.array([k[1] for k in keys], np.int64).reshape(len(keys), -1)
    sp = np.array([k[2] for k in keys], np.int64)
    z = np.array([k[3] for k in keys], np.int64)
    return _column_objectives(tb, (q, rc, sp, z), max_time_s)


def _column_objectives(tb: Tables, cols: tuple[np.ndarray, ...], max_time_s: float | None
                       ) -> np.ndarray:
    """The objective of each plan of the columns ``(q, rc, sp, z)`` by the vectorized
    evaluator, ``inf`` where infeasible or, past the margin, slower than ``max_time_s``."""
    q, rc, sp, z = cols
    with np.errstate(invalid="ignore", divide="ignore"):
        est = evaluate_columns(tb, q, rc, sp, z)
        val = objective_values(tb, q, est)
    ok = est.feasible & np.isfinite(val)
    if max_time_s is not None:
        ok &= est.iteration_time_s <= max_time_s * (1 + SCREEN_REL)
    return np.where(ok, val, math.inf)


def presolve(tb: Tables, probe: int = 4, top_k: int = 1, max_time_s: float | None = None,
             enough: int = 4) -> tuple[list[int], list[Candidate], np.ndarray]:
    """Points that may hold one of the ``top_k`` best plans, and the exactly evaluated
    incumbents. A point is dropped when its bound exceeds the K-th best incumbent (each of
    the K best plans is at most that), so the best incumbent alone only serves K = 1.
    Points are probed in bound order until ``probe`` of them hold a feasible plan and the
    K-th incumbent exists, or ``enough x probe`` of them hold one."""
    lbz = state_lower_bounds(tb)
    lb = np.min(lbz, axis=1)
    ranked = np.argsort(lb, kind="stable")
    ranked = ranked[np.isfinite(lb[ranked])]
    if max_time_s is not None:  # drop the points whose every plan iterates too slowly
        ranked = ranked[time_lower_bounds(tb)[ranked] <= max_time_s * (1 + 1e-9)]
    order: list[int] = ranked.tolist()
    tiered = tb.space.cluster.offload is not None
    incumbents: list[Candidate] = []
    values: list[float] = []  # admissible objectives, sorted
    feasible_points = 0
    screen = _Screen(tb, order, max_time_s)
    best_screened: list[float] = []  # the K smallest screened values so far
    for i, q in enumerate(order):
        # with an offload tier (2.5x the state options), inner choices whose own bound
        # cannot reach the K-th incumbent are left to the model: they stay in it, only
        # their early exact evaluation is skipped
        kth = values[top_k - 1] if len(values) >= top_k else math.inf
        if tiered and lb[q] > kth * (1 + 1e-9):
            break  # the points are in bound order: no later point has a key to evaluate
        keys, vals = screen.at(i)
        kept = [j for j, k in enumerate(keys) if not tiered or lbz[q, k[3]] <= kth * (1 + 1e-9)]
        best_screened = sorted(best_screened + [float(vals[j]) for j in kept
                                                if math.isfinite(vals[j])])[:top_k]
        # only the plans that may be among the K best so far are evaluated exactly (the
        # others could not change the K-th incumbent): screened by the vectorized evaluator
        cut = best_screened[-1] if len(best_screened) >= top_k else math.inf
        cands = [evaluate_key(tb, keys[j], max_time_s) for j in kept
                 if vals[j] <= cut * (1 + SCREEN_REL) or not math.isfinite(cut)]
        for c in cands:
            # the bound composes the same float terms as the evaluator in another order: at
            # a plan that attains it, it can land an ulp above the exact value
            c.bound = min(float(lb[q]), c.objective)
        incumbents += cands
        if any(c.estimate.feasible for c in cands) or (
                not cands and any(math.isfinite(vals[j]) for j in kept)):
            feasible_points += 1
        values = sorted(c.objective for c in incumbents if math.isfinite(c.objective))
        # enough incumbents for the K-th best, or give up on them (keep every point)
        if feasible_points >= probe and (len(values) >= top_k or feasible_points >= enough * probe):
            break
    best = values[top_k - 1] if len(values) >= top_k else math.inf
    keep = ranked[lb[ranked] <= best * (1 + 1e-9)].tolist() if math.isfinite(best) else order
    return keep, incumbents, lb


#: Relative margin on a MILP objective before it proves a bound (see run_search).
MILP_REL_MARGIN = 1e-6


# ---- the loop -------------------------------------------------------------------------------
def run_search(tb: Tables, backend: str = "cpsat", top_k: int = 1, time_limit_s: float = 60.0,
               use_presolve: bool = True, workers: int = 2,
               progress: Callable[[str], None] | None = None,
               log: Callable[[str], None] | None = None,
               max_time_s: float | None = None, enumerate_plans: int = 0) -> SearchResult:
    """The ``top_k`` best plans, proven; with ``max_time_s``, among those whose iteration
    time is within it (a constraint of the model, checked exactly on every answer).
    ``enumerate_plans``: the points presolve leaves, when they hold at most this many plans,
    are costed by brute force (:func:`_enumerate`) instead of the model (0: the model)."""
    t0 = time.perf_counter()
    stats = SearchStats(points_total=tb.num_points)
    pool: dict[Key, Candidate] = {}
    # a lower bound over every plan the model still holds (the plans it no longer holds
    # are each no better than the best incumbent): presolve's, then the solver's
    if time_limit_s <= 0:  # set-up spent the limit: the best plan of the bound order
        return _bound_ordered(tb, backend, top_k, max_time_s, stats, t0)
    points, model_lb, lb = _presolved(tb, use_presolve, top_k, max_time_s, pool, stats)
    if not points:
        return _result(backend, "infeasible", pool, top_k, None, stats, t0)
    cols = _columns_within(tb, points, enumerate_plans) if lb is not None else None
    if cols is not None:  # few plans left: brute force over them, no model
        _enumerate(tb, cols, lb, top_k, max_time_s, pool, stats)
        kth = _kth(pool, top_k)
        return _result(backend, "optimal", pool, top_k, kth if math.isfinite(kth) else None,
                       stats, t0)

    tb_build = time.perf_counter()
    lm, vm = build_model(tb, points, max_time_s)
    session = CpsatSession(lm, workers, log) if backend == "cpsat" else MilpSession(lm, log)
    for key in pool:
        if key[0] in vm.y:
            session.add_constraint(_nogood(vm, key))
    stats.build_s = time.perf_counter() - tb_build
    per_unit = vm.obj_scale * vm.ticks.per_s
    slack = 2 * sum(abs(c) for c in lm.objective.values())
    # CP-SAT is exact in integers; HiGHS works in doubles with 1e-7 feasibility tolerance,
    # so its objective is trusted as a bound only up to a relative margin.
    rel = 0.0 if backend == "cpsat" else MILP_REL_MARGIN
    status, bound = "time_limit", None
    last_cut = math.inf
    while True:
        kth = _kth(pool, top_k)
        if math.isfinite(kth) and kth < last_cut:
            cut = int(math.ceil(kth * per_unit * (1 + rel))) + slack
            session.add_constraint(Constraint(dict(lm.objective), None, cut, "time"))
            last_cut = kth
        left = time_limit_s - (time.perf_counter() - t0)
        if left <= 0:
            break
        res = session.solve(left)
        stats.solver_calls += 1
        stats.solve_s += res.wall_s
        if res.status == "infeasible":
            status = "optimal" if pool else "infeasible"
            bound = kth if math.isfinite(kth) else None
            break
        if res.status not in ("optimal", "feasible"):
            break
        key = vm.decode(res.values)
        lb_units = res.objective if res.status == "optimal" else res.bound
        if lb_units is not None:  # later cuts only remove plans: the bound still holds
            model_lb = max(model_lb, (lb_units * (1 - rel) - slack) / per_unit)
        proof = res.objective * (1 - rel) - slack
        if res.status == "optimal" and proof >= kth * per_unit:
            status, bound = "optimal", proof / per_unit
            break
        cand = pool.get(key) or evaluate_key(tb, key, max_time_s)
        if res.status == "optimal":
            cand.bound = min(max(cand.bound or -math.inf, proof / per_unit), cand.objective)
        pool[key] = cand
        stats.evaluations += 1
        if progress:
            best = _kth(pool, 1)
            progress(f"{stats.solver_calls} solves, {stats.evaluations} exact evaluations, "
                     f"best {best:.6g}")
        session.add_constraint(_nogood(vm, key))
    if status == "time_limit" and math.isfinite(model_lb):
        bound = min(model_lb, _kth(pool, 1))  # the incumbent's gap to it is the answer's
    return _result(backend, status, pool, top_k, bound, stats, t0)


def _presolved(tb: Tables, use_presolve: bool, top_k: int, max_time_s: float | None,
               pool: dict[Key, Candidate], stats: SearchStats
               ) -> tuple[list[int], float, np.ndarray | None]:
    """The points the model keeps, a lower bound over every plan it holds and the bound
    per point: presolve's (its incumbents into ``pool``), or every point and no bound
    without it."""
    if not use_presolve:
        stats.points_model = tb.num_points
        return list(range(tb.num_points)), -math.inf, None
    points, incumbents, lb = presolve(tb, top_k=top_k, max_time_s=max_time_s)
    for c in incumbents:
        pool[c.key] = c
    stats.evaluations += len(incumbents)
    stats.points_model = len(points)
    return points, float(np.min(lb[points])) if points else -math.inf, lb


def _columns_within(tb: Tables, points: list[int], limit: int
                    ) -> tuple[np.ndarray, ...] | None:
    """Every inner choice at ``points`` as columns, or None when they are more than
    ``limit`` plans (counted before they are built: per point, its recomputation, sequence
    parallelism and state options)."""
    if limit <= 0:
        return None
    space = tb.space
    rcs = len(space.recompute_options())
    count = 0
    for q in points:
        o = tb.points[q][0]
        count += rcs * len(space.sp_options(o)) * len(space.state_options(o))
        if count > limit:
            return None
    return inner_columns(tb, points)


def _enumerate(tb: Tables, cols: tuple[np.ndarray, ...], lb: np.ndarray, top_k: int,
               max_time_s: float | None, pool: dict[Key, Candidate],
               stats: SearchStats) -> None:
    """Brute force over the plans ``cols``: their objectives by the vectorized evaluator,
    and those within :data:`SCREEN_REL` of the K-th best (itself or presolve's incumbents
    in ``pool``) evaluated exactly into ``pool``, as :mod:`formulations.train.exhaustive`
    does over the whole space; ``lb``: presolve's bound per point, each plan's bound.
    Presolve's bound proves the points it dropped, this enumeration the rest: no model is
    built or solved."""
    q, rc, sp, z = cols
    stats.plans_enumerated += len(q)
    if not len(q):
        return
    val = _column_objectives(tb, cols, max_time_s)
    k = min(top_k, len(val))
    kth = min(float(np.partition(val, k - 1)[k - 1]), _kth(pool, top_k))
    # fewer than K feasible plans (kth infinite): every feasible one is among the K best
    near = np.isfinite(val) & (val <= kth * (1 + SCREEN_REL))
    for i in np.flatnonzero(near).tolist():
        key = (int(q[i]), tuple(int(x) for x in rc[i]), int(sp[i]), int(z[i]))
        if key not in pool:
            c = evaluate_key(tb, key, max_time_s)
            c.bound = min(float(lb[key[0]]), c.objective)
            pool[key] = c
            stats.evaluations += 1


def _bound_ordered(tb: Tables, backend: str, top_k: int, max_time_s: float | None,
                   stats: SearchStats, t0: float) -> SearchResult:
    """No time left for the model: the plans of the points in bound order, evaluated
    exactly until the first point with a feasible plan (presolve's probe, no model), as
    ``time_limit`` with the bound over the whole space (never ``optimal``: nothing is
    proven)."""
    points, incumbents, lb = presolve(tb, probe=1, top_k=top_k, max_time_s=max_time_s,
                                      enough=1)
    stats.evaluations += len(incumbents)
    pool = {c.key: c for c in incumbents}
    bound = min(float(np.min(lb[points])), _kth(pool, 1)) if points and pool else None
    return _result(backend, "time_limit", pool, top_k, bound, stats, t0)


def _nogood(vm: VarMap, key: Key) -> Constraint:
    lits = vm.literals(key)
    return Constraint({i: 1 for i in lits}, None, len(lits) - 1, "count")


def _kth(pool: dict[Key, Candidate], k: int) -> float:
    vals = sorted(c.objective for c in pool.values() if math.isfinite(c.objective))
    return vals[k - 1] if len(vals) >= k else math.inf


def _result(backend: str, status: str, pool: dict[Key, Candidate], top_k: int,
            bound: float | None, stats: SearchStats, t0: float) -> SearchResult:
    feas = sorted((c for c in pool.values() if math.isfinite(c.objective)),
                  key=lambda c: (c.objective, str(c.key)))
    if not feas and status == "optimal":
        status = "infeasible"
    return SearchResult(backend, status, feas[:top_k], bound, stats, time.perf_counter() - t0)


__all__ = ["run_search", "presolve", "lower_bounds", "SearchResult", "Candidate",
           "Inner"]
