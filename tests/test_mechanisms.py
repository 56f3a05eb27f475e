"""One test per modelled cost-model term: each computes with the term and checks the
direction and size of what it adds against a count written out here (bytes moved, FLOPs,
collective steps, a paper's formula), never against the constant or function the code
uses. ``tools/mutation_pass.py`` removes each term in turn; these tests are what must fail.

The GPU and network are synthetic round numbers so the counts stay readable: 100 TFLOP/s,
1 TB/s of HBM, GEMMs at full efficiency (``gemm_half_dim`` 0), one ring level of 100 GB/s
without latency unless a test says otherwise.
"""

from __future__ import annotations

import pytest

from planner.costmodel.attention import cp_comm, recomputed
from planner.costmodel.compose import (dp_window_microbatches, iteration_time_s, overlapped_s,
                                       stage_memory, tail_time, Overlap)
from planner.costmodel.compute import exposed_s, flash_attention_time_s, gemm_time_s
from planner.costmodel.layer import activation_bytes, layer_cost
from planner.costmodel.network import collective_time_s
from planner.costmodel.pipeline import inflight_chunks
from planner.costmodel.shapes import LayerShape, LayerStrategy, Net
from planner.costmodel.train.stage import (dp_comm, head_cost, optimizer_step_s,
                                     p2p_time_per_microbatch_s, state_bytes)
from planner.specs.cluster import TopologyLevel
from planner.specs.gpu import GPUEfficiency, GPUSpec

from conftest import tiny_model

TB = 1e12
PEAK = 100e12  # FLOP/s


def gpu(hbm_TBps: float = 1.0, overhead_us: float = 0.0, slowdown: float = 0.0,
        half_dim: float = 0.0) -> GPUSpec:
    return GPUSpec(name="round", peak_tflops={"bf16": 100.0, "fp8": 100.0}, hbm_gib=80,
                   hbm_TBps=hbm_TBps, tdp_w=700,
                   efficiency=GPUEfficiency(gemm_peak_fraction=1.0, gemm_half_dim=half_dim,
                                            attention_fwd_fraction=0.5,
                                            attention_bwd_fraction=0.25, hbm_fraction=1.0,
                                            kernel_overhead_us=overhead_us,
                                            overlap_slowdown=slowdown))


def ring(bw_GBps: float = 100.0, latency_us: float = 0.0, size: int = 8) -> TopologyLevel:
    return TopologyLevel(name="ring", kind="ring", size=size, bandwidth_GBps=bw_GBps,
                         latency_us=latency_us)


def net(tp: int = 1, cp: int = 1, latency_us: float = 0.0) -> Net:
    return Net(levels=(ring(latency_us=latency_us),), tp_spans=(tp,), cp_spans=(cp,))


#: h 1024, 8 heads of 128 (MHA), GELU FFN 4096, LayerNorm, learned positions, no dropout
M = tiny_model(hidden_size=1024, num_attention_heads=8, num_kv_heads=8, ffn_hidden_size=4096,
               ffn_type="gelu", norm_type="layernorm", position_embedding="learned",
               vocab_size=32000)
T = 4096  # tokens of one microbatch (mbs 1, seq 4096)
SHAPE = LayerShape(tp=1, cp=1, mbs=1, seq=T)


# ---- HBM-bound terms of a layer --------------------------------------------------------
def _hbm_seconds(dtype: str) -> tuple[float, float]:
    """(forward, backward) time a layer spends per byte/s of HBM: every GEMM here is
    compute bound at 100 TFLOP/s, so halving the bandwidth moves only the memory-bound
    kernels. Returns the forward and backward bytes those kernels move."""
    strat = LayerStrategy(dtype=dtype)
    slow, fast = (layer_cost(M, gpu(hbm_TBps=b), net(), SHAPE, strat) for b in (1.0, 2.0))
    per_byte = 1 / TB - 1 / (2 * TB)
    return (slow.fwd_s - fast.fwd_s) / per_byte, (slow.bwd_s - fast.bwd_s) / per_byte


