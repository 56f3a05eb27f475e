"""Megatron-Bridge (NeMo): a plan as ``KEY=VALUE`` ConfigContainer overrides for a recipe.

Names follow Megatron-Bridge ``v0.6.0`` (commit 51885cf132b2814188b6855c25a8588254274c2a):
``scripts/training/run_recipe.py`` (trailing ``KEY=VALUE`` overrides such as
``model.tensor_model_parallel_size=N``, ``train.micro_batch_size=N``,
``dataset.seq_length=N``), ``src/megatron/bridge/training/config.py`` (``train``,
``model``, ``ddp``, ``optimizer``, ``comm_overlap``, ``mixed_precision``),
``src/megatron/bridge/training/comm_overlap.py`` (``CommOverlapConfig``) and
``mixed_precision.py`` (registered recipes; their ``grad_reduce_in_fp32`` and
``fp8_param_gather`` overwrite the DDP and model configs at set-up). The ``model``, ``ddp``,
``optimizer`` and ``train`` fields are Megatron-Core's ``ModelParallelConfig``,
``TransformerConfig``, ``DistributedDataParallelConfig``, ``OptimizerConfig`` and
megatron/training/config ``TrainingConfig`` at cd4afffa648426a959dc7cb1e24b5ce7d0c3ff54, the
Megatron-LM that v0.6.0 pins as 3rdparty/Megatron-LM.

Bridge runs Megatron-Core: its refusals are the ``nemo`` framework profile's rules
(hardware_catalog/frameworks/nemo.yaml: Megatron-Core's, plus the precisions its registered
recipes cannot state as a string override).
"""

from __future__ import annotations

from planner.costmodel.pipeline import chunk_sizes
from planner.export.common import Target, half_block_or_refuse, header, launch_shape
from planner.export.megatron import CP_COMM, layout_string, normalized
from planner.specs.plan import Plan

FMT = "megatron-bridge"
VERSION = "Megatron-Bridge v0.6.0 (commit 51885cf132b2814188b6855c25a8588254274c2a)"
SOURCE = ("scripts/training/run_recipe.py, src/megatron/bridge/training/{config,comm_overlap,"
          "mixed_precision}.py (NVIDIA-NeMo/Megatron-Bridge, tag v0.6.0)")


def _precision(p: Plan) -> str:
    """The registered mixed-precision recipe that is this plan's precision (the precisions
    no recipe states are refused by the nemo profile's rules)."""
    return "bf16_with_fp8_delayed_scaling_mixed" if p.dtype == "fp8" else "bf16_mixed"


def overrides(plan: Plan, target: Target) -> list[str]:
    """``KEY=VALUE`` overrides, in ConfigContainer order."""
    p = normalized(plan, target, FMT)
    mp = _precision(p)
    out = [f"model.tensor_model_parallel_size={p.tp}",
           f"model.pipeline_model_parallel_size={p.pp}",
           f"model.virtual_pipeline_model_parallel_size="
           f"{p.virtual_stages if p.virtual_stages > 1 else 'null'}",
           f"model.context_parallel_size={p.cp}",
           f"model.sequence_parallel={_b(p.sequence_parallel)}"]
    if p.cp > 1:
        out.append(f"model.cp_comm_type={CP_COMM[p.cp_comm]}")
    if p.ep > 1 or p.expert_tp is not None:
        out.append(f"model.expert_model_parallel_size={p.ep}")
    if p.expert_tp is not None:
        out.append(f"model.expert_tensor_parallel_size={p.expert_tp}")
    out += _layers(p, target) + _recompute(p, target)
    out += [f"train.micro_batch_size={p.microbatch_size}",
            f"train.global_batch_size={p.global_batch_size}",
            f"dataset.seq_length={p.seq_len}",
            *_precision_overrides(p, mp),
            f"ddp.use_distributed_optimizer={_b(p.zero_stage == 1)}",
            f"optimizer.use_distributed_optimizer={_b(p.zero_stage == 1)}",
            # the model's and DDP config's own switches: comm_overlap.* cannot be overridden
            # in a recipe without a CommOverlapConfig (every Llama 3 8B recipe, v0.6.0
            # recipes/llama/llama3.py)
            f"model.tp_comm_overlap={_b(p.overlap_tp_comm is True)}",
            f"ddp.overlap_grad_reduce={_b(p.overlap_dp_grad_reduce)}",
            f"ddp.overlap_param_gather={_b(p.zero_stage == 1 and p.overlap_param_gather)}"]
    if p.virtual_stages > 1:
        out.append(f"model.overlap_p2p_comm={_b(p.overlap_p2p_comm)}")
    if p.overlap_moe_ep_comm:  # Megatron-Bridge CommOverlapConfig
        out.append("comm_overlap.overlap_moe_expert_parallel_comm=true")
    return out


