"""The Python API: load specs by name or path, evaluate plans, solve for the best one."""

from __future__ import annotations

from typing import Any

from planner.costmodel.evaluator import Estimate
from planner.costmodel.evaluator import evaluate as _evaluate
from planner.specs.cluster import ClusterSpec
from planner.specs.loaders import load_cluster, load_gpu, load_model, plan_from_dict, read_structured
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan

__all__ = ["evaluate", "evaluate_plan", "load_cluster", "load_gpu", "load_model", "load_plan",
           "procure", "solve"]


def load_plan(path: str, **overrides: Any) -> Plan:
    """A plan from a YAML file, with keyword overrides of its fields."""
    from pathlib import Path

    data = read_structured(Path(path))
    data.update(overrides)
    return plan_from_dict(data, path)


def _resolve(model: ModelSpec | str, cluster: ClusterSpec | str) -> tuple[ModelSpec, ClusterSpec]:
    m = load_model(model) if isinstance(model, str) else model
    c = load_cluster(cluster) if isinstance(cluster, str) else cluster
    return m, c


def evaluate(model: ModelSpec | str, cluster: ClusterSpec | str, plan: Plan | dict[str, Any],
             allow_idle_gpus: bool = False) -> Estimate:
    """Cost of one plan. ``model`` and ``cluster`` may be catalog names or file paths."""
    m, c = _resolve(model, cluster)
    p = plan if isinstance(plan, Plan) else plan_from_dict(dict(plan), "plan")
    return _evaluate(m, c, p, allow_idle_gpus=allow_idle_gpus)


evaluate_plan = evaluate


def solve(model: ModelSpec | str, cluster: ClusterSpec | str, *, gpus: int | None = None,
          fix: dict[str, Any] | None = None, global_batch_size: int | None = None,
          seq_len: int | None = None, dtype: str | None = None, objective: str = "time",
          backend: str = "cpsat", top_k: int = 1, time_limit_s: float = 60.0,
          tokens: float | None = None, options: Any = None):
    """The best plan(s) for ``model`` on ``cluster``, proven optimal over the search space.

    ``fix`` pins plan fields (``{"tp": 8, "recompute": "full"}``, dotted keys such as
    ``"placement.domain.tp"`` too); the rest are chosen. Returns a
    :class:`planner.orchestration.SolveResult` (``.best.plan``, ``.best.estimate``, ``.plans``,
    ``.status``, ``.to_json()``); raises :class:`planner.errors.InfeasibleError` (with
    ``reasons`` and ``hints``) when nothing fits, :class:`planner.errors.InputError` on bad
    input.
    """
    from planner.orchestration import solve as _solve
    from planner.specs.loaders import apply_overrides

    m = load_model(model) if isinstance(model, str) else model
    c = load_cluster(cluster, gpus) if isinstance(cluster, str) else (
        cluster.resized(gpus) if gpus else cluster)
    fixed = apply_overrides({}, list((fix or {}).items()))
    base = {k: v for k, v in (("global_batch_size", global_batch_size), ("seq_len", seq_len),
                              ("dtype", dtype)) if v is not None}
    return _solve(m, c, fixed=fixed, base=base, objective=objective, backend=backend,
                  top_k=top_k, time_limit_s=time_limit_s, tokens=tokens, options=options)


def procure(model: ModelSpec | str, tokens: float, *, days: float | None = None,
            budget_usd: float | None = None, objective: str | None = None,
            gpus: list[str] | str | None = None, clusters: list[ClusterSpec | str] | None = None,
            max_gpus: int | None = None, counts: list[int] | None = None,
            pricing: str | None = None, prices: str | dict[str, Any] | None = None,
            pareto: bool = False, global_batch_size: int | None = None,
            seq_len: int | None = None, dtype: str | None = None,
            time_limit_s: float = 60.0, workers: int | None = 1, options: Any = None,
            progress: Any = None):
    """The cheapest (``objective``) cluster and plan that train ``model`` on ``tokens``
    tokens within ``days`` (and ``budget_usd``); see docs/procure.md.

    ``objective``: ``"cost"`` (default), ``"energy"``, ``"gpu_hours"``, or ``"time"`` (the
    default when only a budget is given: the fastest cluster within it). ``gpus`` restricts
    the catalog (names or aliases, a list or "h100,b200"); ``clusters`` replaces the catalog
    templates (names, paths or specs); ``max_gpus`` caps the count, ``counts`` lists the
    counts to consider instead of the default grid. ``pricing``: ``"rent"`` or ``"own"``;
    ``prices``: a pricing YAML path or mapping overriding the catalog's
    (docs/formats.md). ``pareto``: also solve for the fronts of days against cost and
    energy. ``workers`` > 1 answers options in parallel processes (the calling script
    needs an ``if __name__ == "__main__":`` guard; None: one per CPU). ``progress`` is called
    with a line of text as the search goes.

    Returns a :class:`planner.orchestration.procure.ProcureResult` (``.choice`` with
    ``gpu``, ``num_gpus``, ``cluster``, ``plan``, ``days``, ``cost_usd``, ``energy_mwh``,
    ``gpu_hours``, ``mfu``; ``.pareto``; ``.to_json()``, the object of
    ``planner procure --json``). Raises :class:`planner.errors.InfeasibleError` when no
    option meets the limits (``.reasons``, ``.hints``, ``.result``) and
    :class:`planner.errors.InputError` on bad input.
    """
    from planner.orchestration.procure import DEFAULT_MAX_GPUS, catalog_templates, named_templates
    from planner.orchestration.procure import procure as _procure
    from planner.specs.pricing import load_pricing

    m = load_model(model) if isinstance(model, str) else model
    names = gpus.split(",") if isinstance(gpus, str) else gpus
    if isinstance(clusters, (str, ClusterSpec)):
        clusters = [clusters]
    templates = named_templates(clusters, names) if clusters else catalog_templates(names)
    spec = load_pricing(prices if isinstance(prices, str) else None, pricing,  # type: ignore[arg-type]
                        prices if isinstance(prices, dict) else None)
    base = {k: v for k, v in (("global_batch_size", global_batch_size), ("seq_len", seq_len),
                              ("dtype", dtype)) if v is not None}
    return _procure(m, tokens, days=days, budget_usd=budget_usd, objective=objective,
                    templates=templates, max_gpus=max_gpus or DEFAULT_MAX_GPUS, counts=counts,
                    pricing=spec, pareto=pareto, base=base, options=options,
                    time_limit_s=time_limit_s, workers=workers, progress=progress)
