"""Cost model of DLRM training: embedding tables sharded over ranks, MLPs data parallel.

One iteration (TorchRec's sharded embedding collections with a data-parallel dense part;
MAD-Max, Hsia et al. 2024, Sec. III and Fig. 6) runs
in phases; each sparse phase lasts as long as its slowest rank:

1. forward lookups: every rank gathers and pools the rows of the shards it holds;
2. forward output distribution: the pooled embeddings go to the ranks that own the
   samples (all-to-all for table-/column-wise shards, reduce-scatter of partial sums for
   row-wise, both for table-row-wise); the bottom MLP runs meanwhile;
3. interaction and top MLP, forward and backward;
4. backward distribution of the pooled gradients (the transpose collectives); the bottom
   MLP's backward runs meanwhile;
5. backward lookups with the fused row-wise Adagrad update; the all-reduce of the dense
   gradients (MLPs and data-parallel tables) runs meanwhile on the network;
6. the dense optimizer step.

A cluster with a host memory tier (``offload:``) also offers table-wise tables kept in
host memory behind an HBM cache (TorchRec's UVM caching, :func:`_uvm_cached`): less HBM,
the cache misses over the host link before the forward lookups.

Collective times come from :mod:`planner.costmodel.network` (affine in the bytes; the
formulation uses the same coefficients); GEMM times from :mod:`planner.costmodel.compute`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

from planner.costmodel.compose import headroom_bytes
from planner.costmodel.compute import elementwise_time_s, gemm_time_s
from planner.costmodel.network import collective_coeffs
from planner.specs.cluster import ClusterSpec
from planner.specs.dlrm import DLRMSpec, EmbeddingTable

#: Row-wise Adagrad keeps one fp32 accumulator per row (FBGEMM
#: ``EmbOptimType.EXACT_ROWWISE_ADAGRAD``, the TorchRec default for DLRM; fbgemm_gpu
#: split_table_batched_embeddings_ops_training.py ``momentum1`` of size rows).
ROWWISE_STATE_BYTES = 4
#: Dense Adagrad (TorchRec's DLRM example trains the MLPs with Adagrad): fp32 weights,
#: gradients and one fp32 accumulator per parameter; the step reads weight, gradient and
#: accumulator and writes weight and accumulator (5 x 4 B).
DENSE_STATE_BYTES = 4
DENSE_STEP_BYTES = 20
#: Column-wise splits the search offers (TorchRec shards columns in multiples of 4 wide,
#: torchrec/distributed/planner/enumerators.py; 2 and 4 splits cover its common choices).
CW_SPLITS = (2, 4)

PER_RANK = ("table_wise", "column_wise")
#: HBM per cache slot beside the row: FBGEMM's ``lxu_cache_state`` (the row's index,
#: int64) and ``lxu_state`` (LRU time stamp, int64), split_table_batched_embeddings_ops_training.py.
CACHE_SLOT_BYTES = 16


@dataclass(frozen=True)
class Links:
    """The cluster as the sharding sees it: ranks, nodes and collective coefficients
    (seconds per byte, fixed seconds) from :func:`network.collective_coeffs`."""

    ranks: int
    node: int
    batch: int
    lookup_Bps: float
    a2a: tuple[float, float]
    rs: tuple[float, float]
    ag: tuple[float, float]
    rs_node: tuple[float, float]
    ag_node: tuple[float, float]
    ar: tuple[float, float]
    host_Bps: float = 0.0  # GPU <-> host memory link per GPU (0: no host tier, no UVM)
    host_bytes: float = 0.0  # host memory per GPU for UVM-cached tables

    @property
    def nodes(self) -> int:
        return self.ranks // self.node

    @property
    def local_batch(self) -> float:
        return self.batch / self.ranks


@lru_cache(maxsize=256)
def links(model: DLRMSpec, cluster: ClusterSpec) -> Links:
    levels = tuple(cluster.topology)
    world = tuple(lv.size for lv in levels)
    node = (levels[0].size,) + (1,) * (len(levels) - 1)
    chunks = cluster.collective_chunks

    def co(op: str, spans: tuple[int, ...]) -> tuple[float, float]:
        return collective_coeffs(op, spans, levels, chunks)  # type: ignore[arg-type]

    gpu = cluster.gpu
    frac = gpu.efficiency.embedding_lookup_fraction or gpu.efficiency.hbm_fraction
    return Links(ranks=cluster.num_gpus, node=levels[0].size, batch=model.global_batch_size,
                 lookup_Bps=gpu.hbm_Bps * frac, a2a=co("all_to_all", world),
                 rs=co("reduce_scatter", world), ag=co("all_gather", world),
                 rs_node=co("reduce_scatter", node), ag_node=co("all_gather", node),
                 ar=co("allreduce", world),
                 host_Bps=cluster.offload.effective_Bps if cluster.offload else 0.0,
                 host_bytes=cluster.offload.capacity_bytes if cluster.offload else 0.0)


@dataclass(frozen=True)
class ShardCost:
    """What one shard of one copy of a table costs the rank holding it."""

    lookup_fwd_s: float
    lookup_bwd_s: float
    comm_fwd_s: float
    comm_bwd_s: float
    memory_bytes: int
    host_bytes: int = 0  # in the cluster's host memory tier (UVM caching)


@dataclass(frozen=True)
class Option:
    """One way to shard a table. ``scope``: ``ranks`` (``shards`` ranks each hold one
    shard of a copy), ``node`` (every rank of one node holds a row shard), ``all`` (every
    rank). ``recv_bytes``: pooled embeddings each rank receives per copy and pass;
    ``allreduce_bytes``: dense gradient per copy joining the data-parallel all-reduce;
    ``collective``: which output collective it uses (for its fixed latency)."""

    kind: str
    shards: int
    scope: str
    cost: ShardCost
    recv_bytes: float = 0.0
    allreduce_bytes: int = 0
    collective: str = ""
    kernel: str = "fused"  # TorchRec EmbeddingComputeKernel (specs.dlrm.ComputeKernel)


def _lookup_s(ln: Links, samples: float, lookups: float, dim: int, eb: int) -> tuple[float, float]:
    """(forward, backward) time of ``lookups`` row reads of ``dim`` elements pooled into
    ``samples`` vectors: forward reads the rows and writes the pooled vectors; backward
    reads the pooled gradients, reads and writes each row and its Adagrad accumulator."""
    fwd = lookups * dim * eb + samples * dim * eb
    bwd = samples * dim * eb + lookups * (2 * dim * eb + 2 * ROWWISE_STATE_BYTES)
    return fwd / ln.lookup_Bps, bwd / ln.lookup_Bps


def _hot_share(t: EmbeddingTable, k: int) -> float:
    """Share of a table's lookups on its hottest of ``k`` row shards (spec: ``skew``)."""
    return (1 + t.skew * (k - 1)) / k


