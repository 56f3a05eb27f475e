"""Procurement for a DLRM: the cheapest cluster (GPU type and count) that trains the
model on ``samples`` samples within ``days`` (or the fastest within a budget). Every
(template, count) option gets its exact sharding plan (formulations/dlrm/search.py);
days, dollars, MWh and GPU-hours come from :func:`metrics.option_metrics`, as for
transformers (docs/procure.md), with the GPUs busy for the whole iteration."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from formulations.dlrm.search import solve_sharding
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
class DLRMProcureResult:
    model: DLRMSpec
    samples: float
    objective: str
    choice: DLRMOption | None
    options: list[DLRMOption] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model.name, "kind": "dlrm", "samples": self.samples,
                "objective": self.objective,
                "choice": self.choice.to_json() if self.choice else None,
                "options": [o.to_json() for o in self.options], "skipped": self.skipped}


def procure_dlrm(model: DLRMSpec, samples: float, *, templates: Sequence[ClusterSpec],
                 pricing: PricingSpec, days: float | None = None,
                 budget_usd: float | None = None, objective: str | None = None,
                 counts: Sequence[int] | None = None, max_gpus: int = DLRM_MAX_GPUS,
                 time_limit_s: float = 10.0,
                 progress: Callable[[str], None] | None = None) -> DLRMProcureResult:
    """Solve every option; the best by ``objective`` among those within the limits."""
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
    options, skipped = [], []
    for tpl in templates:
        for n in counts or candidate_counts(tpl, min(max_gpus, DLRM_MAX_GPUS)):
            opt = _option(model, samples, tpl, n, pricing, time_limit_s, skipped)
            if opt is not None:
                options.append(opt)
                if progress:
                    progress(f"{n}x {tpl.gpu.name}: {opt.samples_per_s:,.0f} samples/s")
    ok = [o for o in options if (days is None or o.values["days"] <= days)
          and (budget_usd is None or o.values["cost_usd"] <= budget_usd)]
    choice = min(ok, key=lambda o: (o.values[obj], o.values["days"])) if ok else None
    result = DLRMProcureResult(model, float(samples), obj, choice, options, skipped)
    if choice is None:
        err = InfeasibleError(
            f"no option trains {model.name} on {samples:.3g} samples within the limits",
            reasons=[f"{len(options)} options fit in memory; none meets days={days} "
                     f"budget_usd={budget_usd}"] + skipped[:3],
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
