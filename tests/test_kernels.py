"""The measured kernel tables (hardware_catalog/kernels/, written by tools/microbench.py) and
their interpolation (planner.costmodel.kernels)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from planner.costmodel.kernels import attention_tflops, copy_GBps, gemm_tflops
from planner.specs.kernels import kernel_table

GPUS = ("h100-sxm", "h200")
SHARED = Path(__file__).resolve().parents[2] / "shared" / "calibration" / \
    "hopper_microbench_2026-11.yaml"


@pytest.mark.parametrize("gpu", GPUS)
def test_every_hopper_gpu_has_a_full_table(gpu):
    t = kernel_table(gpu)
    assert t is not None and t.gpu == gpu
    assert {r.dtype for r in t.gemm} == {"bf16", "fp8"}
    assert {r.backend for r in t.attention} == {"FLASH_ATTENTION", "CUDNN_ATTENTION"}
    assert t.memory and t.decode_gemm and t.decode_attention
    assert kernel_table("no-such-gpu") is None  # not measured: the caller falls back


@pytest.mark.parametrize("gpu", GPUS)
def test_interpolation_returns_the_measurement_at_every_measured_shape(gpu):
    """On and off the grid, every measured shape returns its measurement; where a reference
    run measured it too (merged by tools/merge_kernel_reference.py), the reference's."""
    t = kernel_table(gpu)
    ref_gemm = {(r.m, r.n, r.k, r.dtype): r.tflops for r in t.gemm if r.ref}
    for r in t.gemm:
        want = ref_gemm.get((r.m, r.n, r.k, r.dtype), r.tflops)
        assert gemm_tflops(t, r.dtype, r.m, r.n, r.k) == pytest.approx(want, rel=1e-12), r
    ref_attn = {(r.backend, r.seq, r.heads, r.kv_heads, r.head_dim, r.causal):
                (r.fwd_tflops, r.bwd_tflops) for r in t.attention if r.ref}
    for r in t.attention:
        case = [x for x in t.attention if x.backend == r.backend and x.head_dim == r.head_dim
                and x.causal == r.causal and (x.kv_heads < x.heads) == (r.kv_heads < r.heads)
                and x.ref == r.ref]
        assert len({x.seq for x in case}) == len(case)  # one row per length in a case and run
        want = ref_attn.get((r.backend, r.seq, r.heads, r.kv_heads, r.head_dim, r.causal),
                            (r.fwd_tflops, r.bwd_tflops))
        fwd, bwd = attention_tflops(t, r.backend, r.seq, r.head_dim, r.causal,
                                    r.kv_heads < r.heads)
        assert (fwd, bwd) == pytest.approx(want, rel=1e-12)


def test_a_shape_measured_off_the_grid_corrects_its_neighbourhood_only():
    """(8192, 6144, 4096) was measured off the grid (n = 6144): it returns its measurement,
    its correction fades with distance, and shapes more than an octave away keep the grid's
    interpolation."""
    from planner.costmodel.kernels import OFF_GRID_REACH, _gemm_grid, _grid_tflops

    t = kernel_table("h100-sxm")
    grid = _gemm_grid(t, "bf16")
    at = gemm_tflops(t, "bf16", 8192, 6144, 4096)
    row = [r.tflops for r in t.gemm if (r.m, r.n, r.k, r.dtype) == (8192, 6144, 4096, "bf16")]
    assert at == pytest.approx(row[-1], rel=1e-12)
    assert abs(at / _grid_tflops(grid, 8192, 6144, 4096) - 1) > 0.01  # it does correct
    far = 2 ** (OFF_GRID_REACH + 0.5)
    assert gemm_tflops(t, "bf16", 8192 * far, 6144, 4096) == pytest.approx(
        _grid_tflops(grid, 8192 * far, 6144, 4096), rel=1e-12)


def test_gemm_interpolates_in_log_shape_between_neighbours():
    t = kernel_table("h100-sxm")
    row = {(r.m, r.n, r.k): r.tflops for r in t.gemm if r.dtype == "bf16"}
    a, b = row[(4096, 8192, 4096)], row[(4096, 8192, 8192)]
    mid = gemm_tflops(t, "bf16", 4096, 8192, math.sqrt(4096 * 8192))  # halfway in log2
    assert mid == pytest.approx((a + b) / 2, rel=1e-12)
    quarter = gemm_tflops(t, "bf16", 4096, 8192, 4096 * 2 ** 0.25)
    assert quarter == pytest.approx(0.75 * a + 0.25 * b, rel=1e-12)


def test_gemm_below_the_grid_and_above_it():
    t = kernel_table("h100-sxm")
    row = {(r.m, r.n, r.k): r.tflops for r in t.gemm if r.dtype == "bf16"}
    # half the smallest N: the same time, so half the throughput; below the smallest M the
    # math runs at the smallest M's rate (the memory side is the decode GEMMs': below)
    assert gemm_tflops(t, "bf16", 8192, 256, 8192) == pytest.approx(row[(8192, 512, 8192)] / 2)
    assert gemm_tflops(t, "bf16", 16, 8192, 8192) == pytest.approx(row[(256, 8192, 8192)])
    assert gemm_tflops(t, "bf16", 65536, 28672, 28672) == pytest.approx(
        row[(32768, 28672, 28672)])
    assert gemm_tflops(t, "bf16", 0, 1, 1) is None


