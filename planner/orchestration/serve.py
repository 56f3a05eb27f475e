"""``planner serve``: the best serving plan for a workload, found exactly and checked by
the evaluator.

Tables of every replica layout per pool (:mod:`formulations.serve.space`), then the integer
model (:mod:`formulations.serve.search`) per mode (aggregated; disaggregated), the better mode
kept (ties: aggregated). Without a rate or a GPU budget the question is offline: the
layout with the most output tokens/s per GPU (within the SLOs when there are SLOs).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from typing import Any

from formulations.serve.search import ServeProblem, ServeSolution, presolve, solve
from formulations.serve.space import SCALE, Row, ServeSpace, fixed_space, timed_tables
from planner.costmodel.serve.evaluate import (
    ServeEstimate,
    aggregated_latency,
    evaluate_serve,
    replica_perf,
)
from planner.errors import InfeasibleError, InputError
from planner.orchestration.overrun import overrun_fields
from planner.specs.cluster import ClusterSpec
from planner.specs.model import ModelSpec
from planner.specs.serve import MAX_REPLICAS, ServeEngine, ServePlan, ServeWorkload
from formulations.serve.space import _layouts
from planner.costmodel.serve.evaluate import cluster_for, layout_reasons
from planner.specs.validate import validate

#: A mode's solve starts with at least this much time, even past the deadline (it then
#: stops at its first plan; the overrun is reported).
MIN_SOLVE_S = 0.05


@dataclass
class ServeResult:
    plan: ServePlan
    estimate: ServeEstimate
    solver: dict
    pareto: list[dict] = field(default_factory=list)


def _plan_of(problem: ServeProblem, sol: ServeSolution) -> ServePlan:
    """The ServePlan of a one-layout-per-pool solution (decode carries the prefill pool)."""
    chosen = {p: (problem.pools[p][i], n) for (p, i), n in sol.counts.items()}
    main_row, n = chosen.get("aggregated") or chosen["decode"]
    plan = main_row.plan.model_copy(update={"replicas": n})
    if "prefill" in chosen:
        row, m = chosen["prefill"]
        plan = ServePlan.model_validate(dict(plan.to_dict(), prefill=dict(
            row.plan.to_dict(), replicas=m, concurrency=1)))
    return plan


def _offline_best(rows: list[Row]) -> tuple[Row, float]:
    """The aggregated layout with the most requests/s per GPU (ties: fewer GPUs)."""
    best = max(rows, key=lambda r: (r.cap / r.gpus, -r.gpus))
    return best, best.cap / best.gpus


def _better(objective: str, a: ServeSolution | None, b: ServeSolution) -> bool:
    """Whether ``b`` holds a plan (proven, or the incumbent of a time-limited solve)
    better than ``a``'s."""
    if b.status == "infeasible" or b.objective is None:
        return False
    if a is None:
        return True
    return b.objective > a.objective if objective == "throughput" else b.objective < a.objective


def _check_args(w: ServeWorkload, objective: str | None) -> str:
    """The objective (default: gpus with a rate, else throughput) that fits the workload;
    the names, the GPU budget and the time limit are ServeRequest's to check."""
    objective = objective or ("gpus" if w.rate_rps is not None else "throughput")
    if objective == "throughput" and w.rate_rps is not None:
        raise InputError("--objective throughput answers the offline question (the most "
                         "tokens/s); with --rate choose gpus, cost or energy")
    if objective != "throughput" and w.rate_rps is None:
        raise InputError(f"--objective {objective} needs --rate (the load to serve)")
    return objective


def _why_no_layout(model: ModelSpec, clusters: list[ClusterSpec], space: ServeSpace,
                   tabs: dict) -> list[str]:
    """When no layout of the space exists at all: the first few distinct reasons."""
    if any(rows for pools in tabs.values() for rows in pools.values()):
        return []
    seen: list[str] = []
    for cluster, plan in _layouts(model, clusters, space):
        for r in layout_reasons(model, cluster, plan):
            if r not in seen:
                seen.append(r)
        if len(seen) >= 3:
            break
    return seen


class ServeInfeasibleError(InfeasibleError):
    """No serving plan: ``reachable`` holds the best mean TTFT and TPOT (ms) any layout of
    the space reaches under no other load, with those layouts (empty when none runs)."""

    def __init__(self, message: str, reasons: list[str], hints: list[str], reachable: dict):
        super().__init__(message, reasons=reasons, hints=hints)
        self.reachable = reachable


