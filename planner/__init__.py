"""planner: a constraint-optimization planner for large-model training, LLM serving and
recommendation models (DLRM), and for buying the cluster they run on.

Architecture: specs -> cost model (the exact evaluator; train/, serve/, dlrm/) ->
formulations (CP-SAT and MILP through one adapter; train/, serve/, dlrm/) ->
orchestration and procurement -> report and export -> CLI. ``planner.validation`` holds
the published runs every prediction is checked against, held out by source, and the
error band each answer carries.
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
from planner.specs.requests import ProcureRequest, ServeRequest, SolveRequest  # noqa: E402

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
    "SolveRequest",
    "ServeRequest",
    "ProcureRequest",
]
