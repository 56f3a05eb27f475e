"""The Python API: load specs by name or path, evaluate plans, solve for the best one."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from os import PathLike
from typing import TYPE_CHECKING, Any

from planner.costmodel.train.evaluator import Estimate
from planner.costmodel.train.evaluator import evaluate as _evaluate
from planner.errors import InputError
from planner.specs.cluster import ClusterSpec
from planner.specs.dlrm import DLRMSpec
from planner.specs.loaders import (
    load_cluster,
    load_gpu,
    load_model,
    plan_from_dict,
    read_structured,
    reference,
)
from planner.specs.validate import _short
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan
from planner.validation.band import with_band

if TYPE_CHECKING:
    from planner.costmodel.train.batch import Estimates
    from formulations.train.space import SpaceOptions
    from planner.costmodel.objective import Objective
    from planner.orchestration import SolveResult
    from planner.specs.framework import FrameworkProfile

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


def _solve_dlrm(m: DLRMSpec, c: ClusterSpec, backend: str, time_limit_s: float,
                global_batch_size: int | None, **transformer_only: Any) -> Any:
    """:func:`planner.orchestration.dlrm.solve_dlrm`; the transformer plan knobs do not apply."""
    from planner.orchestration.dlrm import solve_dlrm

    given = [k for k, v in transformer_only.items() if v not in (None, [], {}, ())]
    if given:
        raise InputError(f"{', '.join(given)}: options of the transformer search; a DLRM "
                         f"model ({m.name}) is planned by its embedding-table sharding only, "
                         "for iteration time, one plan")
    return solve_dlrm(m, c, backend=backend, time_limit_s=time_limit_s,
                      global_batch_size=global_batch_size)


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
    name = None
    if framework is not None:
        from planner.costmodel.frameworks import framework_cluster
        from planner.specs.framework import load_framework

        profile = load_framework(framework)
        c, name = framework_cluster(c, profile), profile.name
    p = _plan(plan, "plan")
    return with_band(_evaluate(m, c, p, allow_idle_gpus=allow_idle_gpus), m, c, p, name)


def evaluate_many(model: ModelSpec | str, cluster: ClusterSpec | str,
                  plans: Iterable[Plan | dict[str, Any]], allow_idle_gpus: bool = False
                  ) -> Estimates:
    """Cost of many plans at once, through the same terms and composition as
    :func:`evaluate` (equal to it plan by plan, to float rounding). Returns
    :class:`planner.costmodel.train.batch.Estimates`: numpy arrays ``iteration_time_s``,
    ``memory_per_gpu_bytes``, ``feasible``, ``mfu``, ... in the order of ``plans``."""
    from planner.costmodel.train.batch import evaluate_many as _many

    m, c = _resolve(model, cluster)
    _flag("allow_idle_gpus", allow_idle_gpus)
    if isinstance(plans, (Mapping, Plan, str)) or not isinstance(plans, Iterable):
        raise InputError(f"plans {_short(plans)}: expected a list of plans (Plan objects or "
                         "mappings of plan fields)")
    ps = [_plan(p, f"plans[{i}]") for i, p in enumerate(plans)]
    return _many(m, c, ps, allow_idle_gpus)


def solve(model: ModelSpec | str, cluster: ClusterSpec | str, *, gpus: int | None = None,
          plan: str | PathLike[str] | Mapping[str, Any] | None = None,
          fix: Mapping[str, Any] | Iterable[str | tuple[str, Any]] | None = None,
          global_batch_size: int | None = None, seq_len: int | None = None,
          dtype: str | None = None, objective: str | Objective = "time",
          backend: str = "cpsat", top_k: int = 1, time_limit_s: float = 60.0,
          tokens: float | None = None, presolve: bool = True,
          max_microbatch: int | None = None, max_virtual_stages: int | None = None,
          allow_idle_gpus: bool | None = None, even_pipeline: bool | None = None,
          options: SpaceOptions | None = None, max_iteration_time_s: float | None = None,
          progress: Callable[[str], None] | None = None,
          log: Callable[[str], None] | None = None,
          framework: str | FrameworkProfile | None = None,
          goodput: str = "on") -> SolveResult:
    """The best plan(s) for ``model`` on ``cluster``, proven optimal over the search space.

    ``model`` and ``cluster`` may be catalog names or file paths; ``gpus`` resizes the
    cluster's outermost level. ``plan`` (a partial plan YAML path or mapping) and ``fix``
    pin plan fields: ``fix`` is a mapping (``{"tp": 8, "recompute": "full"}``, dotted keys
    such as ``"placement.domain.tp"`` too) or a sequence of ``(field, value)`` pairs or
    ``"FIELD=VALUE"`` strings, applied in order over ``plan``; the rest are chosen.
    ``global_batch_size``, ``seq_len`` and ``dtype`` override the model's defaults.
    ``objective`` is a name (``"time"``, ``"tokens"``, ``"gpu_hours"``, ``"energy"``,
    ``"cost"``) or a :class:`planner.costmodel.objective.Objective`. ``max_microbatch``,
    ``max_virtual_stages``, ``allow_idle_gpus`` and ``even_pipeline`` bound the search space
    (``None`` keeps ``options``' value, by default :class:`formulations.train.space.SpaceOptions`'s);
    ``presolve=False`` skips the bound presolve; ``max_iteration_time_s`` keeps only plans
    iterating within it. ``progress`` and ``log`` are called with lines of text (progress,
    solver log) as the search goes. ``framework`` (a catalog name such as ``"torchtitan"``,
    a profile YAML path or a :class:`planner.specs.framework.FrameworkProfile`) searches
    only the plans that framework can run (``None``: every plan the cost model accepts).
    ``goodput`` (with ``tokens``): ``"on"`` divides the totals by the effective training-time
    fraction of failures and synchronous checkpoints (ideal ones kept beside them),
    ``"async"`` with asynchronous checkpoints, ``"off"`` reports the ideal ones only.

    Returns a :class:`planner.orchestration.SolveResult` (``.best.plan``, ``.best.estimate``,
    ``.plans``, ``.status``, ``.to_json()``); raises :class:`planner.errors.InfeasibleError`
    (with ``reasons`` and ``hints``) when nothing fits, :class:`planner.errors.InputError` on
    bad input.
    """
    from planner.orchestration import solve as _solve
    from planner.specs.plan_base import base_overrides

    m = model if isinstance(model, (ModelSpec, DLRMSpec)) else load_model(model)
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1):
        raise InputError(f"gpus {_short(gpus)}: expected a positive integer")
    c = _resized(cluster, gpus) if isinstance(cluster, ClusterSpec) else load_cluster(cluster, gpus)
    if isinstance(m, DLRMSpec):  # a recommendation model: embedding-table sharding
        return _solve_dlrm(m, c, backend, time_limit_s, global_batch_size,
                           plan=plan, fix=fix, seq_len=seq_len, dtype=dtype,
                           top_k=None if top_k == 1 else top_k,
                           objective=None if objective == "time" else objective)
    for name, value in (("allow_idle_gpus", allow_idle_gpus), ("even_pipeline", even_pipeline),
                        ("presolve", presolve)):
        _flag(name, value)
    _callable("progress", progress)
    _callable("log", log)
    opts = _space_options(options, max_microbatch=max_microbatch,
                          max_virtual_stages=max_virtual_stages,
                          allow_idle_gpus=allow_idle_gpus, even_pipeline=even_pipeline,
                          framework=framework)
    _goodput_setting(goodput)
    res = _solve(m, c, fixed=_fixed_fields(plan, fix),
                 base=base_overrides(global_batch_size, seq_len, dtype), objective=objective,
                 backend=backend, top_k=top_k, time_limit_s=time_limit_s, presolve=presolve,
                 options=opts, tokens=tokens, progress=progress, log=log,
                 max_iteration_time_s=max_iteration_time_s)
    if not tokens:
        return res
    from dataclasses import replace

    from planner.costmodel.train.goodput import training_goodput

    best = res.best.plan
    g = training_goodput(m, c, best.world_size, best, goodput)
    if g is not None and not g.trains:  # the totals would be infinite
        raise InputError(g.why_not(c))
    return replace(res, goodput=g)


def _goodput_setting(value: Any) -> None:
    from planner.costmodel.train.goodput import GOODPUT_MODES

    if not isinstance(value, str) or value not in GOODPUT_MODES:
        raise InputError(f"goodput {_short(value)}: expected one of {', '.join(GOODPUT_MODES)}")


def _resized(cluster: ClusterSpec, gpus: int | None) -> ClusterSpec:
    if gpus is None or gpus == cluster.num_gpus:
        return cluster
    try:
        return cluster.resized(gpus)
    except ValueError as err:
        raise InputError(str(err)) from None


def _fixed_fields(plan: str | PathLike[str] | Mapping[str, Any] | None,
                  fix: Mapping[str, Any] | Iterable[str | tuple[str, Any]] | None) -> dict[str, Any]:
    """The fixed plan fields of a solve: ``plan`` (a path or a mapping), then ``fix``."""
    from planner.specs.loaders import apply_overrides, load_plan_dict

    if isinstance(plan, Mapping):
        fixed = dict(plan)
    else:
        fixed = load_plan_dict(plan) if plan is not None else {}  # type: ignore[arg-type]
    if fix is not None and not isinstance(fix, (Mapping, str, Iterable)):
        raise InputError(f"fix {_short(fix)}: expected a mapping of plan fields, FIELD=VALUE "
                         "strings or (field, value) pairs")
    items = fix.items() if isinstance(fix, Mapping) else [fix] if isinstance(fix, str) else (fix or [])
    return apply_overrides(fixed, [_override(f) for f in items])


def _override(item: Any) -> tuple[str, Any]:
    """One ``fix`` item: a ``"FIELD=VALUE"`` string or a (field, value) pair."""
    from planner.specs.loaders import parse_override, plan_field

    if isinstance(item, str):
        return parse_override(item)
    if isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str):
        return plan_field(item[0]), item[1]
    raise InputError(f"fix item {_short(item)}: expected a FIELD=VALUE string or a (field, "
                     "value) pair")


def _space_options(options: SpaceOptions | None, *, max_microbatch: int | None,
                   max_virtual_stages: int | None, allow_idle_gpus: bool | None,
                   even_pipeline: bool | None,
                   framework: str | FrameworkProfile | None = None) -> SpaceOptions | None:
    """``options`` with the given bounds replaced (``None`` leaves a bound as it is)."""
    from planner.specs.framework import load_framework

    changes: dict[str, Any] = {k: v for k, v in (
        ("framework", None if framework is None else load_framework(framework)),
        ("max_microbatch", max_microbatch), ("max_virtual_stages", max_virtual_stages),
        ("allow_idle_gpus", allow_idle_gpus),
        ("allow_uneven", None if even_pipeline is None else not even_pipeline)) if v is not None}
    from formulations.train.space import SpaceOptions as _SpaceOptions

    if options is not None and not isinstance(options, _SpaceOptions):
        raise InputError(f"options {_short(options)}: expected a formulations.train.space.SpaceOptions")
    if not changes:
        return options
    from dataclasses import replace

    return replace(options or _SpaceOptions(), **changes)


def procure(model: ModelSpec | str, tokens: float, *, days: float | None = None,
            budget_usd: float | None = None, objective: str | None = None,
            gpus: list[str] | str | None = None, clusters: list[ClusterSpec | str] | None = None,
            max_gpus: int | None = None, counts: list[int] | None = None,
            pricing: str | None = None, prices: str | dict[str, Any] | None = None,
            pareto: bool = False, global_batch_size: int | None = None,
            seq_len: int | None = None, dtype: str | None = None,
            time_limit_s: float = 60.0, workers: int | None = 1, options: Any = None,
            progress: Any = None, framework: str | FrameworkProfile | None = None,
            goodput: str = "on"):
    """The cheapest (``objective``) cluster and plan that train ``model`` on ``tokens``
    tokens within ``days`` (and ``budget_usd``); see docs/procure.md.

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
    with a line of text as the search goes.

    Returns a :class:`planner.procurement.ProcureResult` (``.choice`` with
    ``gpu``, ``num_gpus``, ``cluster``, ``plan``, ``days``, ``cost_usd``, ``energy_mwh``,
    ``gpu_hours``, ``mfu``; ``.pareto``; ``.to_json()``, the object of
    ``planner procure --json``). Raises :class:`planner.errors.InfeasibleError` when no
    option meets the limits (``.reasons``, ``.hints``, ``.result``) and
    :class:`planner.errors.InputError` on bad input.
    """
    from planner.procurement import DEFAULT_MAX_GPUS, catalog_templates, named_templates
    from planner.procurement import procure as _procure
    from planner.specs.plan_base import base_overrides
    from planner.specs.pricing import load_pricing

    m = model if isinstance(model, (ModelSpec, DLRMSpec)) else load_model(model)
    _check_procure(gpus, clusters, counts, prices, workers, pareto, progress)
    _goodput_setting(goodput)
    names = gpus.split(",") if isinstance(gpus, str) else gpus
    if isinstance(clusters, (str, ClusterSpec)):
        clusters = [clusters]
    templates = named_templates(clusters, names) if clusters else catalog_templates(names)
    spec = load_pricing(prices if isinstance(prices, str) else None, pricing,  # type: ignore[arg-type]
                        prices if isinstance(prices, dict) else None)
    if isinstance(m, DLRMSpec):  # ``tokens`` counts training samples (procurement/dlrm.py)
        from planner.procurement.dlrm import DLRM_MAX_GPUS, procure_dlrm

        return procure_dlrm(m, tokens, templates=templates, pricing=spec, days=days,
                            budget_usd=budget_usd, objective=objective, counts=counts,
                            max_gpus=min(max_gpus or DLRM_MAX_GPUS, DLRM_MAX_GPUS),
                            time_limit_s=min(time_limit_s, 10.0), progress=progress)
    return _procure(m, tokens, days=days, budget_usd=budget_usd, objective=objective,
                    templates=templates, counts=counts,
                    max_gpus=DEFAULT_MAX_GPUS if max_gpus is None else max_gpus,
                    pricing=spec, pareto=pareto,
                    base=_checked_base(m, base_overrides(global_batch_size, seq_len, dtype)),
                    options=_space_options(options, max_microbatch=None,
                                           framework=framework,
                                           max_virtual_stages=None, allow_idle_gpus=None,
                                           even_pipeline=None),
                    time_limit_s=time_limit_s, workers=workers, progress=progress,
                    goodput=goodput)


def _checked_base(model: ModelSpec, base: dict[str, Any]) -> dict[str, Any]:
    """The batch, sequence length and dtype given, validated as plan fields (their
    validated values: 16.0 -> 16)."""
    from planner.specs.plan_base import model_defaults, require_batch

    data = {**model_defaults(model), **base}
    require_batch(model, data)
    plan = plan_from_dict(data, "global_batch_size, seq_len and dtype")
    return {k: getattr(plan, k) for k in base}


def _check_procure(gpus: Any, clusters: Any, counts: Any, prices: Any, workers: Any,
                   pareto: Any, progress: Any) -> None:
    """The types of ``procure``'s keywords (the numbers are checked with the query)."""
    def names(value: Any, what: str, kinds: tuple[type, ...]) -> None:
        if value is None or isinstance(value, kinds):
            return
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, kinds) for v in value):
            raise InputError(f"{what} {_short(value)}: expected a name or a list of names")

    names(gpus, "gpus", (str,))
    names(clusters, "clusters", (str, ClusterSpec))
    if counts is not None and (not isinstance(counts, (list, tuple)) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in counts)):
        raise InputError(f"counts {_short(counts)}: expected a list of positive GPU counts")
    if prices is not None and not isinstance(prices, (str, dict)):
        raise InputError(f"prices {_short(prices)}: expected a pricing YAML path or a mapping")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or workers < 1):
        raise InputError(f"workers {_short(workers)}: expected a positive integer or None")
    _flag("pareto", pareto)
    _callable("progress", progress)


