"""Procurement for a DLRM: the cheapest cluster (GPU type and count) that trains the
model on ``samples`` samples within ``days`` (or the fastest within a budget). Every
(template, count) option that can still win gets its exact sharding plan
(formulations/dlrm/search.py); days, dollars, MWh and GPU-hours come from
:func:`metrics.option_metrics`, as for transformers (docs/procure.md), with the GPUs busy
for the whole iteration.

Branch and bound over the options (:func:`_bound`): each option's lower bound on the
iteration time (the work bound and the LP bound of formulations/dlrm, below every plan's
time as the evaluator prices it) gives a lower bound on each metric, since every metric is
linear in the iteration time with non-negative coefficients. The options are solved in
order of their bound on the objective; one whose bound is above the best option found so
far, or past ``days`` or ``budget_usd``, cannot be chosen and is not solved
(:class:`DLRMBound`, ``pruned``). The choice and its figures are those of solving every
option."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from formulations.dlrm.bound import lp_bound
from formulations.dlrm.search import solve_sharding, work_bound_s
from planner.errors import InfeasibleError, InputError
from planner.procurement.metrics import option_metrics
from planner.procurement.templates import candidate_counts
from planner.specs.cluster import ClusterSpec
from planner.specs.dlrm import DLRMSpec
from planner.specs.pricing import PricingSpec

#: Largest DLRM job considered unless --max-gpus says less: the sharding model has a
#: variable per table and rank, so thousands of ranks make each inner solve slow.
DLRM_MAX_GPUS = 1024
OBJECTIVES = ("cost_usd", "energy_mwh", "gpu_hours", "days")
#: Seconds the LP bound of one option may take (formulations/dlrm/bound.py): about 5 ms
#: for dlrm-b's one table entry at any count; a bound cut short is HiGHS's dual bound so
#: far (still valid), or the work bound alone.
BOUND_LP_LIMIT_S = 2.0


@dataclass(frozen=True)
class DLRMOption:
    template: str
    cluster: ClusterSpec
    samples_per_s: float
    iteration_time_s: float
    values: dict[str, float]
    status: str

    def to_json(self) -> dict[str, Any]:
        return {"template": self.template, "gpu": self.cluster.gpu.name,
                "num_gpus": self.cluster.num_gpus, "samples_per_s": self.samples_per_s,
                "iteration_time_s": self.iteration_time_s, "status": self.status,
                **self.values}


@dataclass(frozen=True)
class DLRMBound:
    """An option not solved: no plan of it can be chosen. ``values``: each metric at the
    lower bound of the iteration time ``iteration_time_lb_s``; ``why``: "dominated" (its
    bound on the objective is above an option found) or "limits" (past days or budget)."""

    template: str
    cluster: ClusterSpec
    iteration_time_lb_s: float
    values: dict[str, float]
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"template": self.template, "gpu": self.cluster.gpu.name,
                "num_gpus": self.cluster.num_gpus,
                "iteration_time_lb_s": self.iteration_time_lb_s, "why": self.why,
                "lower_bounds": dict(self.values)}


@dataclass(frozen=True)
class DLRMProcureResult:
    model: DLRMSpec
    samples: float
    objective: str
    choice: DLRMOption | None
    options: list[DLRMOption] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    #: options not solved: their lower bounds show they cannot be chosen (module docstring)
    pruned: list[DLRMBound] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model.name, "kind": "dlrm", "samples": self.samples,
                "objective": self.objective,
                "choice": self.choice.to_json() if self.choice else None,
                "options": [o.to_json() for o in self.options], "skipped": self.skipped,
                "pruned": [b.to_json() for b in self.pruned]}


def procure_dlrm(model: DLRMSpec, samples: float, *, templates: Sequence[ClusterSpec],
                 pricing: PricingSpec, days: float | None = None,
                 budget_usd: float | None = None, objective: str | None = None,
                 counts: Sequence[int] | None = None, max_gpus: int = DLRM_MAX_GPUS,
                 time_limit_s: float = 10.0,
                 progress: Callable[[str], None] | None = None,
                 prune: bool = True) -> DLRMProcureResult:
    """The best option by ``objective`` among those within the limits; options that
    cannot be it are bounded out unsolved (module docstring; ``prune=False`` solves
    every option)."""
    if not isinstance(samples, (int, float)) or isinstance(samples, bool) or not (
            math.isfinite(samples) and samples > 0):
        raise InputError(f"samples {samples!r}: expected a positive number of training samples")
    if samples < model.global_batch_size:  # a fraction of one iteration is no training run
        raise InputError(f"samples {samples:g}: fewer than one iteration's "
                         f"{model.global_batch_size:,} (the model's global_batch_size); "
                         "expected at least that")
    obj = {"cost": "cost_usd", "energy": "energy_mwh", "time": "days"}.get(objective, objective)
    obj = obj or ("days" if budget_usd is not None and days is None else "cost_usd")
    if obj not in OBJECTIVES:
        raise InputError(f"objective {objective!r}: expected cost, energy, gpu_hours or time")
    iterations = samples / model.global_batch_size
    todo = [(tpl, n) for tpl in templates
            for n in counts or candidate_counts(tpl, min(max_gpus, DLRM_MAX_GPUS))]
    bounds = [_bound(model, tpl, n, iterations, pricing) if prune else None for tpl, n in todo]
    # best bound first (ties: the given order), so that the incumbent prunes early
    order = sorted(range(len(todo)), key=lambda i: (
        bounds[i][1][obj] if bounds[i] is not None else 0.0, i))
    solved: dict[int, DLRMOption] = {}
    failed: dict[int, list[str]] = {}  # why an option has no plan, by its index
    pruned: dict[int, DLRMBound] = {}
    best: float | None = None  # the objective of the best option within the limits
    for i in order:
        tpl, n = todo[i]
        why = _pruned(bounds[i], obj, best, days, budget_usd)
        if why is not None:
            pruned[i] = DLRMBound(tpl.name, bounds[i][0], bounds[i][2], bounds[i][1], why)
            continue
        opt = _option(model, samples, tpl, n, pricing, time_limit_s, failed.setdefault(i, []))
        if opt is None:
            continue
        solved[i] = opt
        if progress:
            progress(f"{n}x {tpl.gpu.name}: {opt.samples_per_s:,.0f} samples/s")
        if _within(opt, days, budget_usd) and (best is None or opt.values[obj] < best):
            best = opt.values[obj]
    if progress and pruned:
        progress(f"{len(pruned)} options bounded out unsolved (their lower bound cannot win)")
    options = [solved[i] for i in sorted(solved)]  # the given order, as before
    skipped = [why for i in sorted(failed) for why in failed[i]]
    ok = [o for o in options if _within(o, days, budget_usd)]
    choice = min(ok, key=lambda o: (o.values[obj], o.values["days"])) if ok else None
    result = DLRMProcureResult(model, float(samples), obj, choice, options, skipped,
                               [pruned[i] for i in sorted(pruned)])
    if choice is None:
        err = InfeasibleError(
            f"no option trains {model.name} on {samples:.3g} samples within the limits",
            reasons=[f"{len(options)} options fit in memory; none meets days={days} "
                     f"budget_usd={budget_usd}"]
            + ([f"{len(pruned)} more cannot meet them: their lower bounds are past the "
                "limits"] if pruned else []) + skipped[:3],
            hints=["more days, a larger budget, or larger --max-gpus / --counts"])
        err.result = result  # type: ignore[attr-defined]
        raise err
    return result


def _option(model: DLRMSpec, samples: float, tpl: ClusterSpec, n: int, pricing: PricingSpec,
            time_limit_s: float, skipped: list[str]) -> DLRMOption | None:
    try:
        cluster = tpl if n == tpl.num_gpus else tpl.resized(n)
        s = solve_sharding(model, cluster, "cpsat", time_limit_s)
    except (InfeasibleError, ValueError) as e:
        skipped.append(f"{n}x {tpl.gpu.name} ({tpl.name}): {str(e).splitlines()[0]}")
        return None
    t = s.estimate.iteration_time_s
    metrics = option_metrics(cluster, samples / model.global_batch_size, pricing, tpl.name)
    values = {k: m(t, t) for k, m in metrics.items()}
    return DLRMOption(tpl.name, cluster, s.estimate.samples_per_s, t, values, s.status)


def _within(opt: DLRMOption, days: float | None, budget_usd: float | None) -> bool:
    return ((days is None or opt.values["days"] <= days)
            and (budget_usd is None or opt.values["cost_usd"] <= budget_usd))


def _bound(model: DLRMSpec, tpl: ClusterSpec, n: int, iterations: float,
           pricing: PricingSpec) -> tuple[ClusterSpec, dict[str, float], float] | None:
    """(cluster, each metric's lower bound, the iteration time's lower bound) of the
    option, or None when it gives nothing to prune by. The time bound is the larger of
    :func:`work_bound_s` (total work over the ranks) and the LP relaxation's optimum
    (:func:`lp_bound`): each is below every plan's iteration time as the evaluator
    prices it (their docstrings; tests/test_dlrm.py checks both against exhaustive
    optima), so below the plan the solver returns, proven optimal or not. Each metric is
    ``a x T + b x B`` with ``B = T`` here (the GPUs are busy for the whole iteration), so
    with ``a, b >= 0`` it is non-decreasing in ``T`` and its value at the bound is below
    its value at any plan's time. None when a coefficient is negative (no such bound),
    the cluster cannot be resized to ``n`` (the solve says why), or the LP proves that no
    plan fits in memory: such options are solved, as before, so that ``skipped`` says
    why they fail (they fail in milliseconds)."""
    try:
        cluster = tpl if n == tpl.num_gpus else tpl.resized(n)
    except ValueError:
        return None
    metrics = option_metrics(cluster, iterations, pricing, tpl.name)
    if any(m.time < 0 or m.busy < 0 for m in metrics.values()):
        return None
    lp_s, finished = lp_bound(model, cluster, None, BOUND_LP_LIMIT_S)
    if lp_s is None and finished:
        return None
    t = max(work_bound_s(model, cluster), lp_s or 0.0)
    return cluster, {k: m(t, t) for k, m in metrics.items()}, t


def _pruned(bound: tuple[ClusterSpec, dict[str, float], float] | None, obj: str,
            best: float | None, days: float | None, budget_usd: float | None) -> str | None:
    """Why an option with ``bound`` cannot be chosen, or None (it must be solved): its
    bound past ``days`` or ``budget_usd``; or its bound on ``obj`` strictly above ``best``
    (a tie might still win on days, so it is solved)."""
    if bound is None:
        return None
    lb = bound[1]
    if (days is not None and lb["days"] > days) or (
            budget_usd is not None and lb["cost_usd"] > budget_usd):
        return "limits"
    if best is not None and lb[obj] > best:
        return "dominated"
    return None
