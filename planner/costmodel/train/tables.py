"""Coefficient tables: every cost term of every point of a search space, computed by the
evaluator's own functions, as named numpy arrays (:class:`Terms`).

For every point ``q = (outer, domain)`` of the search space and every inner choice
(recomputation per layer type, sequence parallelism, state option ``z``: the ZeRO stage
and the offloads of :data:`formulations.train.space.STATES`) the tables hold the
terms that the evaluator composes. :mod:`planner.costmodel.compose` combines them (the
vectorized evaluator, the presolve bounds); the formulations re-express the same
composition as linear rows. Nothing in this module computes physics of its own.

Stage *groups*: pipeline ranks that hold the same layers, embedding and head have the
same time; memory grows with the in-flight microbatches, so a group keeps its maximum.
A dense model has at most ``MAX_GROUPS`` groups per point (first, middle(s), last); models
with interleaved dense and MoE layers may have more (ranks differ in their mix of layer
types), and the arrays grow to the largest count.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from typing import Any, Iterable, Protocol

from planner.costmodel.objective import Objective
from planner.costmodel.train.evaluator import layer_setup, state_shape, strategy_from
from planner.costmodel.layer import LayerShape, Net, layer_cost
from planner.costmodel.moe import expert_spans
from planner.costmodel.network import combine, spans_for
from planner.costmodel.compose import split_p2p, straggler_share
from planner.costmodel.numerics import Numerics
from planner.costmodel.train.offload import host_state_bytes, offload_times
from planner.costmodel.pipeline import Stage, stage_layout
from planner.costmodel.train.points import RECOMPUTE, STATES, Inner, Outer
from planner.costmodel.train.stage import (
    comm_buffer_bytes,
    reduce_bucket_bytes,
    dp_comm,
    embedding_cost,
    head_cost,
    optimizer_step_s,
    expert_dp_size,
    p2p_time_per_microbatch_s,
    stage_params_split,
    dp_overlap_units,
    state_bytes,
    tied_embedding_sync_s,
)
from planner.specs.cluster import ClusterSpec
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan

MAX_GROUPS = 4
#: Per-parameter state terms (:func:`_state_slopes`), each multiplied by a group's
#: parameters.
STATE_FIELDS = ("optimizer_s", "states_bytes", "cpu_step_s", "grad_down_s", "fetch_s",
                "host_bytes")
#: One plan of the tables: (point q, recomputation index per layer type, sp, state option).
Key = tuple[int, tuple[int, ...], int, int]


class PointSource(Protocol):
    """What the tables need of a search space (:class:`formulations.train.space.SearchSpace`, or
    the plan sets of the vectorized evaluator)."""

    model: ModelSpec
    cluster: ClusterSpec
    base: dict[str, Any]
    fixed: dict[str, Any]
    order: tuple[str, ...]
    layer_types: tuple[str, ...]
    outers: list[Outer]

    def placements(self, o: Outer) -> list[tuple[int, ...] | None]: ...
    def sp_options(self, o: Outer) -> list[bool]: ...
    def state_options(self, o: Outer) -> list[int]: ...
    def recompute_options(self) -> list[tuple[str, ...]]: ...
    def inners(self, o: Outer) -> Iterable[Inner]: ...
    def plan(self, o: Outer, domain: tuple[int, ...] | None, inner: Inner) -> Plan: ...

    @property
    def num_states(self) -> int: ...


@dataclass(frozen=True)
class Terms:
    """Per point ``q`` (axis 0). Layer terms are indexed ``[q, type, recompute, sp]``; end
    terms ``[q, sp]``; group terms ``[q, g]`` (``[q, g, type]`` for layer counts,
    ``[q, g, z]`` for terms of the state option ``z``). Times in seconds per microbatch
    unless said, memory in bytes per GPU."""

    # layers, per microbatch
    layer_total_s: np.ndarray  # kernels + TP/CP/EP exchanges
    layer_fwd_s: np.ndarray
    layer_bwd_s: np.ndarray  # backward + recomputation
    layer_act_bytes: np.ndarray
    layer_workspace_bytes: np.ndarray
    layer_extra_flops: np.ndarray  # recomputation and expert padding FLOPs (HFU)
    # embedding (first stage) and LM head (last stage)
    emb_total_s: np.ndarray
    emb_fwd_s: np.ndarray
    emb_bwd_s: np.ndarray
    head_total_s: np.ndarray
    head_fwd_s: np.ndarray
    head_bwd_s: np.ndarray
    head_act_bytes: np.ndarray
    head_workspace_bytes: np.ndarray
    # per point
    m: np.ndarray  # microbatches per iteration
    v: np.ndarray
    pp: np.ndarray
    world: np.ndarray
    p2p_s: np.ndarray  # pipeline sends on the critical path (compose.split_p2p)
    p2p_overlap_s: np.ndarray  # pipeline sends the interleaved schedule overlaps
    sp_ok: np.ndarray  # (Q, 2)
    state_ok: np.ndarray  # (Q, Z)
    buffers_bytes: np.ndarray  # (Q, Z)
    straggler: np.ndarray  # compose.straggler_share of the point's GPUs
    time_weight: np.ndarray  # objective per second of iteration time
    busy_weight: np.ndarray  # objective per second of GPU busy time
    # stage groups
    group_valid: np.ndarray
    group_type_layers: np.ndarray  # (Q, G, T)
    group_embedding: np.ndarray
    group_head: np.ndarray
    group_count: np.ndarray  # pipeline ranks in the group
    group_inflight: np.ndarray  # chunk-microbatches alive at the group's peak
    group_layers: np.ndarray  # layers of the group (at least 1)
    group_dp_units: np.ndarray  # shares of the once-per-iteration DP traffic (last bucket)
    tied_s: np.ndarray  # once per iteration
    # per state option (Q, G, Z): data-parallel traffic, optimizer, states, offload tier
    dp_fwd_s: np.ndarray  # per microbatch, behind forward
    dp_bwd_s: np.ndarray  # per microbatch, behind backward
    dp_grad_s: np.ndarray  # once per iteration
    dp_param_s: np.ndarray  # once per iteration
    optimizer_s: np.ndarray
    states_bytes: np.ndarray
    cpu_step_s: np.ndarray  # CPU optimizer step and parameter upload, exposed
    grad_down_s: np.ndarray  # gradient shard to the tier, behind backward
    fetch_s: np.ndarray  # parameter shard from the tier, per microbatch and pass
    host_bytes: np.ndarray
    rc_ok: np.ndarray  # (T, R): recomputation modes allowed per layer type
    rc_point_ok: np.ndarray  # (Q, R): modes allowed at the point (a framework's rules)


@dataclass(frozen=True)
class Group:
    layers: tuple[tuple[str, int], ...]
    embedding: bool
    head: bool
    count: int
    inflight: int


@lru_cache(maxsize=4096)
def stage_groups(model: ModelSpec, pp: int, v: int, m: int, uneven: bool) -> tuple[Group, ...]:
    stages = stage_layout(model, pp, v, m, uneven)
    assert stages is not None
    by_key: dict[tuple, list[Stage]] = {}
    for st in stages:
        key = (tuple(sorted(st.layers.items())), st.embedding, st.head)
        by_key.setdefault(key, []).append(st)
    return tuple(Group(k[0], k[1], k[2], len(v_), max(s.inflight_chunks for s in v_))
                 for k, v_ in by_key.items())


@dataclass
class Tables:
    """Arrays indexed by point q (axis 0); layer options by (type, recompute, sp); state
    options (ZeRO stage, offloads) by z."""

    space: PointSource
    points: list[tuple[Outer, tuple[int, ...] | None]]
    objective: Objective
    layer_types: tuple[str, ...]
    terms: Terms
    #: a plan of the space: the settings every plan shares (dtype, attention kernel,
    #: overlap switches), read once here instead of from a throwaway plan per reader
    settings: Plan | None = None

    @property
    def num_points(self) -> int:
        return len(self.points)

    def plan(self, q: int, rc: tuple[int, ...], sp: int, z: int) -> Plan:
        outer, dom = self.points[q]
        inner = Inner.of(tuple(RECOMPUTE[i] for i in rc), bool(sp), int(z))
        return self.space.plan(outer, dom, inner)


def _affine(fn, *args) -> tuple[np.ndarray, np.ndarray]:
    """Slope and intercept of ``fn(params, *args)``, a tuple of fields each affine in
    ``params`` for params > 0 (true of the DP traffic, optimizer step and states)."""
    lo, hi = np.array(fn(1e9, *args), float), np.array(fn(2e9, *args), float)
    slope = (hi - lo) / 1e9
    return slope, lo - slope * 1e9


def _dp_fields(params: float, z: int, spans, levels, chunks, numerics) -> tuple[float, ...]:
    c = dp_comm(params, z, spans, levels, chunks, numerics)
    return (c.mb_fwd_s, c.mb_bwd_s, c.grad_s, c.param_s)


def _state_slopes(gpu, tier, n: int, dtype: Numerics, Z: int) -> dict[str, np.ndarray]:
    """Per parameter of a stage, for each state option over a ZeRO group of ``n`` GPUs: the
    GPU optimizer step, the HBM states, and with an offload tier the exposed CPU step and
    parameter copy, the gradient transfer, the per-pass parameter fetch and the tier's
    bytes (:data:`STATE_FIELDS`). Every term is linear in the parameters."""
    out = {k: np.zeros(Z) for k in STATE_FIELDS}
    for k in range(Z):
        z, oo, op = STATES[k]
        out["optimizer_s"][k] = optimizer_step_s(gpu, 1.0, z, n, oo)
        st = state_bytes(1.0, z, n, dtype, oo, op)
        out["states_bytes"][k] = st.weights + st.gradients + st.optimizer
        if tier is not None:
            ot = offload_times(tier, 1.0, z, n, dtype, oo, op)
            out["cpu_step_s"][k] = ot.step_s + ot.param_copy_s
            out["grad_down_s"][k] = ot.grad_down_s
            out["fetch_s"][k] = ot.fetch_s
            hs = host_state_bytes(1.0, z, n, dtype, oo, op)
            out["host_bytes"][k] = hs.weights + hs.gradients + hs.optimizer
    return out


def _sp_table(space: PointSource) -> dict[int, list[bool]]:
    """Sequence-parallel options per tp: those of any point with that tp (a framework's
    rules may allow an option at some points only: the union)."""
    out: dict[int, set[bool]] = {}
    for o in space.outers:
        out.setdefault(o.tp, set()).update(space.sp_options(o))
    return {tp: sorted(sps) for tp, sps in out.items()}


@dataclass(frozen=True)
class _Ctx:
    """What every part of the tabulation reads."""

    space: PointSource
    model: ModelSpec
    cluster: ClusterSpec
    levels: tuple
    types: tuple[str, ...]
    seq: int
    gb: int
    dtype: str
    base: Plan  # the settings every plan shares (attention kernel, dtype, overlaps)
    rc_ok: np.ndarray  # (T, R)
    num_states: int
    network: bool = True  # False: every group spans one GPU (no communication at all)

    def tp_comm(self, sp: bool) -> str:
        return self.space.fixed.get("tp_comm") or ("rs_ag" if sp else "allreduce")


def build_tables(space: PointSource, objective: Objective | str = "time",
                 network: bool = True, memo: dict | None = None) -> Tables:
    """Every term of every point of ``space``, for every inner choice it allows.

    ``network=False``: as if every group were on one GPU, so that no collective, pipeline
    send or expert exchange costs anything (the kernels, memory, optimizer and offload
    terms are the same): each term is then at most its value on any placement, and the
    tables' bounds are bounds of every placement of the point's degrees.

    ``memo``: a dict shared by tabulations of one space (its model, cluster, settings and
    rules; the outers may differ): the per-outer arrays (stage groups, options, buffers,
    states: none depends on the network or the objective) are kept there by outer, and a
    later tabulation of outers already in it takes their rows instead of working them out
    again."""
    objective = Objective.of(objective)
    outers = space.outers
    rc_opts = space.recompute_options()
    nt = len(space.layer_types)
    ctx = _Ctx(space, space.model, space.cluster, tuple(space.cluster.topology),
               space.layer_types, space.base["seq_len"], space.base["global_batch_size"],
               space.base.get("dtype", "bf16"),
               next((space.plan(o, None, i) for o in outers for i in space.inners(o)), None),
               np.array([[mode in opts for mode in RECOMPUTE] for opts in zip(*rc_opts)])
               if rc_opts else np.zeros((nt, len(RECOMPUTE)), bool), space.num_states,
               network)
    per_outer = _memo_outer_arrays(ctx, memo)
    points, q_outer, keys, q_keys = _point_keys(ctx)
    A = _assemble(ctx, per_outer, np.array(q_outer, dtype=np.int64), keys, q_keys)
    w = np.array([objective.weights(ctx.cluster, o.world) for o in outers]).reshape(-1, 2)
    qo = np.array(q_outer, dtype=np.int64)
    A["time_weight"], A["busy_weight"] = w[qo, 0], w[qo, 1]
    A["rc_ok"] = ctx.rc_ok
    worlds, at = np.unique(A["world"], return_inverse=True)  # once per GPU count
    A["straggler"] = np.array([straggler_share(ctx.cluster.step_time_cv, int(n))
                               for n in worlds], float)[at].reshape(-1)
    terms = Terms(**A)
    return Tables(space, points, objective, ctx.types, terms, ctx.base)


def _memo_outer_arrays(ctx: _Ctx, memo: dict | None) -> dict[str, np.ndarray]:
    """:func:`_outer_arrays`, or their rows from ``memo`` when every outer is there (the
    group axis cut to what these outers use: the same arrays as worked out afresh)."""
    outers = ctx.space.outers
    if memo is None or not outers:
        return _outer_arrays(ctx)
    index = memo.get("index", {})
    rows = [index.get(o) for o in outers]
    if any(r is None for r in rows):
        out = _outer_arrays(ctx)
        memo["index"] = {o: i for i, o in enumerate(outers)}
        memo["arrays"] = out
        return out
    sel = np.array(rows, np.int64)
    arrays = memo["arrays"]
    groups = int(arrays["group_valid"][sel].sum(axis=1).max())
    G = max(MAX_GROUPS, groups)
    return {k: v[sel][:, :G] if k.startswith("group_") else v[sel] for k, v in arrays.items()}


def _outer_arrays(ctx: _Ctx) -> dict[str, np.ndarray]:
    """Per outer configuration (axis 0): stage groups, allowed options, buffers, parameters
    per group and the per-parameter state terms."""
    space, model, types = ctx.space, ctx.model, ctx.types
    outers = space.outers
    ms = [ctx.gb // (o.dp * o.mbs) for o in outers]
    groups = [stage_groups(model, o.pp, o.v, m, o.uneven) for o, m in zip(outers, ms)]
    O, G, Z = len(outers), max([MAX_GROUPS] + [len(g) for g in groups]), ctx.num_states
    out: dict[str, np.ndarray] = {
        "m": np.array(ms, np.int64).reshape(O), "sp_ok": np.zeros((O, 2), bool),
        "state_ok": np.zeros((O, Z), bool), "buffers_bytes": np.zeros((O, Z)),
        "rc_point_ok": np.zeros((O, len(RECOMPUTE)), bool),
        "group_valid": np.zeros((O, G), bool), "group_type_layers": np.zeros((O, G, len(types)), np.int64),
        "group_params": np.zeros((O, G)), "group_expert_params": np.zeros((O, G)),
        **{k: np.zeros((O, G), np.int64) for k in ("group_embedding", "group_head", "group_count", "group_inflight",
                                                    "group_layers", "group_dp_units")}}
    bufs: dict[tuple, float] = {}  # comm buffers by shape and ZeRO stage
    bucket = ctx.cluster.gpu.efficiency.reduce_bucket_elements
    ovl_grad = bool(getattr(ctx.base, "overlap_dp_grad_reduce", True))
    modes = getattr(space, "recompute_modes", None)  # per outer, where a framework limits them
    rows = _GroupRows(ctx, G)
    # per outer, as Python rows (one numpy array each at the end: writing numpy elements
    # one at a time cost more than the terms themselves on spaces of 10k+ outers)
    sp_ok, rc_ok, state_ok, buffers, params, src, shard, eshard = ([] for _ in range(8))
    for o, m, grp in zip(outers, ms, groups):
        sp_row = [False, False]
        for sp in space.sp_options(o):
            sp_row[int(sp)] = True
        sp_ok.append(sp_row)
        allowed = modes(o) if modes else RECOMPUTE
        rc_ok.append([mode in allowed for mode in RECOMPUTE])
        ok_row, buf_row = [False] * Z, [0.0] * Z
        for k in space.state_options(o):
            z = STATES[k][0]
            bk = (o.tp, o.cp, o.mbs, o.ep, o.etp, z, o.dp > 1)
            if bk not in bufs:
                shape = state_shape(model, o.tp, o.cp, o.mbs, ctx.seq, o.ep, o.etp)
                bufs[bk] = comm_buffer_bytes(model, shape, z, types) + reduce_bucket_bytes(
                    bucket, z, o.dp, ovl_grad, ctx.dtype)
            ok_row[k], buf_row[k] = True, bufs[bk]
        state_ok.append(ok_row)
        buffers.append(buf_row)
        src.append(rows.row(grp, (o.pp, o.v, m, o.uneven)))
        params.append(rows.params(grp, (o.pp, o.v, m, o.uneven), o))
        shard.append(o.dp * o.cp)  # the group ZeRO shards the states over
        eshard.append(expert_dp_size(o.tp, o.cp, o.dp, o.ep, o.etp))  # routed experts' group
    if O:
        out["sp_ok"], out["rc_point_ok"] = np.array(sp_ok, bool), np.array(rc_ok, bool)
        out["state_ok"], out["buffers_bytes"] = np.array(state_ok, bool), np.array(buffers)
        for i, name in enumerate(("group_params", "group_expert_params", "group_dp_units")):
            out[name] = np.stack([p[i] for p in params]).astype(out[name].dtype, copy=False)
        for name, arr in rows.arrays().items():
            out[name] = arr[np.array(src, np.int64)]
    out.update(_state_slopes_per_outer(ctx, np.array(shard, np.int64).reshape(O),
                                       np.array(eshard, np.int64).reshape(O)))
    return out




class _GroupRows:
    """The stage-group rows of the outers: what the stages hold, once per stage layout
    (pipeline degree, interleaving, microbatches, unevenness), and the parameters and DP
    overlap shares, once per layout and sharding."""

    STATIC = ("group_valid", "group_embedding", "group_head", "group_count", "group_inflight",
              "group_layers", "group_type_layers")

    def __init__(self, ctx: _Ctx, G: int) -> None:
        self.ctx, self.G = ctx, G
        self.index: dict[tuple, int] = {}
        self.rows: list[dict[str, np.ndarray]] = []
        self.split: dict[tuple, tuple[float, float]] = {}  # stage_params_split by its inputs
        self.per: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.units: dict[tuple, np.ndarray] = {}
        self.unit: dict[tuple, int] = {}  # dp_overlap_units by its inputs

    def row(self, groups: tuple[Group, ...], key: tuple) -> int:
        if key not in self.index:
            G, T = self.G, len(self.ctx.types)
            r = {"group_valid": np.zeros(G, bool), "group_type_layers": np.zeros((G, T), np.int64),
                 **{k: np.zeros(G, np.int64) for k in self.STATIC[1:6]}}
            for gi, grp in enumerate(groups):
                layers = dict(grp.layers)
                r["group_valid"][gi] = True
                r["group_embedding"][gi], r["group_head"][gi] = grp.embedding, grp.head
                r["group_count"][gi], r["group_inflight"][gi] = grp.count, grp.inflight
                r["group_layers"][gi] = max(sum(layers.values()), 1)
                for ti, t in enumerate(self.ctx.types):
                    r["group_type_layers"][gi, ti] = layers.get(t, 0)
            self.index[key] = len(self.rows)
            self.rows.append(r)
        return self.index[key]

    def params(self, groups: tuple[Group, ...], key: tuple, o: Outer
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per group: parameters (dense, routed experts) and DP overlap units."""
        pk = (key, o.tp, o.ep, o.etp)
        if pk not in self.per:
            G = self.G
            dense, expert, layers = np.zeros(G), np.zeros(G), np.ones(G, np.int64)
            for gi, grp in enumerate(groups):
                sk = (o.tp, o.pp, grp.layers, grp.embedding, grp.head, o.ep, o.etp)
                if sk not in self.split:
                    self.split[sk] = stage_params_split(self.ctx.model, o.tp, o.pp,
                                                        dict(grp.layers), grp.embedding,
                                                        grp.head, o.ep, o.etp)
                dense[gi], expert[gi] = self.split[sk]
                layers[gi] = max(sum(n for _, n in grp.layers), 1)
            self.per[pk] = (dense, expert, layers)
        dense, expert, layers = self.per[pk]
        uk = (pk, o.dp * o.cp)
        if uk not in self.units:
            units = np.zeros(self.G, np.int64)  # 0 on the rows of no group
            for gi in range(len(groups)):
                ck = (float(dense[gi]), o.dp * o.cp, int(layers[gi]))
                if ck not in self.unit:
                    self.unit[ck] = dp_overlap_units(*ck)
                units[gi] = self.unit[ck]
            self.units[uk] = units
        return dense, expert, self.units[uk]

    def arrays(self) -> dict[str, np.ndarray]:
        if not self.rows:
            return {}
        return {k: np.stack([r[k] for r in self.rows]) for k in self.STATIC}


