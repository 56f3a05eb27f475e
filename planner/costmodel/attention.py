"""Attention, the part of a layer dense and mixture-of-experts layers share: its GEMMs
and parameters, the attention core (FlashAttention or unfused), the TP exchanges of
column/row-parallel GEMM pairs and the context-parallel exchange (Megatron-LM semantics:
Shoeybi et al. 2019; Korthikanti et al. 2022; Megatron-Core CP)."""

from __future__ import annotations

from typing import Sequence

from planner.costmodel import constants as C
from planner.costmodel.compute import (
    elementwise_time_s,
    exposed_s,
    flash_attention_time_s,
    gemm_time_s,
)
from planner.costmodel.network import collective_time_s, p2p_time_s
from planner.costmodel.shapes import LayerShape, LayerStrategy, Net, local_dims
from planner.specs.gpu import GPUSpec
from planner.specs.model import ModelSpec


def attention_gemms(model: ModelSpec, tokens: float, tp: int
                    ) -> list[tuple[str, float, float, float]]:
    """(name, m, n, k) of the attention block's projection GEMMs on one TP rank: the fused
    QKV GEMM and the output projection; with multi-head latent attention the query and
    key/value down-projections (replicated over TP, as in Megatron-Core's MLA), the query
    up-projection and the key/value up-projection (named ``qkv``: the GEMM the TP
    all-gather feeds). MLA's attention core and activations are costed as GQA with
    ``num_kv_heads = heads`` and the query/key head width (docs/moe-long-context.md)."""
    q_loc, kv_loc, _, heads = local_dims(model, tp)
    h, t = model.hidden_size, tokens
    mla = model.mla
    if mla is None:
        return [("qkv", t, q_loc + 2 * kv_loc, h), ("proj", t, h, q_loc)]
    nope = model.dim_head - mla.qk_rope_head_dim
    out = []
    q_in = h
    if mla.q_lora_rank:
        out.append(("q_down", t, mla.q_lora_rank, h))
        q_in = mla.q_lora_rank
    return out + [
        ("q_up", t, heads * model.dim_head, q_in),
        ("kv_down", t, mla.kv_lora_rank + mla.qk_rope_head_dim, h),
        ("qkv", t, heads * (nope + mla.v_head_dim), mla.kv_lora_rank),
        ("proj", t, h, heads * mla.v_head_dim),
    ]


def attention_params(model: ModelSpec, tp: int = 1) -> float:
    """Projection weights of the attention block on one TP rank (no norms, no biases)."""
    out = sum(n * k for _, _, n, k in attention_gemms(model, 1.0, tp))
    if model.mla is not None:  # the latent norms (DeepSeek-V2: q_a_layernorm, kv_a_layernorm)
        out += (model.mla.q_lora_rank or 0) + model.mla.kv_lora_rank
    return out


def attention_core(model: ModelSpec, gpu: GPUSpec, shape: LayerShape, strat: LayerStrategy
                    ) -> tuple[float, float, float]:
    """(fwd time, bwd time, fwd hardware FLOPs) of the attention core (scores, softmax, AV)."""
    _, _, _, heads = local_dims(model, shape.tp)
    dh = model.dim_head
    sq, sk = shape.seq / shape.cp, shape.seq
    batch = shape.mbs * heads
    if strat.attention == "flash":
        flops = 4 * batch * sq * sk * dh * C.FLASH_CAUSAL_FRACTION
        # a context-parallel rank runs its query block against key blocks of its own length
        # (ring attention); its kernels run at the speed of that length
        t_f, t_b = flash_attention_time_s(gpu, strat.dtype, flops, seq=sq, head_dim=dh,
                                          grouped=model.kv_heads < model.num_attention_heads)
        return t_f, t_b, flops
    # Unfused Megatron attention: two batched GEMMs plus fused softmax (and dropout).
    dt = "bf16" if strat.dtype == "fp8" else strat.dtype
    scores = batch * sq * sk
    t_f = gemm_time_s(gpu, dt, sq, sk, dh, batch) + gemm_time_s(gpu, dt, sq, dh, sk, batch)
    t_b = (gemm_time_s(gpu, dt, sq, dh, sk, batch) + gemm_time_s(gpu, dt, sk, dh, sq, batch)
           + gemm_time_s(gpu, dt, sq, sk, dh, batch) + gemm_time_s(gpu, dt, sk, dh, sq, batch))
    ew = C.SOFTMAX_BYTES * scores + (C.DROPOUT_BYTES * scores if model.dropout else 0.0)
    t_f += elementwise_time_s(gpu, ew)
    t_b += elementwise_time_s(gpu, C.ELEMENTWISE_BWD_RATIO * ew)
    return t_f, t_b, 4 * scores * dh


