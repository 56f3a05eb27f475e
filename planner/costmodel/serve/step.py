"""LLM inference on one replica: bytes per weight and per KV-cache token, memory per GPU,
the time of one decode step and of one prompt's prefill.

The physics is the training cost model's: GEMMs through :func:`gemm_time_s` (the
saturating efficiency curve, with the roofline against HBM that makes a decode GEMM read
its weights at the GPU's achievable bandwidth), attention through
:func:`flash_attention_time_s`, memory-bound kernels through :func:`elementwise_time_s`,
TP all-reduces, EP all-to-alls and PP sends through :mod:`planner.costmodel.network`, the
HBM a run may not fill through :func:`headroom_bytes`. docs/serving.md states the model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from planner.costmodel import constants as C
from planner.costmodel.attention import attention_gemms
from planner.costmodel.compose import headroom_bytes
from planner.costmodel.compute import elementwise_time_s, flash_attention_time_s, gemm_time_s
from planner.costmodel.layer import embedding_params, head_params, layer_params
from planner.costmodel.moe import shared_ffn
from planner.costmodel.runtime import apply_profile
from planner.costmodel.network import PlacementError, collective_time_s, p2p_time_s, spans_for
from planner.costmodel.shapes import local_dims
from planner.specs.cluster import ClusterSpec
from planner.specs.gpu import GPUSpec
from planner.specs.model import ModelSpec
from planner.specs.serve import ServeEngine, ServePlan
from planner.costmodel.network import subgroup

#: Bytes per weight. int4 weight-only (AWQ/GPTQ, W4A16) keeps one fp16 scale per group of
#: 128 weights (Lin et al. 2024, AWQ, Sec. 4; TensorRT-LLM ``--group_size 128``); NVFP4
#: keeps one fp8 scale per block of 16 (NVIDIA Blackwell NVFP4 format, TensorRT Model
#: Optimizer docs): 0.5 + 2/128 and 0.5 + 1/16 bytes.
WEIGHT_BYTES = {"bf16": 2.0, "fp8": 1.0, "int4": 0.5 + 2.0 / 128, "fp4": 0.5 + 1.0 / 16}
KV_BYTES = {"bf16": 2.0, "fp8": 1.0}
#: Embedding table and LM head stay in bf16 under FP8/INT4/FP4 quantization (TensorRT-LLM
#: and TensorRT Model Optimizer exclude ``lm_head`` from quantization by default).
EMBED_BYTES = 2.0
#: GPUs with FP4 tensor cores (NVIDIA Blackwell architecture technical brief, 2024: B200
#: dense FP4 9 PFLOP/s, twice its FP8); where the catalog gives no fp4 peak it is 2x fp8.
FP4_GPUS = ("b200", "gb200")
#: Paged KV cache blocks of 16 tokens (vLLM ``--block-size`` default 16, vllm/config.py
#: ``CacheConfig``): a sequence holds whole blocks.
KV_BLOCK_TOKENS = 16
#: The logits of a decode step are fp32 (vLLM and TensorRT-LLM ``gather_generation_logits``
#: compute the sampling softmax in fp32).
LOGIT_BYTES = 4.0


def weight_dtype_error(gpu: GPUSpec, weight_dtype: str) -> str | None:
    """Why ``gpu`` cannot run ``weight_dtype`` GEMMs (None when it can)."""
    if weight_dtype == "fp4" and gpu.name.lower() not in FP4_GPUS:
        return f"weight_dtype fp4 needs FP4 tensor cores (Blackwell: {', '.join(FP4_GPUS)}); {gpu.name} has none"
    if weight_dtype == "fp8" and "fp8" not in gpu.peak_tflops:
        return f"weight_dtype fp8 needs FP8 tensor cores; {gpu.name} lists no fp8 peak"
    return None


def compute_dtype(gpu: GPUSpec, weight_dtype: str) -> str:
    """The GEMM dtype: int4 weight-only dequantizes to bf16 (W4A16); fp4 uses the fp8
    efficiency curve at twice the fp8 peak (:func:`gemm_s`)."""
    return {"int4": "bf16", "fp4": "fp8"}.get(weight_dtype, weight_dtype)


def gemm_s(gpu: GPUSpec, weight_dtype: str, m: float, n: float, k: float) -> float:
    """One inference GEMM (m tokens, n x k weights) in the weight dtype: the training
    roofline with the weights at their stored width."""
    t = gemm_time_s(gpu, compute_dtype(gpu, weight_dtype), m, n, k,
                    elem_bytes=WEIGHT_BYTES[weight_dtype])
    if weight_dtype == "fp4" and "fp4" not in gpu.peak_tflops:
        # twice the fp8 math rate; the HBM side of the roofline is unchanged
        t_mem = elementwise_time_s(gpu, (m * k + k * n + m * n) * WEIGHT_BYTES["fp4"])
        t = max((t - gpu.efficiency.kernel_overhead_us * 1e-6) / 2, t_mem) \
            + gpu.efficiency.kernel_overhead_us * 1e-6
    return t


def act_quant_s(gpu: GPUSpec, weight_dtype: str, m: float, k: float, kernels: int) -> float:
    """Quantizing the ``m x k`` bf16 input of one FP8 GEMM to FP8 in ``kernels`` launches
    (:attr:`ServeEngine.fp8_act_quant_kernels`), each reading the input (2 B per element),
    the last writing it as FP8 (1 B). None for other weight dtypes: bf16 and weight-only
    int4 multiply bf16 activations."""
    if weight_dtype != "fp8" or kernels <= 0 or m <= 0 or k <= 0:
        return 0.0
    nbytes = (kernels * C.ACT_BYTES + 1.0) * m * k
    return kernels * gpu.efficiency.kernel_overhead_us * 1e-6 + elementwise_time_s(gpu, nbytes)


# ---- sizes ----------------------------------------------------------------------------
def kv_bytes_per_token_layer(model: ModelSpec, tp: int, kv_dtype: str) -> float:
    """KV cache of one token in one layer on one TP rank. MHA/GQA: K and V of the rank's
    KV heads (replicated when tp exceeds them, as in vLLM/Megatron GQA). MLA: the
    compressed latent and the decoupled RoPE key, replicated on every rank (DeepSeek-V2,
    Sec. 2.1.2: (d_c + d_h^R) elements per token per layer)."""
    if model.mla is not None:
        return (model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) * KV_BYTES[kv_dtype]
    _, kv_loc, _, _ = local_dims(model, tp)
    return 2 * kv_loc * KV_BYTES[kv_dtype]


def stage_layers(model: ModelSpec, pp: int) -> dict[str, float]:
    """Layers of each type on the fullest pipeline stage: ceil(L/pp) layers with the
    model's mix of types."""
    per = math.ceil(model.num_layers / pp)
    return {t: n * per / model.num_layers for t, n in model.layer_counts().items()}


