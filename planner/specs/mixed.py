"""Mixed fleets: a cluster of several GPU pools joined by one network level, and a
training plan whose pipeline stages sit on different pools (issue 39 item 3).

A pool is a whole single-type cluster (its GPU, node and NVLink/InfiniBand levels); the
pools are joined by :class:`PoolLink`, the network a GPU of one pool reaches a GPU of
another over. A :class:`MixedPlan` keeps one tensor/context/data-parallel shape for every
stage and gives each pipeline stage its pool and its number of layers, the per-stage
split Megatron-LM's ``--pipeline-model-parallel-layout`` states ("stages are split by
'|'": NVIDIA/Megatron-LM docs/api-guide/pipeline_parallel_layout.md, commit 2d2c30c).
All data-parallel replicas of a stage are on the stage's pool, so every replica runs the
same microbatches; replicas of different GPU types with the batch split by speed are not
part of this plan (docs/mixed.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from planner.errors import InputError
from planner.specs.base import Spec, notes_field
from planner.specs.cluster import ClusterSpec, TopologyLevel
from planner.specs.names import Name
from planner.specs.plan import Plan
from planner.specs.loaders import cluster_from_dict, load_cluster, read_structured
from planner.specs.validate import validate


class PoolLink(Spec):
    """The network level joining the pools: what one GPU of a pool has to a GPU of
    another pool, per direction (as ``TopologyLevel.bandwidth_GBps``)."""

    name: Name = Field(..., description="the level's name (shown in breakdowns)")
    bandwidth_GBps: PositiveFloat = Field(
        ..., description="per GPU per direction between pools, GB/s (400 Gb/s = 50 GB/s)")
    latency_us: float = Field(10.0, ge=0, le=1e6, description="one-way latency between "
                              "pools, microseconds")
    efficiency: float = Field(1.0, gt=0, le=1, description="achieved share of bandwidth")
    source: str | None = Field(None, description="where the figures come from")

    def level(self, pools: int) -> TopologyLevel:
        """The join as the outermost level of a pool's network (``pools`` units)."""
        return TopologyLevel(name=self.name, kind="switch", size=pools,
                             bandwidth_GBps=self.bandwidth_GBps, latency_us=self.latency_us,
                             efficiency=self.efficiency)


class GPUPool(Spec):
    """One pool: a single-type cluster and the name stages refer to it by."""

    name: Name = Field(..., description="the pool's name, used by MixedStage.pool")
    cluster: ClusterSpec = Field(..., description="the pool's GPUs and network levels")


class MixedClusterSpec(Spec):
    """Several GPU pools joined by one network level."""

    name: Name = Field(..., description="the mixed cluster's name")
    pools: list[GPUPool] = Field(..., min_length=2, description="the pools, two or more")
    join: PoolLink = Field(..., description="the network level between pools")
    source: str | None = Field(None, description="where the figures come from")
    notes: str | None = notes_field()

    @model_validator(mode="after")
    def _check(self) -> "MixedClusterSpec":
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise ValueError(f"pools: names must be unique, got {names}")
        for p in self.pools:
            # a GPU reaches the other pool through its own NIC: the join cannot give it more
            # than its pool's outermost level does
            outer = p.cluster.topology[-1]
            if self.join.bandwidth_GBps > outer.bandwidth_GBps:
                raise ValueError(
                    f"join.bandwidth_GBps={self.join.bandwidth_GBps:g} exceeds pool "
                    f"'{p.name}''s outermost level '{outer.name}' ({outer.bandwidth_GBps:g} "
                    "GB/s per GPU): a GPU reaches another pool through its own network "
                    "port, so the join is at most that")
        return self

    @property
    def num_gpus(self) -> int:
        return sum(p.cluster.num_gpus for p in self.pools)

    def pool(self, name: str) -> GPUPool:
        for p in self.pools:
            if p.name == name:
                return p
        raise InputError(f"pool '{name}': expected one of {', '.join(self.pool_names)}")

    @property
    def pool_names(self) -> list[str]:
        return [p.name for p in self.pools]