def tp_overlap_possible(net: Net) -> bool:
    """Userbuffer overlap needs every TP peer reachable over NVLink (CUDA IPC / multi-node
    NVLink): the TP group must sit inside one innermost domain (Transformer Engine
    ``initialize_ub``; NVIDIA documents it for NVLink-connected GPUs only)."""
    return all(k == 1 for k in net.tp_spans[1:])


def tp_comm_pairs(gpu: GPUSpec, net: Net, shape: LayerShape, strat: LayerStrategy,
                  fwd_g: dict[str, float], dgrad: dict[str, float], wgrad: dict[str, float],
                  pairs: Sequence[tuple[str, str]], size: float,
                  chunked: dict[str, float] | None = None) -> tuple[float, float]:
    """Exposed TP communication of (column-parallel, row-parallel) GEMM pairs (attention:
    QKV and projection; MLP: FC1 and FC2), each pair one all-reduce or one all-gather and
    one reduce-scatter of ``size`` bytes in each direction (see :func:`planner.costmodel.layer._tp_comm`)."""
    if shape.tp <= 1:
        return 0.0, 0.0
    spans, levels = net.tp_spans, net.levels
    ag = collective_time_s("all_gather", size, spans, levels, net.chunks)
    rs = collective_time_s("reduce_scatter", size, spans, levels, net.chunks)
    kappa = gpu.efficiency.overlap_slowdown

    def hide(comm: float, gemm: float, overlapped: bool = True) -> float:
        return exposed_s(comm, gemm, kappa) if overlapped else comm

    fwd = bwd = 0.0
    if not strat.sequence_parallel:
        one = (collective_time_s("allreduce", size, spans, levels, net.chunks)
               if strat.tp_comm == "allreduce" else rs + ag)
        for col, _row in pairs:
            fwd += one
            bwd += hide(one, wgrad[col])
        return fwd, bwd
    for col, row in pairs:
        fwd += _forward_pair(ag, rs, fwd_g[col], fwd_g[row], (chunked or fwd_g)[col],
                             (chunked or fwd_g)[row], strat.overlap_tp_comm,
                             tp_overlap_possible(net), kappa)
    # backward re-gather of the saved input behind the row GEMM's data gradient: a bulk
    # userbuffer overlap (no chunking), wherever overlap is allowed and possible
    over = strat.overlap_tp_comm is not False and tp_overlap_possible(net)
    for _col, row in pairs:
        bwd += hide(ag, dgrad[row], over)
    for col, _row in pairs:
        bwd += hide(ag, dgrad[col]) + hide(rs, wgrad[col])
    return fwd, bwd


def _forward_pair(ag: float, rs: float, g_col: float, g_row: float, c_col: float, c_row: float,
                  mode: bool | str, possible: bool, kappa: float) -> float:
    """Forward TP exchange of one column/row GEMM pair with sequence parallelism: without
    overlap the all-gather and reduce-scatter wait for each other and the GEMMs; with
    userbuffer overlap each GEMM runs as ``tp`` chunks (``c_*``, their extra time counted
    here) while the ring exchange hides behind them (Wang et al., ASPLOS 2023; Transformer
    Engine ``CommOverlapP2P``). ``auto`` takes the faster; overlap is off where the TP group
    leaves the NVLink domain (:func:`tp_overlap_possible`)."""
    plain = ag + rs
    if mode is False or not possible:
        return plain
    over = (c_col - g_col) + exposed_s(ag, c_col, kappa) + (c_row - g_row) + exposed_s(rs, c_row, kappa)
    return over if mode is True else min(plain, over)


