"""The plan fields a query starts from: the model's defaults, the caller's batch, sequence
length and dtype, and (for ``evaluate``) a plan file with command-line overrides."""

from __future__ import annotations

from typing import Any, Callable

from planner.errors import InputError
from planner.specs.cluster import ClusterSpec
from planner.specs.loaders import (
    apply_overrides,
    load_plan_dict,
    plan_from_dict,
    unknown_plan_keys,
)
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan


def model_defaults(model: ModelSpec) -> dict[str, Any]:
    """Plan fields a model's catalog entry provides (batch, sequence length, dtype)."""
    out: dict[str, Any] = {"seq_len": model.seq_len, "dtype": model.dtype}
    if model.global_batch_size:
        out["global_batch_size"] = model.global_batch_size
    return out


def base_overrides(global_batch_size: int | None = None, seq_len: int | None = None,
                   dtype: str | None = None) -> dict[str, Any]:
    """The base plan fields the caller gives: those of ``global_batch_size``, ``seq_len`` and
    ``dtype`` that are not ``None`` (the rest keep the model's defaults)."""
    return {k: v for k, v in (("global_batch_size", global_batch_size), ("seq_len", seq_len),
                              ("dtype", dtype)) if v is not None}


def plan_base(model: ModelSpec, *, global_batch_size: int | None = None,
              seq_len: int | None = None, dtype: str | None = None,
              source: str | None = None) -> dict[str, Any]:
    """The base plan fields of a solve or procurement: the model's defaults, overridden by
    the arguments given (``None`` keeps the default). Raises :class:`InputError` when
    neither gives a global batch size."""
    data = model_defaults(model)
    data.update(base_overrides(global_batch_size, seq_len, dtype))
    require_batch(model, data, source)
    return data


def require_batch(model: ModelSpec, data: dict[str, Any], source: str | None = None) -> None:
    """Raise :class:`InputError` unless ``data`` has a global batch size."""
    if "global_batch_size" not in data:
        where = f"{source}: " if source else ""
        raise InputError(f"{where}global_batch_size is not set and model '{model.name}' has no "
                         "default; pass --global-batch N")


def build_plan(model: ModelSpec, cluster: ClusterSpec, plan_path: str | None,
               overrides: list[tuple[str, Any]], warnings: list[str] | None = None,
               fill: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> Plan:
    """A plan from ``plan_path`` (optional) plus overrides; missing fields come from the
    model's defaults, ``dp`` from the GPU count when not given, and then, with ``fill``,
    the fields it adds (a framework's defaults for what the plan leaves unstated)."""
    data: dict[str, Any] = {}
    source = "command-line plan"
    if plan_path:
        data = load_plan_dict(plan_path)
        source = plan_path
        unknown = unknown_plan_keys(data)
        if unknown:  # a misspelt field would leave its default in place unseen
            raise InputError(f"{plan_path}: unknown key{'s' if len(unknown) > 1 else ''} "
                             f"{', '.join(unknown)}; expected plan fields only")
    data = apply_overrides(data, overrides)
    for key, value in model_defaults(model).items():
        data.setdefault(key, value)
    require_batch(model, data, source)
    if "dp" not in data:
        used = 1
        for d in ("tp", "cp", "pp"):
            v = data.get(d, 1)
            if not isinstance(v, int) or v < 1:
                raise InputError(f"{source}: {d}: expected a positive integer, got {v!r}")
            used *= v
        if cluster.num_gpus % used:
            raise InputError(
                f"{source}: tp x cp x pp = {used} does not divide the {cluster.num_gpus} GPUs of "
                f"'{cluster.name}', so dp cannot be derived; give dp or resize with --gpus"
            )
        data["dp"] = cluster.num_gpus // used
    if fill is not None:
        data = fill(data)
    return plan_from_dict(data, source)


def require_one_iteration(tokens: float, sequences: int, seq_len: int) -> None:
    """Raise :class:`InputError` when ``tokens`` is fewer than one iteration's (``sequences``
    x ``seq_len``): a fraction of an iteration is no training run (``--tokens 1e-300``
    reported 2.4e-307 iterations)."""
    if tokens < sequences * seq_len:
        raise InputError(f"--tokens {tokens:g}: fewer than one iteration's "
                         f"{sequences * seq_len:,} tokens (global batch {sequences} x seq_len "
                         f"{seq_len}); expected at least that")
