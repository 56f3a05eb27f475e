"""A primal heuristic for the DLRM sharding model (it proves nothing; CP-SAT starts from
its plan): options chosen by least total work, with tables whose one shard would be too
big for a rank split further; shards placed largest first where the sum of the phase
maxima grows least; then a local search of shard moves and swaps between ranks that
lowers the sum of the phase maxima, ties broken by the sum of squared per-rank loads
(which spreads load away from the fullest ranks).

The search works on the same per-shard costs as the model and the evaluator
(:func:`planner.costmodel.dlrm.model.table_options`); the floors of the phases that do not
depend on placement (received bytes, the bottom MLP, the dense all-reduce) are included so
that it does not shorten a phase below what bounds it anyway.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

from planner.costmodel.dlrm.model import Links, Option, dense_cost, links, usable_hbm_bytes
from planner.costmodel.dlrm.evaluate import phase_floors_s
from planner.specs.cluster import ClusterSpec
from formulations.dlrm.build import placement
from planner.specs.dlrm import DLRMPlan, DLRMSpec

#: Extra total work a table may take on for a finer split (column-wise, more shards: each
#: rank's load then comes in smaller pieces and balances better); one start per value.
SLACKS = (0.03, 0.06, 0.1, 0.15, 0.25)
#: Starts also switch this many more tables to data-parallel (those it costs least).
TO_DATA_PARALLEL = (0, 2, 4, 8, 16)
#: Placements (of all starts, by their sum of phase maxima) that the search improves.
KEEP = 3
#: Share of the time the starts may take before the search begins (at least one start).
STARTS_SHARE = 0.25
EPS = 1e-15  # seconds: loads closer than this are equal


def vec(opt: Option) -> np.ndarray:
    """Per-shard load in the model's phase order (lookup_fwd, lookup_bwd, comm_fwd, comm_bwd)."""
    c = opt.cost
    return np.array([c.lookup_fwd_s, c.lookup_bwd_s, c.comm_fwd_s, c.comm_bwd_s])


def width(ln: Links, opt: Option) -> int:
    """Ranks one copy of ``opt`` loads."""
    return ln.ranks if opt.scope == "all" else ln.node if opt.scope == "node" else opt.shards


@dataclass
class State:
    """Per-rank loads (4 x ranks), memory, and the movable shards (table-wise and
    column-wise): their option key (t, o), copy id, load vector, memory and rank."""

    load: np.ndarray
    mem: np.ndarray
    floor: np.ndarray
    cap: float
    key: list[tuple[int, int]]
    copy: np.ndarray
    v: np.ndarray
    m: np.ndarray
    rank: np.ndarray
    nodes: list[tuple[int, int, int]]  # (t, o, node) of table-row-wise copies
    every: list[tuple[int, int]]  # (t, o) of copies on all ranks
    target: np.ndarray | None = None  # per phase: the mean load once all is placed

    def objective(self) -> float:
        return float(np.maximum(self.load.max(1), self.floor).sum())


def choose_options(model: DLRMSpec, ln: Links, options: list[list[Option]],
                   slack: float, cap: float) -> list[int]:
    """Per table entry, the option with the smallest shard among those within ``slack``
    of the least total work (finer shards balance better; more work lengthens every
    phase), within memory."""
    out = []
    for opts in options:
        work = [float(vec(o).sum()) * width(ln, o) for o in opts]
        fits = [o for o, opt in enumerate(opts) if opt.cost.memory_bytes <= cap] or [0]
        least = min(work[o] for o in fits)
        near = [o for o in fits if work[o] <= least * (1 + slack)]
        out.append(min(near, key=lambda o: (vec(opts[o]).sum(), work[o])))
    return out


def floors(model: DLRMSpec, cluster: ClusterSpec, ln: Links, options: list[list[Option]],
           choice: list[int]) -> np.ndarray:
    """Per phase, what bounds it whatever the placement (received pooled vectors, bottom
    MLP less the collective latency, the dense all-reduce)."""
    recv = sum(t.count * options[i][o].recv_bytes for i, (t, o) in enumerate(zip(model.tables,
                                                                              choice)))
    ar = sum(t.count * options[i][o].allreduce_bytes for i, (t, o) in enumerate(zip(model.tables,
                                                                                choice)))
    return _floors(model, cluster, ln, recv, ar)


