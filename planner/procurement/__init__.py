"""``planner.procurement``: which cluster to buy or rent, and how to train on it.

``templates`` (what can be bought), ``metrics`` (what an option costs, its GEMM bound),
``bounds`` (the stronger bounds every plan of an option obeys, before any solve),
``option`` (the proven-optimal inner solve of one option), ``train`` (the branch and
bound over options), ``explain`` (why nothing meets the limits), ``results``;
``trainserve``: a training campaign then serving, on one fleet or two.
docs/procure.md states the semantics and the argument for optimality.
"""

from planner.procurement.metrics import (
    METRICS,
    OBJECTIVE_METRIC,
    TIME,
    Linear,
    Option,
    gemm_time_lower_bound_s,
    network_capex,
    option_metrics,
    price_keys,
)
from planner.procurement.bounds import BoundedOption, WorkTable, plan_bounds
from planner.procurement.option import Answer, Inputs, OptionSolver, answer_option
from planner.procurement.results import ProcureResult, Procured, pareto_front
from planner.procurement.train import procure
from planner.procurement.trainserve import TrainServeResult, procure_train_serve
from planner.procurement.templates import (
    DEFAULT_MAX_GPUS,
    DERIVE_FROM,
    candidate_counts,
    catalog_templates,
    derived_template,
    named_templates,
)

__all__ = ["procure", "procure_train_serve", "TrainServeResult",
           "ProcureResult", "Procured", "pareto_front", "Linear", "Option", "TIME",
           "METRICS", "OBJECTIVE_METRIC", "option_metrics", "network_capex", "price_keys",
           "gemm_time_lower_bound_s", "BoundedOption", "WorkTable", "plan_bounds", "Answer", "Inputs", "OptionSolver", "answer_option",
           "DEFAULT_MAX_GPUS", "DERIVE_FROM", "candidate_counts", "catalog_templates",
           "derived_template", "named_templates"]
