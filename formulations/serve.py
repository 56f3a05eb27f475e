"""Exact serving search: integer replica counts per pool over the tabulated layouts
(:mod:`formulations.serve_space`), solved by CP-SAT, by a MILP (PuLP + HiGHS) and by a
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

from formulations.serve_space import Row
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
    status: str  # optimal or infeasible
    backend: str
    objective: int | None = None
    counts: dict = field(default_factory=dict)  # (pool, row index) -> replicas
    wall_s: float = 0.0


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
    out.wall_s = time.perf_counter() - t0
    if out.status == "optimal":
        out.counts = {k: n for k, n in out.counts.items() if n > 0}
        assert feasible(problem, out.counts), "the solver's answer breaks a constraint"
        out.objective = value_of(problem, out.counts)
        if out.objective <= 0:  # throughput: no replica fits the budget, nothing served
            out.status, out.objective, out.counts = "infeasible", None, {}
    return out


def _keys(problem: ServeProblem) -> list[tuple[str, int]]:
    return [(p, i) for p, rows in problem.pools.items() for i in range(len(rows))]


def _row(problem: ServeProblem, key: tuple[str, int]) -> Row:
    return problem.pools[key[0]][key[1]]


def _cpsat(problem: ServeProblem, time_limit_s: float) -> ServeSolution:
    from ortools.sat.python import cp_model

    m = cp_model.CpModel()
    keys = _keys(problem)
    n = {k: m.new_int_var(0, problem.bound(_row(problem, k)), f"n{k}") for k in keys}
    y = {k: m.new_bool_var(f"y{k}") for k in keys}
    for k in keys:
        m.add(n[k] <= problem.bound(_row(problem, k)) * y[k])
    served = {p: sum(_row(problem, k).cap * n[k] for k in keys if k[0] == p) for p in problem.pools}
    for p in problem.pools:
        m.add(sum(y[k] for k in keys if k[0] == p) <= problem.max_layouts)
    if problem.budget is not None:
        m.add(sum(_row(problem, k).gpus * n[k] for k in keys) <= problem.budget)
    if problem.objective == "throughput":
        z = m.new_int_var(0, max(r.cap for rows in problem.pools.values() for r in rows)
                          * problem.budget, "z")
        for p in problem.pools:
            m.add(z <= served[p])
        m.maximize(z)
    else:
        for p in problem.pools:
            m.add(served[p] >= problem.rate)
        m.minimize(sum(problem.coef(_row(problem, k)) * n[k] for k in keys))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(time_limit_s, 0.01)
    solver.parameters.num_workers = 2
    status = solver.solve(m)
    if status != cp_model.OPTIMAL:
        return ServeSolution("infeasible" if status == cp_model.INFEASIBLE else "time_limit",
                             "cpsat")
    return ServeSolution("optimal", "cpsat", counts={k: int(solver.value(n[k])) for k in keys})


def _milp(problem: ServeProblem, time_limit_s: float) -> ServeSolution:
    """The same model in PuLP for HiGHS, each row scaled to unit size (coverage rows by
    R, the budget by N) and tolerances at 1e-9, so that no integer constraint is missed
    by a unit."""
    import pulp

    from formulations.linear import _highs, _quiet_stdout, proven_optimal

    keys = _keys(problem)
    sense = pulp.LpMaximize if problem.objective == "throughput" else pulp.LpMinimize
    prob = pulp.LpProblem("serve", sense)
    n = {k: prob.add_variable(f"n_{k[0]}_{k[1]}", 0, problem.bound(_row(problem, k)), cat="Integer")
         for k in keys}
    y = {k: prob.add_variable(f"y_{k[0]}_{k[1]}", cat="Binary") for k in keys}
    for k in keys:
        prob += n[k] <= problem.bound(_row(problem, k)) * y[k]
    for p in problem.pools:
        prob += pulp.lpSum(y[k] for k in keys if k[0] == p) <= problem.max_layouts
    if problem.budget is not None:
        prob += pulp.lpSum(_row(problem, k).gpus / problem.budget * n[k] for k in keys) <= 1
    _milp_objective(problem, prob, n, keys)
    with _quiet_stdout(True):
        prob.solve(_highs(time_limit_s, False, tol=1e-9))
    if not proven_optimal(prob):  # a time-limited incumbent is no proof
        return ServeSolution("infeasible" if pulp.LpStatus[prob.status] == "Infeasible"
                             else "time_limit", "milp")
    return ServeSolution("optimal", "milp",
                         counts={k: int(round(n[k].value() or 0)) for k in keys})


def _milp_objective(problem: ServeProblem, prob, n: dict, keys: list) -> None:
    import pulp

    if problem.objective == "throughput":
        # z: the served rate over its largest possible value, continuous in [0, 1] (the
        # served rates are integers, so the optimum sits on one of them)
        top = max(r.cap for rows in problem.pools.values() for r in rows) * problem.budget
        z = prob.add_variable("z", 0, 1)
        for p in problem.pools:
            prob += pulp.lpSum(_row(problem, k).cap / top * n[k] for k in keys if k[0] == p) >= z
        prob += z
        return
    for p in problem.pools:
        prob += pulp.lpSum(_row(problem, k).cap / problem.rate * n[k]
                           for k in keys if k[0] == p) >= 1
    prob += pulp.lpSum(problem.coef(_row(problem, k)) * n[k] for k in keys)


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