def test_small_m_gemms_stream_their_weights_at_the_measured_decode_speed():
    """Below the grid's smallest M a GEMM is costed at the smallest M's math rate and the
    weight-streaming speed of the measured decode GEMMs (their median over M, so the step
    stays affine in the batch): at the measured decode shapes the cost model's time is the
    weights at that rate, and within the rows' own scatter of every measured time."""
    import statistics
    from planner.costmodel.compute import gemm_time_s
    from planner.specs.loaders import load_gpu

    gpu = load_gpu("h100-sxm")
    gpu = gpu.model_copy(update={"efficiency": gpu.efficiency.model_copy(
        update={"kernel_overhead_us": 0.0})})
    t = kernel_table("h100-sxm")
    for r in t.decode_gemm:
        if r.dtype == "bf16" and r.m <= 64:
            rate = statistics.median(x.weight_GBps for x in t.decode_gemm if x.m < 256 and
                                     (x.n, x.k, x.dtype) == (r.n, r.k, "bf16"))
            got = gemm_time_s(gpu, "bf16", r.m, r.n, r.k)
            assert got == pytest.approx(r.n * r.k * 2 / (rate * 1e9), rel=1e-9), r
            assert got == pytest.approx(r.us * 1e-6, rel=0.3), r
    bare = gpu.model_copy(update={"kernel_table": None})
    # (1, 6144, 4096) streamed 2.25 TB/s, not the 2.9 TB/s of a copy or the fitted HBM share
    assert gemm_time_s(bare, "bf16", 1, 6144, 4096) < 0.85 * gemm_time_s(gpu, "bf16", 1, 6144, 4096)


def test_attention_takes_the_nearest_measured_case():
    t = kernel_table("h100-sxm")
    hd64 = {r.seq: r.fwd_tflops for r in t.attention
            if r.backend == "FLASH_ATTENTION" and r.head_dim == 64}
    assert attention_tflops(t, "FLASH_ATTENTION", 8192, 80)[0] == pytest.approx(hd64[8192])
    mha = {r.seq: r.fwd_tflops for r in t.attention if r.backend == "CUDNN_ATTENTION"
           and r.head_dim == 128 and r.causal and r.kv_heads == r.heads}
    gqa = {r.seq: r.fwd_tflops for r in t.attention if r.backend == "CUDNN_ATTENTION"
           and r.head_dim == 128 and r.kv_heads < r.heads}
    assert mha[8192] != gqa[8192]
    assert attention_tflops(t, "CUDNN_ATTENTION", 8192, 128)[0] == pytest.approx(mha[8192])
    assert attention_tflops(t, "CUDNN_ATTENTION", 8192, 128, grouped=True)[0] == \
        pytest.approx(gqa[8192])
    # beyond the longest measured length the throughput holds
    assert attention_tflops(t, "CUDNN_ATTENTION", 1 << 20, 128)[0] == pytest.approx(mha[131072])


@pytest.mark.skipif(not SHARED.exists(), reason="the shared calibration folder is absent")
@pytest.mark.parametrize("gpu", GPUS)
def test_tables_agree_with_an_independent_run(gpu):
    """The shared Hopper file was measured on other H100/H200 machines with its own script.
    Two runs of the same kernels differ by clocks and power state (sustained back-to-back
    GEMMs run ~10 % below short bursts), not by more: a table whose columns, units or GPU
    were mixed up differs by far more (H200 copies 40 % faster than H100, cuDNN attention
    runs 1.8x FlashAttention-2, fp8 GEMMs 1.7x bf16)."""
    ref = yaml.safe_load(SHARED.read_text())
    full = kernel_table(gpu)
    assert any(r.ref for r in full.gemm)  # merged by tools/merge_kernel_reference.py
    # the table's own run alone (the reference rows merged in are what it is compared with)
    t = full.model_copy(update={k: [r for r in getattr(full, k) if r.ref is None]
                                for k in ("gemm", "attention", "memory")})
    ratios = [gemm_tflops(t, r["dtype"], r["m"], r["n"], r["k"]) / r["tflops"]
              for r in ref["gemm"][gpu] if min(r["m"], r["n"], r["k"]) >= 4096]
    assert len(ratios) >= 10 and all(0.8 <= x <= 1.25 for x in ratios), ratios
    for r in ref["attention"].get(gpu, []):
        fwd, bwd = attention_tflops(t, r["backend"], r["seq"], r["head_dim"], r["causal"])
        assert fwd / r["fwd_tflops"] == pytest.approx(1, abs=0.15)
        assert bwd / r["bwd_tflops"] == pytest.approx(1, abs=0.15)
    copy = ref["copy"][gpu]
    assert copy_GBps(t, copy["bytes"]) / copy["read_plus_write_GBps"] == pytest.approx(1, abs=0.07)
