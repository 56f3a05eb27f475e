"""Solve the DLRM sharding model (CP-SAT or MILP), or enumerate every plan of a tiny
instance (exhaustive: the reference), and check the answer with the exact evaluator."""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass

from formulations.dlrm.build import DLRMVars, build, placement
from formulations.dlrm.bound import lp_bound
from formulations.dlrm.greedy import greedy_assignment
from formulations.dlrm.local import local_plan, local_state, state_plan
from formulations.linear import CpsatSession, MilpSession, SolverOutcome
from planner.costmodel.dlrm.model import Option, links, table_options
from planner.costmodel.dlrm.evaluate import DLRMEstimate, Loads, compose, evaluate_dlrm
from planner.errors import InfeasibleError, InputError, ResourceError
from planner.specs.cluster import ClusterSpec
from planner.specs.dlrm import DLRMPlan, DLRMSpec
from planner.costmodel.dlrm.model import dense_cost, usable_hbm_bytes

#: HiGHS 1.12 claims optimality for a slower plan now and then, with either presolve
#: setting: with it, a plan 6 % slower than the optimum on a 55-variable instance
#: (tests/test_dlrm.py, random_instance(41)); without it, one 0.4 % slower
#: (tests/test_dlrm.py, uvm_instance(35)). The MILP backend runs both and keeps the faster
#: answer (:func:`_milp`); each is tried with the next settings on a numerical failure.
MILP_RUNS = (({"tol": 1e-7, "presolve": "off"}, {"tol": 1e-6, "presolve": "off"}),
             ({"tol": 1e-7, "presolve": "on"}, {"tol": 1e-6, "presolve": "on"}))
#: Plans the exhaustive backend enumerates at most (it is the reference on tiny instances).
MAX_EXHAUSTIVE = 200_000
#: Share of CP-SAT's time limit the local search (formulations/dlrm/local.py) may use for
#: its warm start; on small instances it stops much earlier (no improving move left).
LOCAL_SHARE = 0.5
#: Variables (one per option, and per rank or node for placed options) beyond which the
#: exact model is not built. Measured on zionex-128 with 8 CP-SAT workers and a 4 s limit
#: (peak resident / address space): 162k variables (400 distinct tables) 0.54 / 0.80 GB,
#: 406k 1.1 / 1.4 GB, 812k 2.0 / 2.3 GB (std::bad_alloc under a 2 GiB address-space cap):
#: about 2.3 KB per variable over 0.4 GB; CP-SAT's search then grows (162k: 2.4 / 3.3 GB
#: after 60 s; :data:`CPSAT_MEMORY_MB` stops it). 250k keeps building and loading under
#: 1 GB. Above it the local search answers alone, with the gap to the LP bound (status
#: ``heuristic``).
MAX_MODEL_VARS = 250_000
#: CP-SAT's memory grows with its search, about 1.4-1.7 KB per variable per search worker
#: within seconds (162k variables, 8 workers: 0.45 GB loaded, 2.2 GB resident and 3.4 GB
#: of address space 12 s later; 3 workers: 1.2 and 1.9 GB after 40 s; 2 workers: 1.0 and
#: 1.6 GB), and a std::bad_alloc in one
#: of its threads aborts the process (uncatchable). So the workers are as many as
#: :data:`CPSAT_SEARCH_BYTES` holds at :data:`CPSAT_WORKER_BYTES_PER_VAR` (at least one),
#: and CP-SAT's own memory limit (:data:`CPSAT_MEMORY_MB`, resident, checked as it
#: searches) stops it with its best plan.
CPSAT_WORKER_BYTES_PER_VAR = 2_000
CPSAT_SEARCH_BYTES = 768 << 20
CPSAT_MEMORY_MB = 1000
#: Seconds per variable of the work before CP-SAT searches (building the model, completing
#: the warm start, loading it into CP-SAT): 21 us measured on a shared 2-core machine (406k
#: variables: 2.3 + 1.4 + 4.8 s), none of it interruptible. The exact model is built only
#: when that work fits in :data:`EXACT_SHARE` of the time limit; else the local search
#: answers (500 distinct tables on 128 GPUs, 203k variables, stay exact at 10 s).
EXACT_S_PER_VAR = 2e-5
EXACT_SHARE = 0.5
#: ... but a model this small is always exact (0.2 s of building at most; the local search
#: is no faster there, and proves nothing).
MIN_EXACT_VARS = 10_000
#: ... and then the search may use this share of the time limit, the LP bound the rest.
HEURISTIC_SEARCH_SHARE = 0.6
#: Share of the time limit the LP bound may take beside the exact model.
LP_SHARE = 0.2
#: ... and runs only on models with at least this many table entries: with few entries
#: (repeated tables are one entry with ``count``) CP-SAT proves the optimum quickly, and the
#: search, which handles every copy separately, would only cost time.
LOCAL_MIN_ENTRIES = 6


