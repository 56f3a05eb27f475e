"""One transformer layer on one GPU for one microbatch: time, FLOPs, parameters, memory.

Megatron-LM semantics (Shoeybi et al. 2019; Narayanan et al. 2021; Korthikanti et al.
2022). Everything here is a pure function of the layer *key*: the layer type, the
local shape (tp, cp, microbatch, sequence) and the layer strategy (recompute mode,
sequence parallelism, TP communication, attention kernel) plus the spans of the TP and
CP groups on the network. The formulations tabulate these functions over keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

from planner.costmodel import constants as C
from planner.costmodel.compute import (
    elementwise_time_s,
    exposed_s,
    flash_attention_time_s,
    gemm_time_s,
)
from planner.costmodel.network import collective_time_s, p2p_time_s
from planner.specs.cluster import TopologyLevel
from planner.specs.gpu import GPUSpec
from planner.specs.model import ModelSpec


@dataclass(frozen=True)
class LayerShape:
    """What one GPU holds of one layer for one microbatch."""

    tp: int
    cp: int
    mbs: int
    seq: int
    ep: int = 1  # expert parallelism (MoE layers only)
    etp: int = 1  # expert tensor parallelism (MoE layers only)

    @property
    def tokens(self) -> float:
        """Tokens per GPU per microbatch (the sequence is split by cp)."""
        return self.mbs * self.seq / self.cp


@dataclass(frozen=True)
class LayerStrategy:
    recompute: str = "none"
    sequence_parallel: bool = False
    tp_comm: str = "allreduce"
    attention: str = "flash"
    cp_comm: str = "ring"
    overlap_tp_comm: bool = False
    dtype: str = "bf16"
    layer_type: str = "dense"


@dataclass(frozen=True)
class Net:
    """The network as seen by one layer: levels and the TP/CP group spans on them."""

    levels: tuple[TopologyLevel, ...]
    tp_spans: tuple[int, ...]
    cp_spans: tuple[int, ...]
    chunks: int = 64
    ep_spans: tuple[int, ...] = ()  # the expert-parallel group (MoE layers)
    etp_spans: tuple[int, ...] = ()  # the expert tensor-parallel group (MoE layers)


@dataclass(frozen=True)
class LayerCost:
    """Per layer, per microbatch, on one GPU. Times in seconds, memory in bytes."""

    fwd_s: float
    bwd_s: float
    recompute_s: float
    tp_comm_s: float
    cp_comm_s: float
    ep_comm_s: float
    act_bytes: float
    workspace_bytes: float
    recompute_flops: float
    padding_flops: float = 0.0  # expert GEMM work on capacity padding (MoE), fwd + bwd

    @property
    def total_s(self) -> float:
        return (self.fwd_s + self.bwd_s + self.recompute_s + self.tp_comm_s + self.cp_comm_s
                + self.ep_comm_s)


# ---- dimensions ----------------------------------------------------------------------
def local_dims(model: ModelSpec, tp: int) -> tuple[float, float, float, float]:
    """(query width, key/value width, FFN width, heads) held by one TP rank.

    With more TP ranks than KV heads the KV heads are replicated (Megatron-LM GQA).
    """
    q_loc = model.q_dim / tp
    kv_loc = model.dim_head * max(model.kv_heads / tp, 1.0)
    f_loc = model.ffn_hidden_size / tp
    heads_loc = model.num_attention_heads / tp
    return q_loc, kv_loc, f_loc, heads_loc


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


# ---- parameters ----------------------------------------------------------------------
def dense_layer_params(model: ModelSpec, tp: int = 1) -> float:
    """Parameters of one dense layer held by one TP rank (tp=1: the whole layer)."""
    q_loc, kv_loc, f_loc, _ = local_dims(model, tp)
    h = model.hidden_size
    attn = attention_params(model, tp)
    mlp = model.ffn_matrices * h * f_loc
    norms = 2 * h * (2 if model.norm_type == "layernorm" else 1)
    bias = (q_loc + 2 * kv_loc + h + f_loc * (model.ffn_matrices - 1) + h) if model.bias else 0.0
    return attn + mlp + norms + bias


def layer_params(model: ModelSpec, layer_type: str, tp: int, ep: int = 1,
                 etp: int | None = None) -> float:
    """Parameters of one layer of ``layer_type`` held by one GPU (TP rank; for MoE layers
    also its EP/ETP shard of the experts). ``etp`` defaults to ``tp``."""
    if layer_type == "moe":
        from planner.costmodel.moe import moe_layer_params

        return sum(moe_layer_params(model, tp, ep, etp or tp))
    return dense_layer_params(model, tp)


def embedding_params(model: ModelSpec, tp: int = 1) -> float:
    pos = model.seq_len * model.hidden_size if model.position_embedding == "learned" else 0
    return model.vocab_size * model.hidden_size / tp + pos


def head_params(model: ModelSpec, tp: int = 1, separate: bool = True) -> float:
    """LM head (untied, or a tied copy on a separate last stage) plus the final norm."""
    norm = model.hidden_size * (2 if model.norm_type == "layernorm" else 1)
    head = model.vocab_size * model.hidden_size / tp if (separate or not model.tied_embeddings) else 0
    return head + norm


def total_params(model: ModelSpec) -> float:
    counts = model.layer_counts()
    layers = sum(n * layer_params(model, t, 1, 1, 1) for t, n in counts.items())
    return layers + embedding_params(model) + head_params(model, separate=False)


def active_params(model: ModelSpec) -> float:
    """Parameters one token passes through: total, with each MoE layer counting only its
    router, shared experts and ``top_k`` routed experts (Jiang et al. 2024: Mixtral 8x7B
    has 46.7B total, 12.9B active)."""
    if model.moe is None:
        return total_params(model)
    from planner.costmodel.moe import moe_active_expert_params, moe_layer_params

    n = model.layer_counts().get("moe", 0)
    routed = moe_layer_params(model, 1, 1, 1)[1]
    return total_params(model) - n * (routed - moe_active_expert_params(model))


# ---- FLOPs (model convention) --------------------------------------------------------
def layer_model_flops_per_token(model: ModelSpec, layer_type: str, seq: int) -> float:
    """Forward FLOPs per token of one layer, attention counted without causal savings
    (the PaLM/Megatron MFU convention: Chowdhery et al. 2022, App. B)."""
    h = model.hidden_size
    gemm = 2 * sum(n * k for _, _, n, k in attention_gemms(model, 1.0, 1))
    if layer_type == "moe":
        from planner.costmodel.moe import moe_ffn_flops_per_token

        gemm += moe_ffn_flops_per_token(model)
    else:
        gemm += 2 * model.ffn_matrices * h * model.ffn_hidden_size
    attn = 4 * seq * model.q_dim
    return gemm + attn


def head_model_flops_per_token(model: ModelSpec) -> float:
    return 2 * model.hidden_size * model.vocab_size


def model_flops_per_sequence(model: ModelSpec, seq: int) -> float:
    """Forward + backward FLOPs of one sequence (3x forward)."""
    per_token = sum(
        n * layer_model_flops_per_token(model, t, seq) for t, n in model.layer_counts().items()
    ) + head_model_flops_per_token(model)
    return 3 * per_token * seq


# ---- the layer -----------------------------------------------------------------------
def _gemms(model: ModelSpec, shape: LayerShape) -> list[tuple[str, float, float, float]]:
    """(name, m, n, k) of the forward GEMMs of a dense layer on one GPU."""
    _, _, f_loc, _ = local_dims(model, shape.tp)
    h, t = model.hidden_size, shape.tokens
    return attention_gemms(model, t, shape.tp) + [
        ("fc1", t, f_loc * (model.ffn_matrices - 1), h),
        ("fc2", t, h, f_loc),
    ]


def _attention_core(model: ModelSpec, gpu: GPUSpec, shape: LayerShape, strat: LayerStrategy
                    ) -> tuple[float, float, float]:
    """(fwd time, bwd time, fwd hardware FLOPs) of the attention core (scores, softmax, AV)."""
    _, _, _, heads = local_dims(model, shape.tp)
    dh = model.dim_head
    sq, sk = shape.seq / shape.cp, shape.seq
    batch = shape.mbs * heads
    if strat.attention == "flash":
        flops = 4 * batch * sq * sk * dh * C.FLASH_CAUSAL_FRACTION
        t_f, t_b = flash_attention_time_s(gpu, strat.dtype, flops)
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


def _elementwise_bytes(model: ModelSpec, shape: LayerShape, strat: LayerStrategy) -> float:
    """Forward HBM traffic of the memory-bound operations of one layer."""
    q_loc, kv_loc, f_loc, _ = local_dims(model, shape.tp)
    sp_div = shape.tp if strat.sequence_parallel else 1
    rows = shape.tokens * model.hidden_size / sp_div
    nbytes = 2 * C.NORM_BYTES * rows + 2 * C.RESIDUAL_BYTES * rows
    if model.dropout:
        nbytes += 2 * C.DROPOUT_BYTES * rows
    act = C.SWIGLU_BYTES if model.ffn_type == "swiglu" else C.GELU_BYTES
    nbytes += act * shape.tokens * f_loc
    if model.position_embedding == "rope":
        nbytes += C.ROPE_BYTES * shape.tokens * (q_loc + kv_loc)
    return nbytes


def activation_bytes(model: ModelSpec, shape: LayerShape, strat: LayerStrategy,
                     recompute: str | None = None) -> float:
    """Activations one dense layer stores for backward, per microbatch (Korthikanti et al.
    2022, Sec. 4.1, generalized to GQA, SwiGLU, FlashAttention and no dropout)."""
    mode = recompute or strat.recompute
    q_loc, kv_loc, f_loc, heads = local_dims(model, shape.tp)
    t, h, a = shape.tokens, model.hidden_size, C.ACT_BYTES
    sp_div = shape.tp if strat.sequence_parallel else 1
    if mode == "full":
        return a * t * h / sp_div  # the layer input only
    drop = 1.0 if model.dropout else 0.0
    # Replicated across TP unless sequence parallel: two norm inputs, the QKV and FC1
    # inputs, and the 1-byte dropout masks of the two residual branches.
    rep = (4 * a + 2 * drop) * t * h / sp_div
    # Sharded by TP: Q, K, V; the projection input; the FFN activations.
    ffn = (3 if model.ffn_type == "swiglu" else 2) * a * t * f_loc  # FC1 output(s), FC2 input
    sharded = a * t * (q_loc + 2 * kv_loc) + a * t * q_loc + ffn
    core = 0.0
    if strat.attention == "standard":
        if mode != "selective":
            scores = shape.mbs * heads * (shape.seq / shape.cp) * shape.seq
            core = (a + drop * (1 + a)) * scores  # softmax output, dropout mask and output
    else:
        lse = 4.0 * shape.mbs * heads * shape.seq / shape.cp  # fp32 log-sum-exp
        core = lse if mode != "selective" else 0.0
        if mode == "selective":
            sharded -= a * t * q_loc  # the attention output is recomputed, not stored
    return rep + sharded + core


@lru_cache(maxsize=65536)
def layer_cost(model: ModelSpec, gpu: GPUSpec, net: Net, shape: LayerShape,
               strat: LayerStrategy) -> LayerCost:
    """Cost of one layer (dense, or MoE when ``strat.layer_type == "moe"``) for one
    microbatch on one GPU."""
    if strat.layer_type == "moe":
        from planner.costmodel.moe import moe_layer_cost

        return moe_layer_cost(model, gpu, net, shape, strat)
    dt = strat.dtype
    gemms = _gemms(model, shape)
    fwd_g = {n: gemm_time_s(gpu, dt, m, nn, k) for n, m, nn, k in gemms}
    dgrad = {n: gemm_time_s(gpu, dt, m, k, nn) for n, m, nn, k in gemms}
    wgrad = {n: gemm_time_s(gpu, dt, k, nn, m) for n, m, nn, k in gemms}
    attn_f, attn_b, attn_flops = _attention_core(model, gpu, shape, strat)
    ew_f = elementwise_time_s(gpu, _elementwise_bytes(model, shape, strat))
    ew_b = C.ELEMENTWISE_BWD_RATIO * ew_f

    fwd = sum(fwd_g.values()) + attn_f + ew_f
    bwd = sum(dgrad.values()) + sum(wgrad.values()) + attn_b + ew_b

    tp_f, tp_b = _tp_comm(model, gpu, net, shape, strat, fwd_g, dgrad, wgrad)
    cp_f, cp_b = _cp_comm(model, gpu, net, shape, strat, attn_f, attn_b)

    gemm_flops = sum(2 * m * nn * k for _, m, nn, k in gemms)
    if strat.recompute == "full":
        rec, rec_comm_tp, rec_comm_cp = fwd, tp_f, cp_f
        rec_flops = gemm_flops + attn_flops
    elif strat.recompute == "selective":
        rec, rec_comm_tp, rec_comm_cp = attn_f, 0.0, 0.0
        rec_flops = attn_flops
    else:
        rec = rec_comm_tp = rec_comm_cp = rec_flops = 0.0

    act = activation_bytes(model, shape, strat)
    workspace = activation_bytes(model, shape, strat, "none") if strat.recompute == "full" else 0.0
    workspace += cp_buffer_bytes(model, shape, strat)
    return LayerCost(
        fwd_s=fwd,
        bwd_s=bwd,
        recompute_s=rec,
        tp_comm_s=tp_f + tp_b + rec_comm_tp,
        cp_comm_s=cp_f + cp_b + rec_comm_cp,
        ep_comm_s=0.0,
        act_bytes=act,
        workspace_bytes=workspace,
        recompute_flops=rec_flops,
    )


def _tp_comm(model: ModelSpec, gpu: GPUSpec, net: Net, shape: LayerShape, strat: LayerStrategy,
             fwd_g: dict[str, float], dgrad: dict[str, float], wgrad: dict[str, float]
             ) -> tuple[float, float]:
    """Exposed TP communication (forward, backward) of one layer.

    Megatron-LM: without sequence parallelism two all-reduces in forward (after the
    row-parallel projection and FC2) and two in backward (input gradients of QKV and FC1),
    the backward ones overlapped with the weight-gradient GEMM (async TP all-reduce).
    With sequence parallelism each all-reduce becomes a reduce-scatter and an all-gather
    (Korthikanti et al. 2022, Sec. 4.2.2); in backward the re-gather of the saved input
    overlaps the data-gradient GEMM and the reduce-scatter the weight-gradient GEMM.
    ``overlap_tp_comm`` overlaps every forward collective with its GEMM (Transformer
    Engine userbuffers).
    """
    return tp_comm_pairs(gpu, net, shape, strat, fwd_g, dgrad, wgrad,
                         (("qkv", "proj"), ("fc1", "fc2")),
                         shape.tokens * model.hidden_size * C.ACT_BYTES)


def tp_comm_pairs(gpu: GPUSpec, net: Net, shape: LayerShape, strat: LayerStrategy,
                  fwd_g: dict[str, float], dgrad: dict[str, float], wgrad: dict[str, float],
                  pairs: Sequence[tuple[str, str]], size: float) -> tuple[float, float]:
    """Exposed TP communication of (column-parallel, row-parallel) GEMM pairs (attention:
    QKV and projection; MLP: FC1 and FC2), each pair one all-reduce or one all-gather and
    one reduce-scatter of ``size`` bytes in each direction (see :func:`_tp_comm`)."""
    if shape.tp <= 1:
        return 0.0, 0.0
    spans, levels = net.tp_spans, net.levels
    ag = collective_time_s("all_gather", size, spans, levels, net.chunks)
    rs = collective_time_s("reduce_scatter", size, spans, levels, net.chunks)
    over = strat.overlap_tp_comm

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
        fwd += hide(ag, fwd_g[col], over) + hide(rs, fwd_g[row], over)
    for _col, row in pairs:
        bwd += hide(ag, dgrad[row], over)
    for col, _row in pairs:
        bwd += hide(ag, dgrad[col]) + hide(rs, wgrad[col])
    return fwd, bwd


def _cp_comm(model: ModelSpec, gpu: GPUSpec, net: Net, shape: LayerShape, strat: LayerStrategy,
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


def stage_cost_sum(costs: Sequence[tuple[int, LayerCost]]) -> dict[str, float]:
    """Sum per-layer costs over a stage given (count, cost) pairs."""
    keys = ("fwd_s", "bwd_s", "recompute_s", "tp_comm_s", "cp_comm_s", "ep_comm_s")
    return {k: sum(n * getattr(c, k) for n, c in costs) for k in keys}