def test_elementwise_traffic_of_a_layer_is_its_hand_count():
    h, f = 1024, 4096
    # two LayerNorms (read x, write y: 2 + 2 B), two residual adds (read 2 x 2 B, write 2 B),
    # GELU on the FFN (read, write: 2 + 2 B per element of the 4096-wide activation)
    fwd = T * h * (2 * 4 + 2 * 6) + T * f * 4
    assert fwd == 150_994_944
    got_fwd, got_bwd = _hbm_seconds("bf16")
    assert got_fwd == pytest.approx(fwd, rel=1e-6)
    # backward reads the output gradient and the saved input and writes the input gradient
    assert got_bwd == pytest.approx(2 * fwd, rel=1e-6)


def test_fp8_casts_add_their_bytes_to_every_gemm_input():
    """Transformer Engine's cast_transpose reads each bf16 GEMM input (2 B) and writes it
    as FP8 row-wise and transposed (1 + 1 B). The inputs of one layer's forward GEMMs:
    QKV (t x h), projection (t x q), FC1 (t x h), FC2 (t x f). The GPU's fp8 and bf16
    peaks are equal here, so the casts are the whole difference."""
    inputs = T * (1024 + 1024 + 1024 + 4096)
    bf16_f, bf16_b = _hbm_seconds("bf16")
    fp8_f, fp8_b = _hbm_seconds("fp8")
    assert fp8_f - bf16_f == pytest.approx(4 * inputs, rel=1e-6)  # 117,440,512 B
    assert fp8_b - bf16_b == pytest.approx(2 * 4 * inputs, rel=1e-6)  # output grads likewise
    one = layer_cost(M, gpu(), net(), SHAPE, LayerStrategy())
    eight = layer_cost(M, gpu(), net(), SHAPE, LayerStrategy(dtype="fp8"))
    assert eight.fwd_s - one.fwd_s == pytest.approx(4 * inputs / TB, rel=1e-6)


# ---- kernels ----------------------------------------------------------------------------
def test_kernel_launch_overhead_is_paid_once_per_kernel():
    g0, g5 = gpu(), gpu(overhead_us=5.0)
    assert gemm_time_s(g5, "bf16", 4096, 4096, 4096) - gemm_time_s(g0, "bf16", 4096, 4096, 4096) \
        == pytest.approx(5e-6)
    f0, b0 = flash_attention_time_s(g0, "bf16", 1e12)
    f5, b5 = flash_attention_time_s(g5, "bf16", 1e12)
    assert (f5 - f0, b5 - b0) == pytest.approx((5e-6, 5e-6))


def test_flash_attention_backward_does_two_and_a_half_times_the_forward_flops():
    """FlashAttention-2 (Dao 2023, Sec. 3.1): 2 matmuls forward, 5 backward."""
    fwd, bwd = flash_attention_time_s(gpu(), "bf16", 1e12)
    assert fwd == pytest.approx(1e12 / (PEAK * 0.5))  # 20 ms at half of peak
    assert bwd == pytest.approx(2.5e12 / (PEAK * 0.25))  # 100 ms at a quarter of peak


def test_gemv_reads_its_weights_at_hbm_speed():
    # one token through an 8192 x 8192 bf16 weight: 128 MiB read, 0.13 ms at 1 TB/s
    assert gemm_time_s(gpu(), "bf16", 1, 8192, 8192) == pytest.approx(
        (8192 * 8192 + 2 * 8192) * 2 / TB, rel=1e-9)


# ---- overlap ------------------------------------------------------------------------------
def test_overlapped_communication_slows_the_compute_it_hides_behind():
    # 3 s of traffic behind 2 s of compute, 10 % of the overlapped time lost: 1 + 0.1 x 2
    assert exposed_s(3.0, 2.0, 0.1) == pytest.approx(1.2)
    assert exposed_s(1.0, 2.0, 0.1) == pytest.approx(0.1)
    import numpy as np
    assert exposed_s(np.array([3.0, 1.0]), 2.0, 0.1) == pytest.approx([1.2, 0.1])


def test_last_bucket_of_a_bucketed_collective_is_exposed():
    # 10 s of gradient reduction over 10 layers behind 100 s of backward: the last layer's
    # bucket (1 s) starts after the compute it could hide behind
    assert overlapped_s(10.0, 100.0, 10, True, 0.0) == pytest.approx(1.0)
    assert overlapped_s(10.0, 100.0, 10, False, 0.0) == 10.0


