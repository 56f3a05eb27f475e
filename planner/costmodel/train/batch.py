"""The vectorized evaluator: many plans at once, through the same terms and composition.

:func:`evaluate_columns` evaluates a columnar batch, plans given as indices into
coefficient tables (:mod:`planner.costmodel.train.tables`: point ``q``, recomputation per layer
type, sequence parallelism, state option), with numpy over the stage groups through
:mod:`planner.costmodel.compose`, the composition the scalar evaluator uses.
:func:`evaluate_many` takes a list of :class:`~planner.specs.plan.Plan` objects, tabulates
the points they use, and answers with the same arrays; plans the tables cannot hold (a
structural rule broken, a placement that does not fit the topology) go through the scalar
evaluator, so every entry equals :func:`planner.costmodel.train.evaluator.evaluate` on its plan
(to float rounding, relative 1e-12 in practice).
"""

from __future__ import annotations

import gc
import itertools
from contextlib import contextmanager
from dataclasses import dataclass, fields
from operator import attrgetter, itemgetter
from typing import Any, Iterator, Sequence

import numpy as np

from planner.costmodel.compose import (
    Overlap,
    busy_s,
    dp_window_microbatches,
    headroom_bytes,
    iteration_time_s,
    stage_memory,
    stage_time,
    tail_time,
)
from planner.costmodel.energy import energy_coefficients
from planner.costmodel.train.evaluator import check_structure, evaluate
from planner.costmodel.layer import masked_attention_flops_per_sequence, model_flops_per_sequence
from planner.costmodel.network import PlacementError, spans_for
from planner.costmodel.objective import TIME, Objective
from planner.costmodel.train.points import DECISIONS, RECOMPUTE, STATES, Inner, Outer
from planner.costmodel.train.tables import Tables, build_tables
from planner.specs.cluster import ClusterSpec
from planner.specs.model import ModelSpec
from planner.specs.plan import WORLD_DIMS, Plan


@dataclass(frozen=True)
class Estimates:
    """One entry per plan. ``costable`` is False where a plan cannot be costed at all
    (more GPUs than the cluster has, more stages than layers, offload without a tier, a
    placement that does not fit); its times and memory are NaN and it is infeasible."""

    feasible: np.ndarray
    costable: np.ndarray
    iteration_time_s: np.ndarray
    memory_per_gpu_bytes: np.ndarray
    host_memory_per_gpu_bytes: np.ndarray  # 0 on clusters without an offload tier
    gpu_busy_s: np.ndarray
    energy_j: np.ndarray
    mfu: np.ndarray
    hfu: np.ndarray
    tokens_per_s: np.ndarray

    def __len__(self) -> int:
        return len(self.feasible)

    @classmethod
    def concat(cls, parts: Sequence["Estimates"]) -> "Estimates":
        return cls(**{f.name: np.concatenate([getattr(p, f.name) for p in parts])
                      for f in fields(cls)})

    def take(self, index: np.ndarray) -> "Estimates":
        return Estimates(**{f.name: getattr(self, f.name)[index] for f in fields(self)})


# ---- the columnar core -------------------------------------------------------------------
def _per_type(arr: np.ndarray, q: np.ndarray, rc: np.ndarray, sp: np.ndarray) -> np.ndarray:
    """``arr[q, t, rc[:, t], sp]`` for every type t: (P, T)."""
    t = np.arange(arr.shape[1])[None, :]
    return arr[q[:, None], t, rc, sp[:, None]]


