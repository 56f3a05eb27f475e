"""Roofline time of the kernels of one transformer layer on one GPU."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from planner.costmodel import constants as C
from planner.costmodel import kernels as K
from planner.costmodel.constants import FLASH_BWD_FLOP_RATIO
from planner.specs.gpu import GPUSpec
from planner.specs.kernels import kernel_table
from planner.specs.model import ModelSpec
from planner.specs.loaders import load_gpu

#: the kernel table's name for each attention backend a GPU efficiency may name
#: (flash3 was not measured: it falls back to the fitted fractions)
TABLE_BACKENDS = {"cudnn": "CUDNN_ATTENTION", "flash2": "FLASH_ATTENTION"}
#: the table's GEMM dtypes a plan dtype runs at, first found wins: fp16 and bf16 share the
#: tensor-core rate (H100 datasheet: 989.4 dense TFLOP/s each; A100 datasheet: 312 each),
#: so a table measured in one of them times the other
TABLE_GEMM_DTYPES = {"bf16": ("bf16", "fp16"), "fp16": ("fp16", "bf16"), "fp8": ("fp8",)}


@lru_cache(maxsize=None)
def _table_dtype(table: str | None, dtype: str) -> str | None:
    """The dtype of kernel table ``table``'s GEMM rows a plan GEMM in ``dtype`` is timed
    with; None without a table or such rows."""
    t = kernel_table(table) if table else None
    have = set() if t is None else {r.dtype for r in t.gemm}
    return next((d for d in TABLE_GEMM_DTYPES.get(dtype, ()) if d in have), None)


@lru_cache(maxsize=None)
def _table_gpu(table: str) -> GPUSpec:
    """The catalog GPU a kernel table was measured on (its peaks and bandwidth)."""
    return load_gpu(kernel_table(table).gpu)


def flops_scale(gpu: GPUSpec, dtype: str) -> float:
    """``gpu``'s peak over the peak of the GPU its kernel table was measured on: a GPU that
    differs from the measured one only in peak (a what-if sweep, a clock variant) runs the
    measured kernels at the same fraction of its own peak."""
    return gpu.peak_flops(dtype) / _table_gpu(gpu.kernel_table).peak_flops(dtype)


def bandwidth_scale(gpu: GPUSpec) -> float:
    """``gpu``'s HBM bandwidth over that of the GPU its kernel table was measured on."""
    return gpu.hbm_Bps / _table_gpu(gpu.kernel_table).hbm_Bps


@lru_cache(maxsize=1 << 16)
def measured_gemm_tflops(table: str | None, dtype: str, m: float, n: float, k: float
                         ) -> float | None:
    """Microbenchmarked throughput (TFLOP/s) of an (m x k) @ (k x n) GEMM on the GPU whose
    kernel table is ``table``; None without a table or a measured ``dtype``."""
    dt = _table_dtype(table, dtype)
    return None if dt is None else K.gemm_tflops(kernel_table(table), dt, m, n, k)


def measured_decode_GBps(table: str | None, dtype: str, m: float, n: float, k: float
                         ) -> float | None:
    """Weight-streaming speed (GB/s) of a GEMM with M below the table's grid, from the
    measured decode-step GEMMs; None for larger M, without a table or a measured dtype."""
    dt = _table_dtype(table, dtype)
    if dt is None or not K.small_m(kernel_table(table), dt, m):
        return None
    return _decode_GBps(table, dt, n, k)


@lru_cache(maxsize=1 << 14)
def _decode_GBps(table: str, dtype: str, n: float, k: float) -> float | None:
    return K.decode_weight_GBps(kernel_table(table), dtype, n, k)


@lru_cache(maxsize=1 << 14)
def measured_attention_tflops(table: str | None, backend: str, seq: float, head_dim: int,
                              grouped: bool) -> tuple[float, float | None] | None:
    """Microbenchmarked (forward, backward) causal fused-attention throughput (TFLOP/s);
    None without a table or a measured ``backend``; the backward None where only the
    forward was published."""
    t = kernel_table(table) if table else None
    name = TABLE_BACKENDS.get(backend)
    if t is None or name is None:
        return None
    if name == "CUDNN_ATTENTION" and not any(r.backend == name for r in t.attention):
        # Transformer Engine prefers cuDNN fused attention over FlashAttention only on
        # Hopper and later (transformer_engine/pytorch/attention/dot_product_attention/
        # utils.py get_attention_backend: "give FusedAttention preference on Hopper+"); a
        # table without cuDNN rows is a pre-Hopper GPU's, where TE runs FlashAttention-2
        name = "FLASH_ATTENTION"
    return K.attention_tflops(t, name, seq, head_dim, causal=True, grouped=grouped)


