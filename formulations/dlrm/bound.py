"""A lower bound on every DLRM sharding plan's iteration time: the linear relaxation of
:mod:`formulations.dlrm.build` with the ranks aggregated into one class.

Ranks of a node are interchangeable and so are nodes, so a fractional plan may as well
spread every option evenly; what remains per phase (``x[t,o]``: copies of table entry
``t`` with option ``o``, fractional) is

    P_p >= (sum of every shard's load in phase p) / ranks  (+ the collectives' latencies)
    P_p >= load on every rank + one shard of table t        (per table: the rank holding it)
    P_dist >= received pooled vectors, >= bottom MLP;  P_lookup_bwd >= dense all-reduce
    sum of all shards' memory <= ranks x usable HBM

plus one integer variable for whole columns (:func:`_column_rows`: the all-to-all phase's
busiest rank sends at least the mean number of columns rounded up to the shards' common
width), and the bound is ``sum_p P_p`` plus the dense middle and the optimizer step. Every
row holds for every integral plan as the evaluator prices it (the model's rows averaged
over ranks, and its table cuts), so the optimum of this small MILP (HiGHS's proven dual
bound) is below every plan's time. A few thousand columns, where the full model has
hundreds of thousands: 0.4 s for 500 tables on 128 GPUs; a relative 1e-6 is taken off for
the solver's tolerances.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, Callable

import numpy as np

from formulations.linear import highs_bound
from planner.costmodel.dlrm.model import Option, dense_cost, links, table_options, usable_hbm_bytes
from planner.specs.cluster import ClusterSpec
from planner.specs.dlrm import DLRMSpec

MS = 1e3  # the LP works in milliseconds (well scaled for HiGHS)
PHASES = (("lookup_fwd", "lookup_fwd_s"), ("dist_fwd", "comm_fwd_s"),
          ("dist_bwd", "comm_bwd_s"), ("lookup_bwd", "lookup_bwd_s"))
TOLERANCE = 1e-6
MIP_TIME_LIMIT_S = 2.0  # HiGHS on the one integer variable; its proven bound if cut short
#: LPs with more nonzeros than this run in a child process stopped at the time limit:
#: HiGHS checks its own limit too rarely on them (12,000 tables on 128 GPUs, 1.1M
#: nonzeros: 300 s in presolve under a 2 s limit, 16 s under 5 s with presolve off).
HARD_LIMIT_NONZEROS = 100_000


class _Rows:
    """Columns and rows of a small LP, gathered before one hand-over to HiGHS."""

    def __init__(self) -> None:
        self.integer: list[int] = []
        self.lb: list[float] = []
        self.ub: list[float] = []
        self.rows: list[tuple[dict[int, float], float, float]] = []

    def col(self, lb: float = 0.0, ub: float = np.inf) -> int:
        self.lb.append(lb)
        self.ub.append(ub)
        return len(self.lb) - 1

    def row(self, coefs: dict[int, float], lo: float = -np.inf, hi: float = np.inf) -> None:
        self.rows.append(({i: c for i, c in coefs.items() if c}, lo, hi))

    def minimize(self, cost: dict[int, float], time_limit_s: float | None = None
                 ) -> tuple[float | None, bool]:
        """(the optimum or the proven dual bound, whether it finished within the limit)."""
        nonzeros = sum(len(r[0]) for r in self.rows)
        if time_limit_s is not None and nonzeros > HARD_LIMIT_NONZEROS and hasattr(os, "fork"):
            return _with_deadline(self._minimize, (cost, 0.9 * time_limit_s), time_limit_s)
        return self._minimize(cost, time_limit_s)

    def _minimize(self, cost: dict[int, float], time_limit_s: float | None
                  ) -> tuple[float | None, bool]:
        return highs_bound(self.lb, self.ub, self.rows, cost, self.integer, time_limit_s,
                           MIP_TIME_LIMIT_S)


def _with_deadline(fn: Callable[..., Any], args: tuple, deadline_s: float) -> Any:
    """``fn(*args)`` in a forked child, killed after ``deadline_s`` seconds: (None, False)
    then. The child only computes and sends its answer back through a pipe."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(send, fn, args), daemon=True)
    t0 = time.perf_counter()
    child.start()
    send.close()
    try:
        ready = recv.poll(max(deadline_s - (time.perf_counter() - t0), 0.0))
        return recv.recv() if ready else (None, False)
    except EOFError:  # the child died (out of memory): no bound
        return None, True
    finally:
        if child.is_alive():
            child.kill()
        child.join()
        recv.close()


