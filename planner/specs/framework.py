"""Framework profiles: what a training framework can run and which kernels it runs.

A profile states, once, the plan fields and values a framework (at one version) supports,
the named conditional rules it obeys (implemented once, in
:mod:`planner.costmodel.frameworks`), its export format, and the kernels it runs. The
search space (:mod:`formulations.train.space`) and the exporters' refusals
(:mod:`planner.export`) both read it, so every plan a ``--framework F`` solve returns is one
F's exporter accepts. Shipped as ``hardware_catalog/frameworks/<name>.yaml``; every
restriction and rule carries a citation in ``sources``.
"""

from __future__ import annotations

import difflib
from typing import Literal

from pydantic import Field, model_validator

from planner.errors import InputError
from planner.specs.base import Spec, notes_field
from planner.specs.names import Name
from planner.specs.plan import WORLD_DIMS, Dim, Recompute
from planner.specs.loaders import load_catalog_profile, reference

ExportFormat = Literal["megatron", "megatron-bridge", "torchtitan", "deepspeed"]
#: state options as profiles name them: which of the optimizer states and the ZeRO-3
#: parameter shards live in the offload tier
Offload = Literal["none", "optimizer", "params", "both"]
#: the conditional rules a profile may name; each is implemented once in
#: :data:`planner.costmodel.frameworks.RULES`
RuleName = Literal[
    "zero0_pure_dp", "fsdp_needs_dp_shard", "rs_ag_needs_sp", "fp16_no_bf16_grad_reduce", "fp8_params_need_zero1",
    "param_gather_needs_grad_overlap", "interleaved_no_p2p_overlap_needs_pp_gt2",
    "seq_divisible_by_2cp", "async_tp_needs_compile", "offload_optimizer_needs_zero",
    "zero0_reduces_after_backward", "one_dp_overlap_switch", "fp8_needs_fp8_params",
    "block_recompute_half", "bf16_fp32_accum_below_zero2_runs_fp16_optimizer", "fp16_needs_zero"]
#: profile fields that restrict plan values (each needs a citation in ``sources``)
RULE_FIELDS: tuple[str, ...] = (
    "zero_stages", "offloads", "recompute", "uniform_recompute", "max_degrees",
    "sequence_parallel", "cp_comms", "attention", "dtypes", "grad_reduce_dtypes",
    "fused_elementwise", "overlap_tp_comm", "overlap_dp_grad_reduce", "overlap_param_gather", "overlap_p2p_comm",
    "overlap_moe_ep_comm", "interleaving", "uneven_pipeline", "expert_tp", "expert_groups",
    "rank_orders", "grad_reduce_default", "zero_stage_default")