def weight_bytes_per_gpu(model: ModelSpec, plan: ServePlan) -> float:
    """Weights on the fullest GPU: its stage's layers (TP- and EP-sharded) in the weight
    dtype, plus the embedding and LM head shards in bf16 (all on one stage at pp = 1;
    with pp > 1 the first and last stages hold one each, counted once)."""
    etp = plan.tp // plan.ep
    layers = sum(n * layer_params(model, t, plan.tp, plan.ep, etp)
                 for t, n in stage_layers(model, plan.pp).items())
    embed = embedding_params(model, plan.tp)
    head = head_params(model, plan.tp, separate=plan.pp > 1)
    ends = embed + head if plan.pp == 1 else max(embed, head)
    return layers * WEIGHT_BYTES[plan.weight_dtype] + ends * EMBED_BYTES


def kv_bytes_per_sequence(model: ModelSpec, plan: ServePlan, tokens: int) -> float:
    """KV cache of one sequence of ``tokens`` on the fullest GPU, in whole paged blocks."""
    blocks = math.ceil(tokens / KV_BLOCK_TOKENS) * KV_BLOCK_TOKENS
    layers = math.ceil(model.num_layers / plan.pp)
    return blocks * layers * kv_bytes_per_token_layer(model, plan.tp, plan.kv_dtype)