def _layout_words(gpu: str, plan: ServePlan) -> str:
    return (f"{gpu} tp{plan.tp} pp{plan.pp}" + (f" ep{plan.ep}" if plan.ep > 1 else "")
            + f" {plan.weight_dtype}")


def reachable(model: ModelSpec, clusters: list[ClusterSpec], w: ServeWorkload,
              space: ServeSpace, engine: ServeEngine) -> dict:
    """The fastest first token and the fastest token interval any layout of ``space``
    reaches on the GPUs given, each under no other load (one sequence: its prefill alone,
    a decode batch of one), with the layouts; empty when no layout fits."""
    best: dict[str, tuple[float, str]] = {}
    for cluster, base in _layouts(model, clusters, space):
        cluster = cluster_for(cluster, base)
        for chunk in space.prefill_chunk:
            plan = base.model_copy(update={"prefill_chunk": chunk, "concurrency": 1})
            perf = replica_perf(model, cluster, plan, w.isl, w.osl, engine)
            if perf is None or perf.reasons:
                continue
            for key, t in (("ttft_ms", perf.prefill.latency_s), ("tpot_ms", perf.step_s(1))):
                if key not in best or t * 1e3 < best[key][0]:
                    best[key] = (t * 1e3, _layout_words(cluster.gpu.name, plan))
    return {k: {"ms": v[0], "layout": v[1]} for k, v in best.items()}


def _infeasible(w: ServeWorkload, gpus: int | None, why_not: list[str], reach: dict,
                fix: dict, space: ServeSpace, tabs: dict) -> ServeInfeasibleError:
    """The headline, the binding SLO against what the GPUs reach, and the hints that
    apply to this request."""
    why = "no layout of the search space meets the SLOs"
    if w.rate_rps is not None:
        why = f"no fleet serves {w.rate_rps:g} requests/s within the SLOs" + \
            (f" on {gpus} GPUs" if gpus else "")
    q = f"P{w.percentile * 100:g}"
    reasons, hints, binding = [], [], []
    for key, slo, name in (("ttft_ms", w.ttft_ms, "TTFT"), ("tpot_ms", w.tpot_ms, "TPOT")):
        if slo is not None and key in reach and reach[key]["ms"] > slo:
            binding.append(name)
            reasons.append(f"the {q} {name} SLO of {slo:g} ms is out of reach: the fastest "
                           f"layout ({reach[key]['layout']}) takes {reach[key]['ms']:.2f} ms "
                           "under no other load")
            hints.append(f"loosen --{name.lower()}-ms above {reach[key]['ms']:.2f} ms")
    rows = [r for pools in tabs.values() for rs in pools.values() for r in rs]
    if not binding and reach and (w.ttft_ms or w.tpot_ms) and not rows:
        reasons.append("each SLO alone is within reach, but no layout meets them together")
        hints.append("loosen --ttft-ms or --tpot-ms")
    if gpus is not None and rows:
        hints.append("raise --gpus")
    if rows and w.rate_rps is not None and \
            rate_units(w.rate_rps) > max(r.cap for r in rows) * MAX_REPLICAS:
        hints.append(f"a pool holds at most {MAX_REPLICAS:,} replicas: split a larger rate")
    if "weight_dtype" in fix:
        hints.append("unfix weight_dtype")
    elif not set(space.weight_dtype) >= {"int4", "fp4"} and "TPOT" in binding:
        hints.append("allow quantized weights: --weight-dtypes bf16,fp8,int4 (an accuracy "
                     "change)")
    hints.append("add a GPU type with more HBM or bandwidth (another -c)")
    if reach:
        reasons.append(f"reachable on these GPUs under no other load: TTFT "
                       f"{reach['ttft_ms']['ms']:.1f} ms ({reach['ttft_ms']['layout']}), TPOT "
                       f"{reach['tpot_ms']['ms']:.2f} ms ({reach['tpot_ms']['layout']})")
    else:
        reasons.append("no layout of the space fits in HBM")
    return ServeInfeasibleError(why, [*reasons, *why_not], hints, reach)