def _state_slopes_per_outer(ctx: _Ctx, shard: np.ndarray, eshard: np.ndarray
                            ) -> dict[str, np.ndarray]:
    """Per-parameter state terms for each ZeRO group size, gathered per outer: (O, Z)."""
    gpu, tier = ctx.cluster.gpu, ctx.cluster.offload
    sizes = sorted(set(shard.tolist()) | set(eshard.tolist()))
    per_size = [_state_slopes(gpu, tier, n, Numerics.of(ctx.base), ctx.num_states)
                for n in sizes]
    pos = {n: i for i, n in enumerate(sizes)}
    out: dict[str, np.ndarray] = {}
    for pre, sh in (("slope_", shard), ("eslope_", eshard)):
        idx = np.array([pos[int(n)] for n in sh], np.int64)
        for name in (per_size[0] if per_size else {}):
            out[pre + name] = np.array([d[name] for d in per_size])[idx]
        if not per_size:  # an empty space (no outer passes the structural rules)
            out.update({pre + name: np.zeros((0, ctx.num_states)) for name in STATE_FIELDS})
    return out


KEY_KINDS = ("layer", "end", "p2p", "dp", "edp", "tied")


def _point_keys(ctx: _Ctx):
    """The points (outer, domain) and, per point, keys into tables of unique terms (points
    that share degrees and a domain share spans: computed once)."""
    space, moe = ctx.space, ctx.model.moe is not None
    points: list[tuple[Outer, tuple[int, ...] | None]] = []
    q_outer: list[int] = []
    keys: dict[str, dict] = {k: {} for k in KEY_KINDS}
    q_keys: dict[str, list[int]] = {k: [] for k in KEY_KINDS}
    span_cache: dict[tuple, tuple] = {}

    for oi, o in enumerate(space.outers):
        for dom in space.placements(o):
            sk = (o.tp, o.cp, o.dp, o.pp, dom, o.ep, o.etp)
            if sk not in span_cache and not ctx.network:
                one = (1,) * len(ctx.levels)
                span_cache[sk] = (one, one, one, one, (one, one, one) if moe else ((), (), ()))
            elif sk not in span_cache:
                tp_s, cp_s, dp_s, pp_s = spans_for((o.tp, o.cp, o.dp, o.pp), dom, space.order,
                                                   ctx.levels)
                ex = (expert_spans(tp_s, cp_s, dp_s, o.ep, o.etp, space.order) if moe
                      else ((), (), ()))
                span_cache[sk] = (tp_s, cp_s, pp_s, combine(dp_s, cp_s), ex)
            tp_s, cp_s, pp_s, dpcp_s, (ep_s, etp_s, edp_s) = span_cache[sk]
            points.append((o, dom))
            q_outer.append(oi)
            for kind, key in (
                    ("layer", (o.tp, o.cp, o.mbs, o.ep, o.etp, o.cpc, tp_s, cp_s, ep_s, etp_s)),
                    ("end", (o.tp, o.cp, o.mbs, tp_s)),
                    ("p2p", (o.tp, o.cp, o.mbs, o.v, o.pp, pp_s)), ("dp", dpcp_s),
                    ("edp", edp_s), ("tied", (o.tp, o.pp, pp_s))):
                table = keys[kind]
                q_keys[kind].append(table.setdefault(key, len(table)))
    return points, q_outer, keys, q_keys


