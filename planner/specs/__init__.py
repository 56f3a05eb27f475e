"""Typed, frozen specifications: application (model), system (GPU, cluster), execution (plan)."""

from planner.specs.cluster import ClusterSpec, TopologyLevel
from planner.specs.gpu import GPUEfficiency, GPUSpec
from planner.specs.model import LAYER_TYPES, ModelSpec, MoESpec
from planner.specs.plan import DEFAULT_ORDER, DIMS, WORLD_DIMS, Placement, Plan

__all__ = [
    "ClusterSpec",
    "TopologyLevel",
    "GPUEfficiency",
    "GPUSpec",
    "ModelSpec",
    "MoESpec",
    "LAYER_TYPES",
    "Plan",
    "Placement",
    "DIMS",
    "WORLD_DIMS",
    "DEFAULT_ORDER",
]
