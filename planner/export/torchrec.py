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
tables ``NAME_0 .. NAME_{count-1}``. Data-parallel tables have ``sharding_spec: null``, as
``torchrec/distributed/sharding_plan.py`` ``_get_parameter_sharding`` writes them.
"""

from __future__ import annotations

from typing import Any

from planner.errors import InputError
from planner.specs.cluster import ClusterSpec
from planner.specs.dlrm import DLRMPlan, DLRMSpec, EmbeddingTable, TablePlacement


#: FBGEMM's table-batched embedding kernels take only embedding dims that are multiples of 4
#: (fbgemm_gpu/split_table_batched_embeddings_ops_training.py construct_split_state,
#: v1.8.0), and TorchRec asserts it per shard (``local_cols % 4 == 0`` in
#: torchrec/distributed/batched_embedding_kernel.py BatchedFusedEmbeddingBag, @a48cef79);
#: data-parallel tables train in the dense kernel, which has no such rule
TBE_DIM_MULTIPLE = 4


def shard_dim(t: EmbeddingTable, p: TablePlacement) -> int:
    """Columns of each shard of ``t`` placed as ``p``."""
    return t.dim // p.shards if p.sharding_type == "column_wise" else t.dim


def check_tbe_dims(model: DLRMSpec, plan: DLRMPlan) -> None:
    """Refuse a plan whose sharded tables FBGEMM's kernels cannot hold."""
    tables = {t.name: t for t in model.tables}
    for p in plan.tables:
        t = tables[p.table]
        d = shard_dim(t, p)
        if p.sharding_type != "data_parallel" and d % TBE_DIM_MULTIPLE:
            split = f" in {p.shards} column shards of {d}" if d != t.dim else ""
            pad = -(-t.dim // (TBE_DIM_MULTIPLE * p.shards)) * TBE_DIM_MULTIPLE * p.shards
            raise InputError(
                f"cannot write the TorchRec plan: table {t.name!r} ({p.sharding_type}, dim "
                f"{t.dim}{split}): {d} is not a multiple of {TBE_DIM_MULTIPLE}, which FBGEMM's "
                "embedding kernels require (fbgemm_gpu construct_split_state; TorchRec "
                f"asserts local_cols % 4 == 0); give the table dim {pad} in the model file")


def torchrec_plan(model: DLRMSpec, cluster: ClusterSpec, plan: DLRMPlan) -> dict[str, Any]:
    """``{"parameter_constraints": {table: {...}}, "sharding_plan": {table: {...}}}``;
    :class:`InputError` when a sharded table's shards are not FBGEMM-sized."""
    check_tbe_dims(model, plan)
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
    else:  # data-parallel: TorchRec's ParameterSharding has no spec (sharding_plan.py)
        return {"sharding_type": p.sharding_type, "compute_kernel": p.torchrec_kernel,
                "ranks": ranks, "sharding_spec": None}
    return {"sharding_type": p.sharding_type, "compute_kernel": p.torchrec_kernel, "ranks": ranks,
            "sharding_spec": [{"shard_offsets": off, "shard_sizes": size,
                               "placement": f"rank:{r}/cuda:{r % node}"}
                              for (off, size), r in zip(shards, ranks)]}
