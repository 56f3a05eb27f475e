"""A runtime profile applied to a cluster: one function for both workloads.

A training framework (:class:`planner.specs.framework.FrameworkProfile`) and a serving engine
(:class:`planner.specs.serve.ServeEngine`) are the same idea: a profile of which kernels run
and at what share of the GPU's measured speed. Each rewrites the GPU's efficiency, and
:func:`apply_profile` is the one place that does it: ``planner.api`` for an evaluation, the
training search space (``planner.orchestration.train.build_space``) and the serving step
(:mod:`planner.costmodel.serve.step`) all call it with the profile their request resolved
(the default per workload is declared once, in :mod:`planner.specs.requests`).
"""

from __future__ import annotations

from typing import Any, Union

from planner.costmodel.constants import LOSS_PEAK_BYTES_PER_LOGIT
from planner.specs.cluster import ClusterSpec
from planner.specs.framework import FrameworkProfile
from planner.specs.gpu import GPUSpec
from planner.specs.serve import ServeEngine

#: what runs a workload: a training framework or a serving engine
RuntimeProfile = Union[FrameworkProfile, ServeEngine]


def framework_efficiency(gpu: GPUSpec, profile: FrameworkProfile) -> dict[str, Any]:
    """The efficiency fields a training framework sets: the GPU's kernels become the
    framework's (its fused-attention backend, read from the GPU's kernel table; whether its
    sharding prefetches; its loss's fp32 buffers; its expert host time) and, where the
    profile was fitted on runs on this GPU, its framework-level parameters."""
    update: dict[str, Any] = {}
    backend = profile.kernels.attention_backend
    if backend != "unfused":  # unfused attention is the plan's attention=standard
        update["attention_backend"] = backend
    update["sharded_overlap"] = profile.kernels.fsdp_prefetch
    update["loss_bytes_per_logit"] = LOSS_PEAK_BYTES_PER_LOGIT[profile.kernels.cross_entropy]
    update["moe_expert_host_us"] = profile.kernels.moe_expert_host_us
    update["reduce_bucket_elements"] = profile.kernels.reduce_bucket_elements
    fit = profile.fit.get(gpu.name)
    if fit is not None:
        update["kernel_fraction"] = fit.kernel_fraction
        if fit.overlap_slowdown is not None:
            update["overlap_slowdown"] = fit.overlap_slowdown
    return update


def engine_efficiency(gpu: GPUSpec, engine: ServeEngine) -> dict[str, Any]:
    """The efficiency field a serving engine sets: its ``kernel_fraction`` of the measured
    kernel speeds, in place of the GPU file's (the training framework's fit)."""
    return {"kernel_fraction": engine.kernel_fraction}


def apply_profile(cluster: ClusterSpec, profile: RuntimeProfile | None) -> ClusterSpec:
    """``cluster`` as ``profile`` runs it: its GPU's efficiency with the fields the
    framework (:func:`framework_efficiency`) or the engine (:func:`engine_efficiency`)
    sets. ``None`` (training without a framework: the cost model's own kernels), or a
    profile that changes nothing, returns ``cluster`` itself. Applying a profile twice
    gives the cluster of applying it once."""
    if profile is None:
        return cluster
    if isinstance(profile, FrameworkProfile):
        update = framework_efficiency(cluster.gpu, profile)
    elif isinstance(profile, ServeEngine):
        update = engine_efficiency(cluster.gpu, profile)
    else:
        raise TypeError(f"apply_profile: expected a FrameworkProfile or a ServeEngine, got "
                        f"{type(profile).__name__}")
    eff = cluster.gpu.efficiency
    if all(getattr(eff, k) == v for k, v in update.items()):
        return cluster
    gpu = cluster.gpu.model_copy(update={"efficiency": eff.model_copy(update=update)})
    return cluster.model_copy(update={"gpu": gpu})