@dataclass(frozen=True)
class DLRMSolution:
    plan: DLRMPlan
    estimate: DLRMEstimate
    backend: str
    status: str  # "optimal", "time_limit" or "heuristic" (no exact model: MAX_MODEL_VARS)
    solve_time_s: float
    model_objective_s: float | None  # the integer model's value of the plan
    bound_s: float | None = None  # a lower bound on every plan's time (CP-SAT's best bound)
    bound_cut: bool = False  # the LP bound stopped at the time limit (a weaker bound, or none)
    #: "solver" (the exact model's solver or its warm start), "local_search" (status
    #: heuristic) or "greedy": TorchRec's greedy partitioner's plan, nothing faster found
    found_by: str = "solver"

    @property
    def optimality_gap(self) -> float | None:
        """(exact - bound) / exact: the integer model's rounding when proven optimal, the
        distance to the solver's bound when the time ran out."""
        lb = self.model_objective_s if self.status == "optimal" else self.bound_s
        if lb is None:
            return None
        t = self.estimate.iteration_time_s
        return max(0.0, (t - lb) / t)


def solve_sharding(model: DLRMSpec, cluster: ClusterSpec, backend: str = "cpsat",
                   time_limit_s: float = 60.0, kinds: tuple[str, ...] | None = None,
                   workers: int = 8) -> DLRMSolution:
    """The plan of least iteration time (proven optimal unless the time runs out)."""
    if backend == "exhaustive":
        return exhaustive(model, cluster, kinds)
    if backend not in ("cpsat", "milp"):
        raise InputError(f"backend {backend!r}: expected cpsat, milp or exhaustive")
    t0 = time.perf_counter()
    options = [table_options(model, cluster, i, kinds) for i in range(len(model.tables))]
    size = _vars_of(model, cluster, options)
    if size > max_exact_vars(time_limit_s):
        return _heuristic(model, cluster, backend, time_limit_s, kinds, size, t0, options)
    del options  # the exact model makes its own
    try:
        return _exact(model, cluster, backend, time_limit_s, kinds, workers, t0)
    except MemoryError:  # std::bad_alloc from CP-SAT or HiGHS comes back as MemoryError
        pass  # the exception (and with it the model) released before the message
    raise ResourceError(
        f"out of memory solving the exact DLRM sharding model ({size:,} variables; the "
        f"exact model is built up to {MAX_MODEL_VARS:,}): give the process more memory, or "
        "repeat identical tables with 'count' (one entry per shape keeps the model small)")


def max_exact_vars(time_limit_s: float) -> int:
    """The largest exact model built under ``time_limit_s``: :data:`MAX_MODEL_VARS`
    (memory), fewer (down to :data:`MIN_EXACT_VARS`) when building it would take more than
    :data:`EXACT_SHARE` of the limit."""
    by_time = max(MIN_EXACT_VARS, int(EXACT_SHARE * time_limit_s / EXACT_S_PER_VAR))
    return min(MAX_MODEL_VARS, by_time)


