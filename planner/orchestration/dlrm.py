"""Solve a DLRM model: the sharding plan of least iteration time, as typed results with
the JSON form ``planner solve --json`` prints (``plan.tables``, ``estimate``,
``feasible``, ``solver``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from formulations.dlrm.search import DLRMSolution, solve_sharding
from planner.errors import InputError
from planner.orchestration.overrun import overrun_fields, overrun_s
from planner.specs.cluster import ClusterSpec
from planner.specs.dlrm import MAX_GLOBAL_BATCH, DLRMSpec
from planner.specs.validate import _short


#: What each solver status means, for ``--json`` and the text output.
STATUS_TEXT = {"optimal": "proven optimal", "time_limit": "best found (time limit)",
               "heuristic": "best found by local search (too large for the exact model)"}
#: ... and when the plan is TorchRec's greedy partitioner's (nothing faster found in time).
GREEDY_TEXT = "greedy baseline (time limit)"


def status_text(s: DLRMSolution) -> str:
    """What the answer is worth, in words (:data:`STATUS_TEXT`, :data:`GREEDY_TEXT`)."""
    return GREEDY_TEXT if s.found_by == "greedy" else STATUS_TEXT[s.status]


@dataclass(frozen=True)
class DLRMSolveResult:
    model: DLRMSpec
    cluster: ClusterSpec
    solution: DLRMSolution
    time_limit_s: float | None = None

    @property
    def time_limit_overrun_s(self) -> float | None:
        """Seconds past the time limit when over 10 % past it (set-up, the warm start and
        decoding need a minimum whatever the limit), else None."""
        return overrun_s(self.solution.solve_time_s, self.time_limit_s)

    def overrun_fields(self) -> dict[str, Any]:
        # no integer model's value: no model was built (or its solver found nothing)
        why = ("listing every table's options, the searches' set-up and evaluating the plan "
               "take a minimum whatever the limit" if self.solution.model_objective_s is None
               else "building the model and the warm start take a minimum whatever the limit")
        return overrun_fields(self.solution.solve_time_s, self.time_limit_s, why)

    @property
    def best(self) -> DLRMSolution:
        return self.solution

    @property
    def status(self) -> str:
        return self.solution.status

    def to_json(self) -> dict[str, Any]:
        s, est = self.solution, self.solution.estimate
        gap = s.optimality_gap
        return {
            "model": self.model.name, "kind": "dlrm", "cluster": self.cluster.name,
            "num_gpus": self.cluster.num_gpus,
            "plan": s.plan.to_dict(),
            "estimate": {**est.to_json(), "global_batch_size": self.model.global_batch_size},
            "feasible": est.feasible,
            "solver": {"backend": s.backend, "status": s.status,
                       "status_text": status_text(s), "found_by": s.found_by,
                       "solve_time_s": s.solve_time_s,
                       "model_objective_s": s.model_objective_s,
                       "evaluator_objective_s": est.iteration_time_s,
                       "optimality_gap": gap,
                       **self.overrun_fields(),
                       **({"bound_note": "the LP bound was cut by the time limit: the gap "
                                         "is to a weaker bound"} if s.bound_cut else {})},
        }


def solve_dlrm(model: DLRMSpec, cluster: ClusterSpec, *, backend: str = "cpsat",
               time_limit_s: float = 60.0, global_batch_size: int | None = None,
               kinds: tuple[str, ...] | None = None) -> DLRMSolveResult:
    """The best sharding of ``model`` on ``cluster`` (``global_batch_size`` overrides the
    model's); raises InfeasibleError when no plan fits, InputError on bad input."""
    if global_batch_size is not None:
        if (isinstance(global_batch_size, bool) or not isinstance(global_batch_size, int)
                or not 1 <= global_batch_size <= MAX_GLOBAL_BATCH):
            raise InputError(f"global_batch_size {_short(global_batch_size)}: expected an "
                             f"integer from 1 to {MAX_GLOBAL_BATCH}")
        model = model.model_copy(update={"global_batch_size": global_batch_size})
    if isinstance(time_limit_s, bool) or not isinstance(time_limit_s, (int, float)) or not (
            0 < time_limit_s < 1e7):
        raise InputError(f"time_limit_s {_short(time_limit_s)}: expected seconds > 0")
    return DLRMSolveResult(model, cluster, solve_sharding(model, cluster, backend,
                                                          float(time_limit_s), kinds),
                           float(time_limit_s))
