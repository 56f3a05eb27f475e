"""DeepSpeed: a plan as ``ds_config.json``.

Keys follow DeepSpeed ``v0.18.0`` (commit 79caae1c04fca210345bdeb03bcacf87b1ac2f23):
``deepspeed/runtime/constants.py`` (``train_batch_size``, ``train_micro_batch_size_per_gpu``,
``gradient_accumulation_steps``, ``bf16.enabled``, ``fp16.enabled``,
``communication_data_type``, ``data_types.grad_accum_dtype``),
``deepspeed/runtime/zero/config.py`` (``zero_optimization.stage``, ``overlap_comm``,
``offload_optimizer``, ``offload_param``) and ``zero/offload_config.py`` (``device: cpu``).

A ds_config describes data parallelism and ZeRO only: tensor, pipeline, context and expert
parallelism of these models need Megatron-DeepSpeed's own arguments, so plans with any of
them > 1 are refused, as are FP8, selective recomputation (HF models checkpoint whole
layers) and a stage-0 gradient all-reduce overlapped with backward (DeepSpeed reduces after
backward without ZeRO).

The file has no ``optimizer`` section: ``train.py`` passes its own (a client optimizer).
What DeepSpeed wraps it in (:func:`built_optimizer`,
:func:`planner.costmodel.frameworks.deepspeed_optimizer`) is what the cost model charges for
every config written here: ``FP16_UnfusedOptimizer`` (``FP16_Optimizer`` for FusedAdam) at
ZeRO stage 0 with bf16 accumulation (full fp32 master weights and Adam states per rank, the
bf16 ``.grad`` all-reduced in ``communication_data_type`` after backward: the cost model's
stage 0), ``DeepSpeedZeroOptimizer`` at stages 1 and 2 (with fp32 accumulation at stage 1
only with the optimizer offloaded, where a client optimizer must be DeepSpeedCPUAdam) and
``DeepSpeedZeroOptimizer_Stage3`` at 3; the combinations that build an unsharded wrapper at
stage 1, or accumulate in bf16 where fp32 was costed, are refused (rule
``bf16_fp32_accum_below_zero2_runs_fp16_optimizer``).
"""

from __future__ import annotations

import json

from planner.costmodel.frameworks import DS_UNSHARDED_WRAPPERS, deepspeed_optimizer
from planner.export.common import (
    Target,
    as_run,
    header_lines,
    launch_shape,
    refuse_violations,
    uniform_recompute,
)
from planner.specs.plan import Plan

FMT = "deepspeed"
VERSION = "DeepSpeed v0.18.0 (commit 79caae1c04fca210345bdeb03bcacf87b1ac2f23)"
SOURCE = ("deepspeed/runtime/constants.py, deepspeed/runtime/zero/config.py, "
          "deepspeed/runtime/zero/offload_config.py (deepspeedai/DeepSpeed, tag v0.18.0)")


def refusals(p: Plan, target: Target) -> None:
    """Raise for the first plan field a ds_config cannot express (the rules of the
    ``deepspeed`` framework profile, hardware_catalog/frameworks/deepspeed.yaml)."""
    refuse_violations(FMT, p, target.model)


def normalized(plan: Plan, target: Target) -> Plan:
    p = as_run(plan, target, FMT)
    refusals(p, target)
    return p


def config(plan: Plan, target: Target) -> dict:
    """The ds_config dictionary; ``train_batch_size`` = micro x accumulation x dp."""
    p = normalized(plan, target)
    accumulation = p.global_batch_size // (p.microbatch_size * p.dp)
    zero: dict[str, object] = {"stage": p.zero_stage,
                               "overlap_comm": bool(p.overlap_dp_grad_reduce and p.dp > 1)}
    if p.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if p.offload_params:
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    cfg: dict[str, object] = {
        "train_batch_size": p.microbatch_size * accumulation * p.dp,
        "train_micro_batch_size_per_gpu": p.microbatch_size,
        "gradient_accumulation_steps": accumulation,
        "bf16": {"enabled": p.dtype == "bf16"},
        "fp16": {"enabled": p.dtype == "fp16"},
        "communication_data_type": p.grad_reduce_dtype,
        "data_types": {"grad_accum_dtype": p.grad_reduce_dtype},
        "zero_optimization": zero,
    }
    return cfg


