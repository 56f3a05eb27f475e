"""Exact embedding-table sharding: a generalized assignment model of DLRM training.

Per table entry ``t`` (``count`` identical copies) and sharding option ``o``
(:func:`planner.costmodel.dlrm.model.table_options`): ``m[t,o]`` copies use ``o``; for
per-rank options ``n[t,o,r]`` shards sit on rank ``r`` (at most one per copy, so
``n <= m`` and ``sum_r n = shards x m``); for table-row-wise ``z[t,o,g]`` copies sit on
node ``g``. Each phase variable is at least every rank's load in that phase
(min-max makespan); per-rank HBM and host memory (UVM-cached tables) are hard rows. The objective is the evaluator's
iteration time, :func:`planner.costmodel.dlrm.evaluate.compose`, term by term:

    T = P_lookup_fwd + P_dist_fwd + dense_middle + P_dist_bwd + P_lookup_bwd + optimizer
    P_dist_*     >= comm_r + latency(u),  >= receive(m) + latency(u),  >= bottom MLP
    P_lookup_bwd >= lookup_bwd_r,         >= all-reduce(m)

Times are integer ticks rounded down (``formulations.train.build.Ticks``), so the model's
value of any plan is at most the evaluator's and the model's optimum is a lower bound on
every plan's exact time; the returned plan is re-evaluated and its gap to that bound is
reported (rounding only: a few ticks). Ranks of one node are interchangeable, so their
forward lookup loads are ordered (symmetry breaking).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from formulations.linear import SAFE, Ticks, choose_ticks
from formulations.linear import Expr, LinearModel, Var
from planner.costmodel.dlrm.model import Links, Option, dense_cost, links, table_options
from planner.costmodel.dlrm.model import usable_hbm_bytes
from planner.errors import InputError
from planner.specs.cluster import ClusterSpec
from planner.specs.dlrm import DLRMSpec, TablePlacement

PHASES = ("lookup_fwd", "lookup_bwd", "comm_fwd", "comm_bwd")
COLLECTIVES = ("a2a", "rs", "twrw")


@dataclass
class DLRMVars:
    """Indices of the model's variables, to read a plan back."""

    options: list[list[Option]]
    m: dict[tuple[int, int], int] = field(default_factory=dict)
    n: dict[tuple[int, int, int], int] = field(default_factory=dict)
    z: dict[tuple[int, int, int], int] = field(default_factory=dict)
    u: dict[str, int] = field(default_factory=dict)
    phase: dict[str, int] = field(default_factory=dict)
    shared: dict[str, Expr] = field(default_factory=dict)  # phase -> {aux var: 1}
    ticks: Ticks = Ticks(1e12)
    constant_ticks: int = 0


def placement(model: DLRMSpec, t: int, opt: Option, copies: int,
              ranks: dict[int, int] | None = None,
              nodes: dict[int, int] | None = None) -> TablePlacement:
    """``copies`` of table entry ``t`` with option ``opt``, as a plan states it (the one
    place the solvers, the search and the exhaustive reference turn options into plans)."""
    return TablePlacement(table=model.tables[t].name, sharding_type=opt.kind, copies=copies,
                          shards=opt.shards if opt.kind == "column_wise" else 1,
                          ranks=ranks or {}, nodes=nodes or {}, compute_kernel=opt.kernel)


def _int_var(lm: LinearModel, name: str, ub: int) -> int:
    if ub == 1:
        return lm.binary(name)
    lm.vars.append(Var(name, 0, ub, integer=True))
    return len(lm.vars) - 1


