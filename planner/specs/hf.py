"""Map a Hugging Face ``config.json`` to a :class:`ModelSpec`.

Supported ``model_type`` values: llama, mistral, mixtral, qwen2, qwen2_moe, deepseek_v3,
gpt2. Every field the cost model needs is read; a missing one, an unknown ``model_type``
or an unsupported value is an :class:`InputError` that names the field.
"""

from __future__ import annotations

from typing import Any, Callable

from planner.errors import InputError
from planner.specs.validate import _short, validate
from planner.specs.model import MAX_LAYERS, ModelSpec
from planner.specs.names import check_name


def is_hf_config(data: dict[str, Any]) -> bool:
    return "model_type" in data or "architectures" in data


def _need(cfg: dict[str, Any], key: str, source: str, family: str,
          maximum: int | None = None) -> int:
    """A required integer field (every size and count the cost model reads)."""
    if key not in cfg or cfg[key] is None:
        raise InputError(f"{source}: {family} config.json is missing '{key}', which the cost model needs")
    value = _opt_int(cfg, key, source)
    assert value is not None
    if maximum is not None and value > maximum:
        raise InputError(f"{source}: {key} {_short(value)}: expected an integer from 1 to "
                         f"{maximum:,}")
    return value


def _opt_int(cfg: dict[str, Any], key: str, source: str, minimum: int = 1,
             default: int | None = None) -> int | None:
    """An integer field, at least ``minimum``; ``default`` when absent or null."""
    value = cfg.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(f"{source}: {key} {_short(value)}: expected an integer >= {minimum}")
    return value


def _int_list(cfg: dict[str, Any], key: str, source: str) -> list[int]:
    value = cfg.get(key) or []
    if not isinstance(value, list) or any(
            isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in value):
        raise InputError(f"{source}: {key} {_short(value)}: expected a list of layer indices "
                         "(>= 0)")
    return value


def _rate(cfg: dict[str, Any], key: str, source: str) -> float:
    """A probability field (dropout rates): a number in [0, 1]; 0 when absent."""
    value = cfg.get(key, 0) or 0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise InputError(f"{source}: {key} {_short(value)}: expected a number from 0 to 1")
    return float(value)


def _llama_like(cfg: dict[str, Any], source: str, family: str) -> dict[str, Any]:
    g = lambda k: _need(cfg, k, source, family)  # noqa: E731
    heads = g("num_attention_heads")
    act = cfg.get("hidden_act", "silu")
    if act not in ("silu", "swish", "gelu", "gelu_new", "gelu_pytorch_tanh"):
        raise InputError(f"{source}: hidden_act '{act}' is not supported; expected silu or gelu")
    return {
        "num_layers": _need(cfg, "num_hidden_layers", source, family, MAX_LAYERS),
        "hidden_size": g("hidden_size"),
        "num_attention_heads": heads,
        "num_kv_heads": _opt_int(cfg, "num_key_value_heads", source, default=heads),
        "head_dim": _opt_int(cfg, "head_dim", source),
        "ffn_hidden_size": g("intermediate_size"),
        "ffn_type": "swiglu" if act in ("silu", "swish") else "gelu",
        "vocab_size": g("vocab_size"),
        "seq_len": g("max_position_embeddings"),
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", False)),
        "norm_type": "rmsnorm",
        "position_embedding": "rope",
        "rope_theta": _rope_theta(cfg, source),
    }


def _rope_theta(cfg: dict[str, Any], source: str) -> float:
    """The RoPE base; 10000 when absent (the transformers default for these families)."""
    value = cfg.get("rope_theta", 10000.0)
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not 0 < value < float("inf")):
        raise InputError(f"{source}: rope_theta {_short(value)}: expected a positive number")
    return float(value)


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
    shared = _opt_int(cfg, "shared_expert_intermediate_size", source, 0, 0)
    step = _opt_int(cfg, "decoder_sparse_step", source, 1, 1)
    mlp_only = set(_int_list(cfg, "mlp_only_layers", source))
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
        "q_lora_rank": _opt_int(cfg, "q_lora_rank", source),  # null in DeepSeek-V2-Lite: full-rank query
        "kv_lora_rank": g("kv_lora_rank"),
        "qk_rope_head_dim": rope,
        "v_head_dim": g("v_head_dim"),
    }
    out["moe"] = {
        "num_experts": g("n_routed_experts"),
        "top_k": g("num_experts_per_tok"),
        "expert_ffn_hidden_size": g("moe_intermediate_size"),
        "num_shared_experts": _opt_int(cfg, "n_shared_experts", source, 0, 0),
        "first_k_dense": _opt_int(cfg, "first_k_dense_replace", source, 0, 0),
        "every_n": _opt_int(cfg, "moe_layer_freq", source, 1, 1),
    }
    return out


def _gpt2(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    g = lambda k: _need(cfg, k, source, "gpt2")  # noqa: E731
    hidden = g("n_embd")
    drop = any(_rate(cfg, k, source) > 0 for k in ("resid_pdrop", "attn_pdrop", "embd_pdrop"))
    return {
        "num_layers": g("n_layer"),
        "hidden_size": hidden,
        "num_attention_heads": g("n_head"),
        "ffn_hidden_size": _opt_int(cfg, "n_inner", source, default=4 * hidden),
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
    if kind is not None and not isinstance(kind, str):
        raise InputError(f"{source}: model_type {_short(kind)}: expected a string, one of "
                         f"{', '.join(sorted(FAMILIES))}")
    if kind is None:
        raise InputError(f"{source}: config.json has no 'model_type'; expected one of "
                         f"{', '.join(sorted(FAMILIES))}")
    if kind not in FAMILIES:
        raise InputError(
            f"{source}: model_type '{kind}' is not supported; supported families: "
            f"{', '.join(sorted(FAMILIES))}"
        )
    data = FAMILIES[kind](cfg, source)
    given = cfg.get("_name_or_path")
    if isinstance(given, str):  # a downloaded config's name lands in launch scripts
        check_name(given, f"{source}: _name_or_path")
    data["name"] = name or given or f"{kind}-from-config"
    data["hf_id"] = given if isinstance(given, str) and given else None
    data["source"] = f"Hugging Face config.json ({source})"
    data = {k: v for k, v in data.items() if v is not None}
    return validate(ModelSpec, data, source)
