"""Megatron-LM arguments for a mixed plan (pipeline stages on different GPU pools).

Megatron-LM runs one job across the pools: its per-stage layer counts are the
``--pipeline-model-parallel-layout`` string (stages split by ``|``, ``E`` the embedding,
``L`` the loss; NVIDIA/Megatron-LM docs/api-guide/pipeline_parallel_layout.md, commit
2d2c30c), and its rank order ``tp-cp-ep-dp-pp`` (``megatron/core/parallel_state.py``,
core_v0.15.3) numbers the pipeline stages outermost, so stage ``r`` is ranks
``r w .. (r + 1) w - 1`` with ``w = tp x cp x dp``: the launcher lists each stage's
nodes, from its pool, in stage order.

What it cannot run is refused, naming the rule: every refusal of the single-type
Megatron export (:func:`planner.export.megatron.refusals`: ZeRO 2/3, offloads, ...), and
a rank order whose pipeline dimension is not outermost (a stage's ranks would straddle
pools). Data-parallel replicas of different GPU types with the batch split by speed are
not part of a mixed plan; Megatron-LM could not run them either: every data-parallel
rank takes the same ``--micro-batch-size`` and ``--global-batch-size / (dp x mbs)``
microbatches (megatron/training/arguments.py, core_v0.15.3).
"""

from __future__ import annotations

import math

from planner.costmodel.train.mixed import evaluate_mixed
from planner.export import megatron
from planner.export.common import Target, refuse
from planner.specs.mixed import MixedClusterSpec, MixedPlan
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan

FMT = "megatron"
#: the pipeline arguments of the single-type export that the layout replaces
_PIPELINE_FLAGS = ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
                   "--pipeline-model-parallel-layout", "--num-layers-per-virtual-pipeline-stage")


def stage_ranks(mp: MixedPlan) -> list[tuple[int, int, str]]:
    """``(first rank, last rank, pool)`` of every stage in Megatron's rank order."""
    w = mp.plan.tp * mp.plan.cp * mp.plan.dp
    return [(r * w, (r + 1) * w - 1, s.pool) for r, s in enumerate(mp.stages)]


def megatron_mixed_args(model: ModelSpec, mc: MixedClusterSpec, mp: MixedPlan) -> list[str]:
    """``pretrain_gpt.py`` arguments for the mixed plan; raises InputError (a refusal)
    for what Megatron-LM cannot run as planned."""
    order = [d for d in mp.plan.placement.order if d != "ep"]
    if order[-1] != "pp":
        refuse(FMT, "placement.order", "-".join(mp.plan.placement.order),
               "a mixed plan puts each pipeline stage on one pool; Megatron-LM numbers "
               "ranks tp-cp-ep-dp-pp, pipeline outermost, and a stage's ranks are contiguous "
               "only with pp last")
    plan = _tp_overlap(model, mc, mp).model_copy(update={"uneven_pipeline": True})
    first = mc.pool(mp.stages[0].pool).cluster
    target = Target(model, first.model_copy(update={"num_gpus": plan.world_size}))
    args = megatron.to_args(plan, target)
    out, skip = [], False
    for a in args:
        if a.startswith("--"):
            skip = a in _PIPELINE_FLAGS
        if not skip:
            out.append(a)
    if mp.plan.pp > 1:
        out += ["--pipeline-model-parallel-layout", megatron.layout_string(mp.layers)]
    return out


def _tp_overlap(model: ModelSpec, mc: MixedClusterSpec, mp: MixedPlan) -> Plan:
    """The shared plan with ``overlap_tp_comm`` as one switch: ``auto`` (each GEMM pair the
    faster, on each pool) is exported when the mixed evaluator's time equals the all-on or
    the all-off plan's, else refused (as :func:`planner.export.common.tp_overlap_switch`)."""
    plan = mp.plan
    if plan.overlap_tp_comm != "auto":
        return plan
    t = {k: evaluate_mixed(model, mc, mp.model_copy(update={"plan": plan.model_copy(
        update={"overlap_tp_comm": k})})).iteration_time_s for k in ("auto", True, False)}
    for k in (True, False):
        if t[k] is not None and t["auto"] is not None \
                and math.isclose(t[k], t["auto"], rel_tol=1e-12, abs_tol=0.0):
            return plan.model_copy(update={"overlap_tp_comm": k})
    refuse(FMT, "overlap_tp_comm", "auto",
           "the faster choice differs between GEMMs or pools and Megatron-LM has one switch "
           "for all; fix overlap_tp_comm=true or false")