class FrameworkKernels(Spec):
    """Which kernels the framework runs (data for the cost model; each cited)."""

    attention_backend: Literal["cudnn", "flash2", "flash3", "unfused"] = Field(
        ..., description="fused attention kernel: cudnn = cuDNN fused attention (Transformer "
        "Engine's DotProductAttention on Hopper), flash2 = FlashAttention-2 (PyTorch SDPA's "
        "flash backend), flash3 = FlashAttention-3, unfused = softmax(QK^T)V in separate "
        "kernels")
    elementwise: Literal["fused", "compiled", "eager"] = Field(
        ..., description="norms, activations and RoPE: hand-fused kernels (Transformer "
        "Engine/Apex), torch.compile-generated kernels, or one eager kernel per operator")
    fp8_recipe: Literal["delayed", "tensorwise", "rowwise", "none"] = Field(
        ..., description="FP8 scaling: delayed (Transformer Engine's amax history), "
        "tensorwise/rowwise dynamic scaling (torchao), none (no FP8 training)")
    cuda_graphs: bool = Field(False, description="the training step is captured in CUDA "
                              "graphs by default")
    fsdp_prefetch: bool = Field(
        False, description="ZeRO-3 parameter gathers are prefetched and gradient "
        "reduce-scatters overlapped with the neighbouring blocks' compute every microbatch "
        "(FSDP2's fully_shard); False: that per-microbatch traffic is charged in full")
    cross_entropy: Literal["fused", "eager_fp32"] = Field(
        "fused", description="how the loss is computed: fused = a vocabulary-parallel "
        "cross-entropy kernel on one fp32 logits buffer (Megatron); eager_fp32 = "
        "F.cross_entropy on an fp32 copy of the logits in eager PyTorch, unchunked (the "
        "log-softmax output and gradients in fp32)")
    moe_expert_host_us: float = Field(
        0.0, ge=0, description="host time per local expert of one MoE layer's forward "
        "that the GPU waits for: eager per-expert kernel launches behind the token "
        "dispatcher's device-to-host sync (planner/costmodel/moe.py host_stall_s); 0: "
        "grouped expert kernels or CUDA graphs. A framework-level parameter fitted on the "
        "framework's MoE runs (tools/calibrate.py)")
    reduce_bucket_elements: float = Field(
        0.0, ge=0, description="elements of the gradient-reduction bucket the framework's "
        "ZeRO optimizer allocates up front in the model's dtype, two with overlapped "
        "ZeRO-1/2 reduction (DeepSpeed's reduce_bucket_size); 0: the gradients are reduced "
        "in place (Megatron's grad buffer, FSDP2)")
    sources: dict[str, str] = Field(default_factory=dict, description="a citation per field")


class FrameworkFit(Spec):
    """Framework-level parameters fitted on the framework's own published runs on one GPU
    type (``tools/calibrate.py``), over the kernel speeds of the GPU's measured table."""

    kernel_fraction: float = Field(..., gt=0, le=1, description="share of the "
                                   "microbenchmarked kernel speed a training step sustains")
    overlap_slowdown: float | None = Field(None, ge=0, le=1, description="share of "
                                           "overlapped communication time lost to compute; "
                                           "None: the GPU file's")
    source: str = Field(..., min_length=1, description="the runs it was fitted on, the "
                        "calibration file, and the fit's error and leave-one-out error")