def _precision_overrides(p: Plan, mp: str) -> list[str]:
    """The precision: a registered recipe reduces gradients in fp32 (its
    grad_reduce_in_fp32=True is written over the DDP config at set-up, v0.6.0
    training/mixed_precision.py); bf16 reduction is the performance recipes' (perf_recipes/
    _common.py _perf_precision: ``mp`` with grad_reduce_in_fp32=False), stated on the recipe's
    own MixedPrecisionConfig, which a string override would replace."""
    if p.grad_reduce_dtype == "fp32":
        return [f"mixed_precision={mp}"]
    return ["mixed_precision.grad_reduce_in_fp32=false", "ddp.grad_reduce_in_fp32=false"]


def _b(v: bool) -> str:
    return "true" if v else "false"


def _layers(p: Plan, target: Target) -> list[str]:
    if not p.uneven_pipeline:
        return []
    sizes = chunk_sizes(target.model.num_layers, p.pp * p.virtual_stages, True) or []
    # the planner's splits count layers only; a recipe's provider may count the embedding
    # and the loss as layers, which Megatron-Core refuses with an explicit layout
    # (transformer_config.py) and which moves layers with first/last stage sizes
    out = ["model.account_for_embedding_in_pipeline_split=false",
           "model.account_for_loss_in_pipeline_split=false"]
    if p.virtual_stages == 1 and len(set(sizes[1:-1])) <= 1 and min(sizes) > 0:
        return out + [f"model.num_layers_in_first_pipeline_stage={sizes[0]}",
                      f"model.num_layers_in_last_pipeline_stage={sizes[-1]}"]
    return out + [f"model.pipeline_model_parallel_layout='{layout_string(sizes)}'"]


def _recompute(p: Plan, target: Target) -> list[str]:
    value = p.recompute_for(target.model.layer_types[0])
    if value == "none":
        return ["model.recompute_granularity=null"]
    if value == "selective":
        return ["model.recompute_granularity=selective"]
    if value == "half":
        n = half_block_or_refuse(target.model.num_layers, p.pp * p.virtual_stages,
                                 p.uneven_pipeline, FMT)
        return ["model.recompute_granularity=full", "model.recompute_method=block",
                f"model.recompute_num_layers={n}"]
    return ["model.recompute_granularity=full", "model.recompute_method=uniform",
            "model.recompute_num_layers=1"]


def render(plan: Plan, target: Target) -> str:
    """Header comments (version, launch) and one override per line."""
    lines = overrides(plan, target)
    nodes, per_node = launch_shape(plan, target.cluster, FMT)
    head = header(FMT, VERSION, SOURCE, target, plan)
    head += ["# usage, on each node (a recipe's CommOverlapConfig, where it has one, sets the",
             "# overlap switches again at setup: Megatron-Bridge training/comm_overlap.py):",
             f"#   torchrun --nnodes {nodes} --nproc-per-node {per_node} "
             "scripts/training/run_recipe.py --recipe YOUR_RECIPE --mode pretrain \\",
             "#     $(grep -v '^#' THIS_FILE)"]
    p = normalized(plan, target, FMT)
    if p.grad_reduce_dtype == "bf16":
        head += [f"# bf16 gradient reduction: YOUR_RECIPE is a performance recipe of precision "
                 f"{_precision(p)}",
                 "# (src/megatron/bridge/perf_recipes: _perf_precision), whose "
                 "MixedPrecisionConfig the overrides below edit"]
    return "\n".join(head + lines) + "\n"