def _exact(model: DLRMSpec, cluster: ClusterSpec, backend: str, time_limit_s: float,
           kinds: tuple[str, ...] | None, workers: int, t0: float) -> DLRMSolution:
    """The exact model, warm-started (CP-SAT) from the greedy plans and the local search."""
    lm, vm = build(model, cluster, kinds)
    # 0.4 s at 500 tables (cut short: no LP bound), never more than half the limit
    lp_limit_s = min(max(LP_SHARE * time_limit_s, 0.5), 0.5 * time_limit_s)
    lp_s, finished = lp_bound(model, cluster, kinds, lp_limit_s)
    bound = max(work_bound_s(model, cluster), lp_s or 0.0)
    hint, from_greedy = None, False
    if backend == "cpsat":
        start, from_greedy = greedy_plan(model, cluster, vm, t0 + LOCAL_SHARE * time_limit_s)
        hint = complete_hint(lm, start) if start else None
        reserve = min(0.15 * time_limit_s, 8e-6 * len(lm.vars))  # decoding, checking
        if hint is not None and time.perf_counter() >= t0 + time_limit_s - reserve:
            # the set-up took the limit: loading the model into CP-SAT (seconds on large
            # models, not interruptible) would only run past it; the best start answers
            out = SolverOutcome("unknown", None, None, 0.0)
        else:
            out = _cpsat(lm, hint, t0 + time_limit_s - reserve, workers)
    else:
        out = _milp(lm, t0 + time_limit_s)
    if out.status == "infeasible":
        raise _infeasible(model, cluster)
    values = _better(model, cluster, vm, out, hint)
    status = "optimal" if out.status == "optimal" and values is out.values else "time_limit"
    if out.bound is not None:  # CP-SAT's best bound
        bound = max(bound, (out.bound + vm.constant_ticks) / vm.ticks.per_s)
    plan = None if values is None else decode(model, vm, values)
    est = None if plan is None else evaluate_dlrm(model, cluster, plan)
    base = None if status == "optimal" else greedy_baseline(model, cluster, vm.options)
    if est is None or (base is not None and base[1].iteration_time_s < est.iteration_time_s):
        # nothing (or nothing faster than TorchRec's greedy) within the limit: the greedy
        # plan, whose integer-model value is not computed (it is not the solver's)
        if base is None:
            raise InfeasibleError(f"no sharding plan found within {time_limit_s:g} s",
                                  reasons=["time limit", "TorchRec's greedy partitioner "
                                           "places no plan that fits either"],
                                  hints=["raise --time-limit"], status="time_limit")
        return DLRMSolution(*base, backend, "time_limit", time.perf_counter() - t0, None,
                            bound, bound_cut=not finished, found_by="greedy")
    value = (sum(values[i] * c for i, c in lm.objective.items()) + vm.constant_ticks)
    # the greedy start, nothing faster found
    greedy = from_greedy and values is not out.values
    return DLRMSolution(plan, est, backend, status, time.perf_counter() - t0,
                        value / vm.ticks.per_s, bound,
                        bound_cut=not finished and status != "optimal",
                        found_by="greedy" if greedy else "solver")


def model_vars(model: DLRMSpec, cluster: ClusterSpec,
               kinds: tuple[str, ...] | None = None) -> int:
    """Variables of the exact model :func:`formulations.dlrm.build.build` would make (its
    assignment variables; the phase and indicator variables are a handful more)."""
    return _vars_of(model, cluster, [table_options(model, cluster, i, kinds)
                                     for i in range(len(model.tables))])


def _vars_of(model: DLRMSpec, cluster: ClusterSpec, options: list[list[Option]]) -> int:
    ln = links(model, cluster)
    per = {"ranks": ln.ranks, "node": ln.nodes, "all": 0}
    return sum(1 + per[o.scope] for opts in options for o in opts)


