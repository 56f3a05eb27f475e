"""The exact evaluator of a DLRM sharding plan: per-rank loads, the phases of one
iteration (each as long as its slowest rank; planner/costmodel/dlrm/model.py), samples/s and
memory per GPU. The formulation (formulations/dlrm/build.py) minimizes the same sum of phases
with the same coefficients; :func:`compose` is the one place they combine."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from planner.costmodel.dlrm.model import (
    DenseCost,
    Links,
    Option,
    dense_cost,
    links,
    table_options,
    usable_hbm_bytes,
)
from planner.errors import InputError
from planner.specs.cluster import ClusterSpec
from planner.specs.dlrm import DLRMPlan, DLRMSpec, TablePlacement

GiB = 2**30


@dataclass
class Loads:
    """Per-rank sums over the placed shards, and the plan-wide terms."""

    lookup_fwd_s: np.ndarray
    lookup_bwd_s: np.ndarray
    comm_fwd_s: np.ndarray
    comm_bwd_s: np.ndarray
    memory_bytes: list[int]
    host_bytes: list[int] = field(default_factory=list)
    recv_bytes: float = 0.0
    allreduce_bytes: int = 0
    used: set[str] = field(default_factory=set)

    @classmethod
    def zeros(cls, ranks: int) -> "Loads":
        return cls(*(np.zeros(ranks) for _ in range(4)), [0] * ranks, [0] * ranks)

    def add(self, opt: Option, ranks: dict[int, int] | range, copies: int) -> None:
        """``copies`` copies of ``opt``; ``ranks`` maps a rank to its shard count."""
        c = opt.cost
        if isinstance(ranks, range):  # every rank alike: whole slices (the same sums)
            at = slice(ranks.start, ranks.stop, ranks.step)
            for arr, v in ((self.lookup_fwd_s, c.lookup_fwd_s), (self.lookup_bwd_s,
                           c.lookup_bwd_s), (self.comm_fwd_s, c.comm_fwd_s),
                           (self.comm_bwd_s, c.comm_bwd_s)):
                arr[at] += copies * v
            for r in ranks:
                self.memory_bytes[r] += copies * c.memory_bytes
                self.host_bytes[r] += copies * c.host_bytes
        items = ranks.items() if isinstance(ranks, dict) else ()
        for r, n in items:
            self.lookup_fwd_s[r] += n * c.lookup_fwd_s
            self.lookup_bwd_s[r] += n * c.lookup_bwd_s
            self.comm_fwd_s[r] += n * c.comm_fwd_s
            self.comm_bwd_s[r] += n * c.comm_bwd_s
            self.memory_bytes[r] += n * c.memory_bytes
            self.host_bytes[r] += n * c.host_bytes
        self.recv_bytes += copies * opt.recv_bytes
        self.allreduce_bytes += copies * opt.allreduce_bytes
        if opt.collective:
            self.used.add(opt.collective)


def latencies_s(ln: Links, used: set[str]) -> tuple[float, float]:
    """Fixed (latency) time of the forward and backward output collectives in use: one
    all-to-all for table-, column- and table-row-wise tables, the world reduce-scatter
    (all-gather) for row-wise ones, the node reduce-scatter (all-gather) for TWRW."""
    a2a = ln.a2a[1] if used & {"a2a", "twrw"} else 0.0
    rw = "rs" in used
    node = "twrw" in used
    fwd = a2a + (ln.rs[1] if rw else 0.0) + (ln.rs_node[1] if node else 0.0)
    bwd = a2a + (ln.ag[1] if rw else 0.0) + (ln.ag_node[1] if node else 0.0)
    return fwd, bwd


@dataclass(frozen=True)
class DLRMEstimate:
    """The evaluator's answer for one plan."""

    iteration_time_s: float
    samples_per_s: float
    memory_per_gpu_bytes: int
    usable_memory_bytes: int
    phases_s: dict[str, float]
    per_rank: dict[str, list[float]]
    feasible: bool
    reasons: list[str]

    @property
    def memory_per_gpu_gib(self) -> float:
        return self.memory_per_gpu_bytes / GiB

    def to_json(self) -> dict:
        return {"iteration_time_s": self.iteration_time_s, "samples_per_s": self.samples_per_s,
                "memory_per_gpu_gib": self.memory_per_gpu_gib,
                "usable_memory_gib": self.usable_memory_bytes / GiB,
                "phases_s": self.phases_s, "per_rank": self.per_rank,
                "feasible": self.feasible, "reasons": self.reasons}


