"""One point of a sweep: a solve or a procure on the scaled hardware, as one table row.

``run_point`` is a pure function of the point's settings (a plain dict, so that process
pools and Ray ship it as is); the row holds the plan, the estimate, the totals when tokens
are given, and which term limits the optimum (``bottleneck``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from planner.costmodel.train.evaluator import OFFLOAD_KEY, Estimate, evaluate
from planner.errors import InfeasibleError, InputError
from planner.specs.cluster import ClusterSpec
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan
from planner.sweep.scaling import scaled_cluster
from planner.sweep.spec import Point, PointSpec, check_point
from planner.api import procure, solve
from planner.procurement import catalog_templates, named_templates
from planner.procurement.train import _owned_templates
from planner.specs.loaders import load_cluster, load_gpu, load_model
from planner.specs.site import load_inventory

#: how the evaluator's time breakdown groups into MAD-Max's limiting resources (Hsia et
#: al., ISCA 2024, Fig. 20: compute, memory, network; plus the pipeline bubble and the wait
#: for the slowest GPU, so that the terms add up to the iteration time)
COMPUTE_KEYS = ("forward", "backward", "recompute", "optimizer")
NETWORK_KEYS = ("tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm")
TERMS = ("compute", "memory", "network", "bubble", "straggler")
#: HBM this many times faster leaves only the FLOP-bound share of the kernel time
_FAST_HBM = 1e6
PLAN_COLUMNS = ("tp", "pp", "dp", "cp", "ep", "microbatch_size", "virtual_stages",
                "zero_stage", "recompute", "sequence_parallel", "offload_optimizer")


def _compute_s(est: Estimate) -> float:
    return sum(est.time_breakdown_s.get(k, 0.0) for k in COMPUTE_KEYS)


def bottleneck_terms(model: ModelSpec, cluster: ClusterSpec, plan: Plan,
                     est: Estimate) -> dict[str, float]:
    """Seconds per iteration of each limiting term. ``memory`` is the kernel time HBM
    bandwidth adds (the same plan re-evaluated with HBM 1e6 x faster: what is left is the
    FLOP-bound time) plus offload-tier transfers; ``compute`` the rest of the kernels;
    ``straggler`` the synchronous step's wait for its slowest GPU."""
    gpu = cluster.gpu.model_copy(update={"hbm_TBps": cluster.gpu.hbm_TBps * _FAST_HBM})
    fast = evaluate(model, cluster.model_copy(update={"gpu": gpu}), plan)
    kernels = _compute_s(est)
    hbm = min(max(kernels - _compute_s(fast), 0.0), kernels)
    b = est.time_breakdown_s
    return {"compute": kernels - hbm, "memory": hbm + b.get(OFFLOAD_KEY, 0.0),
            "network": sum(b.get(k, 0.0) for k in NETWORK_KEYS), "bubble": b.get("bubble", 0.0),
            "straggler": b.get("straggler", 0.0)}


def estimate_columns(model: ModelSpec, cluster: ClusterSpec, plan: Plan,
                     est: Estimate) -> dict[str, Any]:
    """The plan's knobs, its estimate and its limiting terms as row columns."""
    terms = bottleneck_terms(model, cluster, plan, est)
    row: dict[str, Any] = {k: getattr(plan, k) for k in PLAN_COLUMNS}
    row.update(num_gpus=plan.world_size, iteration_time_s=est.iteration_time_s, mfu=est.mfu,
               memory_per_gpu_gib=(est.memory_per_gpu_bytes or 0.0) / 2**30,
               tokens_per_s=est.tokens_per_s)
    row.update({f"t_{k}_s": v for k, v in terms.items()})
    row["bottleneck"] = max(TERMS, key=lambda k: terms[k])
    return row


def _solve_row(p: PointSpec) -> dict[str, Any]:
    model = load_model(p.model)
    cluster = scaled_cluster(load_cluster(p.cluster, p.gpus), p)  # type: ignore[arg-type]
    res = solve(model, cluster, fix=p.fix, global_batch_size=p.global_batch_size,
                seq_len=p.seq_len, dtype=p.dtype, objective=p.objective or "time",
                tokens=p.tokens, time_limit_s=p.time_limit_s, max_microbatch=p.max_microbatch,
                max_virtual_stages=p.max_virtual_stages, even_pipeline=p.even_pipeline,
                max_iteration_time_s=_max_iteration_s(model, p), framework=p.framework)
    best = res.best
    row = {"status": res.status, "gpu_name": cluster.gpu.name, "cluster_name": cluster.name}
    row.update(estimate_columns(model, cluster, best.plan, best.estimate))
    totals = res.totals()
    row.update(train_days=totals.get("days"), gpu_hours=totals.get("gpu_hours"),
               cost_usd=totals.get("cost_usd"), energy_mwh=totals.get("energy_mwh"))
    return row