LAYER_FIELDS = ("layer_total_s", "layer_fwd_s", "layer_bwd_s", "layer_act_bytes", "layer_workspace_bytes",
                "layer_extra_flops")
END_FIELDS = ("emb_total_s", "emb_fwd_s", "emb_bwd_s", "head_total_s", "head_fwd_s", "head_bwd_s",
              "head_act_bytes", "head_workspace_bytes")


def _layer_table(ctx: _Ctx, keys: dict) -> np.ndarray:
    """Per unique layer key: :data:`LAYER_FIELDS` x type x recompute x sp."""
    layer_terms = np.zeros((len(keys), len(LAYER_FIELDS), len(ctx.types), len(RECOMPUTE), 2))
    sps = _sp_table(ctx.space)
    strats: dict[tuple, Any] = {}  # a strategy by (sp, type, mode, cp exchange): built once
    for (tp, cp, mbs, ep, etp, cpc, tp_s, cp_s, ep_s, etp_s), k in keys.items():
        setup = layer_setup(ctx.model, ctx.levels, ctx.cluster.collective_chunks, tp, cp, mbs,
                            ctx.seq, ep, etp, tp_s, cp_s, ep_s, etp_s)
        for sp in sps.get(tp, []):
            for ti, t in enumerate(ctx.types):
                shape, net = setup[t]
                for ri, mode in enumerate(RECOMPUTE):
                    if ctx.rc_ok[ti, ri]:
                        sk = (sp, t, mode, cpc)
                        strat = strats.get(sk)
                        if strat is None:
                            strat = strats[sk] = strategy_from(ctx.base, mode, sp,
                                                               ctx.tp_comm(sp), t, cpc)
                        c = layer_cost(ctx.model, ctx.cluster.gpu, net, shape, strat)
                        layer_terms[k, :, ti, ri, int(sp)] = (c.total_s, c.fwd_s, c.bwd_s + c.recompute_s,
                                                     c.act_bytes, c.workspace_bytes,
                                                     c.recompute_flops + c.padding_flops)
    return layer_terms


