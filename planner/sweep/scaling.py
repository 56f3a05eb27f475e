"""Hardware what-ifs: a point's scalings applied to GPU and cluster specs (model_copy, so
every derived quantity, from GEMM rooflines to collective times, follows from the one cost
model). Factors multiply the catalog value; ``nvs_domain`` sets the innermost domain's
GPU count (LBNL sweeps NVS 4, 8 and 64: Subramanian et al. 2024, Table A3)."""

from __future__ import annotations

import math
from typing import TypeVar

from pydantic import ValidationError

from planner.errors import InputError
from planner.specs.base import Spec
from planner.specs.validate import format_validation_error
from planner.specs.cluster import ClusterSpec, TopologyLevel
from planner.specs.gpu import GPUSpec
from planner.sweep.spec import Point, PointSpec
from planner.procurement import catalog_templates, named_templates
from planner.specs.loaders import load_cluster, load_gpu

T = TypeVar("T", bound=Spec)


def price_factor(gpu: GPUSpec, p: PointSpec) -> float:
    """``price`` times the ``price.<gpu>`` factor of this GPU type (names or aliases)."""
    f = p.price
    for name, g in p.gpu_price.items():
        if load_gpu(name).name == gpu.name:
            f *= g
    return f


def scaled_gpu(gpu: GPUSpec, p: PointSpec) -> GPUSpec:
    """The GPU with its peak FLOP/s (every dtype), HBM capacity and bandwidth, and its
    prices scaled."""
    f = price_factor(gpu, p)
    if (p.peak_flops, p.hbm_capacity, p.hbm_bandwidth, f) == (1, 1, 1, 1):
        return gpu
    price = None if gpu.price_per_gpu_hour is None else gpu.price_per_gpu_hour * f
    capex = None if gpu.capex_usd is None else gpu.capex_usd * f
    return gpu.model_copy(update={
        "peak_tflops": {k: v * p.peak_flops for k, v in gpu.peak_tflops.items()},
        "hbm_gib": gpu.hbm_gib * p.hbm_capacity, "hbm_TBps": gpu.hbm_TBps * p.hbm_bandwidth,
        "price_per_gpu_hour": price, "capex_usd": capex})


def _level_index(levels: list[TopologyLevel], ref: str, field: str) -> int:
    names = [lv.name for lv in levels]
    if ref in names:
        return names.index(ref)
    if ref.isdigit() and int(ref) < len(levels):
        return int(ref)
    raise InputError(f"{field}.{ref}: no such network level; the cluster's levels are "
                     f"{', '.join(f'{i} {n}' for i, n in enumerate(names))} (name or index)")


def scaled_levels(levels: list[TopologyLevel], p: PointSpec) -> list[TopologyLevel]:
    """Every level's bandwidth and latency times the network factors, then the per-level
    ones."""
    bw = [p.network_bandwidth] * len(levels)
    lat = [p.network_latency] * len(levels)
    for ref, f in p.level_bandwidth.items():
        bw[_level_index(levels, ref, "bandwidth")] *= f
    for ref, f in p.level_latency.items():
        lat[_level_index(levels, ref, "latency")] *= f
    out = []
    for lv, b, t in zip(levels, bw, lat):
        update: dict[str, float] = {"bandwidth_GBps": lv.bandwidth_GBps * b,
                                    "latency_us": lv.latency_us * t}
        if lv.link_GBps is not None:
            update["link_GBps"] = lv.link_GBps * b
        out.append(lv if (b, t) == (1, 1) else lv.model_copy(update=update))
    return out