def export_plan(fmt: str, model: ModelSpec | str, cluster: ClusterSpec | str,
                plan: Plan | dict[str, Any]) -> str:
    """``plan`` as a launch file for ``fmt`` (megatron, megatron-bridge, torchtitan or
    deepspeed; ``planner export``), or an InputError naming what the framework cannot run."""
    from planner.export import export_plan as _export

    if not isinstance(fmt, str):
        raise InputError(f"fmt {_short(fmt)}: expected a format name")
    m, c = _resolve(model, cluster)
    return _export(fmt, _plan(plan, "plan"), m, c)


def plan_from_megatron(args: str, model: ModelSpec | str, cluster: ClusterSpec | str
                       ) -> tuple[Plan, list[str]]:
    """The plan a Megatron-LM argument string runs on ``cluster`` and the arguments ignored
    (``planner evaluate --from megatron``)."""
    from planner.export import plan_from_megatron as _parse

    if not isinstance(args, str):
        raise InputError(f"args {_short(args)}: expected a Megatron-LM argument string")
    m, c = _resolve(model, cluster)
    return _parse(args, m, c)


# ---- serving (docs/serving.md) ----------------------------------------------------------
def serve(model: ModelSpec | str, cluster: ClusterSpec | str | list, isl: int, osl: int, *,
          rate_rps: float | None = None, ttft_ms: float | None = None,
          tpot_ms: float | None = None, percentile: float = 0.99, gpus: int | None = None,
          fix: Mapping[str, Any] | None = None, objective: str | None = None,
          backend: str = "cpsat", pareto: bool = False, engine: Any = None) -> Any:
    """The best serving plan (``planner serve``): a ServeResult with ``plan``,
    ``estimate`` (:class:`planner.costmodel.serve.evaluate.ServeEstimate`), ``solver`` and
    ``pareto``. ``cluster``: one, or a list for mixed GPU types. ``engine``: a catalog
    engine name, an engine file or a ServeEngine (default trtllm)."""
    from planner.orchestration.serve import plan_serve, workload
    from planner.specs.serve import load_engine

    m = model if isinstance(model, ModelSpec) else load_model(model)
    cs = cluster if isinstance(cluster, (list, tuple)) else [cluster]
    clusters = [c if isinstance(c, ClusterSpec) else load_cluster(c) for c in cs]
    if fix is not None and not isinstance(fix, Mapping):
        raise InputError(f"fix {_short(fix)}: expected a mapping of serving knobs")
    return plan_serve(m, clusters, workload(isl, osl, rate_rps, ttft_ms, tpot_ms, percentile),
                      objective=objective, gpus=gpus, fix=dict(fix or {}), backend=backend,
                      pareto=pareto, engine=load_engine(engine))