def _end_table(ctx: _Ctx, keys: dict) -> np.ndarray:
    """Per unique end key: :data:`END_FIELDS` x sp."""
    end_terms = np.zeros((len(keys), len(END_FIELDS), 2))
    sps = _sp_table(ctx.space)
    chunks, gpu = ctx.cluster.collective_chunks, ctx.cluster.gpu
    for (tp, cp, mbs, tp_s), k in keys.items():
        net = Net(ctx.levels, tp_s, (1,) * len(ctx.levels), chunks)
        shape = LayerShape(tp, cp, mbs, ctx.seq)
        for sp in sps.get(tp, []):
            strat = strategy_from(ctx.base, "none", sp, ctx.tp_comm(sp))
            e = embedding_cost(ctx.model, gpu, net, shape, strat)
            h = head_cost(ctx.model, gpu, net, shape, strat)
            end_terms[k, :, int(sp)] = (e.fwd_s + e.bwd_s + e.tp_comm_s, e.fwd_s, e.bwd_s,
                                 h.fwd_s + h.bwd_s + h.tp_comm_s, h.fwd_s, h.bwd_s,
                                 h.act_bytes, h.workspace_bytes)
    return end_terms


def _dp_table(ctx: _Ctx, keys: dict) -> tuple[np.ndarray, np.ndarray]:
    """Per unique span key: slope and intercept of the DP traffic, [key, zero, field]."""
    slope, icpt = np.zeros((len(keys), 4, 4)), np.zeros((len(keys), 4, 4))
    for spans, k in keys.items():
        if spans:
            for z in range(4):
                slope[k, z], icpt[k, z] = _affine(_dp_fields, z, spans, ctx.levels,
                                                  ctx.cluster.collective_chunks,
                                                  Numerics.of(ctx.base))
    return slope, icpt


