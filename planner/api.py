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
           "solve"]


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
    base = {k: v for k, v in dict(global_batch_size=global_batch_size, seq_len=seq_len,
                                  dtype=dtype).items() if v is not None}
    return _solve(m, c, fixed=fixed, base=base, objective=objective, backend=backend,
                  top_k=top_k, time_limit_s=time_limit_s, tokens=tokens, options=options)