def test_interleaved_gradient_reduction_window():
    """Megatron-Core interleaved 1F1B: the first rank's cool-down is 2 (pp - 1) + (v - 1) pp
    chunk steps; pp 4, v 2: 10 chunk steps = 5 microbatches of the stage's compute."""
    assert dp_window_microbatches(4, 2, 8) == pytest.approx(5.0)
    assert dp_window_microbatches(4, 1, 8) == 1.0
    assert dp_window_microbatches(4, 2, 3) == 3.0  # at most the microbatches there are


# ---- TP, CP and recomputation ---------------------------------------------------------------
S_TH = T * 1024 * 2  # one layer's activation, bytes


def test_tensor_parallel_all_reduces_per_layer():
    """Megatron-LM without SP: two all-reduces of t x h forward (after the projection and
    FC2), two backward, hidden behind the weight-gradient GEMMs. A ring all-reduce over 2
    GPUs sends 2 (k-1)/k = 1 buffer per GPU."""
    c = layer_cost(M, gpu(), net(tp=2), LayerShape(2, 1, 1, T), LayerStrategy())
    one_ar = S_TH / 100e9
    assert c.tp_comm_s == pytest.approx(2 * one_ar, rel=1e-9)
    # at 1 GB/s the backward all-reduces stick out of the weight-gradient GEMMs too
    slow = Net(levels=(ring(bw_GBps=1.0),), tp_spans=(2,), cp_spans=(1,))
    c = layer_cost(M, gpu(), slow, LayerShape(2, 1, 1, T), LayerStrategy())
    wgrad_qkv = 2 * 1024 * 1536 * T / PEAK  # (h x 3h/2) weight gradient over t tokens
    wgrad_fc1 = 2 * 1024 * 2048 * T / PEAK
    ar = S_TH / 1e9
    assert c.tp_comm_s == pytest.approx(2 * ar + (ar - wgrad_qkv) + (ar - wgrad_fc1), rel=1e-9)


def test_userbuffer_overlap_pays_a_launch_per_extra_chunk():
    """With TP overlap each forward GEMM of a pair runs as tp chunks: (tp - 1) extra
    launches per GEMM, 2 pairs x 2 GEMMs x 1 extra launch x 5 us at tp 2; the exchange
    itself hides behind the chunks and the backward behind the gradient GEMMs."""
    strat = LayerStrategy(sequence_parallel=True, tp_comm="rs_ag", overlap_tp_comm=True)
    c = layer_cost(M, gpu(overhead_us=5.0), net(tp=2), LayerShape(2, 1, 1, T), strat)
    assert c.tp_comm_s == pytest.approx(4 * 5e-6, rel=1e-6)


def test_context_parallel_all_to_all_per_layer():
    """DeepSpeed-Ulysses, cp 2: Q, K, V (t x 3h) scattered and the output (t x h) gathered,
    each way; an all-to-all over 2 ring members sends half the buffer."""
    shape = LayerShape(1, 2, 1, T)
    fwd, bwd = cp_comm(M, gpu(), net(cp=2), shape, LayerStrategy(cp_comm="all_to_all"), 0, 0)
    t = T / 2
    one = (t * 3 * 1024 * 2 + t * 1024 * 2) / 2 / 100e9
    assert (fwd, bwd) == pytest.approx((one, one), rel=1e-9)


def test_recomputation_repeats_the_forward_and_its_exchanges():
    """Korthikanti et al. 2022, Sec. 5: full recomputation runs the forward again (with its
    TP all-reduces), selective the attention core only (no exchange)."""
    shape, n = LayerShape(2, 1, 1, T), net(tp=2)
    none = layer_cost(M, gpu(), n, shape, LayerStrategy())
    full = layer_cost(M, gpu(), n, shape, LayerStrategy(recompute="full"))
    half = layer_cost(M, gpu(), n, shape, LayerStrategy(recompute="half"))
    sel = layer_cost(M, gpu(), n, shape, LayerStrategy(recompute="selective"))
    assert full.recompute_s == pytest.approx(none.fwd_s)
    assert full.tp_comm_s - none.tp_comm_s == pytest.approx(2 * S_TH / 100e9, rel=1e-9)
    assert half.recompute_s == pytest.approx(none.fwd_s / 2)
    # causal attention core of 4 heads per rank: 4 b a s^2 d / 2 FLOPs at half of peak
    core = 4 * 4 * T * T * 128 / 2 / (PEAK * 0.5)
    assert sel.recompute_s == pytest.approx(core, rel=1e-9)
    assert recomputed("none", 1.0, 0.5, 3.0, 1.0, (1.0,)) == (0.0, (0.0,), 0.0)