def _child(send: Any, fn: Callable[..., Any], args: tuple) -> None:
    try:
        send.send(fn(*args))
    finally:
        send.close()
        os._exit(0)  # no atexit handlers of the parent's state


def lp_bound_s(model: DLRMSpec, cluster: ClusterSpec,
               kinds: tuple[str, ...] | None = None,
               time_limit_s: float | None = None) -> float | None:
    """The bound (seconds), or None when the LP finds no fractional plan that fits (or,
    given ``time_limit_s``, does not finish in time)."""
    return lp_bound(model, cluster, kinds, time_limit_s)[0]


def lp_bound(model: DLRMSpec, cluster: ClusterSpec, kinds: tuple[str, ...] | None = None,
             time_limit_s: float | None = None) -> tuple[float | None, bool]:
    """(:func:`lp_bound_s`, whether the LP finished within ``time_limit_s``, building
    included: a bound cut short is HiGHS's proven dual bound so far, or None)."""
    if time_limit_s is not None and time_limit_s <= 0:
        return None, False  # no time left: not even the rows (seconds on 20,000 tables)
    t0 = time.perf_counter()
    ln, dn = links(model, cluster), dense_cost(model, cluster)
    cap = usable_hbm_bytes(cluster) - dn.memory_bytes
    lp = _Rows()
    options = [[o for o in table_options(model, cluster, i, kinds) if o.cost.memory_bytes <= cap]
               for i in range(len(model.tables))]
    if any(not opts for opts in options):
        return None, True
    x = {(t, o): lp.col() for t, opts in enumerate(options) for o in range(len(opts))}
    phase = {p: lp.col() for p, _ in PHASES}
    shared = {p: lp.col() for p, _ in PHASES}
    u = {c: lp.col(0.0, 1.0) for c in ("a2a", "rs", "twrw", "any")}
    lp.row({u["any"]: 1, u["a2a"]: -1}, lo=0)
    lp.row({u["any"]: 1, u["twrw"]: -1}, lo=0)
    for t, tab in enumerate(model.tables):
        lp.row({x[t, o]: 1 for o in range(len(options[t]))}, tab.count, tab.count)
        for o, opt in enumerate(options[t]):
            if opt.collective:
                lp.row({u[opt.collective]: 1, x[t, o]: -1 / tab.count}, lo=0)
    _phase_rows(lp, model, cluster, options, x, phase, shared, u)
    _column_rows(lp, model, cluster, options, x, phase, shared, u)
    width = {(t, o): _width(ln, options[t][o]) for t, o in x}
    lp.row({x[k]: options[k[0]][k[1]].cost.memory_bytes * width[k] / 2**30 for k in x},
           hi=ln.ranks * cap / 2**30)
    left = None if time_limit_s is None else time_limit_s - (time.perf_counter() - t0)
    if left is not None and left <= 0:
        return None, False
    best, finished = lp.minimize({phase[p]: 1.0 for p, _ in PHASES}, left)
    if best is None:
        return None, finished
    return (best / MS + dn.middle_s + dn.optimizer_s) * (1 - TOLERANCE), finished