def phase_floors_s(model: DLRMSpec, cluster: ClusterSpec, recv_bytes: float,
                   allreduce_bytes: float, lat_s: tuple[float, float] = (0.0, 0.0)
                   ) -> tuple[float, float, float, float]:
    """Per sparse phase (lookup_fwd, lookup_bwd, dist_fwd, dist_bwd), what no rank's load
    can shorten: the dense all-reduce behind the backward lookups, and the received pooled
    vectors (plus the collectives' latencies ``lat_s``) or the bottom MLP behind the
    distribution. :func:`compose` and the local search take them from here."""
    ln, dn = links(model, cluster), dense_cost(model, cluster)
    recv_s = ln.a2a[0] * recv_bytes
    ar_s = ln.ar[0] * (dn.grad_bytes + allreduce_bytes) + ln.ar[1]
    return (0.0, ar_s, max(recv_s + lat_s[0], dn.bottom_fwd_s),
            max(recv_s + lat_s[1], dn.bottom_bwd_s))


def compose(model: DLRMSpec, cluster: ClusterSpec, loads: Loads) -> DLRMEstimate:
    """The iteration from per-rank loads: sparse phases at their slowest rank, the output
    distribution overlapped with the bottom MLP, the dense all-reduce with the backward
    lookups (module docstring of planner/costmodel/dlrm/model.py)."""
    ln, dn = links(model, cluster), dense_cost(model, cluster)
    lat_f, lat_b = latencies_s(ln, loads.used)
    _, ar_s, dist_f, dist_b = phase_floors_s(model, cluster, loads.recv_bytes,
                                             loads.allreduce_bytes, (lat_f, lat_b))
    phases = {
        "lookup_fwd": float(loads.lookup_fwd_s.max()),
        "dist_fwd": max(float(loads.comm_fwd_s.max()) + lat_f, dist_f),
        "dense_middle": dn.middle_s,
        "dist_bwd": max(float(loads.comm_bwd_s.max()) + lat_b, dist_b),
        "lookup_bwd": max(float(loads.lookup_bwd_s.max()), ar_s),
        "optimizer": dn.optimizer_s,
    }
    t = sum(phases.values())
    mem = [m + dn.memory_bytes for m in loads.memory_bytes]
    cap = usable_hbm_bytes(cluster)
    worst = int(np.argmax(mem))
    reasons = [] if mem[worst] <= cap else [
        f"rank {worst} needs {mem[worst] / GiB:.2f} GiB; {cap / GiB:.2f} GiB usable of "
        f"{cluster.gpu.hbm_gib:g} GiB HBM"]
    host = max(loads.host_bytes)
    if host > ln.host_bytes:
        r = loads.host_bytes.index(host)
        reasons.append(f"rank {r} keeps {host / GiB:.2f} GiB of UVM-cached tables in host "
                       f"memory; {ln.host_bytes / GiB:.2f} GiB per GPU")
    per_rank = {"lookup_fwd_s": loads.lookup_fwd_s.tolist(),
                "lookup_bwd_s": loads.lookup_bwd_s.tolist(),
                "comm_fwd_s": loads.comm_fwd_s.tolist(), "comm_bwd_s": loads.comm_bwd_s.tolist(),
                "memory_gib": [m / GiB for m in mem],
                "host_memory_gib": [m / GiB for m in loads.host_bytes]}
    return DLRMEstimate(t, model.global_batch_size / t, max(mem), cap, phases, per_rank,
                        not reasons, reasons)