def _max_iteration_s(model: ModelSpec, p: PointSpec) -> float | None:
    """A deadline in days as a limit on the iteration time."""
    if p.days is None or p.tokens is None:
        return None
    batch = p.global_batch_size or model.global_batch_size
    if not batch:
        raise InputError(f"days {p.days}: a deadline needs global_batch_size (the model "
                         f"{model.name} has no default)")
    iterations = p.tokens / (batch * (p.seq_len or model.seq_len))
    return p.days * 86400.0 / iterations


def _procure_row(p: PointSpec) -> dict[str, Any]:
    model = load_model(p.model)
    names = p.gpu_types.split(",") if p.gpu_types else None
    templates = named_templates(p.clusters.split(","), names) if p.clusters else \
        catalog_templates(names)
    scaled = [scaled_cluster(t, p) for t in templates]
    res = procure(model, p.tokens, days=p.days,  # type: ignore[arg-type]
                  budget_usd=p.budget_usd, objective=p.objective, clusters=scaled,
                  max_gpus=p.max_gpus, pricing=p.pricing, global_batch_size=p.global_batch_size,
                  seq_len=p.seq_len, dtype=p.dtype, time_limit_s=p.time_limit_s, workers=1,
                  framework=p.framework, max_power_mw=p.max_power_mw, owned=_owned(p))
    c = res.choice
    assert c is not None  # procure raises InfeasibleError otherwise
    tpl = next((t for t in scaled if t.name == c.cluster), None)
    if tpl is None:  # an owned cluster the query's templates do not hold
        tpl = next(t for t, _ in _fleet(p, scaled) if t.name == c.cluster)
    cluster = tpl.resized(c.num_gpus) if c.num_gpus != tpl.num_gpus else tpl
    row = {"status": "optimal" if c.proven_optimal else "time_limit", "gpu_name": c.gpu,
           "cluster_name": c.cluster}
    row.update(estimate_columns(model, cluster, c.plan, c.estimate))
    row.update(train_days=c.days, gpu_hours=c.gpu_hours, cost_usd=c.cost_usd,
               energy_mwh=c.energy_mwh, facility_power_mw=c.facility_power_mw,
               choice_owned=c.owned)
    return row


def _owned(p: PointSpec) -> Any:
    """The point's owned fleet: its mapping, or the inventory file it names."""
    return load_inventory(p.owned) if isinstance(p.owned, str) else p.owned


def _fleet(p: PointSpec, templates: list[ClusterSpec]) -> list[tuple[ClusterSpec, int]]:
    return _owned_templates(_owned(p), templates)


def run_point(settings: dict[str, Any]) -> dict[str, Any]:
    """The row of one point (``settings``: a :class:`PointSpec` as a dict). A point with
    no plan is a row with the reason and ``status`` infeasible, or time_limit when the
    time limit ran out before any plan was found (it may still be feasible); bad input
    raises."""
    p = PointSpec.model_validate(settings)
    check_point(p, "point")
    try:
        row = _solve_row(p) if p.command == "solve" else _procure_row(p)
    except InfeasibleError as err:
        return {"point_key": p.key(), "status": err.status,
                "reason": str(err).split("\n")[0]}
    row["point_key"] = p.key()
    row["reason"] = None
    return row


def check_points(points: Sequence[Point]) -> None:
    """Every point's input, before any is run: its fields, its model and cluster names, its
    GPU count and scalings (loads each model and cluster once)."""
    models: set[str] = set()
    clusters: dict[tuple[str, int | None], ClusterSpec] = {}
    for pt in points:
        p, where = pt.spec, f"point {pt.axes}"
        check_point(p, where)
        try:
            for name in p.gpu_price:  # an unknown GPU name is an error naming the closest
                load_gpu(name)
            if p.model not in models:
                load_model(p.model)
                models.add(p.model)
            if p.command == "procure":
                if isinstance(p.owned, str):  # the inventory file reads
                    _owned(p)
                continue
            key = (p.cluster, p.gpus)
            if key not in clusters:
                clusters[key] = load_cluster(p.cluster, p.gpus)  # type: ignore[arg-type]
            scaled_cluster(clusters[key], p)
        except InputError as err:
            raise InputError(f"{where}: {err}") from None
