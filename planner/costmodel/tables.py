"""Coefficient tables: every cost term of every point of a search space, computed by the
evaluator's own functions, as named numpy arrays (:class:`Terms`).

For every point ``q = (outer, domain)`` of the search space and every inner choice
(recomputation per layer type, sequence parallelism, state option ``z``: the ZeRO stage
and the offloads of :data:`formulations.space.STATES`) the tables hold the
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

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from typing import Any, Iterable, Protocol

from planner.costmodel.objective import Objective
from planner.costmodel.evaluator import layer_setup, state_shape, strategy_from
from planner.costmodel.layer import LayerShape, Net, layer_cost
from planner.costmodel.moe import expert_spans
from planner.costmodel.network import combine, spans_for
from planner.costmodel.offload import host_state_bytes, offload_times
from planner.costmodel.pipeline import Stage, stage_layout
from planner.costmodel.points import RECOMPUTE, STATES, Inner, Outer
from planner.costmodel.stage import (
    comm_buffer_bytes,
    dp_comm,
    embedding_cost,
    head_cost,
    optimizer_step_s,
    expert_dp_size,
    p2p_time_per_microbatch_s,
    stage_params_split,
    state_bytes,
    tied_embedding_sync_s,
)
from planner.specs.cluster import ClusterSpec
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan

MAX_GROUPS = 4
#: Short names of the assembly below -> :class:`Terms` fields.
NAMES = {'layer_total': 'layer_total_s', 'layer_fwd': 'layer_fwd_s', 'layer_bwdrec': 'layer_bwd_s', 'layer_act': 'layer_act_bytes', 'layer_ws': 'layer_workspace_bytes', 'layer_recflops': 'layer_extra_flops', 'emb_total': 'emb_total_s', 'emb_fwd': 'emb_fwd_s', 'emb_bwd': 'emb_bwd_s', 'head_total': 'head_total_s', 'head_fwd': 'head_fwd_s', 'head_bwd': 'head_bwd_s', 'head_act': 'head_act_bytes', 'head_ws': 'head_workspace_bytes', 'p2p': 'p2p_s', 'g_tied': 'tied_s', 'g_mbf': 'dp_fwd_s', 'g_mbb': 'dp_bwd_s', 'g_grad': 'dp_grad_s', 'g_param': 'dp_param_s', 'g_opt': 'optimizer_s', 'g_states': 'states_bytes', 'g_off': 'cpu_step_s', 'g_down': 'grad_down_s', 'g_fetch': 'fetch_s', 'g_host': 'host_bytes', 'm': 'm', 'g_valid': 'group_valid', 'g_n': 'group_type_layers', 'g_emb': 'group_embedding', 'g_head': 'group_head', 'g_cnt': 'group_count', 'g_infl': 'group_inflight', 'g_layers': 'group_layers', 'ok_sp': 'sp_ok', 'ok_z': 'state_ok', 'buffers': 'buffers_bytes', 'v': 'v', 'pp': 'pp', 'world': 'world', 'w_time': 'time_weight', 'w_busy': 'busy_weight', 'rc_ok': 'rc_ok'}


class PointSource(Protocol):
    """What the tables need of a search space (:class:`formulations.space.SearchSpace`, or
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
    p2p_s: np.ndarray
    sp_ok: np.ndarray  # (Q, 2)
    state_ok: np.ndarray  # (Q, Z)
    buffers_bytes: np.ndarray  # (Q, Z)
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
    rc_ok: np.ndarray  # (T, 3): recomputation modes allowed per layer type


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


def _dp_fields(params: float, z: int, spans, levels, chunks) -> tuple[float, ...]:
    c = dp_comm(params, z, spans, levels, chunks)
    return (c.mb_fwd_s, c.mb_bwd_s, c.grad_s, c.param_s)


def _state_slopes(gpu, tier, n: int, dtype: str, Z: int) -> dict[str, np.ndarray]:
    """Per parameter of a stage, for each state option over a ZeRO group of ``n`` GPUs: the
    GPU optimizer step, the HBM states, and with an offload tier the exposed CPU step and
    parameter copy (``off``), the gradient transfer (``down``), the per-pass parameter fetch
    (``fetch``) and the tier's bytes (``host``). Every term is linear in the parameters."""
    out = {k: np.zeros(Z) for k in ("opt", "st", "off", "down", "fetch", "host")}
    for k in range(Z):
        z, oo, op = STATES[k]
        out["opt"][k] = optimizer_step_s(gpu, 1.0, z, n, oo)
        st = state_bytes(1.0, z, n, dtype, oo, op)
        out["st"][k] = st.weights + st.gradients + st.optimizer
        if tier is not None:
            ot = offload_times(tier, 1.0, z, n, dtype, oo, op)
            out["off"][k] = ot.step_s + ot.param_copy_s
            out["down"][k] = ot.grad_down_s
            out["fetch"][k] = ot.fetch_s
            hs = host_state_bytes(1.0, z, n, dtype, oo, op)
            out["host"][k] = hs.weights + hs.gradients + hs.optimizer
    return out


def _sp_options(space: PointSource, tp: int) -> list[bool]:
    return space.sp_options(Outer(tp, 1, 1, 1, 1, 1, False))


def build_tables(space: PointSource, objective: Objective | str = "time") -> Tables:
    objective = Objective.of(objective)
    model, cluster = space.model, space.cluster
    gpu, levels = cluster.gpu, tuple(cluster.topology)
    chunks = cluster.collective_chunks
    types = space.layer_types
    nt = len(types)
    outers = space.outers
    # settings shared by every plan (attention kernel, dtype, overlap), from any plan
    base = next((space.plan(o, None, i) for o in outers for i in space.inners(o)), None)
    seq = space.base["seq_len"]
    gb = space.base["global_batch_size"]
    dtype = space.base.get("dtype", "bf16")
    o_m_list = [gb // (o.dp * o.mbs) for o in outers]
    all_groups = [stage_groups(model, o.pp, o.v, m_, o.uneven) for o, m_ in zip(outers, o_m_list)]
    O, G = len(outers), max([MAX_GROUPS] + [len(g) for g in all_groups])
    rc_opts = space.recompute_options()
    rc_ok = np.array([[mode in opts for mode in RECOMPUTE] for opts in zip(*rc_opts)]) \
        if rc_opts else np.zeros((nt, 3), bool)

    # ---- per outer configuration --------------------------------------------------------
    o_m = np.array([gb // (o.dp * o.mbs) for o in outers], dtype=np.int64)
    o_sp = np.zeros((O, 2), bool)
    Z = space.num_states
    zero_of = np.array([STATES[k][0] for k in range(Z)], np.int64)
    tier = cluster.offload
    o_z = np.zeros((O, Z), bool)
    o_buf = np.zeros((O, Z))
    g_valid = np.zeros((O, G), bool)
    g_n = np.zeros((O, G, nt), np.int64)
    g_emb, g_head, g_cnt, g_infl, g_layers = (np.zeros((O, G), np.int64) for _ in range(5))
    g_params = np.zeros((O, G))
    g_eparams = np.zeros((O, G))  # routed-expert parameters (MoE)
    # per parameter (every term is linear in the parameters), dense and routed experts
    o_shard = np.zeros(O, np.int64)  # dp x cp: the group ZeRO shards the states over
    o_eshard = np.zeros(O, np.int64)  # the expert-data-parallel group (MoE)
    for oi, o in enumerate(outers):
        shape = LayerShape(o.tp, o.cp, o.mbs, seq)
        for sp in space.sp_options(o):
            o_sp[oi, int(sp)] = True
        bufs: dict[int, float] = {}  # by ZeRO stage
        for k in space.state_options(o):
            z = STATES[k][0]
            if z not in bufs:
                bufs[z] = comm_buffer_bytes(
                    model, state_shape(model, o.tp, o.cp, o.mbs, seq, o.ep, o.etp), z, types)
            o_z[oi, k] = True
            o_buf[oi, k] = bufs[z]
        groups = all_groups[oi]
        for gi, grp in enumerate(groups):
            layers = dict(grp.layers)
            g_valid[oi, gi] = True
            g_emb[oi, gi], g_head[oi, gi] = grp.embedding, grp.head
            g_cnt[oi, gi], g_infl[oi, gi] = grp.count, grp.inflight
            g_layers[oi, gi] = max(sum(layers.values()), 1)
            for ti, t in enumerate(types):
                g_n[oi, gi, ti] = layers.get(t, 0)
            g_params[oi, gi], g_eparams[oi, gi] = stage_params_split(
                model, o.tp, o.pp, layers, grp.embedding, grp.head, o.ep, o.etp)
        o_shard[oi] = o.dp * o.cp
        o_eshard[oi] = expert_dp_size(o.tp, o.cp, o.dp, o.ep, o.etp)
    # per-parameter state terms for each group size, gathered per outer: (O, Z) each
    sizes = sorted(set(o_shard.tolist()) | set(o_eshard.tolist()))
    per_size = [_state_slopes(gpu, tier, n, dtype, Z) for n in sizes]
    pos = {n: i for i, n in enumerate(sizes)}
    slopes: dict[str, np.ndarray] = {}
    for pre, shard in (("", o_shard), ("e", o_eshard)):
        idx = np.array([pos[int(n)] for n in shard], np.int64)
        for name in per_size[0]:
            slopes[pre + name] = np.array([d[name] for d in per_size])[idx]

    # ---- per point: keys into tables of unique terms ------------------------------------
    points: list[tuple[Outer, tuple[int, ...] | None]] = []
    q_outer: list[int] = []
    keys: dict[str, dict] = {"layer": {}, "end": {}, "p2p": {}, "dp": {}, "edp": {}, "tied": {}}
    q_keys: dict[str, list[int]] = {k: [] for k in keys}

    def key_index(kind: str, key) -> int:
        table = keys[kind]
        if key not in table:
            table[key] = len(table)
        return table[key]

    for oi, o in enumerate(outers):
        for dom in space.placements(o):
            tp_s, cp_s, dp_s, pp_s = spans_for((o.tp, o.cp, o.dp, o.pp), dom, space.order, levels)
            points.append((o, dom))
            q_outer.append(oi)
            ep_s, etp_s, edp_s = expert_spans(tp_s, cp_s, dp_s, o.ep, o.etp) if model.moe \
                else ((), (), ())
            q_keys["layer"].append(key_index("layer", (o.tp, o.cp, o.mbs, o.ep, o.etp, o.cpc,
                                                       tp_s, cp_s, ep_s, etp_s)))
            q_keys["end"].append(key_index("end", (o.tp, o.cp, o.mbs, tp_s)))
            q_keys["p2p"].append(key_index("p2p", (o.tp, o.cp, o.mbs, o.v, o.pp, pp_s)))
            q_keys["dp"].append(key_index("dp", combine(dp_s, cp_s)))
            q_keys["edp"].append(key_index("edp", edp_s))
            q_keys["tied"].append(key_index("tied", (o.tp, o.pp, pp_s)))

    # ---- unique terms, from the evaluator's functions -----------------------------------
    lnames = ("total", "fwd", "bwdrec", "act", "ws", "recflops")
    LT = np.zeros((len(keys["layer"]), len(lnames), nt, 3, 2))
    for (tp, cp, mbs, ep, etp, cpc, tp_s, cp_s, ep_s, etp_s), k in keys["layer"].items():
        setup = layer_setup(model, levels, chunks, tp, cp, mbs, seq, ep, etp, tp_s, cp_s, ep_s,
                            etp_s)
        for sp in _sp_options(space, tp):
            tp_comm = space.fixed.get("tp_comm") or ("rs_ag" if sp else "allreduce")
            for ti, t in enumerate(types):
                shape, net = setup[t]
                for ri, mode in enumerate(RECOMPUTE):
                    if rc_ok[ti, ri]:
                        strat = strategy_from(base, mode, sp, tp_comm, t, cpc)
                        c = layer_cost(model, gpu, net, shape, strat)
                        LT[k, :, ti, ri, int(sp)] = (c.total_s, c.fwd_s, c.bwd_s + c.recompute_s,
                                                     c.act_bytes, c.workspace_bytes,
                                                     c.recompute_flops + c.padding_flops)
    enames = ("emb_total", "emb_fwd", "emb_bwd", "head_total", "head_fwd", "head_bwd",
              "head_act", "head_ws")
    ET = np.zeros((len(keys["end"]), len(enames), 2))
    for (tp, cp, mbs, tp_s), k in keys["end"].items():
        net = Net(levels, tp_s, (1,) * len(levels), chunks)
        shape = LayerShape(tp, cp, mbs, seq)
        for sp in _sp_options(space, tp):
            tp_comm = space.fixed.get("tp_comm") or ("rs_ag" if sp else "allreduce")
            strat = strategy_from(base, "none", sp, tp_comm)
            e = embedding_cost(model, gpu, net, shape, strat)
            h = head_cost(model, gpu, net, shape, strat)
            ET[k, :, int(sp)] = (e.fwd_s + e.bwd_s + e.tp_comm_s, e.fwd_s, e.bwd_s,
                                 h.fwd_s + h.bwd_s + h.tp_comm_s, h.fwd_s, h.bwd_s,
                                 h.act_bytes, h.workspace_bytes)
    PT = np.array([p2p_time_per_microbatch_s(model, LayerShape(tp, cp, mbs, seq), v, pp, pp_s,
                                             levels)
                   for (tp, cp, mbs, v, pp, pp_s) in keys["p2p"]])
    TT = np.array([tied_embedding_sync_s(model, tp, pp, pp_s, levels)
                   for (tp, pp, pp_s) in keys["tied"]])
    DS = np.zeros((len(keys["dp"]), 4, 4))  # [spans, z, field] slope
    DI = np.zeros((len(keys["dp"]), 4, 4))  # intercept
    for spans, k in keys["dp"].items():
        for z in range(4):
            DS[k, z], DI[k, z] = _affine(_dp_fields, z, spans, levels, chunks)
    ES = np.zeros((len(keys["edp"]), 4, 4))
    EI = np.zeros((len(keys["edp"]), 4, 4))
    for spans, k in keys["edp"].items():
        if spans:
            for z in range(4):
                ES[k, z], EI[k, z] = _affine(_dp_fields, z, spans, levels, chunks)

    # ---- assemble per-point arrays -------------------------------------------------------
    qo = np.array(q_outer, dtype=np.int64)
    A: dict[str, Any] = {}
    kl = np.array(q_keys["layer"])
    for i, name in enumerate(lnames):
        A[f"layer_{name}"] = LT[kl, i]
    ke = np.array(q_keys["end"])
    for i, name in enumerate(enames):
        A[name] = ET[ke, i]
    A["p2p"] = PT[np.array(q_keys["p2p"])] if len(PT) else np.zeros(0)
    A["g_tied"] = TT[np.array(q_keys["tied"])][:, None] * (g_emb[qo] | g_head[qo])
    kd = np.array(q_keys["dp"])
    params = g_params[qo][:, :, None]  # (Q, G, 1)
    dp_val = DS[kd][:, None, :, :] * params[..., None] + DI[kd][:, None, :, :]  # (Q, G, 4z, 4f)
    # routed experts: the same traffic over the expert-data-parallel group, added after
    kx = np.array(q_keys["edp"])
    eparams = g_eparams[qo][:, :, None]
    e_val = ES[kx][:, None, :, :] * eparams[..., None] + EI[kx][:, None, :, :]
    dp_val = dp_val + np.where(eparams[..., None] > 0, e_val, 0.0)
    dp_val = dp_val[:, :, zero_of, :]  # ZeRO stage of each state option: (Q, G, Z, 4f)
    valid_z = o_z[qo][:, None, :]
    for i, name in enumerate(("mbf", "mbb", "grad", "param")):
        A[f"g_{name}"] = np.where(valid_z & g_valid[qo][:, :, None], dp_val[..., i], 0.0)
    for name, key in (("g_opt", "opt"), ("g_states", "st"), ("g_off", "off"),
                      ("g_down", "down"), ("g_fetch", "fetch"), ("g_host", "host")):
        # g_off: CPU step and parameter copy (exposed, once per iteration); g_down: gradient
        # shard to the tier (overlaps backward); g_fetch: parameter shard from the tier, per
        # microbatch and pass; g_host: offload-tier bytes
        A[name] = slopes[key][qo][:, None, :] * params
        if model.moe is not None:
            A[name] = A[name] + slopes["e" + key][qo][:, None, :] * eparams
    for name, arr_ in (("m", o_m), ("g_valid", g_valid), ("g_n", g_n), ("g_emb", g_emb),
                       ("g_head", g_head), ("g_cnt", g_cnt), ("g_infl", g_infl),
                       ("g_layers", g_layers), ("ok_sp", o_sp), ("ok_z", o_z),
                       ("buffers", o_buf)):
        A[name] = arr_[qo]
    A["v"] = np.array([o.v for o in outers], np.int64)[qo]
    A["pp"] = np.array([o.pp for o in outers], np.int64)[qo]
    A["world"] = np.array([o.world for o in outers], np.int64)[qo]
    w = np.array([objective.weights(cluster, o.world) for o in outers])
    A["w_time"], A["w_busy"] = w[qo, 0], w[qo, 1]
    A["rc_ok"] = rc_ok
    terms = Terms(**{NAMES[k]: v for k, v in A.items()})
    return Tables(space, points, objective, types, terms)