class MixedStage(Spec):
    """One pipeline stage: its pool and how many transformer layers it holds."""

    pool: Name = Field(..., description="the pool (MixedClusterSpec.pools[].name)")
    layers: PositiveInt = Field(..., description="transformer layers on this stage "
                                "(embedding on the first stage, LM head on the last)")


class MixedPlan(Spec):
    """A training plan over a mixed cluster: ``plan`` gives the shared settings (tp, cp,
    dp, microbatch, recomputation, ZeRO ...; ``plan.pp`` is the number of stages),
    ``stages`` each stage's pool and layer count, first stage first."""

    plan: Plan = Field(..., description="settings every stage shares; pp = len(stages)")
    stages: list[MixedStage] = Field(..., min_length=1, description="pipeline stages in "
                                     "order, each with its pool and layer count")

    @model_validator(mode="after")
    def _check(self) -> "MixedPlan":
        if len(self.stages) != self.plan.pp:
            raise ValueError(f"stages: {len(self.stages)} stages given but plan.pp="
                             f"{self.plan.pp}; give one entry per pipeline stage")
        if self.plan.virtual_stages != 1:
            raise ValueError(f"plan.virtual_stages={self.plan.virtual_stages}: interleaved "
                             "chunks are not modelled on mixed plans (expected 1)")
        return self

    @property
    def layers(self) -> list[int]:
        return [s.layers for s in self.stages]

    @property
    def pools(self) -> list[str]:
        return [s.pool for s in self.stages]


class _PoolRef(Spec):
    """A pool as a cluster file gives it."""

    name: Name = Field(..., description="the pool's name")
    cluster: str | dict[str, Any] = Field(
        ..., description="a catalog cluster name, a cluster file, or an inline cluster "
        "mapping (gpu, num_gpus, topology ...)")
    num_gpus: PositiveInt | None = Field(None, description="resize the cluster to this "
                                         "many GPUs (its outermost level grows or shrinks)")


class _MixedFile(Spec):
    name: Name = Field(..., description="the mixed cluster's name")
    pools: list[_PoolRef] = Field(..., min_length=2, description="the pools")
    join: PoolLink = Field(..., description="the network level between pools")
    source: str | None = Field(None, description="where the figures come from")
    notes: str | None = notes_field()


def is_mixed(data: Any) -> bool:
    """Whether a cluster file's data is a mixed cluster (it has ``pools``)."""
    return isinstance(data, dict) and "pools" in data


def mixed_from_dict(data: dict[str, Any], source: str) -> MixedClusterSpec:
    """A mixed cluster from a file's data: each pool's cluster resolved (catalog name,
    file or inline mapping) and resized to its ``num_gpus``."""
    raw = validate(_MixedFile, data, source)
    pools = []
    for i, ref in enumerate(raw.pools):
        where = f"{source}: pools.{i} ({ref.name})"
        if isinstance(ref.cluster, str):
            cluster = load_cluster(ref.cluster)
        else:
            cluster = cluster_from_dict(ref.cluster, where)
        if ref.num_gpus is not None and ref.num_gpus != cluster.num_gpus:
            try:
                cluster = cluster.resized(ref.num_gpus)
            except ValueError as err:
                raise InputError(f"{where}: num_gpus: {err}") from None
        pools.append({"name": ref.name, "cluster": cluster})
    return validate(MixedClusterSpec, {"name": raw.name, "pools": pools, "join": raw.join,
                                       "source": raw.source, "notes": raw.notes}, source)


def load_mixed_cluster(ref: str | Path) -> MixedClusterSpec:
    """A mixed cluster file (YAML or JSON with ``pools`` and ``join``)."""
    path = Path(ref)
    if not path.is_file():
        raise InputError(f"mixed cluster '{ref}': no such file")
    data = read_structured(path)
    if not is_mixed(data):
        raise InputError(f"{ref}: not a mixed cluster (expected a 'pools' list and a "
                         "'join' level)")
    return mixed_from_dict(data, str(ref))
