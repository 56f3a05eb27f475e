"""System inputs, part 1: the accelerator and its calibrated efficiencies."""

from __future__ import annotations


from typing import Literal

from pydantic import Field, PositiveFloat, model_validator

from planner.specs.base import Spec, notes_field
from planner.specs.names import Name
import planner.catalog as catalog



class GPUEfficiency(Spec):
    """Achieved fractions of peak, shared by every run on this GPU.

    GEMM efficiency follows a saturating curve in each matrix dimension:
    ``eff(M, N, K) = gemm_peak_fraction * s(M) * s(N) * s(K)`` with
    ``s(x) = x / (x + gemm_half_dim)``; see docs/cost-model.md.
    """

    gemm_peak_fraction: float = Field(..., gt=0, le=1)
    gemm_half_dim: float = Field(..., ge=0, description="dimension at which one factor is 1/2")
    fp8_gemm_peak_fraction: float | None = Field(None, gt=0, le=1)
    attention_fwd_fraction: float = Field(..., gt=0, le=1, description="flash kernel, fwd")
    attention_bwd_fraction: float = Field(..., gt=0, le=1, description="flash kernel, bwd")
    hbm_fraction: float = Field(..., gt=0, le=1, description="achievable share of HBM bandwidth")
    embedding_lookup_fraction: float | None = Field(
        None, gt=0, le=1, description="share of HBM bandwidth that embedding-bag lookups "
        "(random row gathers) reach; default hbm_fraction (planner/costmodel/dlrm/model.py)")
    kernel_overhead_us: float = Field(0.0, ge=0, description="fixed cost per kernel launch")
    overlap_slowdown: float = Field(
        0.0, ge=0, le=1, description="share of overlapped communication time lost to compute"
    )
    attention_backend: Literal["cudnn", "flash2", "flash3"] = Field(
        "cudnn", description="fused-attention kernel whose measured speed the cost model reads "
        "from the GPU's kernel table: the framework's (its profile's kernels.attention_backend; "
        "cuDNN fused attention is what Megatron-Core runs through Transformer Engine on Hopper). "
        "A backend the table lacks falls back to attention_fwd/bwd_fraction")
    kernel_fraction: float = Field(
        1.0, gt=0, le=1, description="share of the kernel table's microbenchmarked throughput "
        "(GEMM, fused attention) a training step sustains: clocks under sustained power draw, "
        "gaps between kernels; a framework-level parameter (the profile's fit), unused where "
        "the GPU has no kernel table")
    sharded_overlap: bool = Field(
        False, description="ZeRO-2/3's per-microbatch parameter gathers and gradient "
        "reduce-scatters overlap compute under the plan's overlap switches (the framework's: "
        "its profile's kernels.fsdp_prefetch); False: charged in full "
        "(planner/costmodel/compose.py SHARDED_MICROBATCH_OVERLAP)")
    moe_expert_host_us: float = Field(
        0.0, ge=0, description="host (CPU) time per local expert of one MoE layer's "
        "forward that the GPU waits for: the framework's (its profile's "
        "kernels.moe_expert_host_us); 0: the experts run as one grouped kernel launched "
        "ahead of the GPU (planner/costmodel/moe.py host_stall_s)")
    reduce_bucket_elements: float = Field(
        0.0, ge=0, description="elements of the gradient-reduction bucket allocated up front "
        "in the model's dtype (the framework's: its profile's kernels.reduce_bucket_elements; "
        "planner/costmodel/train/stage.py reduce_bucket_bytes); 0: none")
    loss_bytes_per_logit: float = Field(
        4.0, gt=0, description="HBM bytes per local logit live at the peak of the loss "
        "(the framework's: its profile's kernels.cross_entropy, "
        "planner/costmodel/constants.py LOSS_PEAK_BYTES_PER_LOGIT); 4: one fp32 logits "
        "buffer, Megatron's vocab-parallel cross-entropy")


class GPUSpec(Spec):
    """One accelerator type. Every number in a catalog file cites a source."""

    name: Name
    vendor: Name = "nvidia"
    peak_tflops: dict[str, PositiveFloat] = Field(
        ..., description="dense (no sparsity) peak per dtype: bf16, fp16, fp8, tf32"
    )
    hbm_gib: PositiveFloat
    hbm_TBps: PositiveFloat
    nvlink_GBps: float = Field(0.0, ge=0, description="per GPU per direction")
    tdp_w: PositiveFloat
    idle_w: float | None = Field(None, ge=0, description="idle board power; default 25% of TDP")
    price_per_gpu_hour: float | None = Field(None, ge=0, description="indicative rental, USD")
    capex_usd: float | None = Field(None, ge=0, description="indicative purchase price per GPU")
    efficiency: GPUEfficiency
    kernel_table: Name | None = Field(
        None, description="name of the measured kernel table (hardware_catalog/kernels/<name>"
        ".yaml, written by tools/microbench.py) the cost model reads GEMM, fused-attention and "
        "copy speeds from; None: the fitted efficiency curves (gemm_peak_fraction, "
        "attention_*_fraction, hbm_fraction)")
    aliases: list[Name] = Field(default_factory=list)
    sources: dict[str, str] = Field(default_factory=dict, description="field -> citation "
                                    "(datasheet, paper and table)")
    notes: str | None = notes_field()

    @model_validator(mode="after")
    def _check(self) -> "GPUSpec":
        if "bf16" not in self.peak_tflops and "fp16" not in self.peak_tflops:
            raise ValueError("peak_tflops needs at least bf16 or fp16")
        if self.kernel_table is not None:
            have = sorted(p.stem for p in (catalog.catalog_root() / "kernels").glob("*.yaml"))
            if self.kernel_table not in have:
                raise ValueError(f"kernel_table '{self.kernel_table}': no such measured table; "
                                 f"expected one of {', '.join(have)} or none")
        return self

    def peak_flops(self, dtype: str) -> float:
        """Dense peak in FLOP/s for the plan's compute dtype."""
        table = self.peak_tflops
        if dtype in table:
            return table[dtype] * 1e12
        fallback = table.get("bf16") or table.get("fp16")
        assert fallback is not None
        return fallback * 1e12

    def gemm_peak_fraction(self, dtype: str) -> float:
        eff = self.efficiency
        if dtype == "fp8" and eff.fp8_gemm_peak_fraction is not None:
            return eff.fp8_gemm_peak_fraction
        return eff.gemm_peak_fraction

    @property
    def hbm_bytes(self) -> float:
        return self.hbm_gib * 2**30

    @property
    def hbm_Bps(self) -> float:
        return self.hbm_TBps * 1e12

    @property
    def idle_power_w(self) -> float:
        return self.idle_w if self.idle_w is not None else 0.25 * self.tdp_w
