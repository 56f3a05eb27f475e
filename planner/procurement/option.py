"""The inner problem: the best plan of one option (template x GPU count) under the limits,
by the proven-optimal solve of :func:`planner.orchestration.train.solve`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from formulations.train.space import SpaceOptions
from planner.errors import InfeasibleError
from planner.orchestration.train import SolvedPlan, solve
from planner.procurement.metrics import METRICS, TIME, Linear, Option, fmt, meets
from planner.procurement.results import Procured
from planner.specs.model import ModelSpec


#: Top-K depths tried when the objective's best plan breaks a limit (docs/procure.md).
TOP_K_STEPS = (8, 64)


@dataclass
class Answer:
    """What one option offers under the limits."""

    best: Procured | None  # the best plan meeting the limits
    top: Procured | None  # the best plan by the objective; None when no plan fits
    reason: str  # why ``best`` is None
    minima: dict[str, float]  # the least value of each limit, computed when ``top`` breaks one
    solver_calls: int


@dataclass(frozen=True)
class Inputs:
    """The inner problem's fixed inputs: the model, base plan fields, search space options."""

    model: ModelSpec
    base: dict[str, Any]
    options: SpaceOptions
    time_limit_s: float


class OptionSolver:
    """Solves for one option, caching each (ranking, deadline) solve and counting them."""

    def __init__(self, inputs: Inputs, opt: Option, limits: dict[str, float]):
        self.inputs, self.opt, self.limits = inputs, opt, limits
        self.cache: dict[tuple, tuple[int, list[SolvedPlan], bool]] = {}
        self.calls = 0

    def plans(self, rank: Linear, k: int = 1, max_t: float | None = None
              ) -> tuple[list[SolvedPlan], bool]:
        """The ``k`` best plans by ``rank`` (within ``max_t`` s per iteration), and whether
        the order is proven."""
        objective = rank.objective()
        key = (objective, max_t)
        hit = self.cache.get(key)
        if hit is None or (hit[0] < k and len(hit[1]) >= hit[0]):
            self.calls += 1
            inp = self.inputs
            res = solve(inp.model, self.opt.cluster, base=inp.base, objective=objective,
                        top_k=k, time_limit_s=inp.time_limit_s, options=inp.options,
                        max_iteration_time_s=max_t)
            hit = self.cache[key] = (k, res.plans, res.status == "optimal")
        return hit[1][:k], hit[2]

    def record(self, sp: SolvedPlan, proven: bool) -> Procured:
        est, opt = sp.estimate, self.opt
        assert est.iteration_time_s is not None and est.gpu_busy_s is not None
        vals = {m: opt.metrics[m](est.iteration_time_s, est.gpu_busy_s) for m in METRICS}
        return Procured(opt.gpu, opt.num_gpus, opt.template, sp.plan, est, vals["days"],
                        vals["cost_usd"], vals["energy_mwh"], vals["gpu_hours"],
                        meets(vals, self.limits), proven, opt.goodput, opt.owned,
                        *((opt.site["facility_power_mw"], opt.site["racks"],
                           opt.site["ports"]) if opt.site else (None, None, None)))

    def first(self, rank: Linear, max_t: float | None = None) -> Procured:
        ranked, proven = self.plans(rank, 1, max_t)
        return self.record(ranked[0], proven)

    def answer(self, top: Procured | None, best: Procured | None = None, why: str = "",
               minima: dict[str, float] | None = None) -> Answer:
        return Answer(best, top, why, minima or {}, self.calls)

    def none(self, top: Procured, why: str) -> Answer:
        """No plan meets the limits: the least value of each, and which it breaks."""
        minima = {m: self.first(self.opt.metrics[m]).value(m) for m in self.limits}
        broken = [f"needs {fmt(m, v)} > {fmt(m, self.limits[m])}" for m, v in minima.items()
                  if v > self.limits[m]]
        return self.answer(top, None, f"{self.opt.label()}: {'; '.join(broken) or why}", minima)

    def solve(self, metric: str, top_only: bool = False) -> Answer:
        """See :func:`answer_option`."""
        opt, limits = self.opt, self.limits
        rank = opt.metrics[metric]
        try:
            top = self.first(rank)
        except InfeasibleError as e:
            why = f"{opt.label()}: {e}" + (f": {e.reasons[0]}" if e.reasons else "")
            return self.answer(None, None, why)
        if top.meets_limits or top_only:
            return self.answer(top, top if top.meets_limits else None)
        timed = {m: v for m, v in limits.items() if opt.metrics[m].busy == 0}
        max_t = min((v / opt.metrics[m].time for m, v in timed.items()), default=None)
        if rank.busy == 0 and len(timed) == len(limits):
            return self.none(top, "")  # the objective's best plan is the fastest
        best = top
        if max_t is not None:
            if self.first(TIME).estimate.iteration_time_s > max_t:
                return self.none(top, "")  # not even the fastest plan is fast enough
            try:
                best = self.first(rank, max_t)
            except InfeasibleError:
                return self.none(top, "")
        if best.meets_limits:
            return self.answer(top, best)
        return self.scan(top, rank, metric, max_t)

    def scan(self, top: Procured, rank: Linear, metric: str, max_t: float | None) -> Answer:
        """A limit with busy time: the objective's top-K plans in exact order; the first
        that meets every limit is the optimum."""
        for k in TOP_K_STEPS:
            ranked, proven = self.plans(rank, k, max_t)
            for sp in ranked:
                rec = self.record(sp, proven)
                if rec.meets_limits:
                    return self.answer(top, rec)
            if len(ranked) < k:
                return self.none(top, "no plan meets every limit at once")
        found = [r for r in (self.first(self.opt.metrics[m], max_t) for m in self.limits)
                 if r.meets_limits]
        if found:
            best = min(found, key=lambda r: r.value(metric))
            return self.answer(top, dataclasses.replace(best, proven_optimal=False))
        return self.none(top, f"no plan among the {TOP_K_STEPS[-1]} best meets every limit")


def answer_option(inputs: Inputs, opt: Option, metric: str, limits: dict[str, float],
                  top_only: bool = False) -> Answer:
    """The best plan of ``opt`` by ``metric`` among those meeting ``limits`` (with
    ``top_only``, only the best plan by ``metric``, flagged for the limits).

    The objective's best plan answers when it meets the limits. Otherwise the limits that
    depend on the iteration time alone (days; a rented budget) become one limit on the
    iteration time, a constraint of the formulation, and the solver answers under it. A
    limit that also depends on busy time (an owned budget pays for electricity) is met by
    scanning the objective's top-K plans in exact order: the first that meets it is the
    optimum (if none of the top ``TOP_K_STEPS[-1]`` does, the best plan meeting every limit
    among the limits' own optima is returned, not proven optimal). Each ranking is the
    inner solve's objective itself (:meth:`Linear.objective`).
    """
    return OptionSolver(inputs, opt, limits).solve(metric, top_only)