def _floors(model: DLRMSpec, cluster: ClusterSpec, ln: Links, recv: float, ar: float
            ) -> np.ndarray:
    """The evaluator's phase floors (``dlrm_eval.phase_floors_s``) less the all-to-all
    latency that every distribution phase pays: the search compares loads without it."""
    lat = ln.a2a[1]
    return np.array(phase_floors_s(model, cluster, recv, ar, (lat, lat))) - [0, 0, lat, lat]


def initial_state(model: DLRMSpec, cluster: ClusterSpec, options: list[list[Option]],
                  choice: list[int]) -> State | None:
    """Everything placed: all-rank options everywhere, table-row-wise copies on the node
    whose ranks' phase maxima grow least, then shards largest first by best fit."""
    ln = links(model, cluster)
    cap = usable_hbm_bytes(cluster) - dense_cost(model, cluster).memory_bytes
    load, mem = np.zeros((4, ln.ranks)), np.zeros(ln.ranks)
    st = State(load, mem, floors(model, cluster, ln, options, choice), cap, [],
               np.zeros(0, int), np.zeros((0, 4)), np.zeros(0), np.zeros(0, int), [], [])
    shards, copy_id = [], 0
    for t, (tab, o) in enumerate(zip(model.tables, choice)):
        opt = options[t][o]
        for _ in range(tab.count):
            if opt.scope == "all":
                load += vec(opt)[:, None]
                mem += opt.cost.memory_bytes
                st.every.append((t, o))
            elif opt.scope == "node":
                shards.append((float(vec(opt).sum()) * ln.node, t, o, -1))
            else:
                shards += [(float(vec(opt).sum()), t, o, copy_id)] * opt.shards
                copy_id += 1
    if (mem > cap).any():
        return None
    shards.sort(key=lambda s: -s[0])
    total = load.sum(1) + sum(vec(options[t][o]) * (ln.node if c < 0 else 1)
                              for _, t, o, c in shards)
    st.target = np.maximum(np.maximum(total / ln.ranks, st.floor), 1e-12)
    rank = [] if _place_nodes(st, ln, options, shards) else None
    taken: dict[int, list[int]] = {}  # copy -> ranks holding one of its shards
    rows = []
    for _, t, o, c in shards:
        if c < 0 or rank is None:
            continue
        r = _best_rank(st, vec(options[t][o]), options[t][o].cost.memory_bytes,
                       taken.get(c, []))
        if r is None:
            return None
        rank.append(r)
        taken.setdefault(c, []).append(r)
        st.key.append((t, c))
        st.load[:, r] += vec(options[t][o])
        st.mem[r] += options[t][o].cost.memory_bytes
        rows.append(vec(options[t][o]))
    if rank is None:
        return None
    st.v = np.array(rows).reshape(-1, 4)
    st.rank = np.array(rank, int)
    st.copy = np.array([c for _, c in st.key], int)
    st.key = [(t, choice[t]) for t, _ in st.key]
    st.m = np.array([options[t][o].cost.memory_bytes for t, o in st.key], float)
    return st


def _place_nodes(st: State, ln: Links, options: list[list[Option]], shards: list) -> bool:
    for _, t, o, c in shards:
        if c >= 0:
            continue
        opt, v = options[t][o], vec(options[t][o])
        best = None
        for g in range(ln.nodes):
            sl = slice(g * ln.node, (g + 1) * ln.node)
            if (st.mem[sl] + opt.cost.memory_bytes > st.cap).any():
                continue
            grow = float((st.load[:, sl] + v[:, None]).max(1).sum())
            if best is None or grow < best[0]:
                best = (grow, g)
        if best is None:
            return False
        sl = slice(best[1] * ln.node, (best[1] + 1) * ln.node)
        st.load[:, sl] += v[:, None]
        st.mem[sl] += opt.cost.memory_bytes
        st.nodes.append((t, o, best[1]))
    return True


