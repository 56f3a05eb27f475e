"""``planner.solve``: the best training plans for a model on a cluster, proven optimal.

Orchestration only: build the search space, tabulate the evaluator's terms, run the
CP-SAT or MILP formulation (or brute force), and read the answer back as typed results.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Literal

from formulations.train.exhaustive import run_exhaustive
import numpy as np

from formulations.train.search import (Candidate, SearchResult, lower_bounds, presolve,
                                       run_search)
from formulations.train.space import DECISIONS, Outer, SearchSpace, SpaceOptions
from planner.costmodel.train.tables import build_tables
import planner.catalog as catalog
from planner.costmodel.constants import GiB
from planner.costmodel.energy import price_per_gpu_hour
from planner.costmodel.objective import Objective
from planner.costmodel.train.evaluator import Estimate, check_structure, evaluate
from planner.costmodel.train.goodput import Goodput
from planner.costmodel.frameworks import framework_defaults
from planner.costmodel.runtime import apply_profile
from planner.costmodel.train.offload import missing_tier_reason
from planner.errors import InfeasibleError, InputError
from planner.orchestration.overrun import overrun_fields
from planner.specs.plan_base import model_defaults, require_batch, require_one_iteration
from planner.specs.cluster import ClusterSpec
from planner.specs.loaders import apply_overrides, load_cluster, plan_from_dict
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan
from planner.validation.band import with_band
from planner.validation.trust import published_comparison
from planner.costmodel.network import PlacementError, spans_for
from planner.specs.plan import WORLD_DIMS

Backend = Literal["cpsat", "milp", "exhaustive"]
BACKENDS = ("cpsat", "milp", "exhaustive")

@dataclass
class SolvedPlan:
    plan: Plan
    estimate: Estimate
    objective: float  # in the objective's units
    solver_objective: float | None  # the formulation's value for this plan (a lower bound)

    def to_json(self) -> dict[str, Any]:
        return {"plan": self.plan.to_dict(), "estimate": self.estimate.to_json(),
                "objective": self.objective}


#: How each solve status reads: only "optimal" is a proof.
STATUS_TEXT = {"optimal": "proven optimal", "time_limit": "best found (time limit)"}


@dataclass
class SolveResult:
    backend: str
    status: str  # optimal (proven) | time_limit (the best plan found when time ran out)
    objective: Objective
    plans: list[SolvedPlan]
    solve_time_s: float  # wall time of the whole solve, set-up included
    space_size: int
    stats: dict[str, Any] = field(default_factory=dict)
    tokens: float | None = None
    proven_bound: float | None = None  # lower bound over the whole space, reported units
    price_per_gpu_hour: float | None = None  # the cluster's, for the totals
    time_limit_s: float | None = None
    framework: str | None = None  # the profile whose rules the space obeyed
    goodput: Goodput | None = None  # failures and checkpoints over the token budget; None: ideal
    #: the best similar published run and the optimum's gain over it (planner.validation.trust)
    published: dict[str, Any] | None = None
    #: the catalog frameworks whose rules the best plan breaks none of, worked out once by
    #: planner.api.solve (None: not worked out, as inside a procurement)
    frameworks_that_run_it: list[str] | None = None
    #: the framework whose rules it breaks fewest, with the first it breaks ("name: rule")
    closest_framework: str | None = None

    @property
    def best(self) -> SolvedPlan:
        return self.plans[0]

    @property
    def status_text(self) -> str:
        return STATUS_TEXT.get(self.status, self.status)

    @property
    def model_vs_evaluator_rel_diff(self) -> float | None:
        """(exact - model) / exact for the best plan: how far the formulation's lower bound
        for this plan is below the evaluator's value. Not an optimality gap."""
        b = self.best
        if b.solver_objective is None or b.objective == 0:
            return None
        return (b.objective - b.solver_objective) / b.objective

    @property
    def optimality_gap(self) -> float | None:
        """(best - bound) / best over the whole space: 0 once proven optimal, ``None`` when
        the search stopped before bounding the space."""
        if self.status == "optimal":
            return 0.0
        b = self.best.objective
        if self.proven_bound is None or b == 0:
            return None
        return max(b - self.proven_bound, 0.0) / b

    def overrun_fields(self) -> dict[str, Any]:
        """``time_limit_overrun_s`` and why, when the solve ran over 10 % past its limit."""
        setup_s = float(self.stats.get("setup_s", 0.0))
        return overrun_fields(
            self.solve_time_s, self.time_limit_s,
            f"enumerating and tabulating {self.space_size:,} plans took {setup_s:.2f} s, the "
            f"search and evaluating its plans {self.solve_time_s - setup_s:.2f} s; a phase "
            "that has started runs to its end")

    def to_json(self) -> dict[str, Any]:
        b = self.best
        return {
            "plan": b.plan.to_dict(),
            "estimate": b.estimate.to_json(),
            "framework": self.framework,
            "published_comparison": self.published,
            "solver": {
                "backend": self.backend,
                "status": self.status,
                "status_text": self.status_text,
                "solve_time_s": self.solve_time_s,
                "time_limit_s": self.time_limit_s,
                "objective": self.objective.name,
                "objective_units": self.objective.units_for(self.tokens),
                "solver_objective": b.solver_objective,
                "evaluator_objective": b.objective,
                "model_vs_evaluator_rel_diff": self.model_vs_evaluator_rel_diff,
                "optimality_gap": self.optimality_gap,
                "proven_bound": self.proven_bound,
                "space_size": self.space_size,
                **self.stats,
                **self.overrun_fields(),
            },
            "alternatives": [p.to_json() for p in self.plans[1:]],
            **({"totals": self.totals()} if self.tokens else {}),
            **({} if self.frameworks_that_run_it is None
               else {"frameworks_that_run_it": self.frameworks_that_run_it}),
        }

    def totals(self, cluster_price_per_gpu_hour: float | None = None) -> dict[str, Any]:
        """Training on ``tokens`` with the best plan: days, GPU-hours, MWh, and USD when the
        cluster or its GPU has a price (empty without a token budget)."""
        if not self.tokens:
            return {}
        plan, est = self.best.plan, self.best.estimate
        assert est.iteration_time_s is not None and est.energy_j is not None
        iters = self.tokens / (plan.global_batch_size * plan.seq_len)
        gpu_hours = iters * est.iteration_time_s * plan.world_size / 3600.0
        price = cluster_price_per_gpu_hour if cluster_price_per_gpu_hour is not None \
            else self.price_per_gpu_hour
        ideal = {"days": iters * est.iteration_time_s / 86400.0, "gpu_hours": gpu_hours,
                 "energy_mwh": iters * est.energy_j / 3.6e9,
                 "cost_usd": None if price is None else gpu_hours * price}
        return {"tokens": self.tokens, "iterations": iters, **effective_totals(ideal, self.goodput)}