def _choose_ticks(model: DLRMSpec, ln: Links, options: list[list[Option]]) -> Ticks:
    """Ticks fine enough for rounding to vanish, coarse enough that the largest row (every
    copy's worst load on one rank) stays below 2^53 / 64."""
    worst = sum(t.count * max(max(o.cost.lookup_bwd_s, o.cost.comm_fwd_s, o.cost.lookup_fwd_s,
                                  o.cost.comm_bwd_s) for o in opts)
                for t, opts in zip(model.tables, options))
    worst += ln.a2a[0] * sum(t.count * t.dim for t in model.tables) * ln.batch * 8 + 1.0
    ticks = choose_ticks(worst, 8)
    if worst * ticks.per_s * 8 > SAFE:
        raise InputError(f"model {model.name!r}: some rank's load of this plan space reaches "
                         f"{worst:.3g} s, beyond what the solver represents exactly; check the "
                         "cluster's bandwidths and the tables' sizes")
    return ticks


def build(model: DLRMSpec, cluster: ClusterSpec,
          kinds: tuple[str, ...] | None = None) -> tuple[LinearModel, DLRMVars]:
    """The integer model of sharding ``model`` on ``cluster`` (module docstring)."""
    ln = links(model, cluster)
    options = [table_options(model, cluster, i, kinds) for i in range(len(model.tables))]
    if any(not opts for opts in options):
        raise InputError(f"no sharding option left for some table with kinds {kinds}")
    lm, vm = LinearModel(), DLRMVars(options, ticks=_choose_ticks(model, ln, options))
    _assignment_vars(lm, vm, model, ln)
    loads = _rank_loads(lm, vm, ln)
    _phase_rows(lm, vm, model, cluster, ln, loads)
    _host_rows(lm, vm, ln)
    _symmetry_rows(lm, ln, loads["lookup_fwd"])
    _table_cuts(lm, vm, model)
    lm.objective = {vm.phase[p]: 1 for p in ("lookup_fwd", "dist_fwd", "dist_bwd", "lookup_bwd")}
    dn = dense_cost(model, cluster)
    vm.constant_ticks = vm.ticks.down(dn.middle_s) + vm.ticks.down(dn.optimizer_s)
    return lm, vm


def _assignment_vars(lm: LinearModel, vm: DLRMVars, model: DLRMSpec, ln: Links) -> None:
    for t, (tab, opts) in enumerate(zip(model.tables, vm.options)):
        k = tab.count
        for o, opt in enumerate(opts):
            vm.m[t, o] = _int_var(lm, f"m_{t}_{o}", k)
            if opt.scope == "ranks":
                for r in range(ln.ranks):
                    vm.n[t, o, r] = _int_var(lm, f"n_{t}_{o}_{r}", k)
                    if k > 1:  # one copy: n is binary and the sum row below suffices
                        lm.add({vm.n[t, o, r]: 1, vm.m[t, o]: -1}, ub=0)
                assert vm.n[t, o, ln.ranks - 1] == vm.n[t, o, 0] + ln.ranks - 1  # contiguous
                lm.add({**{vm.n[t, o, r]: 1 for r in range(ln.ranks)},
                        vm.m[t, o]: -opt.shards}, lb=0, ub=0)
            elif opt.scope == "node":
                for g in range(ln.nodes):
                    vm.z[t, o, g] = _int_var(lm, f"z_{t}_{o}_{g}", k)
                lm.add({**{vm.z[t, o, g]: 1 for g in range(ln.nodes)}, vm.m[t, o]: -1},
                       lb=0, ub=0)
        lm.add({vm.m[t, o]: 1 for o in range(len(opts))}, lb=k, ub=k)
    for c in COLLECTIVES:
        vm.u[c] = lm.binary(f"u_{c}")
        for t, (tab, opts) in enumerate(zip(model.tables, vm.options)):
            for o, opt in enumerate(opts):
                if opt.collective == c:  # u_c = 1 when any copy uses the collective
                    lm.add({vm.u[c]: tab.count, vm.m[t, o]: -1}, lb=0)