def _shard_memory(rows: int, dim: int, eb: int, batch: int) -> int:
    """Rows, their Adagrad accumulators, and the pooled output and its gradient."""
    return rows * (dim * eb + ROWWISE_STATE_BYTES) + 2 * batch * dim * eb


def _sharded(ln: Links, t: EmbeddingTable, eb: int, kind: str, k: int) -> Option:
    """Table-wise (k = 1) and column-wise (k column shards) on ``k`` distinct ranks."""
    B, ds = ln.batch, t.dim // k
    f, b = _lookup_s(ln, B, B * t.pooling, ds, eb)
    out = B * ds * eb
    comm = ln.a2a[0] * out
    cost = ShardCost(f, b, comm, comm, _shard_memory(t.rows, ds, eb, B))
    return Option(kind, k, "ranks", cost, recv_bytes=ln.local_batch * t.dim * eb,
                  collective="a2a")


def _uvm_cached(ln: Links, t: EmbeddingTable, eb: int) -> Option:
    """Table-wise with the table in host memory and ``cache_load_factor`` of its rows in
    an HBM cache (FBGEMM ``EmbeddingLocation.MANAGED_CACHING``, TorchRec
    ``fused_uvm_caching``). Before the forward lookups the missed rows come over the host
    link (the evicted rows go back the other way at the same time); lookups and the fused
    update then run on the cache as in HBM. Row-wise optimizer state stays in HBM for
    every row (FBGEMM ``construct_split_state``: a managed table's row-wise state is
    placed on the device)."""
    base = _sharded(ln, t, eb, "table_wise", 1)
    row_bytes = t.dim * eb
    miss_s = (1.0 - t.hit_rate) * ln.batch * t.pooling * row_bytes / ln.host_Bps
    # the fused shard's HBM less its rows (now in host memory), plus the cache
    hbm = (base.cost.memory_bytes - t.rows * row_bytes
           + math.ceil(t.cache_load_factor * t.rows) * (row_bytes + CACHE_SLOT_BYTES))
    cost = replace(base.cost, lookup_fwd_s=base.cost.lookup_fwd_s + miss_s, memory_bytes=hbm,
                   host_bytes=t.rows * row_bytes)
    return replace(base, cost=cost, kernel="fused_uvm_caching")


