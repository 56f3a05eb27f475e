"""Execution inputs: how one training job is parallelized."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt, model_validator

from planner.specs.base import Spec
from planner.specs.model import LAYER_TYPES, MAX_GLOBAL_BATCH, MAX_SEQ_LEN

Recompute = Literal["none", "selective", "full", "half"]
Dim = Literal["tp", "cp", "ep", "dp", "pp"]
DIMS: tuple[str, ...] = ("tp", "cp", "ep", "dp", "pp")
#: Dimensions that multiply to the GPU count (the experts' etp x ep x edp regroup a stage's
#: tp x cp x dp ranks: Megatron-Core MoE parallel folding).
WORLD_DIMS: tuple[str, ...] = ("tp", "cp", "dp", "pp")
#: Megatron-Core's default rank order "tp-cp-ep-dp-pp", innermost first.
DEFAULT_ORDER: tuple[str, ...] = ("tp", "cp", "ep", "dp", "pp")


class Placement(Spec):
    """Which GPUs share the innermost network domain (the NVSwitch domain).

    ``domain[d]`` is how many GPUs of one ``d``-group sit in one domain; the factors
    multiply to the domain size (or to the job size if that is smaller). ``order`` is
    the nesting of the dimensions, innermost first; it fills the levels above the
    domain and, when ``domain`` is omitted, the domain too.
    """

    order: list[Dim] = Field(default_factory=lambda: list(DEFAULT_ORDER))
    domain: dict[Dim, PositiveInt] | None = None

    @model_validator(mode="after")
    def _check(self) -> "Placement":
        missing = [d for d in WORLD_DIMS if d not in self.order]
        if missing:
            raise ValueError(f"placement.order must list {list(WORLD_DIMS)}; missing {missing}")
        if len(set(self.order)) != len(self.order):
            raise ValueError(f"placement.order has duplicates: {self.order}")
        if self.domain and "ep" in self.domain and self.domain["ep"] != 1:
            raise ValueError("placement.domain.ep is not used; ep groups regroup the tp x cp x "
                             "dp ranks of a stage")
        return self


class Plan(Spec):
    """One parallelization plan. Field names are the stable plan-file format."""

    tp: PositiveInt = 1
    pp: PositiveInt = 1
    dp: PositiveInt = 1
    cp: PositiveInt = 1
    ep: PositiveInt = Field(1, description="expert-parallel degree of the MoE layers "
                            "(--expert-model-parallel-size); expert_tp x ep divides the tp x "
                            "cp x dp ranks of a stage, so EP groups may span TP, CP and DP "
                            "ranks (Megatron-Core MoE parallel folding)")
    expert_tp: PositiveInt | None = Field(
        None, description="tensor-parallel degree of the expert FFNs; default = tp "
        "(Megatron-Core --expert-tensor-parallel-size); expert_tp x ep divides tp x cp x dp")
    microbatch_size: PositiveInt = 1
    global_batch_size: PositiveInt = Field(le=MAX_GLOBAL_BATCH)
    seq_len: PositiveInt = Field(le=MAX_SEQ_LEN)
    virtual_stages: PositiveInt = 1
    uneven_pipeline: bool = Field(
        False, description="layers need not divide pp x virtual_stages; end chunks get fewer"
    )
    fused_elementwise: bool = Field(
        True, description="norms, activations and RoPE run as fused kernels (Megatron-LM and "
        "Transformer Engine, or torch.compile); false: PyTorch eager, one kernel per operator, "
        "several times the memory traffic for RMSNorm, SwiGLU and RoPE (torchtitan without "
        "compile)")
    sequence_parallel: bool = False
    tp_comm: Literal["allreduce", "rs_ag"] | None = Field(
        None, description="default: rs_ag with sequence parallelism, else allreduce"
    )
    recompute: Recompute | dict[str, Recompute] = "none"
    zero_stage: int = Field(0, ge=0, le=3)
    offload_optimizer: bool = Field(
        False, description="ZeRO-Offload: fp32 master weights and Adam moments (and the "
        "gradient shard they update) in the cluster's offload tier; the step runs on the CPU")
    offload_params: bool = Field(
        False, description="ZeRO-Infinity: the bf16 parameter shards of ZeRO stage 3 live in "
        "the offload tier and are fetched for each forward and backward")
    dtype: Literal["bf16", "fp16", "fp8"] = "bf16"
    fp8_params: bool = Field(
        False, description="FP8 training keeps the model weights only as FP8 (1 B per "
        "parameter beside the fp32 master) and all-gathers them in FP8 (Transformer Engine "
        "fp8_params / Megatron --fp8-param-gather); needs dtype=fp8")
    grad_reduce_dtype: Literal["fp32", "bf16"] = Field(
        "fp32", description="precision of the main-gradient buffer and of its data-parallel "
        "reduction: fp32 (Megatron --accumulate-allreduce-grads-in-fp32) or bf16 (NVIDIA's "
        "FP8 recipes: grad_reduce_in_fp32=False)")
    optimizer_dtype: Literal["fp32", "bf16"] = Field(
        "fp32", description="precision of the Adam moments: fp32 (beside fp32 master "
        "weights), or bf16 as NeMo 1.x recipes set optim.dtype=bf16 for Apex "
        "DistributedFusedAdam (bf16 moments; the bf16 model weights are the master copy, or a "
        "bf16 master shard beside FP8 weights)")
    attention: Literal["flash", "standard"] = "flash"
    cp_comm: Literal["ring", "all_to_all", "all_gather"] = Field(
        "ring", description="ring: K/V blocks passed around the cp ring, overlapped with "
        "attention (Megatron-Core CP); all_to_all: heads scattered (DeepSpeed-Ulysses); "
        "all_gather: K/V all-gathered over cp, the LBNL model's 2D tensor parallelism")
    overlap_dp_grad_reduce: bool = True
    overlap_param_gather: bool = True
    overlap_tp_comm: bool | Literal["auto"] = Field(
        "auto", description="overlap the forward TP all-gather/reduce-scatter with their GEMMs "
        "(Transformer Engine userbuffers, Megatron --tp-comm-overlap): needs sequence "
        "parallelism and a TP group inside one NVLink domain; splits each GEMM into tp "
        "chunks. auto: per layer, whichever is faster (a decision of the search)")
    overlap_p2p_comm: bool = Field(
        True, description="with interleaving (virtual_stages > 1), pipeline sends overlap the "
        "other chunks' compute (Megatron-LM --overlap-p2p-communication, on by default since "
        "Megatron-Core 0.2; the 2022 code of Korthikanti et al. did not)")
    overlap_moe_ep_comm: bool = Field(
        False, description="Megatron-Core combined 1F1B (--overlap-moe-expert-parallel-comm, "
        "default off): the forward of microbatch i+1 is paired layer by layer with the "
        "backward of microbatch i, and each EP dispatch/combine all-to-all runs on a "
        "communication stream behind the other microbatch's attention or expert compute; "
        "needs ep > 1 and, with pp > 1, virtual_stages > 1")
    placement: Placement = Field(default_factory=Placement)

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data):
        if isinstance(data, dict) and data.get("tp_comm") is None:
            data = dict(data)
            data["tp_comm"] = "rs_ag" if data.get("sequence_parallel") else "allreduce"
        return data

    @model_validator(mode="after")
    def _check(self) -> "Plan":
        if self.sequence_parallel and self.tp_comm == "allreduce":
            raise ValueError("sequence_parallel=true needs tp_comm=rs_ag (reduce-scatter/all-gather)")
        if self.fp8_params and self.dtype != "fp8":
            raise ValueError(f"fp8_params=true needs dtype=fp8, got dtype={self.dtype}")
        if self.offload_params and self.zero_stage != 3:
            raise ValueError(
                f"offload_params=true needs zero_stage=3 (ZeRO-Infinity offloads the parameter "
                f"shards of ZeRO stage 3), got zero_stage={self.zero_stage}")
        if isinstance(self.recompute, dict):
            bad = [k for k in self.recompute if k not in LAYER_TYPES]
            if bad:
                raise ValueError(
                    f"recompute has unknown layer types {bad}; expected keys from {list(LAYER_TYPES)}"
                )
        return self

    def to_dict(self) -> dict:
        """Plain-data form; the offload switches are written only when on, so plans that do
        not offload read exactly as before the offload tier existed."""
        out = super().to_dict()
        for k in ("offload_optimizer", "offload_params", "fp8_params", "overlap_moe_ep_comm"):
            if not out.get(k):
                out.pop(k, None)
        for k in ("grad_reduce_dtype", "optimizer_dtype"):
            if out.get(k) == "fp32":
                out.pop(k)
        return out

    @property
    def offloads(self) -> bool:
        return self.offload_optimizer or self.offload_params

    # ---- derived -------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    @property
    def num_microbatches(self) -> float:
        """Microbatches per pipeline per iteration."""
        return self.global_batch_size / (self.dp * self.microbatch_size)

    @property
    def etp(self) -> int:
        """Expert tensor-parallel degree (``expert_tp``, default ``tp``)."""
        return self.expert_tp or self.tp

    def recompute_for(self, layer_type: str) -> Recompute:
        if isinstance(self.recompute, dict):
            return self.recompute.get(layer_type, "none")
        return self.recompute

    def degree(self, dim: str) -> int:
        return int(getattr(self, dim))