def _heuristic(model: DLRMSpec, cluster: ClusterSpec, backend: str, time_limit_s: float,
               kinds: tuple[str, ...] | None, size: int, t0: float,
               options: list[list[Option]]) -> DLRMSolution:
    """Too large to build (:func:`max_exact_vars`): the local search's plan, checked by
    the evaluator, with the best of the work and LP bounds beside it."""
    st = local_state(model, cluster, options, t0 + HEURISTIC_SEARCH_SHARE * time_limit_s)
    plan = state_plan(model, options, st) if st is not None else None
    est = evaluate_dlrm(model, cluster, plan) if plan is not None else None
    found_by = "local_search"
    base = greedy_baseline(model, cluster, options)
    if base is not None and (est is None or not est.feasible
                             or base[1].iteration_time_s < est.iteration_time_s):
        # the search missed what TorchRec's greedy finds (tight memory), or did worse
        plan, est = base
        found_by = "greedy"
    if est is None or not est.feasible:
        err = _infeasible(model, cluster)
        err.reasons.append(f"the exact model would have {size:,} variables (more than "
                           f"{max_exact_vars(time_limit_s):,}: memory, time limit), and the "
                           "local search found no plan within memory"
                           + (f": {est.reasons[0]}" if est else ""))
        err.hints.append("repeat identical tables with 'count' (one entry per shape keeps "
                         "the exact model small)")
        err.status = "time_limit"  # a plan may exist: the search is not a proof
        raise err
    lp_s, finished = lp_bound(model, cluster, kinds, t0 + time_limit_s - time.perf_counter())
    bound = max(work_bound_s(model, cluster), lp_s or 0.0)
    return DLRMSolution(plan, est, backend, "heuristic", time.perf_counter() - t0, None, bound,
                        bound_cut=not finished, found_by=found_by)


def greedy_baseline(model: DLRMSpec, cluster: ClusterSpec, options: list[list[Option]]
                    ) -> tuple[DLRMPlan, DLRMEstimate] | None:
    """TorchRec's greedy partitioner's plan and its estimate, when it places every table
    and the evaluator finds it fits; else None. Cheap (one pass over the tables: 0.1 s at
    1,040 tables), so every time-limited answer is at least this good."""
    found = greedy_assignment(model, cluster, options)
    if found is None:
        return None
    plan = DLRMPlan(tables=[placement(model, t, options[t][o], model.tables[t].count, ranks,
                                      None) for t, (o, ranks) in sorted(found.items())])
    est = evaluate_dlrm(model, cluster, plan)
    return (plan, est) if est.feasible else None


def _better(model: DLRMSpec, cluster: ClusterSpec, vm: DLRMVars, out: SolverOutcome,
            hint: dict[int, int] | None) -> list[int] | None:
    """The solver's values, or the warm start's when the solver returned none or a slower
    plan (CP-SAT may stop before it has re-found its hint)."""
    if hint is None or out.status == "optimal":
        return out.values
    mine = [hint[i] for i in range(len(hint))]
    if out.values is None:
        return mine
    ours = evaluate_dlrm(model, cluster, decode(model, vm, mine)).iteration_time_s
    theirs = evaluate_dlrm(model, cluster, decode(model, vm, out.values)).iteration_time_s
    return mine if ours < theirs else out.values


def _milp(lm, deadline: float) -> SolverOutcome:
    """HiGHS with each of :data:`MILP_RUNS`: the answer of least objective (its own
    status: a run that claimed optimality for a slower plan was wrong); infeasible only
    when every run says so."""
    outs = []
    for i, attempts in enumerate(MILP_RUNS):
        # the first run may use all but a share of the time kept for the second
        left = (deadline - time.perf_counter()) / (len(MILP_RUNS) - i)
        outs.append(MilpSession(lm, attempts=attempts).solve(max(left, 0.05)))
    found = [o for o in outs if o.values is not None]
    if not found:
        infeasible = all(o.status == "infeasible" for o in outs)
        return outs[0] if infeasible else next(o for o in outs if o.status != "infeasible")
    return min(found, key=lambda o: (o.objective, o.status != "optimal"))


def _cpsat(lm, hint: dict[int, int] | None, deadline: float, workers: int) -> SolverOutcome:
    """CP-SAT on the model, warm-started from ``hint`` (every variable's value, from
    :func:`complete_hint`), within :data:`CPSAT_MEMORY_MB`."""
    session = CpsatSession(lm, workers=search_workers(workers, len(lm.vars)))
    session.hint(hint or {})
    return session.solve(max(deadline - time.perf_counter(), 0.05), memory_mb=CPSAT_MEMORY_MB)


def search_workers(workers: int, num_vars: int) -> int:
    """CP-SAT's search workers on a model of ``num_vars`` variables: ``workers``, fewer
    when their memory would pass :data:`CPSAT_SEARCH_BYTES`."""
    fit = CPSAT_SEARCH_BYTES // (CPSAT_WORKER_BYTES_PER_VAR * max(num_vars, 1))
    return max(1, min(workers, fit))


