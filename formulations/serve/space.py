"""The serving search space and its tables: every replica layout (GPU type, tp, pp, ep,
concurrency, weight and KV dtype, prefill chunk) of every pool, evaluated once by the
serving cost model into integer rows the integer models and the brute force share.

Capacities are micro-requests/s (``SCALE``), floored: a row promises at most what the
evaluator says one replica takes within the SLOs, short by under 1e-6 requests/s. The
per-replica objective coefficients are integers too (GPUs; micro-dollars per hour;
milliwatts), so CP-SAT, the MILP and the brute force solve the same integer problem.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from planner.costmodel.energy import energy_coefficients, price_per_gpu_hour
from planner.costmodel.serve.evaluate import (
    aggregated_capacity_rps,
    cluster_for,
    decode_capacity_rps,
    kv_transfer_s,
    prefill_capacity_rps,
    replica_perf,
)
from planner.costmodel.serve.step import max_concurrency
from pydantic import ValidationError

from planner.errors import InputError
from planner.specs.cluster import ClusterSpec
from planner.specs.model import ModelSpec
from planner.specs.serve import ServeEngine, ServePlan, ServeWorkload
from planner.specs.validate import format_validation_error
from planner.specs.loaders import framework_spelling
from planner.specs.serve import WeightDtype

SCALE = 10**6  # capacities in micro-requests/s
OBJECTIVES = ("gpus", "cost", "energy", "throughput")
POOLS = {"aggregated": ("aggregated",), "disaggregated": ("prefill", "decode")}
#: Knobs ``--fix`` may pin, with the space's field that holds their choices.
FIXABLE = ("tp", "pp", "ep", "concurrency", "weight_dtype", "kv_dtype", "prefill_chunk", "gpu",
           "mode")


@dataclass(frozen=True)
class ServeSpace:
    """The choices of each knob. ``ep`` None: 1, and ``tp`` for MoE models."""

    tp: tuple[int, ...] = (1, 2, 4, 8)
    pp: tuple[int, ...] = (1, 2)
    ep: tuple[int, ...] | None = None
    concurrency: tuple[int, ...] = tuple(2**i for i in range(11))  # 1 .. 1024
    # unquantized and FP8 (where the GPU has it); int4/fp4 change accuracy more and are
    # searched only when asked (--weight-dtypes)
    weight_dtype: tuple[str, ...] = ("bf16", "fp8")
    kv_dtype: tuple[str, ...] = ("bf16", "fp8")
    prefill_chunk: tuple[int, ...] = (512, 2048, 8192)
    mode: tuple[str, ...] = ("aggregated", "disaggregated")
    gpu: tuple[str, ...] | None = None  # None: every cluster given


def weight_dtypes(text: str) -> tuple[str, ...]:
    """``--weight-dtypes`` (comma-separated) as the space's allow-list, checked."""
    from typing import get_args

    known = get_args(WeightDtype)
    out = tuple(dict.fromkeys(t.strip().lower() for t in text.split(",") if t.strip()))
    bad = [t for t in out if t not in known]
    if bad or not out:
        raise InputError(f"--weight-dtypes {text!r}: expected a comma-separated list of "
                         f"{', '.join(known)}" + (f" ({bad[0]!r} is none)" if bad else ""))
    return out


def fixed_space(space: ServeSpace, fix: dict) -> ServeSpace:
    """``space`` with the fixed knobs pinned (checked against the spec's types)."""
    bad = sorted(set(fix) - set(FIXABLE))
    if bad:
        known = framework_spelling(bad[0])
        said = f" ({bad[0]} is {known} here)" if known in FIXABLE else ""
        raise InputError(f"--fix {bad[0]}: not a serving knob{said}; expected one of "
                         f"{', '.join(FIXABLE)}")
    probe = {k: v for k, v in fix.items() if k not in ("mode", "gpu")}
    if "ep" in probe and "tp" not in probe and isinstance(probe["ep"], int):
        probe["tp"] = probe["ep"]  # checked alone here; tp is searched among multiples of ep
    try:
        ServePlan.model_validate({**probe, "ep": 1} if "ep" not in probe else probe)
    except ValidationError as e:  # names the field, the value and what was expected
        raise InputError(format_validation_error(e, "--fix")) from None
    if "mode" in fix and fix["mode"] not in POOLS:
        raise InputError(f"--fix mode={fix['mode']!r}: expected aggregated or disaggregated")
    return ServeSpace(**{f: (tuple(fix[f]) if isinstance(fix.get(f), (list, tuple)) else
                             (fix[f],)) if f in fix else getattr(space, f)
                         for f in ServeSpace.__dataclass_fields__})


@dataclass(frozen=True)
class Row:
    """One replica layout of one pool, as the integer models see it."""

    pool: str  # aggregated, prefill or decode
    plan: ServePlan  # one replica
    cluster: ClusterSpec  # with the row's GPU
    gpus: int
    cap: int  # micro-requests/s one replica takes within the SLOs
    coef: dict = field(default_factory=dict)  # objective -> integer per replica


