"""Which rules of a framework profile a plan breaks: one statement, read by the search space
(:mod:`formulations.train.space`, which keeps only plans without violations) and by the
exporters (:mod:`planner.export`, which refuse the first violation).

The single-field rules are data in the profile (:class:`planner.specs.framework.FrameworkProfile`);
the conditional ones are named there and implemented here, once (:data:`RULES`). A field
that costs nothing in a plan (an overlap with nothing to overlap, the CP exchange with
cp = 1, sequence parallelism with tp = 1) is never a violation: the exporters write such
fields at the framework's defaults (``planner.export.common.as_run``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from planner.costmodel.network import PlacementError, domain_factors, fill_level
from planner.costmodel.pipeline import block_recompute_runs_half, chunk_sizes
from planner.specs.cluster import ClusterSpec
from planner.specs.framework import FrameworkProfile
from planner.specs.model import ModelSpec
from planner.specs.plan import WORLD_DIMS, Plan
import planner.catalog as catalog
from planner.specs.framework import load_framework


@dataclass(frozen=True)
class Violation:
    """A plan field, its value, and why the framework cannot run it (with the citation)."""

    field: str
    value: Any
    why: str

    def __str__(self) -> str:
        return f"{self.field}={show(self.value)}: {self.why}"


def show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "-".join(str(v) for v in value)
    return str(value)


def _cite(profile: FrameworkProfile, key: str) -> str:
    src = profile.sources.get(key)
    return f" ({src})" if src else ""


def _values(vals: list[Any]) -> str:
    return ", ".join(show(v) for v in vals)


# ---- relevance: when a field changes what runs ------------------------------------------
def dp_reduces(p: Plan) -> bool:
    """Gradients are reduced across data-parallel ranks (dp x cp > 1)."""
    return p.dp * p.cp > 1


def gathers_params(p: Plan) -> bool:
    return p.dp * p.cp > 1 and p.zero_stage > 0


def offload_name(p: Plan) -> str:
    return {(False, False): "none", (True, False): "optimizer", (False, True): "params",
            (True, True): "both"}[(p.offload_optimizer, p.offload_params)]


# ---- the named conditional rules -------------------------------------------------------
Rule = Callable[[Plan], "tuple[str, Any, str] | None"]


def _zero0_pure_dp(p: Plan) -> tuple[str, Any, str] | None:
    if p.zero_stage == 0 and (p.cp > 1 or p.tp > 1 or p.pp > 1):
        return ("zero_stage", 0, "ZeRO-0 (DDP) only without tp, cp and pp; fix zero_stage=3")
    return None


def _fsdp_needs_dp_shard(p: Plan) -> tuple[str, Any, str] | None:
    if p.zero_stage == 3 and p.dp * p.cp == 1:
        return ("zero_stage", 3, "FSDP over dp x cp = 1 rank shards nothing and leaves the "
                "model in fp32; give dp x cp > 1")
    return None


def _rs_ag_needs_sp(p: Plan) -> tuple[str, Any, str] | None:
    if p.tp > 1 and not p.sequence_parallel and p.tp_comm == "rs_ag":
        return ("tp_comm", "rs_ag", "without sequence parallelism TP activations are "
                "all-reduced")
    return None


def _fp16_no_bf16_grad(p: Plan) -> tuple[str, Any, str] | None:
    if p.dtype == "fp16" and p.grad_reduce_dtype == "bf16":
        return ("grad_reduce_dtype", "bf16", "a bf16 gradient reduction applies to bf16 runs")
    return None


def _fp8_params_need_zero1(p: Plan) -> tuple[str, Any, str] | None:
    if p.fp8_params and p.zero_stage == 0:
        return ("fp8_params", True, "FP8 parameter gathers need the distributed optimizer "
                "(zero_stage=1)")
    return None


def _param_gather_needs_grad(p: Plan) -> tuple[str, Any, str] | None:
    if (gathers_params(p) and p.overlap_param_gather and not p.overlap_dp_grad_reduce):
        return ("overlap_param_gather", True, "overlapped parameter gathers need overlapped "
                "gradient reduction; fix overlap_dp_grad_reduce=true")
    return None


def _p2p_off_needs_pp3(p: Plan) -> tuple[str, Any, str] | None:
    if p.virtual_stages > 1 and p.pp <= 2 and not p.overlap_p2p_comm:
        return ("overlap_p2p_comm", False, "the interleaved schedule without p2p overlap "
                "needs pp > 2")
    return None


def _seq_2cp(p: Plan) -> tuple[str, Any, str] | None:
    if p.cp > 1 and p.seq_len % (2 * p.cp):
        return ("seq_len", p.seq_len, f"seq_len must be divisible by 2 x cp = {2 * p.cp}")
    return None


def _async_tp_compile(p: Plan) -> tuple[str, Any, str] | None:
    if not p.fused_elementwise and p.overlap_tp_comm is True and p.tp > 1:
        return ("fused_elementwise", False, "async TP runs through torch.compile, which fuses "
                "the elementwise operators too; fix fused_elementwise=true or "
                "overlap_tp_comm=false")
    return None


def _offload_opt_zero(p: Plan) -> tuple[str, Any, str] | None:
    if p.offload_optimizer and p.zero_stage == 0:
        return ("offload_optimizer", True, "ZeRO-Offload needs zero_stage >= 1")
    return None


def _zero0_after_backward(p: Plan) -> tuple[str, Any, str] | None:
    if p.zero_stage == 0 and p.dp > 1 and p.overlap_dp_grad_reduce:
        return ("overlap_dp_grad_reduce", True, "without ZeRO the gradients are all-reduced "
                "after backward; fix overlap_dp_grad_reduce=false or zero_stage>=1")
    return None


def _one_dp_switch(p: Plan) -> tuple[str, Any, str] | None:
    if p.zero_stage >= 1 and p.dp > 1 and p.overlap_dp_grad_reduce != p.overlap_param_gather:
        return ("overlap_param_gather", p.overlap_param_gather, "one overlap switch covers "
                "both the gradient reduction and the parameter gathers; set it equal to "
                f"overlap_dp_grad_reduce={show(p.overlap_dp_grad_reduce)}")
    return None


def _fp8_needs_fp8_params(p: Plan) -> tuple[str, Any, str] | None:
    if p.dtype == "fp8" and not p.fp8_params:
        return ("fp8_params", False, "the FP8 recipes all gather FP8 parameters; fix "
                "fp8_params=true")
    return None


#: what DeepSpeed v0.18.0 wraps the optimizer in (deepspeedai/DeepSpeed, tag v0.18.0, commit
#: 79caae1c04fca210345bdeb03bcacf87b1ac2f23): the two non-ZeRO wrappers keep full fp32
#: master weights and states on every rank and all-reduce the model-dtype ``.grad`` after
#: backward (runtime/fp16/fused_optimizer.py, unfused_optimizer.py; engine.py
#: allreduce_gradients); the ZeRO ones shard as the plan's stage
DS_UNSHARDED_WRAPPERS = ("FP16_Optimizer", "FP16_UnfusedOptimizer")
DS_ZERO_OPTIMIZERS = {1: "DeepSpeedZeroOptimizer", 2: "DeepSpeedZeroOptimizer",
                      3: "DeepSpeedZeroOptimizer_Stage3"}


def deepspeed_optimizer(dtype: str, grad_accum_dtype: str, zero_stage: int,
                        offload_optimizer: bool, fused_adam: bool = False) -> str:
    """The class of ``engine.optimizer`` DeepSpeed v0.18.0 builds around a configured
    optimizer (a client one, or an ``optimizer`` section) for a bf16/fp16 model.

    runtime/engine.py at v0.18.0: ``_do_optimizer_sanity_check`` (l. 1391-1438) returns
    ``BFLOAT16`` for bf16 with fp32 accumulation at ZeRO stage 1 without CPU offload
    (l. 1407-1409) and without ZeRO (l. 1433-1434), ``ZERO_OPTIMIZATION`` for any other ZeRO
    config (l. 1410), ``DDP_BFLOAT16``/``FP16`` when the dtypes agree without ZeRO
    (l. 1432) and raises for fp16 with another accumulation dtype without ZeRO (l. 1435-1436);
    ``_configure_optimizer`` (l. 1469-1486) tests ``in [FP16, DDP_BFLOAT16]`` before
    ``== BFLOAT16``, and ``BFLOAT16 == DDP_BFLOAT16 == "bf16"`` (runtime/constants.py
    l. 127, 141), so every "bf16" answer goes to ``_configure_fp16_optimizer``:
    ``FP16_Optimizer`` for FusedAdam (l. 1666-1698), ``FP16_UnfusedOptimizer`` otherwise
    (l. 1700, e.g. a client ``torch.optim.AdamW``). ``BF16_Optimizer`` (l. 1483) is
    unreachable with an optimizer; the engine builds it only without one (l. 361-362).
    ZeRO 1/2 build ``DeepSpeedZeroOptimizer`` (l. 1771), 3 ``DeepSpeedZeroOptimizer_Stage3``
    (l. 1844-1846)."""
    if dtype not in ("bf16", "fp16"):  # an fp32 model runs the client optimizer unwrapped
        raise ValueError(f"expected a bf16 or fp16 model, got {dtype}")
    if zero_stage >= 1 and not (dtype == "bf16" and grad_accum_dtype == "fp32"
                                and zero_stage == 1 and not offload_optimizer):
        return DS_ZERO_OPTIMIZERS[min(zero_stage, 3)]
    if dtype == "fp16" and grad_accum_dtype != "fp16":
        raise ValueError(f"DeepSpeed raises NotImplementedError for an fp16 model with "
                         f"{grad_accum_dtype} gradient accumulation without ZeRO")
    return DS_UNSHARDED_WRAPPERS[0 if fused_adam else 1]


def _ds_unsharded_fp32(p: Plan) -> tuple[str, Any, str] | None:
    # the cost model charges ZeRO stage z as z's sharding and fp32 accumulation as an fp32
    # buffer; DeepSpeed's non-ZeRO wrappers have neither (deepspeed_optimizer above): at
    # stage 1 they shard nothing and reduce after backward, at stage 0 they accumulate in
    # the bf16 .grad, whatever the data-parallel size
    if p.dtype != "bf16" or p.zero_stage >= 2:
        return None
    built = deepspeed_optimizer(p.dtype, p.grad_reduce_dtype, p.zero_stage,
                                p.offload_optimizer)
    if built not in DS_UNSHARDED_WRAPPERS or p.grad_reduce_dtype == p.dtype:
        return None
    return ("grad_reduce_dtype", "fp32", f"bf16 with fp32 gradient accumulation at "
            f"ZeRO stage {p.zero_stage} is not run by a ZeRO optimizer: DeepSpeed wraps "
            "the configured optimizer in FP16_Optimizer (FusedAdam) or "
            "FP16_UnfusedOptimizer (any other optimizer) in bf16, which accumulates the "
            "gradients in the bf16 parameters, all-reduces them whole after backward "
            "(overlap_comm has no effect) and keeps the full fp32 master weights and "
            "optimizer states on every rank, not the plan costed; fix "
            "grad_reduce_dtype=bf16 or zero_stage>=2")


def _fp16_needs_zero(p: Plan) -> tuple[str, Any, str] | None:
    if p.dtype == "fp16" and p.zero_stage == 0:
        return ("zero_stage", 0, f"an fp16 model with {p.grad_reduce_dtype} gradient "
                "accumulation without ZeRO is an unsupported mix (NotImplementedError); fix "
                "zero_stage>=1")
    return None


def _block_half(p: Plan, model: ModelSpec) -> tuple[str, Any, str] | None:
    if model.num_layers % (p.pp * p.virtual_stages) == 0 or "half" not in {
            p.recompute_for(t) for t in model.layer_types}:
        return None
    sizes = chunk_sizes(model.num_layers, p.pp * p.virtual_stages, True) or [model.num_layers]
    if block_recompute_runs_half(sizes):
        return None
    return ("recompute", "half", f"block recomputation of the first n layers of chunks of "
            f"{min(sizes)} and {max(sizes)} layers does not recompute half of each; fix "
            "recompute=full or selective, or a pp x virtual_stages that divides the layers")


#: rules that read the model too
MODEL_RULES: dict[str, Callable[[Plan, ModelSpec], "tuple[str, Any, str] | None"]] = {
    "block_recompute_half": _block_half}

RULES: dict[str, Rule] = {
    "zero0_pure_dp": _zero0_pure_dp,
    "fsdp_needs_dp_shard": _fsdp_needs_dp_shard,
    "rs_ag_needs_sp": _rs_ag_needs_sp,
    "fp16_no_bf16_grad_reduce": _fp16_no_bf16_grad,
    "fp8_params_need_zero1": _fp8_params_need_zero1,
    "param_gather_needs_grad_overlap": _param_gather_needs_grad,
    "interleaved_no_p2p_overlap_needs_pp_gt2": _p2p_off_needs_pp3,
    "seq_divisible_by_2cp": _seq_2cp,
    "async_tp_needs_compile": _async_tp_compile,
    "offload_optimizer_needs_zero": _offload_opt_zero,
    "zero0_reduces_after_backward": _zero0_after_backward,
    "one_dp_overlap_switch": _one_dp_switch,
    "fp8_needs_fp8_params": _fp8_needs_fp8_params,
    "bf16_fp32_accum_below_zero2_runs_fp16_optimizer": _ds_unsharded_fp32,
    "fp16_needs_zero": _fp16_needs_zero,
}


# ---- the whole statement ----------------------------------------------------------------
def recompute_ok(profile: FrameworkProfile, values: tuple[str, ...]) -> bool:
    """Recomputation per layer type (``values``) the framework can state."""
    if profile.uniform_recompute and len(set(values)) > 1:
        return False
    return all(v in profile.recompute for v in values)


def placement_domain(plan: Plan, cluster: ClusterSpec, order: tuple[str, ...]
                     ) -> dict[str, int]:
    """GPUs of each dimension in one NVSwitch domain when ranks are numbered in ``order``."""
    degrees = {d: plan.degree(d) for d in WORLD_DIMS}
    return fill_level(degrees, min(cluster.domain_size, plan.world_size), order)


def world_order(order: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    return tuple(d for d in order if d in WORLD_DIMS)


def factors_text(f: dict[str, int]) -> str:
    return " x ".join(f"{d}{k}" for d, k in f.items() if k > 1) or "1"


def placement_violations(profile: FrameworkProfile, plan: Plan, cluster: ClusterSpec
                         ) -> list[Violation]:
    """A rank order the framework does not number ranks in, or an NVSwitch-domain placement
    its order does not produce (a launcher numbers ranks node by node)."""
    if profile.rank_orders is None:
        return []
    name = profile.name
    mine = world_order(plan.placement.order)
    orders = [tuple(o) for o in profile.rank_orders]
    if not any(world_order(o) == mine for o in orders):
        return [Violation("placement.order", "-".join(plan.placement.order),
                          f"{name} nests its groups as " + " or ".join("-".join(o) for o in orders)
                          + " (innermost first)" + _cite(profile, "rank_orders"))]
    try:
        actual = domain_factors(plan, cluster.domain_size)
    except PlacementError as e:
        return [Violation("placement.domain", "?", str(e))]
    expected = placement_domain(plan, cluster, mine)
    if actual != expected:
        return [Violation("placement.domain", factors_text(actual),
                          f"{name} numbers ranks {'-'.join(mine)} (innermost first), which "
                          f"puts {factors_text(expected)} in each {cluster.domain_size}-GPU "
                          "domain; fix placement.domain to that or let the solver choose with "
                          "that order")]
    return []


def violations(profile: FrameworkProfile, plan: Plan, model: ModelSpec,
               cluster: ClusterSpec | None = None) -> list[Violation]:
    """Every rule of ``profile`` that ``plan`` breaks (placement ones only when ``cluster``
    is given), in a fixed order: placement, degrees, ZeRO and offload, sequence
    parallelism, precision, kernels, context parallelism, overlaps, pipeline,
    recomputation, experts."""
    out = placement_violations(profile, plan, cluster) if cluster is not None else []
    return out + plan_violations(profile, plan, model)


def catalog_violations(plan: Plan, model: ModelSpec, cluster: ClusterSpec
                       ) -> dict[str, list[Violation]]:
    """Every catalog framework with the rules ``plan`` breaks there (none: it runs)."""
    return {name: violations(load_framework(name), plan, model, cluster)
            for name in catalog.names("frameworks")}


def frameworks_running(plan: Plan, model: ModelSpec, cluster: ClusterSpec
                       ) -> tuple[list[str], str]:
    """The catalog frameworks whose rules ``plan`` breaks none of, and the one breaking
    the fewest with the first rule it breaks (``"name: field=value: why"``; the name
    alone when it breaks none)."""
    broken = catalog_violations(plan, model, cluster)
    name = min(broken, key=lambda n: len(broken[n]))
    closest = f"{name}: {broken[name][0]}" if broken[name] else name
    return [n for n, v in broken.items() if not v], closest


def plan_violations(profile: FrameworkProfile, plan: Plan, model: ModelSpec
                    ) -> list[Violation]:
    """:func:`violations` without the placement rules (they need the cluster)."""
    return (_state_violations(profile, plan, model)
            + _schedule_violations(profile, plan, model))


class _Found:
    """Collects the violations of one profile and plan, in order."""

    def __init__(self, profile: FrameworkProfile, plan: Plan, model: ModelSpec) -> None:
        self.pr, self.p, self.model, self.out = profile, plan, model, []  # type: ignore[var-annotated]

    def bad(self, field: str, value: Any, allowed: list[Any], key: str, what: str) -> None:
        self.out.append(Violation(field, value, f"{self.pr.name} runs {what} "
                                  f"{_values(allowed)} only" + _cite(self.pr, key)))

    def add(self, field: str, value: Any, why: str, key: str) -> None:
        self.out.append(Violation(field, value, f"{self.pr.name}{why}" + _cite(self.pr, key)))

    def rule(self, key: str) -> None:
        if key in self.pr.rules:
            p, model = self.p, self.model
            hit = MODEL_RULES[key](p, model) if key in MODEL_RULES else RULES[key](p)
            if hit is not None:
                self.add(hit[0], hit[1], f": {hit[2]}", key)


def _state_violations(pr: FrameworkProfile, p: Plan, model: ModelSpec) -> list[Violation]:
    """Degrees, ZeRO and offload, sequence parallelism, precision, kernels, CP exchange."""
    f = _Found(pr, p, model)
    for dim in ("tp", "pp", "cp", "ep"):
        cap = pr.max_degrees.get(dim)  # type: ignore[call-overload]
        if cap is not None and p.degree(dim) > cap:
            f.add(dim, p.degree(dim), f" has no {dim} degree above {cap}", "max_degrees")
    if p.zero_stage not in pr.zero_stages:
        f.bad("zero_stage", p.zero_stage, pr.zero_stages, "zero_stages", "ZeRO stages")
    f.rule("zero0_pure_dp")
    f.rule("fsdp_needs_dp_shard")
    if offload_name(p) not in pr.offloads:
        f.bad("offload_optimizer" if p.offload_optimizer else "offload_params", True,
              pr.offloads, "offloads", "offloads")
    f.rule("offload_optimizer_needs_zero")
    if p.tp > 1 and pr.sequence_parallel == "always" and not p.sequence_parallel:
        f.add("sequence_parallel", False, "'s tensor parallelism always runs with sequence "
              "parallelism", "sequence_parallel")
    if p.tp > 1 and pr.sequence_parallel == "never" and p.sequence_parallel:
        f.add("sequence_parallel", True, " has no sequence parallelism", "sequence_parallel")
    f.rule("rs_ag_needs_sp")
    if p.dtype not in pr.dtypes:
        f.bad("dtype", p.dtype, pr.dtypes, "dtypes", "precisions")
    f.rule("fp16_no_bf16_grad_reduce")
    f.rule("fp16_needs_zero")
    f.rule("bf16_fp32_accum_below_zero2_runs_fp16_optimizer")
    if p.grad_reduce_dtype not in pr.grad_reduce_dtypes:
        f.bad("grad_reduce_dtype", p.grad_reduce_dtype, pr.grad_reduce_dtypes,
              "grad_reduce_dtypes", "gradient reductions in")
    f.rule("fp8_needs_fp8_params")
    f.rule("fp8_params_need_zero1")
    if p.fused_elementwise not in pr.fused_elementwise:
        f.bad("fused_elementwise", p.fused_elementwise, pr.fused_elementwise,
              "fused_elementwise", "fused_elementwise")
    f.rule("async_tp_needs_compile")
    # "auto" (per GEMM, the faster) is resolved by the exporters to the one switch when it
    # equals it exactly, else refused with both times; a profile's search never holds it
    if isinstance(p.overlap_tp_comm, bool) and p.overlap_tp_comm not in pr.overlap_tp_comm \
            and p.tp > 1 and p.sequence_parallel:
        f.bad("overlap_tp_comm", p.overlap_tp_comm, pr.overlap_tp_comm, "overlap_tp_comm",
              "one TP overlap switch:")
    if p.cp > 1 and p.cp_comm not in pr.cp_comms:
        f.bad("cp_comm", p.cp_comm, pr.cp_comms, "cp_comms", "context-parallel exchanges")
    if p.attention not in pr.attention:
        f.bad("attention", p.attention, pr.attention, "attention", "attention")
    return f.out


def _schedule_violations(pr: FrameworkProfile, p: Plan, model: ModelSpec) -> list[Violation]:
    """Overlaps, pipeline layout, recomputation and experts."""
    f = _Found(pr, p, model)
    for field, on in (("overlap_dp_grad_reduce", dp_reduces(p)),
                      ("overlap_param_gather", gathers_params(p)),
                      ("overlap_p2p_comm", p.virtual_stages > 1)):
        if on and getattr(p, field) not in getattr(pr, field):
            f.bad(field, getattr(p, field), getattr(pr, field), field, f"{field}")
    if p.overlap_moe_ep_comm and True not in pr.overlap_moe_ep_comm:
        f.bad("overlap_moe_ep_comm", True, pr.overlap_moe_ep_comm, "overlap_moe_ep_comm",
              "overlap_moe_ep_comm")
    for key in ("param_gather_needs_grad_overlap", "interleaved_no_p2p_overlap_needs_pp_gt2",
                "zero0_reduces_after_backward", "one_dp_overlap_switch", "seq_divisible_by_2cp"):
        f.rule(key)
    if p.virtual_stages > 1 and not pr.interleaving:
        f.add("virtual_stages", p.virtual_stages, " has no interleaved pipeline", "interleaving")
    if model.num_layers % (p.pp * p.virtual_stages) and not pr.uneven_pipeline:
        f.add("uneven_pipeline", True, " splits the layers evenly only", "uneven_pipeline")
    rc = tuple(p.recompute_for(t) for t in model.layer_types)
    if pr.uniform_recompute and len(set(rc)) > 1:
        f.add("recompute", p.recompute, " applies one recomputation to every layer; fix one "
              "value for all layer types (e.g. --fix recompute=full)", "uniform_recompute")
    for v in dict.fromkeys(rc):
        if v not in pr.recompute:
            f.bad("recompute", v, pr.recompute, "recompute", "recomputation")
    f.rule("block_recompute_half")
    if model.moe is not None and pr.expert_tp == "one_or_tp" and p.etp not in (1, p.tp):
        f.add("expert_tp", p.expert_tp, " supports expert TP 1 or tp", "expert_tp")
    if model.moe is not None and p.ep > 1 and pr.expert_groups == "borrowed":
        inner = p.cp * (p.tp if p.etp == 1 and p.tp > 1 else 1)  # what EP must hold whole
        if p.ep % inner or (p.dp * inner) % p.ep:
            f.add("ep", p.ep, f" draws EP from all of {'cp x tp' if inner > p.cp else 'cp'} "
                  f"({inner}) and part of dp: ep must be a multiple of {inner} dividing "
                  f"{p.dp * inner}", "expert_groups")
    return f.out


#: Plan fields that are settings of a run, not decisions of the search: a profile's first
#: listed value is the framework's default for them.
SETTINGS: dict[str, str] = {"dtype": "dtypes", "grad_reduce_dtype": "grad_reduce_dtypes",
                            "attention": "attention", "fused_elementwise": "fused_elementwise",
                            "overlap_tp_comm": "overlap_tp_comm"}
#: Decisions a ``--fix`` may pin to a value the framework never runs, whatever the rest.
FIXABLE: dict[str, str] = {"zero_stage": "zero_stages", "cp_comm": "cp_comms"}


def setting_problems(profile: FrameworkProfile, fields: dict[str, Any]) -> list[Violation]:
    """Settings and pinned decisions in ``fields`` that the framework never runs."""
    out = []
    for field, key in {**SETTINGS, **FIXABLE}.items():
        if field in fields and fields[field] is not None \
                and fields[field] not in getattr(profile, key):
            out.append(Violation(field, fields[field], f"framework {profile.name} runs "
                                 f"{_values(getattr(profile, key))} only" + _cite(profile, key)))
    rc = fields.get("recompute")
    values = list(rc.values()) if isinstance(rc, dict) else [rc] if rc is not None else []
    for v in values:
        if v not in profile.recompute:
            out.append(Violation("recompute", v, f"framework {profile.name} runs "
                                 f"{_values(profile.recompute)} only"
                                 + _cite(profile, "recompute")))
    for dim in ("tp", "pp", "cp", "ep"):
        cap = profile.max_degrees.get(dim)  # type: ignore[call-overload]
        v = fields.get(dim)
        if cap is not None and isinstance(v, int) and v > cap:
            out.append(Violation(dim, v, f"framework {profile.name} has no {dim} degree above "
                                 f"{cap}" + _cite(profile, "max_degrees")))
    return out


def framework_defaults(profile: FrameworkProfile, base: dict[str, Any],
                       given: set[str]) -> dict[str, Any]:
    """``base`` with each setting the caller did not give (``given``) at the framework's
    default: its first listed value (the precision: the model's, where the framework runs
    it), the gradient reduction the framework runs for that precision
    (``grad_reduce_default``)."""
    out = dict(base)
    for field, key in SETTINGS.items():
        allowed = getattr(profile, key)
        current = out.get(field, Plan.model_fields[field].default)
        if field in given or (field == "dtype" and current in allowed):
            continue
        out[field] = (profile.grad_reduce_for(out.get("dtype") or "bf16")
                      if field == "grad_reduce_dtype" else allowed[0])
    return out


def unstated_defaults(profile: FrameworkProfile, data: dict[str, Any]) -> dict[str, Any]:
    """A plan's fields (``data``, dp derived) with what it leaves unstated at what
    ``profile``'s framework runs by default: the settings (:func:`framework_defaults`) and,
    with dp x cp > 1, its default ZeRO stage. ``planner evaluate --framework`` costs this."""
    out = framework_defaults(profile, data, {k for k, v in data.items() if v is not None})
    dp, cp = out.get("dp", 1), out.get("cp", 1)
    if ("zero_stage" not in data and profile.zero_stage_default is not None
            and isinstance(dp, int) and isinstance(cp, int) and dp * cp > 1):
        out["zero_stage"] = profile.zero_stage_default
    return out
