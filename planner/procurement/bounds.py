"""Lower bounds on one iteration's time ``T`` and GPU busy time ``B`` over every plan of an
option (a cluster at one GPU count), computed before any solve, so that the branch and
bound over options (planner/procurement/train.py) never solves an option whose bound is
no better than the incumbent or breaks a limit.

The evaluator composes (planner/costmodel/compose.py)::

    T = (m max_g S_g + (pp - 1)/v x sum_g count_g S_g / pp + max_g R_g) (1 + straggler)
    B = (m sum_g count_g work_g + sum_g count_g optimizer_g) / pp

Every term is non-negative, a stage's per-microbatch time ``S_g`` holds its layers'
forward and backward kernels (``work_g`` too), the ``pp`` ranks hold every layer once
(``sum_g count_g = pp``, so the slowest stage is no faster than the mean) and the straggler
share grows with the world size. Hence, for a plan with degrees ``(tp, cp, pp, dp)``,
microbatch ``mbs``, ``m = gbs / (dp mbs)`` microbatches and ``v`` chunks::

    T >= (1 + straggler(world)) (m + (pp - 1)/v) W / pp,      B >= m W / pp,

where ``W`` is the forward and backward kernel time of one microbatch through all the
layers, the embedding and the head at ``(tp, cp, mbs)``, the least over the strategies the
space may pick (of its decisions only sequence parallelism reaches the kernel times). ``W``
does not depend on the GPU count: it is tabulated once per GPU and shared by the counts
(:class:`WorkTable`). The bound of an option is the least over every degree tuple its
space may hold (the space's own enumeration rules and the evaluator's divisibility rules,
a superset of its plans), never below the GEMM bound
(:func:`planner.procurement.metrics.gemm_time_lower_bound_s`), which holds too.

MoE layers add network terms to their forward time (host stalls behind the exchanges), and
a framework profile changes the base plan and kernels: there the GEMM bound alone is used.
tests/test_procure_bounds.py checks both bounds against every plan of small spaces.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from formulations.train.space import SpaceOptions, divisors
from planner.costmodel.compose import bubble_coefficient, straggler_share
from planner.costmodel.layer import LayerShape, Net, layer_cost
from planner.costmodel.train.evaluator import strategy_from
from planner.costmodel.train.stage import embedding_cost, head_cost
from planner.errors import InputError
from planner.procurement.metrics import Option
from planner.specs.cluster import ClusterSpec
from planner.specs.gpu import GPUSpec
from planner.specs.loaders import plan_from_dict
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan

#: The network as the kernel times see it: none (forward and backward kernel times take no
#: network term; the exchanges are the layer's separate ``tp_comm_s`` and ``cp_comm_s``).
_NO_NET = Net((), (), ())


@dataclass(frozen=True, eq=False)
class BoundedOption(Option):
    """An option with a busy-time bound of its own (``b_lb_s``; ``t_lb_s`` bounds ``T``)."""

    b_lb_s: float | None = None

    def bound(self, metric: str) -> float:
        """No plan of this option has ``metric`` below this."""
        b = self.t_lb_s if self.b_lb_s is None else self.b_lb_s
        return self.metrics[metric](self.t_lb_s, b)


class WorkTable:
    """``W(tp, cp, mbs)`` per GPU: one microbatch's forward and backward kernel time through
    the whole model, the least over the strategies the space may pick, keyed by the GPU
    object, which every count of a template shares. ``covered``: whether the bound applies
    (a dense model, no framework profile, a valid base plan)."""

    def __init__(self, model: ModelSpec, base: dict[str, Any], options: SpaceOptions):
        self.model, self.options = model, options
        self.covered = options.framework is None and model.moe is None
        self.plan: Plan | None = None
        if self.covered:
            try:
                self.plan = plan_from_dict(dict(base), "procurement base plan")
            except InputError:  # the inner solve says what is wrong with it, as before
                self.covered = False
        self.cache: dict[tuple[int, int, int, int], tuple[GPUSpec, float]] = {}

    def work_s(self, gpu: GPUSpec, tp: int, cp: int, mbs: int) -> float:
        key = (id(gpu), tp, cp, mbs)  # the counts of a template share its GPU object
        hit = self.cache.get(key)
        if hit is None:
            hit = self.cache[key] = (gpu, self._work_s(gpu, tp, cp, mbs))
        return hit[1]

    def _work_s(self, gpu: GPUSpec, tp: int, cp: int, mbs: int) -> float:
        model, plan = self.model, self.plan
        assert plan is not None
        shape = LayerShape(tp, cp, mbs, plan.seq_len)
        # the kernels see sequence parallelism alone of the decisions (their elementwise
        # traffic); recomputation and the exchanges are terms of their own
        strats = [strategy_from(plan, "none", sp, "rs_ag" if sp else "allreduce")
                  for sp in ((False, True) if tp > 1 else (False,))]
        total = 0.0
        for t, count in model.layer_counts().items():
            total += count * min(_kernels(layer_cost(model, gpu, _NO_NET, shape, replace(
                s, layer_type=t))) for s in strats)
        total += min(_kernels(embedding_cost(model, gpu, _NO_NET, shape, s)) for s in strats)
        total += min(_kernels(head_cost(model, gpu, _NO_NET, shape, s)) for s in strats)
        return total


def _kernels(cost: Any) -> float:
    return float(cost.fwd_s + cost.bwd_s)


def plan_bounds(table: WorkTable, cluster: ClusterSpec) -> tuple[float, float] | None:
    """Lower bounds ``(T, B)`` over every plan of ``cluster`` at its GPU count (see the
    module docstring), or None where the bound does not apply (then the GEMM bound alone)
    or the space holds no degree tuple."""
    if not table.covered:
        return None
    model, opt, plan = table.model, table.options, table.plan
    assert plan is not None
    n, gb, seq = cluster.num_gpus, plan.global_batch_size, plan.seq_len
    layers, heads, kv = model.num_layers, model.num_attention_heads, model.kv_heads
    ffn = model.ffn_hidden_size if "dense" in model.layer_types else 1
    best_t = best_b = float("inf")
    for tp in divisors(n):
        if heads % tp or kv % tp or ffn % tp:  # the evaluator's divisibility rules
            continue
        for cp in divisors(n // tp):
            if cp > 1 and (seq // cp < opt.min_cp_tokens or seq % cp):
                continue
            for pp in (p for p in divisors(n // (tp * cp)) if p <= layers):
                rest = n // (tp * cp * pp)
                dps = [d for d in divisors(gb) if d <= rest] if opt.allow_idle_gpus else [rest]
                for dp in (d for d in dps if gb % d == 0):
                    s = _straggler(cluster.step_time_cv, tp * cp * pp * dp)
                    for mbs in (b for b in divisors(gb // dp) if b <= opt.max_microbatch):
                        m = gb // (dp * mbs)
                        bubble = _least_bubble(pp, m, layers, opt.max_virtual_stages,
                                               opt.allow_uneven)
                        if bubble is None:  # no plan of the space has these degrees
                            continue
                        per_rank = table.work_s(cluster.gpu, tp, cp, mbs) / pp
                        best_t = min(best_t, (1 + s) * (m + bubble) * per_rank)
                        best_b = min(best_b, m * per_rank)
    if best_t == float("inf"):
        return None
    return best_t, best_b


@lru_cache(maxsize=None)
def _straggler(step_time_cv: float, world: int) -> float:
    return straggler_share(step_time_cv, world)


@lru_cache(maxsize=None)
def _least_bubble(pp: int, m: int, layers: int, max_v: int, allow_uneven: bool
                  ) -> float | None:
    """The least bubble, in stage times, over the interleaving depths ``v`` the space pairs
    with ``pp`` and ``m`` microbatches by its own rules (formulations/train/space.py
    ``_outers``): v > 1 needs pp > 1, at most ``pp x v`` layers and ``m`` a multiple of pp;
    layers split evenly over ``pp x v`` unless uneven pipelines are allowed. None: no
    depth is allowed, so the space holds no plan with these degrees."""
    if pp == 1:
        return 0.0
    vs = [v for v in range(1, max(max_v, 1) + 1)
          if pp * v <= layers and (v == 1 or m % pp == 0)
          and (allow_uneven or layers % (pp * v) == 0)]
    return min((bubble_coefficient(pp, v) * pp for v in vs), default=None)
