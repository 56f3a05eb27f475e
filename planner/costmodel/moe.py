"""Mixture-of-experts layers: parameters, FLOPs, time and memory on one GPU.

An MoE layer is the dense layer's attention block followed by a router, optional shared
experts and ``E`` routed experts of which each token uses ``top_k`` (Shazeer et al. 2017;
Lepikhin et al. 2020, GShard; Fedus et al. 2021, Switch; Jiang et al. 2024, Mixtral;
DeepSeek-AI 2024, DeepSeek-V3). Parallelism follows Megatron-Core's MoE (Megatron-Core
``MoELayer`` with the all-to-all token dispatcher):

- the attention block and the shared experts are tensor-parallel over ``tp`` like a
  dense layer; the router weights are replicated;
- each TP rank routes its ``t/tp`` tokens (its sequence-parallel shard, or an even split
  of the replicated tokens without SP) and sends each token copy to the GPU holding its
  expert: an all-to-all over the expert-parallel group of ``ep`` GPUs (*dispatch*), and
  back after the experts (*combine*); backward repeats both;
- MoE parallel folding: the expert ranks are numbered apart from the attention's, the
  ``tp x cp x dp`` ranks of a pipeline stage regrouped as ``etp x ep x edp`` (``etp x ep``
  divides ``tp x cp x dp``; :func:`expert_spans`), so the EP group may span the attention's
  TP, CP and DP ranks; it sits inside an NVLink domain when the domain holds it and
  crosses the fabric otherwise;
- experts may use their own tensor parallelism ``etp`` (default ``tp``):
  received tokens are all-gathered over the ETP group before the experts and
  reduce-scattered after (Megatron-Core ``--expert-tensor-parallel-size``);
- each GPU holds ``E/ep`` experts, each ``1/etp`` of an expert FFN; expert gradients and
  optimizer states are sharded by ZeRO over the expert-data-parallel group of
  ``edp = dp cp tp / (ep etp) = world / (pp etp ep)`` GPUs, the other parameters over dp x cp as in dense layers.

Routing is balanced. Without a capacity factor the experts are dropless (each GPU
receives ``k t / tp`` token copies); with a capacity factor ``c`` every expert buffer is
padded to its capacity ``c k T / E`` (GShard/Switch), so time and memory scale with ``c``
while model FLOPs count only the ``top_k`` active experts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from planner.costmodel import constants as C
from planner.costmodel.compute import elementwise_time_s, fp8_cast_bytes, gemm_time_s, op_bytes
from planner.costmodel.attention import attention_core, attention_gemms, attention_params
from planner.costmodel.attention import cp_buffer_bytes, cp_comm, recomputed, tp_comm_pairs
from planner.costmodel.network import collective_time_s
from planner.costmodel.shapes import LayerCost, LayerShape, LayerStrategy, Net, local_dims
from planner.specs.gpu import GPUSpec
from planner.specs.model import ModelSpec
from planner.specs.plan import DEFAULT_ORDER
from planner.costmodel.network import combine, subgroup


# ---- sizes ----------------------------------------------------------------------------
def shared_ffn(model: ModelSpec) -> int:
    """Total FFN width of the shared experts (0 without)."""
    moe = model.moe
    assert moe is not None
    per = moe.shared_expert_ffn_hidden_size or moe.expert_ffn_hidden_size
    return moe.num_shared_experts * per


def _attention_params(model: ModelSpec, tp: int) -> float:
    q_loc, kv_loc, _, _ = local_dims(model, tp)
    bias = (q_loc + 2 * kv_loc + model.hidden_size) if model.bias else 0.0
    return attention_params(model, tp) + bias


def moe_layer_params(model: ModelSpec, tp: int, ep: int, etp: int) -> tuple[float, float]:
    """(non-expert, routed-expert) parameters of one MoE layer held by one GPU.

    Non-expert: attention (TP-sharded), two norms, the router ``h x E`` (replicated) and
    the shared experts (TP-sharded). Routed: ``E/ep`` experts of ``mats x h x f_e / etp``.
    """
    moe = model.moe
    assert moe is not None
    h, mats = model.hidden_size, model.ffn_matrices
    norms = 2 * h * (2 if model.norm_type == "layernorm" else 1)
    router = h * moe.num_experts
    shared = mats * h * shared_ffn(model) / tp
    routed = moe.num_experts / ep * mats * h * moe.expert_ffn_hidden_size / etp
    return _attention_params(model, tp) + norms + router + shared, routed


def moe_active_expert_params(model: ModelSpec) -> float:
    """Routed-expert parameters one token passes through: ``top_k`` experts."""
    moe = model.moe
    assert moe is not None
    return moe.top_k * model.ffn_matrices * model.hidden_size * moe.expert_ffn_hidden_size


def moe_ffn_flops_per_token(model: ModelSpec) -> float:
    """Forward FLOPs per token of the router, shared and active routed experts (model
    convention: no capacity padding)."""
    moe = model.moe
    assert moe is not None
    h, mats = model.hidden_size, model.ffn_matrices
    return (2 * h * moe.num_experts + 2 * mats * h * shared_ffn(model)
            + 2 * moe_active_expert_params(model))


@dataclass(frozen=True)
class Routing:
    """Token counts of one MoE layer on one GPU per microbatch."""

    tokens: float  # t: tokens of the TP group (the attention block's tokens)
    dispatched: float  # t/tp: tokens this GPU routes
    received: float  # token copies this GPU receives: k t/tp x capacity factor
    expert_tokens: float  # tokens the local expert GEMMs process (received x etp)
    local_experts: float  # E / ep


def routing(model: ModelSpec, shape: LayerShape) -> Routing:
    moe = model.moe
    assert moe is not None
    cf = moe.capacity_factor or 1.0
    t = shape.tokens
    d = t / shape.tp
    r = d * moe.top_k * cf
    return Routing(t, d, r, r * shape.etp, moe.num_experts / shape.ep)


def alltoall_bytes(model: ModelSpec, shape: LayerShape) -> float:
    """Buffer of one dispatch (or combine) all-to-all per GPU: the routed token copies,
    ``k c t/tp x h`` elements; the fraction ``(ep-1)/ep`` leaves the GPU."""
    return routing(model, shape).received * model.hidden_size * C.ACT_BYTES


# ---- the layer ----------------------------------------------------------------------------
def _gemms(model: ModelSpec, shape: LayerShape) -> list[tuple[str, float, float, float, float]]:
    """(name, m, n, k, batch) of the forward GEMMs of one MoE layer on one GPU."""
    moe = model.moe
    assert moe is not None
    h, mats = model.hidden_size, model.ffn_matrices
    r = routing(model, shape)
    out = [(n, m, nn, k, 1.0) for n, m, nn, k in attention_gemms(model, r.tokens, shape.tp)]
    out.append(("router", r.dispatched, moe.num_experts, h, 1.0))
    fs = shared_ffn(model) / shape.tp
    if fs:
        out += [("sh_fc1", r.tokens, fs * (mats - 1), h, 1.0), ("sh_fc2", r.tokens, h, fs, 1.0)]
    fe = moe.expert_ffn_hidden_size / shape.etp
    per_expert = r.expert_tokens / r.local_experts
    out += [("ex_fc1", per_expert, fe * (mats - 1), h, r.local_experts),
            ("ex_fc2", per_expert, h, fe, r.local_experts)]
    return out


def _elementwise_bytes(model: ModelSpec, shape: LayerShape, strat: LayerStrategy) -> float:
    """Forward HBM traffic of the memory-bound operations: norms, residuals, RoPE as in a
    dense layer; router softmax/top-k; permutation; the shared and expert activations."""
    moe = model.moe
    assert moe is not None
    q_loc, kv_loc, _, _ = local_dims(model, shape.tp)
    r = routing(model, shape)
    sp_div = shape.tp if strat.sequence_parallel else 1
    rows = r.tokens * model.hidden_size / sp_div
    norm, act, rope = op_bytes(model, strat.fused_elementwise)
    nbytes = 2 * norm * rows + 2 * C.RESIDUAL_BYTES * rows
    if model.dropout:
        nbytes += 2 * C.DROPOUT_BYTES * rows
    if model.position_embedding == "rope":
        nbytes += rope * r.tokens * (q_loc + kv_loc)
    nbytes += act * (r.tokens * shared_ffn(model) / shape.tp
                     + r.received * moe.expert_ffn_hidden_size)
    nbytes += C.ROUTER_SOFTMAX_BYTES * r.dispatched * moe.num_experts
    nbytes += 2 * C.MOE_PERMUTE_BYTES * r.received * model.hidden_size
    return nbytes


def moe_activation_bytes(model: ModelSpec, shape: LayerShape, strat: LayerStrategy,
                         recompute: str | None = None) -> float:
    """Activations one MoE layer stores for backward, per microbatch.

    Attention block as in :func:`planner.costmodel.layer.activation_bytes` (norm input,
    QKV input, Q/K/V, projection input, softmax statistics). MLP block: the second norm's
    input, the router input and its fp32 probabilities, the shared experts' input and
    activations, and per received token copy the expert input (gathered over ETP), the
    expert FFN activations (``2 f_e`` or ``3 f_e`` with SwiGLU, split over ETP) and the
    expert output kept for the gradient of the routing weights; under FP8 the two expert
    GEMM inputs are kept as 1-byte casts (``C.EXPERT_FP8_INPUT_BYTES``). Full
    recomputation keeps the layer input only; selective drops the attention output and
    statistics.
    """
    moe = model.moe
    assert moe is not None
    mode = recompute or strat.recompute
    if mode == "half":  # every second layer keeps only its input: the mean of the two
        return 0.5 * (moe_activation_bytes(model, shape, strat, "none")
                      + moe_activation_bytes(model, shape, strat, "full"))
    q_loc, kv_loc, _, heads = local_dims(model, shape.tp)
    r = routing(model, shape)
    t, h, a = r.tokens, model.hidden_size, C.ACT_BYTES
    sp_div = shape.tp if strat.sequence_parallel else 1
    if mode == "full":
        return a * t * h / sp_div
    drop = 1.0 if model.dropout else 0.0
    ffn_mult = 3 if model.ffn_type == "swiglu" else 2
    fs = shared_ffn(model) / shape.tp
    # norm inputs, QKV input, dropout masks (as the dense layer), the shared FC1 input
    rep = (3 * a + 2 * drop + (a if fs else 0.0)) * t * h / sp_div
    attn = a * t * (q_loc + 2 * kv_loc) + a * t * q_loc
    router = a * r.dispatched * h + C.ROUTER_PROB_BYTES * r.dispatched * moe.num_experts
    shared = ffn_mult * a * t * fs
    # the two expert GEMM inputs (FC1: the gathered tokens; FC2: the activation output)
    # are kept as their FP8 casts under FP8; the FC1 output (activation input) stays BF16
    gin = C.EXPERT_FP8_INPUT_BYTES if strat.dtype == "fp8" else a
    experts = (gin * r.expert_tokens * h
               + ((ffn_mult - 1) * a + gin) * r.received * moe.expert_ffn_hidden_size
               + a * r.received * h)
    core = 0.0
    if strat.attention == "standard":
        if mode != "selective":
            scores = shape.mbs * heads * (shape.seq / shape.cp) * shape.seq
            core = (a + drop * (1 + a)) * scores
    elif mode != "selective":
        core = 4.0 * shape.mbs * heads * shape.seq / shape.cp
    if mode == "selective":
        attn -= a * t * q_loc
    return rep + attn + router + shared + experts + core


def ep_comm(model: ModelSpec, net: Net, shape: LayerShape) -> float:
    """One direction's EP and ETP traffic: dispatch and combine all-to-alls over the EP
    group and, with ``etp > 1``, the all-gather and reduce-scatter of the received tokens
    over the ETP group. Not overlapped (Megatron-Core's default schedule)."""
    levels, chunks = net.levels, net.chunks
    size = alltoall_bytes(model, shape)
    out = 2 * collective_time_s("all_to_all", size, net.ep_spans, levels, chunks)
    if shape.etp > 1:
        gathered = size * shape.etp
        out += (collective_time_s("all_gather", gathered, net.etp_spans, levels, chunks)
                + collective_time_s("reduce_scatter", gathered, net.etp_spans, levels, chunks))
    return out


def paired_exposed_ep_s(f_attn: float, f_expert: float, b_attn: float, b_expert: float,
                        dispatch_s: float, combine_s: float) -> float:
    """EP all-to-all time left exposed when Megatron-Core's combined 1F1B pairs the
    forward of one microbatch with the backward of another, layer by layer.

    Two streams, issue order and dependencies as Megatron-LM documents them
    (docs/user-guide/features/moe_a2a_overlap.md, "Fine-grained execution"): compute runs
    F.attn, B.expert, F.expert, B.attn; communication runs B.combine, F.dispatch,
    B.dispatch, F.combine; F.dispatch waits for F.attn, B.expert for B.combine, B.dispatch
    for B.expert, F.expert for F.dispatch, F.combine for F.expert, B.attn for B.dispatch.
    Each all-to-all (``dispatch_s``, ``combine_s``: one direction's dispatch or combine,
    with its expert-TP gather or scatter) thus hides behind the other microbatch's
    attention or expert compute. Returns the pair's span minus its compute (>= 0): the
    communication it did not hide. The fill and drain microbatches, unpaired, are not
    modelled (one of the pipeline's microbatches)."""
    a = f_attn                                  # compute: F.attn
    cb = combine_s                              # comm: B.combine
    d1 = max(cb, a) + dispatch_s                # comm: F.dispatch after F.attn
    e1 = max(a, cb) + b_expert                  # compute: B.expert after B.combine
    d2 = max(d1, e1) + dispatch_s               # comm: B.dispatch after B.expert
    e2 = max(e1, d1) + f_expert                 # compute: F.expert after F.dispatch
    d3 = max(d2, e2) + combine_s                # comm: F.combine after F.expert
    e3 = max(e2, d2) + b_attn                   # compute: B.attn after B.dispatch
    return max(d3, e3) - (f_attn + f_expert + b_attn + b_expert)


def host_stall_s(gpu: GPUSpec, model: ModelSpec, shape: LayerShape, gpu_fwd_s: float) -> float:
    """GPU idle time of one MoE layer's forward while the host launches its experts.

    Megatron-Core's dropless all-to-all dispatcher copies the per-expert token counts to
    the host and synchronizes before the EP all-to-all (the split sizes are host values:
    megatron/core/transformer/moe/token_dispatcher.py, MoEAlltoAllTokenDispatcher.preprocess,
    ``cuda_sync_point = "before_ep_alltoall"``), and Transformer Engine's GroupedLinear takes
    the per-expert splits as a host list and issues each expert's quantization and GEMMs
    from the host. After the sync the launch queue is empty, so the GPU waits for the host
    whenever launching the layer's ``E/ep`` local experts takes longer than running the
    layer (the "host-overhead wall" of Megatron-Core's MoE report, NVIDIA 2026,
    arXiv:2603.07685, Sec. 1; CUDA graphs of the router and preprocessing remove the sync).
    ``gpu.efficiency.moe_expert_host_us`` is the host time per local expert (the
    framework's; 0: no stall). Backward reuses the host split sizes: no sync, no stall."""
    host_us = gpu.efficiency.moe_expert_host_us
    if host_us <= 0:
        return 0.0
    return max(0.0, host_us * 1e-6 * routing(model, shape).local_experts - gpu_fwd_s)


@dataclass(frozen=True)
class _Kernels:
    """The kernels of one MoE layer on one GPU: what does not depend on the network."""

    gemms: tuple[tuple[str, float, float, float, float], ...]
    fwd_g: dict[str, float]
    dgrad: dict[str, float]
    wgrad: dict[str, float]
    attn_f: float
    attn_b: float
    attn_flops: float
    fwd: float
    bwd: float
    act_bytes: float
    workspace_bytes: float


@lru_cache(maxsize=1 << 15)
def _kernels(model: ModelSpec, gpu: GPUSpec, shape: LayerShape, strat: LayerStrategy
             ) -> _Kernels:
    """Cached apart from the network: a search costs the same shape on many placements."""
    dt = strat.dtype
    gemms = tuple(_gemms(model, shape))
    fwd_g = {n: gemm_time_s(gpu, dt, m, nn, k, b) for n, m, nn, k, b in gemms}
    dgrad = {n: gemm_time_s(gpu, dt, m, k, nn, b) for n, m, nn, k, b in gemms}
    wgrad = {n: gemm_time_s(gpu, dt, k, nn, m, b) for n, m, nn, k, b in gemms}
    attn_f, attn_b, attn_flops = attention_core(model, gpu, shape, strat)
    casts = sum(m * k * b for name, m, _, k, b in gemms if name != "router")
    ew_f = elementwise_time_s(gpu, _elementwise_bytes(model, shape, strat)
                              + fp8_cast_bytes(dt, casts))
    ew_b = C.ELEMENTWISE_BWD_RATIO * ew_f
    fwd = sum(fwd_g.values()) + attn_f + ew_f
    bwd = sum(dgrad.values()) + sum(wgrad.values()) + attn_b + ew_b
    act = moe_activation_bytes(model, shape, strat)
    workspace = (moe_activation_bytes(model, shape, strat, "none")
                 if strat.recompute in ("full", "half") else 0.0)
    workspace += cp_buffer_bytes(model, shape, strat)
    return _Kernels(gemms, fwd_g, dgrad, wgrad, attn_f, attn_b, attn_flops, fwd, bwd, act,
                    workspace)


def moe_layer_cost(model: ModelSpec, gpu: GPUSpec, net: Net, shape: LayerShape,
                   strat: LayerStrategy) -> LayerCost:
    """Cost of one MoE layer for one microbatch on one GPU (cached through
    :func:`planner.costmodel.layer.layer_cost`)."""
    moe = model.moe
    assert moe is not None
    k = _kernels(model, gpu, shape, strat)
    gemms, fwd_g, dgrad, wgrad = k.gemms, k.fwd_g, k.dgrad, k.wgrad
    attn_f, attn_b, attn_flops, fwd, bwd = k.attn_f, k.attn_b, k.attn_flops, k.fwd, k.bwd

    # TP: the attention block; the shared experts like a dense MLP; without shared experts
    # and without SP the combined tokens are all-gathered back to every TP rank.
    t_bytes = shape.tokens * model.hidden_size * C.ACT_BYTES
    pairs = [("qkv", "proj")] + ([("sh_fc1", "sh_fc2")] if shared_ffn(model) else [])
    tp_f, tp_b = tp_comm_pairs(gpu, net, shape, strat, fwd_g, dgrad, wgrad, pairs, t_bytes)
    if shape.tp > 1 and not shared_ffn(model) and not strat.sequence_parallel:
        regather = collective_time_s("all_gather", t_bytes, net.tp_spans, net.levels, net.chunks)
        tp_f += regather
        tp_b += regather
    cp_f, cp_b = cp_comm(model, gpu, net, shape, strat, attn_f, attn_b)
    ep_one = ep_comm(model, net, shape)

    gemm_flops = sum(2 * m * nn * k * b for _, m, nn, k, b in gemms)
    rec, (rec_tp, rec_cp, rec_ep), rec_flops = recomputed(
        strat.recompute, fwd, attn_f, gemm_flops + attn_flops, attn_flops, (tp_f, cp_f, ep_one))

    r = routing(model, shape)
    cf = moe.capacity_factor or 1.0
    pad = max(cf - 1.0, 0.0) / cf * r.received * 2 * model.ffn_matrices * model.hidden_size \
        * moe.expert_ffn_hidden_size
    pad_flops = 3 * pad  # forward and backward; a recomputed forward is in rec_flops
    act, workspace = k.act_bytes, k.workspace_bytes
    ep_s = 2 * ep_one + rec_ep  # dispatch and combine, each way
    if strat.overlap_ep_comm and strat.recompute in ("none", "selective") and ep_one > 0:
        ex = ("ex_fc1", "ex_fc2")
        f_ex = sum(fwd_g[n] for n in ex)
        b_ex = sum(dgrad[n] + wgrad[n] for n in ex)
        f_attn = fwd - f_ex + tp_f + cp_f
        b_attn = bwd - b_ex + tp_b + cp_b + rec
        sticks_out = paired_exposed_ep_s(f_attn, f_ex, b_attn, b_ex, ep_one / 2, ep_one / 2)
        # the hidden part still slows the compute it runs beside (NCCL takes SMs and HBM
        # bandwidth): the GPU's overlap_slowdown, as for TP and DP overlap (exposed_s)
        ep_s = sticks_out + gpu.efficiency.overlap_slowdown * (2 * ep_one - sticks_out)
    comm = dict(tp_comm_s=tp_f + tp_b + rec_tp, cp_comm_s=cp_f + cp_b + rec_cp,
                ep_comm_s=ep_s)
    # the host-bound forward stalls again where the backward recomputes it
    stall = host_stall_s(gpu, model, shape, fwd + tp_f + cp_f + ep_one)
    rec += stall * {"full": 1.0, "half": 0.5}.get(strat.recompute, 0.0)
    return LayerCost(fwd_s=fwd + stall, bwd_s=bwd, recompute_s=rec, act_bytes=act,
                     workspace_bytes=workspace, recompute_flops=rec_flops,
                     padding_flops=pad_flops, **comm)


def expert_spans(tp_spans: tuple[int, ...], cp_spans: tuple[int, ...], dp_spans: tuple[int, ...],
                 ep: int, etp: int, order: tuple[str, ...] = DEFAULT_ORDER
                 ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Spans of the EP, ETP and expert-data-parallel groups on the network levels.

    Megatron-Core numbers the expert ranks with a second RankGenerator over the same
    ranks (tp=etp, ep=ep, dp=edp, pp=pp, cp=1, the same order string; MoE parallel
    folding, megatron/core/parallel_state.py initialize_model_parallel, NVIDIA/Megatron-LM
    commit 00caa53): a pipeline stage's ``tp x cp x dp`` ranks are regrouped into
    ``etp x ep x edp``, carved innermost first in the order's position of tp, ep and dp
    (default: the ETP group is the innermost ``etp`` ranks, the EP group the next ``ep``,
    the rest expert data parallelism). The EP group thus spans the attention's TP ranks
    when ``etp < tp`` (Qwen3-235B on H100: TP2, ETP1, EP32 = 32 consecutive ranks).
    """
    stage = combine(tp_spans, cp_spans, dp_spans)
    edp = math.prod(stage) // (ep * etp)
    dims = [d for d in order if d in ("tp", "ep", "dp")]
    if "ep" not in dims:  # Megatron-Core's order strings always hold ep, before dp
        dims.insert(dims.index("dp"), "ep")
    size = {"tp": etp, "ep": ep, "dp": edp}
    out: dict[str, tuple[int, ...]] = {}
    left = stage
    for d in dims:
        out[d] = subgroup(left, size[d])
        left = tuple(a // b for a, b in zip(left, out[d]))
    return out["ep"], out["tp"], out["dp"]