def _row_wise(ln: Links, t: EmbeddingTable, eb: int) -> Option:
    """Rows split over all ranks; partial sums reduce-scattered (backward: all-gather)."""
    B, n = ln.batch, ln.ranks
    f, b = _lookup_s(ln, B, B * t.pooling * _hot_share(t, n), t.dim, eb)
    out = B * t.dim * eb
    cost = ShardCost(f, b, ln.rs[0] * out, ln.ag[0] * out,
                     _shard_memory(-(-t.rows // n), t.dim, eb, B))
    return Option("row_wise", n, "all", cost, collective="rs")


def _table_row_wise(ln: Links, t: EmbeddingTable, eb: int) -> Option:
    """Rows split over one node's ranks: partial sums reduce-scattered inside the node,
    then each rank's 1/G slice goes out by the all-to-all (TorchRec TWRW)."""
    B, g = ln.batch, ln.node
    f, b = _lookup_s(ln, B, B * t.pooling * _hot_share(t, g), t.dim, eb)
    out = B * t.dim * eb
    cf = ln.rs_node[0] * out + ln.a2a[0] * out / g
    cb = ln.ag_node[0] * out + ln.a2a[0] * out / g
    cost = ShardCost(f, b, cf, cb, _shard_memory(-(-t.rows // g), t.dim, eb, B))
    return Option("table_row_wise", g, "node", cost, recv_bytes=ln.local_batch * t.dim * eb,
                  collective="twrw")


def _data_parallel(ln: Links, t: EmbeddingTable, eb: int) -> Option:
    """Replicated: local-batch lookups, a dense gradient all-reduced with the MLPs' and a
    dense update of every row (TorchRec DATA_PARALLEL tables train under DDP)."""
    b = ln.local_batch
    f, bw = _lookup_s(ln, b, b * t.pooling, t.dim, eb)
    update = t.rows * (2 * t.dim * eb + 2 * ROWWISE_STATE_BYTES) / ln.lookup_Bps
    mem = t.rows * (2 * t.dim * eb + ROWWISE_STATE_BYTES) + 2 * math.ceil(b) * t.dim * eb
    return Option("data_parallel", 1, "all", ShardCost(f, bw + update, 0.0, 0.0, mem),
                  allreduce_bytes=t.rows * t.dim * eb)


def table_options(model: DLRMSpec, cluster: ClusterSpec, index: int,
                  kinds: tuple[str, ...] | None = None) -> list[Option]:
    """Every sharding option of table entry ``index`` (one copy), in a fixed order."""
    ln, t, eb = links(model, cluster), model.tables[index], model.emb_bytes
    out = [_data_parallel(ln, t, eb), _sharded(ln, t, eb, "table_wise", 1)]
    if ln.ranks > 1:
        out.append(_row_wise(ln, t, eb))
    out += [_sharded(ln, t, eb, "column_wise", k) for k in CW_SPLITS
            if t.dim % k == 0 and k <= ln.ranks]
    if ln.node > 1:
        out.append(_table_row_wise(ln, t, eb))
    if ln.host_Bps > 0:  # a host memory tier: the table may live there behind a cache
        out.append(_uvm_cached(ln, t, eb))
    return [o for o in out if kinds is None or o.kind in kinds]


# ---- the dense part ---------------------------------------------------------------------
@dataclass(frozen=True)
class DenseCost:
    """Data-parallel part, per rank: MLP and interaction times, the optimizer step, the
    gradient bytes all-reduced, and the memory it needs."""

    bottom_fwd_s: float
    bottom_bwd_s: float
    middle_s: float  # interaction and top MLP, forward and backward
    optimizer_s: float
    grad_bytes: int
    memory_bytes: int


def _mlp_s(cluster: ClusterSpec, model: DLRMSpec, shapes: list[tuple[int, int]],
           b: float) -> tuple[float, float]:
    """(forward, backward) GEMM time of an MLP on a local batch of ``b`` samples: forward
    (b x in) @ (in x out); backward the input- and weight-gradient GEMMs."""
    gpu, dt, eb = cluster.gpu, _compute_dtype(model), model.dense_bytes
    fwd = sum(gemm_time_s(gpu, dt, b, o, i, elem_bytes=eb) for i, o in shapes)
    bwd = sum(gemm_time_s(gpu, dt, b, i, o, elem_bytes=eb)
              + gemm_time_s(gpu, dt, i, o, b, elem_bytes=eb) for i, o in shapes)
    return fwd, bwd


def _compute_dtype(model: DLRMSpec) -> str:
    """FP32 dense layers run on TF32 tensor cores (MAD-Max Sec. III-B, A100 TF32)."""
    return "tf32" if model.dense_dtype in ("fp32", "tf32") else model.dense_dtype


def _interaction_s(cluster: ClusterSpec, model: DLRMSpec, b: float) -> float:
    """Forward + backward of the interaction: dot = a batched (F x d) @ (d x F) per
    sample; DCN-V2 = one (D x D) GEMM per cross layer; backward twice forward."""
    gpu, dt, eb, kind = cluster.gpu, _compute_dtype(model), model.dense_bytes, model.interaction
    if kind.kind == "dot":
        f, d = model.num_tables + 1, model.bottom_mlp[-1]
        return 3 * gemm_time_s(gpu, dt, f, f, d, batch=b, elem_bytes=eb)
    if kind.kind == "dcnv2":
        d = model.bottom_mlp[-1] + model.pooled_dim
        return 3 * kind.cross_layers * gemm_time_s(gpu, dt, b, d, d, elem_bytes=eb)
    return 0.0


def _activation_bytes(model: DLRMSpec, b: int) -> int:
    """Saved layer inputs and outputs of the MLPs and interaction, and the received
    pooled embeddings with their gradients, for ``b`` samples."""
    widths = sum(i + o for s in ("bottom", "top") for i, o in model.mlp_shapes(s))  # type: ignore[arg-type]
    dense = b * (widths + model.interaction_dim) * model.dense_bytes
    return dense + 2 * b * model.pooled_dim * model.emb_bytes


@lru_cache(maxsize=256)
def dense_cost(model: DLRMSpec, cluster: ClusterSpec) -> DenseCost:
    b = model.global_batch_size / cluster.num_gpus
    bf, bb = _mlp_s(cluster, model, model.mlp_shapes("bottom"), b)
    tf, tb = _mlp_s(cluster, model, model.mlp_shapes("top"), b)
    p = model.dense_params
    opt = elementwise_time_s(cluster.gpu, p * DENSE_STEP_BYTES)
    mem = p * (2 * model.dense_bytes + DENSE_STATE_BYTES) + _activation_bytes(model, math.ceil(b))
    return DenseCost(bf, bb, tf + tb + _interaction_s(cluster, model, b), opt,
                     p * model.dense_bytes, mem)


def usable_hbm_bytes(cluster: ClusterSpec) -> int:
    """HBM per GPU the plan may fill: capacity less the training path's headroom."""
    return int(cluster.gpu.hbm_bytes - headroom_bytes(cluster))
