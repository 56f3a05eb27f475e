"""A DLRM sharding plan in TorchRec's terms: per-table ``ParameterConstraints`` (which
pin the planner's choice) and a ``ParameterSharding`` per table (sharding type, compute
kernel, ranks, shard offsets and sizes), as plain data.

Names checked in pytorch/torchrec@a48cef79 (2025-10-04):
``torchrec/distributed/types.py`` ``ShardingType`` values (data_parallel, table_wise,
column_wise, row_wise, table_row_wise) and ``ParameterSharding`` (sharding_type,
compute_kernel, ranks, sharding_spec); ``torchrec/distributed/planner/types.py``
``ParameterConstraints`` (sharding_types, compute_kernels, min_partition,
pooling_factors); ``torchrec/distributed/embedding_types.py`` ``EmbeddingComputeKernel``
("fused": FBGEMM's TBE with the optimizer fused into backward, the kernel the cost model
assumes; "fused_uvm_caching": the table in host memory behind an HBM cache, with
``ParameterConstraints.cache_params`` a ``CacheParams`` whose ``load_factor`` sizes the
cache (torchrec/distributed/types.py); "dense" for data-parallel tables). Shards are ``ShardMetadata`` (shard_offsets,
shard_sizes, placement ``rank:R/cuda:L``). A table entry with ``count`` > 1 becomes
tables ``NAME_0 .. NAME_{count-1}``.
"""

from __future__ import annotations

from typing import Any

from planner.specs.cluster import ClusterSpec
from planner.specs.dlrm import DLRMPlan, DLRMSpec, EmbeddingTable, TablePlacement


def torchrec_plan(model: DLRMSpec, cluster: ClusterSpec, plan: DLRMPlan) -> dict[str, Any]:
    """``{"parameter_constraints": {table: {...}}, "sharding_plan": {table: {...}}}``."""
    tables = {t.name: t for t in model.tables}
    used = {t.name: 0 for t in model.tables}
    constraints: dict[str, Any] = {}
    sharding: dict[str, Any] = {}
    for p in plan.tables:
        t = tables[p.table]
        for ranks in _copies(cluster, p):
            name = t.name if t.count == 1 else f"{t.name}_{used[t.name]}"
            used[t.name] += 1
            constraints[name] = _constraint(t, p)
            sharding[name] = _sharding(t, p, ranks, cluster.topology[0].size)
    return {"parameter_constraints": constraints, "sharding_plan": sharding}


def _constraint(t: EmbeddingTable, p: TablePlacement) -> dict[str, Any]:
    out: dict[str, Any] = {"sharding_types": [p.sharding_type],
                           "compute_kernels": [p.torchrec_kernel], "pooling_factors": [t.pooling]}
    if p.sharding_type == "column_wise":
        out["min_partition"] = t.dim // p.shards
    if p.compute_kernel == "fused_uvm_caching":
        out["cache_params"] = {"load_factor": t.cache_load_factor}
    return out


def _copies(cluster: ClusterSpec, p: TablePlacement) -> list[list[int]]:
    """The ranks of each copy: table- and column-wise copies take the ranks with the most
    shards left (a copy's column shards on distinct ranks), table-row-wise copies a
    node's ranks, the others every rank."""
    node = cluster.topology[0].size
    if p.sharding_type in ("data_parallel", "row_wise"):
        return [list(range(cluster.num_gpus))] * p.copies
    if p.sharding_type == "table_row_wise":
        return [list(range(g * node, (g + 1) * node))
                for g, k in sorted(p.nodes.items()) for _ in range(k)]
    left = dict(p.ranks)
    out = []
    for _ in range(p.copies):
        pick = sorted(left, key=lambda r: (-left[r], r))[:p.shards]
        for r in pick:
            left[r] -= 1
        out.append(sorted(pick))
    return out


def _sharding(t: EmbeddingTable, p: TablePlacement, ranks: list[int],
              node: int) -> dict[str, Any]:
    """One ``ParameterSharding``: row blocks for row-wise kinds, column blocks for
    column-wise, the whole table otherwise."""
    k = len(ranks)
    if p.sharding_type in ("row_wise", "table_row_wise"):
        block = -(-t.rows // k)
        shards = [([i * block, 0], [max(0, min(block, t.rows - i * block)), t.dim])
                  for i in range(k)]
    elif p.sharding_type == "column_wise":
        w = t.dim // k
        shards = [([0, i * w], [t.rows, w]) for i in range(k)]
    elif p.sharding_type == "table_wise":
        shards = [([0, 0], [t.rows, t.dim])]
    else:
        shards = []
    return {"sharding_type": p.sharding_type, "compute_kernel": p.torchrec_kernel, "ranks": ranks,
            "sharding_spec": [{"shard_offsets": off, "shard_sizes": size,
                               "placement": f"rank:{r}/cuda:{r % node}"}
                              for (off, size), r in zip(shards, ranks)]}