def cp_comm(model: ModelSpec, gpu: GPUSpec, net: Net, shape: LayerShape, strat: LayerStrategy,
             attn_f: float, attn_b: float) -> tuple[float, float]:
    """Exposed context-parallel communication (forward, backward) of one layer.

    Ring (Liu et al. 2023; Megatron-Core CP): cp-1 exchanges of the local K and V blocks,
    overlapped with the attention kernel; backward also returns dK and dV.
    All-to-all (Jacobs et al. 2023, DeepSpeed-Ulysses): Q, K, V scattered by heads before
    attention and the output gathered back after it, not overlapped.
    All-gather (the LBNL model's 2D tensor parallelism, Subramanian et al. 2024, Table II):
    K and V all-gathered over cp before attention, all-gathered again in backward and
    their gradients reduce-scattered, not overlapped.
    """
    if shape.cp <= 1:
        return 0.0, 0.0
    q_loc, kv_loc, _, _ = local_dims(model, shape.tp)
    spans, levels = net.cp_spans, net.levels
    if strat.cp_comm == "all_gather":
        full = 2 * shape.mbs * shape.seq * kv_loc * C.ACT_BYTES  # K and V, whole sequence
        ag = collective_time_s("all_gather", full, spans, levels, net.chunks)
        rs = collective_time_s("reduce_scatter", full, spans, levels, net.chunks)
        return ag, ag + rs
    if strat.cp_comm == "all_to_all":
        qkv = shape.tokens * (q_loc + 2 * kv_loc) * C.ACT_BYTES
        out = shape.tokens * q_loc * C.ACT_BYTES
        one = (collective_time_s("all_to_all", qkv, spans, levels, net.chunks)
               + collective_time_s("all_to_all", out, spans, levels, net.chunks))
        return one, one
    block = 2 * shape.tokens * kv_loc * C.ACT_BYTES  # local K and V
    steps = shape.cp - 1
    fwd = steps * p2p_time_s(block, spans, levels)
    bwd = steps * p2p_time_s(2 * block, spans, levels)
    kappa = gpu.efficiency.overlap_slowdown
    return exposed_s(fwd, attn_f, kappa), exposed_s(bwd, attn_b, kappa)


def cp_buffer_bytes(model: ModelSpec, shape: LayerShape, strat: LayerStrategy) -> float:
    """Transient context-parallel buffers during attention. Ring: the K/V block being
    received beside the one in use, and their gradients in backward (double buffering,
    Megatron-Core ``AttnFuncWithCPAndKVP2P``): ``2 x 2 t kv`` elements. All-to-all: the
    head-scattered Q, K, V and output (``t (2q + 2kv)``). All-gather: the whole-sequence K
    and V (``cp x 2 t kv``)."""
    if shape.cp <= 1:
        return 0.0
    q_loc, kv_loc, _, _ = local_dims(model, shape.tp)
    t, a = shape.tokens, C.ACT_BYTES
    if strat.cp_comm == "all_to_all":
        return a * t * (2 * q_loc + 2 * kv_loc)
    if strat.cp_comm == "all_gather":
        return a * 2 * shape.mbs * shape.seq * kv_loc
    return a * 2 * 2 * t * kv_loc


def recomputed(mode: str, fwd_s: float, attn_fwd_s: float, full_flops: float,
               attn_flops: float, comms: tuple[float, ...]
               ) -> tuple[float, tuple[float, ...], float]:
    """What recomputation adds before backward: (time, the forward exchanges it repeats,
    FLOPs). Full: the whole forward; selective: the attention core only, which needs no
    exchange (Korthikanti et al. 2022, Sec. 5); half: every second layer in full, so per
    layer half of the full cost (Megatron ``--recompute-method block`` with half of a
    chunk's layers, torchtitan ``selective_ac_option = 2``)."""
    if mode == "full":
        return fwd_s, comms, full_flops
    if mode == "half":
        return fwd_s / 2, tuple(c / 2 for c in comms), full_flops / 2
    if mode == "selective":
        return attn_fwd_s, (0.0,) * len(comms), attn_flops
    return 0.0, (0.0,) * len(comms), 0.0