def _assemble(ctx: _Ctx, o: dict[str, np.ndarray], qo: np.ndarray, keys: dict,
              q_keys: dict) -> dict[str, Any]:
    """Per-point arrays from the per-outer arrays and the tables of unique terms."""
    model, levels = ctx.model, ctx.levels
    A: dict[str, Any] = {}
    layer_terms = _layer_table(ctx, keys["layer"])[np.array(q_keys["layer"], np.int64)]
    A.update({name: layer_terms[:, i] for i, name in enumerate(LAYER_FIELDS)})
    end_terms = _end_table(ctx, keys["end"])[np.array(q_keys["end"], np.int64)]
    A.update({name: end_terms[:, i] for i, name in enumerate(END_FIELDS)})
    p2p = np.array([p2p_time_per_microbatch_s(model, LayerShape(tp, cp, mbs, ctx.seq), v, pp,
                                             pp_s, levels)
                   for (tp, cp, mbs, v, pp, pp_s) in keys["p2p"]])
    # without the network the pipeline spans one GPU: its ends share the embedding
    tied = np.array([tied_embedding_sync_s(model, tp, pp, pp_s, levels, Numerics.of(ctx.base))
                     if ctx.network else 0.0 for (tp, pp, pp_s) in keys["tied"]])
    vs = np.array([k[3] for k in keys["p2p"]], np.int64)
    out, ovl = split_p2p(p2p, vs, bool(getattr(ctx.base, "overlap_p2p_comm", True)))
    qp = np.array(q_keys["p2p"], np.int64)
    A["p2p_s"] = np.asarray(out)[qp] if len(p2p) else np.zeros(0)
    A["p2p_overlap_s"] = np.asarray(ovl)[qp] if len(p2p) else np.zeros(0)
    A["tied_s"] = (tied[np.array(q_keys["tied"], np.int64)][:, None]
                   * (o["group_embedding"][qo] | o["group_head"][qo])) if len(tied) else np.zeros((0, 1))
    A.update(_group_state_terms(ctx, o, qo, keys, q_keys))
    for name in ("m", "group_valid", "group_type_layers", "group_embedding", "group_head", "group_count", "group_inflight", "group_layers",
                 "group_dp_units", "sp_ok", "state_ok", "buffers_bytes", "rc_point_ok"):
        A[name] = o[name][qo]
    outers = ctx.space.outers
    for name in ("v", "pp", "world"):
        A[name] = np.array([getattr(x, name) for x in outers], np.int64).reshape(-1)[qo]
    return A


