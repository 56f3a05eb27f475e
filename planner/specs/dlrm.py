"""Application inputs for recommendation models: a DLRM (Naumov et al. 2019,
arXiv 1906.00091): sparse features looked up in embedding tables and pooled, dense
features through a bottom MLP, a feature interaction, and a top MLP.

A model file says ``kind: dlrm``; :func:`planner.specs.loaders.load_model` returns a
:class:`DLRMSpec` for it. Every field is bounded so that no product of them (bytes of a
table, lookups of a batch) leaves the range where doubles count exactly.
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

from pydantic import Field, PositiveInt, model_validator

from planner.specs.base import Spec, notes_field
from planner.specs.names import Name

#: 1e12 rows is 100x the largest published table (DLRM-C's 732M rows, MAD-Max Sec. IV);
#: dims up to 65,536 and 1e5 lookups per sample keep rows x dim x bytes below 2^53.
MAX_ROWS = 10**12
MAX_DIM = 1 << 16
MAX_POOLING = 1e5
MAX_TABLE_COUNT = 100_000
MAX_TABLES = 100_000
MAX_MLP_WIDTH = 1 << 20
MAX_MLP_LAYERS = 1_000
#: Samples per iteration: 16M, 64x MAD-Max's largest (256K, DLRM-B).
MAX_GLOBAL_BATCH = 1 << 24

#: TorchRec's default share of a UVM-cached table's rows kept in HBM
#: (torchrec/distributed/planner/constants.py ``UVM_CACHING_RATIO = 0.2``).
DEFAULT_CACHE_LOAD_FACTOR = 0.2

EmbDtype = Literal["fp32", "fp16", "bf16", "int8"]
DenseDtype = Literal["fp32", "tf32", "bf16", "fp16"]
#: Bytes per element; fp32 dense layers run on TF32 tensor cores (MAD-Max Sec. III-B).
DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "int8": 1}


class EmbeddingTable(Spec):
    """One embedding table (an ``EmbeddingBagConfig`` in TorchRec terms)."""

    name: Name = Field(..., min_length=1, max_length=128)
    rows: int = Field(..., ge=1, le=MAX_ROWS, description="number of embedding rows")
    dim: int = Field(..., ge=1, le=MAX_DIM, description="embedding width")
    pooling: float = Field(..., gt=0, le=MAX_POOLING,
                           description="mean lookups per sample, pooled into one vector")
    count: int = Field(1, ge=1, le=MAX_TABLE_COUNT,
                       description="identical tables this entry stands for")
    skew: float = Field(0.0, ge=0, le=1, description=(
        "access skew for row sharding: the hottest of k row shards serves "
        "(1 + skew (k-1)) / k of the lookups (0 uniform, 1 all on one shard)"))
    cache_load_factor: float = Field(DEFAULT_CACHE_LOAD_FACTOR, gt=0, le=1, description=(
        "UVM caching (table kept in host memory): share of the rows the HBM cache holds"))
    cache_hit_rate: float | None = Field(None, ge=0, le=1, description=(
        "UVM caching: share of lookups served from the HBM cache; default the load factor "
        "(uniform access)"))

    @property
    def hit_rate(self) -> float:
        """Share of lookups the HBM cache serves under UVM caching: given, or, with every
        row equally likely, the share of rows it holds."""
        return self.cache_load_factor if self.cache_hit_rate is None else self.cache_hit_rate


class Interaction(Spec):
    """Feature interaction between the bottom MLP's output and the pooled embeddings.

    ``dot``: pairwise dot products of the F = tables + 1 vectors (DLRM, Naumov et al.
    2019, Sec. 2); ``dcnv2``: ``cross_layers`` full-rank cross layers over the
    concatenated vector (Wang et al. 2021, DCN-V2, Eq. 1); ``none``: concatenation with no
    interaction FLOPs, as MAD-Max's released DLRM configs (Hsia et al. 2024, the authors' released configs)."""

    kind: Literal["dot", "dcnv2", "none"] = "dot"
    cross_layers: int = Field(0, ge=0, le=64, description="dcnv2 only")

    @model_validator(mode="after")
    def _check(self) -> "Interaction":
        if self.kind == "dcnv2" and self.cross_layers < 1:
            raise ValueError("interaction.cross_layers: dcnv2 needs at least 1 cross layer")
        if self.kind != "dcnv2" and self.cross_layers:
            raise ValueError(f"interaction.cross_layers={self.cross_layers} is for kind dcnv2, "
                             f"got kind {self.kind!r}")
        return self


class DLRMSpec(Spec):
    """A DLRM-style recommendation model."""

    kind: Literal["dlrm"] = "dlrm"
    name: Name = Field(..., min_length=1, max_length=128)
    tables: list[EmbeddingTable] = Field(..., min_length=1, max_length=MAX_TABLES)
    dense_features: PositiveInt = Field(13, le=MAX_MLP_WIDTH,
                                        description="width of the bottom MLP's input")
    bottom_mlp: list[PositiveInt] = Field(..., min_length=1, max_length=MAX_MLP_LAYERS)
    top_mlp: list[PositiveInt] = Field(..., min_length=1, max_length=MAX_MLP_LAYERS)
    top_input_dim: PositiveInt | None = Field(
        None, le=MAX_MLP_WIDTH, description="top MLP input width; default from the interaction")
    interaction: Interaction = Field(default_factory=Interaction)
    global_batch_size: PositiveInt = Field(..., le=MAX_GLOBAL_BATCH)
    emb_dtype: EmbDtype = "fp16"
    dense_dtype: DenseDtype = "fp32"
    aliases: list[Name] = Field(default_factory=list)
    source: str | None = Field(None, description="where the figures come from (paper and "
                               "table, or repository, file and tag)")
    notes: str | None = notes_field()

    @model_validator(mode="after")
    def _check(self) -> "DLRMSpec":
        bad = [w for w in (*self.bottom_mlp, *self.top_mlp) if w > MAX_MLP_WIDTH]
        if bad:
            raise ValueError(f"MLP widths must be at most {MAX_MLP_WIDTH}, got {bad[:3]}")
        counts = Counter(t.name for t in self.tables)  # list.count: 3 s at 14,500 tables
        dup = sorted(n for n, k in counts.items() if k > 1)
        if dup:
            raise ValueError(f"tables: names must be unique, repeated: {dup[:5]}")
        if self.num_tables > MAX_TABLES:
            raise ValueError(f"tables: {self.num_tables} tables counting 'count'; at most "
                             f"{MAX_TABLES}")
        dims = {t.dim for t in self.tables}
        if self.interaction.kind == "dot" and (len(dims) > 1 or self.bottom_mlp[-1] not in dims):
            raise ValueError(
                f"interaction dot needs every table's dim and the bottom MLP's last width to "
                f"agree, got dims {sorted(dims)[:5]} and bottom_mlp[-1]={self.bottom_mlp[-1]}")
        return self

    # ---- derived quantities -------------------------------------------------
    @property
    def num_tables(self) -> int:
        return sum(t.count for t in self.tables)

    @property
    def emb_bytes(self) -> int:
        return DTYPE_BYTES[self.emb_dtype]

    @property
    def dense_bytes(self) -> int:
        return DTYPE_BYTES[self.dense_dtype]

    @property
    def embedding_params(self) -> int:
        return sum(t.rows * t.dim * t.count for t in self.tables)

    @property
    def pooled_dim(self) -> int:
        """Width of all pooled embeddings of one sample, concatenated."""
        return sum(t.dim * t.count for t in self.tables)

    @property
    def interaction_dim(self) -> int:
        """Width of the interaction's output (the top MLP's input unless overridden)."""
        f = self.num_tables + 1
        if self.interaction.kind == "dot":  # bottom output + F(F-1)/2 pairwise products
            return self.bottom_mlp[-1] + f * (f - 1) // 2
        return self.bottom_mlp[-1] + self.pooled_dim

    @property
    def top_in(self) -> int:
        return self.top_input_dim or self.interaction_dim

    def mlp_shapes(self, which: Literal["bottom", "top"]) -> list[tuple[int, int]]:
        """(input, output) width of each layer."""
        widths = ([self.dense_features, *self.bottom_mlp] if which == "bottom"
                  else [self.top_in, *self.top_mlp])
        return list(zip(widths[:-1], widths[1:]))

    @property
    def dense_params(self) -> int:
        """MLP (and DCN-V2 cross) weights and biases."""
        n = sum(i * o + o for s in ("bottom", "top") for i, o in self.mlp_shapes(s))  # type: ignore[arg-type]
        if self.interaction.kind == "dcnv2":
            d = self.bottom_mlp[-1] + self.pooled_dim
            n += self.interaction.cross_layers * (d * d + d)
        return n

    @property
    def total_params(self) -> int:
        return self.embedding_params + self.dense_params

    def table_bytes(self, t: EmbeddingTable) -> int:
        return t.rows * t.dim * self.emb_bytes


def is_dlrm(data: object) -> bool:
    """A model mapping that declares ``kind: dlrm``."""
    return isinstance(data, dict) and data.get("kind") == "dlrm"


# ---- plans -----------------------------------------------------------------------------
ShardingType = Literal["data_parallel", "table_wise", "row_wise", "column_wise",
                       "table_row_wise"]
#: TorchRec's ``EmbeddingComputeKernel`` values the plans use
#: (torchrec/distributed/embedding_types.py): FBGEMM's table-batched embedding with the
#: optimizer fused into backward, the table in HBM or in host memory behind an HBM cache.
ComputeKernel = Literal["fused", "fused_uvm_caching"]
#: TorchRec's ``ShardingType`` values (torchrec/distributed/types.py), in our order.
SHARDING_TYPES: tuple[str, ...] = ("data_parallel", "table_wise", "row_wise", "column_wise",
                                   "table_row_wise")


class TablePlacement(Spec):
    """``copies`` of one table entry sharded one way.

    ``table_wise`` and ``column_wise``: ``ranks`` maps a rank to the shards it holds
    (``shards`` per copy: 1 table-wise, the column split column-wise; a rank holds at most
    one shard of each copy); ``table_row_wise``: ``nodes`` maps a node to the copies
    row-sharded over its GPUs; ``data_parallel`` and ``row_wise`` use every rank."""

    table: Name
    sharding_type: ShardingType
    copies: int = Field(1, ge=1, le=MAX_TABLE_COUNT)
    shards: int = Field(1, ge=1, le=MAX_DIM, description="column shards per copy")
    ranks: dict[int, int] = Field(default_factory=dict)
    nodes: dict[int, int] = Field(default_factory=dict)
    compute_kernel: ComputeKernel = Field("fused", description=(
        "fused_uvm_caching (table_wise only): the table in the cluster's host memory, "
        "cache_load_factor of its rows cached in HBM"))

    @property
    def torchrec_kernel(self) -> str:
        """TorchRec's ``compute_kernel`` name: data-parallel tables train as ``dense``."""
        return "dense" if self.sharding_type == "data_parallel" else self.compute_kernel


class DLRMPlan(Spec):
    """A sharding plan: every table entry's copies, each placed one way."""

    tables: list[TablePlacement] = Field(..., min_length=1)
