"""The Python API: load specs by name or path, evaluate plans, solve for the best one."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from itertools import repeat
from os import PathLike
from typing import TYPE_CHECKING, Any, TypeVar

from formulations.serve.space import ServeSpace
from formulations.serve.space import weight_dtypes as parse_weight_dtypes
from formulations.train.space import SpaceOptions
import planner.catalog as catalog
from planner.costmodel.frameworks import frameworks_running
from planner.costmodel.runtime import apply_profile
from planner.costmodel.train.evaluator import Estimate
from planner.costmodel.train.evaluator import evaluate as _evaluate
from planner.costmodel.train.goodput import training_goodput
from planner.errors import InputError
from planner.orchestration import SolveResult
from planner.orchestration import solve as _solve
from planner.orchestration.dlrm import DLRMSolveResult, solve_dlrm
from planner.orchestration.serve import ServeResult, plan_serve
from planner.procurement import (
    DEFAULT_MAX_GPUS,
    ProcureResult,
    catalog_templates,
    named_templates,
)
from planner.procurement import procure as _procure
from planner.procurement.dlrm import DLRM_MAX_GPUS, DLRMProcureResult, procure_dlrm
from planner.procurement.serve import ServeProcurement, procure_serve
from planner.procurement.trainserve import TrainServeResult, procure_train_serve
from planner.specs.cluster import ClusterSpec
from planner.specs.dlrm import DLRMSpec
from planner.specs.framework import FrameworkProfile
from planner.specs.loaders import (
    apply_overrides,
    load_cluster,
    load_gpu,
    load_model,
    load_plan_dict,
    parse_override,
    plan_field,
    plan_from_dict,
    read_structured,
    reference,
)
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan
from planner.specs.plan_base import base_overrides, model_defaults, require_batch
from planner.specs.pricing import load_pricing
from planner.specs.requests import (
    SEARCH_BOUNDS,
    TRANSFORMER_ONLY,
    ProcureRequest,
    Request,
    ServeRequest,
    SolveRequest,
    engine_profile,
    framework_profile,
)
from planner.specs.serve import ServeEngine
from planner.specs.site import load_inventory
from planner.specs.validate import _short
from planner.validation.band import with_band
from planner.costmodel.serve.evaluate import evaluate_serve as _evaluate_serve
from planner.costmodel.train.batch import evaluate_many as _many
from planner.costmodel.train.mixed import evaluate_mixed as _evaluate_mixed
from planner.export import export_plan as _export, plan_from_megatron as _from_megatron
from planner.export.readback import (
    plan_from_deepspeed as _from_deepspeed,
    plan_from_torchtitan as _from_torchtitan,
    serve_plan_from_vllm as _from_vllm,
)
from planner.export.launch import launch_files as _launch, serve_manifests as _manifests
from planner.orchestration.mixed import solve_mixed as _solve_mixed
from planner.orchestration.serve import transformer, workload
from planner.specs.mixed import MixedClusterSpec, MixedPlan, load_mixed_cluster as _load
from planner.specs.serve import ServePlan
from planner.specs.validate import validate

if TYPE_CHECKING:
    from planner.costmodel.serve.evaluate import ServeEstimate
    from planner.costmodel.train.batch import Estimates

__all__ = ["evaluate", "evaluate_many", "export_plan", "load_cluster", "load_gpu", "load_model", "load_plan", "plan_from_megatron", "plan_from_torchtitan", "plan_from_deepspeed", "serve_plan_from_vllm", "launch_files", "serve_manifests", "procure", "serve", "evaluate_serve", "solve"]


def load_plan(path: str, **overrides: Any) -> Plan:
    """A plan from a YAML file, with keyword overrides of its fields."""
    from pathlib import Path

    path = reference(path, "plan")
    data = read_structured(Path(path))
    data.update(overrides)
    return plan_from_dict(data, path)


def _resolve(model: ModelSpec | str, cluster: ClusterSpec | str) -> tuple[ModelSpec, ClusterSpec]:
    m = model if isinstance(model, (ModelSpec, DLRMSpec)) else load_model(model)
    _transformer(m)
    c = cluster if isinstance(cluster, ClusterSpec) else load_cluster(cluster)
    return m, c


def _transformer(m: Any) -> None:
    """Evaluate and procure take transformer models; a DLRM goes through solve."""
    if isinstance(m, DLRMSpec):
        raise InputError(f"model {m.name!r} is a DLRM (kind: dlrm): `planner solve` / "
                         "planner.solve plan it; evaluate and procure take transformer models")


def _solve_dlrm(m: DLRMSpec, c: ClusterSpec, req: SolveRequest) -> DLRMSolveResult:
    """:func:`planner.orchestration.dlrm.solve_dlrm`; the transformer plan options, when
    given (not at their defaults), are refused."""
    given = [k for k in TRANSFORMER_ONLY if getattr(req, k) not in (
        None, [], {}, (), SolveRequest.model_fields[k].default)]
    if given:
        raise InputError(f"{', '.join(given)}: options of the transformer search; a DLRM "
                         f"model ({m.name}) is planned by its embedding-table sharding only, "
                         "for iteration time, one plan")
    return solve_dlrm(m, c, backend=req.backend, time_limit_s=req.time_limit_s,
                      global_batch_size=req.global_batch_size)


def _plan(plan: Any, where: str) -> Plan:
    """``plan`` (a Plan or a mapping of plan fields) as a Plan."""
    if isinstance(plan, Plan):
        return plan
    if not isinstance(plan, Mapping):
        raise InputError(f"{where} {_short(plan)}: expected a Plan or a mapping of plan fields")
    return plan_from_dict(dict(plan), where)


def _flag(name: str, value: Any) -> None:
    """A yes/no keyword: True, False or None (never a string such as "no", which is true)."""
    if value is not None and not isinstance(value, bool):
        raise InputError(f"{name} {_short(value)}: expected True or False")


def _callable(name: str, value: Any) -> None:
    if value is not None and not callable(value):
        raise InputError(f"{name} {_short(value)}: expected a function taking a line of text")


def evaluate(model: ModelSpec | str, cluster: ClusterSpec | str, plan: Plan | dict[str, Any],
             allow_idle_gpus: bool = False,
             framework: str | FrameworkProfile | None = None) -> Estimate:
    """Cost of one plan. ``model`` and ``cluster`` may be catalog names or file paths.
    ``framework`` (as in :func:`solve`) costs it with that framework's kernels (its rules:
    ``planner evaluate --framework`` reports the ones the plan breaks)."""
    m, c = _resolve(model, cluster)
    _flag("allow_idle_gpus", allow_idle_gpus)
    profile = framework_profile(framework)
    c, name = apply_profile(c, profile), profile.name if profile is not None else None
    p = _plan(plan, "plan")
    return with_band(_evaluate(m, c, p, allow_idle_gpus=allow_idle_gpus), m, c, p, name)


def evaluate_many(model: ModelSpec | str, cluster: ClusterSpec | str,
                  plans: Iterable[Plan | dict[str, Any]], allow_idle_gpus: bool = False
                  ) -> Estimates:
    """Cost of many plans at once, through the same terms and composition as
    :func:`evaluate` (equal to it plan by plan, to float rounding). Returns
    :class:`planner.costmodel.train.batch.Estimates`: numpy arrays ``iteration_time_s``,
    ``memory_per_gpu_bytes``, ``feasible``, ``mfu``, ... in the order of ``plans``."""
    m, c = _resolve(model, cluster)
    _flag("allow_idle_gpus", allow_idle_gpus)
    if isinstance(plans, (Mapping, Plan, str)) or not isinstance(plans, Iterable):
        raise InputError(f"plans {_short(plans)}: expected a list of plans (Plan objects or "
                         "mappings of plan fields)")
    ps = list(plans)
    if not all(map(isinstance, ps, repeat(Plan))):  # mappings among them: validate each
        ps = [_plan(p, f"plans[{i}]") for i, p in enumerate(ps)]
    return _many(m, c, ps, allow_idle_gpus)


def solve(request: SolveRequest | ModelSpec | DLRMSpec | str | None = None,
          cluster: ClusterSpec | str | None = None, /, *,
          options: SpaceOptions | None = None,
          progress: Callable[[str], None] | None = None,
          log: Callable[[str], None] | None = None,
          **fields: Any) -> SolveResult | DLRMSolveResult:
    """The best plan(s) for a model on a cluster, proven optimal over the search space.

    Takes a :class:`planner.specs.requests.SolveRequest` (``planner solve``'s options, each
    field described there), or the model, the cluster and the request's fields as
    keywords: ``solve("llama3-8b", "dgx-h100-superpod", gpus=16, fix={"tp": 2})``.

    ``model`` and ``cluster`` may be catalog names or file paths; ``gpus`` resizes the
    cluster's outermost level. ``plan`` (a partial plan YAML path or mapping) and ``fix``
    pin plan fields: ``fix`` is a mapping (``{"tp": 8, "recompute": "full"}``, dotted keys
    such as ``"placement.domain.tp"`` too) or a sequence of ``(field, value)`` pairs or
    ``"FIELD=VALUE"`` strings, applied in order over ``plan``; the rest are chosen.
    ``objective`` is a name (``"time"``, ``"tokens"``, ``"gpu_hours"``, ``"energy"``,
    ``"cost"``) or a :class:`planner.costmodel.objective.Objective`. ``max_microbatch``,
    ``max_virtual_stages``, ``allow_idle_gpus`` and ``even_pipeline`` bound the search space
    (left out or ``None``: ``options``' value, by default
    :class:`formulations.train.space.SpaceOptions`'s). ``progress`` and ``log`` are called
    with lines of text (progress, solver log) as the search goes. ``framework`` (a catalog
    name such as ``"torchtitan"``, a profile YAML path or a FrameworkProfile) searches only
    the plans that framework can run. ``goodput`` (with ``tokens``): ``"on"`` divides the
    totals by the effective training-time fraction of failures and synchronous
    checkpoints, ``"async"`` with asynchronous checkpoints, ``"off"`` reports the ideal
    ones only. A DLRM model is planned by its embedding-table sharding
    (:class:`planner.orchestration.dlrm.DLRMSolveResult`).

    Returns a :class:`planner.orchestration.SolveResult` (``.best.plan``, ``.best.estimate``,
    ``.plans``, ``.status``, ``.to_json()``); raises :class:`planner.errors.InfeasibleError`
    (with ``reasons`` and ``hints``) when nothing fits, :class:`planner.errors.InputError` on
    bad input.
    """
    req = _request(SolveRequest, request, fields, cluster=cluster)
    m = _model(req.model)
    c = with_headroom(_resized(req.cluster, req.gpus) if isinstance(req.cluster, ClusterSpec)
                      else load_cluster(req.cluster, req.gpus), req.memory_headroom_gib)
    if isinstance(m, DLRMSpec):  # a recommendation model: embedding-table sharding
        return _solve_dlrm(m, c, req)
    _callable("progress", progress)
    _callable("log", log)
    res = _solve(m, c, fixed=_fixed_fields(req.plan, req.fix),
                 base=base_overrides(req.global_batch_size, req.seq_len, req.dtype),
                 objective=req.objective, backend=req.backend, top_k=req.top_k,
                 time_limit_s=req.time_limit_s, presolve=req.presolve,
                 options=_space_options(options, req), tokens=req.tokens, progress=progress,
                 log=log, max_iteration_time_s=req.max_iteration_time_s)
    runs, closest = frameworks_running(res.best.plan, m, c)
    res = replace(res, frameworks_that_run_it=runs, closest_framework=closest)
    if not req.tokens:
        return res
    best = res.best.plan
    g = training_goodput(m, c, best.world_size, best, req.goodput)
    if g is not None and not g.trains:  # the totals would be infinite
        raise InputError(g.why_not(c))
    return replace(res, goodput=g)


R = TypeVar("R", bound=Request)


def _request(cls: type[R], first: Any, fields: dict[str, Any], **positional: Any) -> R:
    """``first`` if it is a request (and nothing else is given), else the request of the
    model (``first``), the other positional arguments and the keywords."""
    if isinstance(first, cls):
        given = [k for k, v in positional.items() if v is not None] + list(fields)
        if given:
            raise InputError(f"{', '.join(given)}: give a {cls.__name__} or keywords, not "
                             "both")
        return first
    data = {k: v for k, v in {"model": first, **positional}.items() if v is not None}
    both = sorted(data.keys() & fields.keys())
    if both:
        raise InputError(f"{', '.join(both)}: given twice (positionally and as a keyword)")
    return cls.of(**data, **fields)


def _model(model: ModelSpec | DLRMSpec | str) -> ModelSpec | DLRMSpec:
    return model if isinstance(model, (ModelSpec, DLRMSpec)) else load_model(model)


def with_headroom(cluster: ClusterSpec, gib: float | None) -> ClusterSpec:
    """The cluster with ``gib`` GiB per GPU kept free (``--memory-headroom``; below the
    GPU's HBM; None: the cluster's own reserve). Checked here too: ``planner evaluate``
    takes it without a request."""
    if gib is None:
        return cluster
    if not math.isfinite(gib) or gib < 0 or gib >= cluster.gpu.hbm_gib:
        raise InputError(f"memory_headroom_gib (--memory-headroom): expected GiB in [0, "
                         f"{cluster.gpu.hbm_gib:g}) (the GPU's HBM), got {gib!r}")
    return cluster.model_copy(update={"memory_reserve_gib": float(gib)})


def _resized(cluster: ClusterSpec, gpus: int | None) -> ClusterSpec:
    if gpus is None or gpus == cluster.num_gpus:
        return cluster
    try:
        return cluster.resized(gpus)
    except ValueError as err:
        raise InputError(str(err)) from None


def _fixed_fields(plan: str | PathLike[str] | Mapping[str, Any] | None,
                  fix: Mapping[str, Any] | Iterable[str | tuple[str, Any]] | None) -> dict[str, Any]:
    """The fixed plan fields of a solve: ``plan`` (a path or a mapping), then ``fix``
    (shapes checked by the request)."""
    if isinstance(plan, Mapping):
        fixed = dict(plan)
    else:
        fixed = load_plan_dict(plan) if plan is not None else {}  # type: ignore[arg-type]
    items = fix.items() if isinstance(fix, Mapping) else [fix] if isinstance(fix, str) else (fix or [])
    return apply_overrides(fixed, [parse_override(f) if isinstance(f, str)
                                   else (plan_field(f[0]), f[1]) for f in items])


def _space_options(options: SpaceOptions | None, req: SolveRequest | None = None,
                   framework: str | FrameworkProfile | None = None) -> SpaceOptions | None:
    """``options`` with the request's search bounds that were given (not None) and its
    framework (``framework``: procurement's) in place of its own."""
    if options is not None and not isinstance(options, SpaceOptions):
        raise InputError(f"options {_short(options)}: expected a formulations.train.space.SpaceOptions")
    given = {} if req is None else {
        bound: getattr(req, name) for bound, name in SEARCH_BOUNDS.items()
        if name in req.model_fields_set and getattr(req, name) is not None}
    if "allow_uneven" in given:
        given["allow_uneven"] = not given["allow_uneven"]  # the request's even_pipeline
    profile = framework_profile(req.framework if req is not None else framework)
    if profile is not None:
        given["framework"] = profile
    if not given:
        return options
    return replace(options or SpaceOptions(), **given)


def procure(request: ProcureRequest | ModelSpec | DLRMSpec | str | None = None,
            tokens: float | None = None, /, *, options: SpaceOptions | None = None,
            progress: Callable[[str], None] | None = None, **fields: Any
            ) -> ProcureResult | DLRMProcureResult | ServeProcurement | TrainServeResult:
    """The cheapest (``objective``) cluster and plan that train a model on ``tokens``
    tokens within ``days`` (and ``budget_usd``); see docs/procure.md. Takes a
    :class:`planner.specs.requests.ProcureRequest` (its fields described there), or the
    model, ``tokens`` and the request's fields as keywords:
    ``procure("llama3-8b", 15e12, days=30, gpus="h100,b200")``.

    ``objective``: ``"cost"`` (default), ``"energy"``, ``"gpu_hours"``, or ``"time"`` (the
    default when only a budget is given: the fastest cluster within it). ``gpus`` restricts
    the catalog (names or aliases, a list or "h100,b200"); ``clusters`` replaces the catalog
    templates (names, paths or specs); ``max_gpus`` caps the count, ``counts`` lists the
    counts to consider instead of the default grid. ``pricing``: ``"rent"`` or ``"own"``;
    ``prices``: a pricing YAML path or mapping overriding the catalog's
    (docs/formats.md). ``pareto``: also solve for the fronts of days against cost and
    energy. ``framework`` (as in :func:`solve`) keeps only plans that framework can run.
    ``goodput`` (as in :func:`solve`): days, dollars, MWh and GPU-hours, and the ``days``
    limit, are effective ones (failures and checkpoints counted) unless ``"off"``.
    ``workers`` > 1 answers options in parallel processes (the calling script
    needs an ``if __name__ == "__main__":`` guard; None: one per CPU). ``progress`` is called
    with a line of text as the search goes. ``serve=True`` (with ``rate_rps``, ``isl``,
    ``osl`` and the SLOs): the cheapest serving fleet per GPU type and overall
    (:class:`planner.procurement.serve.ServeProcurement`).

    Returns a :class:`planner.procurement.ProcureResult` (``.choice`` with
    ``gpu``, ``num_gpus``, ``cluster``, ``plan``, ``days``, ``cost_usd``, ``energy_mwh``,
    ``gpu_hours``, ``mfu``; ``.pareto``; ``.to_json()``, the object of
    ``planner procure --json``); a DLRM model's is a
    :class:`planner.procurement.dlrm.DLRMProcureResult` (``tokens`` counts samples).
    Raises :class:`planner.errors.InfeasibleError` when no option meets the limits
    (``.reasons``, ``.hints``, ``.result``) and :class:`planner.errors.InputError` on bad
    input.
    """
    req = _request(ProcureRequest, request, fields, tokens=tokens)
    _callable("progress", progress)
    m = _model(req.model)
    prices = req.prices
    spec = load_pricing(prices if isinstance(prices, str) else None, req.pricing,
                        prices if isinstance(prices, dict) else None)
    if req.serve:
        return procure_serve(m, _serve_templates(req.clusters, req.gpus),  # type: ignore[arg-type]
                             req.workload, spec, engine_profile(req.engine))
    templates = named_templates(req.clusters, req.gpus) if req.clusters else \
        catalog_templates(req.gpus)
    assert req.tokens is not None  # the request requires it without serve
    if req.serve_rate_rps is not None:  # train, then serve (procurement/trainserve.py)
        return _train_serve(req, m, templates, spec, options, progress)
    if isinstance(m, DLRMSpec):  # ``tokens`` counts training samples (procurement/dlrm.py)
        return procure_dlrm(m, req.tokens, templates=templates, pricing=spec, days=req.days,
                            budget_usd=req.budget_usd, objective=req.objective,
                            counts=req.counts,
                            max_gpus=min(req.max_gpus or DLRM_MAX_GPUS, DLRM_MAX_GPUS),
                            time_limit_s=min(req.time_limit_s, 10.0), progress=progress)
    return _procure(m, req.tokens, days=req.days, budget_usd=req.budget_usd,
                    objective=req.objective, templates=templates, counts=req.counts,
                    max_gpus=DEFAULT_MAX_GPUS if req.max_gpus is None else req.max_gpus,
                    pricing=spec, pareto=req.pareto,
                    base=_checked_base(m, base_overrides(req.global_batch_size, req.seq_len,
                                                         req.dtype)),
                    options=_space_options(options, framework=req.framework),
                    time_limit_s=req.time_limit_s, workers=req.workers, progress=progress,
                    goodput=req.goodput, max_power_mw=req.max_power_mw,
                    max_racks=req.max_racks, max_ports=req.max_ports,
                    owned=_inventory(req.owned))


def _train_serve(req: ProcureRequest, m: ModelSpec | DLRMSpec, templates: list[ClusterSpec],
                 spec: Any, options: SpaceOptions | None,
                 progress: Callable[[str], None] | None) -> TrainServeResult:
    """``procure`` with ``serve_rate_rps``: the training campaign, then the serving period."""
    if not isinstance(m, ModelSpec):
        raise InputError(f"--serve-rate: model {m.name!r} is a DLRM; training then "
                         "serving is planned for transformer models")
    assert req.tokens is not None and req.serve_days is not None  # the request pairs them
    return procure_train_serve(
        m, req.tokens, serve=req.workload, serve_days=req.serve_days, days=req.days,
        budget_usd=req.budget_usd, templates=templates, pricing=spec,
        engine=engine_profile(req.engine), owned=_inventory(req.owned),
        objective=req.objective, counts=req.counts,
        max_gpus=DEFAULT_MAX_GPUS if req.max_gpus is None else req.max_gpus,
        base=_checked_base(m, base_overrides(req.global_batch_size, req.seq_len, req.dtype)),
        options=_space_options(options, framework=req.framework),
        time_limit_s=req.time_limit_s, workers=req.workers, progress=progress,
        goodput=req.goodput, max_power_mw=req.max_power_mw, max_racks=req.max_racks,
        max_ports=req.max_ports)


def _inventory(owned: Any) -> Any:
    """The owned fleet: an inventory file's, or the mapping or spec given."""
    return load_inventory(owned) if isinstance(owned, str) else owned


def _serve_templates(clusters: list[ClusterSpec | str] | None, gpus: list[str] | None
                     ) -> list[ClusterSpec]:
    """The cluster templates of a serving procurement: those given (names may list several,
    comma-separated), else every catalog cluster; the first of each GPU type, only those
    of the GPU types in ``gpus`` (names or aliases) when given."""
    refs = [n.strip() if isinstance(n, str) else n
            for c in (clusters or []) for n in (c.split(",") if isinstance(c, str) else [c])
            if not isinstance(n, str) or n.strip()] or catalog.names("clusters")
    out = serve_clusters(refs)
    if gpus:
        want = {g.strip().lower() for g in gpus}
        out = [c for c in out if want & {c.gpu.name, *map(str.lower, c.gpu.aliases)}]
        if not out:
            raise InputError(f"--gpus {','.join(gpus)}: no cluster template has these GPU "
                             "types")
    return out


def _checked_base(model: ModelSpec, base: dict[str, Any]) -> dict[str, Any]:
    """The batch, sequence length and dtype given, validated as plan fields (their
    validated values: 16.0 -> 16)."""
    data = {**model_defaults(model), **base}
    require_batch(model, data)
    plan = plan_from_dict(data, "global_batch_size, seq_len and dtype")
    return {k: getattr(plan, k) for k in base}


def export_plan(fmt: str, model: ModelSpec | str, cluster: ClusterSpec | str,
                plan: Plan | dict[str, Any]) -> str:
    """``plan`` as a launch file for ``fmt`` (megatron, megatron-bridge, torchtitan or
    deepspeed; ``planner export``), or an InputError naming what the framework cannot run."""
    if not isinstance(fmt, str):
        raise InputError(f"fmt {_short(fmt)}: expected a format name")
    m, c = _resolve(model, cluster)
    return _export(fmt, _plan(plan, "plan"), m, c)


def plan_from_megatron(args: str, model: ModelSpec | str, cluster: ClusterSpec | str
                       ) -> tuple[Plan, list[str]]:
    """The plan a Megatron-LM argument string runs on ``cluster`` and the arguments ignored
    (``planner evaluate --from megatron``)."""
    if not isinstance(args, str):
        raise InputError(f"args {_short(args)}: expected a Megatron-LM argument string")
    m, c = _resolve(model, cluster)
    return _from_megatron(args, m, c)


# ---- serving (docs/serving.md) ----------------------------------------------------------
def serve(request: ServeRequest | ModelSpec | str | None = None,
          cluster: ClusterSpec | str | list[ClusterSpec | str] | None = None,
          isl: int | None = None, osl: int | None = None, /, **fields: Any) -> ServeResult:
    """The best serving plan (``planner serve``). Takes a
    :class:`planner.specs.requests.ServeRequest` (its fields described there), or the model,
    the cluster(s), ``isl`` and ``osl`` and the request's fields as keywords:
    ``serve("llama3-8b", "dgx-h100-superpod", 1024, 128, rate_rps=10, tpot_ms=40)``.
    ``cluster``: one, or a list for mixed GPU types (the first of each GPU type).
    ``engine``: a catalog engine name, an engine file or a ServeEngine (default trtllm).

    Returns a :class:`planner.orchestration.serve.ServeResult` with ``plan``, ``estimate``
    (:class:`planner.costmodel.serve.evaluate.ServeEstimate`), ``solver`` and ``pareto``;
    raises InfeasibleError when nothing meets the request, InputError on bad input."""
    req = _request(ServeRequest, request, fields, cluster=cluster, isl=isl, osl=osl)
    return plan_serve(_model(req.model), serve_clusters(req.cluster), req.workload,  # type: ignore[arg-type]
                      objective=req.objective, gpus=req.gpus, fix=dict(req.fix),
                      backend=req.backend, pareto=req.pareto, time_limit_s=req.time_limit_s,
                      space=_serve_space(req.weight_dtypes, req.fix),
                      engine=engine_profile(req.engine))


def serve_clusters(refs: list[ClusterSpec | str]) -> list[ClusterSpec]:
    """The clusters of a serving request, loaded: the first given of each GPU type."""
    seen, out = set(), []
    for ref in refs:
        c = ref if isinstance(ref, ClusterSpec) else load_cluster(ref)
        if c.gpu.name not in seen:
            seen.add(c.gpu.name)
            out.append(c)
    return out


def _serve_space(weight_dtypes: str, fix: Mapping[str, Any]) -> ServeSpace:
    """The search space with the ``--weight-dtypes`` allow-list; a ``--fix weight_dtype``
    outside an allow-list the user gave is refused, not silently preferred."""
    allowed = parse_weight_dtypes(weight_dtypes)
    wd = fix.get("weight_dtype")
    if isinstance(wd, str) and wd not in allowed and allowed != ServeSpace().weight_dtype:
        raise InputError(f"--fix weight_dtype={wd}: not in --weight-dtypes {weight_dtypes}")
    return ServeSpace(weight_dtype=allowed)


def evaluate_serve(model: ModelSpec | str, cluster: ClusterSpec | str, plan: Any, isl: int,
                   osl: int, *, rate_rps: float | None = None, ttft_ms: float | None = None,
                   tpot_ms: float | None = None, percentile: float = 0.99,
                   engine: str | ServeEngine | None = None) -> ServeEstimate:
    """One serving plan (a ServePlan or its fields) under a workload: its ServeEstimate.
    ``engine``: as :func:`serve`'s (default trtllm, the engine :func:`serve` plans for)."""
    m, c = _resolve(model, cluster)
    p = plan if isinstance(plan, ServePlan) else validate(ServePlan, plan, "serve plan")
    return _evaluate_serve(transformer(m), c, p,
                           workload(isl, osl, rate_rps, ttft_ms, tpot_ms, percentile),
                           engine_profile(engine))


# ---- launchers and read-back (issue 40; docs/export.md) ------------------------------------
def launch_files(launcher: str, fmt: str, model: ModelSpec | str, cluster: ClusterSpec | str,
                 plan: Plan | dict[str, Any]) -> list[tuple[str, str]]:
    """(file name, text) of a training plan's launch with ``launcher`` (slurm: the export
    file and an sbatch script; kubernetes: a ConfigMap and a PyTorchJob in one YAML stream)."""
    for what, v in (("launcher", launcher), ("fmt", fmt)):
        if not isinstance(v, str):
            raise InputError(f"{what} {_short(v)}: expected a name")
    m, c = _resolve(model, cluster)
    return _launch(launcher, fmt, _plan(plan, "plan"), m, c)


def serve_manifests(engine: str, model_ref: str, plan: Any, node_size: int) -> str:
    """Kubernetes manifests (Deployments or LeaderWorkerSets, one per pool) of a serving
    plan for ``engine`` (vllm, sglang, trtllm); ``node_size``: GPUs per node."""
    p = plan if isinstance(plan, ServePlan) else validate(ServePlan, plan, "serve plan")
    return _manifests(engine, model_ref, p, node_size)


def plan_from_torchtitan(toml_text: str, model: ModelSpec | str, cluster: ClusterSpec | str
                         ) -> tuple[Plan, list[str]]:
    """The plan a torchtitan TOML job config runs and the keys ignored
    (``planner evaluate --from torchtitan``)."""
    if not isinstance(toml_text, str):
        raise InputError(f"toml_text {_short(toml_text)}: expected the TOML text")
    m, c = _resolve(model, cluster)
    return _from_torchtitan(toml_text, m, c)


def plan_from_deepspeed(ds_config_json: str, launch_line: str, model: ModelSpec | str,
                        cluster: ClusterSpec | str) -> tuple[Plan, list[str]]:
    """The plan a ds_config runs under its launch line and the keys and arguments ignored
    (``planner evaluate --from deepspeed``)."""
    for what, v in (("ds_config_json", ds_config_json), ("launch_line", launch_line)):
        if not isinstance(v, str):
            raise InputError(f"{what} {_short(v)}: expected text")
    m, c = _resolve(model, cluster)
    return _from_deepspeed(ds_config_json, launch_line, m, c)


def serve_plan_from_vllm(args: str, model: ModelSpec | str, cluster: ClusterSpec | str
                         ) -> tuple[Any, list[str]]:
    """The serving plan a ``vllm serve`` command runs (one replica) and the arguments
    ignored (for ``planner serve --from vllm``)."""
    if not isinstance(args, str):
        raise InputError(f"args {_short(args)}: expected a vllm serve command")
    m, c = _resolve(model, cluster)
    return _from_vllm(args, m, c)

# ---- mixed fleets (issue 39 item 3) ------------------------------------------------------
def load_mixed_cluster(cluster: Any) -> Any:
    """A mixed cluster: a :class:`planner.specs.mixed.MixedClusterSpec` or the path of a
    cluster file with ``pools`` and ``join`` (examples/mixed-h100-a100.yaml)."""
    return cluster if isinstance(cluster, MixedClusterSpec) else _load(cluster)


def evaluate_mixed(model: ModelSpec | str, cluster: Any, plan: Any) -> Any:
    """Cost of a mixed plan (a :class:`planner.specs.mixed.MixedPlan` or its mapping:
    ``plan`` with the shared settings, ``stages`` with each stage's pool and layers) on a
    mixed cluster; returns a :class:`planner.costmodel.train.mixed.MixedEstimate`."""
    m = model if isinstance(model, ModelSpec) else load_model(model)
    _transformer(m)
    mc = load_mixed_cluster(cluster)
    mp = plan if isinstance(plan, MixedPlan) else validate(MixedPlan, plan, "mixed plan")
    return _evaluate_mixed(m, mc, mp)


def solve_mixed(model: ModelSpec | str, cluster: Any, *,
                fix: Mapping[str, Any] | Iterable[str | tuple[str, Any]] | None = None,
                global_batch_size: int | None = None, seq_len: int | None = None,
                dtype: str | None = None, backend: str = "cpsat", time_limit_s: float = 60.0,
                max_microbatch: int | None = None, options: SpaceOptions | None = None,
                framework: str | FrameworkProfile | None = None,
                progress: Callable[[str], None] | None = None) -> Any:
    """The fastest training plan on a mixed cluster (several GPU pools joined by one
    network level): each pool alone through the single-type solve, and the plans whose
    pipeline stages sit on several pools with per-stage layer counts, both proven over
    their spaces (docs/mixed.md). Returns a
    :class:`planner.orchestration.mixed.MixedSolveResult` (``.status``, ``.best_kind``,
    ``.mixed.plan``, ``.single``, ``.to_json()``)."""
    m = model if isinstance(model, ModelSpec) else load_model(model)
    _transformer(m)
    _callable("progress", progress)
    mc = load_mixed_cluster(cluster)
    opts = _space_options(options, framework=framework)
    if max_microbatch is not None:
        if isinstance(max_microbatch, bool) or not isinstance(max_microbatch, int) \
                or max_microbatch < 1:
            raise InputError(f"max_microbatch {_short(max_microbatch)}: expected a positive "
                             "integer")
        opts = replace(opts or SpaceOptions(), max_microbatch=max_microbatch)
    return _solve_mixed(m, mc, fixed=_fixed_fields(None, fix),
                        base=base_overrides(global_batch_size, seq_len, dtype),
                        backend=backend, time_limit_s=time_limit_s, options=opts,
                        progress=progress)


__all__ += ["evaluate_mixed", "load_mixed_cluster", "solve_mixed"]
