"""Collectives on a hierarchical multi-level network, and group placement.

A parallel group of ``n`` GPUs is described by its *spans*: ``spans[i]`` members along
level ``i`` (innermost first), with ``prod(spans) == n``. Collectives run as in ASTRA-sim
2.0 (Rashidi et al. 2020/Won et al. 2023, Sec. II-B): reduce-scatter up the levels, then
all-gather back down; the data shrinks by the span at each level. Each GPU moves its
share at the level's per-GPU bandwidth, so a group whose members leave a domain together
uses all their links in parallel (the LBNL model's ``n_NIC`` rings, Sec. 2.10).

Levels are pipelined in chunks: ``T = max_i B_i + (sum_i B_i - max_i B_i)/C + latency``,
with ``B_i`` a level's bandwidth time and ``C`` the chunk count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, Sequence

from planner.specs.cluster import ClusterSpec, TopologyLevel
from planner.specs.plan import WORLD_DIMS, Plan

Op = Literal["allreduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce"]


def latency_steps(kind: str, k: int, op: str) -> int:
    """Algorithm steps of one phase: Ring p-1, FullyConnected (direct) 1, Switch
    halving-doubling log2 p (ASTRA-sim 2.0, Table "topology-aware collectives")."""
    if k <= 1:
        return 0
    if op == "all_to_all":
        return k - 1 if kind == "ring" else 1
    if kind == "ring":
        return k - 1
    if kind == "fully_connected":
        return 1
    return max(1, math.ceil(math.log2(k)))


@dataclass(frozen=True)
class LevelTraffic:
    """Bytes each GPU sends at one level, and the resulting time."""

    level: str
    bytes: float
    time_s: float


def level_traffic(op: Op, size_bytes: float, spans: Sequence[int],
                  levels: Sequence[TopologyLevel]) -> list[tuple[float, int]]:
    """(bytes sent per GPU, algorithm steps) at each level for one collective.

    ``size_bytes`` is the full buffer: the input of all-reduce, reduce-scatter and
    all-to-all, the output of all-gather.
    """
    out: list[tuple[float, int]] = []
    data = size_bytes
    for k, level in zip(spans, levels):
        if k <= 1:
            out.append((0.0, 0))
            continue
        frac = (k - 1) / k
        steps = latency_steps(level.kind, k, op)
        if op == "allreduce":
            if level.in_network_reduction and level.kind == "switch":
                # NVLS / SHARP: each GPU sends its data once and receives the result once.
                out.append((data, 2))
            else:
                out.append((2 * frac * data, 2 * steps))
            data /= k
        elif op in ("reduce_scatter", "all_gather", "broadcast", "reduce"):
            out.append((frac * data, steps))
            data /= k
        elif op == "all_to_all":
            out.append((frac * size_bytes, steps))
        else:  # pragma: no cover - guarded by the Op literal
            raise ValueError(op)
    return out


@lru_cache(maxsize=65536)
def collective_coeffs(op: Op, spans: tuple[int, ...], levels: tuple[TopologyLevel, ...],
                      chunks: int = 64) -> tuple[float, float]:
    """``(seconds per byte, fixed seconds)`` of a collective: its time is affine in the
    buffer size, ``T = a x size + b`` for any size > 0 (every level's traffic scales with
    the size). The formulations use these coefficients directly."""
    if math.prod(spans) <= 1:
        return 0.0, 0.0
    per_byte = []
    latency = 0.0
    for (nbytes, steps), level in zip(level_traffic(op, 1.0, spans, levels), levels):
        if nbytes <= 0:
            continue
        per_byte.append(nbytes / level.effective_Bps)
        latency += steps * level.latency_us * 1e-6
    if not per_byte:
        return 0.0, 0.0
    peak = max(per_byte)
    return peak + (sum(per_byte) - peak) / chunks, latency


def collective_time_s(op: Op, size_bytes: float, spans: Sequence[int],
                      levels: Sequence[TopologyLevel], chunks: int = 64) -> float:
    """Time of one collective over a group with the given spans."""
    if size_bytes <= 0:
        return 0.0
    a, b = collective_coeffs(op, tuple(spans), tuple(levels), chunks)
    if a == 0.0 and b == 0.0:
        return 0.0
    return a * size_bytes + b


def collective_breakdown(op: Op, size_bytes: float, spans: Sequence[int],
                         levels: Sequence[TopologyLevel]) -> list[LevelTraffic]:
    out = []
    for (nbytes, steps), level in zip(level_traffic(op, size_bytes, spans, levels), levels):
        t = nbytes / level.effective_Bps + steps * level.latency_us * 1e-6 if nbytes else 0.0
        out.append(LevelTraffic(level.name, nbytes, t))
    return out


def p2p_time_s(size_bytes: float, spans: Sequence[int], levels: Sequence[TopologyLevel]) -> float:
    """Send/recv between neighbours of a group: the slowest level the group crosses."""
    if size_bytes <= 0 or math.prod(spans) <= 1:
        return 0.0
    outer = max(i for i, k in enumerate(spans) if k > 1)
    level = levels[outer]
    return size_bytes / level.effective_Bps + level.latency_us * 1e-6


# ---- placement -----------------------------------------------------------------------
class PlacementError(ValueError):
    pass


def domain_factors(plan: Plan, domain_size: int) -> dict[str, int]:
    """GPUs of each world dimension inside one innermost domain."""
    degrees = tuple(plan.degree(d) for d in WORLD_DIMS)
    given = plan.placement.domain
    dom = tuple(int(given.get(d, 1)) for d in WORLD_DIMS) if given else None
    return dict(zip(WORLD_DIMS, _domain(degrees, dom, tuple(plan.placement.order), domain_size)))


def _domain(degrees: tuple[int, ...], given: tuple[int, ...] | None, order: tuple[str, ...],
            domain_size: int) -> tuple[int, ...]:
    job = math.prod(degrees)
    target = min(domain_size, job)
    if given:
        bad = [f"{d}={f} does not divide {d}={g}"
               for d, f, g in zip(WORLD_DIMS, given, degrees) if g % f]
        if bad:
            raise PlacementError("placement.domain: " + "; ".join(bad))
        if math.prod(given) != target:
            raise PlacementError(
                f"placement.domain factors multiply to {math.prod(given)}, expected {target} "
                f"(the domain size {domain_size} or the job size if smaller)"
            )
        return given
    filled = fill_level(dict(zip(WORLD_DIMS, degrees)), target, order)
    return tuple(filled[d] for d in WORLD_DIMS)


def fill_level(remaining: dict[str, int], capacity: int, order: Sequence[str]) -> dict[str, int]:
    """Fill one level with dimensions in nesting order (innermost first)."""
    factors = {d: 1 for d in WORLD_DIMS}
    for d in order:
        if d not in remaining:
            continue
        f = math.gcd(remaining[d], capacity)
        factors[d] = f
        capacity //= f
    return factors


def group_spans(plan: Plan, cluster: ClusterSpec) -> dict[str, tuple[int, ...]]:
    """Spans of every world dimension's groups over the cluster's levels."""
    degrees = tuple(plan.degree(d) for d in WORLD_DIMS)
    given = plan.placement.domain
    dom = tuple(int(given.get(d, 1)) for d in WORLD_DIMS) if given else None
    spans = spans_for(degrees, dom, tuple(plan.placement.order), tuple(cluster.topology))
    return dict(zip(WORLD_DIMS, spans))


@lru_cache(maxsize=65536)
def spans_for(degrees: tuple[int, ...], domain: tuple[int, ...] | None, order: tuple[str, ...],
              levels: tuple[TopologyLevel, ...]) -> tuple[tuple[int, ...], ...]:
    """Spans of the (tp, cp, dp, pp) groups given their degrees and domain factors."""
    remaining = dict(zip(WORLD_DIMS, degrees))
    spans = {d: [1] * len(levels) for d in WORLD_DIMS}
    for i, level in enumerate(levels):
        if i == 0:
            factors = dict(zip(WORLD_DIMS, _domain(degrees, domain, order, level.size)))
            job = math.prod(degrees)
            if math.prod(factors.values()) != min(level.size, job):
                raise PlacementError(
                    f"the degrees {dict(zip(WORLD_DIMS, degrees))} cannot fill a {level.name} "
                    f"domain of {level.size} GPUs in the order {'-'.join(order)}; give "
                    "placement.domain"
                )
        else:
            factors = fill_level(remaining, level.size, order)
        for d in WORLD_DIMS:
            spans[d][i] = factors[d]
            remaining[d] //= factors[d]
    left = {d: r for d, r in remaining.items() if r > 1}
    if left:
        raise PlacementError(
            f"the job does not fit the topology: {left} left over after filling every level"
        )
    return tuple(tuple(spans[d]) for d in WORLD_DIMS)


def combine(*span_sets: Sequence[int]) -> tuple[int, ...]:
    """Spans of the union of orthogonal groups (e.g. the dp x cp gradient group)."""
    return tuple(math.prod(vals) for vals in zip(*span_sets))


def subgroup(spans: Sequence[int], size: int) -> tuple[int, ...]:
    """Spans of a subgroup made of the innermost ``size`` members of a group."""
    out = []
    left = size
    for k in spans:
        f = math.gcd(k, left)
        out.append(f)
        left //= f
    return tuple(out)
