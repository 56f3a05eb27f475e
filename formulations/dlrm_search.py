"""Solve the DLRM sharding model (CP-SAT or MILP), or enumerate every plan of a tiny
instance (exhaustive: the reference), and check the answer with the exact evaluator."""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass

from formulations.dlrm import DLRMVars, build
from formulations.linear import CpsatSession, MilpSession
from planner.costmodel.dlrm import Option, links, table_options
from planner.costmodel.dlrm_eval import DLRMEstimate, Loads, compose, evaluate_dlrm
from planner.errors import InfeasibleError, InputError
from planner.specs.cluster import ClusterSpec
from planner.specs.dlrm import DLRMPlan, DLRMSpec, TablePlacement

#: HiGHS without its presolve: with it, HiGHS 1.12 reported a plan 6% slower than the
#: optimum as optimal on a 55-variable instance (tests/test_dlrm.py, random_instance(41)).
MILP_ATTEMPTS = ({"tol": 1e-7, "presolve": "off"}, {"tol": 1e-6, "presolve": "off"})
#: Plans the exhaustive backend enumerates at most (it is the reference on tiny instances).
MAX_EXHAUSTIVE = 200_000


@dataclass(frozen=True)
class DLRMSolution:
    plan: DLRMPlan
    estimate: DLRMEstimate
    backend: str
    status: str  # "optimal" or "time_limit"
    solve_time_s: float
    model_objective_s: float | None  # the integer model's value (a lower bound when optimal)

    @property
    def optimality_gap(self) -> float | None:
        """(exact - bound) / exact: the rounding of the integer model when proven optimal."""
        if self.status != "optimal" or self.model_objective_s is None:
            return None
        t = self.estimate.iteration_time_s
        return max(0.0, (t - self.model_objective_s) / t)


def solve_sharding(model: DLRMSpec, cluster: ClusterSpec, backend: str = "cpsat",
                   time_limit_s: float = 60.0, kinds: tuple[str, ...] | None = None,
                   workers: int = 8) -> DLRMSolution:
    """The plan of least iteration time (proven optimal unless the time runs out)."""
    if backend == "exhaustive":
        return exhaustive(model, cluster, kinds)
    if backend not in ("cpsat", "milp"):
        raise InputError(f"backend {backend!r}: expected cpsat, milp or exhaustive")
    t0 = time.perf_counter()
    lm, vm = build(model, cluster, kinds)
    session = (CpsatSession(lm, workers=workers) if backend == "cpsat"
               else MilpSession(lm, attempts=MILP_ATTEMPTS))
    out = session.solve(max(time_limit_s - (time.perf_counter() - t0), 0.05))
    wall = time.perf_counter() - t0
    if out.status == "infeasible":
        raise _infeasible(model, cluster)
    if out.values is None:
        raise InfeasibleError(f"no sharding plan found within {time_limit_s:g} s",
                              reasons=["time limit"], hints=["raise --time-limit"],
                              status="time_limit")
    plan = decode(model, vm, out.values)
    est = evaluate_dlrm(model, cluster, plan)
    bound = (sum(out.values[i] * c for i, c in lm.objective.items()) + vm.constant_ticks)
    status = "optimal" if out.status == "optimal" else "time_limit"
    return DLRMSolution(plan, est, backend, status, wall, bound / vm.ticks.per_s)


def decode(model: DLRMSpec, vm: DLRMVars, values: list[int]) -> DLRMPlan:
    """The plan a solver's values describe."""
    out = []
    for (t, o), mi in vm.m.items():
        copies = values[mi]
        if copies <= 0:
            continue
        opt = vm.options[t][o]
        ranks = {r: values[i] for (tt, oo, r), i in vm.n.items()
                 if (tt, oo) == (t, o) and values[i] > 0}
        nodes = {g: values[i] for (tt, oo, g), i in vm.z.items()
                 if (tt, oo) == (t, o) and values[i] > 0}
        out.append(TablePlacement(table=model.tables[t].name, sharding_type=opt.kind,
                                  copies=copies, shards=_shards(opt), ranks=ranks, nodes=nodes))
    return DLRMPlan(tables=out)


def _shards(opt: Option) -> int:
    return opt.shards if opt.kind == "column_wise" else 1


def _infeasible(model: DLRMSpec, cluster: ClusterSpec) -> InfeasibleError:
    """Why nothing fits: the least memory any plan needs on its fullest rank."""
    from planner.costmodel.dlrm import dense_cost, usable_hbm_bytes

    ln = links(model, cluster)
    least = sum(t.count * min(o.cost.memory_bytes * (o.shards if o.scope != "node" else ln.node)
                              for o in table_options(model, cluster, i))
                for i, t in enumerate(model.tables)) / ln.ranks
    need = (least + dense_cost(model, cluster).memory_bytes) / 2**30
    cap = usable_hbm_bytes(cluster) / 2**30
    more = math.ceil(cluster.num_gpus * need / cap) if cap > 0 else None
    return InfeasibleError(
        f"no sharding of {model.name} fits {cluster.num_gpus} x {cluster.gpu.name}",
        reasons=[f"the tables and the dense replica need at least {need:.1f} GiB per GPU "
                 f"even spread perfectly; {cap:.1f} GiB usable per GPU"],
        hints=[f"about {more} GPUs or more" if more else "a GPU with more memory",
               "a smaller global batch (pooled-embedding buffers grow with it)"])


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
    for t, group in zip(model.tables, combo):
        merged: dict[tuple[str, int], TablePlacement] = {}
        for opt, where in group:
            key = (opt.kind, opt.shards)
            p = merged.get(key) or TablePlacement(table=t.name, sharding_type=opt.kind,
                                                  copies=1, shards=_shards(opt))
            copies = p.copies + 1 if key in merged else 1
            ranks, nodes = dict(p.ranks), dict(p.nodes)
            target = nodes if opt.scope == "node" else ranks if opt.scope == "ranks" else None
            if target is not None:
                for w in where:
                    target[w] = target.get(w, 0) + 1
            merged[key] = p.model_copy(update={"copies": copies, "ranks": ranks, "nodes": nodes})
        out += list(merged.values())
    return DLRMPlan(tables=out)