def activation_bytes(model: ModelSpec, plan: ServePlan) -> float:
    """Transient activations of one step: a prefill chunk's widest live tensors (the layer
    input and residual, QKV, the FFN intermediates) and the fp32 logits of the batch.
    Inference keeps no activations across layers."""
    q_loc, kv_loc, f_loc, _ = local_dims(model, plan.tp)
    if model.moe is not None:
        f_loc = max(f_loc, model.moe.top_k * model.moe.expert_ffn_hidden_size * plan.ep / plan.tp)
    width = 2 * model.hidden_size + q_loc + 2 * kv_loc + model.ffn_matrices * f_loc
    logits = plan.concurrency * model.vocab_size / plan.tp * LOGIT_BYTES
    return plan.prefill_chunk * width * C.ACT_BYTES + logits


@dataclass(frozen=True)
class ServeMemory:
    """Bytes per GPU of one replica at full concurrency."""

    weights: float
    kv_cache: float
    activations: float
    headroom: float
    capacity: float

    @property
    def total(self) -> float:
        return self.weights + self.kv_cache + self.activations + self.headroom


def serve_memory(model: ModelSpec, cluster: ClusterSpec, plan: ServePlan, isl: int,
                 osl: int) -> ServeMemory:
    """Weights + KV cache of ``concurrency`` sequences of ``isl + osl`` tokens (reserved
    whole, as TensorRT-LLM's ``guaranteed_no_evict`` scheduler does) + activations + the
    cluster's headroom, against the GPU's HBM."""
    kv = plan.concurrency * kv_bytes_per_sequence(model, plan, isl + osl)
    return ServeMemory(weight_bytes_per_gpu(model, plan), kv, activation_bytes(model, plan),
                       headroom_bytes(cluster), cluster.gpu.hbm_bytes)


