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
    assert kernel_table("a100-sxm-80gb") is None  # not measured: the caller falls back


@pytest.mark.parametrize("gpu", GPUS)
def test_interpolation_returns_the_measurement_at_every_grid_point(gpu):
    t = kernel_table(gpu)
    for r in t.gemm:
        got = gemm_tflops(t, r.dtype, r.m, r.n, r.k)
        if r.m in (256, 512, 1024, 2048, 4096, 8192, 16384, 32768) and \
                {r.n, r.k} <= {512, 1024, 2048, 4096, 8192, 16384, 28672}:
            assert got == pytest.approx(r.tflops, rel=1e-12), r
    for r in t.attention:
        case = [x for x in t.attention if x.backend == r.backend and x.head_dim == r.head_dim
                and x.causal == r.causal and (x.kv_heads < x.heads) == (r.kv_heads < r.heads)]
        assert len({x.seq for x in case}) == len(case)  # one row per length in a case
        fwd, bwd = attention_tflops(t, r.backend, r.seq, r.head_dim, r.causal,
                                    r.kv_heads < r.heads)
        assert (fwd, bwd) == pytest.approx((r.fwd_tflops, r.bwd_tflops), rel=1e-12)


def test_gemm_interpolates_in_log_shape_between_neighbours():
    t = kernel_table("h100-sxm")
    row = {(r.m, r.n, r.k): r.tflops for r in t.gemm if r.dtype == "bf16"}
    a, b = row[(4096, 8192, 4096)], row[(4096, 8192, 8192)]
    mid = gemm_tflops(t, "bf16", 4096, 8192, math.sqrt(4096 * 8192))  # halfway in log2
    assert mid == pytest.approx((a + b) / 2, rel=1e-12)
    quarter = gemm_tflops(t, "bf16", 4096, 8192, 4096 * 2 ** 0.25)
    assert quarter == pytest.approx(0.75 * a + 0.25 * b, rel=1e-12)


def test_gemm_below_the_grid_keeps_the_smallest_shapes_time_and_above_it_saturates():
    t = kernel_table("h100-sxm")
    row = {(r.m, r.n, r.k): r.tflops for r in t.gemm if r.dtype == "bf16"}
    # half the smallest M: the same time, so half the throughput
    assert gemm_tflops(t, "bf16", 128, 8192, 8192) == pytest.approx(row[(256, 8192, 8192)] / 2)
    assert gemm_tflops(t, "bf16", 65536, 28672, 28672) == pytest.approx(
        row[(32768, 28672, 28672)])
    assert gemm_tflops(t, "bf16", 0, 1, 1) is None


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
    t = kernel_table(gpu)
    ratios = [gemm_tflops(t, r["dtype"], r["m"], r["n"], r["k"]) / r["tflops"]
              for r in ref["gemm"][gpu] if min(r["m"], r["n"], r["k"]) >= 4096]
    assert len(ratios) >= 10 and all(0.8 <= x <= 1.25 for x in ratios), ratios
    for r in ref["attention"].get(gpu, []):
        fwd, bwd = attention_tflops(t, r["backend"], r["seq"], r["head_dim"], r["causal"])
        assert fwd / r["fwd_tflops"] == pytest.approx(1, abs=0.15)
        assert bwd / r["bwd_tflops"] == pytest.approx(1, abs=0.15)
    copy = ref["copy"][gpu]
    assert copy_GBps(t, copy["bytes"]) / copy["read_plus_write_GBps"] == pytest.approx(1, abs=0.07)
