"""Roofline time of the kernels of one transformer layer on one GPU."""

from __future__ import annotations

import numpy as np

from planner.costmodel import constants as C
from planner.costmodel.constants import FLASH_BWD_FLOP_RATIO
from planner.specs.gpu import GPUSpec
from planner.specs.model import ModelSpec


def gemm_efficiency(gpu: GPUSpec, dtype: str, m: float, n: float, k: float) -> float:
    """Achieved fraction of peak for an (m x k) @ (k x n) GEMM.

    Saturating in each dimension, ``s(x) = x / (x + h)``: small dimensions under-fill the
    tensor-core tiles and waves, so no shape exceeds ``gemm_peak_fraction`` and shapes far
    below the calibration points lose efficiency instead of extrapolating. Below ``h`` the
    factor stays at 1/2: such GEMMs are bandwidth bound and the roofline in
    :func:`gemm_time_s` takes over (a GEMV reads its weights at HBM speed).
    """
    h = gpu.efficiency.gemm_half_dim

    def s(x: float) -> float:
        return x / (x + min(x, h)) if x > 0 else 0.0

    return gpu.gemm_peak_fraction(dtype) * s(m) * s(n) * s(k)


def gemm_time_s(gpu: GPUSpec, dtype: str, m: float, n: float, k: float,
                batch: float = 1.0, elem_bytes: float = 2.0) -> float:
    """Roofline time of ``batch`` GEMMs of shape (m, n, k): max of math and HBM time."""
    if m <= 0 or n <= 0 or k <= 0 or batch <= 0:
        return 0.0
    flops = 2.0 * m * n * k * batch
    t_math = flops / (gpu.peak_flops(dtype) * gemm_efficiency(gpu, dtype, m, n, k))
    t_mem = elementwise_time_s(gpu, (m * k + k * n + m * n) * elem_bytes * batch)
    return max(t_math, t_mem) + gpu.efficiency.kernel_overhead_us * 1e-6


def fp8_cast_bytes(dtype: str, inputs: float) -> float:
    """HBM traffic of casting ``inputs`` GEMM input elements to FP8 (none in bf16/fp16):
    a bandwidth-bound cost FP8 adds per GEMM, largest relative to the GEMM's FLOPs when
    the hidden size is small."""
    return C.FP8_CAST_BYTES * inputs if dtype == "fp8" else 0.0


def op_bytes(model: ModelSpec, fused: bool) -> tuple[float, float, float]:
    """Bytes per element of (a norm, the FFN activation, RoPE): fused kernels, or PyTorch
    eager (RMSNorm, SwiGLU and RoPE as several operators; LayerNorm and GELU are one native
    kernel either way)."""
    swiglu = model.ffn_type == "swiglu"
    if fused:
        return C.NORM_BYTES, C.SWIGLU_BYTES if swiglu else C.GELU_BYTES, C.ROPE_BYTES
    norm = C.EAGER_RMSNORM_BYTES if model.norm_type == "rmsnorm" else C.NORM_BYTES
    return norm, C.EAGER_SWIGLU_BYTES if swiglu else C.GELU_BYTES, C.EAGER_ROPE_BYTES


def elementwise_time_s(gpu: GPUSpec, nbytes: float) -> float:
    """Memory-bound kernel time at the achievable HBM bandwidth."""
    if nbytes <= 0:
        return 0.0
    return nbytes / (gpu.hbm_Bps * gpu.efficiency.hbm_fraction)


def flash_attention_time_s(gpu: GPUSpec, dtype: str, fwd_flops: float) -> tuple[float, float]:
    """(forward, backward) time of a FlashAttention kernel doing ``fwd_flops`` in forward."""
    if fwd_flops <= 0:
        return 0.0, 0.0
    peak = gpu.peak_flops("bf16" if dtype == "fp8" else dtype)
    eff = gpu.efficiency
    t_f = fwd_flops / (peak * eff.attention_fwd_fraction) + eff.kernel_overhead_us * 1e-6
    t_b = FLASH_BWD_FLOP_RATIO * fwd_flops / (peak * eff.attention_bwd_fraction)
    return t_f, t_b + eff.kernel_overhead_us * 1e-6


def exposed_s(comm_s, window_s, slowdown: float):
    """Communication overlapped with ``window_s`` of compute: the part that sticks out,
    plus the compute slowdown while both run (NCCL kernels take SMs and HBM bandwidth;
    ``slowdown`` is the fraction of the overlapped time lost). Works on numpy arrays."""
    if isinstance(comm_s, (int, float)) and isinstance(window_s, (int, float)):
        c = max(comm_s, 0.0)  # the scalar evaluator's path: no numpy overhead
        return max(0.0, c - window_s) + slowdown * min(c, window_s)
    comm_s = np.maximum(comm_s, 0.0)
    out = np.maximum(0.0, comm_s - window_s) + slowdown * np.minimum(comm_s, window_s)
    return float(out) if np.ndim(out) == 0 else out
