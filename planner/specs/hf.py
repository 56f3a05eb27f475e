"""Map a Hugging Face ``config.json`` to a :class:`ModelSpec`.

Supported ``model_type`` values: llama, mistral, mixtral, qwen2, qwen2_moe, deepseek_v3,
gpt2. Every field the cost model needs is read; a missing one, an unknown ``model_type``
or an unsupported value is an :class:`InputError` that names the field.
"""

from __future__ import annotations

from typing import Any, Callable

from planner.errors import InputError
from planner.specs.validate import validate
from planner.specs.model import ModelSpec


def is_hf_config(data: dict[str, Any]) -> bool:
    return "model_type" in data or "architectures" in data


def _need(cfg: dict[str, Any], key: str, source: str, family: str) -> Any:
    if key not in cfg or cfg[key] is None:
        raise InputError(f"{source}: {family} config.json is missing '{key}', which the cost model needs")
    return cfg[key]


def _llama_like(cfg: dict[str, Any], source: str, family: str) -> dict[str, Any]:
    g = lambda k: _need(cfg, k, source, family)  # noqa: E731
    heads = g("num_attention_heads")
    act = cfg.get("hidden_act", "silu")
    if act not in ("silu", "swish", "gelu", "gelu_new", "gelu_pytorch_tanh"):
        raise InputError(f"{source}: hidden_act '{act}' is not supported; expected silu or gelu")
    return {
        "num_layers": g("num_hidden_layers"),
        "hidden_size": g("hidden_size"),
        "num_attention_heads": heads,
        "num_kv_heads": cfg.get("num_key_value_heads") or heads,
        "head_dim": cfg.get("head_dim"),
        "ffn_hidden_size": g("intermediate_size"),
        "ffn_type": "swiglu" if act in ("silu", "swish") else "gelu",
        "vocab_size": g("vocab_size"),
        "seq_len": g("max_position_embeddings"),
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", False)),
        "norm_type": "rmsnorm",
        "position_embedding": "rope",
    }


def _llama(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    return _llama_like(cfg, source, cfg.get("model_type", "llama"))


def _mixtral(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    out = _llama_like(cfg, source, "mixtral")
    out["moe"] = {
        "num_experts": _need(cfg, "num_local_experts", source, "mixtral"),
        "top_k": _need(cfg, "num_experts_per_tok", source, "mixtral"),
        "expert_ffn_hidden_size": out["ffn_hidden_size"],
    }
    return out


def _qwen2_moe(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    out = _llama_like(cfg, source, "qwen2_moe")
    g = lambda k: _need(cfg, k, source, "qwen2_moe")  # noqa: E731
    shared = cfg.get("shared_expert_intermediate_size") or 0
    step = cfg.get("decoder_sparse_step", 1) or 1
    mlp_only = set(cfg.get("mlp_only_layers") or [])
    layers = out["num_layers"]
    moe_layers = [i for i in range(layers) if i not in mlp_only and (i + 1) % step == 0]
    out["moe"] = {
        "num_experts": g("num_experts"),
        "top_k": g("num_experts_per_tok"),
        "expert_ffn_hidden_size": g("moe_intermediate_size"),
        "num_shared_experts": 1 if shared else 0,
        "shared_expert_ffn_hidden_size": shared or None,
        "moe_layers": moe_layers,
    }
    return out


def _deepseek_v3(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """DeepSeek-V3: multi-head latent attention, the first k layers dense, then MoE with
    shared experts (DeepSeek-AI 2024, config.json of deepseek-ai/DeepSeek-V3)."""
    fam = "deepseek_v3"
    g = lambda k: _need(cfg, k, source, fam)  # noqa: E731
    out = _llama_like(cfg, source, fam)
    nope, rope = g("qk_nope_head_dim"), g("qk_rope_head_dim")
    out["head_dim"] = nope + rope
    out["mla"] = {
        "q_lora_rank": cfg.get("q_lora_rank"),  # null in DeepSeek-V2-Lite: full-rank query
        "kv_lora_rank": g("kv_lora_rank"),
        "qk_rope_head_dim": rope,
        "v_head_dim": g("v_head_dim"),
    }
    out["moe"] = {
        "num_experts": g("n_routed_experts"),
        "top_k": g("num_experts_per_tok"),
        "expert_ffn_hidden_size": g("moe_intermediate_size"),
        "num_shared_experts": cfg.get("n_shared_experts") or 0,
        "first_k_dense": cfg.get("first_k_dense_replace") or 0,
        "every_n": cfg.get("moe_layer_freq") or 1,
    }
    return out


def _gpt2(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    g = lambda k: _need(cfg, k, source, "gpt2")  # noqa: E731
    hidden = g("n_embd")
    drop = any(float(cfg.get(k, 0) or 0) > 0 for k in ("resid_pdrop", "attn_pdrop", "embd_pdrop"))
    return {
        "num_layers": g("n_layer"),
        "hidden_size": hidden,
        "num_attention_heads": g("n_head"),
        "ffn_hidden_size": cfg.get("n_inner") or 4 * hidden,
        "ffn_type": "gelu",
        "vocab_size": g("vocab_size"),
        "seq_len": g("n_positions"),
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", True)),
        "norm_type": "layernorm",
        "position_embedding": "learned",
        "bias": True,
        "dropout": drop,
    }


FAMILIES: dict[str, Callable[[dict[str, Any], str], dict[str, Any]]] = {
    "llama": _llama,
    "mistral": _llama,
    "qwen2": _llama,
    "mixtral": _mixtral,
    "qwen2_moe": _qwen2_moe,
    "deepseek_v3": _deepseek_v3,
    "gpt2": _gpt2,
}


def model_from_hf(cfg: dict[str, Any], source: str, name: str | None = None) -> ModelSpec:
    kind = cfg.get("model_type")
    if kind is None:
        raise InputError(f"{source}: config.json has no 'model_type'; expected one of "
                         f"{', '.join(sorted(FAMILIES))}")
    if kind not in FAMILIES:
        raise InputError(
            f"{source}: model_type '{kind}' is not supported; supported families: "
            f"{', '.join(sorted(FAMILIES))}"
        )
    data = FAMILIES[kind](cfg, source)
    data["name"] = name or cfg.get("_name_or_path") or f"{kind}-from-config"
    data["source"] = f"Hugging Face config.json ({source})"
    data = {k: v for k, v in data.items() if v is not None}
    return validate(ModelSpec, data, source)