def evaluate_serve(model: ModelSpec | str, cluster: ClusterSpec | str, plan: Any, isl: int,
                   osl: int, *, rate_rps: float | None = None, ttft_ms: float | None = None,
                   tpot_ms: float | None = None, percentile: float = 0.99,
                   engine: Any = None) -> Any:
    """One serving plan (a ServePlan or its fields) under a workload: its ServeEstimate.
    ``engine``: as :func:`serve`'s (default trtllm, the engine :func:`serve` plans for)."""
    from planner.costmodel.serve.evaluate import evaluate_serve as _evaluate_serve
    from planner.orchestration.serve import transformer, workload
    from planner.specs.serve import ServePlan, load_engine
    from planner.specs.validate import validate

    m, c = _resolve(model, cluster)
    p = plan if isinstance(plan, ServePlan) else validate(ServePlan, plan, "serve plan")
    return _evaluate_serve(transformer(m), c, p,
                           workload(isl, osl, rate_rps, ttft_ms, tpot_ms, percentile),
                           load_engine(engine))


# ---- launchers and read-back (issue 40; docs/export.md) ------------------------------------
def launch_files(launcher: str, fmt: str, model: ModelSpec | str, cluster: ClusterSpec | str,
                 plan: Plan | dict[str, Any]) -> list[tuple[str, str]]:
    """(file name, text) of a training plan's launch with ``launcher`` (slurm: the export
    file and an sbatch script; kubernetes: a ConfigMap and a PyTorchJob in one YAML stream)."""
    from planner.export.launch import launch_files as _launch

    for what, v in (("launcher", launcher), ("fmt", fmt)):
        if not isinstance(v, str):
            raise InputError(f"{what} {_short(v)}: expected a name")
    m, c = _resolve(model, cluster)
    return _launch(launcher, fmt, _plan(plan, "plan"), m, c)


