"""Exact serving search: integer replica counts per pool over the tabulated layouts
(:mod:`formulations.serve.space`), solved by CP-SAT, by a MILP (PuLP + HiGHS) and by a
brute force over the same integer problem.

Per pool ``P`` (aggregated; or prefill and decode) and row ``r`` (a replica layout with
capacity ``c_r`` micro-requests/s, ``g_r`` GPUs and objective coefficient ``k_r``)::

    n_r in {0..U_r}, y_r in {0,1}, n_r <= U_r y_r, sum_{r in P} y_r <= K
    rate R:      sum_{r in P} c_r n_r >= R            for every pool
    budget N:    sum_r g_r n_r <= N
    minimize     sum_r k_r n_r                         (gpus, cost, energy; needs R)
    or maximize  z <= sum_{r in P} c_r n_r for every pool   (throughput; needs N)

``K`` (``max_layouts``, 1 by default) bounds the distinct layouts a pool mixes; GPU types
may differ between pools (mixed SKUs). Every quantity is an integer, so the three backends
agree exactly; ``U_r`` is the most replicas a row can usefully take (a row alone covering
``R``, or filling ``N``).
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field

from formulations.linear import UNIT, CpsatSession, LinearModel, MilpSession, SolverOutcome
from formulations.serve.space import Row
from planner.errors import InputError
from planner.specs.serve import MAX_REPLICAS

BACKENDS = ("cpsat", "milp", "exhaustive")


@dataclass(frozen=True)
class ServeProblem:
    pools: dict[str, list[Row]]  # pool -> rows
    objective: str  # gpus, cost, energy or throughput
    rate: int | None = None  # micro-requests/s
    budget: int | None = None  # GPUs
    max_layouts: int = 1

    def coef(self, row: Row) -> int:
        value = row.coef.get(self.objective)
        if value is None:
            raise InputError(f"--objective {self.objective}: {row.cluster.gpu.name} has no "
                             "price_per_gpu_hour (catalog GPU file or cluster)")
        return int(value)

    def bound(self, row: Row) -> int:
        """U_r: replicas beyond which a row cannot help."""
        out = math.ceil(self.rate / row.cap) if self.rate is not None else None
        if self.budget is not None:
            cap = self.budget // row.gpus
            out = cap if out is None else min(out, cap)
        assert out is not None
        return min(out, MAX_REPLICAS)  # a ServePlan holds at most this many

    def check(self) -> None:
        if self.objective == "throughput":
            if self.budget is None:
                raise InputError("--objective throughput needs --gpus (the fleet to fill)")
        elif self.rate is None:
            raise InputError(f"--objective {self.objective} needs --rate (the load to serve)")


@dataclass
class ServeSolution:
    """``time_limit``: the incumbent when the time ran out (``counts`` and ``objective``;
    empty when none was found) and the solver's best ``bound`` on the optimum, if any."""
    status: str  # optimal, time_limit or infeasible
    backend: str
    objective: int | None = None
    counts: dict = field(default_factory=dict)  # (pool, row index) -> replicas
    wall_s: float = 0.0
    bound: float | None = None  # in the objective's units; the optimum lies on its far side
    maximize: bool = False
    #: "solver", or "tables" when the solve stopped before its first plan and the counts
    #: are :func:`table_incumbent`'s
    found_by: str = "solver"

    @property
    def gap(self) -> float | None:
        """|objective - bound| / objective: 0 when proven optimal, None when unknown (no
        incumbent, no bound, or a zero objective)."""
        if self.status == "optimal":
            return 0.0
        if self.objective is None or self.bound is None or self.objective == 0:
            return None
        slack = self.bound - self.objective if self.maximize else self.objective - self.bound
        return max(slack, 0.0) / abs(self.objective)


def value_of(problem: ServeProblem, counts: dict) -> int:
    """The objective of replica ``counts`` in integers (throughput: the served rate)."""
    if problem.objective == "throughput":
        return min(sum(problem.pools[p][i].cap * n for (q, i), n in counts.items() if q == p)
                   for p in problem.pools)
    return sum(problem.coef(problem.pools[p][i]) * n for (p, i), n in counts.items())


def feasible(problem: ServeProblem, counts: dict) -> bool:
    """Every constraint, in integers."""
    for p in problem.pools:
        used = [(i, n) for (q, i), n in counts.items() if q == p and n > 0]
        if len(used) > problem.max_layouts:
            return False
        served = sum(problem.pools[p][i].cap * n for i, n in used)
        if problem.rate is not None and problem.objective != "throughput" and served < problem.rate:
            return False
    gpus = sum(problem.pools[p][i].gpus * n for (p, i), n in counts.items())
    return problem.budget is None or gpus <= problem.budget


