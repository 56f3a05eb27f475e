"""planner: a constraint-optimization planner for distributed transformer training.

Architecture: specs -> cost model (the exact evaluator) -> formulations (CP-SAT, MILP)
-> solve/procure -> report.
"""

__version__ = "0.1.0"

from planner.api import (  # noqa: E402
    evaluate,
    evaluate_many,
    export_plan,
    load_cluster,
    load_gpu,
    load_model,
    load_plan,
    plan_from_megatron,
    procure,
    serve,
    evaluate_serve,
    solve,
)
from planner.costmodel.train.evaluator import Estimate  # noqa: E402
from planner.errors import InfeasibleError, InputError, PlannerError  # noqa: E402
from planner.specs import ClusterSpec, GPUSpec, ModelSpec, Placement, Plan  # noqa: E402

__all__ = [
    "__version__",
    "evaluate",
    "evaluate_many",
    "export_plan",
    "load_cluster",
    "load_gpu",
    "load_model",
    "load_plan",
    "plan_from_megatron",
    "procure",
    "serve",
    "evaluate_serve",
    "solve",
    "Estimate",
    "InfeasibleError",
    "InputError",
    "PlannerError",
    "ClusterSpec",
    "GPUSpec",
    "ModelSpec",
    "Plan",
    "Placement",
]