def effective_totals(ideal: dict[str, float | None], goodput: Goodput | None
                     ) -> dict[str, Any]:
    """Days, GPU-hours, MWh and USD over the wall time failures and checkpoints stretch the
    ideal ones to (each divided by the effective training-time fraction; the lost time is
    costed as training time), with the ideal ones and the goodput beside them."""
    if goodput is None:
        return {**ideal, "goodput": None}
    f = goodput.fraction
    return {**{k: None if v is None else v / f for k, v in ideal.items()},
            "ideal": dict(ideal), "goodput": goodput.to_json()}


def objective_scale(objective: Objective, plan: Plan, tokens: float | None) -> float:
    """Factor from the per-iteration objective to its reported units."""
    return objective.report_scale(plan.global_batch_size * plan.seq_len, tokens)


def build_space(model: ModelSpec, cluster: ClusterSpec, fixed: dict[str, Any] | None = None,
                base: dict[str, Any] | None = None, options: SpaceOptions | None = None
                ) -> SearchSpace:
    fixed = dict(fixed or {})
    base_data = model_defaults(model)
    base_data.update(base or {})
    for k in ("global_batch_size", "seq_len", "dtype"):
        if k in fixed:
            base_data[k] = fixed.pop(k)
    require_batch(model, base_data)
    # validate the fixed knobs as plan fields (types, ranges), then search with the
    # validated values (2.0 -> 2, "false" -> False), never the raw ones
    plan = plan_from_dict({**base_data, **fixed},
                          "plan fields (--fix, --plan, --global-batch, --seq-len, --dtype)")
    fixed = _validated(fixed, plan)
    layers = model.num_layers
    if fixed.get("virtual_stages", 1) > layers:
        raise InputError(f"virtual_stages {fixed['virtual_stages']}: expected at most the "
                         f"{layers} layers of {model.name} (each interleaved chunk holds a "
                         "layer or more)")
    opts = options or SpaceOptions()
    if opts.max_virtual_stages > layers:  # the same space: pp x v never exceeds the layers
        opts = replace(opts, max_virtual_stages=layers)
    base_data = _validated(base_data, plan)
    if opts.framework is not None:  # settings the caller left open: the framework's defaults
        base_data = framework_defaults(opts.framework, base_data, set(base or {}) | set(fixed))
    return SearchSpace(model, apply_profile(cluster, opts.framework), base_data, fixed, opts)