def serve_manifests(engine: str, model_ref: str, plan: Any, node_size: int) -> str:
    """Kubernetes manifests (Deployments or LeaderWorkerSets, one per pool) of a serving
    plan for ``engine`` (vllm, sglang, trtllm); ``node_size``: GPUs per node."""
    from planner.export.launch import serve_manifests as _manifests
    from planner.specs.serve import ServePlan
    from planner.specs.validate import validate

    p = plan if isinstance(plan, ServePlan) else validate(ServePlan, plan, "serve plan")
    return _manifests(engine, model_ref, p, node_size)


def plan_from_torchtitan(toml_text: str, model: ModelSpec | str, cluster: ClusterSpec | str
                         ) -> tuple[Plan, list[str]]:
    """The plan a torchtitan TOML job config runs and the keys ignored
    (``planner evaluate --from torchtitan``)."""
    from planner.export.readback import plan_from_torchtitan as _parse

    if not isinstance(toml_text, str):
        raise InputError(f"toml_text {_short(toml_text)}: expected the TOML text")
    m, c = _resolve(model, cluster)
    return _parse(toml_text, m, c)


def plan_from_deepspeed(ds_config_json: str, launch_line: str, model: ModelSpec | str,
                        cluster: ClusterSpec | str) -> tuple[Plan, list[str]]:
    """The plan a ds_config runs under its launch line and the keys and arguments ignored
    (``planner evaluate --from deepspeed``)."""
    from planner.export.readback import plan_from_deepspeed as _parse

    for what, v in (("ds_config_json", ds_config_json), ("launch_line", launch_line)):
        if not isinstance(v, str):
            raise InputError(f"{what} {_short(v)}: expected text")
    m, c = _resolve(model, cluster)
    return _parse(ds_config_json, launch_line, m, c)


