"""Hand-checked values for the cost model's formulas."""

from __future__ import annotations

import math

import pytest

from planner.costmodel import constants as C
from planner.costmodel.compute import elementwise_time_s, gemm_efficiency, gemm_time_s
from planner.costmodel.layer import (
    LayerShape,
    LayerStrategy,
    activation_bytes,
    dense_layer_params,
    model_flops_per_sequence,
    total_params,
)
from planner.costmodel.network import collective_time_s, level_traffic
from planner.costmodel.pipeline import chunk_sizes, inflight_chunks
from planner.costmodel.train.stage import state_bytes
from planner.specs.cluster import TopologyLevel
from planner.specs.loaders import load_gpu, load_model
from planner.specs.plan import Plan

MiB = 2**20


# ---- parameters ------------------------------------------------------------------------
def test_gpt3_parameter_count():
    m = load_model("gpt3-175b")
    h, L, V, s = 12288, 96, 51200, 2048
    # per layer: 12 h^2 weights + 13 h biases/norms (Narayanan et al. 2021, Sec. 5.1)
    assert dense_layer_params(m) == 12 * h * h + 13 * h
    assert total_params(m) == L * (12 * h * h + 13 * h) + V * h + s * h + 2 * h
    assert total_params(m) / 1e9 == pytest.approx(174.6, abs=0.05)


@pytest.mark.parametrize("name,billions", [
    ("llama2-7b", 6.74), ("llama2-13b", 13.02), ("llama2-70b", 68.98),
    ("llama3-8b", 8.03), ("llama3-70b", 70.55), ("llama3-405b", 405.85)])
def test_llama_parameter_counts(name, billions):
    # Published counts: Llama 2 (Touvron et al. 2023), Llama 3 (Dubey et al. 2024, HF cards).
    assert total_params(load_model(name)) / 1e9 == pytest.approx(billions, abs=0.01)


def test_tp_shards_gqa_with_replicated_kv():
    m = load_model("llama3-70b")  # 64 heads, 8 KV heads of 128
    h, f = 8192, 28672
    # tp=16 > 8 KV heads: each rank holds one KV head (replicated), 4 query heads.
    q_loc, kv_loc = 64 * 128 / 16, 128
    expected = h * (q_loc + 2 * kv_loc) + q_loc * h + 3 * h * f / 16 + 2 * h
    assert dense_layer_params(m, tp=16) == pytest.approx(expected)


# ---- FLOPs -------------------------------------------------------------------------------
def test_megatron_flops_formula():
    """72 B s L h^2 (1 + s/6h + V/12Lh) per batch (Narayanan et al. 2021, Eq. 3)."""
    m = load_model("gpt3-175b")
    s, h, L, V = 2048, 12288, 96, 51200
    expected = 72 * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h))
    assert model_flops_per_sequence(m, s) == pytest.approx(expected, rel=1e-12)


# ---- activation memory (Korthikanti et al. 2022, Table 2) -----------------------------
@pytest.fixture()
def gpt3():
    return load_model("gpt3-175b")


def test_activations_no_parallelism(gpt3):
    s, b, h, a = 2048, 1, 12288, 96
    shape = LayerShape(tp=1, cp=1, mbs=b, seq=s)
    strat = LayerStrategy(attention="standard")
    assert activation_bytes(gpt3, shape, strat) == s * b * h * (34 + 5 * a * s / h)


def test_activations_tensor_parallel(gpt3):
    s, b, h, a, t = 2048, 2, 12288, 96, 8
    shape = LayerShape(tp=t, cp=1, mbs=b, seq=s)
    none = activation_bytes(gpt3, shape, LayerStrategy(attention="standard"))
    assert none == pytest.approx(s * b * h * (10 + 24 / t + 5 * a * s / (h * t)))
    sp = LayerStrategy(attention="standard", sequence_parallel=True, tp_comm="rs_ag")
    assert activation_bytes(gpt3, shape, sp) == pytest.approx(s * b * h / t * (34 + 5 * a * s / h))
    sel = LayerStrategy(attention="standard", sequence_parallel=True, tp_comm="rs_ag",
                        recompute="selective")
    assert activation_bytes(gpt3, shape, sel) == pytest.approx(34 * s * b * h / t)
    full = LayerStrategy(attention="standard", recompute="full")
    assert activation_bytes(gpt3, shape, full) == pytest.approx(2 * s * b * h)


def test_flash_attention_stores_no_scores():
    m = load_model("llama3-8b")  # swiglu, GQA, no dropout
    s, b, h, f, t = 8192, 1, 4096, 14336, 1
    shape = LayerShape(tp=t, cp=1, mbs=b, seq=s)
    # norms+inputs 8sbh; Q 2sbh; K,V 2*2*s*b*1024; proj input 2sbh; FFN 3*2*s*b*f; LSE 4*a*s*b
    expected = 8 * s * h + 2 * s * h + 4 * s * 1024 + 2 * s * h + 6 * s * f + 4 * 32 * s
    assert activation_bytes(m, shape, LayerStrategy()) == expected