def with_domain(cluster: ClusterSpec, size: int) -> ClusterSpec:
    """``cluster`` with ``size`` GPUs per innermost domain: the level above holds the rest
    (num_gpus unchanged). Two-level clusters only, as LBNL's (NVS domain and IB)."""
    n = cluster.num_gpus
    levels = list(cluster.topology)
    if size == levels[0].size:
        return cluster
    if len(levels) != 2 or n % size or size > n:
        shape = " x ".join(f"{lv.name} {lv.size}" for lv in levels)
        raise InputError(f"nvs_domain {size}: expected a divisor of the {n} GPUs of a two-level "
                         f"cluster (domain and network above it); this one is {shape}")
    levels = [levels[0].model_copy(update={"size": size}),
              levels[1].model_copy(update={"size": n // size})]
    node = cluster.gpus_per_node
    return cluster.model_copy(update={
        "topology": levels, "gpus_per_node": None if node is None else math.gcd(node, size)})


def _checked(spec: T, what: str) -> T:
    """``spec`` validated again: a scaled value must still be one its spec accepts (a
    latency of at most a second, finite numbers)."""
    try:
        return type(spec).model_validate(spec.model_dump())
    except ValidationError as err:
        raise InputError(format_validation_error(err, f"{what} after the point's scalings",
                                                 type(spec))
                         ) from None


def scaled_cluster(cluster: ClusterSpec, p: PointSpec) -> ClusterSpec:
    """``cluster`` (already resized to the point's GPU count) with every scaling of ``p``."""
    out = cluster if p.nvs_domain is None else with_domain(cluster, p.nvs_domain)
    levels = [_checked(lv, f"network level {lv.name}")
              for lv in scaled_levels(list(out.topology), p)]
    price = out.price_per_gpu_hour
    update = {"gpu": _checked(scaled_gpu(out.gpu, p), f"GPU {out.gpu.name}"), "topology": levels,
              "price_per_gpu_hour": None if price is None else price * price_factor(out.gpu, p)}
    return out.model_copy(update=update)


#: what a factor axis scales, for plot labels: (name, the base value's text for a GPU)
_GPU_AXES = {
    # HBM capacity in GB as the datasheets state it (the catalog holds GiB)
    "hbm_capacity": ("HBM capacity", lambda g: f"{g.hbm_gib * 2**30 / 1e9:,.0f} GB"),
    "hbm_bandwidth": ("HBM bandwidth", lambda g: f"{g.hbm_TBps:g} TB/s"),
    "peak_flops": ("peak FLOP/s", lambda g: f"{g.peak_flops('bf16') / 1e12:,.0f} TFLOP/s "
                   "bf16"),
}


def _base_clusters(p: PointSpec) -> list[ClusterSpec]:
    """The unscaled clusters a point runs on: its cluster, or its procure templates."""
    if p.command == "solve":
        return [load_cluster(p.cluster, p.gpus)] if p.cluster else []
    names = p.gpu_types.split(",") if p.gpu_types else None
    return named_templates(p.clusters.split(","), names) if p.clusters else \
        catalog_templates(names)


def _level_text(cluster: ClusterSpec, ref: str, field: str) -> str:
    lv = cluster.topology[_level_index(list(cluster.topology), ref, field)]
    return f"{lv.bandwidth_GBps:g} GB/s" if field == "bandwidth" else f"{lv.latency_us:g} us"


def axis_label(name: str, points: list[Point]) -> str:
    """A plot label for axis ``name`` that names what a factor scales and its base value,
    e.g. ``HBM capacity, x 180 GB`` (``points``: the expanded sweep); the bare name when
    the axis is no factor, or the base differs between the points' clusters."""
    head, _, level = name.partition(".")
    if name not in _GPU_AXES and not (head in ("bandwidth", "latency") and level):
        return name
    # the clusters once per distinct setting (a grid repeats them at every scaling)
    where = {(p.spec.command, p.spec.cluster, p.spec.gpus, p.spec.gpu_types, p.spec.clusters):
             p.spec for p in points}
    clusters = [c for spec in where.values() for c in _base_clusters(spec)]
    if name in _GPU_AXES:
        what, text = _GPU_AXES[name]
        bases = {text(c.gpu) for c in clusters}
    else:
        what = f"{level} {head}"
        bases = {_level_text(c, level, head) for c in clusters}
    if len(bases) != 1:
        return f"{what} (factor on each GPU's)" if name in _GPU_AXES else f"{what} (factor)"
    return f"{what}, x {bases.pop()}"


def axis_labels(axes: list[str], points: list[Point]) -> dict[str, str]:
    """:func:`axis_label` of every axis; a point whose cluster cannot be loaded leaves the
    names bare (the sweep reports that point's error in its row)."""
    try:
        return {a: axis_label(a, points) for a in axes}
    except InputError:
        return {a: a for a in axes}