def _group_state_terms(ctx: _Ctx, o: dict[str, np.ndarray], qo: np.ndarray, keys: dict,
                       q_keys: dict) -> dict[str, np.ndarray]:
    """(Q, G, Z) terms: DP traffic (dense, then routed experts over their group), and every
    per-parameter state term (optimizer, states, offload tier)."""
    dp_slope, dp_icpt = _dp_table(ctx, keys["dp"])
    edp_slope, edp_icpt = _dp_table(ctx, keys["edp"])
    kd, kx = np.array(q_keys["dp"], np.int64), np.array(q_keys["edp"], np.int64)
    params = o["group_params"][qo][:, :, None]  # (Q, G, 1)
    eparams = o["group_expert_params"][qo][:, :, None]
    zero_of = np.array([STATES[k][0] for k in range(ctx.num_states)], np.int64)
    valid = o["state_ok"][qo][:, None, :] & o["group_valid"][qo][:, :, None]
    has_experts = eparams > 0
    out = {}
    # one field at a time, at the ZeRO stage of each state option: (Q, G, Z) temporaries
    # instead of (Q, G, 4 stages, 4 fields) ones; the same operations on the same values
    for i, name in enumerate(("dp_fwd_s", "dp_bwd_s", "dp_grad_s", "dp_param_s")):
        val = dp_slope[:, zero_of, i][kd][:, None] * params + dp_icpt[:, zero_of, i][kd][:, None]
        e_val = (edp_slope[:, zero_of, i][kx][:, None] * eparams
                 + edp_icpt[:, zero_of, i][kx][:, None])
        val = val + np.where(has_experts, e_val, 0.0)
        out[name] = np.where(valid, val, 0.0)
    for name in STATE_FIELDS:
        out[name] = o["slope_" + name][qo][:, None, :] * params
        if ctx.model.moe is not None:
            out[name] = out[name] + o["eslope_" + name][qo][:, None, :] * eparams
    return out