# ---- activations (Korthikanti et al. 2022, Sec. 4, Table 2) ---------------------------------
@pytest.mark.parametrize("tp", [1, 4])
def test_activations_are_the_papers_formula(tp):
    """GPT layer with dropout and unfused attention: s b h (34 + 5 a s / h) bytes without
    parallelism; with TP and SP everything divides by t; selective recomputation keeps
    34 s b h / t; full recomputation the 2 s b h / t layer input."""
    g = tiny_model(hidden_size=1024, num_attention_heads=8, num_kv_heads=8,
                   ffn_hidden_size=4096, ffn_type="gelu", dropout=True)
    s, b, h, a = 2048, 1, 1024, 8
    shape = LayerShape(tp, 1, b, s)
    strat = LayerStrategy(attention="standard", sequence_parallel=tp > 1)
    assert activation_bytes(g, shape, strat) == pytest.approx(s * b * h * (34 + 5 * a * s / h) / tp)
    assert activation_bytes(g, shape, strat, "selective") == pytest.approx(34 * s * b * h / tp)
    assert activation_bytes(g, shape, strat, "full") == pytest.approx(2 * s * b * h / tp)


def test_first_1f1b_stage_holds_pp_microbatches():
    """1F1B (Narayanan et al. 2021): the first stage keeps pp microbatches in flight, the
    last one; with v chunks each chunk holds its share of the stage's layers."""
    assert inflight_chunks(4, 1, 8, 0) == 4
    assert inflight_chunks(4, 1, 8, 3) == 1
    mem = stage_memory(0.0, 0.0, layer_act_bytes=10.0, inflight=4, v=1, workspace_bytes=0.0,
                       head_act_bytes=1.0, reserve_bytes=0.0)
    assert mem.activations == 41.0
    mem = stage_memory(0.0, 0.0, 10.0, inflight=6, v=2, workspace_bytes=0.0,
                       head_act_bytes=0.0, reserve_bytes=0.0)
    assert mem.activations == 30.0


# ---- stage terms ----------------------------------------------------------------------------
def test_lm_head_and_loss_time():
    """Forward: the final LayerNorm (4 B per element), the t x V x h GEMM, and half of the
    fp32 cross-entropy traffic (write, read logits, write and read the gradient: 16 B per
    logit); backward: the norm twice over, two GEMMs, the other half."""
    V = 32000
    c = head_cost(M, gpu(), net(), SHAPE, LayerStrategy())
    gemm = 2 * T * V * 1024 / PEAK
    norm, loss = 4 * T * 1024 / TB, 16 * T * V / TB
    assert c.fwd_s == pytest.approx(norm + gemm + loss / 2, rel=1e-9)
    assert c.bwd_s == pytest.approx(2 * norm + 2 * gemm + loss / 2, rel=1e-9)
    assert c.act_bytes == 2 * (2 * T * 1024)  # final-norm input and head input, bf16
    assert c.workspace_bytes == 4 * T * V  # fp32 logits


def test_head_tp_exchanges():
    """Vocab-parallel head at tp 2 without SP: one all-reduce of t x h, and the
    cross-entropy's max and sum-of-exp all-reduces of t fp32 values."""
    c = head_cost(M, gpu(), net(tp=2), LayerShape(2, 1, 1, T), LayerStrategy())
    assert c.tp_comm_s == pytest.approx((S_TH + 2 * 4 * T) / 100e9, rel=1e-9)


def test_pipeline_send_per_microbatch():
    """Each chunk sends its t x h / tp activation forward and receives the gradient back
    (Narayanan et al. 2021, Sec. 4.1 scatter/gather); one ring hop at 100 GB/s + 2 us."""
    levels = (ring(latency_us=2.0),)
    got = p2p_time_per_microbatch_s(M, LayerShape(2, 1, 1, T), 2, 4, (4,), levels)
    assert got == pytest.approx(2 * 2 * (S_TH / 2 / 100e9 + 2e-6), rel=1e-9)


