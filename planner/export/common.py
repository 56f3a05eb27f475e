"""What the exporters share: refusals that name the field, the value and why; the plan as a
framework runs it (fields that cost nothing in this plan set to their defaults); the rank
order check; ``overlap_tp_comm: auto`` resolved to the one switch frameworks have.

The exporters sit above the cost model (they read ``planner.specs`` and evaluate plans with
``planner.costmodel``); nothing below imports them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NoReturn

from planner.costmodel.train.evaluator import evaluate
from planner.costmodel.frameworks import (
    placement_domain,
    placement_violations,
    plan_violations,
    world_order,
)
from planner.costmodel.network import PlacementError, domain_factors
from planner.costmodel.pipeline import (
    block_recompute_layers,
    block_recompute_runs_half,
    chunk_sizes,
)
from planner.errors import InputError
from planner.specs.cluster import ClusterSpec
from planner.specs.framework import FrameworkProfile, load_framework
from planner.specs.model import ModelSpec
from planner.specs.names import comment_text
from planner.specs.plan import Plan

FORMATS: tuple[str, ...] = ("megatron", "megatron-bridge", "torchtitan", "deepspeed")

#: Megatron-Core numbers ranks "tp-cp-ep-dp-pp" (innermost first); ``--use-tp-pp-dp-mapping``
#: makes it "tp-cp-ep-pp-dp" (Megatron-LM megatron/training/arguments.py, core_v0.15.3).
MEGATRON_ORDER: tuple[str, ...] = ("tp", "cp", "ep", "dp", "pp")
MEGATRON_TP_PP_DP_ORDER: tuple[str, ...] = ("tp", "cp", "ep", "pp", "dp")


def refuse(fmt: str, field: str, value: Any, why: str) -> NoReturn:
    """Raise the InputError every refusal uses: the format, the plan field, its value, why."""
    raise InputError(f"cannot export to {fmt}: {field}={_show(value)}: {why}")


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True)
class Target:
    """What an export is for: the model and the cluster the plan was made for."""

    model: ModelSpec
    cluster: ClusterSpec


def uniform_recompute(plan: Plan, model: ModelSpec, fmt: str) -> str:
    """The one recomputation every layer type uses; frameworks take one setting for all
    layers, so a per-layer-type mix is refused."""
    values = {plan.recompute_for(t) for t in model.layer_types}
    if len(values) > 1:
        refuse(fmt, "recompute", plan.recompute,
               f"{fmt} applies one recomputation to every layer; fix one value for all "
               "layer types (e.g. --fix recompute=full)")
    return values.pop()


def half_block_layers(num_layers: int, n_chunks: int, uneven: bool) -> int:
    """Layers per chunk that ``recompute="half"`` recomputes in a framework that recomputes
    the first n layers of every chunk (Megatron ``--recompute-method block``): half of the
    largest chunk, rounded up (an odd chunk recomputes one layer more than the plan counts:
    a little slower, never more memory)."""
    return block_recompute_layers(chunk_sizes(num_layers, n_chunks, uneven) or [num_layers])


def half_block_or_refuse(num_layers: int, n_chunks: int, uneven: bool, fmt: str) -> int:
    """:func:`half_block_layers`, refused when block recomputation would recompute more
    layers than ``recompute="half"`` costs (unequal chunks: one ``n`` for all of them)."""
    sizes = chunk_sizes(num_layers, n_chunks, uneven) or [num_layers]
    n = block_recompute_layers(sizes)
    if not block_recompute_runs_half(sizes):
        ran = sum(min(n, c) for c in sizes)
        refuse(fmt, "recompute", "half",
               f"block recomputation of the first {n} layers of chunks of {min(sizes)} and "
               f"{max(sizes)} layers recomputes {ran} of {num_layers} layers, where the plan "
               f"costs half ({num_layers / 2:g}); fix recompute=full or selective, or a "
               "pp x virtual_stages that divides the layers")
    return n


def recompute_field(value: str, model: ModelSpec) -> str | dict[str, str]:
    """``recompute`` as the search space writes it: one string for a one-type model, else a
    value per layer type."""
    types = model.layer_types
    return value if len(types) == 1 else {t: value for t in types}


def check_rank_order(plan: Plan, cluster: ClusterSpec, fmt: str,
                     profile: FrameworkProfile | None = None) -> tuple[str, ...]:
    """The framework order (one of ``profile``'s rank orders; default: ``fmt``'s profile)
    this plan's placement is, or a refusal.

    A launcher numbers ranks node by node, so a framework whose groups nest in order ``o``
    puts in one NVSwitch domain exactly what :func:`fill_level` fills in that order; a
    placement.domain that differs is a layout the framework cannot produce
    (:func:`planner.costmodel.frameworks.placement_violations`)."""
    profile = profile or format_profile(fmt)
    for v in placement_violations(profile, plan, cluster):
        refuse(fmt, v.field, v.value, v.why)
    mine = world_order(plan.placement.order)
    orders = [tuple(o) for o in profile.rank_orders or [plan.placement.order]]
    return next(o for o in orders if world_order(o) == mine)


#: the framework profile whose rules each format's refusals apply
FORMAT_FRAMEWORK: dict[str, str] = {"megatron": "megatron-core", "megatron-bridge": "nemo",
                                    "torchtitan": "torchtitan", "deepspeed": "deepspeed"}


@lru_cache(maxsize=None)
def format_profile(fmt: str) -> FrameworkProfile:
    """The shipped profile of the framework that ``fmt`` launches."""
    return load_framework(FORMAT_FRAMEWORK[fmt])


def refuse_violations(fmt: str, plan: Plan, model: ModelSpec,
                      profile: FrameworkProfile | None = None) -> None:
    """Refuse the first rule of ``profile`` (default: ``fmt``'s) that ``plan`` breaks,
    placement rules aside (:func:`check_rank_order`). bf16 optimizer states are refused by
    every export: they are Apex DistributedFusedAdam's (NeMo 1.x ``optim.dtype``), with the
    bf16 weights as the master copy, which none of the exported frameworks runs."""
    if plan.optimizer_dtype != "fp32":
        refuse(fmt, "optimizer_dtype", plan.optimizer_dtype,
               "bf16 Adam states with the bf16 weights as master copy are Apex "
               "DistributedFusedAdam's (NeMo 1.x optim.dtype=bf16); this framework keeps fp32 "
               "master weights and moments")
    for v in plan_violations(profile or format_profile(fmt), plan, model):
        refuse(fmt, v.field, v.value, v.why)


def canonical_placement(plan: Plan, cluster: ClusterSpec, order: tuple[str, ...]) -> dict:
    """The placement as the search space writes it: the order, and the domain factors only
    when the job spans more than one domain."""
    out: dict[str, Any] = {"order": list(order)}
    if plan.world_size > cluster.domain_size:
        out["domain"] = placement_domain(plan, cluster, world_order(order))
    return out


def tp_overlap_switch(plan: Plan, target: Target, fmt: str) -> bool:
    """``overlap_tp_comm`` as one switch for every layer. ``auto`` lets each GEMM pair take
    the faster; it is exported when it equals the all-on or the all-off plan exactly (the
    evaluator's iteration time), else refused with both times."""
    if plan.tp == 1 or not plan.sequence_parallel or not tp_inside_domain(plan, target.cluster):
        return False  # no overlap possible: the flag costs nothing either way
    if plan.overlap_tp_comm != "auto":
        return bool(plan.overlap_tp_comm)
    t = {k: evaluate(target.model, target.cluster, plan.model_copy(
        update={"overlap_tp_comm": k})).iteration_time_s for k in ("auto", True, False)}
    for k in (True, False):
        if math.isclose(t[k], t["auto"], rel_tol=1e-12, abs_tol=0.0):
            return k
    refuse(fmt, "overlap_tp_comm", "auto",
           f"the faster choice differs between GEMMs ({t['auto']:.4f} s) and {fmt} has one "
           f"switch for all; fix overlap_tp_comm=true ({t[True]:.4f} s) or false "
           f"({t[False]:.4f} s)")


def tp_inside_domain(plan: Plan, cluster: ClusterSpec) -> bool:
    try:
        return domain_factors(plan, cluster.domain_size)["tp"] == plan.tp
    except PlacementError:
        return False


def as_run(plan: Plan, target: Target, fmt: str, order: tuple[str, ...] = MEGATRON_ORDER
           ) -> Plan:
    """The plan as a framework runs it: every field that costs nothing in this plan takes
    its default (what a parser reading the framework's configuration returns), placement
    in the framework's order, ``recompute`` per layer type as the search space writes it,
    ``overlap_tp_comm`` as one switch. The estimate is unchanged (tests check it)."""
    m = target.model
    dpcp = plan.dp * plan.cp
    upd: dict[str, Any] = {
        "expert_tp": plan.expert_tp if m.moe is not None else None,
        "uneven_pipeline": m.num_layers % (plan.pp * plan.virtual_stages) != 0,
        "recompute": recompute_field(uniform_recompute(plan, m, fmt), m),
        "cp_comm": plan.cp_comm if plan.cp > 1 else "ring",
        "overlap_p2p_comm": plan.overlap_p2p_comm if plan.virtual_stages > 1 else True,
        "overlap_dp_grad_reduce": plan.overlap_dp_grad_reduce if dpcp > 1 else True,
        "overlap_param_gather": (plan.overlap_param_gather
                                 if dpcp > 1 and plan.zero_stage > 0 else True),
        "overlap_tp_comm": tp_overlap_switch(plan, target, fmt),
        "placement": canonical_placement(plan, target.cluster, order),
    }
    if plan.tp == 1:
        upd.update(sequence_parallel=False, tp_comm="allreduce")
    return Plan.model_validate({**plan.to_dict(), **upd})


def launch_shape(plan: Plan, cluster: ClusterSpec, fmt: str) -> tuple[int, int]:
    """(nodes, processes per node) for the plan's GPUs: whole nodes of the cluster, or one
    partial node when the job is smaller than a node."""
    per_node = min(cluster.node_size, plan.world_size)
    if plan.world_size % per_node:
        refuse(fmt, "dp", plan.dp, f"tp x cp x pp x dp = {plan.world_size} GPUs do not fill "
               f"whole {cluster.node_size}-GPU nodes")
    return plan.world_size // per_node, per_node


def header_lines(fmt: str, framework: str, source: str, target: Target, plan: Plan
                 ) -> list[str]:
    """What every exported file starts with: what, for which version, from where (plain
    text: the names in it are as given)."""
    c = target.cluster
    return [
        f"planner export --format {fmt}: {target.model.name} on {c.name} "
        f"({plan.world_size} of {c.num_gpus}x {c.gpu.name})",
        f"framework: {framework}",
        f"argument names checked in: {source}",
        "plan: " + plan_summary(plan),
    ]


def header(fmt: str, framework: str, source: str, target: Target, plan: Plan,
           comment: str = "#") -> list[str]:
    """:func:`header_lines` as comment lines that no name can end early."""
    return [comment_line(line, comment)
            for line in header_lines(fmt, framework, source, target, plan)]


def comment_line(text: str, comment: str = "#") -> str:
    """One comment line holding ``text``: a line break or control character in it (from a
    name) is written escaped, so that nothing after it becomes a command or a key."""
    return f"{comment} {comment_text(text)}"


def plan_summary(plan: Plan) -> str:
    parts = [f"tp{plan.tp}", f"cp{plan.cp}", f"pp{plan.pp}", f"dp{plan.dp}"]
    if plan.ep > 1:
        parts.append(f"ep{plan.ep}")
    parts += [f"v{plan.virtual_stages}", f"mbs{plan.microbatch_size}",
              f"gbs{plan.global_batch_size}", f"seq{plan.seq_len}", f"zero{plan.zero_stage}",
              f"recompute={plan.recompute}", f"sp={_show(plan.sequence_parallel)}", plan.dtype]
    return " ".join(str(p) for p in parts)
