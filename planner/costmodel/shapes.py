"""The key of a layer's cost: its local shape, its strategy, its view of the network, and
the per-layer cost record; shared by dense and mixture-of-experts layers."""

from __future__ import annotations

from dataclasses import dataclass

from planner.specs.cluster import TopologyLevel
from planner.specs.model import ModelSpec


@dataclass(frozen=True)
class LayerShape:
    """What one GPU holds of one layer for one microbatch."""

    tp: int
    cp: int
    mbs: int
    seq: int
    ep: int = 1  # expert parallelism (MoE layers only)
    etp: int = 1  # expert tensor parallelism (MoE layers only)

    @property
    def tokens(self) -> float:
        """Tokens per GPU per microbatch (the sequence is split by cp)."""
        return self.mbs * self.seq / self.cp


@dataclass(frozen=True)
class LayerStrategy:
    recompute: str = "none"
    sequence_parallel: bool = False
    tp_comm: str = "allreduce"
    attention: str = "flash"
    cp_comm: str = "ring"
    overlap_tp_comm: bool | str = False  # True, False or "auto" (the faster, per layer)
    dtype: str = "bf16"
    layer_type: str = "dense"
    fused_elementwise: bool = True
    overlap_ep_comm: bool = False  # MoE layers: Megatron-Core combined 1F1B A2A overlap


@dataclass(frozen=True)
class Net:
    """The network as seen by one layer: levels and the TP/CP group spans on them."""

    levels: tuple[TopologyLevel, ...]
    tp_spans: tuple[int, ...]
    cp_spans: tuple[int, ...]
    chunks: int = 64
    ep_spans: tuple[int, ...] = ()  # the expert-parallel group (MoE layers)
    etp_spans: tuple[int, ...] = ()  # the expert tensor-parallel group (MoE layers)


@dataclass(frozen=True)
class LayerCost:
    """Per layer, per microbatch, on one GPU. Times in seconds, memory in bytes."""

    fwd_s: float
    bwd_s: float
    recompute_s: float
    tp_comm_s: float
    cp_comm_s: float
    ep_comm_s: float
    act_bytes: float
    workspace_bytes: float
    recompute_flops: float
    padding_flops: float = 0.0  # expert GEMM work on capacity padding (MoE), fwd + bwd

    @property
    def total_s(self) -> float:
        return (self.fwd_s + self.bwd_s + self.recompute_s + self.tp_comm_s + self.cp_comm_s
                + self.ep_comm_s)


def local_dims(model: ModelSpec, tp: int) -> tuple[float, float, float, float]:
    """(query width, key/value width, FFN width, heads) held by one TP rank.

    With more TP ranks than KV heads the KV heads are replicated (Megatron-LM GQA).
    """
    q_loc = model.q_dim / tp
    kv_loc = model.dim_head * max(model.kv_heads / tp, 1.0)
    f_loc = model.ffn_hidden_size / tp
    heads_loc = model.num_attention_heads / tp
    return q_loc, kv_loc, f_loc, heads_loc