def test_cp_divides_activations():
    m = load_model("llama3-8b")
    one = activation_bytes(m, LayerShape(1, 1, 1, 8192), LayerStrategy())
    four = activation_bytes(m, LayerShape(1, 4, 1, 8192), LayerStrategy())
    assert four == pytest.approx(one / 4)


def test_interleaved_inflight_matches_korthikanti_factor():
    # First stage holds L (1 + (p-1)/(p v)) layers of activations: pv + p - 1 chunks.
    for p, v in ((8, 3), (35, 3), (4, 2)):
        assert inflight_chunks(p, v, m=10_000, rank=0) == p * v + p - 1
    assert inflight_chunks(8, 1, m=64, rank=0) == 8
    assert inflight_chunks(8, 1, m=64, rank=7) == 1
    assert inflight_chunks(8, 1, m=3, rank=0) == 3


def test_uneven_pipeline_split():
    assert chunk_sizes(96, 24, uneven=False) == [4] * 24
    assert chunk_sizes(126, 16, uneven=False) is None
    # Llama 3 405B: 126 layers on 16 stages, the first and the last get 7.
    assert chunk_sizes(126, 16, uneven=True) == [7] + [8] * 14 + [7]
    assert sum(chunk_sizes(100, 64, uneven=True)) == 100


def test_llama3_end_chunks_hold_only_the_embedding_and_the_loss():
    """Llama 3 405B (Dubey et al. 2024, Sec. 3.3.2): one layer fewer on the first and the last
    stage, so that "the first model chunk on the first stage has only the embedding, and the
    last model chunk on the last stage has only output projection and loss": 126 layers in
    16 x 8 one-layer chunks, the two end chunks empty; never more than two, never even."""
    sizes = chunk_sizes(126, 128, uneven=True)
    assert sizes == [0] + [1] * 126 + [0]
    assert chunk_sizes(126, 127, uneven=True) == [0] + [1] * 126
    assert chunk_sizes(126, 129, uneven=True) is None
    assert chunk_sizes(126, 128, uneven=False) is None
    from planner.costmodel.pipeline import stage_layout
    m = load_model("llama3-405b")
    stages = stage_layout(m, 16, 8, 32, uneven=True)
    assert [s.num_layers for s in stages] == [7] + [8] * 14 + [7]
    assert stages[0].embedding and stages[-1].head
    from planner.export.megatron import layout_string
    assert layout_string(sizes) == "E|(t*1|)*126L"
    # and --from megatron reads it back as the same split
    from planner.export.megatron import _layout_chunks
    assert _layout_chunks("E|(t*1|)*126L", 16, 126) == sizes


# ---- optimizer states ----------------------------------------------------------------------
def test_mixed_precision_adam_bytes():
    st = state_bytes(1e9, zero=0, dp_cp=8, numerics="bf16")
    assert (st.weights, st.gradients, st.optimizer) == (2e9, 4e9, 12e9)
    st = state_bytes(1e9, zero=1, dp_cp=8, numerics="bf16")  # Megatron: 6 + 12/d bytes
    assert st.weights + st.gradients + st.optimizer == pytest.approx(6e9 + 12e9 / 8)
    st = state_bytes(1e9, zero=3, dp_cp=8, numerics="bf16")
    assert st.weights + st.gradients + st.optimizer == pytest.approx(18e9 / 8)


def test_fp8_parameters_and_bf16_gradients_change_bytes_not_flops():
    """NVIDIA's FP8 recipes: FP8 weights (1 B) beside the fp32 master, bf16 main gradients
    (2 B), FP8 parameter all-gather (1 B) and bf16 gradient reduce-scatter (2 B)."""
    from planner.costmodel.numerics import Numerics
    from planner.costmodel.train.stage import dp_comm

    fp8 = Numerics("fp8")  # TE keeps a bf16 weight and an FP8 cache
    assert state_bytes(1e9, 0, 8, fp8).weights == 3e9
    nemo = Numerics("fp8", fp8_params=True, grad_reduce_dtype="bf16")
    st = state_bytes(1e9, 1, 8, nemo)
    assert (st.weights, st.gradients, st.optimizer) == (1e9, 2e9, 12e9 / 8)
    levels = (TopologyLevel(name="ib", size=8, bandwidth_GBps=50),)
    full = dp_comm(1e9, 1, (8,), levels, 1, Numerics("bf16"))
    half = dp_comm(1e9, 1, (8,), levels, 1, nemo)
    assert half.grad_s == pytest.approx(full.grad_s / 2, rel=1e-3)  # 2 B instead of 4 B
    assert half.param_s == pytest.approx(full.param_s / 2, rel=1e-3)  # 1 B instead of 2 B
    with pytest.raises(ValueError, match="fp8_params=true needs dtype=fp8"):
        Plan(global_batch_size=8, seq_len=128, fp8_params=True)


