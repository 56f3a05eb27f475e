"""One transformer layer on one GPU for one microbatch: time, FLOPs, parameters, memory.

Megatron-LM semantics (Shoeybi et al. 2019; Narayanan et al. 2021; Korthikanti et al.
2022). Everything here is a pure function of the layer *key*: the layer type, the
local shape (tp, cp, microbatch, sequence) and the layer strategy (recompute mode,
sequence parallelism, TP communication, attention kernel) plus the spans of the TP and
CP groups on the network. The formulations tabulate these functions over keys.
"""

from __future__ import annotations

from functools import lru_cache

from planner.costmodel import constants as C
from planner.costmodel.compute import elementwise_time_s, fp8_cast_bytes, gemm_time_s, op_bytes
from planner.costmodel.attention import (
    attention_core,
    attention_gemms,
    attention_params,
    cp_buffer_bytes,
    cp_comm,
    recomputed,
    tp_comm_pairs,
)
from planner.costmodel.shapes import LayerCost, LayerShape, LayerStrategy, Net, local_dims
from planner.specs.gpu import GPUSpec
from planner.specs.model import ModelSpec
from planner.costmodel.moe import (
    moe_active_expert_params,
    moe_ffn_flops_per_token,
    moe_layer_cost,
    moe_layer_params,
)


# ---- dimensions ----------------------------------------------------------------------


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
        gemm += moe_ffn_flops_per_token(model)
    else:
        gemm += 2 * model.ffn_matrices * h * model.ffn_hidden_size
    attn = 4 * seq * model.q_dim
    return gemm + attn


def head_model_flops_per_token(model: ModelSpec) -> float:
    return 2 * model.hidden_size * model.vocab_size


#: The MFU convention, stated in every answer: the one Megatron-LM
#: (``num_floating_point_operations``), torchtitan (``get_num_flop_per_token``) and PaLM
#: (App. B) share. The Llama 3 paper does not state whether it halves causal attention.
MFU_CONVENTION = ("model FLOPs = 3 x forward (6 per parameter per token) + attention "
                  "12 L s h per token, the full s x s square (causal masking not halved; "
                  "Megatron-LM, torchtitan, PaLM App. B); hfu counts executed FLOPs: "
                  "recomputation and MoE padding included, causal blocks a FlashAttention "
                  "kernel skips excluded")


def masked_attention_flops_per_sequence(model: ModelSpec, seq: int) -> float:
    """Forward + backward FLOPs of the causal half of the attention square that
    FlashAttention skips (Dao 2023, Sec. 4.1): in the model count, never executed."""
    attn = sum(n * 4 * seq * model.q_dim for n in model.layer_counts().values())
    return 3 * C.FLASH_CAUSAL_FRACTION * attn * seq


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


def _elementwise_bytes(model: ModelSpec, shape: LayerShape, strat: LayerStrategy) -> float:
    """Forward HBM traffic of the memory-bound operations of one layer."""
    q_loc, kv_loc, f_loc, _ = local_dims(model, shape.tp)
    sp_div = shape.tp if strat.sequence_parallel else 1
    rows = shape.tokens * model.hidden_size / sp_div
    norm, act, rope = op_bytes(model, strat.fused_elementwise)
    nbytes = 2 * norm * rows + 2 * C.RESIDUAL_BYTES * rows
    if model.dropout:
        nbytes += 2 * C.DROPOUT_BYTES * rows
    nbytes += act * shape.tokens * f_loc
    if model.position_embedding == "rope":
        nbytes += rope * shape.tokens * (q_loc + kv_loc)
    return nbytes


def activation_bytes(model: ModelSpec, shape: LayerShape, strat: LayerStrategy,
                     recompute: str | None = None) -> float:
    """Activations one dense layer stores for backward, per microbatch (Korthikanti et al.
    2022, Sec. 4.1, generalized to GQA, SwiGLU, FlashAttention and no dropout)."""
    mode = recompute or strat.recompute
    if mode == "half":  # every second layer keeps only its input: the mean of the two
        return 0.5 * (activation_bytes(model, shape, strat, "none")
                      + activation_bytes(model, shape, strat, "full"))
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
        return moe_layer_cost(model, gpu, net, shape, strat)
    dt = strat.dtype
    gemms = _gemms(model, shape)
    fwd_g = {n: gemm_time_s(gpu, dt, m, nn, k) for n, m, nn, k in gemms}
    dgrad = {n: gemm_time_s(gpu, dt, m, k, nn) for n, m, nn, k in gemms}
    wgrad = {n: gemm_time_s(gpu, dt, k, nn, m) for n, m, nn, k in gemms}
    attn_f, attn_b, attn_flops = attention_core(model, gpu, shape, strat)
    ew_f = elementwise_time_s(gpu, _elementwise_bytes(model, shape, strat)
                              + fp8_cast_bytes(dt, sum(m * k for _, m, _, k in gemms)))
    ew_b = C.ELEMENTWISE_BWD_RATIO * ew_f

    fwd = sum(fwd_g.values()) + attn_f + ew_f
    bwd = sum(dgrad.values()) + sum(wgrad.values()) + attn_b + ew_b

    # userbuffer overlap runs each GEMM as tp chunks on concurrent streams: the chunks
    # fill the GPU together, each extra chunk costs a launch and a stream synchronization
    extra = (shape.tp - 1) * gpu.efficiency.kernel_overhead_us * 1e-6
    chunked = {n: t + extra for n, t in fwd_g.items()}
    tp_f, tp_b = _tp_comm(model, gpu, net, shape, strat, fwd_g, dgrad, wgrad, chunked)
    cp_f, cp_b = cp_comm(model, gpu, net, shape, strat, attn_f, attn_b)

    gemm_flops = sum(2 * m * nn * k for _, m, nn, k in gemms)
    rec, (rec_comm_tp, rec_comm_cp), rec_flops = recomputed(
        strat.recompute, fwd, attn_f, gemm_flops + attn_flops, attn_flops, (tp_f, cp_f))

    act = activation_bytes(model, shape, strat)
    workspace = (activation_bytes(model, shape, strat, "none")
                 if strat.recompute in ("full", "half") else 0.0)
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
             fwd_g: dict[str, float], dgrad: dict[str, float], wgrad: dict[str, float],
             chunked: dict[str, float]) -> tuple[float, float]:
    """Exposed TP communication (forward, backward) of one layer.

    Megatron-LM: without sequence parallelism two all-reduces in forward (after the
    row-parallel projection and FC2) and two in backward (input gradients of QKV and FC1),
    the backward ones overlapped with the weight-gradient GEMM (async TP all-reduce).
    With sequence parallelism each all-reduce becomes a reduce-scatter and an all-gather
    (Korthikanti et al. 2022, Sec. 4.2.2); in backward the re-gather of the saved input
    overlaps the data-gradient GEMM and the reduce-scatter the weight-gradient GEMM.
    ``overlap_tp_comm`` overlaps every forward collective with its GEMM, run as ``tp``
    concurrent chunks (``chunked``: the GEMM plus the extra launches; Transformer Engine
    userbuffers), inside the NVLink domain only.
    """
    return tp_comm_pairs(gpu, net, shape, strat, fwd_g, dgrad, wgrad,
                         (("qkv", "proj"), ("fc1", "fc2")),
                         shape.tokens * model.hidden_size * C.ACT_BYTES, chunked)