def evaluate_dlrm(model: DLRMSpec, cluster: ClusterSpec, plan: DLRMPlan) -> DLRMEstimate:
    """Cost of a sharding plan; an :class:`InputError` for a plan that does not place
    every table exactly once or names ranks, nodes or splits that do not exist."""
    return compose(model, cluster, plan_loads(model, cluster, plan))


def plan_loads(model: DLRMSpec, cluster: ClusterSpec, plan: DLRMPlan) -> Loads:
    ln = links(model, cluster)
    index = {t.name: i for i, t in enumerate(model.tables)}
    placed = [0] * len(model.tables)
    loads = Loads.zeros(ln.ranks)
    for p in plan.tables:
        if p.table not in index:
            raise InputError(f"plan.tables: table {p.table!r} is not in model {model.name!r}")
        i = index[p.table]
        opt = _option(model, cluster, i, p)
        placed[i] += p.copies
        loads.add(opt, _ranks_of(ln, opt, p), p.copies)
    bad = [f"{t.name} ({n} of {t.count})" for t, n in zip(model.tables, placed) if n != t.count]
    if bad:
        raise InputError(f"plan.tables: every table's copies must be placed exactly once; "
                         f"placed: {', '.join(bad[:5])}")
    return loads


def _option(model: DLRMSpec, cluster: ClusterSpec, i: int, p: TablePlacement) -> Option:
    opts = [o for o in table_options(model, cluster, i)
            if o.kind == p.sharding_type and o.kernel == p.compute_kernel]
    if p.sharding_type == "column_wise":
        opts = [o for o in opts if o.shards == p.shards]
    elif p.shards != 1 and p.sharding_type == "table_wise":
        opts = []
    if not opts:
        why = ("; fused_uvm_caching is table_wise only and needs the cluster's host memory "
               "tier (offload:)" if p.compute_kernel != "fused" else "")
        raise InputError(f"plan.tables: {p.table}: sharding_type {p.sharding_type!r} with "
                         f"shards={p.shards} and compute_kernel {p.compute_kernel!r} is not "
                         f"available for this table on {cluster.num_gpus} GPUs{why}")
    return opts[0]


def _ranks_of(ln: Links, opt: Option, p: TablePlacement) -> dict[int, int] | range:
    """Ranks holding shards of ``p`` and how many each; checked against the option."""
    where = f"plan.tables: {p.table} ({p.sharding_type})"
    if opt.scope == "all":
        if p.ranks or p.nodes:
            raise InputError(f"{where}: uses every rank; give no ranks or nodes")
        return range(ln.ranks)
    if opt.scope == "node":
        if p.ranks:  # a node-wise sharding never reads ranks: they would be ignored unseen
            raise InputError(f"{where}: places copies on nodes; give nodes, not ranks "
                             f"{sorted(p.ranks)[:5]}")
        _check_counts(where, "nodes", p.nodes, ln.nodes, p.copies, p.copies)
        return {n * ln.node + j: c for n, c in p.nodes.items() for j in range(ln.node)}
    if p.nodes:  # likewise: a rank-wise sharding never reads nodes
        raise InputError(f"{where}: places shards on ranks; give ranks, not nodes "
                         f"{sorted(p.nodes)[:5]}")
    _check_counts(where, "ranks", p.ranks, ln.ranks, p.copies * opt.shards, p.copies)
    return dict(p.ranks)


def _check_counts(where: str, what: str, counts: dict[int, int], n: int, total: int,
                  most: int) -> None:
    bad = [k for k, v in counts.items() if not 0 <= k < n or not 0 <= v <= most]
    if bad:
        raise InputError(f"{where}: {what} {bad[:5]} out of range: ids 0..{n - 1}, at most "
                         f"{most} shards each (one per copy)")
    if sum(counts.values()) != total:
        raise InputError(f"{where}: {what} hold {sum(counts.values())} shards, expected {total}")
