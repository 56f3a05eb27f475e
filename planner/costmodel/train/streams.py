"""MAD-Max's two-stream overlap model, a named seed variant (Hsia et al. ISCA 2024;
MAD-Max, Hsia et al. 2024). Not used by the evaluator or the formulations.

The product's evaluator overlaps data-parallel traffic with a compute window in closed
form (``compose.overlapped_s``). MAD-Max instead replays one iteration as two in-order
streams, one for compute and one for communication, linked by dependencies:

* forward, per layer: FSDP all-gather of the layer's weights, then its compute; with
  MAD-Max's pre-optimized prefetch the all-gather of layer i waits for layer i-1's
  forward (``prefetch="madmax"``); ``"optimized"`` drops that wait (paper Fig. 9);
* forward -> backward is a barrier;
* backward, per layer (last first): FSDP all-gather again (pre-optimized: waits for the
  backward of layer i+1), the layer's backward, then a non-blocking gradient collective
  (FSDP reduce-scatter, DDP all-reduce) queued on the one communication stream;
* TP activation all-reduces block the compute stream; no optimizer step; the iteration
  ends when both streams are done.

Compute and collective times are the product's (per-layer roofline and the topology's
collective model). Payloads follow MAD-Max: weights and gradients move in the compute
dtype (2 bytes). Granularity is one transformer layer (MAD-Max splits it into attention
and FC); pipeline parallelism and gradient accumulation are out of scope, as in MAD-Max.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from planner.costmodel.layer import layer_params
from planner.costmodel.network import collective_time_s, combine, group_spans
from planner.specs.cluster import ClusterSpec
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan
from planner.costmodel.train.evaluator import prepare

#: MAD-Max moves weights and gradients in the model's parameter precision (fp16/bf16).
MADMAX_COMM_BYTES = 2.0


@dataclass(frozen=True)
class StreamTimes:
    iteration_s: float
    compute_s: float  # sum of compute, TP all-reduces included
    comm_s: float  # sum of data-parallel collectives
    exposed_comm_s: float  # iteration - compute


def two_stream_iteration(model: ModelSpec, cluster: ClusterSpec, plan: Plan,
                         prefetch: Literal["madmax", "optimized"] = "madmax") -> StreamTimes:
    """One iteration of ``plan`` (zero_stage 0 = DDP, 3 = FSDP) replayed on MAD-Max's two
    streams."""
    if plan.pp != 1 or plan.num_microbatches != 1:
        raise ValueError("the MAD-Max stream model needs pp = 1 and one microbatch per rank")
    if plan.zero_stage not in (0, 3):
        raise ValueError("the MAD-Max stream model knows DDP (zero_stage 0) and FSDP (3)")
    prep = prepare(model, cluster, plan)
    (stage,) = prep.results
    kinds = model.layer_kinds()
    costs = prep.costs
    # embedding and LM head: what the stage holds beyond its transformer layers
    end_f = stage.time["forward"] - sum(costs[k].fwd_s for k in kinds)
    end_b = stage.time["backward"] - sum(costs[k].bwd_s for k in kinds)

    spans = group_spans(plan, cluster)
    dp_spans = combine(spans["dp"], spans["cp"])
    levels = tuple(cluster.topology)

    def coll(op: str, params: float) -> float:
        return collective_time_s(op, params * MADMAX_COMM_BYTES, dp_spans, levels,  # type: ignore[arg-type]
                                 cluster.collective_chunks)

    fsdp = plan.zero_stage == 3
    comp = comm = 0.0  # stream cursors
    comp_sum = comm_sum = 0.0

    def on_comm(dur: float, after: float) -> float:
        nonlocal comm, comm_sum
        comm = max(comm, after) + dur
        comm_sum += dur
        return comm

    def on_comp(dur: float, after: float) -> float:
        nonlocal comp, comp_sum
        comp = max(comp, after) + dur
        comp_sum += dur
        return comp

    # forward
    prev_end = on_comp(end_f, 0.0)  # embedding
    for k in kinds:
        c = costs[k]
        ready = 0.0
        if fsdp:
            ready = on_comm(coll("all_gather", layer_params(model, k, plan.tp)),
                            prev_end if prefetch == "madmax" else 0.0)
        prev_end = on_comp(c.fwd_s + c.tp_comm_s / 2, ready)
    barrier = max(comp, comm)
    comp = comm = barrier
    # backward, last layer first; the LM head's backward comes first
    prev_end = on_comp(0.0, barrier)
    for k in reversed(kinds):
        c = costs[k]
        p = layer_params(model, k, plan.tp)
        ready = 0.0
        if fsdp:
            ready = on_comm(coll("all_gather", p), prev_end if prefetch == "madmax" else 0.0)
        prev_end = on_comp(c.bwd_s + c.tp_comm_s / 2, ready)
        on_comm(coll("reduce_scatter" if fsdp else "allreduce", p), prev_end)
    on_comp(end_b, 0.0)
    end = max(comp, comm)
    return StreamTimes(end, comp_sum, comm_sum, end - comp_sum)