def _coefficients(cluster: ClusterSpec, gpus: int) -> dict[str, int | None]:
    price = price_per_gpu_hour(cluster)
    a, b = energy_coefficients(cluster, gpus)
    return {"gpus": gpus, "cost": None if price is None else round(price * gpus * 1e6),
            "energy": round((a + b) * 1e3)}


def _eps(model: ModelSpec, space: ServeSpace, tp: int) -> tuple[int, ...]:
    if space.ep is not None:
        return tuple(e for e in space.ep if tp % e == 0)
    return (1, tp) if model.moe is not None and tp > 1 else (1,)


def _layouts(model: ModelSpec, clusters: list[ClusterSpec], space: ServeSpace):
    """(cluster, base plan) per GPU type, tp, pp, ep, dtypes: concurrency and chunk apart."""
    for cluster in clusters:
        if space.gpu is not None and not {cluster.gpu.name, *cluster.gpu.aliases} & set(space.gpu):
            continue
        for tp in space.tp:
            for pp in space.pp:
                for ep in _eps(model, space, tp):
                    for wd in space.weight_dtype:
                        for kv in space.kv_dtype:
                            yield cluster, ServePlan(tp=tp, pp=pp, ep=ep, weight_dtype=wd,
                                                     kv_dtype=kv, gpu=cluster.gpu.name)


def _cap(pool: str, model, cluster, plan, w, engine) -> float:
    perf = replica_perf(model, cluster, plan, w.isl, w.osl, engine)
    if perf is None:
        return 0.0
    if pool == "aggregated":
        return aggregated_capacity_rps(perf, plan, w)
    if pool == "decode":
        return decode_capacity_rps(perf, plan, w)
    return prefill_capacity_rps(perf, w, kv_transfer_s(model, cluster, plan, w.isl))


def pool_rows(model: ModelSpec, clusters: list[ClusterSpec], w: ServeWorkload, pool: str,
              space: ServeSpace, engine: ServeEngine) -> list[Row]:
    """Every layout of ``pool`` whose replica meets the SLOs at some load, as a row.
    A concurrency above what fits in HBM is skipped before any timing."""
    return _pool_rows(model, clusters, w, pool, space, engine)[0]


def _pool_rows(model: ModelSpec, clusters: list[ClusterSpec], w: ServeWorkload, pool: str,
               space: ServeSpace, engine: ServeEngine, deadline: float | None = None,
               until_first: bool = False) -> tuple[list[Row], bool]:
    """:func:`pool_rows`, and whether every layout was tabulated: past ``deadline``
    (:func:`time.perf_counter`) the rest is left out, unless ``until_first`` and no row has
    been found yet."""
    rows = []
    for cluster, base in _layouts(model, clusters, space):
        cluster = cluster_for(cluster, base)
        batches = space.concurrency if pool != "prefill" else (min(space.concurrency),)
        chunks = space.prefill_chunk if pool != "decode" else (min(space.prefill_chunk),)
        for chunk in chunks:
            if deadline is not None and time.perf_counter() > deadline and (
                    rows or not until_first):
                return rows, False
            probe = base.model_copy(update={"prefill_chunk": chunk})
            try:
                most = max_concurrency(model, cluster, probe, w.isl, w.osl)
            except Exception:  # a layout the placement refuses: no row
                most = 0
            for b in batches:
                if b > most and pool != "prefill":
                    continue
                plan = probe.model_copy(update={"concurrency": b})
                cap = math.floor(_cap(pool, model, cluster, plan, w, engine) * SCALE)
                if cap > 0:
                    rows.append(Row(pool, plan, cluster, plan.gpus_per_replica, cap,
                                    _coefficients(cluster, plan.gpus_per_replica)))
    return rows, True


def tables(model: ModelSpec, clusters: list[ClusterSpec], w: ServeWorkload,
           space: ServeSpace, engine: ServeEngine
           ) -> dict[str, dict[str, list[Row]]]:
    """mode -> pool -> rows, for each mode in the space."""
    return timed_tables(model, clusters, w, space, engine)[0]


def timed_tables(model: ModelSpec, clusters: list[ClusterSpec], w: ServeWorkload,
                 space: ServeSpace, engine: ServeEngine,
                 deadline: float | None = None
                 ) -> tuple[dict[str, dict[str, list[Row]]], bool]:
    """:func:`tables` within ``deadline`` (:func:`time.perf_counter`), and whether they are
    complete. Tabulating is most of a search's time (seconds per thousand layouts); past
    the deadline it goes on only while no mode has a row in each of its pools (no plan
    yet), each pool to its first row."""
    out: dict[str, dict[str, list[Row]]] = {}
    complete = True
    for mode in space.mode:
        out[mode] = {}
        for pool in POOLS[mode]:
            servable = any(all(pools.values()) for done_mode, pools in out.items()
                           if done_mode != mode)
            rows, done = _pool_rows(model, clusters, w, pool, space, engine, deadline,
                                    until_first=not servable)
            out[mode][pool] = rows
            complete = complete and done
    return out, complete