def complete_hint(lm, hint: dict[int, int]) -> dict[int, int]:
    """``hint`` with the variables it leaves out (phases, collective indicators) set to
    the least values its rows allow (``var >= lb - rest`` for each row with lb)."""
    vals = [hint.get(i, 0) for i in range(len(lm.vars))]
    for _ in range(3):  # indicators, then the indicator "either", then the phases
        for c in lm.cons:
            if c.lb is None:
                continue
            for i, coef in c.expr.items():
                if i in hint or coef <= 0:
                    continue
                need = c.lb - sum(a * vals[j] for j, a in c.expr.items() if j != i)
                if coef * vals[i] < need:
                    vals[i] = min(-(-need // coef), lm.vars[i].ub)
    return dict(enumerate(vals))


def greedy_plan(model: DLRMSpec, cluster: ClusterSpec, vm: DLRMVars,
                deadline: float | None = None) -> tuple[dict[int, int] | None, bool]:
    """A warm start for CP-SAT: the best (by the evaluator) of TorchRec's table-wise
    greedy partitioner, two best fits (:func:`best_fit_plan`: over every option, and over
    the options that place shards on chosen ranks or nodes only) and, given a
    ``deadline``, the local search of :mod:`formulations.dlrm.local`; and whether it is
    TorchRec's greedy plan (no other start is faster)."""
    best = None
    starts = [table_wise_greedy(model, cluster, vm), best_fit_plan(model, cluster, vm),
              best_fit_plan(model, cluster, vm, ("ranks", "node"))]
    if deadline is not None and len(model.tables) >= LOCAL_MIN_ENTRIES:
        found = local_plan(model, cluster, vm, deadline)
        starts.append(_relabel(vm, links(model, cluster), found) if found else None)
    for k, hint in enumerate(starts):
        if hint is None:
            continue
        est = evaluate_dlrm(model, cluster, decode(model, vm, _values(vm, hint)))
        if est.feasible and (best is None or est.iteration_time_s < best[0]):
            best = (est.iteration_time_s, hint, k == 0)
    return (best[1], best[2]) if best else (None, False)


def _values(vm: DLRMVars, hint: dict[int, int]) -> list[int]:
    size = 1 + max((*vm.m.values(), *vm.n.values(), *vm.z.values()))
    return [hint.get(i, 0) for i in range(size)]


def table_wise_greedy(model: DLRMSpec, cluster: ClusterSpec,
                      vm: DLRMVars) -> dict[int, int] | None:
    """TorchRec's greedy partitioner (:mod:`formulations.dlrm.greedy`) as values of the
    model's variables."""
    found = greedy_assignment(model, cluster, vm.options)
    if found is None:
        return None
    hint = {i: 0 for i in (*vm.m.values(), *vm.n.values(), *vm.z.values())}
    for t, (o, ranks) in found.items():
        for r, copies in ranks.items():
            hint[vm.n[t, o, r]] += copies
        hint[vm.m[t, o]] = model.tables[t].count
    return _relabel(vm, links(model, cluster), hint)


def torchrec_greedy(model: DLRMSpec, cluster: ClusterSpec) -> DLRMPlan | None:
    """TorchRec's greedy partitioner's plan (:mod:`formulations.dlrm.greedy`): the baseline
    the DLRM figures compare with; None when it cannot place every table."""
    options = [table_options(model, cluster, t) for t in range(len(model.tables))]
    found = greedy_assignment(model, cluster, options)
    if found is None:
        return None
    return DLRMPlan(tables=[placement(model, t, options[t][o], model.tables[t].count, ranks,
                                      None) for t, (o, ranks) in sorted(found.items())])


def best_fit_plan(model: DLRMSpec, cluster: ClusterSpec, vm: DLRMVars,
                  scopes: tuple[str, ...] = ("ranks", "node", "all")) -> dict[int, int] | None:
    """Tables largest first, each copy placed where the iteration's sparse
    phases (the sum of the four per-rank maxima) grow least, over every option and
    placement (table-wise: any rank; column-wise: the least-loaded ranks; table-row-wise:
    any node; data-parallel and row-wise: all ranks), within memory. Values of the model's
    variables, or None when some copy fits nowhere."""
    import numpy as np

    ln = links(model, cluster)
    cap = usable_hbm_bytes(cluster) - dense_cost(model, cluster).memory_bytes
    # each phase at least the average of every table's cheapest total work (a floor the
    # greedy fills up to before an option counts as lengthening the iteration)
    work = sum(t.count * np.min([_GreedyState.vec(o) * (
        ln.ranks if o.scope == "all" else ln.node if o.scope == "node" else o.shards)
        for o in opts], axis=0) for t, opts in zip(model.tables, vm.options))
    st = _GreedyState(np.zeros((4, ln.ranks)), np.zeros(ln.ranks), ln, work / ln.ranks)
    hint = {i: 0 for i in (*vm.m.values(), *vm.n.values(), *vm.z.values())}
    size = {t: max(o.cost.memory_bytes * o.shards for o in opts)
            for t, opts in enumerate(vm.options)}
    for t in sorted(size, key=lambda t: -size[t]):
        for _ in range(model.tables[t].count):
            best = min((st.try_option(o, opt, cap) for o, opt in enumerate(vm.options[t])
                        if opt.scope in scopes), key=lambda x: x[:2], default=(float("inf"),))
            if best[0] == float("inf"):
                return None
            _, _, o, ranks = best
            st.place(vm.options[t][o], ranks)
            hint[vm.m[t, o]] += 1
            opt = vm.options[t][o]
            if opt.scope == "ranks":
                for r in ranks:
                    hint[vm.n[t, o, r]] += 1
            elif opt.scope == "node":
                hint[vm.z[t, o, ranks[0] // ln.node]] += 1
    return _relabel(vm, ln, hint)


@dataclass
class _GreedyState:
    load: object  # (4 phases, ranks) seconds
    mem: object  # bytes per rank
    ln: object
    target: object  # per phase: the floor of the phase maxima

    @staticmethod
    def vec(opt: Option):
        import numpy as np

        c = opt.cost
        return np.array([c.lookup_fwd_s, c.lookup_bwd_s, c.comm_fwd_s, c.comm_bwd_s])

    def try_option(self, o: int, opt: Option, cap: int) -> tuple[float, float, int, list[int]]:
        """(sum of phase maxima after placing, work added, option, ranks) for ``opt``'s
        best spot."""
        import numpy as np

        v, ln = self.vec(opt), self.ln
        fits = self.mem + opt.cost.memory_bytes <= cap
        if opt.scope == "all":
            ranks = list(range(ln.ranks))
        elif opt.scope == "node":
            ok = [g for g in range(ln.nodes) if fits[g * ln.node:(g + 1) * ln.node].all()]
            if not ok:
                return float("inf"), 0.0, o, []
            g = min(ok, key=lambda g: self.load[:, g * ln.node:(g + 1) * ln.node].max(1).sum())
            ranks = list(range(g * ln.node, (g + 1) * ln.node))
        else:
            ok = np.flatnonzero(fits)
            if len(ok) < opt.shards:
                return float("inf"), 0.0, o, []
            ranks = list(ok[np.argsort(self.load[:, ok].sum(0), kind="stable")[:opt.shards]])
        if not fits[ranks].all():
            return float("inf"), 0.0, o, []
        new = self.load.copy()
        new[:, ranks] += v[:, None]
        return (float(np.maximum(new.max(1), self.target).sum()), float(v.sum()) * len(ranks),
                o, ranks)

    def place(self, opt: Option, ranks: list[int]) -> None:
        self.load[:, ranks] += self.vec(opt)[:, None]
        self.mem[ranks] += opt.cost.memory_bytes


def _relabel(vm: DLRMVars, ln, hint: dict[int, int]) -> dict[int, int]:
    """Renumber ranks inside each node, then whole nodes, by decreasing forward lookup
    load (in ticks, as the model's symmetry rows compare them), so that the hint
    satisfies those rows."""
    import numpy as np

    loads = np.zeros(ln.ranks, dtype=np.int64)
    for (t, o), mi in vm.m.items():
        opt = vm.options[t][o]
        c = vm.ticks.down(opt.cost.lookup_fwd_s)
        if opt.scope == "all":
            loads += hint[mi] * c
        elif opt.scope == "ranks":
            loads += c * np.array([hint[vm.n[t, o, r]] for r in range(ln.ranks)], np.int64)
        else:
            loads += c * np.repeat([hint[vm.z[t, o, g]] for g in range(ln.nodes)], ln.node)
    loads = loads.tolist()
    inside = {g: sorted(range(g * ln.node, (g + 1) * ln.node), key=lambda r: -loads[r])
              for g in range(ln.nodes)}
    nodes = sorted(range(ln.nodes), key=lambda g: -loads[inside[g][0]])
    order = [r for g in nodes for r in inside[g]]  # new rank i was rank order[i]
    out = dict(hint)
    for (t, o, r), i in vm.n.items():
        out[i] = hint[vm.n[t, o, order[r]]]
    for (t, o, g), i in vm.z.items():
        out[i] = hint[vm.z[t, o, nodes[g]]]
    return out


def work_bound_s(model: DLRMSpec, cluster: ClusterSpec) -> float:
    """A lower bound on every plan's iteration time: the four sparse phases together last
    at least the total work of all ranks over the rank count (a sum of per-phase maxima is
    at least the sum of per-phase means), each table doing its least total work, plus the
    dense middle and the optimizer step."""
    ln = links(model, cluster)

    def work(o: Option) -> float:
        k = ln.ranks if o.scope == "all" else ln.node if o.scope == "node" else o.shards
        c = o.cost
        return k * (c.lookup_fwd_s + c.lookup_bwd_s + c.comm_fwd_s + c.comm_bwd_s)

    total = sum(t.count * min(work(o) for o in table_options(model, cluster, i))
                for i, t in enumerate(model.tables))
    dn = dense_cost(model, cluster)
    return total / ln.ranks + dn.middle_s + dn.optimizer_s


def decode(model: DLRMSpec, vm: DLRMVars, values: list[int]) -> DLRMPlan:
    """The plan a solver's values describe."""
    out = []
    ranks_of: dict[tuple[int, int], dict[int, int]] = {}
    nodes_of: dict[tuple[int, int], dict[int, int]] = {}
    for where, table in ((vm.n, ranks_of), (vm.z, nodes_of)):
        for (t, o, r), i in where.items():
            if values[i] > 0:
                table.setdefault((t, o), {})[r] = values[i]
    for (t, o), mi in vm.m.items():
        copies = values[mi]
        if copies <= 0:
            continue
        out.append(placement(model, t, vm.options[t][o], copies, ranks_of.get((t, o)),
                             nodes_of.get((t, o))))
    return DLRMPlan(tables=out)


def _infeasible(model: DLRMSpec, cluster: ClusterSpec) -> InfeasibleError:
    """Why nothing fits: the least memory any plan needs on its fullest rank."""
    ln = links(model, cluster)
    options = [table_options(model, cluster, i) for i in range(len(model.tables))]
    least = sum(t.count * min(o.cost.memory_bytes * (o.shards if o.scope != "node" else ln.node)
                              for o in opts)
                for t, opts in zip(model.tables, options)) / ln.ranks
    need = (least + dense_cost(model, cluster).memory_bytes) / 2**30
    cap = usable_hbm_bytes(cluster) / 2**30
    more = math.ceil(cluster.num_gpus * need / cap) if cap > 0 else None
    reasons = [f"the tables and the dense replica need at least {need:.1f} GiB per GPU "
               f"even spread perfectly; {cap:.1f} GiB usable per GPU"]
    # perfectly spread the tables may fit the GPUs given: then no count is hinted
    hints = [f"about {more} GPUs or more" if more and more > cluster.num_gpus
             else "more GPUs" if more else "a GPU with more memory",
             "a smaller global batch (pooled-embedding buffers grow with it)"]
    uvm = [(o.cost.host_bytes, t.name) for t, opts in zip(model.tables, options)
           for o in opts if o.cost.host_bytes]
    if not cluster.offload:
        hints.append("a host memory tier (the cluster's offload:) to keep tables in host "
                     "memory behind an HBM cache (UVM caching)")
    elif uvm and max(uvm)[0] > ln.host_bytes:
        size, name = max(uvm)
        reasons.append(f"UVM caching keeps a whole table in one GPU's host memory: {name} "
                       f"needs {size / 2**30:.2f} GiB, the host tier gives "
                       f"{ln.host_bytes / 2**30:.2f} GiB per GPU")
        hints.append("more host memory per GPU (offload.capacity_gib_per_gpu)")
    return InfeasibleError(
        f"no sharding of {model.name} fits {cluster.num_gpus} x {cluster.gpu.name}",
        reasons=reasons, hints=hints)


# ---- the reference: every plan of a tiny instance --------------------------------------
def placements(model: DLRMSpec, cluster: ClusterSpec, i: int,
               kinds: tuple[str, ...] | None = None) -> list[tuple[Option, tuple[int, ...]]]:
    """Every placement of one copy of table entry ``i``: an option and its ranks (or node)."""
    ln = links(model, cluster)
    out: list[tuple[Option, tuple[int, ...]]] = []
    for opt in table_options(model, cluster, i, kinds):
        if opt.scope == "all":
            out.append((opt, ()))
        elif opt.scope == "node":
            out += [(opt, (g,)) for g in range(ln.nodes)]
        else:
            out += [(opt, c) for c in itertools.combinations(range(ln.ranks), opt.shards)]
    return out


def _count(model: DLRMSpec, cluster: ClusterSpec, kinds: tuple[str, ...] | None) -> int:
    total = 1
    for i, t in enumerate(model.tables):
        total *= math.comb(len(placements(model, cluster, i, kinds)) + t.count - 1, t.count)
        if total > MAX_EXHAUSTIVE:
            raise InputError(f"backend exhaustive: more than {MAX_EXHAUSTIVE:,} plans to "
                             "enumerate; it is the reference for tiny instances, use cpsat")
    return total


def exhaustive(model: DLRMSpec, cluster: ClusterSpec,
               kinds: tuple[str, ...] | None = None) -> DLRMSolution:
    """Enumerate every plan (copies of a table are interchangeable: multisets of
    placements) and keep the fastest that fits, as the evaluator composes it."""
    t0 = time.perf_counter()
    _count(model, cluster, kinds)
    ln = links(model, cluster)
    per_table = [list(itertools.combinations_with_replacement(placements(model, cluster, i, kinds),
                                                             t.count))
                 for i, t in enumerate(model.tables)]
    best: tuple[float, tuple] | None = None
    for combo in itertools.product(*per_table):
        loads = Loads.zeros(ln.ranks)
        for group in combo:
            for opt, where in group:
                loads.add(opt, _where(ln, opt, where), 1)
        est = compose(model, cluster, loads)
        if est.feasible and (best is None or est.iteration_time_s < best[0]):
            best = (est.iteration_time_s, combo)
    if best is None:
        raise _infeasible(model, cluster)
    plan = _plan_of(model, best[1])
    return DLRMSolution(plan, evaluate_dlrm(model, cluster, plan), "exhaustive", "optimal",
                        time.perf_counter() - t0, best[0])


def _where(ln, opt: Option, where: tuple[int, ...]) -> dict[int, int] | range:
    if opt.scope == "all":
        return range(ln.ranks)
    if opt.scope == "node":
        return {where[0] * ln.node + j: 1 for j in range(ln.node)}
    return {r: 1 for r in where}


def _plan_of(model: DLRMSpec, combo: tuple) -> DLRMPlan:
    out = []
    for t, group in enumerate(combo):
        # copies of one option merge: their count, and shards per rank (or copies per node)
        merged: dict[tuple[str, int, str], tuple[Option, int, dict[int, int]]] = {}
        for opt, where in group:
            key = (opt.kind, opt.shards, opt.kernel)
            _, copies, held = merged.get(key, (opt, 0, {}))
            for w in where:
                held[w] = held.get(w, 0) + 1
            merged[key] = (opt, copies + 1, held)
        out += [placement(model, t, opt, copies, *((None, held) if opt.scope == "node"
                                                   else (held, None)))
                for opt, copies, held in merged.values()]
    return DLRMPlan(tables=out)
