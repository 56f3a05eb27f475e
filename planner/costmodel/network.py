"""Collectives on a hierarchical multi-level network, and group placement.

A parallel group of ``n`` GPUs is described by its *spans*: ``spans[i]`` members along
level ``i`` (innermost first), with ``prod(spans) == n``. Collectives run as in ASTRA-sim
2.0 (Rashidi et al. 2020/Won et al. 2023, Sec. II-B): reduce-scatter up the levels, then
all-gather back down; the data shrinks by the span at each level. Each GPU moves its
share at the level's per-GPU bandwidth, so a group whose members leave a domain together
uses all their links in parallel (the LBNL model's ``n_NIC`` rings, Sec. 2.10).

Levels are pipelined in chunks (``pipelined_time``): about ``max_i B_i`` plus the fill
and drain of the levels around the busiest one, with ``B_i`` a level's bandwidth time
and ``C`` the chunk count; plus steps x latency.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, Sequence

from planner.specs.cluster import ClusterSpec, TopologyLevel
from planner.specs.plan import WORLD_DIMS, Plan

Op = Literal["allreduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce"]


def algorithm_of(level: TopologyLevel) -> str:
    """The level's per-dimension algorithm (ASTRA-sim 2.0, Table "topology-aware
    collectives", ASTRA-sim 2.0, Won et al. 2023): Ring -> ring, FullyConnected -> direct,
    Switch -> halving-doubling; a RAMP step is one direct exchange (RAMP, Ottino et al.)."""
    if level.algorithm != "auto":
        return level.algorithm
    return {"ring": "ring", "fully_connected": "direct", "ramp": "direct"}.get(
        level.kind, "halving_doubling")


#: NCCL's tree all-reduce bandwidth refinement (``busBw * .92``) and, per power of two of
#: the message size over 64 bytes, the Simple protocol's ``treeCorrectionFactor`` (NCCL
#: 2.30.7, src/graph/tuning.cc, ``ncclTopoTuneModel`` and ``ncclTopoGetAlgoTime``).
NCCL_TREE_BW_FACTOR = 0.92
NCCL_TREE_CORRECTION = (0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5,
                        0.5, 0.5, 0.6, 0.7, 0.8, 0.7, 0.7, 0.8, 0.9, 0.9)


def nccl_tree_bw_factor(message_bytes: float) -> float:
    """Share of the level's bandwidth NCCL's tree all-reduce reaches for a message of this
    size: 0.92 times the correction for ``log2i(bytes >> 6) < 23`` (NCCL 2.30.7 tuning.cc).
    An unbounded message (``inf``, the large-message limit) is past the table: no correction."""
    if not math.isfinite(message_bytes):
        return NCCL_TREE_BW_FACTOR
    log_size = int(message_bytes) >> 6
    log_size = log_size.bit_length() - 1 if log_size > 0 else -1
    corr = NCCL_TREE_CORRECTION[log_size] if 0 <= log_size < len(NCCL_TREE_CORRECTION) else 1.0
    return NCCL_TREE_BW_FACTOR * corr


def nccl_tree_steps(k: int) -> int:
    """Latency steps of NCCL's tree all-reduce across ``k`` nodes: up and down the
    (double binary) tree, ``2 log2i(k)`` (tuning.cc: ``2 * log2i(nNodes) * interLat``)."""
    return 2 * max(1, k.bit_length() - 1) if k > 1 else 0


def nccl_algorithm(op: str, level: TopologyLevel, k: int, message_bytes: float,
                   outer: bool, top: bool) -> str:
    """The algorithm NCCL picks for ``op`` over ``k`` members of a level and a message of
    ``message_bytes`` there: the least of its time model ``lat + bytes / bw`` (NCCL 2.30.7,
    ``ncclTopoGetAlgoTime``) among ring (2(k-1) steps for all-reduce, k-1 otherwise; all
    collectives), tree (all-reduce across nodes only: inside an NVLink domain NCCL's tree
    is a chain, never faster than the ring) and the switch's in-network reduction where the
    level has it (NVLS/SHARP; all-reduce). ``outer``: the level joins nodes. An unbounded
    message (``inf``) takes the least bytes-per-bandwidth term, the latency breaking ties:
    the limit of the same model as the message grows."""
    if op != "allreduce" or k <= 1:
        return "ring"
    lat_s = level.latency_us * 1e-6
    bw = level_bandwidth_Bps(level, k)
    frac = (k - 1) / k
    # (seconds per byte, fixed seconds) of each candidate
    costs = [("ring", 2 * frac / bw, 2 * (k - 1) * lat_s)]
    if outer:
        costs.append(("tree", 2 / (bw * nccl_tree_bw_factor(message_bytes)),
                      nccl_tree_steps(k) * lat_s))
    if level.in_network_reduction and level.kind == "switch":
        costs.append(("in_network", (1.0 if top else 1 + 1 / k) / bw, 2 * lat_s))
    if math.isfinite(message_bytes):
        return min(costs, key=lambda c: c[1] * message_bytes + c[2])[0]
    return min(costs, key=lambda c: (c[1], c[2]))[0]


def latency_steps(kind: str, k: int, op: str, algorithm: str = "auto") -> int:
    """Algorithm steps of one phase over ``k`` members: ring k-1, direct 1,
    halving-doubling ceil(log2 k) (ASTRA-sim 2.0, Won et al. 2023: s = p-1, 1, log2 p)."""
    if k <= 1:
        return 0
    if algorithm == "auto":
        algorithm = {"ring": "ring", "fully_connected": "direct", "ramp": "direct"}.get(
            kind, "halving_doubling")
    if op == "all_to_all":
        return k - 1 if algorithm == "ring" else 1
    if algorithm == "ring":
        return k - 1
    if algorithm == "direct":
        return 1
    return max(1, math.ceil(math.log2(k)))


def ramp_io_fraction(groups: int, k: int, rule: str = "balanced") -> float:
    """Share of a RAMP node's ``x`` transceiver groups that a step with ``k`` members
    keeps busy (RAMP, Ottino et al., Eq. 3 and Eq. 5: B_IO = B b (1 + #TRX_add)(d - 1)).

    ``balanced`` gives each of the d-1 peers floor(x/(d-1)) groups, so the last step with
    d = 2 uses all x groups, as the paper states for step-4 formula 1. ``eq3`` is Eq. (3)
    as printed, #TRX_add = floor((x - floor(x/d)(d-1))/(d-1)). With more peers than
    groups the groups are time-multiplexed and all stay busy."""
    peers = k - 1
    if peers <= 0:
        return 0.0
    if peers >= groups:
        return 1.0
    if rule == "eq3":
        per_peer = 1 + (groups - (groups // k) * peers) // peers
    else:
        per_peer = groups // peers
    return min(1.0, per_peer * peers / groups)


def level_bandwidth_Bps(level: TopologyLevel, k: int) -> float:
    """Bytes/s per GPU that a group with ``k`` members at this level moves.

    A switch (or ring, or FC level without ``link_GBps``) gives any group the GPU's whole
    share of the level. A mesh of point-to-point links (``fully_connected`` with
    ``link_GBps``, e.g. AMD Infinity Fabric: 7 links of 64 GB/s per direction) gives a
    group only the ``k - 1`` links to its other members, up to the level's bandwidth:
    TP2 on an 8-GPU mesh moves 1 link's worth, TP8 7 links' (direct algorithm, one
    message per peer at once). ASTRA-sim's FC dimension gives each of its p-1 links
    B/(p-1) (ASTRA-sim 2.0, Won et al. 2023, its analytical backend), so a group spanning the
    whole dimension gets B either way."""
    if level.kind == "ramp" and level.transceiver_groups:
        return level.effective_Bps * ramp_io_fraction(level.transceiver_groups, k,
                                                      level.trx_rule)
    if level.link_GBps is not None:
        links_Bps = (max(k - 1, 1) * level.link_GBps * 1e9 * level.efficiency
                     / level.oversubscription)
        return min(level.effective_Bps, links_Bps)
    return level.effective_Bps


@dataclass(frozen=True)
class LevelTraffic:
    """Bytes each GPU sends at one level, and the resulting time."""

    level: str
    bytes: float
    time_s: float
    steps: int = 0
    span: int = 1


def level_traffic(op: Op, size_bytes: float, spans: Sequence[int],
                  levels: Sequence[TopologyLevel],
                  message_bytes: float | None = None) -> list[tuple[float, int]]:
    """(bytes sent per GPU, algorithm steps) at each level for one collective.

    ``size_bytes`` is the full buffer: the input of all-reduce, reduce-scatter and
    all-to-all, the output of all-gather. Reduce-scatter runs up the levels and
    all-gather down; the data shrinks by the span at each level (ASTRA-sim 2.0, Won et al. 2023).
    A level with ``algorithm: nccl`` takes NCCL's choice (:func:`nccl_algorithm`) for the
    message the library is handed, ``message_bytes`` (default ``size_bytes``; ``inf``: the
    bandwidth-optimal choice of large messages), shrunk as the data is below the level.
    """
    out: list[tuple[float, int]] = []
    data = size_bytes
    message = size_bytes if message_bytes is None else message_bytes
    active = [i for i, k in enumerate(spans) if k > 1]
    top = active[-1] if active else -1
    for i, (k, level) in enumerate(zip(spans, levels)):
        if k <= 1:
            out.append((0.0, 0))
            continue
        frac = (k - 1) / k
        algo = algorithm_of(level)
        nccl_ring = False
        if algo == "nccl":
            choice = nccl_algorithm(op, level, k, message * data / size_bytes if size_bytes
                                    else 0.0, outer=i > 0, top=i == top)
            if choice == "tree":
                out.append((2 * data / nccl_tree_bw_factor(message * data / size_bytes),
                            nccl_tree_steps(k)))
                data /= k
                continue
            nccl_ring = choice == "ring"
            algo = "ring" if nccl_ring or op != "allreduce" else "halving_doubling"
        steps = latency_steps(level.kind, k, op, algo)
        if op == "allreduce":
            if level.in_network_reduction and level.kind == "switch" and not nccl_ring:
                # SHARP/NVLS: the switch reduces and multicasts. At the top level each GPU
                # sends its data once and receives the result once; below it, the
                # reduce-scatter sends D and the all-gather D/k (multimem ld_reduce/st).
                out.append((data if i == top else data * (1 + 1 / k), 2))
            else:
                out.append((2 * frac * data, 2 * steps))
            data /= k
        elif op in ("reduce_scatter", "all_gather", "broadcast", "reduce"):
            out.append((frac * data, steps))
            data /= k
        elif op == "all_to_all":
            if algo == "ring" and level.kind == "ring":
                # Shortest-path routing on a bidirectional ring: D/k to each member over
                # min(d, k-d) hops; floor(k^2/4) hop-messages share 2 links per GPU of
                # B/2 each, i.e. D floor(k^2/4)/k at the GPU's rate [derived].
                out.append((size_bytes * (k * k // 4) / k, steps))
            else:  # direct, or pairwise exchange in k-1 steps (ring algorithm on a switch)
                out.append((frac * size_bytes, steps))
        else:  # pragma: no cover - guarded by the Op literal
            raise ValueError(op)
    return out


def pipelined_time(op: str, level_times: Sequence[float], chunks: int) -> float:
    """Bandwidth time of a collective whose ``C = chunks`` chunks stream through the
    levels, each level serving one chunk at a time (ASTRA-sim's per-dimension queues,
    ASTRA-sim 2.0, Won et al. 2023).

    A single pass (reduce-scatter, all-gather, all-to-all) is a flow shop:
    ``max_k T_k + (sum_k T_k - max_k T_k)/C``. All-reduce visits level k twice
    (RS_k going up, AG_k coming down); the levels inside k fill and drain the pipeline
    (``sum_{j<k} T_j / C``) and those outside it are hidden behind level k's other chunks
    unless one chunk's trip through them outlasts the half of level k's work left:
    ``max_k [T_k + sum_{j<k} T_j/C + max(0, sum_{j>k} T_j/C - (C-1)/(2C) T_k)]``.
    With C = 1 both reduce to the sum of the levels (RAMP's synchronous steps)."""
    times = list(level_times)
    if not times:
        return 0.0
    total = sum(times)
    if op != "allreduce":
        peak = max(times)
        return peak + (total - peak) / chunks
    best = 0.0
    inner = 0.0
    for k, t_k in enumerate(times):
        outer = total - inner - t_k
        est = t_k + inner / chunks + max(0.0, outer / chunks - (chunks - 1) / (2 * chunks) * t_k)
        best = max(best, est)
        inner += t_k
    return best


#: Collectives whose per-dimension traffic depends on the order the chunks cross the
#: dimensions (the data shrinks by each span it passes); all-to-all sends (p-1)/p of the
#: buffer on every dimension in any order, so Themis has nothing to balance there.
BALANCEABLE = ("allreduce", "reduce_scatter", "all_gather")


def themis_applies(op: str, spans: Sequence[int], levels: Sequence[TopologyLevel]) -> bool:
    """Themis scheduling balances a collective when every dimension it spans (two or more
    of them) is scheduled by it, none reduces in the switch and none is a RAMP level."""
    active = [lv for k, lv in zip(spans, levels) if k > 1]
    return (op in BALANCEABLE and len(active) > 1
            and all(lv.scheduler == "themis" and not lv.in_network_reduction
                    and lv.kind != "ramp" for lv in active))


def themis_level_times(op: str, spans: Sequence[int], levels: Sequence[TopologyLevel],
                       chunks: int, message_bytes: float = math.inf) -> list[float]:
    """Seconds per byte each spanned dimension is busy when Themis (Rashidi et al., ISCA
    2022; ASTRA-sim 2.0 Sec. IV-A) sends every chunk in the dimension order that keeps the
    busiest dimension least loaded so far (greedy over the ``chunks`` equal chunks). The
    bytes a chunk puts on a dimension shrink by the spans it already crossed, so orders
    that start on a fast dimension move the bulk there."""
    active = [(k, lv) for k, lv in zip(spans, levels) if k > 1]
    bw = [level_bandwidth_Bps(lv, k) for k, lv in active]
    per_chunk = []
    for order in itertools.permutations(range(len(active))):
        # the same per-dimension traffic as any collective, with the dimensions
        # taken in this chunk's order; mapped back to the dimensions' own places
        traffic = level_traffic(op, 1.0 / chunks, [active[d][0] for d in order],
                                [active[d][1] for d in order], message_bytes)
        load = [0.0] * len(active)
        for (nbytes, _steps), d in zip(traffic, order):
            load[d] = nbytes / bw[d]
        per_chunk.append(load)
    busy = [0.0] * len(active)
    for _ in range(chunks):
        best = min(per_chunk, key=lambda add: max(b + a for b, a in zip(busy, add)))
        busy = [b + a for b, a in zip(busy, best)]
    return busy


def uses_message_size(levels: Sequence[TopologyLevel]) -> bool:
    """Whether a collective's algorithm on these levels depends on the message size."""
    return any(lv.algorithm == "nccl" for lv in levels)


@lru_cache(maxsize=65536)
def collective_coeffs(op: Op, spans: tuple[int, ...], levels: tuple[TopologyLevel, ...],
                      chunks: int = 64, message_bytes: float = math.inf) -> tuple[float, float]:
    """``(seconds per byte, fixed seconds)`` of a collective: its time is affine in the
    buffer size, ``T = a x size + b`` for any size > 0 (every level's traffic scales with
    the size), once the algorithm is fixed: on ``nccl`` levels it is the one NCCL picks
    for a message of ``message_bytes`` (default: large messages). The formulations use
    these coefficients directly. Under Themis scheduling the chunks' dimension orders are
    balanced (:func:`themis_level_times`); the latency steps are the same."""
    if math.prod(spans) <= 1:
        return 0.0, 0.0
    per_byte = []
    latency = 0.0
    traffic = level_traffic(op, 1.0, spans, levels, message_bytes)
    for (nbytes, steps), level, k in zip(traffic, levels, spans):
        if nbytes <= 0:
            continue
        per_byte.append(nbytes / level_bandwidth_Bps(level, k))
        latency += steps * level.latency_us * 1e-6
    if not per_byte:
        return 0.0, 0.0
    baseline = pipelined_time(op, per_byte, chunks)
    if themis_applies(op, spans, levels):
        busy = themis_level_times(op, spans, levels, chunks, message_bytes)
        # the chunks stream through the dimensions: the busiest one, plus one chunk's
        # trip through the others to fill and drain (as pipelined_time's single pass)
        balanced = max(busy) + (sum(busy) - max(busy)) / chunks
        return min(baseline, balanced), latency
    return baseline, latency


def collective_time_s(op: Op, size_bytes: float, spans: Sequence[int],
                      levels: Sequence[TopologyLevel], chunks: int = 64,
                      message_bytes: float | None = None) -> float:
    """Time of one collective over a group with the given spans. ``message_bytes``: the
    size of each call the library is handed, which picks its algorithm on ``nccl`` levels
    (default: the whole buffer in one call)."""
    if size_bytes <= 0:
        return 0.0
    message = (size_bytes if message_bytes is None else message_bytes) \
        if uses_message_size(levels) else math.inf
    a, b = collective_coeffs(op, tuple(spans), tuple(levels), chunks, message)
    if a == 0.0 and b == 0.0:
        return 0.0
    return a * size_bytes + b


def collective_breakdown(op: Op, size_bytes: float, spans: Sequence[int],
                         levels: Sequence[TopologyLevel], chunks: int = 64) -> list[LevelTraffic]:
    """Per level: bytes each GPU sends, algorithm steps, and the level's busy time
    (bandwidth time plus steps x latency); under Themis the balanced bytes."""
    traffic = level_traffic(op, size_bytes, spans, levels)
    if themis_applies(op, spans, levels):
        busy = iter(themis_level_times(op, spans, levels, chunks, size_bytes))
        traffic = [(next(busy) * level_bandwidth_Bps(lv, k) * size_bytes, steps) if k > 1
                   else (nbytes, steps)
                   for (nbytes, steps), lv, k in zip(traffic, levels, spans)]
    out = []
    for (nbytes, steps), level, k in zip(traffic, levels, spans):
        t = (nbytes / level_bandwidth_Bps(level, k) + steps * level.latency_us * 1e-6
             if nbytes else 0.0)
        out.append(LevelTraffic(level.name, nbytes, t, steps, k))
    return out


def p2p_time_s(size_bytes: float, spans: Sequence[int], levels: Sequence[TopologyLevel]) -> float:
    """Send/recv between neighbours of a group: the slowest level the group crosses."""
    if size_bytes <= 0 or math.prod(spans) <= 1:
        return 0.0
    outer = max(i for i, k in enumerate(spans) if k > 1)
    level = levels[outer]
    return size_bytes / level_bandwidth_Bps(level, 2) + level.latency_us * 1e-6


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
