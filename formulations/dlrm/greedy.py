"""TorchRec's greedy partitioner, the baseline every DLRM figure compares with and one of
the CP-SAT warm starts: ``GreedyPerfPartitioner`` at its defaults
(torchrec/distributed/planner/partitioners.py: ``sort_by=SortBy.STORAGE``,
``balance_modules=False``), over the table-wise option with the HBM kernel (TorchRec's
default compute kernel, ``fused``): tables largest storage first, each copy onto the rank
with the least estimated work (its ``perf``: lookups and output distribution, forward and
backward) that still has memory for it."""

from __future__ import annotations

from planner.costmodel.dlrm.model import Option, dense_cost, links, usable_hbm_bytes
from planner.specs.cluster import ClusterSpec
from planner.specs.dlrm import DLRMSpec


def greedy_assignment(model: DLRMSpec, cluster: ClusterSpec,
                      options: list[list[Option]]) -> dict[int, tuple[int, dict[int, int]]] | None:
    """Table index -> (index of its option in ``options[t]``, {rank: copies}); None when a
    table has no table-wise HBM option or a copy fits on no rank."""
    ln = links(model, cluster)
    cap = usable_hbm_bytes(cluster) - dense_cost(model, cluster).memory_bytes
    tw: dict[int, int] = {}
    for t, opts in enumerate(options):
        o = next((o for o, opt in enumerate(opts)
                  if opt.kind == "table_wise" and opt.kernel == "fused"), None)
        if o is None:
            return None
        tw[t] = o
    load, mem = [0.0] * ln.ranks, [0] * ln.ranks
    out: dict[int, tuple[int, dict[int, int]]] = {}
    # sorted() is stable: equal storage keeps the model's table order, as TorchRec's does
    for t in sorted(tw, key=lambda t: -options[t][tw[t]].cost.memory_bytes):
        c = options[t][tw[t]].cost
        ranks: dict[int, int] = {}
        for _ in range(model.tables[t].count):
            ok = [r for r in range(ln.ranks) if mem[r] + c.memory_bytes <= cap]
            if not ok:
                return None
            r = min(ok, key=lambda k: (load[k], k))
            load[r] += c.lookup_fwd_s + c.lookup_bwd_s + c.comm_fwd_s + c.comm_bwd_s
            mem[r] += c.memory_bytes
            ranks[r] = ranks.get(r, 0) + 1
        out[t] = (tw[t], ranks)
    return out