def _column_rows(lp: _Rows, model: DLRMSpec, cluster: ClusterSpec,
                 options: list[list[Option]], x: dict, phase: dict, shared: dict,
                 u: dict) -> None:
    """Whole columns: a table- or column-wise shard sends ``columns x batch x bytes`` by
    the all-to-all, and every such shard's columns are a multiple of ``unit`` (the gcd of
    the shards' widths), so some rank sends at least ``unit x ceil(columns / (unit x
    ranks))`` columns: one integer variable ``K``, valid for every integral plan (the
    fractional choice of options stays a relaxation)."""
    ln = links(model, cluster)
    per_col = ln.a2a[0] * ln.batch * model.emb_bytes
    cols = {k: model.tables[k[0]].dim for k in x
            if options[k[0]][k[1]].scope == "ranks" and options[k[0]][k[1]].collective == "a2a"}
    widths = [model.tables[t].dim // options[t][o].shards for t, o in cols]
    if not widths or any(
            abs(getattr(options[t][o].cost, a) - per_col * model.tables[t].dim
                / options[t][o].shards) > 1e-9 * getattr(options[t][o].cost, a)
            for t, o in cols for a in ("comm_fwd_s", "comm_bwd_s")):
        return
    unit = math.gcd(*widths)
    k = lp.col()
    lp.integer.append(k)
    lp.row({k: unit * ln.ranks, **{x[c]: -d for c, d in cols.items()}}, lo=0)
    lat = {"dist_fwd": {u["any"]: ln.a2a[1], u["rs"]: ln.rs[1], u["twrw"]: ln.rs_node[1]},
           "dist_bwd": {u["any"]: ln.a2a[1], u["rs"]: ln.ag[1], u["twrw"]: ln.ag_node[1]}}
    for p, late in lat.items():
        lp.row({phase[p]: 1, shared[p]: -1, k: -per_col * unit * MS,
                **{i: -c * MS for i, c in late.items()}}, lo=0)


def _width(ln, opt: Option) -> int:
    return ln.ranks if opt.scope == "all" else ln.node if opt.scope == "node" else opt.shards


def _phase_rows(lp: _Rows, model: DLRMSpec, cluster: ClusterSpec, options: list[list[Option]],
                x: dict, phase: dict, shared: dict, u: dict) -> None:
    """Per phase: the mean load, the floors, and the per-table cuts (module docstring)."""
    ln, dn = links(model, cluster), dense_cost(model, cluster)
    lat = {"dist_fwd": {u["any"]: ln.a2a[1], u["rs"]: ln.rs[1], u["twrw"]: ln.rs_node[1]},
           "dist_bwd": {u["any"]: ln.a2a[1], u["rs"]: ln.ag[1], u["twrw"]: ln.ag_node[1]}}
    recv = {x[k]: ln.a2a[0] * options[k[0]][k[1]].recv_bytes * MS for k in x}
    for p, attr in PHASES:
        def load(opt: Option) -> float:
            return getattr(opt.cost, attr) * MS

        late = {i: -c * MS for i, c in lat.get(p, {}).items()}
        lp.row({shared[p]: 1, **{x[t, o]: -load(options[t][o]) for t, o in x
                                  if options[t][o].scope == "all"}}, 0, 0)
        mean = {x[t, o]: -load(options[t][o]) * _width(ln, options[t][o]) / ln.ranks
                for t, o in x}
        lp.row({phase[p]: 1, **mean, **late}, lo=0)
        if p in lat:
            lp.row({phase[p]: 1, **{i: -c for i, c in recv.items()}, **late}, lo=0)
            bottom = dn.bottom_fwd_s if p == "dist_fwd" else dn.bottom_bwd_s
            lp.row({phase[p]: 1}, lo=bottom * MS)
        for t, tab in enumerate(model.tables):
            cut = {x[t, o]: -load(opt) / tab.count for o, opt in enumerate(options[t])
                   if opt.scope != "all"}
            if cut:
                lp.row({phase[p]: 1, shared[p]: -1, **cut, **late}, lo=0)
    ar = {x[t, o]: -ln.ar[0] * options[t][o].allreduce_bytes * MS for t, o in x}
    lp.row({phase["lookup_bwd"]: 1, **ar}, lo=(ln.ar[0] * dn.grad_bytes + ln.ar[1]) * MS)
