"""Map a Hugging Face ``config.json`` to a :class:`ModelSpec`.

Supported ``model_type`` values: llama, mistral, mixtral, qwen2, qwen2_moe, gpt2.
"""

from __future__ import annotations

from typing import Any, Callable

from planner.errors import InputError
from planner.specs.loaders import validate
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
    "gpt2": _gpt2,
}


def model_from_hf(cfg: dict[str, Any], source: str, name: str | None = None) -> ModelSpec:
    kind = cfg.get("model_type")
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