def pareto_front(model: ModelSpec, rows: list[Row], w: ServeWorkload,
                 engine: ServeEngine) -> list[dict]:
    """Output tokens/s per GPU against tokens/s per user (1/TPOT) of each aggregated layout
    at its SLO capacity: the layouts no other beats on both."""
    points = []
    for r in rows:
        perf = replica_perf(model, r.cluster, r.plan, w.isl, w.osl, engine)
        lam = r.cap / SCALE
        lat = aggregated_latency(perf, r.plan, w, lam)
        if lat.tpot_s is None:
            continue
        points.append({"tokens_per_s_per_gpu": lam * w.osl / r.gpus,
                       "tokens_per_s_per_user": 1.0 / lat.tpot_s, "gpu": r.cluster.gpu.name,
                       "plan": r.plan.to_dict()})
    points.sort(key=lambda p: (-p["tokens_per_s_per_user"], -p["tokens_per_s_per_gpu"]))
    front, best = [], -1.0
    for p in points:
        if p["tokens_per_s_per_gpu"] > best:
            front.append(p)
            best = p["tokens_per_s_per_gpu"]
    return front


def _candidates(tabs: dict):
    """(mode, pools) to solve: disaggregated pools once per KV dtype (the decode pool reads
    the cache the prefill pool writes, so both use one)."""
    for mode, pools in tabs.items():
        if mode != "disaggregated":
            yield mode, pools
            continue
        for kv in sorted({r.plan.kv_dtype for rows in pools.values() for r in rows}):
            yield mode, {p: [r for r in rows if r.plan.kv_dtype == kv] for p, rows in pools.items()}


def _search(tabs: dict, objective: str, w: ServeWorkload, gpus: int | None, backend: str,
            time_limit_s: float, max_layouts: int, deadline: float | None = None):
    """The best (mode, problem, solution) over the modes; the offline question without a
    rate or budget is the best layout per GPU, one replica. Each mode's solve gets the time
    left until ``deadline`` (the whole limit when None)."""
    if objective == "throughput" and gpus is None:
        rows = tabs.get("aggregated", {}).get("aggregated") or []
        if not rows:
            return None
        row, _ = _offline_best(rows)
        problem = ServeProblem({"aggregated": rows}, "throughput", None, row.gpus, 1)
        sol = ServeSolution("optimal", "table", row.cap, {("aggregated", rows.index(row)): 1})
        return "aggregated", problem, sol
    best, timed_out, sols = None, [], []
    rate = None if w.rate_rps is None else rate_units(w.rate_rps)
    for mode, pools in _candidates(tabs):
        problem = presolve(ServeProblem(pools, objective, rate, gpus, max_layouts))
        left_s = time_limit_s if deadline is None else deadline - time.perf_counter()
        sol = solve(problem, backend, max(left_s, MIN_SOLVE_S))
        sols.append(sol)
        if sol.status == "time_limit":
            timed_out.append(mode)
        if _better(objective, best[2] if best else None, sol):
            best = (mode, problem, sol)
    if timed_out:  # no proof either way: neither "no fleet serves it" nor "optimal"
        if best is None:
            raise InfeasibleError(
                f"the {backend} solver found no plan within {time_limit_s:g} s "
                f"({', '.join(timed_out)} pools)", reasons=["time limit"],
                hints=_time_hints(backend), status="time_limit")
        best[2].status = "time_limit"
        best[2].bound = _overall_bound(objective == "throughput", sols)
    return best


def _time_hints(backend: str) -> list[str]:
    """What may find a plan when the time ran out: more time, or a backend not in use
    (never the one that just ran out)."""
    return ["raise --time-limit", *(f"--backend {b}" for b in ("cpsat",) if b != backend)]


def _overall_bound(maximize: bool, sols: list[ServeSolution]) -> float | None:
    """The best objective any mode could reach: each proven mode's optimum, each timed-out
    mode's solver bound (None when one has none: the gap is then unknown); a mode proven
    infeasible adds nothing."""
    bounds = []
    for s in sols:
        if s.status == "infeasible":
            continue
        b = s.objective if s.status == "optimal" else s.bound
        if b is None:
            return None
        bounds.append(b)
    return (max if maximize else min)(bounds, default=None)


def rate_units(rate_rps: float) -> int:
    """The offered rate in the tables' integer units (micro-requests/s), rounded up: the
    capacities are rounded down, so an integer fleet covering it serves the rate, and
    an integer fleet serves the rate exactly when it covers this. The decimal the user
    wrote is scaled, not its binary float (1.1 requests/s is 1,100,000 units, not 1,100,001)."""
    return int((Decimal(repr(float(rate_rps))) * SCALE).to_integral_value(ROUND_CEILING))