def max_concurrency(model: ModelSpec, cluster: ClusterSpec, plan: ServePlan, isl: int,
                    osl: int) -> int:
    """The most sequences whose KV cache (and fp32 logits) fit beside the weights, the
    prefill activations and the headroom: 0 when not even one does."""
    empty = serve_memory(model, cluster, plan.model_copy(update={"concurrency": 1}), isl, osl)
    per_seq = empty.kv_cache + model.vocab_size / plan.tp * LOGIT_BYTES
    free = empty.capacity - empty.total + per_seq  # what sequences may use
    return max(0, int(free // per_seq))


# ---- network ---------------------------------------------------------------------------
@lru_cache(maxsize=4096)
def replica_spans(cluster: ClusterSpec, tp: int, pp: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(TP spans, PP spans) of one replica placed TP-innermost on the cluster's levels.
    Raises PlacementError when ``tp x pp`` GPUs do not fit the cluster."""
    if tp * pp > cluster.num_gpus:
        raise PlacementError(f"a replica of tp x pp = {tp * pp} GPUs exceeds the cluster's "
                             f"{cluster.num_gpus}")
    spans = spans_for((tp, 1, 1, pp), None, ("tp", "cp", "dp", "pp"), tuple(cluster.topology))
    return spans[0], spans[3]


# ---- time ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReplicaNet:
    """The cluster's levels and one replica's TP, EP and PP group spans on them."""

    levels: tuple
    tp: tuple[int, ...]
    ep: tuple[int, ...]
    pp: tuple[int, ...]
    overhead_s: float = 0.0  # per collective (ServeEngine.collective_overhead_us)
    quant_kernels: int = 0  # per FP8 GEMM input (ServeEngine.fp8_act_quant_kernels)


def replica_net(cluster: ClusterSpec, plan: ServePlan,
                engine: ServeEngine) -> ReplicaNet:
    tp, pp = replica_spans(cluster, plan.tp, plan.pp)
    return ReplicaNet(tuple(cluster.topology), tp, subgroup(tp, plan.ep), pp,
                      engine.collective_overhead_us * 1e-6, engine.fp8_act_quant_kernels)


def _ffn_s(model: ModelSpec, gpu: GPUSpec, plan: ServePlan, layer_type: str, m: float,
           qk: int = 0) -> float:
    """FFN GEMMs of ``m`` tokens. MoE: the router (bf16, replicated), the shared experts
    (TP-sharded) and the routed experts a batch touches: with balanced routing each local
    expert is hit by at least one of the ``m k`` token copies with probability
    ``1 - (1 - k/E)^m``, and a decode step reads only the experts it touches. ``qk``: the
    launches quantizing each FP8 GEMM input (:func:`act_quant_s`)."""
    wd, h, mats = plan.weight_dtype, model.hidden_size, model.ffn_matrices
    _, _, f_loc, _ = local_dims(model, plan.tp)
    if layer_type != "moe" or model.moe is None:
        return (gemm_s(gpu, wd, m, (mats - 1) * f_loc, h) + gemm_s(gpu, wd, m, h, f_loc)
                + act_quant_s(gpu, wd, m, h, qk) + act_quant_s(gpu, wd, m, f_loc, qk))
    moe = model.moe
    if m <= 0:
        return 0.0
    t = gemm_time_s(gpu, "bf16", m, moe.num_experts, h)
    if shared_ffn(model):
        fs = shared_ffn(model) / plan.tp
        t += (gemm_s(gpu, wd, m, (mats - 1) * fs, h) + gemm_s(gpu, wd, m, h, fs)
              + act_quant_s(gpu, wd, m, h, qk) + act_quant_s(gpu, wd, m, fs, qk))
    fe = moe.expert_ffn_hidden_size * plan.ep / plan.tp
    hit = 1.0 - (1.0 - moe.top_k / moe.num_experts) ** m
    touched = moe.num_experts / plan.ep * hit
    per_expert = m * moe.top_k / (moe.num_experts * hit)
    copies = m * moe.top_k / plan.ep  # the local token copies, quantized once per input
    return (t + touched * (gemm_s(gpu, wd, per_expert, (mats - 1) * fe, h)
                           + gemm_s(gpu, wd, per_expert, h, fe))
            + act_quant_s(gpu, wd, copies, h, qk) + act_quant_s(gpu, wd, copies, fe, qk))


def _comm_s(model: ModelSpec, plan: ServePlan, net: ReplicaNet, layer_type: str,
            m: float) -> float:
    """TP all-reduces after the attention projection and the FFN (Megatron-style TP, as
    vLLM and TensorRT-LLM run it); an MoE layer with ``ep > 1`` dispatches and combines
    its token copies by all-to-all over the EP group and all-gathers the tokens over TP."""
    if plan.tp <= 1 or m <= 0:
        return 0.0
    size = m * model.hidden_size * C.ACT_BYTES
    ar = collective_time_s("allreduce", size, net.tp, net.levels) + net.overhead_s
    if layer_type != "moe" or plan.ep <= 1 or model.moe is None:
        return 2 * ar
    copies = m / plan.tp * model.moe.top_k * model.hidden_size * C.ACT_BYTES
    a2a = collective_time_s("all_to_all", copies, net.ep, net.levels) + net.overhead_s
    return (ar + 2 * a2a + collective_time_s("all_gather", size, net.tp, net.levels)
            + net.overhead_s)


def _elementwise_s(model: ModelSpec, gpu: GPUSpec, plan: ServePlan, m: float) -> float:
    """Two norms, two residual adds, RoPE and the FFN activation of ``m`` tokens."""
    q_loc, kv_loc, f_loc, _ = local_dims(model, plan.tp)
    act = C.SWIGLU_BYTES if model.ffn_type == "swiglu" else C.GELU_BYTES
    nbytes = m * (model.hidden_size * (2 * C.NORM_BYTES + 2 * C.RESIDUAL_BYTES)
                  + (q_loc + kv_loc) * C.ROPE_BYTES + f_loc * act)
    return elementwise_time_s(gpu, nbytes)


def layer_pass_s(model: ModelSpec, gpu: GPUSpec, plan: ServePlan, net: ReplicaNet,
                 layer_type: str, m: float) -> float:
    """One layer's GEMMs, elementwise kernels and TP/EP exchanges for ``m`` tokens (the
    attention core apart: :func:`decode_attention_s`, :func:`prefill_attention_s`)."""
    wd, qk = plan.weight_dtype, net.quant_kernels
    attn = sum(gemm_s(gpu, wd, mm, n, k) + act_quant_s(gpu, wd, mm, k, qk)
               for _, mm, n, k in attention_gemms(model, m, plan.tp))
    return (attn + _ffn_s(model, gpu, plan, layer_type, m, qk) + _elementwise_s(model, gpu, plan, m)
            + _comm_s(model, plan, net, layer_type, m))


def decode_attention_s(model: ModelSpec, gpu: GPUSpec, plan: ServePlan, seqs: float,
                       context: float, kv_shared: bool = True) -> float:
    """One layer's attention for ``seqs`` single-token queries over ``context`` cached
    tokens each: the slower of reading the KV cache at HBM speed and the math. Without
    ``kv_shared`` (:class:`ServeEngine`) each query head of a GQA group reads its KV head."""
    _, kv_loc, _, heads = local_dims(model, plan.tp)
    kv = seqs * context * kv_bytes_per_token_layer(model, plan.tp, plan.kv_dtype)
    if not kv_shared and model.mla is None:
        kv *= max(1.0, heads * model.dim_head / kv_loc)
    flops = 4 * seqs * heads * context * model.dim_head
    return max(elementwise_time_s(gpu, kv), flash_attention_time_s(gpu, "bf16", flops)[0])


def prefill_attention_s(model: ModelSpec, gpu: GPUSpec, plan: ServePlan, isl: float) -> float:
    """One layer's causal attention over one prompt of ``isl`` tokens (FlashAttention,
    half of the score matrix)."""
    _, _, _, heads = local_dims(model, plan.tp)
    flops = 4 * heads * isl * isl * model.dim_head * C.FLASH_CAUSAL_FRACTION
    return flash_attention_time_s(gpu, "bf16", flops, seq=isl, head_dim=model.dim_head,
                                  grouped=model.kv_heads < model.num_attention_heads)[0]


def _stage_s(model: ModelSpec, gpu: GPUSpec, plan: ServePlan, net: ReplicaNet, m: float,
             attention) -> float:
    """The fullest stage: its layers on ``m`` tokens plus the attention ``attention()``
    gives per layer, and the pipeline send of its output."""
    layers = stage_layers(model, plan.pp)
    t = sum(n * (layer_pass_s(model, gpu, plan, net, kind, m) + attention)
            for kind, n in layers.items())
    return t + p2p_time_s(m * model.hidden_size * C.ACT_BYTES, net.pp, net.levels)


def decode_step_s(model: ModelSpec, cluster: ClusterSpec, plan: ServePlan,
                  context: float, engine: ServeEngine,
                  batch: float | None = None) -> float:
    """Time between two tokens of a sequence in a decode batch of ``batch`` sequences
    (None: the concurrency cap), every sequence holding ``context`` tokens. With ``pp``
    stages the batch runs as ``pp`` microbatches in flight, so a token passes every stage
    once: pp x the stage time of batch/pp sequences, at least one (pipelining adds
    capacity, not speed). Includes the LM head (bf16)."""
    gpu, net = apply_profile(cluster, engine).gpu, replica_net(cluster, plan, engine)
    size = plan.concurrency if batch is None else batch
    mb = max(size / plan.pp, 1.0)  # fewer sequences than stages: one each
    attn = decode_attention_s(model, gpu, plan, mb, context, engine.gqa_kv_shared)
    head = gemm_time_s(gpu, "bf16", mb, model.vocab_size / plan.tp, model.hidden_size)
    return plan.pp * (_stage_s(model, gpu, plan, net, mb, attn) + head / plan.pp)


@dataclass(frozen=True)
class Prefill:
    """One prompt's prefill: ``latency_s`` through every stage when it runs alone in
    ``chunks`` chunks, ``occupancy_s`` of replica time it takes when chunks are packed to
    the token budget and stages pipelined (its share of the throughput)."""

    latency_s: float
    occupancy_s: float
    chunks: int


def prefill(model: ModelSpec, cluster: ClusterSpec, plan: ServePlan, isl: int,
            engine: ServeEngine) -> Prefill:
    gpu, net = apply_profile(cluster, engine).gpu, replica_net(cluster, plan, engine)
    budget = plan.prefill_chunk
    chunks = math.ceil(isl / budget)
    alone = min(isl, budget) if chunks == 1 else isl / chunks
    attn = prefill_attention_s(model, gpu, plan, isl)
    head = gemm_time_s(gpu, "bf16", 1, model.vocab_size / plan.tp, model.hidden_size)
    stages = plan.pp
    latency = stages * (chunks * _stage_s(model, gpu, plan, net, alone, 0.0)
                        + _stage_s(model, gpu, plan, net, 0.0, attn)) + head
    packed = _stage_s(model, gpu, plan, net, budget, 0.0) * isl / budget
    occupancy = packed + _stage_s(model, gpu, plan, net, 0.0, attn) + head / stages
    return Prefill(latency, occupancy, chunks)
