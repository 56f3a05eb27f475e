"""The offload memory tier: optimizer states (ZeRO-Offload) and parameter shards
(ZeRO-Infinity) kept in host or pooled memory beside the GPUs.

Pure functions, linear in the parameter count, shared by the evaluator and the formulations.
docs/cost-model.md (Sec. 2 and 4, "Offload tier") states the formulas:

* **ZeRO-Offload** (Ren et al., USENIX ATC 2021): the fp32 master weights, Adam
  momentum and variance (12 B per parameter) of the GPU's optimizer shard live in the
  tier, next to an fp32 copy of that shard's reduced gradients (4 B); after the last
  backward the gradient shard goes down the link, the CPU runs Adam on it, and the
  updated bf16 shard comes back up. The GPU keeps its weights and its gradient buffer
  (fp32 main gradients, as Megatron accumulates them over the microbatches).
* **ZeRO-Infinity parameter offload** (Rajbhandari et al., SC21): with ZeRO stage 3
  the bf16 parameter shards live in the tier as well and are fetched over the link before
  every forward and every backward all-gather; the GPU keeps only the gathered working
  set (the two prefetched layers of ZeRO-3, ``stage.comm_buffer_bytes``). When the CPU
  updates the parameters there is no upload; when the optimizer stays on the GPU the
  updated shard goes down instead.

The shard a GPU updates is its ZeRO shard: ``params / (dp x cp)`` with ZeRO >= 1, else all of
its stage's parameters (each data-parallel rank then runs the same step).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.costmodel import constants as C
from planner.costmodel.numerics import Numerics
from planner.costmodel.train.stage import StateBytes, state_bytes
from planner.specs.cluster import OffloadTier


@dataclass(frozen=True)
class OffloadTimes:
    """Per GPU. ``grad_down_s`` and ``step_s`` and ``param_copy_s`` once per iteration;
    ``fetch_s`` per microbatch and per pass (forward, and again in backward)."""

    grad_down_s: float  # gradient shard, GPU -> tier; overlaps the last backward
    step_s: float  # Adam on the CPU; exposed
    param_copy_s: float  # updated bf16 shard across the link; exposed
    fetch_s: float  # parameter shard, tier -> GPU, for one pass over the stage's layers


def optimizer_shard(params_local: float, zero: int, dp_cp: int) -> float:
    """Parameters whose optimizer step this GPU runs (its ZeRO-1 shard)."""
    return params_local / (dp_cp if zero >= 1 else 1)


def host_state_bytes(params_local: float, zero: int, dp_cp: int, dtype: Numerics | str,
                     offload_optimizer: bool, offload_params: bool) -> StateBytes:
    """Bytes one GPU's offloaded states take in the tier: the optimizer shard (12 B) and
    its fp32 gradients (4 B) under ZeRO-Offload; the bf16 weight shard under
    ZeRO-Infinity parameter offload."""
    on_gpu = state_bytes(params_local, zero, dp_cp, dtype)
    shard = optimizer_shard(params_local, zero, dp_cp)
    return StateBytes(
        weights=on_gpu.weights if offload_params else 0.0,
        gradients=shard * C.GRAD_BYTES if offload_optimizer else 0.0,
        optimizer=on_gpu.optimizer if offload_optimizer else 0.0,
    )


def offload_times(tier: OffloadTier, params_local: float, zero: int, dp_cp: int,
                  dtype: Numerics | str,
                  offload_optimizer: bool, offload_params: bool) -> OffloadTimes:
    """Link transfers and the CPU step of one GPU (ZeRO-Offload's data flow: gradients
    down, update on the CPU, parameters up; ZeRO-Infinity: parameters fetched per pass)."""
    link = tier.effective_Bps
    shard = optimizer_shard(params_local, zero, dp_cp)
    grad = shard * C.GRAD_BYTES / link if offload_optimizer else 0.0
    step = shard / tier.cpu_adam_params_per_s if offload_optimizer else 0.0
    # the updated shard crosses the link when the optimizer and the parameters live apart
    copy = shard * Numerics.of(dtype).param_comm_bytes / link if offload_optimizer != offload_params else 0.0
    fetch = (state_bytes(params_local, zero, dp_cp, dtype).weights / link
             if offload_params else 0.0)
    return OffloadTimes(grad, step, copy, fetch)


def missing_tier_reason(plan_offload_optimizer: bool, plan_offload_params: bool,
                        cluster_name: str) -> str:
    """Why an offloading plan cannot run on a cluster without an offload tier."""
    fields = [f"{k}=true" for k, on in (("offload_optimizer", plan_offload_optimizer),
                                         ("offload_params", plan_offload_params)) if on]
    return (f"{' and '.join(fields)} needs an offload memory tier, but cluster "
            f"'{cluster_name}' has none (add an `offload:` block to the cluster file: "
            "capacity_gib_per_gpu, bandwidth_GBps, cpu_adam_params_per_s)")
