"""planner: a constraint-optimization planner for large-model training, LLM serving and
recommendation models (DLRM), and for buying the cluster they run on.

Architecture: specs -> cost model (the exact evaluator; train/, serve/, dlrm/) ->
formulations (CP-SAT and MILP through one adapter; train/, serve/, dlrm/) ->
orchestration and procurement -> report and export -> CLI. ``planner.validation`` holds
the published runs every prediction is checked against, held out by source, and the
error band each answer carries.
"""

__version__ = "0.1.0"

from importlib import import_module

from planner.errors import InfeasibleError, InputError, PlannerError  # noqa: E402
from planner.specs import ClusterSpec, GPUSpec, ModelSpec, Placement, Plan  # noqa: E402
from planner.specs.requests import ProcureRequest, ServeRequest, SolveRequest  # noqa: E402

#: the API's functions, imported on first use (PEP 562): ``planner.api`` sits above the
#: formulations, which import the specs below it through this package, so importing it
#: here would make ``import formulations.train.space`` a cycle
_LAZY = {name: "planner.api" for name in (
    "evaluate", "evaluate_many", "export_plan", "load_cluster", "load_gpu", "load_model",
    "load_plan", "plan_from_megatron", "procure", "serve", "evaluate_serve", "solve")}
_LAZY["Estimate"] = "planner.costmodel.train.evaluator"


def __getattr__(name: str):  # noqa: ANN202 - PEP 562
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'planner' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


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