def solve(problem: ServeProblem, backend: str = "cpsat", time_limit_s: float = 60.0
          ) -> ServeSolution:
    problem.check()
    t0 = time.perf_counter()
    if any(not rows for rows in problem.pools.values()):
        return ServeSolution("infeasible", backend, wall_s=time.perf_counter() - t0)
    run = {"cpsat": _cpsat, "milp": _milp, "exhaustive": _exhaustive}.get(backend)
    if run is None:
        raise InputError(f"--backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    out = run(problem, time_limit_s)
    if out.status == "time_limit" and not out.counts:  # stopped before its first plan
        counts = table_incumbent(problem)
        if counts is not None:
            out.counts, out.found_by = counts, "tables"
    out.wall_s = time.perf_counter() - t0
    out.maximize = problem.objective == "throughput"
    if out.status == "optimal" or out.counts:
        out.counts = {k: n for k, n in out.counts.items() if n > 0}
        assert feasible(problem, out.counts), "the solver's answer breaks a constraint"
        out.objective = value_of(problem, out.counts)
        if out.objective <= 0:  # throughput: nothing served (proven: no replica fits)
            out.objective, out.counts = None, {}
            if out.status == "optimal":
                out.status = "infeasible"
    return out


def _keys(problem: ServeProblem) -> list[tuple[str, int]]:
    return [(p, i) for p, rows in problem.pools.items() for i in range(len(rows))]


def _row(problem: ServeProblem, key: tuple[str, int]) -> Row:
    return problem.pools[key[0]][key[1]]


def _linear_model(problem: ServeProblem) -> tuple[LinearModel, dict[tuple[str, int], int]]:
    """The integer model of the module docstring, and each row's ``n_r`` variable. The
    throughput ``z`` is in units of its largest value, so that the MILP sees it in [0, 1]
    (continuous: the served rates are integers, so the optimum sits on one of them); the
    MILP scales each row to unit size and solves at tolerance 1e-9, so that no integer
    constraint is missed by a unit."""
    keys = _keys(problem)
    throughput = problem.objective == "throughput"
    top = (max(r.cap for rows in problem.pools.values() for r in rows) * problem.budget
           if throughput else 1)
    lm = LinearModel(objective_dim="rate" if throughput else "count",
                     units={**UNIT, "rate": float(top)}, maximize=throughput)
    n = {k: lm.var(f"n{k}", 0, problem.bound(_row(problem, k)), integer=True) for k in keys}
    y = {k: lm.binary(f"y{k}") for k in keys}
    for k in keys:
        lm.add({n[k]: 1, y[k]: -problem.bound(_row(problem, k))}, ub=0)
    for p in problem.pools:
        lm.add({y[k]: 1 for k in keys if k[0] == p}, ub=problem.max_layouts)
    if problem.budget is not None:
        lm.add({n[k]: _row(problem, k).gpus for k in keys}, ub=problem.budget)
    if throughput:
        z = lm.var("z", 0, top, dim="rate")
        for p in problem.pools:
            lm.add({**{n[k]: _row(problem, k).cap for k in keys if k[0] == p}, z: -1}, lb=0,
                   dim="rate")
        lm.objective = {z: 1}
    else:
        for p in problem.pools:
            lm.add({n[k]: _row(problem, k).cap for k in keys if k[0] == p}, lb=problem.rate)
        lm.objective = {n[k]: problem.coef(_row(problem, k)) for k in keys}
    return lm, n


#: HiGHS settings for the serving MILP (one try: see :func:`_linear_model`).
MILP_ATTEMPTS = ({"tol": 1e-9, "presolve": "on"},)


def _cpsat(problem: ServeProblem, time_limit_s: float) -> ServeSolution:
    lm, n = _linear_model(problem)
    return _solution(CpsatSession(lm, workers=2, presolve=True).solve(time_limit_s), n, "cpsat")


def _milp(problem: ServeProblem, time_limit_s: float) -> ServeSolution:
    lm, n = _linear_model(problem)
    return _solution(MilpSession(lm, attempts=MILP_ATTEMPTS).solve(time_limit_s), n, "milp")


def _solution(out: SolverOutcome, n: dict[tuple[str, int], int], backend: str
              ) -> ServeSolution:
    """Replica counts and the solver's bound; an answer cut short by the time limit is
    no proof (``time_limit``) but keeps its incumbent."""
    if out.status == "infeasible":
        return ServeSolution("infeasible", backend)
    counts = {} if out.values is None else {k: out.values[i] for k, i in n.items()}
    return ServeSolution("optimal" if out.status == "optimal" else "time_limit", backend,
                         counts=counts, bound=out.bound)


# ---- brute force ---------------------------------------------------------------------------
def _count_vectors(problem: ServeProblem, rows: list[Row], subset: tuple[int, ...]):
    """Replica counts (each >= 1) of the rows in ``subset``. With a rate the last count is
    the fewest that covers it (more only costs more); otherwise every count up to U_r."""
    bounds = [problem.bound(rows[i]) for i in subset]
    if problem.objective == "throughput":
        yield from itertools.product(*(range(1, u + 1) for u in bounds))
        return
    for head in itertools.product(*(range(1, u + 1) for u in bounds[:-1])):
        left = problem.rate - sum(rows[i].cap * c for i, c in zip(subset, head))
        last = max(1, -(-left // rows[subset[-1]].cap))
        if last <= bounds[-1]:
            yield head + (last,)


def _options(problem: ServeProblem, pool: str) -> list[tuple[dict, int, int, int]]:
    """Every (counts, served, GPUs, objective) of one pool, with at most K layouts."""
    rows = problem.pools[pool]
    out = []
    for size in range(1, problem.max_layouts + 1):
        for subset in itertools.combinations(range(len(rows)), size):
            for counts in _count_vectors(problem, rows, subset):
                served = sum(rows[i].cap * c for i, c in zip(subset, counts))
                if problem.objective != "throughput" and served < problem.rate:
                    continue
                gpus = sum(rows[i].gpus * c for i, c in zip(subset, counts))
                if problem.budget is not None and gpus > problem.budget:
                    continue
                coef = (0 if problem.objective == "throughput"
                        else sum(problem.coef(rows[i]) * c for i, c in zip(subset, counts)))
                out.append(({(pool, i): c for i, c in zip(subset, counts)}, served, gpus, coef))
    return out


def _exhaustive(problem: ServeProblem, time_limit_s: float) -> ServeSolution:
    """Every combination of the pools' options under the budget; the best by the
    objective (ties: the first found)."""
    pools = [_options(problem, p) for p in problem.pools]
    best, best_key = None, None
    for combo in itertools.product(*pools):
        gpus = sum(o[2] for o in combo)
        if problem.budget is not None and gpus > problem.budget:
            continue
        if problem.objective == "throughput":
            key = -min(o[1] for o in combo)
        else:
            key = sum(o[3] for o in combo)
        if best_key is None or key < best_key:
            best_key, best = key, combo
    if best is None:
        return ServeSolution("infeasible", "exhaustive")
    counts = {k: v for o in best for k, v in o[0].items()}
    return ServeSolution("optimal", "exhaustive", counts=counts)


def table_incumbent(problem: ServeProblem) -> dict | None:
    """A fleet read off the tables in one pass, for a solve the time limit stopped before
    its first plan: one layout per pool. With a rate, each pool's cheapest fleet of one
    layout that covers it (the fewest replicas of each row that do); with a GPU budget and
    the throughput objective, each pool's layout of most capacity per GPU, the budget
    split between the pools to the best of their least served rate. Replica counts
    (:func:`feasible`), or None when such a fleet breaks the budget. Proves nothing."""
    pools = list(problem.pools)
    if any(not problem.pools[p] for p in pools):
        return None
    if problem.objective != "throughput":
        counts = {}
        for p in pools:
            rows = problem.pools[p]
            need = [(problem.coef(r) * -(-problem.rate // r.cap), i) for i, r in enumerate(rows)
                    if -(-problem.rate // r.cap) <= problem.bound(r)]
            if not need:
                return None
            _, i = min(need)
            counts[(p, i)] = -(-problem.rate // rows[i].cap)
        return counts if feasible(problem, counts) else None
    best = {p: max(range(len(problem.pools[p])), key=lambda i: (
        problem.pools[p][i].cap / problem.pools[p][i].gpus, -i)) for p in pools}
    rows = {p: problem.pools[p][best[p]] for p in pools}
    if len(pools) == 1:
        (p,) = pools
        n = problem.bound(rows[p])
        return {(p, best[p]): n} if n > 0 else None
    a, b = pools  # two pools (prefill, decode): the budget split near where both serve alike
    ra, rb = rows[a], rows[b]
    even = problem.budget * rb.cap // (ra.gpus * rb.cap + rb.gpus * ra.cap)
    top = None
    for na in range(max(1, even - 2), min(even + 3, problem.bound(ra)) + 1):
        nb = min((problem.budget - na * ra.gpus) // rb.gpus, problem.bound(rb))
        if nb < 1:
            break
        served = min(na * ra.cap, nb * rb.cap)
        if top is None or served > top[0]:
            top = (served, {(a, best[a]): na, (b, best[b]): nb})
    return None if top is None else top[1]


def presolve(problem: ServeProblem) -> ServeProblem:
    """Drop every row another row of its pool dominates: at least its capacity with at
    most its GPUs and its objective coefficient (for throughput: GPUs only). Exact: any
    solution using a dominated row stays feasible, no worse and with no more layouts when
    that row's replicas move to the dominating one. Among equal rows the first stays."""
    pools = {}
    for pool, rows in problem.pools.items():
        order = sorted(range(len(rows)), key=lambda i: (-rows[i].cap, i))
        kept: list[Row] = []
        for i in order:
            r = rows[i]
            key = (r.gpus, 0 if problem.objective == "throughput" else problem.coef(r))
            if not any(k.gpus <= key[0] and (problem.objective == "throughput"
                                             or problem.coef(k) <= key[1]) for k in kept):
                kept.append(r)
        pools[pool] = kept
    return ServeProblem(pools, problem.objective, problem.rate, problem.budget,
                        problem.max_layouts)