def _best_rank(st: State, v: np.ndarray, m: float, taken: list[int]) -> int | None:
    """Rank where the sum of phase maxima (at least the targets) grows least, then the
    least loaded (squared loads)."""
    top = np.maximum(st.load.max(1), st.floor if st.target is None else st.target)
    new = st.load + v[:, None]
    f = np.maximum(new, top[:, None]).sum(0)
    s = (new ** 2).sum(0) - (st.load ** 2).sum(0)
    bad = st.mem + m > st.cap
    bad[taken] = True
    if bad.all():
        return None
    score = np.where(bad, np.inf, f)
    ok = np.flatnonzero(score <= score.min() + EPS)
    return int(ok[np.argmin(s[ok])])


def _rest_max(load: np.ndarray, a: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per phase, over ranks other than ``a``: the largest load, its rank, the second."""
    x = load.copy()
    x[:, a] = -np.inf
    i1 = x.argmax(1)
    v1 = x[np.arange(4), i1]
    x[np.arange(4), i1] = -np.inf
    return v1, i1, x.max(1)


POWER = 8


def _soft(st: State, load: np.ndarray) -> np.ndarray:
    """A smooth stand-in for the phase maxima: sum over phases of (load / target)^POWER
    (per rank when ``load`` is 4 x ranks)."""
    return ((load.T / st.target) ** POWER).T.sum(0)


def _move_scores(st: State, i: int) -> tuple[np.ndarray, np.ndarray]:
    """(objective, change of the squared-load sum) after moving shard ``i`` to each rank."""
    a, v = st.rank[i], st.v[i]
    v1, i1, v2 = _rest_max(st.load, a)
    b = np.arange(st.load.shape[1])
    rest = np.where(i1[:, None] == b[None, :], v2[:, None], v1[:, None])
    top = np.maximum(np.maximum(rest, st.load + v[:, None]), (st.load[:, a] - v)[:, None])
    f = np.maximum(top, st.floor[:, None]).sum(0)
    ds = _soft(st, st.load[:, a] - v)[None] + _soft(st, st.load + v[:, None]) \
        - _soft(st, st.load[:, a])[None] - _soft(st, st.load)
    bad = st.mem + st.m[i] > st.cap
    bad[a] = True
    bad[st.rank[st.copy == st.copy[i]]] = True
    return np.where(bad, np.inf, f), ds


def _swap_scores(st: State, i: int) -> tuple[np.ndarray, np.ndarray]:
    """(objective, change of the squared-load sum) after swapping shard ``i`` with each
    shard."""
    a, v = st.rank[i], st.v[i]
    v1, i1, v2 = _rest_max(st.load, a)
    b = st.rank
    rest = np.where(i1[:, None] == b[None, :], v2[:, None], v1[:, None])
    d = st.v.T - v[:, None]  # (4, shards): w - v
    la, lb = st.load[:, a][:, None] + d, st.load[:, b] - d
    f = np.maximum(np.maximum(np.maximum(rest, la), lb), st.floor[:, None]).sum(0)
    ds = _soft(st, la) + _soft(st, lb) - _soft(st, st.load[:, a]) - _soft(st, st.load[:, b])
    bad = (b == a) | (st.mem[a] - st.m[i] + st.m > st.cap) | (st.mem[b] + st.m[i] - st.m > st.cap)
    for r in st.rank[st.copy == st.copy[i]]:  # i's column-wise siblings' ranks
        bad |= b == r
    for c in st.copy[st.rank == a]:  # shards of copies already on a
        bad |= st.copy == c
    return np.where(bad, np.inf, f), ds


def improve(st: State, deadline: float) -> None:
    """Moves and swaps of shards on the ranks that set a phase maximum: the first that
    lowers the objective is taken; when none does, the one that lowers the squared-load
    sum most without raising the objective (a plateau of tied maxima drains rank by rank)."""
    rng = np.random.default_rng(0)
    while time.perf_counter() < deadline and len(st.rank):
        f0 = st.objective()
        top = st.load.max(1)
        crit = np.flatnonzero(((st.load >= top[:, None] - EPS)
                               & (top >= st.floor)[:, None]).any(0))
        items = np.flatnonzero(np.isin(st.rank, crit))
        rng.shuffle(items)
        best = _first_better(st, items, f0, deadline)
        if best is None:
            return
        _apply(st, *best)


def search(st: State, deadline: float, seed: int = 0, stall: int = 30) -> State:
    """Iterated local search: :func:`improve`, then a few random swaps of shards on the
    fullest rank, until the deadline or ``stall`` rounds without progress; the best state
    seen."""
    rng = np.random.default_rng(seed)
    improve(st, deadline)
    best, idle = (st.objective(), _copy(st)), 0
    while time.perf_counter() < deadline and len(st.rank) > 1 and idle < stall:
        for _ in range(3):
            on = np.flatnonzero(st.rank == int(np.argmax(st.load.sum(0))))
            i = int(rng.choice(on if len(on) else np.arange(len(st.rank))))
            f, _ = _swap_scores(st, i)
            ok = np.flatnonzero(np.isfinite(f))
            if len(ok):
                _apply(st, "swap", i, int(rng.choice(ok)))
        improve(st, deadline)
        idle += 1
        if st.objective() < best[0] * (1 - 1e-12):
            best, idle = (st.objective(), _copy(st)), 0
        elif rng.random() < 0.5:
            st = _copy(best[1])
    return best[1]


def local_plan(model: DLRMSpec, cluster: ClusterSpec, vm, deadline: float) -> dict[int, int] | None:
    """The model's variables for the best plan :func:`local_state` finds by ``deadline``."""
    st = local_state(model, cluster, vm.options, deadline)
    return None if st is None else values(vm, st)


def local_state(model: DLRMSpec, cluster: ClusterSpec, options: list[list[Option]],
                deadline: float) -> State | None:
    """The best placement the search finds by ``deadline``: starts for every slack in
    :data:`SLACKS` and top-up in :data:`TO_DATA_PARALLEL`; the :data:`KEEP` best
    placements improved for a share of half the time each, then the best of them switched
    between replicated and sharded tables (:func:`toggle`) and searched for the rest.
    Needs only the options (no integer model), so it also serves models too large to
    build."""
    t0 = time.perf_counter()
    starts_until = t0 + STARTS_SHARE * (deadline - t0)
    states = []
    for choice in _choices(model, cluster, options):
        if states and time.perf_counter() > starts_until:
            break  # large models: fewer starts, more search
        if (st := initial_state(model, cluster, options, choice)) is not None:
            states.append(st)
    if not states:
        return None
    states = sorted(states, key=State.objective)[:KEEP]
    now = time.perf_counter()
    for i, st in enumerate(states):
        improve(st, now + (deadline - now) * (i + 1) / (2 * len(states)))
    best = toggle(min(states, key=State.objective), model, cluster, options,
                  now + 0.75 * (deadline - now))
    return search(best, deadline)


def _choices(model: DLRMSpec, cluster: ClusterSpec, options: list[list[Option]]):
    """Option choices to start from: per slack, the choice of :func:`choose_options`, and
    the same with the ``k`` tables that data-parallel costs least extra work switched to
    it (a replicated table carries no all-to-all, so this can bring every rank's share of
    the pooled-embedding traffic under one more shard's worth)."""
    ln = links(model, cluster)
    cap = usable_hbm_bytes(cluster) - dense_cost(model, cluster).memory_bytes
    seen = set()
    for slack in SLACKS:
        base = choose_options(model, ln, options, slack, cap)
        extra = []
        for t, o in enumerate(base):
            dp = [i for i, x in enumerate(options[t]) if x.kind == "data_parallel"]
            if dp and options[t][o].kind != "data_parallel":
                w = float(vec(options[t][dp[0]]).sum()) * ln.ranks
                own = float(vec(options[t][o]).sum()) * width(ln, options[t][o])
                extra.append(((w - own) * model.tables[t].count, t, dp[0]))
        extra.sort()
        for k in TO_DATA_PARALLEL:
            choice = list(base)
            for _, t, dp in extra[:k]:
                choice[t] = dp
            if tuple(choice) not in seen:
                seen.add(tuple(choice))
                yield choice


#: Replicated tables (the heaviest per rank) and sharded copies (on the fullest ranks) that
#: one round of :func:`toggle` tries to switch between sharded and replicated.
TOGGLE_CANDIDATES = 12


def toggle(st: State, model: DLRMSpec, cluster: ClusterSpec, options: list[list[Option]],
           deadline: float) -> State:
    """Switch tables between replicated (data-parallel) and sharded while that lowers the
    sum of phase maxima (a replicated table loads every rank, the fullest included; a
    sharded one loads one rank but sends its pooled vectors); each accepted switch is
    followed by :func:`improve`."""
    while time.perf_counter() < deadline:
        f0, best = st.objective(), None
        for cand in _toggles(st, model, cluster, options):
            if cand.objective() < (best or st).objective() * (1 - 1e-12):
                best = cand
            if time.perf_counter() >= deadline:
                break
        if best is None or best.objective() >= f0 * (1 - 1e-12):
            return st
        st = best
        improve(st, deadline)
    return st


def _toggles(st: State, model: DLRMSpec, cluster: ClusterSpec, options: list[list[Option]]):
    ln = links(model, cluster)
    dp = sorted(((float(vec(options[t][o]).sum()), j) for j, (t, o) in enumerate(st.every)
                 if options[t][o].kind == "data_parallel"), reverse=True)
    for _, j in dp[:TOGGLE_CANDIDATES]:
        t, o = st.every[j]
        for o2, opt in enumerate(options[t]):
            if opt.scope == "ranks":
                new = _rebuilt(st, model, cluster, options, drop_every=j, add=(t, o2))
                if new is not None:
                    yield new
    top = st.load.max(1)
    crit = np.flatnonzero((st.load >= top[:, None] - EPS).any(0))
    copies = list(dict.fromkeys(st.copy[np.isin(st.rank, crit)].tolist()))
    for c in copies[:TOGGLE_CANDIDATES]:
        t = st.key[int(np.flatnonzero(st.copy == c)[0])][0]
        for o2, opt in enumerate(options[t]):
            if opt.kind == "data_parallel":
                new = _rebuilt(st, model, cluster, options, drop_copy=c, add=(t, o2))
                if new is not None and new.mem.max() <= new.cap:
                    yield new


def _rebuilt(st: State, model: DLRMSpec, cluster: ClusterSpec, options: list[list[Option]],
             add: tuple[int, int], drop_every: int | None = None,
             drop_copy: int | None = None) -> State | None:
    """A copy of the state with one replicated copy or one sharded copy taken out and
    one copy of option ``add`` placed (sharded: each shard on its best rank)."""
    new = _copy(st)
    new.every = list(st.every)
    if drop_every is not None:
        t, o = new.every.pop(drop_every)
        new.load -= vec(options[t][o])[:, None]
        new.mem -= options[t][o].cost.memory_bytes
    keep = np.ones(len(st.rank), bool) if drop_copy is None else st.copy != drop_copy
    for i in np.flatnonzero(~keep):
        new.load[:, st.rank[i]] -= st.v[i]
        new.mem[st.rank[i]] -= st.m[i]
    new.key = [k for k, ok in zip(st.key, keep) if ok]
    new.copy, new.v, new.m, new.rank = st.copy[keep], st.v[keep], st.m[keep], new.rank[keep]
    t, o = add
    opt = options[t][o]
    if opt.scope == "all":
        new.every.append(add)
        new.load += vec(opt)[:, None]
        new.mem += opt.cost.memory_bytes
    else:
        c, taken = int(st.copy.max(initial=-1)) + 1, []
        for _ in range(opt.shards):
            r = _best_rank(new, vec(opt), opt.cost.memory_bytes, taken)
            if r is None:
                return None
            taken.append(r)
            new.key.append(add)
            new.copy, new.rank = np.append(new.copy, c), np.append(new.rank, r)
            new.v, new.m = np.vstack([new.v, vec(opt)]), np.append(new.m, opt.cost.memory_bytes)
            new.load[:, r] += vec(opt)
            new.mem[r] += opt.cost.memory_bytes
    new.floor = _floor_of(new, model, cluster, options)
    return new


def _floor_of(st: State, model: DLRMSpec, cluster: ClusterSpec,
              options: list[list[Option]]) -> np.ndarray:
    """:func:`floors` of the state's own copies."""
    placed = [*st.every, *((t, o) for t, o, _ in st.nodes)]
    firsts = np.unique(st.copy, return_index=True)[1]
    placed += [st.key[i] for i in firsts]
    recv = sum(options[t][o].recv_bytes for t, o in placed)
    ar = sum(options[t][o].allreduce_bytes for t, o in placed)
    return _floors(model, cluster, links(model, cluster), recv, ar)


def _copy(st: State) -> State:
    return replace(st, load=st.load.copy(), mem=st.mem.copy(), rank=st.rank.copy())


def _first_better(st: State, items: np.ndarray, f0: float,
                  deadline: float = float("inf")) -> tuple[str, int, int] | None:
    best, tol = None, 1e-12 * f0
    for i in items:
        if time.perf_counter() > deadline:  # large models: one scan can outlast the limit
            break
        for kind, scorer in (("move", _move_scores), ("swap", _swap_scores)):
            f, ds = scorer(st, i)
            lowest = f.min()
            if lowest < f0 - tol:
                ok = np.flatnonzero(f <= lowest + tol)
                return kind, int(i), int(ok[np.argmin(ds[ok])])
            ok = np.flatnonzero(f <= f0 + tol)
            if len(ok):
                j = int(ok[np.argmin(ds[ok])])
                if ds[j] < -1e-9 and (best is None or ds[j] < best[0]):
                    best = (ds[j], kind, int(i), j)
    return None if best is None else best[1:]


def _apply(st: State, kind: str, i: int, j: int) -> None:
    a = st.rank[i]
    if kind == "move":
        st.load[:, a] -= st.v[i]
        st.load[:, j] += st.v[i]
        st.mem[a] -= st.m[i]
        st.mem[j] += st.m[i]
        st.rank[i] = j
        return
    b = st.rank[j]
    d = st.v[j] - st.v[i]
    st.load[:, a] += d
    st.load[:, b] -= d
    st.mem[a] += st.m[j] - st.m[i]
    st.mem[b] += st.m[i] - st.m[j]
    st.rank[i], st.rank[j] = b, a


def state_plan(model: DLRMSpec, options: list[list[Option]], st: State) -> DLRMPlan:
    """The sharding plan a state describes (as ``dlrm_search.decode`` reads the model's
    variables)."""
    copies: dict[tuple[int, int], int] = {}
    ranks: dict[tuple[int, int], dict[int, int]] = {}
    nodes: dict[tuple[int, int], dict[int, int]] = {}
    for t, o in st.every:
        copies[t, o] = copies.get((t, o), 0) + 1
    for t, o, g in st.nodes:
        copies[t, o] = copies.get((t, o), 0) + 1
        nodes.setdefault((t, o), {})[g] = nodes.get((t, o), {}).get(g, 0) + 1
    seen = set()
    for (t, o), c, r in zip(st.key, st.copy.tolist(), st.rank.tolist()):
        if c not in seen:
            seen.add(c)
            copies[t, o] = copies.get((t, o), 0) + 1
        held = ranks.setdefault((t, o), {})
        held[r] = held.get(r, 0) + 1
    out = [placement(model, t, options[t][o], k, ranks.get((t, o)), nodes.get((t, o)))
           for (t, o), k in copies.items()]
    return DLRMPlan(tables=out)


def values(vm, st: State) -> dict[int, int]:
    """The model's variables (m, n, z) for the state's plan."""
    hint = {i: 0 for i in (*vm.m.values(), *vm.n.values(), *vm.z.values())}
    for t, o in st.every:
        hint[vm.m[t, o]] += 1
    for t, o, g in st.nodes:
        hint[vm.m[t, o]] += 1
        hint[vm.z[t, o, g]] += 1
    seen = set()
    for (t, o), c, r in zip(st.key, st.copy.tolist(), st.rank.tolist()):
        if c not in seen:
            seen.add(c)
            hint[vm.m[t, o]] += 1
        hint[vm.n[t, o, r]] += 1
    return hint