def _validated(fields: dict[str, Any], plan: Plan) -> dict[str, Any]:
    """``fields`` (plan fields, ``placement`` possibly partial) with the values ``plan``
    validated from them (a None stays None: unset, not the default the plan derived)."""
    out = {k: None if v is None else getattr(plan, k) for k, v in fields.items()
           if k in Plan.model_fields and k != "placement"}
    out.update({k: v for k, v in fields.items() if k not in Plan.model_fields})
    place = fields.get("placement")
    if isinstance(place, dict):
        p = plan.placement
        out["placement"] = {k: (list(p.order) if k == "order" else dict(p.domain or {})
                                if k == "domain" else v) for k, v in place.items()}
    elif "placement" in fields:
        out["placement"] = place
    return out


def solve(model: ModelSpec, cluster: ClusterSpec, *, fixed: dict[str, Any] | None = None,
          base: dict[str, Any] | None = None, objective: Objective | str = "time",
          backend: Backend = "cpsat", top_k: int = 1, time_limit_s: float = 60.0,
          presolve: bool = True, options: SpaceOptions | None = None,
          tokens: float | None = None,
          progress: Callable[[str], None] | None = None,
          log: Callable[[str], None] | None = None,
          max_iteration_time_s: float | None = None) -> SolveResult:
    """The ``top_k`` best plans (with ``max_iteration_time_s``, among those iterating within
    it: a deadline). Raises :class:`InfeasibleError` with reasons and hints."""
    objective = Objective.of(objective)
    _check_request(tokens, time_limit_s, max_iteration_time_s, options)
    if backend not in BACKENDS:
        raise InputError(f"--backend '{backend}': expected one of {', '.join(BACKENDS)}")
    _positive("--top", top_k, integer=True)
    objective.check(cluster)
    t0 = time.perf_counter()
    say = progress or (lambda _m: None)
    say("enumerating the search space")
    space = build_space(model, cluster, fixed, base, options)
    if tokens is not None:
        require_one_iteration(tokens, int(space.base["global_batch_size"]),
                              int(space.base["seq_len"]))
    oo, op = bool(space.fixed.get("offload_optimizer")), bool(space.fixed.get("offload_params"))
    if (oo or op) and cluster.offload is None:
        tiered = [n for n in catalog.names("clusters") if load_cluster(n).offload is not None]
        raise InfeasibleError("no plan can offload on this cluster",
                              [missing_tier_reason(oo, op, cluster.name)],
                              [f"a cluster with an offload tier ({', '.join(tiered)})",
                               "drop the offload --fix"])
    if not space.outers:
        raise explain_empty(space)
    size = space.size()
    if size == 0:
        raise explain_no_placement(space)
    res, stats, setup_s = _search(space, size, objective, backend, top_k, time_limit_s,
                                  presolve, say, log, max_iteration_time_s, t0)
    if not res.candidates:
        if res.status == "time_limit":
            raise _time_limit_error(backend, time_limit_s, size, setup_s,
                                    stats.get("tabulated", True), t0)
        if max_iteration_time_s is not None:
            raise InfeasibleError(
                f"no plan fits in memory and iterates within {max_iteration_time_s:.6g} s",
                [f"every plan that fits (if any) takes longer than {max_iteration_time_s:.6g} s "
                 "per iteration"], ["a longer deadline, or more or faster GPUs"])
        raise explain_infeasible(space)
    wall = time.perf_counter() - t0
    plans = [_solved(c, objective, tokens, backend, res.status == "optimal",
                     modelled=not stats.get("plans_enumerated")) for c in res.candidates]
    status = res.status if res.status != "infeasible" else "optimal"
    # no plan in the space is better than this: the best plan's value once proven; cut
    # short, the best bound the search reached (None when it reached none)
    pb = None if res.bound is None else min(res.bound * objective_scale(
        objective, plans[0].plan, tokens), plans[0].objective)
    fw = space.options.framework
    fw_name = fw.name if fw is not None else None
    plans = [replace(p, estimate=with_band(p.estimate, model, cluster, p.plan, fw_name))
             for p in plans]
    best = plans[0]
    return SolveResult(backend, status, objective, plans, wall, size,
                       {**stats, "setup_s": setup_s}, tokens, pb,
                       price_per_gpu_hour(cluster), time_limit_s, fw_name,
                       published=published_comparison(
                           model, cluster, best.plan, best.estimate,
                           best.estimate.expected_error_pct))