def built_optimizer(cfg: dict, fused_adam: bool = False) -> str:
    """The class of ``engine.optimizer`` DeepSpeed v0.18.0 builds from ds_config ``cfg``
    around a client optimizer (FusedAdam when ``fused_adam``; DeepSpeedCPUAdam when the
    optimizer is offloaded), read from the keys DeepSpeed reads: ``bf16``/``fp16``
    ``enabled``, ``data_types.grad_accum_dtype`` (the model dtype when absent,
    engine.get_data_types), ``zero_optimization.stage`` and ``offload_optimizer.device``
    (engine.zero_cpu_offload)."""
    dtype = ("bf16" if cfg.get("bf16", {}).get("enabled") else
             "fp16" if cfg.get("fp16", {}).get("enabled") else "fp32")
    accum = (cfg.get("data_types") or {}).get("grad_accum_dtype") or dtype
    zero = cfg.get("zero_optimization") or {}
    offload = (zero.get("offload_optimizer") or {}).get("device") == "cpu"
    return deepspeed_optimizer(dtype, accum, int(zero.get("stage", 0)), offload, fused_adam)


def uncosted(cfg: dict) -> str | None:
    """Why the cost model's reading of ``cfg`` (ZeRO stage z sharded as z, gradients
    accumulated in ``grad_accum_dtype``) is not what DeepSpeed runs, or None: a non-ZeRO
    wrapper at stage >= 1, or one whose bf16 ``.grad`` holds an fp32 accumulation."""
    built = built_optimizer(cfg)
    stage = int((cfg.get("zero_optimization") or {}).get("stage", 0))
    dtype = "bf16" if cfg.get("bf16", {}).get("enabled") else "fp16"
    accum = (cfg.get("data_types") or {}).get("grad_accum_dtype") or dtype
    if built in DS_UNSHARDED_WRAPPERS and (stage >= 1 or accum != dtype):
        return (f"DeepSpeed builds {built} (no ZeRO sharding, gradients accumulated in the "
                f"{dtype} .grad) where the cost model charges ZeRO stage {stage} with {accum} "
                "gradient accumulation")
    return None


def optimizer_line(cfg: dict) -> str:
    """The header's statement of the optimizer costed: the file has no ``optimizer``
    section, so train.py passes one (without it DeepSpeed v0.18.0 asserts "zero stage
    {1,2} requires an optimizer", engine._configure_zero_optimizer)."""
    offload = ((cfg["zero_optimization"].get("offload_optimizer") or {}).get("device")
               == "cpu")
    client = "DeepSpeedCPUAdam" if offload else "torch.optim.AdamW or FusedAdam"
    built, fused = built_optimizer(cfg), built_optimizer(cfg, fused_adam=True)
    wrap = built if built == fused else f"{built} ({fused} for FusedAdam)"
    return (f"optimizer: train.py passes Adam ({client}) to deepspeed.initialize; DeepSpeed "
            f"v0.18.0 wraps it in {wrap}, whose memory and gradient reduction are costed")


def render(plan: Plan, target: Target) -> str:
    """JSON has no comments: the header goes in a ``planner_export`` key, which DeepSpeed's
    config reader does not look up."""
    cfg = config(plan, target)
    nodes, per_node = launch_shape(plan, target.cluster, FMT)
    lines = header_lines(FMT, VERSION, SOURCE, target, plan)  # json.dumps escapes them
    recompute = uniform_recompute(plan, target.model, FMT)
    lines += [f"launch: deepspeed --num_nodes {nodes} --num_gpus {per_node} train.py "
              "--deepspeed_config THIS_FILE",
              f"seq_len {plan.seq_len} and recompute={recompute} (gradient checkpointing of "
              "every layer when full) are set in the model code",
              optimizer_line(cfg)]
    return json.dumps({"planner_export": lines, **cfg}, indent=2) + "\n"