def evaluate_columns(tb: Tables, q: np.ndarray, rc: np.ndarray, sp: np.ndarray,
                     z: np.ndarray) -> Estimates:
    """Plans ``(q[i], rc[i], sp[i], z[i])`` of the tables ``tb``: point, recomputation index
    per layer type (into :data:`RECOMPUTE`), sequence parallelism (0/1), state option (into
    :data:`STATES`). Every plan must be one the tables hold (``tb.terms.sp_ok``,
    ``state_ok`` and ``rc_ok`` true), as every plan of a search space is."""
    A, cluster = tb.terms, tb.space.cluster
    q, sp, z = (np.asarray(a, np.int64) for a in (q, sp, z))
    rc = np.asarray(rc, np.int64).reshape(len(q), -1)
    g_ok = A.group_valid[q]  # (P, G)
    n = A.group_type_layers[q].astype(float)  # (P, G, T)
    emb, head = A.group_embedding[q], A.group_head[q]
    pick = lambda arr: _per_type(arr, q, rc, sp)  # noqa: E731
    on_ends = lambda e, h: emb * e[q, sp][:, None] + head * h[q, sp][:, None]  # noqa: E731
    compute = np.einsum("pgt,pt->pg", n, pick(A.layer_total_s)) + on_ends(A.emb_total_s,
                                                                           A.head_total_s)
    wf = np.einsum("pgt,pt->pg", n, pick(A.layer_fwd_s)) + on_ends(A.emb_fwd_s, A.head_fwd_s)
    wb = np.einsum("pgt,pt->pg", n, pick(A.layer_bwd_s)) + on_ends(A.emb_bwd_s, A.head_bwd_s)
    by_z = lambda arr: arr[q, :, z]  # noqa: E731  (P, G)
    settings = tb.settings
    ov = Overlap(settings.overlap_param_gather, settings.overlap_dp_grad_reduce,
                 cluster.gpu.efficiency.overlap_slowdown, cluster.gpu.efficiency.sharded_overlap)
    layers = A.group_layers[q]
    stage = stage_time(compute, wf, wb, A.p2p_s[q][:, None], A.p2p_overlap_s[q][:, None],
                       by_z(A.dp_fwd_s), by_z(A.dp_bwd_s), by_z(A.fetch_s), layers, ov)
    tail = tail_time(by_z(A.optimizer_s), by_z(A.cpu_step_s), A.tied_s[q], by_z(A.dp_grad_s),
                     by_z(A.dp_param_s), by_z(A.grad_down_s), wf, wb, layers, ov,
                     dp_window_microbatches(A.pp[q], A.v[q], A.m[q])[:, None],
                     dp_units=A.group_dp_units[q])
    m, v, pp = A.m[q], A.v[q], A.pp[q]
    counts = A.group_count[q] * g_ok
    t_iter = iteration_time_s(m, pp, v, np.where(g_ok, stage.total_s, 0.0), counts,
                              np.where(g_ok, tail.total_s, 0.0), axis=1,
                              straggler=A.straggler[q])
    busy = busy_s(m, pp, counts, wf + wb, np.where(g_ok, by_z(A.optimizer_s), 0.0), axis=1)
    mem, host = _memory(tb, q, rc, sp, z, n, g_ok)
    ok = (mem <= cluster.gpu.hbm_bytes) & A.sp_ok[q, sp] & A.state_ok[q, z]
    if cluster.offload is not None:
        ok &= host <= cluster.offload.capacity_bytes
    return _finish(tb, q, rc, sp, ok, t_iter, mem, host, busy)


def _memory(tb: Tables, q, rc, sp, z, n, g_ok) -> tuple[np.ndarray, np.ndarray]:
    """HBM and offload-tier bytes of the worst stage group of each plan."""
    A, cluster = tb.terms, tb.space.cluster
    act = np.einsum("pgt,pt->pg", n, _per_type(A.layer_act_bytes, q, rc, sp))
    ws_t = _per_type(A.layer_workspace_bytes, q, rc, sp)  # (P, T)
    ws = np.max(np.where(n > 0, ws_t[:, None, :], 0.0), axis=2)
    head = A.group_head[q].astype(bool)
    ws = np.where(head, np.maximum(ws, A.head_workspace_bytes[q, sp][:, None]), ws)
    mem = stage_memory(A.states_bytes[q, :, z], A.buffers_bytes[q, z][:, None], act,
                       A.group_inflight[q], A.v[q][:, None], ws,
                       np.where(head, A.head_act_bytes[q, sp][:, None], 0.0),
                       headroom_bytes(cluster))
    total = np.max(np.where(g_ok, mem.total, -np.inf), axis=1)
    host = np.max(np.where(g_ok, A.host_bytes[q, :, z], 0.0), axis=1)
    return total, host