def test_data_parallel_traffic_per_zero_stage():
    """1e9 parameters over 8 GPUs: fp32 gradients all-reduced (2 x 7/8 of 4 GB) under
    ZeRO 0; reduce-scattered (7/8 of 4 GB) and bf16 parameters all-gathered (7/8 of 2 GB)
    under ZeRO 1."""
    levels = (ring(),)
    z0 = dp_comm(1e9, 0, (8,), levels, 64)
    assert z0.grad_s == pytest.approx(2 * 7 / 8 * 4e9 / 100e9)
    z1 = dp_comm(1e9, 1, (8,), levels, 64)
    assert (z1.grad_s, z1.param_s) == pytest.approx((7 / 8 * 4e9 / 100e9, 7 / 8 * 2e9 / 100e9))


def test_collective_latency_counts_the_ring_steps():
    # ring all-reduce over 4: reduce-scatter then all-gather, 3 steps each, 5 us a step
    level = (ring(latency_us=5.0),)
    t = collective_time_s("allreduce", 1e6, (4,), level)
    assert t == pytest.approx(2 * 3 / 4 * 1e6 / 100e9 + 6 * 5e-6)


def test_adam_step_traffic_and_its_place_in_the_tail():
    """Adam on 8e9 parameters sharded over 8 (ZeRO 1): per parameter read the fp32
    gradient, master, m, v (16 B), write master, m, v (12 B) and the bf16 copy (2 B), and
    read the gradient again for the norm clip (4 B): 34 GB at 1 TB/s."""
    assert optimizer_step_s(gpu(), 8e9, 1, 8) == pytest.approx(34e9 / TB)
    assert optimizer_step_s(gpu(), 8e9, 0, 8) == pytest.approx(8 * 34e9 / TB)
    ov = Overlap(True, True, 0.0)
    tail = tail_time(0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 4, ov)
    assert tail.total_s == 0.5


def test_training_states_per_parameter():
    """Mixed-precision Adam with fp32 gradients (Megatron-LM): 2 B weights, 4 B gradients,
    12 B optimizer (master, m, v) per parameter; ZeRO 1/2/3 shard the optimizer, then the
    gradients, then the weights over dp."""
    P = 1e9
    s0 = state_bytes(P, 0, 8, "bf16")
    assert (s0.weights, s0.gradients, s0.optimizer) == (2 * P, 4 * P, 12 * P)
    s3 = state_bytes(P, 3, 8, "bf16")
    assert (s3.weights, s3.gradients, s3.optimizer) == (2 * P / 8, 4 * P / 8, 12 * P / 8)


def test_pipeline_bubble():
    """1F1B: (m + pp - 1) stage times (Narayanan et al. 2021, Sec. 2.2); interleaved with v
    chunks the bubble shrinks to (pp - 1) / v."""
    import numpy as np
    one = np.array([1.0])
    assert iteration_time_s(8, 4, 1, one, np.array([4]), np.array([0.0])) == pytest.approx(11.0)
    assert iteration_time_s(8, 4, 2, one, np.array([4]), np.array([0.0])) == pytest.approx(9.5)


# ---- mixture of experts ---------------------------------------------------------------------
def _moe(**kw):
    """h 64, 4 heads, SwiGLU, LayerNorm, learned positions, 4 experts of 128, top 2, no
    shared expert: every layer MoE."""
    spec = dict(num_experts=4, top_k=2, expert_ffn_hidden_size=128)
    spec.update(kw)
    return tiny_model(num_layers=2, hidden_size=64, num_attention_heads=4, num_kv_heads=4,
                      ffn_hidden_size=256, vocab_size=100, seq_len=32, global_batch_size=8,
                      position_embedding="learned", moe=spec)


def test_expert_all_to_all_dispatch_and_combine():
    """ep 2 on one ring: 64 tokens, top 2: 128 token copies of h 64 at 2 B = 16 KiB per
    all-to-all, half of it leaves the GPU; dispatch and combine, each way."""
    from planner.costmodel.moe import ep_comm
    n = Net(levels=(ring(),), tp_spans=(1,), cp_spans=(1,), ep_spans=(2,), etp_spans=(1,))
    shape = LayerShape(1, 1, 2, 32, ep=2, etp=1)
    one_way = ep_comm(_moe(), n, shape)
    assert one_way == pytest.approx(2 * (128 * 64 * 2 / 2) / 100e9, rel=1e-9)
    c = layer_cost(_moe(), gpu(), n, shape, LayerStrategy(layer_type="moe"))
    assert c.ep_comm_s == pytest.approx(2 * one_way, rel=1e-9)