def plan_serve(model: ModelSpec, clusters: list[ClusterSpec], w: ServeWorkload, *,
               objective: str | None = None, gpus: int | None = None, fix: dict | None = None,
               backend: str = "cpsat", space: ServeSpace = ServeSpace(),
               engine: ServeEngine, time_limit_s: float = 60.0,
               pareto: bool = False) -> ServeResult:
    """The best plan (module docstring), its estimate from the evaluator and the solver's
    report, costed with ``engine`` (required: the request's, resolved by planner.api). The
    arguments are a :class:`planner.specs.requests.ServeRequest`'s, checked there
    (planner.api.serve builds it); raises InputError when they do not fit together,
    InfeasibleError when nothing meets them."""
    objective = _check_args(w, objective)
    transformer(model)
    fix = dict(fix or {})
    if "gpu" in fix and not any(str(fix["gpu"]).lower() in (c.gpu.name, *c.gpu.aliases)
                                for c in clusters):
        raise InputError(f"--fix gpu={fix['gpu']}: no cluster given has it (GPUs: "
                         f"{', '.join(c.gpu.name for c in clusters)}); add its cluster with -c")
    space = fixed_space(space, fix)
    t0 = time.perf_counter()
    tabs, complete = timed_tables(model, clusters, w, space, engine, t0 + time_limit_s)
    t_tables = time.perf_counter() - t0
    rows = sum(len(r) for pools in tabs.values() for r in pools.values())
    found = _search(tabs, objective, w, gpus, backend, time_limit_s, 1, t0 + time_limit_s)
    if found is None and not complete:  # the layouts left out may serve it: no proof
        raise InfeasibleError(
            f"no plan among the {rows:,} layouts tabulated within {time_limit_s:g} s "
            "(the rest of the search space was left out)",
            reasons=["time limit: the tables were cut short"], hints=_time_hints(backend),
            status="time_limit")
    if found is None:
        raise _infeasible(w, gpus, _why_no_layout(model, clusters, space, tabs),
                          reachable(model, clusters, w, space, engine), fix, space, tabs)
    mode, problem, sol = found
    if not complete:  # the best over the layouts tabulated; the others are unknown
        sol.status, sol.bound = "time_limit", None
    plan = _plan_of(problem, sol)
    main = next(c for c in clusters if plan.gpu in (c.gpu.name, *c.gpu.aliases))
    est = evaluate_serve(model, main, plan, w, engine, tuple(clusters))
    value = sol.objective if objective != "throughput" else sol.objective / SCALE
    bound = sol.objective if sol.status == "optimal" else sol.bound
    solver = {"backend": sol.backend, "status": sol.status, "objective": objective,
              "objective_value": value, "gap": sol.gap,
              "bound": bound if bound is None or objective != "throughput" else bound / SCALE,
              "mode": mode, "rows": rows,
              "tables_s": t_tables, "solve_s": sol.wall_s,
              "wall_s": time.perf_counter() - t0, "time_limit_s": time_limit_s,
              "tables_complete": complete, "found_by": sol.found_by}
    solver.update(overrun_fields(
        solver["wall_s"], time_limit_s,
        f"tabulating {rows:,} layouts took {t_tables:.2f} s (past the limit only until a "
        "first plan was possible), solving and evaluating the rest"))
    front = pareto_front(model, tabs.get("aggregated", {}).get("aggregated", []), w, engine) \
        if pareto else []
    return ServeResult(plan, est, solver, front)


def workload(isl: Any, osl: Any, rate_rps: Any = None, ttft_ms: Any = None, tpot_ms: Any = None,
             percentile: Any = 0.99) -> ServeWorkload:
    """A checked :class:`ServeWorkload` (InputError naming the field otherwise)."""
    for name, v in (("isl", isl), ("osl", osl)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise InputError(f"{name}: expected a whole number of tokens, got {v!r}")
    return validate(ServeWorkload, dict(isl=isl, osl=osl, rate_rps=rate_rps, ttft_ms=ttft_ms,
                                        tpot_ms=tpot_ms, percentile=percentile), "serve")


def transformer(model: Any) -> ModelSpec:
    if not isinstance(model, ModelSpec):
        raise InputError(f"model {getattr(model, 'name', model)!r}: serving takes a "
                         "transformer model (a DLRM is not served here)")
    return model
