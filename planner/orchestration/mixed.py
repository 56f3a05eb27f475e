"""Mixed-fleet training solve: the fastest plan over a cluster of several GPU pools.

The answer is the best of two parts, each proven over its own space:

1. each pool alone: the single-type solve (:func:`planner.orchestration.train.solve`,
   CP-SAT or HiGHS with exact re-ranking, or brute force) over that pool's whole space
   (interleaving, placements, offloads included);
2. the plans that use two or more pools (:func:`formulations.train.mixed.run_mixed_search`:
   contiguous stage blocks per pool, every used pool whole, one virtual stage, the rank
   order's placement, no offload, every layer split), searched for a plan faster than
   part 1's best.

Together they cover every single-pool plan of the single-type space and every multi-pool
plan of that shape; the answer is ``optimal`` when both parts finished, ``time_limit``
otherwise. The objective is the iteration time.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from formulations.train.mixed import MixedCandidate, MixedSearchStats, run_mixed_search
from formulations.train.options import SpaceOptions
from planner.errors import InfeasibleError, InputError
from planner.orchestration.train import SolvedPlan, build_space, solve
from planner.specs.mixed import MixedClusterSpec
from planner.specs.model import ModelSpec


@dataclass
class MixedSolveResult:
    status: str  # optimal | time_limit
    best_kind: str  # "mixed" (stages on several pools) or "single" (one pool)
    iteration_time_s: float
    mixed: MixedCandidate | None  # the best multi-pool plan when it beats every pool alone
    single: dict[str, SolvedPlan | None]  # each pool alone (None: nothing fits)
    single_status: dict[str, str]
    mixed_stats: MixedSearchStats = field(default_factory=MixedSearchStats)
    mixed_status: str = "optimal"
    solve_time_s: float = 0.0

    @property
    def best_pool(self) -> str | None:
        """The pool of a single-pool answer."""
        if self.best_kind != "single":
            return None
        return min((p for p, s in self.single.items() if s is not None),
                   key=lambda p: self.single[p].estimate.iteration_time_s)  # type: ignore[union-attr]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "status": self.status,
            "best_kind": self.best_kind,
            "iteration_time_s": self.iteration_time_s,
            "single_pool": {p: None if s is None else {
                "status": self.single_status[p],
                "iteration_time_s": s.estimate.iteration_time_s,
                "plan": s.plan.to_dict()} for p, s in self.single.items()},
            "mixed_search": {"status": self.mixed_status, **vars(self.mixed_stats)},
            "solve_time_s": self.solve_time_s,
        }
        if self.best_kind == "mixed":
            assert self.mixed is not None
            out["plan"] = self.mixed.plan.to_dict()
            out["estimate"] = self.mixed.estimate.to_json()
        else:
            out["best_pool"] = self.best_pool
        return out


def solve_mixed(model: ModelSpec, mc: MixedClusterSpec, *, fixed: dict[str, Any] | None = None,
                base: dict[str, Any] | None = None, backend: str = "cpsat",
                time_limit_s: float = 60.0, options: SpaceOptions | None = None,
                progress: Callable[[str], None] | None = None) -> MixedSolveResult:
    """The fastest training plan on the mixed cluster (module docstring). Raises
    :class:`InfeasibleError` when no plan of either part fits."""
    if not isinstance(time_limit_s, (int, float)) or isinstance(time_limit_s, bool) \
            or not time_limit_s > 0 or not math.isfinite(time_limit_s):
        raise InputError(f"time_limit_s {time_limit_s!r}: expected a positive number of seconds")
    t0 = time.perf_counter()
    say = progress or (lambda _m: None)
    single: dict[str, SolvedPlan | None] = {}
    single_status: dict[str, str] = {}
    why: list[str] = []
    for pool in mc.pools:
        left = max(time_limit_s - (time.perf_counter() - t0), 1e-3)
        say(f"pool '{pool.name}' alone ({pool.cluster.num_gpus} {pool.cluster.gpu.name})")
        try:
            res = solve(model, pool.cluster, fixed=fixed, base=base, objective="time",
                        backend=backend, time_limit_s=left, options=options)
        except InfeasibleError as err:
            single[pool.name], single_status[pool.name] = None, err.status
            why.append(f"pool '{pool.name}' alone: {err}")
            continue
        single[pool.name], single_status[pool.name] = res.best, res.status
    times = {p: s.estimate.iteration_time_s for p, s in single.items() if s is not None}
    incumbent = min(times.values(), default=math.inf)
    # the multi-pool part: the single-type space's validated base and knobs (framework
    # defaults applied); every pool it uses is used whole
    space = build_space(model, mc.pools[0].cluster, fixed, base, options)
    opts = replace(space.options, allow_idle_gpus=False)
    left = max(time_limit_s - (time.perf_counter() - t0), 1e-3)
    say("plans across pools")
    mres = run_mixed_search(model, mc, space.base, space.fixed, opts, left, incumbent,
                            progress)
    proven = mres.status in ("optimal", "infeasible") and all(
        s in ("optimal", "infeasible") for s in single_status.values())
    status = "optimal" if proven else "time_limit"
    wall = time.perf_counter() - t0
    if mres.best is not None:
        return MixedSolveResult(status, "mixed", mres.best.iteration_time_s, mres.best, single,
                                single_status, mres.stats, mres.status, wall)
    if not times:
        raise InfeasibleError("no plan fits on the mixed cluster, on any pool alone or across "
                              "pools", why or ["no multi-pool plan fits in memory"],
                              ["more GPUs, a smaller global batch or sequence"])
    return MixedSolveResult(status, "single", incumbent, None, single, single_status,
                            mres.stats, mres.status, wall)
