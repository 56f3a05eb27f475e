"""A GPU's measured kernel table: GEMM throughput by shape and dtype, fused attention by
backend and shape, memory bandwidth by size and operator, and the kernels of a serving
decode step. Written by ``tools/microbench.py`` on the GPU it describes and shipped as
``hardware_catalog/kernels/<gpu>.yaml``, or transcribed from published microbenchmarks
for a GPU this project could not run (each row then names its ``source``); the cost model
reads kernel speeds from it (``planner.costmodel.kernels``)."""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import Field, PositiveFloat, PositiveInt

import planner.catalog as catalog
from planner.specs.base import Spec, notes_field
from planner.specs.validate import validate
from planner.specs.loaders import read_structured


class Row(Spec):
    """A measured row; ``ref`` names the reference run it was merged from."""

    ref: str | None = Field(None, description="the reference measurement the row was merged "
                            "from (tools/merge_kernel_reference.py); None: this table's own run")
    source: str | None = Field(None, description="the publication a transcribed row comes from "
                               "(paper + table/figure, or repository + file + commit); None: "
                               "measured by tools/microbench.py")
    gpu: str | None = Field(None, description="the catalog GPU a transcribed row was measured "
                            "on where it is not the table's (the same die at another clock or "
                            "power limit, e.g. a GB200 row in the B200 table): the cost model "
                            "reads it at the same fraction of that GPU's datasheet peak (HBM "
                            "bandwidth for copies); None: the table's GPU")


class GemmRow(Row):
    """One (m x k) @ (k x n) product timed alone."""

    m: PositiveInt = Field(..., description="rows of the output (tokens)")
    n: PositiveInt = Field(..., description="columns of the output")
    k: PositiveInt = Field(..., description="the reduced dimension")
    dtype: Literal["bf16", "fp16", "fp8"] = Field(
        ..., description="input precision (fp16: a published figure measured in fp16; bf16 "
        "and fp16 share the tensor-core rate on Ampere and Hopper, datasheets)")
    us: PositiveFloat | None = Field(None, description="mean time per GEMM, microseconds "
                                     "(None: the publication gives only the throughput)")
    tflops: PositiveFloat = Field(..., description="2mnk / time, TFLOP/s")


class AttentionRow(Row):
    """One fused-attention call (forward, then forward and backward) with one backend."""

    backend: Literal["FLASH_ATTENTION", "CUDNN_ATTENTION"] = Field(
        ..., description="PyTorch SDPA backend: FlashAttention-2, or cuDNN's fused attention "
        "(the kernel Transformer Engine uses on Hopper)")
    seq: PositiveInt = Field(..., description="sequence length, tokens")
    heads: PositiveInt = Field(..., description="query heads")
    kv_heads: PositiveInt = Field(..., description="key/value heads")
    batch: PositiveInt = Field(..., description="sequences per call")
    head_dim: PositiveInt = Field(..., description="dimension per head")
    causal: bool = Field(..., description="causal mask (half the score FLOPs)")
    fwd_us: PositiveFloat = Field(..., description="forward time, microseconds")
    bwd_us: PositiveFloat | None = Field(None, description="backward time, microseconds (None: "
                                         "not published)")
    fwd_tflops: PositiveFloat = Field(..., description="forward TFLOP/s (causal FLOPs halved)")
    bwd_tflops: PositiveFloat | None = Field(
        None, description="backward TFLOP/s (2.5x the forward's FLOPs); None: not published "
        "(the cost model then times the backward with the GPU's attention_bwd_fraction)")


class MemoryRow(Row):
    """A bandwidth-bound operator: a device copy, or an eager element-wise operator."""

    op: Literal["copy", "add", "silu_mul", "cast_fp32", "rms_norm"] = Field(
        ..., description="the operator timed")
    bytes: PositiveInt = Field(..., description="bytes read plus written")
    tokens: PositiveInt | None = Field(None, description="rows, for element-wise operators")
    hidden: PositiveInt | None = Field(None, description="columns, for element-wise operators")
    us: PositiveFloat | None = Field(None, description="mean time per call, microseconds "
                                     "(None: the publication gives only the bandwidth)")
    GBps: PositiveFloat = Field(..., description="bytes / time, GB/s")


class DecodeGemmRow(Spec):
    """A small-M GEMM of one decode step (M = tokens in the batch)."""

    m: PositiveInt = Field(..., description="tokens in the batch")
    n: PositiveInt = Field(..., description="output features")
    k: PositiveInt = Field(..., description="input features")
    dtype: Literal["bf16", "fp8"] = Field(..., description="weight and input precision")
    us: PositiveFloat = Field(..., description="mean time per GEMM, microseconds")
    weight_GBps: PositiveFloat = Field(..., description="weight bytes streamed per second, GB/s")
    tflops: PositiveFloat = Field(..., description="2mnk / time, TFLOP/s")


class DecodeAttentionRow(Spec):
    """One query token per sequence against a bf16 KV cache."""

    batch: PositiveInt = Field(..., description="sequences")
    kv_len: PositiveInt = Field(..., description="cached tokens per sequence")
    heads: PositiveInt = Field(..., description="query heads")
    kv_heads: PositiveInt = Field(..., description="key/value heads")
    head_dim: PositiveInt = Field(..., description="dimension per head")
    us: PositiveFloat = Field(..., description="mean time per call, microseconds")
    kv_GBps: PositiveFloat = Field(..., description="KV-cache bytes read per second, GB/s")


class SkippedRow(Spec):
    """A case the GPU's libraries refused, with the reason."""

    family: str = Field(..., description="the family the case belongs to")
    why: str = Field(..., description="the library's refusal")


class KernelTable(Spec):
    """Every kernel measurement of one GPU type (``tools/microbench.py`` writes it)."""

    gpu: str = Field(..., description="catalog GPU name the table describes")
    source: str = Field(..., description="device, software versions and date of the run")
    notes: str | None = notes_field()
    gemm: list[GemmRow] = Field(default_factory=list, description="GEMMs by shape and dtype")
    attention: list[AttentionRow] = Field(default_factory=list,
                                          description="fused attention by backend and shape")
    memory: list[MemoryRow] = Field(default_factory=list,
                                    description="copies and element-wise operators")
    decode_gemm: list[DecodeGemmRow] = Field(default_factory=list,
                                             description="small-M GEMMs of a decode step")
    decode_attention: list[DecodeAttentionRow] = Field(
        default_factory=list, description="KV-cache attention of a decode step")
    skipped: list[SkippedRow] = Field(default_factory=list,
                                      description="cases a library refused")


@lru_cache(maxsize=None)
def kernel_table(gpu_name: str) -> KernelTable | None:
    """The shipped kernel table of catalog GPU ``gpu_name``; None where none was measured."""
    path = catalog.catalog_root() / "kernels" / f"{gpu_name}.yaml"
    if not path.is_file():
        return None

    return validate(KernelTable, read_structured(path), f"kernel table '{gpu_name}'")