@lru_cache(maxsize=None)
def measured_copy_GBps(table: str | None) -> float | None:
    """Sustained device-copy bandwidth (bytes read plus written per second, GB/s): the
    table's largest measured copy. One rate, so that memory-bound time stays linear in
    bytes (the formulations tabulate it as a slope); launch cost is ``kernel_overhead_us``."""
    t = kernel_table(table) if table else None
    sizes = [] if t is None else [r.bytes for r in t.memory if r.op == "copy"]
    return None if not sizes else K.copy_GBps(t, float(max(sizes)))


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


@lru_cache(maxsize=1 << 17)  # pure; a search costs the same GEMM under many strategies
def gemm_time_s(gpu: GPUSpec, dtype: str, m: float, n: float, k: float,
                batch: float = 1.0, elem_bytes: float = 2.0) -> float:
    """Roofline time of ``batch`` GEMMs of shape (m, n, k): max of math and HBM time.

    The math time comes from the GPU's kernel table where it has one (``batch`` GEMMs run
    as one grouped GEMM of ``batch * m`` rows, as grouped and batched cuBLAS kernels tile
    them), scaled by the framework's ``kernel_fraction``; otherwise from the fitted curve.
    """
    if m <= 0 or n <= 0 or k <= 0 or batch <= 0:
        return 0.0
    flops = 2.0 * m * n * k * batch
    tflops = measured_gemm_tflops(gpu.kernel_table, dtype, m * batch, n, k)
    if tflops is not None:
        t_math = flops / (tflops * 1e12 * gpu.efficiency.kernel_fraction
                          * flops_scale(gpu, dtype))
    else:
        t_math = flops / (gpu.peak_flops(dtype) * gemm_efficiency(gpu, dtype, m, n, k))
    t_mem = elementwise_time_s(gpu, (m * k + k * n + m * n) * elem_bytes * batch)
    gemv_GBps = measured_decode_GBps(gpu.kernel_table, dtype, m, n, k)
    if gemv_GBps is not None:  # a decode GEMM streams its weights at the measured GEMV speed
        t_mem = max(t_mem, k * n * elem_bytes * batch / (gemv_GBps * 1e9 * bandwidth_scale(gpu)))
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
    """Memory-bound kernel time: at the kernel table's sustained copy bandwidth where the
    GPU has a table, else at ``hbm_fraction`` of HBM."""
    if nbytes <= 0:
        return 0.0
    gbps = measured_copy_GBps(gpu.kernel_table)
    if gbps is not None:
        return nbytes / (gbps * 1e9 * bandwidth_scale(gpu))
    return nbytes / (gpu.hbm_Bps * gpu.efficiency.hbm_fraction)


def flash_attention_time_s(gpu: GPUSpec, dtype: str, fwd_flops: float,
                           seq: float | None = None, head_dim: int = 128,
                           grouped: bool = False) -> tuple[float, float]:
    """(forward, backward) time of a fused causal attention kernel doing ``fwd_flops`` in
    forward, over query blocks of ``seq`` tokens. Attention runs in bf16 under FP8 training
    (Transformer Engine's FP8 attention is off by default). With a kernel table and a
    sequence length, the speed of the GPU efficiency's ``attention_backend`` measured at
    that length and head dimension (scaled by ``kernel_fraction``); otherwise the fitted
    fractions of peak."""
    if fwd_flops <= 0:
        return 0.0, 0.0
    eff = gpu.efficiency
    rates = None if seq is None else measured_attention_tflops(
        gpu.kernel_table, eff.attention_backend, float(seq), int(head_dim), bool(grouped))
    peak = gpu.peak_flops("bf16" if dtype == "fp8" else dtype)
    fwd_Fps, bwd_Fps = peak * eff.attention_fwd_fraction, peak * eff.attention_bwd_fraction
    if rates is not None:
        scale = eff.kernel_fraction * flops_scale(gpu, "bf16")
        fwd_Fps = rates[0] * 1e12 * scale
        if rates[1] is not None:  # else only the forward was published: the fraction stands
            bwd_Fps = rates[1] * 1e12 * scale
    t_f = fwd_flops / fwd_Fps + eff.kernel_overhead_us * 1e-6
    t_b = FLASH_BWD_FLOP_RATIO * fwd_flops / bwd_Fps
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
