"""A small integer linear model, emitted to CP-SAT or PuLP.

One model description, two solvers:

- CP-SAT: integer variables (times in picoseconds, memory in bytes);
- MILP (PuLP + HiGHS): binaries stay binary, the other variables become continuous and
  are rescaled per dimension (times to microseconds, memory to MiB) so that HiGHS sees
  well-conditioned rows.

Every row is linear and unconditional: the formulation's disjunction over points is in
convex-hull form (``formulations.train.build``), so no indicator or big-M row is needed.

A *session* keeps the solver model so that cuts can be added between solves (the top-K
and proof loop in :mod:`formulations.train.search`).

This module is the only one that talks to a solver: the training, serving and DLRM
formulations build a :class:`LinearModel` and solve it in a session (the DLRM LP bound, a
float LP handed over in bulk, through :func:`highs_bound`). A session's status is
``optimal`` only with a proof; an answer cut short by the time (or memory) limit is
``feasible``.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

from planner.errors import InputError

Expr = dict[int, int]  # variable index -> integer coefficient

#: Default rescaling of continuous MILP variables per dimension (model units per MILP unit).
UNIT = {"time": 1e6, "memory": float(2**20), "count": 1.0}


@dataclass
class Var:
    name: str
    lb: int
    ub: int
    binary: bool = False
    dim: str = "count"
    integer: bool = False  # general integer in the MILP too (counts of identical items)


@dataclass
class Constraint:
    expr: Expr
    lb: int | None
    ub: int | None
    dim: str = "count"


@dataclass
class LinearModel:
    vars: list[Var] = field(default_factory=list)
    cons: list[Constraint] = field(default_factory=list)
    objective: Expr = field(default_factory=dict)
    objective_dim: str = "time"
    units: dict[str, float] = field(default_factory=lambda: dict(UNIT))
    maximize: bool = False

    def var(self, name: str, lb: int, ub: int, dim: str = "count",
            integer: bool = False) -> int:
        assert lb <= ub, (name, lb, ub)
        self.vars.append(Var(name, int(lb), int(ub), dim=dim, integer=integer))
        return len(self.vars) - 1

    def binary(self, name: str) -> int:
        self.vars.append(Var(name, 0, 1, binary=True))
        return len(self.vars) - 1

    def add(self, expr: Expr, lb: int | None = None, ub: int | None = None,
            dim: str = "count") -> Constraint:
        e = {k: int(v) for k, v in expr.items() if v}
        c = Constraint(e, None if lb is None else int(lb), None if ub is None else int(ub),
                       dim)
        self.cons.append(c)
        return c

    def bounds(self, expr: Expr) -> tuple[int, int]:
        lo = hi = 0
        for i, c in expr.items():
            v = self.vars[i]
            lo += min(c * v.lb, c * v.ub)
            hi += max(c * v.lb, c * v.ub)
        return lo, hi


@dataclass
class SolverOutcome:
    status: str  # "optimal" (proven), "feasible" (limit reached), "infeasible", "unknown"
    values: list[int] | None
    objective: float | None
    wall_s: float
    bound: float | None = None  # the solver's best objective bound (None where it has none)


# ---- CP-SAT ------------------------------------------------------------------------------
class CpsatSession:
    """CP-SAT on ``lm``. Its own presolve is off unless ``presolve``: on the training and
    DLRM models (one-hot blocks, coefficients up to ~1e13) ortools 9.15's presolve removed
    a feasible better solution ("presolve broke a feasible hint"), the search is twice as
    fast without it, and on 100 tables x 128 ranks it took 14 s; the serving model is small
    and keeps it."""

    def __init__(self, lm: LinearModel, workers: int = 2,
                 log: Callable[[str], None] | None = None, presolve: bool = False):
        from ortools.sat.python import cp_model

        self._cp = cp_model
        self.lm = lm
        self.model = cp_model.CpModel()
        m = self.model
        self.xs = [m.new_bool_var(v.name) if v.binary else m.new_int_var(v.lb, v.ub, v.name)
                   for v in lm.vars]
        for x, v in zip(self.xs, lm.vars):
            if v.binary and v.lb == v.ub:
                m.add(x == v.lb)
        for c in lm.cons:
            self.add_constraint(c)
        objective = cp_model.LinearExpr.weighted_sum(
            [self.xs[i] for i in lm.objective], list(lm.objective.values()))
        if lm.maximize:
            m.maximize(objective)
        else:
            m.minimize(objective)
        self.workers = workers
        self.log = log
        self.presolve = presolve

    def hint(self, values: dict[int, int]) -> None:
        """A warm start: ``values[i]`` for variable ``i`` (those left out are free)."""
        for i, v in values.items():
            self.model.add_hint(self.xs[i], v)

    def add_constraint(self, c: Constraint) -> None:
        cp = self._cp
        expr = cp.LinearExpr.weighted_sum([self.xs[i] for i in c.expr], list(c.expr.values()))
        lo = c.lb if c.lb is not None else cp.INT_MIN
        hi = c.ub if c.ub is not None else cp.INT_MAX
        self.model.add_linear_constraint(expr, lo, hi)

    def solve(self, time_limit_s: float, memory_mb: int | None = None) -> SolverOutcome:
        """Solve within ``time_limit_s`` (and, given ``memory_mb``, CP-SAT's own resident
        memory limit: it stops with its best solution, not std::bad_alloc)."""
        cp = self._cp
        solver = cp.CpSolver()
        solver.parameters.max_time_in_seconds = max(time_limit_s, 0.01)
        solver.parameters.num_workers = self.workers
        solver.parameters.cp_model_presolve = self.presolve
        if memory_mb is not None:
            solver.parameters.max_memory_in_mb = memory_mb
        if self.log:
            solver.parameters.log_search_progress = True
            solver.log_callback = self.log
        t0 = time.perf_counter()
        status = solver.solve(self.model)
        wall = time.perf_counter() - t0
        name = {cp.OPTIMAL: "optimal", cp.FEASIBLE: "feasible",
                cp.INFEASIBLE: "infeasible"}.get(status, "unknown")
        if name in ("optimal", "feasible"):
            return SolverOutcome(name, [int(solver.value(x)) for x in self.xs],
                                 solver.objective_value, wall, solver.best_objective_bound)
        return SolverOutcome(name, None, None, wall)


# ---- MILP (PuLP + HiGHS) -----------------------------------------------------------------
class MilpSession:
    def __init__(self, lm: LinearModel, log: Callable[[str], None] | None = None,
                 attempts: tuple[dict, ...] | None = None):
        import pulp

        self._pulp = pulp
        self.lm = lm
        self.prob = pulp.LpProblem("planner", pulp.LpMaximize if lm.maximize
                                   else pulp.LpMinimize)
        self.xs = []
        new_var = getattr(self.prob, "add_variable", None)  # PuLP >= 3.3; LpVariable before
        for i, v in enumerate(lm.vars):
            name, u = (f"b{i}", 1.0) if v.binary else (f"x{i}", lm.units[v.dim])
            u = 1.0 if v.integer else u
            kw = dict(lowBound=v.lb / u, upBound=v.ub / u,
                      cat="Binary" if v.binary else "Integer" if v.integer else "Continuous")
            self.xs.append(new_var(name, **kw) if new_var else pulp.LpVariable(name, **kw))
        ou = lm.units[lm.objective_dim]
        self.prob += pulp.lpSum(self._coef(i, coef, ou) * self.xs[i]
                                for i, coef in lm.objective.items())
        self.ncons = 0
        for c in lm.cons:
            self.add_constraint(c)
        self.log = log
        self.attempts = attempts or _HIGHS_ATTEMPTS

    def _coef(self, i: int, coef: float, row_unit: float) -> float:
        v = self.lm.vars[i]
        return coef * (1.0 if v.binary or v.integer else self.lm.units[v.dim]) / row_unit

    def add_constraint(self, c: Constraint) -> None:
        """Add a row, scaled so that its largest coefficient is 1.

        The hull model mixes microsecond terms with rows multiplied by ``KAPPA_DEN x layers``
        (coefficients up to ~1e10); unscaled, HiGHS then rejects its own incumbents for
        1e-8 violations. Scaling a row leaves its feasible set unchanged.
        """
        pulp = self._pulp
        u = self.lm.units[c.dim]
        coefs = {i: self._coef(i, coef, u) for i, coef in c.expr.items()}
        rows = []  # (coefficients, sense, rhs) in row units
        if c.ub is not None:
            rows.append((coefs, "<=", c.ub / u))
        if c.lb is not None:
            rows.append((coefs, ">=", c.lb / u))
        for row, sense, rhs in rows:
            top = max((abs(a) for a in row.values() if a), default=1.0)
            expr = pulp.LpAffineExpression([(self.xs[i], a / top) for i, a in row.items() if a])
            self.ncons += 1
            name = f"r{self.ncons}"
            self.prob += (expr <= rhs / top, name) if sense == "<=" else (expr >= rhs / top, name)

    def solve(self, time_limit_s: float) -> SolverOutcome:
        """Solve with HiGHS; on a numerical "solve error" retry with safer settings.

        HiGHS may reject its own incumbent when a row is violated by ~1e-8 (a
        "Solve error" status). The retries turn off HiGHS's presolve and then loosen the
        feasibility tolerance; every answer is re-checked by the exact evaluator anyway.
        """
        pulp = self._pulp
        t0 = time.perf_counter()
        for attempt in self.attempts:
            left = max(time_limit_s - (time.perf_counter() - t0), 0.01)
            with _quiet_stdout(self.log is None):
                self.prob.solve(_highs(left, self.log is not None, **attempt))
            status = pulp.LpStatus[self.prob.status]
            if status in ("Optimal", "Infeasible") or time.perf_counter() - t0 >= time_limit_s:
                break
        wall = time.perf_counter() - t0
        if status == "Optimal":
            proven = proven_optimal(self.prob)
            vals = []
            for x, v in zip(self.xs, self.lm.vars):
                val = x.value() or 0.0
                vals.append(int(round(val)) if v.binary or v.integer
                            else int(round(val * self.lm.units[v.dim])))
            obj = pulp.value(self.prob.objective) * self.lm.units[self.lm.objective_dim]
            bound = self._dual_bound() if self._is_mip() else obj if proven else None
            return SolverOutcome("optimal" if proven else "feasible", vals, obj, wall, bound)
        if status == "Infeasible":
            return SolverOutcome("infeasible", None, None, wall)
        return SolverOutcome("unknown", None, None, wall)

    def _is_mip(self) -> bool:
        return any(v.binary or v.integer for v in self.lm.vars)

    def _dual_bound(self) -> float | None:
        """HiGHS's MIP dual bound in model units (a lower bound when minimizing, an upper
        one when maximizing), or None where PuLP's solver exposes none (CBC) or HiGHS has
        no finite one. PuLP hands HiGHS the negated objective to maximize. A pure LP
        leaves it unset (0)."""
        highs = getattr(self.prob, "solverModel", None)
        info = getattr(highs, "getInfo", None)
        if info is None:
            return None
        bound = float(getattr(info(), "mip_dual_bound", math.nan))
        if not math.isfinite(bound):
            return None
        return (-bound if self.lm.maximize else bound) * self.lm.units[self.lm.objective_dim]


# ---- a float LP/MIP bound, handed to HiGHS in bulk -------------------------------------
Row = tuple[dict[int, float], float, float]  # coefficients, lower, upper (+-inf: none)


def highs_bound(lb: list[float], ub: list[float], rows: list[Row], cost: dict[int, float],
                integer: list[int], time_limit_s: float | None, mip_time_limit_s: float
                ) -> tuple[float | None, bool]:
    """Minimize ``cost`` over columns in [lb, ub] and ``rows``, columns ``integer``
    integral: (the optimum, or with integer columns HiGHS's proven dual bound even when
    cut short; whether it finished within the limit). A pure LP cut short proves nothing:
    None. Not a :class:`LinearModel` in a :class:`MilpSession`: the coefficients are
    fractional, the answer wanted is HiGHS's dual bound (which PuLP does not report), and
    the arrays go to HiGHS at once where PuLP builds a Python object per nonzero (the DLRM
    bound has up to a million)."""
    import highspy
    import numpy as np

    h = _highs_lp(lb, ub, rows, cost)
    if time_limit_s is not None:
        h.setOptionValue("time_limit", float(time_limit_s))
    if integer:
        k = len(integer)
        h.changeColsIntegrality(k, np.array(integer, dtype=np.int32),
                                np.array([highspy.HighsVarType.kInteger] * k))
        h.setOptionValue("mip_rel_gap", 0.0)
        h.setOptionValue("time_limit", min(mip_time_limit_s, time_limit_s or math.inf))
    h.run()
    status, info = h.getModelStatus(), h.getInfo()
    finished = status != highspy.HighsModelStatus.kTimeLimit
    if integer and status in (highspy.HighsModelStatus.kOptimal,
                              highspy.HighsModelStatus.kTimeLimit):
        bound = float(info.mip_dual_bound)  # proven, whether or not the search finished
        return (bound if math.isfinite(bound) else None), finished
    if status != highspy.HighsModelStatus.kOptimal:
        return None, finished
    return float(info.objective_function_value), True


def _highs_lp(lb: list[float], ub: list[float], rows: list[Row], cost: dict[int, float]):
    """A quiet HiGHS instance holding the columns, rows and cost (CSR, one call each)."""
    import highspy
    import numpy as np

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    n = len(lb)
    h.addVars(n, np.array(lb), np.array(ub))
    h.changeColsCost(n, np.arange(n, dtype=np.int32),
                     np.array([cost.get(i, 0.0) for i in range(n)]))
    starts, idx, val = [], [], []
    for coefs, _, _ in rows:
        starts.append(len(idx))
        idx += list(coefs)
        val += list(coefs.values())
    h.addRows(len(rows), np.array([r[1] for r in rows]), np.array([r[2] for r in rows]),
              len(idx), np.array(starts, dtype=np.int32), np.array(idx, dtype=np.int32),
              np.array(val, dtype=float))
    return h


def proven_optimal(prob) -> bool:
    """Whether a solved PuLP problem's answer is proven optimal: PuLP reports a
    time-limited incumbent as "Optimal" too; its ``sol_status`` tells them apart."""
    import pulp

    return (pulp.LpStatus[prob.status] == "Optimal"
            and prob.sol_status == pulp.constants.LpSolutionOptimal)


# Tried in order until HiGHS returns Optimal or Infeasible (see MilpSession.solve).
_HIGHS_ATTEMPTS = (
    {"tol": 1e-7, "presolve": "on"},
    {"tol": 1e-7, "presolve": "off"},
    {"tol": 1e-6, "presolve": "off"},
)


@contextlib.contextmanager
def _quiet_stdout(quiet: bool):
    """Silence C-level stdout: HiGHS 1.12 prints debug lines even with output off, and they
    would corrupt ``--json`` output."""
    if not quiet:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _highs(time_limit_s: float, verbose: bool, tol: float = 1e-7, presolve: str = "on"):
    import pulp

    cls = getattr(pulp, "HiGHS", None)
    if cls is not None and cls().available():
        return cls(msg=verbose, timeLimit=time_limit_s, gapRel=1e-9, gapAbs=0.0, threads=1,
                   primal_feasibility_tolerance=tol, mip_feasibility_tolerance=tol,
                   presolve=presolve)
    cbc = pulp.PULP_CBC_CMD(msg=verbose, timeLimit=time_limit_s, gapRel=1e-9)
    if cbc.available():
        return cbc
    raise RuntimeError("no MILP solver available: install highspy (pip install highspy)")


#: Largest magnitude a row may reach. CP-SAT's presolve and LP work in doubles: rows whose
#: terms reach ~1e16 lose exactness (seen here: a feasible better solution was pruned), so
#: every coefficient x bound stays below 2^53 / 64.
SAFE = 2**53 // 64


@dataclass(frozen=True)
class Ticks:
    """Integer time unit: the finest power-of-ten fraction of a second that keeps every
    row below ``SAFE`` (picoseconds for small jobs, nanoseconds for the largest)."""

    per_s: float

    def down(self, x: float) -> int:
        return int(math.floor(x * self.per_s))

    def up(self, x: float) -> int:
        return int(math.ceil(x * self.per_s))


def choose_ticks(t_ub_s: float, multiplier: float) -> Ticks:
    per_s = 1e12
    while per_s > 1e3 and t_ub_s * per_s * multiplier > SAFE:
        per_s /= 10
    return Ticks(per_s)


def check_magnitudes(lm: LinearModel) -> None:
    """Refuse a model whose rows reach the magnitudes where double arithmetic goes inexact.

    Only absurd inputs get here (a latency of years, a bandwidth of bytes per second), so
    it is the input that is refused, with the quantity that overflowed."""
    for c in lm.cons:
        lo, hi = lm.bounds(c.expr)
        if max(abs(lo), abs(hi)) > 64 * SAFE:
            what = {"time": "an iteration time", "memory": "a memory total"}.get(
                getattr(c, "dim", ""), "a row")
            raise InputError(
                f"{what} of some candidate plan reaches {max(abs(lo), abs(hi)):.3g} integer "
                f"units, beyond what the solver represents exactly (2^53): check the "
                f"cluster's latency_us and bandwidth_GBps and the GPU's peak_tflops and "
                f"hbm_gib for implausible values")
