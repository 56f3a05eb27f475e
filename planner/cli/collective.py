"""``planner collective``: one collective's time and traffic per network dimension.

Network architects use it on its own; the seed reproductions (ASTRA-sim 2.0 Table III,
RAMP) run through it (docs/seeds.md). The physics is ``costmodel/network.py``'s.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import typer

from planner.cli.console import _emit_json, out
from planner.errors import InputError
from planner.specs.topology import SCHEDULERS
from planner.costmodel.network import (
    collective_breakdown,
    collective_coeffs,
    level_bandwidth_Bps,
    p2p_time_s,
)
from planner.specs.cluster import TopologyLevel
from planner.specs.loaders import load_cluster
from planner.specs.topology import shorthand_levels, shorthand_of
from planner.specs.units import parse_bandwidth_GBps, parse_size_bytes
from planner.specs.validate import validate

OPS = {
    "allreduce": "allreduce", "reducescatter": "reduce_scatter", "allgather": "all_gather",
    "alltoall": "all_to_all", "p2p": "p2p", "sendrecv": "p2p",
}
ALGORITHMS = {"auto": "auto", "ring": "ring", "direct": "direct", "hd": "halving_doubling",
              "halvingdoubling": "halving_doubling", "halving_doubling": "halving_doubling"}


def _op(text: str) -> str:
    key = text.lower().replace("-", "").replace("_", "")
    if key not in OPS:
        raise InputError(f"--op: unknown collective '{text}'; use allreduce, reducescatter, "
                         "allgather, alltoall or p2p")
    return OPS[key]


def _ints(text: str, what: str) -> list[int]:
    try:
        vals = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"{what}: expected comma-separated integers, got '{text}'") from None
    if not vals:
        raise InputError(f"{what}: empty list")
    return vals


def _floats(text: str, what: str) -> list[float]:
    try:
        vals = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"{what}: expected comma-separated numbers, got '{text}'") from None
    if any(not math.isfinite(v) or v < 0 for v in vals):
        raise InputError(f"{what}: expected finite non-negative numbers, got '{text}'")
    return vals


def build_levels(topology: Optional[str], cluster: Optional[str], bandwidths: Optional[str],
                 latencies: Optional[str], bandwidth_unit: str, algorithms: Optional[str],
                 inr: Optional[str], scheduling: Optional[str] = None
                 ) -> tuple[list[Any], int, str]:
    """The levels, the chunk count and a name, from a shorthand or a cluster."""
    if (topology is None) == (cluster is None):
        raise InputError("give either --topology (with --bandwidths) or --cluster")
    if cluster is not None:
        if bandwidths or latencies:
            raise InputError("--bandwidths/--latencies go with --topology; a --cluster has its own")
        c = load_cluster(cluster)
        levels, chunks, name = list(c.topology), c.collective_chunks, c.name
    else:
        if not bandwidths:
            raise InputError("--topology needs --bandwidths, one per dimension (GB/s per GPU "
                             "per direction), e.g. --bandwidths 1000,200,100,50")
        bws = [parse_bandwidth_GBps(b.strip(), f"--bandwidths value {i + 1}",
                                    default_unit=bandwidth_unit)
               for i, b in enumerate(bandwidths.split(",")) if b.strip()]
        lats = _floats(latencies, "--latencies") if latencies else None
        raw = shorthand_levels(topology, bws, lats)
        levels = [validate(TopologyLevel, lv, f"--topology dimension {i + 1}")
                  for i, lv in enumerate(raw)]
        chunks, name = 64, topology
    n = len(levels)
    if algorithms:
        algos = [a.strip().lower() for a in algorithms.split(",")]
        if len(algos) == 1:
            algos *= n
        if len(algos) != n:
            raise InputError(f"--algorithms: {len(algos)} values for {n} dimensions")
        bad = [a for a in algos if a not in ALGORITHMS]
        if bad:
            raise InputError(f"--algorithms: unknown {bad}; use auto, ring, direct or hd")
        levels = [lv.model_copy(update={"algorithm": ALGORITHMS[a]}) for lv, a in zip(levels, algos)]
    if inr:
        dims = _ints(inr, "--inr")
        for d in dims:
            if not 1 <= d <= n:
                raise InputError(f"--inr: dimension {d} out of range 1..{n}")
            if levels[d - 1].kind != "switch":
                raise InputError(f"--inr: dimension {d} is a {levels[d - 1].kind}; in-network "
                                 "reduction needs a switch")
            levels[d - 1] = levels[d - 1].model_copy(update={"in_network_reduction": True})
    if scheduling is not None:
        if scheduling not in SCHEDULERS:
            raise InputError(f"--scheduling {scheduling!r}: expected one of "
                             f"{', '.join(SCHEDULERS)}")
        levels = [lv.model_copy(update={"scheduler": scheduling}) for lv in levels]
    return levels, chunks, name


def collective_result(op: str, size_bytes: float, levels: list[Any], spans: list[int],
                      chunks: int) -> dict[str, Any]:
    """The JSON object of ``planner collective``."""
    import math

    dims = []
    if op == "p2p":
        total_s = p2p_time_s(size_bytes, spans, levels)
        active = [i for i, k in enumerate(spans) if k > 1]
        outer = active[-1] if active else -1
        for i, (lv, k) in enumerate(zip(levels, spans)):
            on = i == outer
            t = size_bytes / level_bandwidth_Bps(lv, 2) + lv.latency_us * 1e-6 if on else 0.0
            dims.append(dict(dimension=i + 1, name=lv.name, kind=lv.kind, span=k,
                             bytes=size_bytes if on else 0.0, steps=int(on), time_us=t * 1e6))
        lat_s = levels[outer].latency_us * 1e-6 if active else 0.0
        bw_s = total_s - lat_s
    else:
        a, lat_s = collective_coeffs(op, tuple(spans), tuple(levels), chunks)  # type: ignore[arg-type]
        bw_s = a * size_bytes
        total_s = bw_s + lat_s if (a or lat_s) else 0.0
        for i, (row, lv) in enumerate(zip(collective_breakdown(op, size_bytes, spans, levels, chunks),  # type: ignore[arg-type]
                                          levels)):
            dims.append(dict(dimension=i + 1, name=lv.name, kind=lv.kind, span=row.span,
                             bytes=row.bytes, steps=row.steps, time_us=row.time_s * 1e6))
    return dict(
        topology=shorthand_of(levels), op=op, size_bytes=size_bytes,
        group_size=math.prod(spans), chunks=chunks, time_us=total_s * 1e6,
        bandwidth_time_us=bw_s * 1e6, latency_time_us=lat_s * 1e6,
        algbw_GBps=(size_bytes / total_s / 1e9) if total_s > 0 else None,
        steps=sum(d["steps"] for d in dims), per_dimension=dims)


def collective(
    topology: Optional[str] = typer.Option(
        None, "--topology", "-t",
        help="ASTRA-sim shorthand, innermost first: Ring(2)_FC(8)_Ring(8)_Switch(4); "
        "Switch(72,inr) reduces in the network."),
    cluster: Optional[str] = typer.Option(None, "--cluster", "-c",
                                          help="Or a catalog cluster / cluster YAML."),
    bandwidths: Optional[str] = typer.Option(
        None, "--bandwidths", "-b", help="Per-dimension bandwidth per GPU per direction, "
        "comma-separated, e.g. 1000,200,100,50 (units: see --bandwidth-unit; 400Gbps works)."),
    latencies: Optional[str] = typer.Option(
        None, "--latencies", help="Per-step latency per dimension in µs (one value for all, "
        "or one per dimension); default 1 µs."),
    bandwidth_unit: str = typer.Option(
        "GB/s", "--bandwidth-unit", help="Unit of plain --bandwidths numbers: GB/s (10^9 B/s) "
        "or GiB/s (2^30 B/s, what ASTRA-sim calls GB/s)."),
    op: str = typer.Option("allreduce", "--op",
                           help="allreduce, reducescatter, allgather, alltoall or p2p."),
    size: str = typer.Option("1GiB", "--size", "-s", help="Buffer per GPU: 1GiB, 512MB, 4096 "
                             "(input of allreduce/reducescatter/alltoall, output of allgather)."),
    spans: Optional[str] = typer.Option(
        None, "--spans", help="Group members along each dimension (default: all of it), "
        "e.g. 2,8,1,1 for a 16-GPU group inside the first two."),
    chunks: Optional[int] = typer.Option(None, "--chunks", help="Chunks pipelined across "
                                         "dimensions (default 64, or the cluster's)."),
    algorithms: Optional[str] = typer.Option(
        None, "--algorithms", help="Per-dimension algorithm: auto, ring, direct or hd."),
    inr: Optional[str] = typer.Option(None, "--inr", help="Dimensions (1-based) whose switch "
                                      "reduces in the network, e.g. 1 or 1,4."),
    scheduling: Optional[str] = typer.Option(
        None, "--scheduling", help="baseline (chunks innermost dimension first) or themis "
        "(each chunk in the order that balances the dimensions); default: the cluster's."),
    json_: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Time one collective on a multi-dimensional topology, and its traffic per dimension."""
    from rich.markup import escape
    from rich.table import Table

    kind = _op(op)
    size_bytes = parse_size_bytes(size, "--size")
    levels, default_chunks, name = build_levels(topology, cluster, bandwidths, latencies,
                                                bandwidth_unit, algorithms, inr, scheduling)
    if chunks is not None and chunks < 1:
        raise InputError(f"--chunks must be at least 1, got {chunks}")
    group = [lv.size for lv in levels]
    if spans:
        group = _ints(spans, "--spans")
        if len(group) != len(levels):
            raise InputError(f"--spans: {len(group)} values for {len(levels)} dimensions")
        bad = [f"dimension {i + 1}: {k} not in 1..{lv.size}"
               for i, (k, lv) in enumerate(zip(group, levels)) if not 1 <= k <= lv.size]
        if bad:
            raise InputError("--spans: " + "; ".join(bad))
    if kind == "p2p" and all(k <= 1 for k in group):
        raise InputError("--op p2p needs a group of at least 2 GPUs")
    res = collective_result(kind, size_bytes, levels, group, chunks or default_chunks)
    if json_:
        _emit_json(res)
        return
    t = Table(title=escape(f"{kind} of {size} on {name} ({res['group_size']} GPUs)"),
              header_style="bold")
    for col in ("dim", "name", "kind", "span", "MiB sent per GPU", "steps", "busy µs"):
        t.add_column(col, justify="left" if col in ("name", "kind") else "right")
    for d in res["per_dimension"]:
        t.add_row(str(d["dimension"]), escape(d["name"]), escape(d["kind"]), str(d["span"]),
                  f"{d['bytes'] / 2**20:.4g}", str(d["steps"]), f"{d['time_us']:.2f}")
    out.print(t)
    algbw = res["algbw_GBps"]
    out.print(f"time {res['time_us']:.2f} µs  (bandwidth {res['bandwidth_time_us']:.2f} µs, "
              f"latency {res['latency_time_us']:.2f} µs, {res['chunks']} chunks)"
              + (f"; algorithm bandwidth {algbw:.1f} GB/s" if algbw else ""))