def test_moe_elementwise_traffic_counts_router_and_permutation():
    """Beyond the dense layer's norms and residuals (20 B per t x h element): SwiGLU on
    128 copies x 128 (6 B), the fp32 router softmax/top-k over 4 experts of the 64 tokens
    (8 B per score), and the permutation of the 128 copies of h both ways (read + write
    2 B each way: 2 x 4 B)."""
    from planner.costmodel.moe import _elementwise_bytes
    t, h, copies = 64, 64, 128
    want = t * h * 20 + 6 * copies * 128 + 8 * t * 4 + 2 * 4 * copies * h
    assert _elementwise_bytes(_moe(), LayerShape(1, 1, 2, 32), LayerStrategy()) == want


# ---- serving --------------------------------------------------------------------------------
def test_decode_reads_the_kv_cache_at_hbm_speed():
    """64 sequences x 4096 cached tokens x K and V of 8 heads of 128 at 2 B = 1 GiB per
    layer; at 10 GB/s that outlasts the attention math (4 x 64 x 8 x 4096 x 128 FLOPs)."""
    from planner.costmodel.serve.step import decode_attention_s
    from planner.specs.serve import ServeEngine, ServePlan
    kv = 64 * 4096 * 2 * 8 * 128 * 2
    got = decode_attention_s(M, gpu(hbm_TBps=0.01), ServePlan(), 64, 4096)
    assert got == pytest.approx(kv / 1e10, rel=1e-9)


def test_decode_step_reads_the_lm_head_once_per_token():
    """One sequence: the LM head is a GEMV over V x h bf16 weights; 32,000 more vocabulary
    rows are 32000 x 1024 x 2 B more to read (the embedding lookup is one row)."""
    from planner.costmodel.serve.step import decode_step_s
    from planner.specs.cluster import ClusterSpec
    from planner.specs.serve import ServeEngine, ServePlan
    cl = ClusterSpec(name="one", gpu=gpu(), num_gpus=1, topology=[ring(size=1)])
    plan = ServePlan(concurrency=1)
    small = decode_step_s(M, cl, plan, 128, ServeEngine())
    big = decode_step_s(M.model_copy(update={"vocab_size": 64000}), cl, plan, 128, ServeEngine())
    assert big - small == pytest.approx(32000 * 1024 * 2 / TB, rel=1e-3)


def test_serving_layer_elementwise_and_tp_all_reduces():
    """Per token of a RoPE model: two norms and two residual adds (20 B per h element),
    RoPE on q and k (4 B each), GELU on the FFN (4 B); at tp 2 two all-reduces of the
    t x h activation (one ring buffer each, 2 (k-1)/k = 1) and their launch overheads."""
    from planner.costmodel.serve.step import _comm_s, _elementwise_s, replica_net
    from planner.specs.cluster import ClusterSpec
    from planner.specs.serve import ServeEngine, ServePlan
    rope = M.model_copy(update={"position_embedding": "rope"})
    m = 256
    bytes_ = m * (1024 * 20 + (1024 + 1024) * 4 + 4096 * 4)
    assert _elementwise_s(rope, gpu(), ServePlan(), m) == pytest.approx(bytes_ / TB)
    cl = ClusterSpec(name="two", gpu=gpu(), num_gpus=2, topology=[ring(size=2)])
    plan = ServePlan(tp=2)
    rn = replica_net(cl, plan, ServeEngine())
    got = _comm_s(rope, plan, rn, "dense", m)
    assert got - 2 * rn.overhead_s == pytest.approx(2 * m * 1024 * 2 / 100e9, rel=1e-9)


def test_small_gemm_dimensions_lose_efficiency():
    """The saturating curve the GPU spec documents: s(x) = x / (x + gemm_half_dim) per
    dimension; a 128-cube at half_dim 128 runs at 1/8 of the peak fraction, a dimension
    eight times the half_dim at 8/9."""
    from planner.costmodel.compute import gemm_efficiency
    g = gpu(half_dim=128)
    assert gemm_efficiency(g, "bf16", 128, 128, 128) == pytest.approx(1 / 8)
    assert gemm_efficiency(g, "bf16", 1024, 1024, 1024) == pytest.approx((8 / 9) ** 3)