def _search(space: SearchSpace, size: int, objective: Objective, backend: str, top_k: int,
            time_limit_s: float, presolve: bool, say: Callable[[str], None],
            log: Callable[[str], None] | None, max_iteration_time_s: float | None,
            t0: float) -> tuple[SearchResult, dict[str, Any], float]:
    """Run the search on what is left of the time limit (counted from ``t0``: enumerating
    and tabulating the space are part of it). A phase that has started runs to its end;
    none starts once the limit is spent (the result then has no candidates and the status
    ``time_limit``). Returns the result, its statistics and the set-up time."""
    if backend == "exhaustive":
        setup_s = time.perf_counter() - t0
        res: SearchResult = run_exhaustive(
            space, objective, top_k, max(time_limit_s - setup_s, 0.0),
            progress=lambda done, total: say(f"exhaustive: {done:,} of {total:,} plans evaluated"),
            max_time_s=max_iteration_time_s)
        return res, {"evaluations": res.stats.evaluations}, setup_s
    # tabulated even past the limit: the tables' bound orders the points, and a set-up that
    # spends the limit still answers with the best plan of the first points in that order
    say(f"tabulating the cost model over {size:,} plans")
    memo: dict = {}  # the per-outer arrays, shared by the bound's tables and these
    tabulated, pruned = prune_before_tabulating(space, objective, top_k, max_iteration_time_s,
                                                memo=memo)
    tb = build_tables(tabulated, objective, memo=memo)
    setup_s = time.perf_counter() - t0
    say("solving" if setup_s < time_limit_s else
        f"set-up took {setup_s:.2f} s of the {time_limit_s:g} s limit: evaluating the "
        "points in bound order")
    res = run_search(tb, backend, top_k, max(time_limit_s - setup_s, 0.0), presolve,
                     progress=say, log=log, max_time_s=max_iteration_time_s,
                     enumerate_plans=ENUMERATE_MAX_PLANS)
    return res, {"points": res.stats.points_total + pruned,
                 "points_pruned_before_tabulating": pruned,
                 "points_in_model": res.stats.points_model,
                 "plans_enumerated": res.stats.plans_enumerated,
                 "solver_calls": res.stats.solver_calls,
                 "evaluations": res.stats.evaluations}, setup_s


#: The points presolve leaves are costed plan by plan with the vectorized evaluator,
#: instead of building and solving the model, when they hold at most this many plans (a
#: cost trade-off: the evaluator costs them in about 0.1 s, about what loading the solver
#: library alone costs; the README's solves leave 1-21 points, a few hundred plans).
ENUMERATE_MAX_PLANS = 100_000
#: Spaces of at least this many points are bounded before they are tabulated (smaller ones
#: tabulate faster than the network-free tables and the probe cost: a cost trade-off,
#: measured warm on dgx-h100-superpod: llama3-8b/64 (11,299 points) 0.18 -> 0.08 s CPU,
#: llama3-70b/512 (19,081) 0.28 -> 0.17 s, llama3-405b/1024 (25,466, a tenth pruned)
#: 0.35 -> 0.39 s; spaces of a thousand points gain nothing).
PRUNE_MIN_POINTS = 5_000
#: Outers (in the network-free bound's order) tabulated and evaluated for the incumbent.
PRUNE_PROBE_OUTERS = 8