class FrameworkProfile(Spec):
    """What one framework, at one version, can run (each restriction cited in ``sources``)
    and which kernels it runs. An empty list is never valid: a field lists the values the
    framework supports; for the run settings (dtype, gradient reduction, attention,
    elementwise fusion, TP overlap) the first value listed is the framework's default."""

    name: Name = Field(..., description="catalog name, e.g. megatron-core")
    aliases: list[Name] = Field(default_factory=list)
    description: str = Field("", description="one line: what runs the plan")
    notes: str | None = notes_field()
    version: str = Field(..., description="the framework version (tag and commit) the rules "
                         "follow; the exporter of ``export_format`` follows the same")
    export_format: ExportFormat | None = Field(
        None, description="the ``planner export --format`` that writes this framework's launch "
        "file; None: no exporter")
    zero_stages: list[int] = Field(
        [0, 1, 2, 3], min_length=1, description="ZeRO stages it shards with (0: replicated "
        "states, 1: optimizer sharded, 2: + gradients, 3: + parameters)")
    offloads: list[Offload] = Field(
        ["none", "optimizer", "params", "both"], min_length=1,
        description="offload combinations: optimizer states (ZeRO-Offload), ZeRO-3 parameter "
        "shards (ZeRO-Infinity), both, or none")
    recompute: list[Recompute] = Field(
        ["none", "selective", "full", "half"], min_length=1,
        description="activation recomputation modes it runs")
    uniform_recompute: bool = Field(
        True, description="one recomputation setting for every layer type (a per-type mix "
        "cannot be stated)")
    max_degrees: dict[Literal["tp", "cp", "pp", "ep"], int] = Field(
        default_factory=dict, description="largest tensor/context/pipeline/expert degree it "
        "can state (absent: any)")
    sequence_parallel: Literal["optional", "always", "never"] = Field(
        "optional", description="with tp > 1: sequence parallelism optional, always on, or "
        "never")
    cp_comms: list[Literal["ring", "all_to_all", "all_gather"]] = Field(
        ["ring", "all_to_all", "all_gather"], min_length=1,
        description="context-parallel exchanges it runs (with cp > 1)")
    attention: list[Literal["flash", "standard"]] = Field(
        ["flash", "standard"], min_length=1, description="plan attention values it states")
    dtypes: list[Literal["bf16", "fp16", "fp8"]] = Field(
        ["bf16", "fp16", "fp8"], min_length=1, description="training precisions")
    grad_reduce_dtypes: list[Literal["fp32", "bf16"]] = Field(
        ["fp32", "bf16"], min_length=1, description="gradient buffer/reduction precisions")
    grad_reduce_default: dict[Literal["bf16", "fp16", "fp8"], Literal["fp32", "bf16"]] = Field(
        default_factory=dict, description="per training precision, the gradient "
        "buffer/reduction precision the framework runs when the plan states none (e.g. "
        "Megatron-LM reduces bf16 runs in fp32, NVIDIA's performance recipes in bf16); a "
        "precision absent here: the first of ``grad_reduce_dtypes``")
    fused_elementwise: list[bool] = Field(
        [True, False], min_length=1, description="plan fused_elementwise values it runs")
    overlap_tp_comm: list[bool] = Field(
        [True, False], min_length=1, description="TP communication overlapped with the GEMMs, "
        "one switch for every layer (the plan's per-GEMM ``auto`` is no framework's setting: "
        "under a profile the first value listed is the default)")
    overlap_dp_grad_reduce: list[bool] = Field(
        [True, False], min_length=1, description="gradient reduction overlapped with backward "
        "(where dp x cp > 1)")
    overlap_param_gather: list[bool] = Field(
        [True, False], min_length=1, description="parameter all-gather overlapped with "
        "forward (where dp x cp > 1 and ZeRO > 0)")
    overlap_p2p_comm: list[bool] = Field(
        [True, False], min_length=1, description="pipeline sends overlapped (with "
        "interleaving)")
    overlap_moe_ep_comm: list[bool] = Field(
        [False], min_length=1, description="EP all-to-all overlapped by pairing one "
        "microbatch's forward with another's backward (Megatron-Core combined 1F1B); "
        "default: not supported")
    interleaving: bool = Field(True, description="interleaved pipeline (virtual_stages > 1)")
    uneven_pipeline: bool = Field(True, description="layer splits that do not divide pp x v")
    expert_tp: Literal["any", "one_or_tp"] = Field(
        "any", description="expert tensor-parallel degree: any the plan rules allow, or 1 or tp only")
    expert_groups: Literal["folded", "borrowed"] = Field(
        "folded", description="how EP groups are drawn: folded = Megatron-Core MoE parallel "
        "folding (expert_tp x ep divides tp x cp x dp; the EP group may span any of them); "
        "borrowed = torchtitan (expert_tp = tp: ep spans all of cp and part of dp; "
        "expert_tp = 1: ep spans all of cp and tp and part of dp)")
    zero_stage_default: int | None = Field(
        None, description="the ZeRO stage a run gets when the plan states none and dp x cp "
        "> 1 (e.g. NeMo's optimizers are distributed by default: 1); None: the plan's own "
        "default (0). A solve searches the stage; this decides only what an evaluated plan "
        "that omits it runs")
    rank_orders: list[list[Dim]] | None = Field(
        None, description="rank orders it numbers ranks in (innermost first); a launcher "
        "fills each NVSwitch domain in that order, so the domain is the one the order fills. "
        "None: any placement (no rank-order restriction)")
    rules: list[RuleName] = Field(default_factory=list,
                                  description="conditional rules it obeys (named, "
                                  "planner/costmodel/frameworks.py)")
    kernels: FrameworkKernels
    fit: dict[Name, FrameworkFit] = Field(
        default_factory=dict, description="per catalog GPU name: the framework-level "
        "parameters fitted on this framework's published runs on that GPU; a GPU absent here "
        "keeps its own file's values (fitted on Megatron-Core runs, the default framework)")
    sources: dict[str, str] = Field(default_factory=dict, description="a citation for every "
                                    "restriction and rule: framework file and version")

    @model_validator(mode="after")
    def _check(self) -> "FrameworkProfile":
        bad = [z for z in self.zero_stages if z not in (0, 1, 2, 3)]
        if bad:
            raise ValueError(f"zero_stages {bad}: expected stages 0 to 3")
        small = {d: k for d, k in self.max_degrees.items() if k < 1}
        if small:
            raise ValueError(f"max_degrees {small}: expected degrees of at least 1")
        for order in self.rank_orders or []:
            missing = [d for d in WORLD_DIMS if d not in order]
            if missing or len(set(order)) != len(order):
                raise ValueError(f"rank_orders {order}: expected each of {list(WORLD_DIMS)} "
                                 "once (ep optional)")
        off = {d: g for d, g in self.grad_reduce_default.items()
               if g not in self.grad_reduce_dtypes or d not in self.dtypes}
        if off:
            raise ValueError(f"grad_reduce_default {off}: expected precisions of dtypes "
                             f"{self.dtypes} mapped to values of grad_reduce_dtypes "
                             f"{self.grad_reduce_dtypes}")
        if self.zero_stage_default is not None and self.zero_stage_default not in self.zero_stages:
            raise ValueError(f"zero_stage_default {self.zero_stage_default}: expected one of "
                             f"zero_stages {self.zero_stages}")
        default = FrameworkProfile.model_fields
        cited = set(self.sources)
        stray = sorted(cited - set(RULE_FIELDS) - set(self.rules))
        if stray:  # a citation under a misspelt key cites nothing
            near = difflib.get_close_matches(stray[0], [*RULE_FIELDS, *self.rules], n=1)
            raise ValueError(f"sources.{stray[0]}: cites no restriction or rule of this "
                             "profile" + (f"; did you mean {near[0]}?" if near else ""))
        uncited = [f for f in RULE_FIELDS if getattr(self, f) != default[f].get_default(
            call_default_factory=True) and f not in cited]
        uncited += [r for r in self.rules if r not in cited]
        if uncited:
            raise ValueError(f"sources: no citation for {uncited}; every restriction and rule "
                             "names the framework file and version it follows")
        return self

    def order(self, fixed: tuple[str, ...] | None = None) -> tuple[str, ...] | None:
        """The rank order a search uses: ``fixed`` when the framework numbers ranks so (else
        an InputError), or the framework's first order; None when any placement runs."""
        if self.rank_orders is None:
            return fixed
        world = [tuple(d for d in o if d in WORLD_DIMS) for o in self.rank_orders]
        if fixed is None:
            return tuple(self.rank_orders[0])
        mine = tuple(d for d in fixed if d in WORLD_DIMS)
        if mine not in world:
            raise InputError(
                f"placement.order={'-'.join(fixed)}: framework {self.name} numbers ranks "
                + " or ".join("-".join(o) for o in self.rank_orders) + " (innermost first)")
        return fixed

    def grad_reduce_for(self, dtype: str) -> str:
        """The gradient reduction precision this framework runs for ``dtype`` when the plan
        states none."""
        return self.grad_reduce_default.get(dtype, self.grad_reduce_dtypes[0])  # type: ignore[call-overload]


def load_framework(ref: str | FrameworkProfile) -> FrameworkProfile:
    """A catalog profile by name or alias, a profile YAML file, or a profile object as is.
    No default here: a request without a framework runs none
    (:data:`planner.specs.requests.DEFAULT_FRAMEWORK`)."""
    if isinstance(ref, FrameworkProfile):
        return ref

    return load_catalog_profile(FrameworkProfile, "frameworks", reference(ref, "framework"),
                                "--framework", "framework", "a profile YAML file")