def _finish(tb: Tables, q, rc, sp, ok, t_iter, mem, host, busy) -> Estimates:
    """Throughput, FLOPs utilization and energy from the times."""
    A, space, cluster = tb.terms, tb.space, tb.space.cluster
    seq, gb = space.base["seq_len"], space.base["global_batch_size"]
    dtype = space.base.get("dtype", "bf16")
    outers = [o for o, _ in tb.points]
    replicas = np.array([o.tp * o.cp * o.dp for o in outers], float)[q]  # GPUs per stage
    counts = np.array([space.model.layer_counts()[t] for t in tb.layer_types], float)
    extra = _per_type(A.layer_extra_flops, q, rc, sp) @ counts  # per microbatch and replica
    model_flops = gb * model_flops_per_sequence(space.model, seq)
    # the plans' kernel: a list's tables (and a space's --fix attention=...) carry it in the
    # shared settings, not in the base
    attention = (tb.settings.attention if tb.settings is not None
                 else space.base.get("attention", "flash"))
    masked = (gb * masked_attention_flops_per_sequence(space.model, seq)
              if attention == "flash" else 0.0)
    hw_flops = model_flops - masked + extra * replicas * A.m[q]
    world = A.world[q].astype(float)
    peak = cluster.gpu.peak_flops(dtype)
    coef = {w: energy_coefficients(cluster, int(w)) for w in np.unique(world)}
    a_j = np.array([coef[w][0] for w in world])
    b_j = np.array([coef[w][1] for w in world])
    return Estimates(
        feasible=ok, costable=np.ones(len(q), bool), iteration_time_s=t_iter,
        memory_per_gpu_bytes=mem, host_memory_per_gpu_bytes=host, gpu_busy_s=busy,
        energy_j=a_j * t_iter + b_j * busy, mfu=model_flops / (t_iter * world * peak),
        hfu=hw_flops / (t_iter * world * peak), tokens_per_s=gb * seq / t_iter)


