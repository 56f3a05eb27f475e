"""The Python API: load specs by name or path, evaluate plans (and, later, solve)."""

from __future__ import annotations

from typing import Any

from planner.costmodel.evaluator import Estimate
from planner.costmodel.evaluator import evaluate as _evaluate
from planner.specs.cluster import ClusterSpec
from planner.specs.loaders import load_cluster, load_gpu, load_model, plan_from_dict, read_structured
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan

__all__ = ["evaluate", "evaluate_plan", "load_cluster", "load_gpu", "load_model", "load_plan"]


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
