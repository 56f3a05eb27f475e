"""Application inputs: the transformer being trained."""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import Field, PositiveInt, model_validator

from planner.specs.base import Spec, notes_field
from planner.specs.names import Name

LayerType = Literal["dense", "moe"]
LAYER_TYPES: tuple[LayerType, ...] = ("dense", "moe")
#: Largest global batch (sequences) and sequence length (tokens) accepted: 16,777,216, far
#: above any published run (DeepSeek-V3: 15,360 sequences; Llama 4 Scout: 10M-token
#: context). The search enumerates divisors of the batch, so the bound bounds its time.
MAX_GLOBAL_BATCH = 1 << 24
MAX_SEQ_LEN = 1 << 24
#: 10,000 layers is 100x the deepest published model; the bound keeps per-layer lists
#: (layer_kinds, a Hugging Face config's MoE layer list) finite.
MAX_LAYERS = 10_000


class MoESpec(Spec):
    """Mixture-of-experts block (Switch/GShard/Mixtral/DeepSeek style)."""

    num_experts: PositiveInt
    top_k: PositiveInt = 2
    expert_ffn_hidden_size: PositiveInt
    num_shared_experts: int = Field(0, ge=0)
    shared_expert_ffn_hidden_size: PositiveInt | None = None
    capacity_factor: float | None = Field(None, gt=0)
    first_k_dense: int = Field(0, ge=0, description="the first k layers are dense")
    every_n: PositiveInt = Field(1, description="after the first k, every n-th layer is MoE")
    moe_layers: list[int] | None = Field(None, description="explicit 0-based MoE layer indices")

    @model_validator(mode="after")
    def _check(self) -> "MoESpec":
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k={self.top_k} exceeds num_experts={self.num_experts}")
        return self


class MLASpec(Spec):
    """Multi-head latent attention (DeepSeek-AI 2024, DeepSeek-V2 Sec. 2.1; DeepSeek-V3):
    low-rank query and key/value projections. ``head_dim`` of the model is the query/key
    head width (``qk_nope_head_dim + qk_rope_head_dim``)."""

    q_lora_rank: int | None = Field(None, ge=1, description="None: a full-rank query projection")
    kv_lora_rank: PositiveInt
    qk_rope_head_dim: PositiveInt
    v_head_dim: PositiveInt


class ModelSpec(Spec):
    """A decoder-only transformer. Field names are the stable model-file format."""

    name: Name
    num_layers: int = Field(gt=0, le=MAX_LAYERS)
    hidden_size: PositiveInt
    num_attention_heads: PositiveInt
    num_kv_heads: PositiveInt | None = Field(None, description="GQA/MQA groups; default = heads")
    head_dim: PositiveInt | None = Field(None, description="default = hidden_size / heads")
    ffn_hidden_size: PositiveInt
    ffn_type: Literal["gelu", "swiglu"] = "gelu"
    vocab_size: PositiveInt
    seq_len: PositiveInt = Field(2048, le=MAX_SEQ_LEN)
    tied_embeddings: bool = False
    norm_type: Literal["layernorm", "rmsnorm"] = "layernorm"
    position_embedding: Literal["rope", "learned", "none"] = "rope"
    rope_theta: float = Field(10000.0, gt=0, allow_inf_nan=False,
                              description="RoPE base (Hugging Face rope_theta; Su et al. 2021 "
                              "and Megatron-LM's --rotary-base default: 10000)")
    bias: bool = Field(False, description="linear layers carry biases (GPT-2/3)")
    dropout: bool = Field(False, description="dropout layers store masks (GPT-3-era Megatron)")
    moe: MoESpec | None = None
    mla: MLASpec | None = Field(None, description="multi-head latent attention (DeepSeek)")
    global_batch_size: PositiveInt | None = Field(None, le=MAX_GLOBAL_BATCH,
                                                  description="default batch, sequences")
    dtype: Literal["bf16", "fp16", "fp8"] = "bf16"
    hf_id: Name | None = Field(None, description="the weights: a Hugging Face Hub repository "
                               "id (org/name) or a checkpoint path, which serving launch "
                               "commands load (vllm serve, sglang --model-path, trtllm-serve)")
    aliases: list[Name] = Field(default_factory=list)
    source: str | None = Field(None, description="where the figures come from (paper and "
                               "table, or repository, file and tag)")
    notes: str | None = notes_field()

    @model_validator(mode="after")
    def _check(self) -> "ModelSpec":
        kv = self.kv_heads
        if self.num_attention_heads % kv:
            raise ValueError(
                f"num_kv_heads={kv} must divide num_attention_heads={self.num_attention_heads}"
            )
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size={self.hidden_size} is not divisible by num_attention_heads="
                f"{self.num_attention_heads}; give head_dim explicitly"
            )
        if self.moe and self.moe.moe_layers:
            bad = [i for i in self.moe.moe_layers if not 0 <= i < self.num_layers]
            if bad:
                raise ValueError(f"moe.moe_layers has indices outside 0..{self.num_layers - 1}: {bad}")
        return self

    # ---- derived quantities -------------------------------------------------
    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_attention_heads

    @property
    def dim_head(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def q_dim(self) -> int:
        """Width of the query projection (heads x head_dim)."""
        return self.num_attention_heads * self.dim_head

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.dim_head

    @property
    def ffn_matrices(self) -> int:
        return 3 if self.ffn_type == "swiglu" else 2

    def layer_kinds(self) -> list[LayerType]:
        """Type of each layer, in order."""
        if self.moe is None:
            return ["dense"] * self.num_layers
        if self.moe.moe_layers is not None:
            chosen = set(self.moe.moe_layers)
            return ["moe" if i in chosen else "dense" for i in range(self.num_layers)]
        k, n = self.moe.first_k_dense, self.moe.every_n
        return [
            "moe" if i >= k and (i - k) % n == 0 else "dense" for i in range(self.num_layers)
        ]

    def layer_counts(self) -> dict[LayerType, int]:
        kinds = self.layer_kinds()
        return {t: kinds.count(t) for t in LAYER_TYPES if kinds.count(t)}

    @property
    def layer_types(self) -> tuple[LayerType, ...]:
        # read per candidate plan by the structural rules: worked out once per model
        return _layer_types(self)


@lru_cache(maxsize=256)
def _layer_types(model: ModelSpec) -> tuple[LayerType, ...]:
    """The layer types of ``model``, in :data:`LAYER_TYPES` order (a frozen spec: memoized
    on its content hash)."""
    return tuple(model.layer_counts())