def serve_plan_from_vllm(args: str, model: ModelSpec | str, cluster: ClusterSpec | str
                         ) -> tuple[Any, list[str]]:
    """The serving plan a ``vllm serve`` command runs (one replica) and the arguments
    ignored (for ``planner serve --from vllm``)."""
    from planner.export.readback import serve_plan_from_vllm as _parse

    if not isinstance(args, str):
        raise InputError(f"args {_short(args)}: expected a vllm serve command")
    m, c = _resolve(model, cluster)
    return _parse(args, m, c)

# ---- mixed fleets (issue 39 item 3) ------------------------------------------------------
def load_mixed_cluster(cluster: Any) -> Any:
    """A mixed cluster: a :class:`planner.specs.mixed.MixedClusterSpec` or the path of a
    cluster file with ``pools`` and ``join`` (examples/mixed-h100-a100.yaml)."""
    from planner.specs.mixed import MixedClusterSpec, load_mixed_cluster as _load

    return cluster if isinstance(cluster, MixedClusterSpec) else _load(cluster)


def evaluate_mixed(model: ModelSpec | str, cluster: Any, plan: Any) -> Any:
    """Cost of a mixed plan (a :class:`planner.specs.mixed.MixedPlan` or its mapping:
    ``plan`` with the shared settings, ``stages`` with each stage's pool and layers) on a
    mixed cluster; returns a :class:`planner.costmodel.train.mixed.MixedEstimate`."""
    from planner.costmodel.train.mixed import evaluate_mixed as _evaluate_mixed
    from planner.specs.mixed import MixedPlan
    from planner.specs.validate import validate

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
    from planner.orchestration.mixed import solve_mixed as _solve_mixed
    from planner.specs.plan_base import base_overrides

    m = model if isinstance(model, ModelSpec) else load_model(model)
    _transformer(m)
    _callable("progress", progress)
    mc = load_mixed_cluster(cluster)
    opts = _space_options(options, max_microbatch=max_microbatch, max_virtual_stages=None,
                          allow_idle_gpus=None, even_pipeline=None, framework=framework)
    return _solve_mixed(m, mc, fixed=_fixed_fields(None, fix),
                        base=base_overrides(global_batch_size, seq_len, dtype),
                        backend=backend, time_limit_s=time_limit_s, options=opts,
                        progress=progress)


__all__ += ["evaluate_mixed", "load_mixed_cluster", "solve_mixed"]
