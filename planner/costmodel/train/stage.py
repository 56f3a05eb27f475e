"""Per-stage terms: embedding and LM head, pipeline p2p, data-parallel traffic, optimizer
step and memory. Pure functions of small keys, shared by the evaluator and the
formulations."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from planner.costmodel import constants as C
from planner.costmodel.numerics import Numerics
from planner.costmodel.compute import elementwise_time_s, gemm_time_s, op_bytes
from planner.costmodel.layer import LayerShape, LayerStrategy, Net, embedding_params, head_params
from planner.costmodel.network import collective_time_s, p2p_time_s
from planner.specs.cluster import TopologyLevel
from planner.specs.gpu import GPUSpec
from planner.specs.model import ModelSpec
from planner.costmodel.layer import layer_params
from planner.costmodel.moe import moe_layer_params


@dataclass(frozen=True)
class EndCost:
    """Embedding (first stage) or LM head + loss (last stage), per microbatch."""

    fwd_s: float
    bwd_s: float
    tp_comm_s: float
    act_bytes: float
    workspace_bytes: float


@lru_cache(maxsize=65536)
def embedding_cost(model: ModelSpec, gpu: GPUSpec, net: Net, shape: LayerShape,
                   strat: LayerStrategy) -> EndCost:
    """Vocabulary-parallel embedding lookup: memory-bound gather, then an all-reduce
    (reduce-scatter with sequence parallelism) over TP (Shoeybi et al. 2019, Sec. 3)."""
    rows = shape.tokens * model.hidden_size
    fwd = elementwise_time_s(gpu, 2 * C.ACT_BYTES * rows)
    bwd = elementwise_time_s(gpu, (C.ACT_BYTES + 2 * C.GRAD_BYTES) * rows)
    comm = 0.0
    if shape.tp > 1:
        op = "reduce_scatter" if strat.sequence_parallel else "allreduce"
        comm = collective_time_s(op, rows * C.ACT_BYTES, net.tp_spans, net.levels, net.chunks)
    return EndCost(fwd, bwd, comm, 0.0, 0.0)


@lru_cache(maxsize=65536)
def head_cost(model: ModelSpec, gpu: GPUSpec, net: Net, shape: LayerShape,
              strat: LayerStrategy) -> EndCost:
    """Final norm, vocabulary-parallel LM head GEMM and fp32 cross-entropy."""
    dt = C.HEAD_DTYPE_IN_FP8 if strat.dtype == "fp8" else strat.dtype
    t, h = shape.tokens, model.hidden_size
    v_loc = model.vocab_size / shape.tp
    sp_div = shape.tp if strat.sequence_parallel else 1
    norm = elementwise_time_s(gpu, op_bytes(model, strat.fused_elementwise)[0] * t * h / sp_div)
    loss = elementwise_time_s(gpu, C.LOSS_BYTES_PER_LOGIT * t * v_loc)
    fwd = norm + gemm_time_s(gpu, dt, t, v_loc, h) + loss / 2
    bwd = (C.ELEMENTWISE_BWD_RATIO * norm + gemm_time_s(gpu, dt, t, h, v_loc)
           + gemm_time_s(gpu, dt, h, v_loc, t) + loss / 2)
    comm = 0.0
    if shape.tp > 1:
        size = t * h * C.ACT_BYTES
        if strat.sequence_parallel:
            comm = (collective_time_s("all_gather", size, net.tp_spans, net.levels, net.chunks)
                    + collective_time_s("reduce_scatter", size, net.tp_spans, net.levels, net.chunks))
        else:
            comm = collective_time_s("allreduce", size, net.tp_spans, net.levels, net.chunks)
        # max and sum-of-exp of the vocab-parallel cross-entropy
        comm += 2 * collective_time_s("allreduce", t * 4.0, net.tp_spans, net.levels, net.chunks)
    act = (C.ACT_BYTES / sp_div + C.ACT_BYTES) * t * h  # final-norm input, head input
    # the loss's live fp32 buffers at its peak (the framework's cross-entropy)
    logits = gpu.efficiency.loss_bytes_per_logit * t * v_loc
    return EndCost(fwd, bwd, comm, act, logits)


def p2p_bytes(model: ModelSpec, shape: LayerShape) -> float:
    """Activation sent between pipeline stages per microbatch; Megatron splits it over the
    TP ranks (scatter/gather optimization, Narayanan et al. 2021, Sec. 4.1)."""
    return shape.tokens * model.hidden_size * C.ACT_BYTES / shape.tp


def p2p_time_per_microbatch_s(model: ModelSpec, shape: LayerShape, v: int, pp: int,
                              pp_spans: tuple[int, ...], levels: tuple[TopologyLevel, ...]
                              ) -> float:
    """Exposed send/recv of one stage per microbatch: activations forward and gradients
    backward for each of its ``v`` chunks."""
    if pp <= 1:
        return 0.0
    return 2 * v * p2p_time_s(p2p_bytes(model, shape), pp_spans, levels)


# ---- data parallelism and the optimizer ----------------------------------------------
@dataclass(frozen=True)
class DPComm:
    """Data-parallel traffic of one stage. ``per_iteration`` happens once after the last
    backward (gradients) or before the first forward (parameters); ``per_microbatch``
    repeats every microbatch (ZeRO-2/3)."""

    grad_s: float  # once per iteration
    param_s: float  # once per iteration
    mb_fwd_s: float  # per microbatch, overlappable with forward
    mb_bwd_s: float  # per microbatch, overlappable with backward


def dp_bucket_params(dp_size: int) -> float:
    """Parameters per gradient bucket: Megatron-Core's default ``max(40M, 1M x dp)`` over
    the dp x cp group (``DistributedDataParallelConfig.bucket_size``: larger groups need
    larger buckets to keep collectives bandwidth-bound)."""
    return max(40e6, 1e6 * dp_size)


def dp_overlap_units(stage_params: float, dp_size: int, layers: int) -> int:
    """Equal shares the once-per-iteration gradient reduction (and the next parameter
    all-gather) is cut into for overlap: the last share cannot overlap
    (:func:`planner.costmodel.compose.overlapped_s`).

    Megatron-Core walks the parameters in backprop order and closes a bucket once it holds
    ``bucket_size`` elements (``dp_bucket_params``); the last bucket, holding the first
    layers and the embedding whose gradients are ready only when the backward ends, keeps
    the remainder (``_compute_default_per_buffer_param_layout`` in
    megatron/core/distributed/param_and_grad_buffer.py, NVIDIA/Megatron-LM d98e8a6). Its
    share is ``r / P`` with ``r = P - B floor(P / B)`` (``B`` when that is 0, ``P`` when
    ``P < B``), at least one layer's ``1 / layers``; the units are ``floor(P / r)``, so the
    share charged is never below the code's. The bucket grows with the group (1M
    parameters per rank), so at large dp the last bucket is a large part of the stage's
    gradients: Llama 3 8B at TP2 (4.0B parameters per GPU) has a 64M-parameter bucket at
    dp 64 (a layer's share, 1/32, is exposed) and a 2,048M one at dp 2,048 (half)."""
    layers = max(int(layers), 1)
    if stage_params <= 0 or dp_size <= 1:
        return layers
    bucket = dp_bucket_params(dp_size)
    full = math.floor(stage_params / bucket)
    rest = stage_params - bucket * full
    if full == 0:
        rest = stage_params
    elif rest <= 0:
        rest = bucket
    return max(1, min(layers, math.floor(stage_params / rest + 1e-9)))


def dp_comm(params_local: float, zero: int, dp_spans: tuple[int, ...],
            levels: tuple[TopologyLevel, ...], chunks: int,
            numerics: Numerics | str = "bf16") -> DPComm:
    """Gradient reduction and parameter gathering over the dp x cp group.

    ZeRO 0: all-reduce of fp32 gradients. ZeRO 1 (Megatron distributed optimizer):
    reduce-scatter of gradients, all-gather of updated parameters. ZeRO 2: gradients
    reduce-scattered every microbatch. ZeRO 3 (FSDP): parameters gathered for forward and
    again for backward, gradients reduce-scattered, every microbatch (Rajbhandari et al.
    2020, Sec. 5).
    """
    nm = Numerics.of(numerics)
    g = params_local * nm.grad_comm_bytes
    p = params_local * nm.param_comm_bytes
    bucket = dp_bucket_params(math.prod(dp_spans))

    def coll(op: str, size: float) -> float:
        # the library sees one bucket per call: its algorithm is chosen at that size
        per = nm.grad_comm_bytes if op in ("allreduce", "reduce_scatter") else nm.param_comm_bytes
        return collective_time_s(op, size, dp_spans, levels, chunks,  # type: ignore[arg-type]
                                 message_bytes=bucket * per)

    if zero == 0:
        return DPComm(coll("allreduce", g), 0.0, 0.0, 0.0)
    if zero == 1:
        return DPComm(coll("reduce_scatter", g), coll("all_gather", p), 0.0, 0.0)
    if zero == 2:
        return DPComm(0.0, coll("all_gather", p), 0.0, coll("reduce_scatter", g))
    ag = coll("all_gather", p)
    return DPComm(0.0, 0.0, ag, ag + coll("reduce_scatter", g))


def optimizer_step_s(gpu: GPUSpec, params_local: float, zero: int, dp_cp: int,
                     offload_optimizer: bool = False) -> float:
    """Adam step, memory-bound, on this GPU's shard of the stage's parameters (none on the
    GPU when the optimizer is offloaded: the CPU runs it, ``offload.offload_times``)."""
    if offload_optimizer:
        return 0.0
    shard = params_local / (dp_cp if zero >= 1 else 1)
    return elementwise_time_s(gpu, shard * C.OPTIMIZER_STEP_BYTES)


def tied_embedding_sync_s(model: ModelSpec, tp: int, pp: int, pp_spans: tuple[int, ...],
                          levels: tuple[TopologyLevel, ...],
                          numerics: Numerics | str = "bf16") -> float:
    """All-reduce of the tied embedding's gradient between the first and the last stage
    after backward (Megatron-LM ``_allreduce_embedding_grads``), on the outermost level
    the pipeline crosses."""
    if not model.tied_embeddings or pp <= 1:
        return 0.0
    outer = max(i for i, k in enumerate(pp_spans) if k > 1)
    pair = tuple(2 if i == outer else 1 for i in range(len(levels)))
    size = model.vocab_size * model.hidden_size / tp * Numerics.of(numerics).grad_comm_bytes
    return collective_time_s("allreduce", size, pair, levels)


# ---- memory ----------------------------------------------------------------------------
@dataclass(frozen=True)
class StateBytes:
    weights: float
    gradients: float
    optimizer: float


def state_bytes(params_local: float, zero: int, dp_cp: int, numerics: Numerics | str,
                offload_optimizer: bool = False, offload_params: bool = False) -> StateBytes:
    """Weights, gradients and optimizer states per GPU under ZeRO sharding; what an
    offload moves to the offload tier (``offload.host_state_bytes``) is not on the GPU.
    ``numerics`` (a :class:`Numerics` or a dtype) sets the bytes per parameter."""
    nm = Numerics.of(numerics)
    return StateBytes(
        weights=0.0 if offload_params else
        params_local * nm.weight_bytes / (dp_cp if zero >= 3 else 1),
        gradients=params_local * nm.grad_bytes / (dp_cp if zero >= 2 else 1),
        optimizer=0.0 if offload_optimizer else
        params_local * nm.optimizer_bytes / (dp_cp if zero >= 1 else 1),
    )


def add_states(a: StateBytes, b: StateBytes) -> StateBytes:
    return StateBytes(a.weights + b.weights, a.gradients + b.gradients,
                      a.optimizer + b.optimizer)


def end_params(model: ModelSpec, tp: int, pp: int, embedding: bool, head: bool) -> float:
    """Embedding/head parameters on a stage (tied weights share one copy when pp = 1)."""
    out = 0.0
    if embedding:
        out += embedding_params(model, tp)
    if head:
        out += head_params(model, tp, separate=pp > 1)
    return out


def stage_params_split(model: ModelSpec, tp: int, pp: int, layers: dict[str, int],
                       embedding: bool, head: bool, ep: int = 1, etp: int | None = None
                       ) -> tuple[float, float]:
    """(parameters sharded by ZeRO over dp x cp, routed-expert parameters sharded over
    the expert-data-parallel group) one GPU of a pipeline stage holds."""
    own = sum(n * layer_params(model, t, tp) for t, n in layers.items() if t != "moe")
    experts = 0.0
    if layers.get("moe"):
        rest, routed = moe_layer_params(model, tp, ep, etp or tp)
        own += layers["moe"] * rest
        experts = layers["moe"] * routed
    return own + end_params(model, tp, pp, embedding, head), experts


def expert_dp_size(tp: int, cp: int, dp: int, ep: int, etp: int) -> int:
    """GPUs holding the same expert shard: ``dp cp tp / (ep etp)`` = world / (pp etp ep)
    (Megatron-Core's expert-data-parallel group, megatron/core/parallel_state.py
    expert_data_parallel_size). The plan checks make ``etp ep`` divide ``tp cp dp``."""
    return dp * cp * tp // (ep * etp)


def add_dp_comm(a: DPComm, b: DPComm) -> DPComm:
    """Two groups' data-parallel traffic, one after the other."""
    return DPComm(a.grad_s + b.grad_s, a.param_s + b.param_s, a.mb_fwd_s + b.mb_fwd_s,
                  a.mb_bwd_s + b.mb_bwd_s)


def reduce_bucket_bytes(elements: float, zero: int, dp: int, overlap_grad_reduce: bool,
                        dtype: str) -> float:
    """The gradient-reduction buckets a ZeRO optimizer allocates before the backward: one of
    ``elements`` in the model's dtype, and a second with overlapped ZeRO-1/2 reduction over
    more than one rank (DeepSpeed v0.18.0 ``stage_1_and_2.py`` ``backward_prologue``: buf_0,
    and buf_1 ``if self.overlap_comm``; ``stage3.py`` one ``bucket.buffer`` per dtype). The
    exporter sets ``overlap_comm`` from the plan's switch where dp > 1."""
    if elements <= 0 or zero == 0:
        return 0.0
    count = 2 if zero in (1, 2) and overlap_grad_reduce and dp > 1 else 1
    return count * elements * (4 if dtype == "fp32" else 2)


def comm_buffer_bytes(model: ModelSpec, shape: LayerShape, zero: int,
                      layer_types: tuple[str, ...]) -> float:
    """Communication buffers: one layer's all-gathered activation under TP, and two layers
    of gathered weights prefetched under ZeRO 3 (PyTorch FSDP's default prefetch)."""
    out = shape.tokens * model.hidden_size * C.ACT_BYTES if shape.tp > 1 else 0.0
    if zero == 3:
        out += 2 * max(layer_params(model, t, shape.tp, shape.ep, shape.etp)
                       for t in layer_types) * C.WEIGHT_BYTES
    return out