def with_outers(space: SearchSpace, outers: list[Outer]) -> SearchSpace:
    """The same space (rules, placements, inner options) restricted to ``outers``."""
    sub = copy.copy(space)
    sub.outers = list(outers)
    return sub


def prune_before_tabulating(space: SearchSpace, objective: Objective, top_k: int,
                            max_time_s: float | None, min_points: int | None = None,
                            memo: dict | None = None) -> tuple[SearchSpace, int]:
    """The space less the outer configurations (degrees, microbatch, interleaving, expert
    layout) that cannot hold one of the ``top_k`` best plans, and how many points (outer,
    placement) that drops.

    Each outer is bounded without its network (``build_tables(network=False)``: every
    collective, send and expert exchange free; the same kernels, memory and states), a
    bound of every placement's plans; the few outers with the smallest bounds are
    tabulated in full and their best plans evaluated exactly (presolve's probe); an outer
    whose bound exceeds the K-th best of those holds no plan among the K best. The
    network-free tables have one point per outer instead of one per placement, and the
    per-placement tables are then built for the outers left only.

    Not where the network-free terms may exceed the real ones: an MoE layer whose host
    launches its experts slower than the GPU runs them (``moe_expert_host_us > 0``, the
    Megatron-Core frameworks') stalls for less when its exchanges take longer
    (:func:`planner.costmodel.moe.host_stall_s`), and a recomputed forward stalls again,
    so that layer's time can fall as its communication grows.

    ``min_points``: the smallest space bounded so (default :data:`PRUNE_MIN_POINTS`);
    ``memo``: :func:`build_tables`' memo, for the tabulation of the space returned."""
    if space.model.moe is not None and space.cluster.gpu.efficiency.moe_expert_host_us > 0:
        return space, 0
    placed = [o for o in space.outers if space.placements(o)]
    points = sum(len(space.placements(o)) for o in placed)
    if not points or points < (PRUNE_MIN_POINTS if min_points is None else min_points):
        return space, 0
    free = with_outers(space, placed)
    first = space.placements
    free.placements = lambda o: first(o)[:1]  # type: ignore[method-assign]
    lbf = lower_bounds(build_tables(free, objective, network=False, memo=memo))
    order = [i for i in np.argsort(lbf, kind="stable") if np.isfinite(lbf[i])]
    if not order:  # nothing fits: the whole space, whose search says why
        return space, 0
    probe = with_outers(space, [placed[i] for i in order[:PRUNE_PROBE_OUTERS]])
    _, incumbents, _ = presolve(build_tables(probe, objective, memo=memo), top_k=top_k,
                                max_time_s=max_time_s)
    values = sorted(c.objective for c in incumbents if math.isfinite(c.objective))
    if len(values) < top_k:
        return space, 0
    cut = values[top_k - 1] * (1 + 1e-9)  # as presolve: the bound may land an ulp above
    keep = [o for o, b in zip(placed, lbf) if b <= cut]
    return with_outers(space, keep), points - sum(len(space.placements(o)) for o in keep)


def _time_limit_error(backend: str, time_limit_s: float, size: int, setup_s: float,
                      tabulated: bool, t0: float) -> InfeasibleError:
    """No plan found within the time limit: say where the time went."""
    wall = time.perf_counter() - t0
    if setup_s >= time_limit_s:
        done = "enumerating {:,} plans and tabulating the cost model over them" if tabulated \
            and backend != "exhaustive" else "enumerating {:,} plans"
        reasons = [f"setting up the search ({done.format(size)}) took {setup_s:.2f} s of "
                   f"the {time_limit_s:g} s limit; no plan was evaluated"]
        hints = [f"a --time-limit well above the {setup_s:.2f} s of set-up"
                 + ("" if tabulated or backend == "exhaustive"
                    else ", and tabulating the cost model takes longer than enumerating"),
                 "fix some knobs with --fix to shrink the space"]
    else:
        reasons = [f"{backend} stopped after {wall:.2f} s before finding a feasible plan in a "
                   f"space of {size:,} plans; the request may still be feasible"]
        hints = ["raise --time-limit", "keep the bound presolve on (drop --no-presolve)",
                 "fix some knobs with --fix to shrink the space"]
    return InfeasibleError(f"no plan found within the time limit ({time_limit_s:g} s)",
                           reasons, hints, status="time_limit")


