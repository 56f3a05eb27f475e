"""The formulation: one integer linear model over the search space, for CP-SAT and MILP.

Decision variables (binary):

- ``y[q]`` (one-hot): the point q = (tp, cp, pp, dp, microbatch, interleaving, domain
  placement). Integer views of the degrees are linear in ``y`` (``tp = sum_q tp_q y_q``).
- ``x[q,u]``: the layer strategy u = (recomputation per layer type, sequence parallelism)
  at point q, with ``sum_u x[q,u] = y[q]``.
- ``w[q,z]``: the state option z at point q (the ZeRO stage, and on clusters with an
  offload tier whether the optimizer and the ZeRO-3 parameter shards are offloaded:
  :data:`formulations.train.space.STATES`), with ``sum_z w[q,z] = y[q]``.

This is the disaggregated (convex-hull) form of the disjunction over points: given q,
every term of the evaluator is a constant per (q, u) or (q, z), taken from
:mod:`formulations.tables`, so every row is linear without big-M:

    S[q,g]   >= sum_u stage_u x[q,u] + p2p y[q] + E_pp + E_mb[q,g]          (stage time, group g)
    TAIL[q]  >= sum_z (opt_z + off_z) w[q,z] + tied y[q] + E_dp[q,g] + E_down[q,g]
                                                                            (after the last backward)
    T[q] >= m S[q,g] + c(pp, v) sum_g' count_g' S[q,g'] + TAIL[q]          (every g)
        with c = compose.bubble_coefficient(pp, v), the schedule's bubble, as a fraction
    v (sum_z (states_z + buffers_z) w[q,z] + sum_u (workspace_u + head_u) x[q,u])
        + inflight_g sum_u act_u x[q,u] <= v (HBM - reserve) y[q]          (memory, every g)
    sum_z host_z w[q,z] <= host capacity y[q]                              (offload tier, every g)
    objective = sum_q (w_time_q T[q] + w_busy_q BUSY[q])

``E`` is the exposed part of an overlapped collective ``c`` behind compute ``w``, exact
as the maximum of two linear pieces, ``max(c - (1 - kappa) w, c (1/l + kappa (1 - 1/l)))``
(:func:`planner.costmodel.compose.exposure_pieces` of
:func:`planner.costmodel.compose.overlapped_s`). The offload tier's link
transfers (``E_down``, and the per-microbatch parameter fetches in the stage time) use the
same two pieces with ``kappa = 0``: DMA copies take no SMs.

**Rounding, and why the objective is a lower bound.** Times are integer ticks (ps, or a
coarser power of ten for the largest jobs) and memory is integer bytes. Added terms are
rounded down, subtracted ones (overlap windows) up, and ``kappa`` down. The model's time
for any plan is therefore at most the evaluator's (up to one tick from the division by
v pp), and its memory at most the evaluator's. Its feasible set contains the true one.
The search in :mod:`formulations.train.search` re-evaluates each answer with the evaluator and
stops only when no other plan's bound can beat the best exact value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from formulations.linear import Expr, LinearModel, Ticks, check_magnitudes, choose_ticks
from formulations.train.space import RECOMPUTE
from planner.errors import InputError
from planner.costmodel.compose import (
    STRAGGLER_DEN,
    dp_window_microbatches,
    headroom_bytes,
    Overlap,
    bubble_coefficient,
    iteration_time_s,
    stage_time,
    tail_time,
)
from planner.costmodel.train.tables import Key, Tables

KAPPA_DEN = 1000
OBJ_DIGITS = 6


@dataclass
class VarMap:
    points: list[int]
    strategies: list[tuple[tuple[int, ...], int]]  # u -> (recompute index per type, sp)
    y: dict[int, int] = field(default_factory=dict)
    x: dict[tuple[int, int], int] = field(default_factory=dict)  # (q, u) -> var
    w: dict[tuple[int, int], int] = field(default_factory=dict)  # (q, z) -> var
    obj_scale: float = 1.0  # model objective units per (objective weight x second), / ticks
    ticks: Ticks = Ticks(1e12)

    def decode(self, values: list[int]) -> Key:
        q = next(q for q, i in self.y.items() if values[i] > 0)
        u = next(u for (qq, u), i in self.x.items() if qq == q and values[i] > 0)
        z = next(z for (qq, z), i in self.w.items() if qq == q and values[i] > 0)
        rc, sp = self.strategies[u]
        return q, rc, sp, z

    def literals(self, key: Key) -> list[int]:
        q, rc, sp, z = key
        u = self.strategies.index((rc, sp))
        return [self.x[(q, u)], self.w[(q, z)]]


def strategies(tb: Tables) -> list[tuple[tuple[int, ...], int]]:
    rcs = [tuple(RECOMPUTE.index(r) for r in rc) for rc in tb.space.recompute_options()]
    return [(rc, sp) for rc in rcs for sp in (0, 1)]


@dataclass(frozen=True)
class _Setup:
    """What every row of one model reads: integer capacities, overlap switches, ticks."""

    kappa_n: int  # overlap slowdown x KAPPA_DEN, rounded down
    ovl_param: bool
    ovl_grad: bool
    sharded_overlap: bool  # per-microbatch ZeRO-2/3 traffic overlaps (the framework's)
    usable: int  # HBM - reserve, bytes
    host_cap: int
    ticks: Ticks
    t_ub: int  # ticks

    @property
    def down(self):
        return self.ticks.down

    @property
    def up(self):
        return self.ticks.up


@dataclass
class _Point:
    """The variables of one point q."""

    q: int
    y: int
    x: dict[int, int]  # strategy u -> var
    w: dict[int, int]  # state option z -> var
    us: list[int]
    zs: list[int]


def build_model(tb: Tables, points: list[int] | None = None,
                max_time_s: float | None = None) -> tuple[LinearModel, VarMap]:
    """The model over ``points``; with ``max_time_s``, only plans whose model iteration time
    (at most the evaluator's plus one tick) is within it."""
    A = tb.terms
    pts = list(range(tb.num_points)) if points is None else list(points)
    lm, vm = LinearModel(), VarMap(pts, strategies(tb))
    # T is the iteration time before stragglers; the step waits (1 + straggler) T for the
    # slowest GPU (compose.iteration_time_s), so the weight and the time limit carry it.
    # With one time weight the objective is sum (STRAGGLER_DEN + n_q) T_q, exact integers.
    w_base, strag = A.time_weight[pts], A.straggler[pts]
    w_time, w_busy = w_base * (1.0 + strag), A.busy_weight[pts]
    need_busy = bool(np.any(w_busy > 0))
    time_only = not need_busy and np.allclose(w_base, w_base[0])
    den = STRAGGLER_DEN if time_only and np.any(strag > 0) else 1
    st = _setup(tb, pts, time_only, 2 * den)
    vm.ticks = st.ticks
    lm.units["time"] = st.ticks.per_s / 1e6  # the MILP sees microseconds
    vm.obj_scale = den / float(w_base[0]) if time_only else _objective_scale(w_time, w_busy)
    for q in pts:
        vm.y[q] = lm.binary(f"y{q}")
    lm.add({i: 1 for i in vm.y.values()}, lb=1, ub=1)
    for j, q in enumerate(pts):
        pt = _point_vars(lm, vm, tb, q)
        groups = [g for g in range(A.group_valid.shape[1]) if A.group_valid[q, g]]
        per = {g: _group_terms(A, q, g, [vm.strategies[u] for u in pt.us]) for g in groups}
        T = lm.var(f"T{q}", 0, st.t_ub, dim="time")
        if max_time_s is not None:  # T[q] <= limit y[q]; one tick of slack keeps every plan
            limit_s = max_time_s / (1.0 + float(A.straggler[q]))
            lm.add({T: 1, pt.y: -min(st.down(limit_s) + 1, st.t_ub)}, ub=0, dim="time")
        tail = lm.var(f"TAIL{q}", 0, st.t_ub, dim="time")
        s_vars = {}
        for g in groups:
            wf = {pt.x[u]: st.up(val) for u, val in zip(pt.us, per[g]["fwd"])}
            wb = {pt.x[u]: st.up(val) for u, val in zip(pt.us, per[g]["bwd"])}
            s_vars[g] = _stage_row(lm, st, A, pt, g, per[g], wf, wb)
            _tail_row(lm, st, A, pt, g, wf, wb, tail)
            _memory_rows(lm, st, A, pt, g, per[g])
        _iteration_rows(lm, T, tail, s_vars, [int(A.group_count[q, g]) for g in groups],
                        int(A.m[q]), int(A.pp[q]), int(A.v[q]))
        lm.objective[T] = (int(round((1.0 + strag[j]) * den)) if time_only
                           else int(math.floor(w_time[j] * vm.obj_scale)))
        if need_busy:
            busy = _busy_row(lm, st, A, pt, groups, per)
            lm.objective[busy] = int(math.floor(w_busy[j] * vm.obj_scale))
    check_magnitudes(lm)
    return lm, vm


def _setup(tb: Tables, pts: list[int], time_only: bool, obj_mult: int = 1) -> _Setup:
    A, space = tb.terms, tb.space
    cluster = space.cluster
    base = tb.settings
    t_ub_s = max(_time_bound_s(tb, q) for q in pts)
    # the largest factor a time is multiplied by: v pp (m + 1) in the iteration row, and
    # KAPPA_DEN x layers x 2 in the overlap-exposure rows
    mult = max(max(int(A.v[q] * A.pp[q] * (A.m[q] + 1)),
                   2 * KAPPA_DEN * int(np.max(A.group_layers[q]))) for q in pts)
    ticks = choose_ticks(t_ub_s, max(mult, obj_mult if time_only else 10**OBJ_DIGITS))
    return _Setup(
        kappa_n=int(math.floor(cluster.gpu.efficiency.overlap_slowdown * KAPPA_DEN)),
        ovl_param=base.overlap_param_gather, ovl_grad=base.overlap_dp_grad_reduce,
        sharded_overlap=cluster.gpu.efficiency.sharded_overlap,
        usable=int(math.floor(cluster.gpu.hbm_bytes))
        - int(math.floor(headroom_bytes(cluster))),
        host_cap=(int(math.floor(cluster.offload.capacity_bytes))
                  if cluster.offload is not None else 0),
        ticks=ticks, t_ub=ticks.up(t_ub_s) + 10)


def _point_vars(lm: LinearModel, vm: VarMap, tb: Tables, q: int) -> _Point:
    """x[q,u] and w[q,z], each summing to y[q] (the hull form of the disjunction)."""
    A, nt = tb.terms, len(tb.layer_types)
    us = [ui for ui, (rc, sp) in enumerate(vm.strategies) if A.sp_ok[q, sp]
          and all(A.rc_ok[t, rc[t]] and A.rc_point_ok[q, rc[t]] for t in range(nt))]
    zs = [z for z in range(A.state_ok.shape[1]) if A.state_ok[q, z]]
    pt = _Point(q, vm.y[q], {u: lm.binary(f"x{q}_{u}") for u in us},
                {z: lm.binary(f"w{q}_{z}") for z in zs}, us, zs)
    vm.x.update({(q, u): i for u, i in pt.x.items()})
    vm.w.update({(q, z): i for z, i in pt.w.items()})
    lm.add({**{i: 1 for i in pt.x.values()}, pt.y: -1}, lb=0, ub=0)
    lm.add({**{i: 1 for i in pt.w.values()}, pt.y: -1}, lb=0, ub=0)
    return pt


def _on_states(st: _Setup, pt: _Point, arr: np.ndarray) -> Expr:
    """``sum_z arr[z] w[q,z]`` in ticks."""
    return {pt.w[z]: st.down(arr[z]) for z in pt.zs}


def _stage_row(lm: LinearModel, st: _Setup, A, pt: _Point, g: int, terms: dict,
               wf: Expr, wb: Expr) -> int:
    """S[q,g] >= the stage time: linearizes :func:`planner.costmodel.compose.stage_time`."""
    q, layers = pt.q, int(A.group_layers[pt.q, g])
    row: Expr = {pt.x[u]: st.down(val) for u, val in zip(pt.us, terms["total"])}
    row[pt.y] = row.get(pt.y, 0) + st.down(A.p2p_s[q])
    if A.p2p_overlap_s[q] > 0:  # interleaved sends behind the stage's compute
        window = dict(wf)
        for i, c in wb.items():
            window[i] = window.get(i, 0) + c
        row[_exposure(lm, f"pp{q}_{g}", {pt.y: st.down(A.p2p_overlap_s[q])}, window, True,
                      layers, st.kappa_n)] = 1
    for arr, win, on, tag in ((A.dp_fwd_s[q, g], wf, st.ovl_param and st.sharded_overlap,
                               "mbf"),
                              (A.dp_bwd_s[q, g], wb, st.ovl_grad and st.sharded_overlap,
                               "mbb")):
        if any(arr[z] > 0 for z in pt.zs):
            row[_exposure(lm, f"{tag}{q}_{g}", _on_states(st, pt, arr), win, on, layers,
                          st.kappa_n)] = 1
    fetch = A.fetch_s[q, g]  # offloaded parameters, fetched for each pass
    if any(fetch[z] > 0 for z in pt.zs):
        for win, tag in ((wf, "ff"), (wb, "fb")):
            row[_exposure(lm, f"{tag}{q}_{g}", _on_states(st, pt, fetch), win, st.ovl_param,
                          layers, 0)] = 1
    S = lm.var(f"S{q}_{g}", 0, lm.bounds(row)[1], dim="time")
    row[S] = -1
    lm.add(row, ub=0, dim="time")
    return S


def _tail_row(lm: LinearModel, st: _Setup, A, pt: _Point, g: int, wf: Expr, wb: Expr,
              tail: int) -> None:
    """TAIL[q] >= the group's tail: linearizes :func:`planner.costmodel.compose.tail_time`."""
    q, layers = pt.q, int(A.group_layers[pt.q, g])
    units = int(A.group_dp_units[q, g])  # the last bucket's share cannot overlap
    # the windows span dp_window_microbatches microbatches; rounding up keeps a lower bound
    mult = float(dp_window_microbatches(A.pp[q], A.v[q], A.m[q]))
    wf = {i: math.ceil(c * mult) for i, c in wf.items()}
    wb = {i: math.ceil(c * mult) for i, c in wb.items()}
    row = _on_states(st, pt, A.optimizer_s[q, g] + A.cpu_step_s[q, g])
    row[pt.y] = row.get(pt.y, 0) + st.down(A.tied_s[q, g])
    for arr, win, on, tag, k, n in (
            (A.dp_grad_s[q, g], wb, st.ovl_grad, "grad", st.kappa_n, units),
            (A.dp_param_s[q, g], wf, st.ovl_param, "param", st.kappa_n, units),
            (A.grad_down_s[q, g], wb, st.ovl_grad, "down", 0, layers)):
        if any(arr[z] > 0 for z in pt.zs):
            row[_exposure(lm, f"{tag}{q}_{g}", _on_states(st, pt, arr), win, on, n, k)] = 1
    row[tail] = -1
    lm.add(row, ub=0, dim="time")


def _memory_rows(lm: LinearModel, st: _Setup, A, pt: _Point, g: int, terms: dict) -> None:
    """HBM (and offload-tier) capacity of the group: linearizes
    :func:`planner.costmodel.compose.stage_memory` (multiplied by v)."""
    q = pt.q
    v, infl = int(A.v[q]), int(A.group_inflight[q, g])
    mem: Expr = {pt.w[z]: v * int(A.states_bytes[q, g, z] + A.buffers_bytes[q, z])
                 for z in pt.zs}
    for u, act, fixed in zip(pt.us, terms["act"], terms["fixed_mem"]):
        mem[pt.x[u]] = infl * int(act) + v * int(fixed)
    mem[pt.y] = -v * st.usable
    lm.add(mem, ub=0, dim="memory")
    if any(A.host_bytes[q, g, z] > 0 for z in pt.zs):
        host: Expr = {pt.w[z]: int(A.host_bytes[q, g, z]) for z in pt.zs}
        host[pt.y] = -st.host_cap
        lm.add(host, ub=0, dim="memory")


def _busy_row(lm: LinearModel, st: _Setup, A, pt: _Point, groups: list[int],
              per: dict[int, dict]) -> int:
    """BUSY[q] >= the mean busy time: linearizes :func:`planner.costmodel.compose.busy_s`
    (multiplied by pp)."""
    q = pt.q
    m, pp = int(A.m[q]), int(A.pp[q])
    busy = lm.var(f"BUSY{q}", 0, st.t_ub, dim="time")
    row = {busy: -pp}
    for g in groups:
        cnt = int(A.group_count[q, g])
        for u, f, b in zip(pt.us, per[g]["fwd"], per[g]["bwd"]):
            row[pt.x[u]] = row.get(pt.x[u], 0) + m * cnt * st.down(f + b)
        for z in pt.zs:
            row[pt.w[z]] = row.get(pt.w[z], 0) + cnt * st.down(A.optimizer_s[q, g, z])
    lm.add(row, ub=0, dim="time")
    return busy


def _iteration_rows(lm: LinearModel, T: int, tail: int, s_vars: dict[int, int],
                    counts: list[int], m: int, pp: int, v: int) -> None:
    """Linearizes :func:`planner.costmodel.compose.iteration_time_s` before stragglers: for
    every group g, ``T >= m S_g + c sum_g' count_g' S_g' + TAIL`` with
    ``c = bubble_coefficient(pp, v)`` (the schedule's own bubble), multiplied through by
    c's denominator."""
    c = Fraction(bubble_coefficient(pp, v)).limit_denominator(10**6)
    assert abs(float(c) - bubble_coefficient(pp, v)) <= 1e-12 * max(float(c), 1.0)
    den = c.denominator
    bub = {S: c.numerator * n for S, n in zip(s_vars.values(), counts)}
    for S in s_vars.values():
        row = dict(bub)
        row[S] = row.get(S, 0) + den * m
        row[tail] = den
        row[T] = -den
        lm.add(row, ub=0, dim="time")


def _group_terms(A, q: int, g: int,
                 strats: list[tuple[tuple[int, ...], int]]) -> dict[str, list[float]]:
    """Per-microbatch time, overlap windows and memory of group g for each strategy."""
    n = A.group_type_layers[q, g]
    emb, head = A.group_embedding[q, g], A.group_head[q, g]
    out: dict[str, list[float]] = {k: [] for k in ("total", "fwd", "bwd", "act", "fixed_mem")}
    for rc, sp in strats:
        def lay(name: str) -> float:
            return float(sum(n[t] * getattr(A, f"layer_{name}")[q, t, rc[t], sp]
                             for t in range(len(rc)) if n[t]))

        out["total"].append(lay("total_s") + emb * A.emb_total_s[q, sp]
                            + head * A.head_total_s[q, sp])
        out["fwd"].append(lay("fwd_s") + emb * A.emb_fwd_s[q, sp] + head * A.head_fwd_s[q, sp])
        out["bwd"].append(lay("bwd_s") + emb * A.emb_bwd_s[q, sp]
                          + head * A.head_bwd_s[q, sp])
        out["act"].append(lay("act_bytes"))
        ws = max([A.layer_workspace_bytes[q, t, rc[t], sp] for t in range(len(rc)) if n[t]] + [0.0])
        if head:
            ws = max(ws, A.head_workspace_bytes[q, sp])
        out["fixed_mem"].append(ws + (A.head_act_bytes[q, sp] if head else 0.0))
    return out


def _exposure(lm: LinearModel, name: str, comm: Expr, window: Expr, overlap: bool, layers: int,
              kappa_n: int) -> int:
    """Variable >= exposed time of collective ``comm`` overlapped with ``window``: linearizes
    :func:`planner.costmodel.compose.overlapped_s` as its two pieces
    (:func:`planner.costmodel.compose.exposure_pieces` with ``kappa = kappa_n / KAPPA_DEN``),
    each multiplied through to integers."""
    e = lm.var(name, 0, max(lm.bounds(comm)[1], 0), dim="time")
    if not overlap:
        lm.add({**comm, e: -1}, ub=0, dim="time")
        return e
    # piece 1: c - (1 - kappa) w
    row = {i: KAPPA_DEN * c for i, c in comm.items()}
    for i, c in window.items():
        row[i] = row.get(i, 0) - (KAPPA_DEN - kappa_n) * c
    row[e] = -KAPPA_DEN
    lm.add(row, ub=0, dim="time")
    # piece 2: c (1/l + kappa (1 - 1/l)) = c (KD + kn (l - 1)) / (KD l)
    factor = KAPPA_DEN + kappa_n * (layers - 1)
    row = {i: c * factor for i, c in comm.items()}
    row[e] = -KAPPA_DEN * layers
    lm.add(row, ub=0, dim="time")
    return e


def _objective_scale(w_time: np.ndarray, w_busy: np.ndarray) -> float:
    """Integer objective = floor(w x scale) x time: keep ``OBJ_DIGITS`` significant digits of
    the largest weight (rounding down keeps the objective a lower bound)."""
    top = float(max(np.max(w_time), np.max(w_busy)))
    return 10.0 ** (OBJ_DIGITS - 1 - math.floor(math.log10(top)))


def _time_bound_s(tb: Tables, q: int) -> float:
    """An upper bound of the iteration time of every plan at point q: the evaluator's
    composition with each term at its largest over the inner choices and no overlap."""
    A = tb.terms
    n = A.group_type_layers[q]
    lay = np.max(A.layer_total_s[q].reshape(n.shape[1], -1), axis=1)
    ends = max(np.max(A.emb_total_s[q]), 0) + max(np.max(A.head_total_s[q]), 0)
    top = {k: np.max(getattr(A, k)[q], axis=1) for k in (
        "dp_fwd_s", "dp_bwd_s", "fetch_s", "dp_grad_s", "dp_param_s", "optimizer_s",
        "cpu_step_s", "grad_down_s")}
    no = Overlap(False, False, 0.0)
    stage = stage_time(n @ lay + ends, 0.0, 0.0, A.p2p_s[q], A.p2p_overlap_s[q],
                       top["dp_fwd_s"], top["dp_bwd_s"], top["fetch_s"], A.group_layers[q], no)
    tail = tail_time(top["optimizer_s"], top["cpu_step_s"], A.tied_s[q], top["dp_grad_s"],
                     top["dp_param_s"], top["grad_down_s"], 0.0, 0.0, A.group_layers[q], no)
    ok = A.group_valid[q]
    t = iteration_time_s(A.m[q], A.pp[q], A.v[q], np.where(ok, stage.total_s, 0.0),
                         A.group_count[q] * ok, np.where(ok, tail.total_s, 0.0),
                         straggler=float(A.straggler[q]))
    return float(t) * 1.01


__all__ = ["build_model", "VarMap", "Ticks", "strategies"]