def inner_columns(tb: Tables, points: Sequence[int] | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every inner choice at ``points`` (default: all) as columns ``(q, rc, sp, z)``, point
    after point, each point's choices in the order of ``space.inners``."""
    space = tb.space
    qs = np.arange(tb.num_points) if points is None else np.asarray(points, np.int64)
    rcs = np.array([[RECOMPUTE.index(r) for r in rc] for rc in space.recompute_options()],
                   np.int64).reshape(-1, len(tb.layer_types))
    blocks: dict[tuple, list[int]] = {}  # points with the same sp and state options
    for q in qs.tolist():
        o = tb.points[q][0]
        sig = (tuple(int(x) for x in space.sp_options(o)), tuple(space.state_options(o)),
               tuple(bool(x) for x in tb.terms.rc_point_ok[q]))
        blocks.setdefault(sig, []).append(q)
    parts = []
    for (sps, zs, rmodes), members in blocks.items():
        combo = [(r, s_, z_) for r in range(len(rcs)) if all(rmodes[i] for i in rcs[r])
                 for s_ in sps for z_ in zs]
        r_i, s_i, z_i = (np.array(c, np.int64).reshape(-1) for c in zip(*combo)) if combo \
            else (np.zeros(0, np.int64),) * 3
        mq = np.array(members, np.int64)
        parts.append((np.repeat(mq, len(combo)), np.tile(r_i, len(mq)), np.tile(s_i, len(mq)),
                      np.tile(z_i, len(mq))))
    q = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
    rank = np.zeros(tb.num_points, np.int64)
    rank[qs] = np.arange(len(qs))  # the points' order as given
    order = np.argsort(rank[q], kind="stable")
    r = np.concatenate([p[1] for p in parts])[order] if parts else np.zeros(0, np.int64)
    sp = np.concatenate([p[2] for p in parts])[order] if parts else np.zeros(0, np.int64)
    z = np.concatenate([p[3] for p in parts])[order] if parts else np.zeros(0, np.int64)
    return q[order], rcs[r], sp, z


# ---- lists of plans ----------------------------------------------------------------------
class PlanSet:
    """The points ``(outer, domain)`` a list of plans with the same settings uses, as a point
    source for :func:`build_tables` (every inner choice tabulated at each point); ``first``
    is one of the plans (its settings are every plan's); ``tp_comm`` the TP exchange every
    plan uses, or None where each uses its sequence parallelism's default."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, first: Plan,
                 points: Sequence[tuple[Outer, tuple[int, ...] | None]],
                 tp_comm: str | None = None):
        self.model, self.cluster, self._first = model, cluster, first
        self.base = {"seq_len": first.seq_len, "global_batch_size": first.global_batch_size,
                     "dtype": first.dtype}
        # None: each plan's TP exchange is its sp's default (rs_ag with sp, else allreduce)
        self.fixed = {} if tp_comm is None else {"tp_comm": tp_comm}
        self.order = tuple(first.placement.order)
        self.layer_types = model.layer_types
        self._domains: dict[Outer, list[tuple[int, ...] | None]] = {}
        for o, dom in points:
            self._domains.setdefault(o, []).append(dom)
        self.outers = list(self._domains)

    def placements(self, o: Outer) -> list[tuple[int, ...] | None]:
        return self._domains[o]

    def sp_options(self, o: Outer) -> list[bool]:
        return [False, True] if o.tp > 1 else [False]

    @property
    def num_states(self) -> int:
        return len(STATES) if self.cluster.offload is not None else 4

    def state_options(self, o: Outer) -> list[int]:
        return list(range(self.num_states))

    def recompute_options(self) -> list[tuple[str, ...]]:
        return list(itertools.product(RECOMPUTE, repeat=len(self.layer_types)))

    def inners(self, o: Outer):
        for rc in self.recompute_options():
            for sp in self.sp_options(o):
                for k in self.state_options(o):
                    yield Inner.of(rc, sp, k)

    def plan(self, o: Outer, domain: tuple[int, ...] | None, inner: Inner) -> Plan:
        """The settings every plan of the set shares (the degrees are not used)."""
        return self._first


#: What the plans of one table must share: every plan field that is not a decision (with
#: the placement order and the TP exchange, read beside them).
SETTINGS: tuple[str, ...] = tuple(f for f in Plan.model_fields if f not in DECISIONS)
#: The decisions :func:`check_structure` may read (with the settings and the recomputation):
#: never ``sequence_parallel``, ``zero_stage``, ``tp_comm`` or ``placement``, so plans that
#: differ only in those share one structural check (tests/test_batch.py records the reads).
STRUCTURE: tuple[str, ...] = ("tp", "cp", "pp", "dp", "microbatch_size", "virtual_stages",
                              "ep", "expert_tp", "cp_comm", "uneven_pipeline",
                              "offload_optimizer", "offload_params")
# A list of plans is read by C-level calls per plan on the fields pydantic keeps in the
# instance's __dict__ (the structure and the settings as one hashable key; then sp, TP
# exchange, recomputation, ZeRO stage and placement), never field by field in Python; the
# rest works on numpy columns or once per distinct value.
_key_of = itemgetter(*STRUCTURE, *SETTINGS)
_NS = len(STRUCTURE)
_TP, _OPT, _PAR = (STRUCTURE.index(f) for f in ("tp", "offload_optimizer", "offload_params"))
_MOE_OVERLAP = SETTINGS.index("overlap_moe_ep_comm")
_REST = tuple(map(itemgetter, ("sequence_parallel", "tp_comm", "recompute", "zero_stage")))
_placement_of = itemgetter("placement")
_order_of, _domain_of = attrgetter("order"), attrgetter("domain")
_factors_of = itemgetter(*WORLD_DIMS)
_CHUNK = 4096  # plans read at a time: their objects stay in cache from one pass to the next
#: the state option of (zero_stage, offload_optimizer, offload_params) at 4 zero + 2 opt +
#: par; -1 where none holds it (a plan made without validation: the scalar evaluator's)
_STATE_AT = np.full(16, -1, np.int64)
_STATE_AT[[4 * zero + 2 * opt + par for zero, opt, par in STATES]] = np.arange(len(STATES))


@dataclass
class _Group:
    """The plans of one settings key, as columns: ``index`` their positions in the list;
    per plan its point key (``pkey``), sp, state option (``z``, -1 where none holds it) and
    recomputation (``rc``, an index into the recomputation choices). Point key ``j`` is the
    structural key ``key_of[j]`` (an index into ``keys``, the :data:`STRUCTURE` values; with
    the recomputation where the structural rules read it) and the domain
    ``domains[dom_of[j]]`` (its factors in :data:`WORLD_DIMS` order, or None). ``first``
    holds each structural key's first plan (its position in the list); ``tp_comm`` the TP
    exchange of every plan, None where each has its sp's default."""

    tp_comm: str | None
    index: np.ndarray
    pkey: np.ndarray
    sp: np.ndarray
    z: np.ndarray
    rc: np.ndarray
    keys: list[tuple]
    first: list[int]
    key_of: np.ndarray
    dom_of: np.ndarray
    domains: list[tuple[int, ...] | None]


def _codes(values: list) -> tuple[np.ndarray, list, np.ndarray]:
    """Each value's index among the distinct values, numbered in order of first appearance;
    those values; and where each first appears. C-level passes: an equality count (one
    value: the common case for a setting), else one dict pass that gives each value the
    position where it first appears."""
    n = len(values)
    if n == 0:
        return np.zeros(0, np.int64), [], np.zeros(0, np.int64)
    if values.count(values[0]) == n:
        return np.zeros(n, np.int64), [values[0]], np.zeros(1, np.int64)
    seen: dict = {}
    codes, at = _ranks(np.fromiter(map(seen.setdefault, values, itertools.count()), np.int64,
                                   n))
    return codes, [values[i] for i in at.tolist()], at


def _ranks(first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """From each entry's position of first appearance (``first[i] <= i``): dense codes
    numbered in order of first appearance, and those positions; no sort."""
    new = np.zeros(len(first), bool)
    new[first] = True
    rank = np.cumsum(new) - 1
    return rank[first], np.flatnonzero(new)


def _dense(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Integer keys as dense codes numbered in order of first appearance (as :func:`_codes`
    numbers them), and each code's first position."""
    n = len(key)
    if n and key.min() >= 0 and key.max() < 4 * n:  # a small range: no sort
        first_at = np.full(int(key.max()) + 1, n, np.int64)
        np.minimum.at(first_at, key, np.arange(n))  # each key's first position
        return _ranks(first_at[key])
    distinct, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(distinct), np.int64)
    rank[order] = np.arange(len(distinct))
    return rank[inverse.reshape(-1)], first[order]


def _recompute_codes(recs: Sequence, types: tuple[str, ...]) -> tuple[np.ndarray, list[tuple]]:
    """Per plan, its recomputation as an index into the choices returned (per layer type,
    indices into :data:`RECOMPUTE`); a name is that mode on every type."""
    rc_code = {(RECOMPUTE.index(m),) * len(types): k for k, m in enumerate(RECOMPUTE)}
    of_str = {m: k for k, m in enumerate(RECOMPUTE)}  # "full" -> its code above
    try:  # every plan names one mode: one C-level pass
        codes = np.fromiter(map(of_str.__getitem__, recs), np.int64, len(recs))
    except TypeError:  # per-type modes (dicts, unhashable) among them
        codes = np.fromiter(
            (of_str[r] if r.__class__ is str else rc_code.setdefault(
                tuple(RECOMPUTE.index(r.get(t, "none")) for t in types), len(rc_code))
             for r in recs), np.int64, len(recs))
    return codes, list(rc_code)


def _read(plans: Sequence[Plan]) -> tuple[np.ndarray, list[tuple], np.ndarray,
                                          tuple[list, ...], list[tuple] | None,
                                          list[tuple[int, ...] | None]]:
    """Per plan, the index of its key (its :data:`STRUCTURE` and :data:`SETTINGS` values)
    among the distinct keys, numbered in order of first appearance; those keys and where
    each first appears; per plan its sp, TP exchange, recomputation and ZeRO stage
    (columns), its placement order (a tuple; None for all where every plan has the first
    plan's) and its domain factors (None without a domain). C-level passes over a slice of
    the plans at a time, while its objects are in cache."""
    keys: list[tuple] = []
    seen: dict[tuple, int] = {}  # key -> where it first appears
    first: list[int] = []
    rest: tuple[list, ...] = ([], [], [], [])
    orders: list[list[str]] = []
    factors: list[tuple[int, ...] | None] = []
    first_order, same_order = plans[0].placement.order, True
    for lo in range(0, len(plans), _CHUNK):
        fields_ = list(map(vars, plans[lo:lo + _CHUNK]))
        chunk_keys = list(map(_key_of, fields_))
        first += map(seen.setdefault, chunk_keys, itertools.count(lo))
        keys += chunk_keys
        for column, get in zip(rest, _REST):
            column += map(get, fields_)
        places = list(map(_placement_of, fields_))
        chunk = list(map(_order_of, places))
        same_order = same_order and chunk.count(first_order) == len(chunk)
        orders += chunk
        doms = list(map(_domain_of, places))
        try:  # every plan names every factor (as a search space's plans do): C-level
            factors += list(map(_factors_of, doms))
        except (KeyError, TypeError):  # some leave factors (1) or the whole domain out
            ones = (1,) * len(WORLD_DIMS)
            factors += [tuple(map(d.get, WORLD_DIMS, ones)) if d else None for d in doms]
    keyed, at = _ranks(np.array(first, np.int64))
    return (keyed, [keys[i] for i in at.tolist()], at, rest,
            None if same_order else list(map(tuple, orders)), factors)


def _groups(model: ModelSpec, plans: Sequence[Plan]) -> tuple[list[_Group], list[tuple]]:
    """The plans as columns (:func:`_read`), grouped by settings; and the recomputation
    choices seen (per layer type, indices into :data:`RECOMPUTE`)."""
    n = len(plans)
    if n == 0:
        return [], _recompute_codes([], model.layer_types)[1]
    keyed, key_values, key_at, (sp_given, tp_comm, recs, zero), orders, factors = _read(plans)
    # per distinct (structure, settings): its settings, its structure, tp > 1, offloads
    setting, setting_values, _ = _codes([v[_NS:] for v in key_values])
    struct, struct_values, struct_at = _codes([v[:_NS] for v in key_values])
    setting, struct = setting[keyed], struct[keyed]
    tp_gt1 = np.array([v[_TP] > 1 for v in key_values], bool)[keyed]
    sp = (np.fromiter(sp_given, bool, n) & tp_gt1).astype(np.int64)
    zero_ = np.fromiter(zero, np.int64, n)
    offloads = np.array([2 * bool(v[_OPT]) + bool(v[_PAR]) for v in key_values],
                        np.int64)[keyed]
    valid = (zero_ >= 0) & (zero_ <= 3)
    z = np.where(valid, _STATE_AT[np.where(valid, 4 * zero_ + offloads, 0)], -1)
    rc, rcs = _recompute_codes(recs, model.layer_types)
    # plans on their sp's default exchange share one table whatever their sp
    tpc, tpc_values, _ = _codes(tp_comm)
    shared: list[str | None] = [None]  # the exchanges a table is keyed by
    by_sp = np.zeros((len(tpc_values), 2), np.int64)
    for u, value in enumerate(tpc_values):
        for s, default in enumerate(("allreduce", "rs_ag")):
            e = None if (value or "allreduce") == default else value or "allreduce"
            if e not in shared:
                shared.append(e)
            by_sp[u, s] = shared.index(e)
    exchange = by_sp[tpc, sp]
    order = np.zeros(n, np.int64) if orders is None else _codes(orders)[0]
    dom, domains, _ = _codes(factors)
    group = (setting * (int(order.max()) + 1) + order) * len(shared) + exchange
    if group.any():
        group, group_first = _dense(group)
        by_group = np.argsort(group, kind="stable")  # each group's plans in list order
        bounds = np.cumsum(np.bincount(group, minlength=len(group_first)))[:-1]
        members = np.split(by_group, bounds)
    else:  # one group (a search space's plans): every plan, in list order
        group_first, members = np.zeros(1, np.int64), [np.arange(n)]
    out = []
    for g, index in enumerate(members):
        first = int(group_first[g])
        # the structural rules read the recomputation only for combined 1F1B
        rc_in_key = setting_values[setting[first]][_MOE_OVERLAP]
        if len(members) == 1 and not rc_in_key:  # the structures' codes are the keys
            k, key_first = struct, key_at[struct_at]
        else:
            k, key_first = _dense(struct[index] * len(rcs) + rc[index] if rc_in_key
                                  else struct[index])
        pkey, pkey_first = _dense(k * len(domains) + dom[index])
        firsts = index[key_first].tolist()
        out.append(_Group(shared[exchange[first]], index, pkey, sp[index], z[index],
                          rc[index], [struct_values[struct[i]] for i in firsts], firsts,
                          k[pkey_first], dom[index[pkey_first]], domains))
    return out, rcs


def _points(model: ModelSpec, cluster: ClusterSpec, plans: Sequence[Plan], g: _Group,
            allow_idle: bool) -> tuple[np.ndarray, list[tuple[Outer, tuple[int, ...] | None]]]:
    """Per point key of ``g``, its point in the group's tables (-1 where the tables cannot
    hold it: a structural rule broken, a placement that does not fit the topology), and the
    points, in the order :func:`build_tables` gives them (outer after outer, each outer's
    domains as they first appear). The structural rules run once per structural key, on
    its first plan; the placement once per degrees and domain."""
    moe = model.moe is not None
    ok = np.array([not check_structure(model, cluster, plans[i], allow_idle)
                   for i in g.first], bool)
    # each point's outer once (as a tuple of its fields: C-level hashing), then its degrees
    outer, outer_fields, _ = _codes([
        (s[0], s[1], s[2], s[3], s[4], s[5], model.num_layers % (s[2] * s[5]) != 0, s[6],
         (s[7] or s[0]) if moe else 1, s[8]) for s in g.keys])
    outer_values = [Outer(*f) for f in outer_fields]
    degrees_, degree_values, _ = _codes([(o.tp, o.cp, o.dp, o.pp) for o in outer_values])
    degrees = degrees_.tolist()
    q = np.full(len(g.key_of), -1, np.int64)
    live = np.flatnonzero(ok[g.key_of])
    if not len(live):
        return q, []
    # each (outer, domain) once, in order of first appearance
    at, at_first = _dense(outer[g.key_of[live]] * len(g.domains) + g.dom_of[live])
    pair_outer = outer[g.key_of[live[at_first]]].tolist()
    pair_dom = g.dom_of[live[at_first]].tolist()
    order, levels = tuple(plans[int(g.index[0])].placement.order), tuple(cluster.topology)
    fits: dict[tuple[int, int], bool] = {}  # (degrees, domain) -> fits the topology
    points: list[tuple[Outer, tuple[int, ...] | None]] = []
    point_of = np.full(len(at_first), -1, np.int64)
    for j, (o, d) in enumerate(zip(pair_outer, pair_dom)):
        fit = fits.get((degrees[o], d))
        if fit is None:
            try:
                spans_for(degree_values[degrees[o]], g.domains[d], order, levels)
                fit = True
            except PlacementError:
                fit = False
            fits[(degrees[o], d)] = fit
        if fit:
            point_of[j] = len(points)
            points.append((o, d))
    if not points:
        return q, []
    # the tables' order: by outer (as each first appears), then as the points came
    by_outer = np.argsort(_dense(np.array([o for o, _ in points], np.int64))[0], kind="stable")
    position = np.empty(len(points), np.int64)
    position[by_outer] = np.arange(len(points))
    q[live] = np.where(point_of >= 0, position[point_of], -1)[at]
    return q, [(outer_values[points[i][0]], g.domains[points[i][1]]) for i in by_outer]


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for a while: a pass that makes a few small
    tuples per plan (no cycles) would otherwise start full collections that walk every live
    object, the plans included (on 100,000 plans they took as long as the pass itself)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def evaluate_many(model: ModelSpec, cluster: ClusterSpec, plans: Sequence[Plan],
                  allow_idle_gpus: bool = False) -> Estimates:
    """Every plan of ``plans``, as arrays in the same order (see :class:`Estimates`).

    The plans are read as columns and grouped by settings; each group becomes columns
    (point, recomputation, sp, state option) into tables built for the points it uses and
    goes through :func:`evaluate_columns` at once. Plans the tables cannot hold take the
    scalar evaluator."""
    plans = list(plans)
    with _collector_paused():
        return _scatter(len(plans), _parts(model, cluster, plans, allow_idle_gpus))


def _parts(model: ModelSpec, cluster: ClusterSpec, plans: list[Plan], allow_idle: bool
           ) -> list[tuple[np.ndarray, Estimates]]:
    """The estimates of ``plans`` in batches, each with the plans' indices."""
    parts: list[tuple[np.ndarray, Estimates]] = []
    groups, rcs = _groups(model, plans)
    rc_table = np.array(rcs, np.int64).reshape(len(rcs), -1)
    for g in groups:
        q_of_key, points = _points(model, cluster, plans, g, allow_idle)
        q = q_of_key[g.pkey]
        held = (q >= 0) & (g.z >= 0)
        for i in g.index[~held].tolist():
            parts.append((np.array([i]), _scalar(model, cluster, plans[i], allow_idle)))
        if not held.any():
            continue
        tb = build_tables(PlanSet(model, cluster, plans[int(g.index[0])], points, g.tp_comm),
                          TIME)
        q = q[held]
        if list(tb.points) != points:  # _points gives the tables' order; else look them up
            where = {pt: n for n, pt in enumerate(tb.points)}
            q = np.array([where[pt] for pt in points], np.int64)[q]
        est = evaluate_columns(tb, q, rc_table[g.rc[held]], g.sp[held], g.z[held])
        parts.append((g.index[held], est))
    return parts


def _scatter(size: int, parts: list[tuple[np.ndarray, Estimates]]) -> Estimates:
    """One batch in plan order from batches of plan indices."""
    if len(parts) == 1 and np.array_equal(parts[0][0], np.arange(size)):
        return parts[0][1]  # one batch, already in plan order
    out = {f.name: np.zeros(size, bool if f.name in ("feasible", "costable") else float)
           for f in fields(Estimates)}
    for idx, est in parts:
        for name, arr in out.items():
            arr[idx] = getattr(est, name)
    return Estimates(**out)


def _scalar(model: ModelSpec, cluster: ClusterSpec, plan: Plan, allow_idle: bool) -> Estimates:
    """One plan through the scalar evaluator, as a one-entry batch."""
    est = evaluate(model, cluster, plan, allow_idle)
    nan = float("nan")
    val: dict[str, Any] = {
        "feasible": est.feasible, "costable": est.iteration_time_s is not None,
        "iteration_time_s": est.iteration_time_s, "memory_per_gpu_bytes":
        est.memory_per_gpu_bytes, "host_memory_per_gpu_bytes":
        est.host_memory_per_gpu_bytes or 0.0, "gpu_busy_s": est.gpu_busy_s,
        "energy_j": est.energy_j, "mfu": est.mfu, "hfu": est.hfu,
        "tokens_per_s": est.tokens_per_s}
    return Estimates(**{k: np.array([nan if v is None else v]) for k, v in val.items()})


def objective_values(tb: Tables, q: np.ndarray, est: Estimates,
                     objective: Objective | None = None) -> np.ndarray:
    """The per-iteration objective of each plan (the tables' objective by default)."""
    if objective is None:
        return tb.terms.time_weight[q] * est.iteration_time_s \
            + tb.terms.busy_weight[q] * est.gpu_busy_s
    world = tb.terms.world[q]
    weights = np.array([objective.weights(tb.space.cluster, int(w)) for w in world])
    return weights[:, 0] * est.iteration_time_s + weights[:, 1] * est.gpu_busy_s