def _positive(name: str, value: Any, integer: bool = False) -> None:
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or not math.isfinite(value) or value <= 0:
        kind = "a positive integer" if integer else "a positive finite number"
        raise InputError(f"{name} {value!r}: expected {kind}")


def _check_request(tokens: float | None, time_limit_s: float,
                   max_iteration_time_s: float | None, options: SpaceOptions | None) -> None:
    """Numbers of a solve request: finite and positive (a NaN or negative budget would give
    a NaN or negative answer), the space's bounds at least 1."""
    if tokens is not None:
        _positive("--tokens", tokens)
    _positive("--time-limit", time_limit_s)
    if max_iteration_time_s is not None:
        _positive("max_iteration_time_s", max_iteration_time_s)
    if options is not None:
        _positive("--max-microbatch", options.max_microbatch, integer=True)
        _positive("--max-virtual-stages", options.max_virtual_stages, integer=True)
        _positive("min_cp_tokens", options.min_cp_tokens, integer=True)


def _solved(c: Candidate, objective: Objective, tokens: float | None, backend: str,
            proven: bool, modelled: bool = True) -> SolvedPlan:
    scale = objective_scale(objective, c.plan, tokens)
    # brute force has no model: its value is the exact one, and a bound only once complete;
    # where presolve left few plans and each was costed exactly, no formulation ran at all
    bound = c.bound if backend != "exhaustive" else (c.objective if proven else None)
    if not modelled:
        bound = None
    return SolvedPlan(c.plan, c.estimate, c.objective * scale,
                      None if bound is None else bound * scale)