# ---- collectives --------------------------------------------------------------------------
def _astra_levels(bws):
    kinds = ("ring", "fully_connected", "ring", "switch")
    return [TopologyLevel(name=f"d{i}", kind=k, size=1, bandwidth_GBps=bw * 2**30 / 1e9,
                          latency_us=0.0) for i, (k, bw) in enumerate(zip(kinds, bws))]


#: ASTRA-sim 2.0 Table III (Won et al. 2023): dims, per-dimension MiB, completion time in us.
ASTRA_TABLE3 = [
    ((2, 8, 8, 4), (1024, 896, 112, 12), 4392.85),
    ((2, 8, 8, 8), (1024, 896, 112, 14), 4392.85),
    ((2, 8, 8, 16), (1024, 896, 112, 15), 4392.85),
    ((2, 8, 8, 32), (1024, 896, 112, 15.5), 4392.85),
    ((4, 8, 8, 4), (1536, 448, 56, 6), 2212.60),
    ((8, 8, 8, 4), (1792, 224, 28, 3), 1753.48),
    ((16, 8, 8, 4), (1920, 112, 14, 1.5), 1879.17),
]


@pytest.mark.parametrize("dims,sizes_mib,paper_us", ASTRA_TABLE3)
def test_astra_sim_table3(dims, sizes_mib, paper_us):
    """ASTRA-sim 2.0 Table III: 1 GiB all-reduce on Ring_FC_Ring_Switch at 1000/200/100/50
    GB/s (GB = 2^30 B): per-dimension bytes exactly, time within 2%."""
    levels = _astra_levels((1000, 200, 100, 50))
    traffic = level_traffic("allreduce", 1024 * MiB, dims, levels)
    assert [b / MiB for b, _ in traffic] == pytest.approx(list(sizes_mib), rel=1e-12)
    t_us = collective_time_s("allreduce", 1024 * MiB, dims, levels, chunks=64) * 1e6
    assert t_us == pytest.approx(paper_us, rel=0.02)


def test_ring_allreduce_single_level():
    lv = [TopologyLevel(name="nv", kind="ring", size=8, bandwidth_GBps=100, latency_us=1)]
    # 2 (n-1)/n V / B + 2 (n-1) alpha
    expected = 2 * 7 / 8 * 1e9 / 100e9 + 2 * 7 * 1e-6
    assert collective_time_s("allreduce", 1e9, (8,), lv) == pytest.approx(expected)
    ag = collective_time_s("all_gather", 1e9, (8,), lv)
    assert ag == pytest.approx(7 / 8 * 1e9 / 100e9 + 7e-6)


def test_hierarchical_collective_uses_all_nics():
    """A group with 8 members per node leaves the node on 8 NICs: the outer level carries
    V/8 per GPU (the LBNL model's n_NIC rings)."""
    levels = [TopologyLevel(name="nv", size=8, bandwidth_GBps=400, latency_us=0),
              TopologyLevel(name="ib", size=4, bandwidth_GBps=50, latency_us=0)]
    V = 8e9
    wide = collective_time_s("reduce_scatter", V, (8, 4), levels, chunks=10**9)
    narrow = collective_time_s("reduce_scatter", V, (1, 4), levels, chunks=10**9)
    assert wide == pytest.approx(max(7 / 8 * V / 400e9, 3 / 4 * V / 8 / 50e9))
    assert narrow == pytest.approx(3 / 4 * V / 50e9)


# ---- compute ------------------------------------------------------------------------------
def test_gemm_roofline():
    """The fitted-curve roofline (GPUs without a kernel table; the table's GEMMs are
    tests/test_kernel_costs.py's)."""
    gpu = load_gpu("h100").model_copy(update={"kernel_table": None})
    eff = gpu.efficiency
    m = n = k = 8192
    sat = (m / (m + eff.gemm_half_dim)) ** 3
    assert gemm_efficiency(gpu, "bf16", m, n, k) == pytest.approx(eff.gemm_peak_fraction * sat)
    expected = 2 * m * n * k / (989.4e12 * eff.gemm_peak_fraction * sat) + eff.kernel_overhead_us * 1e-6
    assert gemm_time_s(gpu, "bf16", m, n, k) == pytest.approx(expected)
    # A skinny GEMM is memory bound.
    t = gemm_time_s(gpu, "bf16", 1, 8192, 8192)
    assert t == pytest.approx(elementwise_time_s(gpu, 2 * (8192 + 8192 * 8192 + 8192))
                              + eff.kernel_overhead_us * 1e-6)


def test_constants_are_what_the_docs_say():
    assert C.GRAD_BYTES + C.OPTIMIZER_BYTES + C.WEIGHT_BYTES == 18  # Megatron's 18 B/param
    assert math.isclose(C.FLASH_BWD_FLOP_RATIO, 2.5)