def _rank_loads(lm: LinearModel, vm: DLRMVars,
                ln: Links) -> dict[str, list[tuple[Expr, Expr]]]:
    """Per phase and rank: (time expression in ticks, memory expression in bytes). The
    loads every rank carries (options on all ranks) and every rank of a node carries
    (table-row-wise) are auxiliary variables, equal to their sums, so that a rank's row
    has one term for them instead of one per table."""
    every = [(mi, vm.options[t][o]) for (t, o), mi in vm.m.items()
             if vm.options[t][o].scope == "all"]
    per_node: dict[int, list[tuple[int, Option]]] = {g: [] for g in range(ln.nodes)}
    for (t, o, g), zi in vm.z.items():
        per_node[g].append((zi, vm.options[t][o]))
    out: dict[str, list[tuple[Expr, Expr]]] = {p: [] for p in PHASES}
    per_rank = [(t, o) for (t, o) in vm.m if vm.options[t][o].scope == "ranks"]
    for p in (*PHASES, "memory"):
        shared = vm.shared[p] = _aux(lm, vm, f"all_{p}", every, p)
        nodes = {g: _aux(lm, vm, f"node{g}_{p}", terms, p) for g, terms in per_node.items()}
        # rank r's variable of option (t, o) is the option's rank-0 variable + r
        coefs = [(vm.n[t, o, 0], _coef(vm, vm.options[t][o], p)) for t, o in per_rank]
        for r in range(ln.ranks):
            expr = {base + r: c for base, c in coefs}
            expr.update({**shared, **nodes[r // ln.node]})
            if p == "memory":
                for q in PHASES:
                    out[q][r] = (out[q][r][0], expr)
            else:
                out[p].append((expr, {}))
    return out


def _coef(vm: DLRMVars, opt: Option, p: str) -> int:
    return opt.cost.memory_bytes if p == "memory" else vm.ticks.down(getattr(opt.cost, p + "_s"))


def _aux(lm: LinearModel, vm: DLRMVars, name: str, terms: list[tuple[int, Option]],
         p: str) -> Expr:
    """``{aux: 1}`` with ``aux == sum of the terms`` (nothing when there are none)."""
    row = {i: _coef(vm, opt, p) for i, opt in terms}
    row = {i: c for i, c in row.items() if c}
    if not row:
        return {}
    dim = "memory" if p == "memory" else "time"
    a = lm.var(name, 0, SAFE, dim=dim)
    lm.add({a: 1, **{i: -c for i, c in row.items()}}, lb=0, ub=0, dim=dim)
    return {a: 1}


def _phase_rows(lm: LinearModel, vm: DLRMVars, model: DLRMSpec, cluster: ClusterSpec,
                ln: Links, loads: dict[str, list[tuple[Expr, Expr]]]) -> None:
    d, dn = vm.ticks.down, dense_cost(model, cluster)
    ub = SAFE
    for p in ("lookup_fwd", "dist_fwd", "dist_bwd", "lookup_bwd"):
        vm.phase[p] = lm.var(f"P_{p}", 0, ub, dim="time")
    vm.u["any_a2a"] = lm.binary("u_any_a2a")  # the all-to-all's latency, paid once
    lm.add({vm.u["any_a2a"]: 1, vm.u["a2a"]: -1}, lb=0)
    lm.add({vm.u["any_a2a"]: 1, vm.u["twrw"]: -1}, lb=0)
    cap = usable_hbm_bytes(cluster) - dn.memory_bytes
    recv = {vm.m[t, o]: d(ln.a2a[0] * opt.recv_bytes)
            for (t, o) in vm.m for opt in [vm.options[t][o]] if opt.recv_bytes}
    for p, fwd in (("dist_fwd", True), ("dist_bwd", False)):
        lat = _dist_latency(vm, ln, fwd)
        phase = loads["comm_fwd" if fwd else "comm_bwd"]
        for expr, _ in phase:
            lm.add(_minus(vm.phase[p], _merge(expr, lat)), lb=0, dim="time")
        lm.add(_minus(vm.phase[p], _merge(recv, lat)), lb=0, dim="time")
        lm.add({vm.phase[p]: 1}, lb=d(dn.bottom_fwd_s if fwd else dn.bottom_bwd_s), dim="time")
    for expr, _ in loads["lookup_fwd"]:
        lm.add(_minus(vm.phase["lookup_fwd"], expr), lb=0, dim="time")
    for expr, mem in loads["lookup_bwd"]:
        lm.add(_minus(vm.phase["lookup_bwd"], expr), lb=0, dim="time")
        lm.add(mem, ub=cap, dim="memory")
    ar = {vm.m[t, o]: d(ln.ar[0] * opt.allreduce_bytes)
          for (t, o) in vm.m for opt in [vm.options[t][o]] if opt.allreduce_bytes}
    lm.add(_minus(vm.phase["lookup_bwd"], ar), lb=d(ln.ar[0] * dn.grad_bytes + ln.ar[1]),
           dim="time")


def _host_rows(lm: LinearModel, vm: DLRMVars, ln: Links) -> None:
    """Per-rank host memory (UVM-cached tables, the only options that use it, are
    table-wise: per-rank shards) within the cluster's host tier per GPU."""
    held = [(t, o) for (t, o) in vm.m if vm.options[t][o].cost.host_bytes]
    most = sum(vm.options[t][o].cost.host_bytes * vm.options[t][o].shards * lm.vars[vm.m[t, o]].ub
               for t, o in held)
    if most <= ln.host_bytes:  # every table in one rank's host memory fits: no row binds
        return
    for r in range(ln.ranks):
        row = {vm.n[t, o, r]: vm.options[t][o].cost.host_bytes for t, o in held}
        lm.add(row, ub=int(ln.host_bytes), dim="memory")


def _dist_latency(vm: DLRMVars, ln: Links, fwd: bool) -> Expr:
    """Latency of the output collectives in use (planner.costmodel.dlrm.evaluate.latencies_s)."""
    d = vm.ticks.down
    rs, node = (ln.rs, ln.rs_node) if fwd else (ln.ag, ln.ag_node)
    return {vm.u["any_a2a"]: d(ln.a2a[1]), vm.u["rs"]: d(rs[1]), vm.u["twrw"]: d(node[1])}


def _merge(a: Expr, b: Expr) -> Expr:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


def _minus(var: int, expr: Expr) -> Expr:
    """``var - expr`` as one row (``var`` does not appear in ``expr``)."""
    return {var: 1, **{k: -v for k, v in expr.items()}}


def _symmetry_rows(lm: LinearModel, ln: Links, lookup: list[tuple[Expr, Expr]]) -> None:
    """Ranks of a node are interchangeable: order their forward lookup loads; so are
    nodes: order them by their first (most loaded) rank."""
    def ge(r: int, q: int) -> None:
        row = _merge(lookup[r][0], {k: -v for k, v in lookup[q][0].items()})
        lm.add({k: v for k, v in row.items() if v}, lb=0, dim="time")  # shared terms cancel

    for r in range(ln.ranks - 1):
        if (r + 1) % ln.node:
            ge(r, r + 1)
    for g in range(ln.nodes - 1):
        ge(g * ln.node, (g + 1) * ln.node)


def _table_cuts(lm: LinearModel, vm: DLRMVars, model: DLRMSpec) -> None:
    """Valid rows that tighten the LP relaxation: a phase lasts at least as long as the
    load every rank carries (options on all ranks) plus one shard of any table on the
    rank holding it. Without them the relaxation spreads a big table over all ranks in
    fractions and its bound is loose (the search then stalls on a few large tables)."""
    for p, ph in (("lookup_fwd", "lookup_fwd"), ("lookup_bwd", "lookup_bwd"),
                  ("comm_fwd", "dist_fwd"), ("comm_bwd", "dist_bwd")):
        every = vm.shared[p]
        for t, tab in enumerate(model.tables):
            # one copy's shard on its rank; over several copies, the options' mean load
            shard = {vm.m[t, o]: vm.ticks.down(getattr(opt.cost, p + "_s")) // tab.count
                     for o, opt in enumerate(vm.options[t]) if opt.scope != "all"}
            row = _merge(every, shard)
            if shard:
                lm.add(_minus(vm.phase[ph], row), lb=0, dim="time")