# ---- why nothing fits ---------------------------------------------------------------------
def explain_empty(space: SearchSpace) -> InfeasibleError:
    """No plan passes the structural rules: name the rules, from a representative plan."""
    model, cluster = space.model, space.cluster
    fixed = {k: v for k, v in space.fixed.items() if k in DECISIONS}
    data = apply_overrides({**space.base, "tp": 1, "pp": 1, "cp": 1, "dp": 1},
                           list(fixed.items()))
    # a representative plan: the GPUs the fixed degrees leave go to the first free degree
    used = math.prod(data[k] for k in ("tp", "pp", "cp", "dp"))
    free = [k for k in ("dp", "pp", "tp") if k not in fixed]
    if free and cluster.num_gpus % used == 0:
        data[free[0]] = cluster.num_gpus // used
    invented = bool(free) and cluster.num_gpus % used != 0
    if invented:
        data[free[0]] = max(cluster.num_gpus // used, 1)
    reasons: list[str] = []
    try:
        plan = Plan.model_validate(data)
        reasons = check_structure(model, cluster, plan, space.options.allow_idle_gpus)
        if invented:  # the batch rule would only be about the degree made up above
            reasons = [r for r in reasons if not r.startswith("global_batch_size")]
    except Exception as err:  # noqa: BLE001 - report, whatever it is
        reasons = [str(err)]
    if not reasons:
        reasons = ["no combination of tp, cp, pp, dp, microbatch and interleaving satisfies the "
                   f"divisibility rules for {model.num_attention_heads} heads, "
                   f"{model.num_layers} layers, batch {space.base['global_batch_size']} on "
                   f"{cluster.num_gpus} GPUs"]
    hints = []
    if fixed:
        hints.append(f"relax the fixed knobs {', '.join(f'{k}={v}' for k, v in fixed.items())}")
    hints.append(f"try --gpus with a power of two, or a global batch divisible by the data "
                 f"parallel degree (now {space.base['global_batch_size']})")
    return InfeasibleError("no plan in the search space satisfies the structural rules",
                           reasons, hints)


def explain_no_placement(space: SearchSpace) -> InfeasibleError:
    """Plans pass the structural rules, but none can be placed on the topology."""
    fixed = (space.fixed.get("placement") or {}).get("domain")
    o = space.outers[0]
    dom = tuple(int(fixed.get(d, 1)) for d in WORLD_DIMS) if fixed else None
    reason = "no placement of the groups fills the NVSwitch domains"
    try:
        spans_for((o.tp, o.cp, o.dp, o.pp), dom, space.order, tuple(space.cluster.topology))
    except PlacementError as err:
        reason = str(err)
    return InfeasibleError("no plan can be placed on this cluster", [reason],
                           [f"placement.domain factors whose product is the domain size "
                            f"({space.cluster.domain_size}) and that divide their group sizes",
                            "drop the placement --fix"])


def explain_infeasible(space: SearchSpace) -> InfeasibleError:
    """Every plan is out of memory: report the least memory any plan needs."""
    model, cluster = space.model, space.cluster
    best: tuple[float, Plan, Estimate] | None = None
    # Least-memory plan: maximum sharding within the space (exact evaluation of a few).
    cands = []
    for o in sorted(space.outers, key=lambda o: (-(o.tp * o.pp * o.cp), o.mbs))[:40]:
        for dom in space.placements(o)[:1]:
            for inner in space.inners(o):
                cands.append(space.plan(o, dom, inner))
    for plan in cands:
        est = evaluate(model, cluster, plan, space.options.allow_idle_gpus)
        if est.memory_per_gpu_bytes is None:
            continue
        if best is None or est.memory_per_gpu_bytes < best[0]:
            best = (est.memory_per_gpu_bytes, plan, est)
    hbm = cluster.gpu.hbm_gib
    if best is None:
        return InfeasibleError("no plan fits", ["no plan could be evaluated"], [])
    need = best[0] / GiB
    p = best[1]
    top = ", ".join(f"{k} {v / GiB:.1f}" for k, v in sorted(
        best[2].memory_breakdown_bytes.items(), key=lambda kv: -kv[1])[:3])
    offl = "".join(f", {k}" for k in ("offload_optimizer", "offload_params") if getattr(p, k))
    reasons = [
        f"needs {need:.1f} GiB per GPU even at maximum sharding (tp={p.tp}, pp={p.pp}, "
        f"cp={p.cp}, ZeRO-{p.zero_stage}{offl}, recompute {p.recompute}, microbatch "
        f"{p.microbatch_size}: {top}); HBM is {hbm:g} GiB, "
        f"{hbm - cluster.memory_reserve_gib:g} GiB usable after the "
        f"{cluster.memory_reserve_gib:g} GiB reserve"
    ]
    hints = []
    factor = need / hbm
    # the estimate scales the GPU count as if ZeRO sharded the states over data-parallel
    # ranks; with ZeRO 0 fixed, added data-parallel GPUs hold full copies and save nothing
    zero0 = space.fixed.get("zero_stage") == 0
    if factor > 1 and not zero0:
        hints.append(f"about {math.ceil(factor * cluster.num_gpus / 8) * 8} GPUs or more "
                     f"(--gpus), if the states dominate")
    elif factor > 1:
        hints.append("with ZeRO stage 0 every data-parallel GPU holds all the states, so more "
                     "GPUs do not help: unfix zero_stage")
    hints.append("a GPU with more HBM (h200: 140 GiB, b200: 168 GiB, mi300x: 179 GiB)")
    if cluster.offload is None and best[2].memory_breakdown_bytes.get("optimizer", 0) > 0:
        hints.append("an offload tier for the optimizer states (an `offload:` block in the "
                     "cluster file; the catalog's dgx-h100-superpod has one)")
    if space.base.get("seq_len", 0) > 4096:
        hints.append(f"a shorter --seq-len than {space.base['seq_len']}, or context parallelism")
    if space.fixed:
        hints.append("unfix the knobs that limit sharding or recomputation "
                     f"({', '.join(space.fixed)})")
    return InfeasibleError("no plan fits in memory", reasons, hints)
