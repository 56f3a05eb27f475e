"""``planner.procure``: which cluster to buy or rent, and how to train on it.

An outer decomposition over *options* (cluster template x GPU count), each answered by
the proven-optimal inner solve of :func:`planner.orchestration.solver.solve`, with a
branch and bound over the options. docs/procure.md states the query semantics and argues
that the answer is optimal over (template, count, plan); tests/test_procure.py checks it
against exhaustive search.

Every quantity over the token budget is *linear* in one iteration's time ``T`` and GPU
busy time ``B`` for a fixed option: ``q = time x T + busy x B`` (:class:`Linear`). Days,
GPU-hours and rented cost have ``busy = 0``; energy and owned cost (electricity) do not.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from formulations.space import SpaceOptions
from planner import catalog
from planner.costmodel.energy import (
    energy_coefficients,
    network_capex_usd_per_gpu,
    price_per_gpu_hour,
)
from planner.costmodel.evaluator import Estimate
from planner.costmodel.layer import head_model_flops_per_token, layer_model_flops_per_token
from planner.errors import InfeasibleError, InputError
from planner.orchestration.solver import SolvedPlan, solve
from planner.specs.plan_base import model_defaults, require_batch
from planner.specs.cluster import ClusterSpec
from planner.specs.gpu import GPUSpec
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan
from planner.specs.pricing import HOURS_PER_YEAR, J_PER_KWH, PricingSpec

#: What ``objective`` minimizes, as the record field it names.
OBJECTIVE_METRIC = {"cost": "cost_usd", "energy": "energy_mwh", "gpu_hours": "gpu_hours",
                    "time": "days"}
METRICS = ("days", "cost_usd", "energy_mwh", "gpu_hours")
#: Catalog cluster whose network, node and host figures a GPU without its own cluster
#: borrows, by GPU; others borrow ``DERIVE_FROM``. The A100 40GB ships in the DGX A100
#: (DGX A100 user guide: PCIe Gen4 host, HDR InfiniBand), not in a DGX H100.
DERIVE_FROM = "dgx-h100-superpod"
DERIVE_FROM_BY_GPU = {"a100-sxm-40gb": "dgx-a100-superpod"}
#: Largest cluster considered unless --max-gpus says otherwise: twice the 16,384 H100 of
#: Llama 3 405B's pre-training (Dubey et al. 2024, Sec. 3.3.1).
DEFAULT_MAX_GPUS = 32768
#: Top-K depths tried when the objective's best plan breaks a limit (docs/procure.md).
TOP_K_STEPS = (8, 64)
SECONDS_PER_DAY = 86400.0
J_PER_MWH = 3.6e9


# ---- options: a cluster template at one GPU count ----------------------------------------
@dataclass(frozen=True)
class Linear:
    """``time x T + busy x B``: a total over the token budget from one iteration's time
    ``T`` and mean GPU busy time ``B`` (both in seconds)."""

    time: float
    busy: float = 0.0

    def __call__(self, t_s: float, busy_s: float) -> float:
        return self.time * t_s + self.busy * busy_s


#: The ranking by iteration time alone.
TIME = Linear(1.0)


@dataclass(frozen=True, eq=False)
class Option:
    template: str
    cluster: ClusterSpec  # resized to the option's count
    metrics: dict[str, Linear]
    t_lb_s: float  # lower bound of both T and B: the GEMMs at the GPU's best GEMM rate

    @property
    def gpu(self) -> str:
        return self.cluster.gpu.name

    @property
    def num_gpus(self) -> int:
        return self.cluster.num_gpus

    def bound(self, metric: str) -> float:
        """No plan of this option has ``metric`` below this."""
        return self.metrics[metric](self.t_lb_s, self.t_lb_s)

    def label(self) -> str:
        return f"{self.num_gpus:,}x {self.gpu} ({self.template})"


def derived_template(base: ClusterSpec, gpu: GPUSpec) -> ClusterSpec:
    """``base``'s network, nodes and PUE with ``gpu``; the innermost (NVLink) level runs at
    the GPU's own NVLink bandwidth. The base's all-in price belongs to its GPU: dropped."""
    levels = list(base.topology)
    if gpu.nvlink_GBps > 0:
        levels[0] = levels[0].model_copy(update={"bandwidth_GBps": gpu.nvlink_GBps})
    return base.model_copy(update={
        "name": f"{base.name}:{gpu.name}", "gpu": gpu, "topology": levels,
        "price_per_gpu_hour": None, "aliases": [],
        "source": f"{base.name} with {gpu.name} GPUs (NVLink {gpu.nvlink_GBps:g} GB/s)"})


def catalog_templates(gpus: Sequence[str] | None = None) -> list[ClusterSpec]:
    """Every catalog cluster, plus a :func:`derived_template` for each catalog GPU that no
    catalog cluster has; only those with the ``gpus`` named (catalog names or aliases)."""
    from planner.specs.loaders import load_cluster, load_gpu

    templates = [load_cluster(name) for name in catalog.names("clusters")]
    have = {c.gpu.name for c in templates}
    for name in catalog.names("gpus"):
        gpu = load_gpu(name)
        if gpu.name not in have:
            base = load_cluster(DERIVE_FROM_BY_GPU.get(gpu.name, DERIVE_FROM))
            templates.append(derived_template(base, gpu))
    if gpus:
        wanted = {load_gpu(g.strip()).name for g in gpus if g.strip()}
        templates = [t for t in templates if t.gpu.name in wanted]
    return templates


def candidate_counts(cluster: ClusterSpec, max_gpus: int) -> list[int]:
    """GPU counts to consider: the powers of two up to ``max_gpus`` below the NVLink domain,
    then the domain times powers of two; counts the template cannot be resized to are left
    out. (Other counts: ``counts=`` / ``--counts``.)"""
    domain = cluster.domain_size
    counts = [2 ** i for i in range(domain.bit_length()) if 2 ** i < domain]
    counts += [domain * 2 ** i for i in range(max_gpus.bit_length()) if domain * 2 ** i <= max_gpus]
    out = []
    for n in sorted(c for c in set(counts) if c <= max_gpus):
        try:
            cluster.resized(n)
        except ValueError:
            continue
        out.append(n)
    return out


def gemm_time_lower_bound_s(model: ModelSpec, gpu: GPUSpec, num_gpus: int, sequences: int,
                            seq_len: int, dtype: str) -> float:
    """Per-GPU time of one iteration's GEMMs if every one ran at the GPU's best GEMM rate
    (``peak x gemm_peak_fraction``, bf16 or the plan's dtype): a lower bound on both the
    iteration time and the GPU busy time of every plan, since the GEMM FLOPs (forward and
    backward, the sequence-independent part of the model FLOPs) are split over the GPUs and
    no GEMM runs faster (planner/costmodel/compute.py ``gemm_time_s``)."""
    per_token = sum(n * layer_model_flops_per_token(model, t, 0)
                    for t, n in model.layer_counts().items()) + head_model_flops_per_token(model)
    flops = 3.0 * per_token * seq_len * sequences
    rate = max(gpu.peak_flops(d) * gpu.gemm_peak_fraction(d) for d in {dtype, "bf16"})
    return flops / (num_gpus * rate)


def option_metrics(cluster: ClusterSpec, iterations: float, pricing: PricingSpec,
                   template: str | None = None) -> dict[str, Linear]:
    """Days, dollars, MWh and GPU-hours of ``iterations`` iterations on ``cluster``
    (docs/procure.md, "Pricing" and "Energy"); ``template`` names the cluster's entry in
    ``pricing.clusters`` (default: the cluster's name)."""
    n = cluster.num_gpus
    a_j, b_j = energy_coefficients(cluster, n)  # J per second of T and of B, PUE included
    override = pricing.for_gpu(cluster.gpu.name)
    mine = pricing.for_cluster(template or cluster.name)
    gpu = cluster.gpu.name
    if pricing.mode == "rent":
        price = mine.price_per_gpu_hour
        if price is None:
            price = override.price_per_gpu_hour
        if price is None:
            price = price_per_gpu_hour(cluster)
        if price is None:
            raise InputError(f"GPU '{gpu}' (cluster '{cluster.name}') has no price_per_gpu_hour; "
                             f"set gpus.{gpu}.price_per_gpu_hour in a --prices file")
        cost = Linear(iterations * n * price / 3600.0)
    else:
        capex = override.capex_usd if override.capex_usd is not None else cluster.gpu.capex_usd
        if capex is None:
            raise InputError(f"GPU '{gpu}' has no capex_usd for --pricing own; set "
                             f"gpus.{gpu}.capex_usd in a --prices file")
        capex += network_capex(cluster, mine.cost_usd_per_Gbps)
        capital_per_s = n * capex / (pricing.depreciation_years * HOURS_PER_YEAR * 3600.0)
        usd_per_j = pricing.electricity_usd_per_kwh / J_PER_KWH
        cost = Linear(iterations * (capital_per_s + usd_per_j * a_j), iterations * usd_per_j * b_j)
    return {
        "days": Linear(iterations / SECONDS_PER_DAY),
        "cost_usd": cost,
        "energy_mwh": Linear(iterations * a_j / J_PER_MWH, iterations * b_j / J_PER_MWH),
        "gpu_hours": Linear(iterations * n / 3600.0),
    }


def network_capex(cluster: ClusterSpec, usd_per_Gbps: float | None = None) -> float:
    """Network capital per GPU where the cluster prices its network (``cost_usd_per_Gbps``
    x capacity per GPU of each level); ``usd_per_Gbps`` replaces the price of every level
    that has one (a ``clusters.<name>.cost_usd_per_Gbps`` pricing override)."""
    if usd_per_Gbps is None:
        return network_capex_usd_per_gpu(cluster)
    return sum(usd_per_Gbps * lv.capacity_Gbps for lv in cluster.topology
               if lv.cost_usd_per_Gbps > 0)


def named_templates(refs: Sequence[ClusterSpec | str],
                    gpus: Sequence[str] | None = None) -> list[ClusterSpec]:
    """The cluster templates ``refs`` name: catalog cluster names or aliases, cluster files,
    the derived templates of :func:`catalog_templates` (``dgx-h100-superpod:h200``), or
    specs. A string may list several, comma-separated (``ramp-a100,my-fat-tree.yaml``).
    Only those with the ``gpus`` named, when given. Unknown names are errors naming the
    closest catalog names."""
    import difflib
    from pathlib import Path

    from planner.specs.loaders import load_cluster, load_gpu

    derived: dict[str, ClusterSpec] | None = None
    out: list[ClusterSpec] = []
    for ref in refs:
        if isinstance(ref, ClusterSpec):
            out.append(ref)
            continue
        parts = [ref] if Path(ref).is_file() else [p.strip() for p in ref.split(",")]
        for part in (p for p in parts if p):
            if ":" in part and not Path(part).exists():
                if derived is None:
                    derived = {t.name: t for t in catalog_templates() if ":" in t.name}
                if part.lower() not in derived:
                    near = difflib.get_close_matches(part.lower(), list(derived), n=3,
                                                     cutoff=0.4)
                    raise InputError(f"unknown cluster template '{part}'"
                                     + (f"; closest: {', '.join(near)}" if near else "")
                                     + ". Derived templates are <catalog cluster>:<GPU> for "
                                     "a catalog GPU no catalog cluster has")
                out.append(derived[part.lower()])
            else:
                out.append(load_cluster(part))
    if gpus:
        wanted = {load_gpu(g.strip()).name for g in gpus if g.strip()}
        out = [t for t in out if t.gpu.name in wanted]
    return out


def price_keys(pricing: PricingSpec, templates: Sequence[ClusterSpec]) -> PricingSpec:
    """``pricing`` with its ``clusters`` keys (template names or aliases) mapped to the
    templates' names; a key that names no template of the query, nor a catalog cluster, is
    an error naming the closest ones."""
    import difflib

    if not pricing.clusters:
        return pricing
    names: dict[str, str] = {}
    by_name = {t.name: t for t in templates}
    for t in templates:
        for alias in (t.name, *t.aliases):
            names.setdefault(alias.lower(), t.name)
    out = {}
    for key, entry in pricing.clusters.items():
        name = names.get(key.lower())
        if name is None and catalog.find("clusters", key) is not None:
            continue  # a catalog cluster this query leaves out (--gpus, --cluster)
        if name is None:
            near = difflib.get_close_matches(key.lower(), list(names), n=3, cutoff=0.4)
            raise InputError(f"pricing: clusters.{key}: no cluster template of this query has "
                             "that name" + (f"; closest: {', '.join(near)}" if near else "")
                             + f" (templates: {', '.join(t.name for t in templates)})")
        if name in out:
            raise InputError(f"pricing: clusters.{key}: '{name}' is priced twice")
        if entry.cost_usd_per_Gbps is not None and not any(
                lv.cost_usd_per_Gbps > 0 for lv in by_name[name].topology):
            raise InputError(f"pricing: clusters.{key}.cost_usd_per_Gbps: cluster '{name}' "
                             "prices no network level; set cost_usd_per_Gbps on the level(s) "
                             "it buys in its cluster file (docs/formats.md)")
        out[name] = entry
    return pricing.model_copy(update={"clusters": out})


# ---- results ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Procured:
    """One option with one plan, and what training on it takes."""

    gpu: str
    num_gpus: int
    cluster: str
    plan: Plan
    estimate: Estimate
    days: float
    cost_usd: float
    energy_mwh: float
    gpu_hours: float
    meets_limits: bool
    proven_optimal: bool

    @property
    def mfu(self) -> float | None:
        return self.estimate.mfu

    def value(self, metric: str) -> float:
        return float(getattr(self, metric))

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu, "num_gpus": self.num_gpus, "cluster": self.cluster,
            "plan": self.plan.to_dict(), "days": self.days, "cost_usd": self.cost_usd,
            "energy_mwh": self.energy_mwh, "gpu_hours": self.gpu_hours, "mfu": self.mfu,
            "iteration_time_s": self.estimate.iteration_time_s,
            "usd_per_gpu_hour": self.cost_usd / self.gpu_hours if self.gpu_hours else None,
            "meets_limits": self.meets_limits, "proven_optimal": self.proven_optimal,
        }


@dataclass
class ProcureResult:
    query: dict[str, Any]
    choice: Procured | None
    records: list[Procured]  # per option solved: the plan minimizing the objective
    pareto: list[Procured]  # time against cost, over ``records``
    pareto_energy: list[Procured]  # time against energy
    pareto_computed: bool
    stats: dict[str, Any] = field(default_factory=dict)

    def in_view(self) -> list[Procured]:
        """The records within the fronts' horizon: ``pareto_horizon`` times each limit."""
        h = self.query.get("pareto_horizon", 1.0)
        horizon = {m: h * v for m, v in (("days", self.query.get("days")),
                                          ("cost_usd", self.query.get("budget_usd")))
                   if v is not None}
        return [r for r in self.records if meets({m: r.value(m) for m in horizon}, horizon)]

    def to_json(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "choice": self.choice.to_json() if self.choice else None,
            "pareto": [r.to_json() for r in self.pareto],
            "pareto_energy": [r.to_json() for r in self.pareto_energy],
            "stats": {**self.stats, "pareto_computed": self.pareto_computed},
        }


def pareto_front(records: Sequence[Procured], y: str, x: str = "days") -> list[Procured]:
    """Records no other record beats on both ``x`` and ``y`` (ties kept once), by ``x``."""
    front: list[Procured] = []
    for r in sorted(records, key=lambda r: (r.value(x), r.value(y))):
        if not front or r.value(y) < front[-1].value(y):
            front.append(r)
    return front


# ---- the inner problem: one option ------------------------------------------------------
@dataclass
class Answer:
    """What one option offers under the limits."""

    best: Procured | None  # the best plan meeting the limits
    top: Procured | None  # the best plan by the objective; None when no plan fits
    reason: str  # why ``best`` is None
    minima: dict[str, float]  # the least value of each limit, computed when ``top`` breaks one
    solver_calls: int


@dataclass(frozen=True)
class Inner:
    """The inner problem's fixed inputs: the model, base plan fields, search space options."""

    model: ModelSpec
    base: dict[str, Any]
    options: SpaceOptions
    time_limit_s: float


def ranking(cluster: ClusterSpec, rank: Linear) -> tuple[str, ClusterSpec]:
    """The solver objective, and the cluster to solve it on, that order plans as ``rank``.

    Time-only ranks are the time objective. A rank with busy weight is the energy objective
    ``a x T + b x B`` (planner/costmodel/energy.py), on a copy of the cluster with ``x`` W
    more static power per GPU when ``rank`` weighs time more than energy does (owned cost:
    capital accrues with the wall clock); that power enters energy only, no time.
    """
    if rank.busy <= 0:
        return "time", cluster
    n = cluster.num_gpus
    a_j, b_j = energy_coefficients(cluster, n)
    extra_j = rank.time * b_j / rank.busy - a_j  # J per second of T to add
    if extra_j <= 1e-12 * max(a_j, 1.0):
        return "energy", cluster
    levels = list(cluster.topology)
    levels[0] = levels[0].model_copy(update={
        "power_w_per_gpu": levels[0].power_w_per_gpu + extra_j / (cluster.pue * n)})
    return "energy", cluster.model_copy(update={"topology": levels})


def answer_option(inner: Inner, opt: Option, metric: str, limits: dict[str, float],
                  top_only: bool = False) -> Answer:
    """The best plan of ``opt`` by ``metric`` among those meeting ``limits`` (with
    ``top_only``, only the best plan by ``metric``, flagged for the limits).

    The objective's best plan answers when it meets the limits. Otherwise the limits that
    depend on the iteration time alone (days; a rented budget) become one limit on the
    iteration time, a constraint of the formulation, and the solver answers under it. A
    limit that also depends on busy time (an owned budget pays for electricity) is met by
    scanning the objective's top-K plans in exact order: the first that meets it is the
    optimum (if none of the top ``TOP_K_STEPS[-1]`` does, the best plan meeting every limit
    among the limits' own optima is returned, not proven optimal).
    """
    cache: dict[tuple, tuple[int, list[SolvedPlan], bool]] = {}
    calls = [0]

    def plans(rank: Linear, k: int = 1, max_t: float | None = None
              ) -> tuple[list[SolvedPlan], bool]:
        objective, cluster = ranking(opt.cluster, rank)
        key = (objective, cluster.topology[0].power_w_per_gpu, max_t)
        hit = cache.get(key)
        if hit is None or (hit[0] < k and len(hit[1]) >= hit[0]):
            calls[0] += 1
            res = solve(inner.model, cluster, base=inner.base, objective=objective, top_k=k,
                        time_limit_s=inner.time_limit_s, options=inner.options,
                        max_iteration_time_s=max_t)
            hit = cache[key] = (k, res.plans, res.status == "optimal")
        return hit[1][:k], hit[2]

    def record(sp: SolvedPlan, proven: bool) -> Procured:
        est = sp.estimate
        assert est.iteration_time_s is not None and est.gpu_busy_s is not None
        vals = {m: opt.metrics[m](est.iteration_time_s, est.gpu_busy_s) for m in METRICS}
        return Procured(opt.gpu, opt.num_gpus, opt.template, sp.plan, est, vals["days"],
                        vals["cost_usd"], vals["energy_mwh"], vals["gpu_hours"],
                        meets(vals, limits), proven)

    def first(rank: Linear, max_t: float | None = None) -> Procured:
        ranked, proven = plans(rank, 1, max_t)
        return record(ranked[0], proven)

    def none(top: Procured, why: str) -> Answer:
        minima = {m: first(opt.metrics[m]).value(m) for m in limits}
        broken = [f"needs {_fmt(m, v)} > {_fmt(m, limits[m])}" for m, v in minima.items()
                  if v > limits[m]]
        return Answer(None, top, f"{opt.label()}: {'; '.join(broken) or why}", minima, calls[0])

    rank = opt.metrics[metric]
    try:
        top = first(rank)
    except InfeasibleError as e:
        why = f"{opt.label()}: {e}" + (f": {e.reasons[0]}" if e.reasons else "")
        return Answer(None, None, why, {}, calls[0])
    if top.meets_limits or top_only:
        return Answer(top if top.meets_limits else None, top, "", {}, calls[0])
    timed = {m: v for m, v in limits.items() if opt.metrics[m].busy == 0}
    max_t = min((v / opt.metrics[m].time for m, v in timed.items()), default=None)
    if rank.busy == 0 and len(timed) == len(limits):
        return none(top, "")  # the objective's best plan is the fastest: nothing is faster
    best = top
    if max_t is not None:
        if first(TIME).estimate.iteration_time_s > max_t:
            return none(top, "")  # not even the fastest plan is fast enough
        try:
            best = first(rank, max_t)
        except InfeasibleError:
            return none(top, "")
    if best.meets_limits:
        return Answer(best, top, "", {}, calls[0])
    for k in TOP_K_STEPS:  # a limit with busy time: scan the objective's order
        ranked, proven = plans(rank, k, max_t)
        for sp in ranked:
            rec = record(sp, proven)
            if rec.meets_limits:
                return Answer(rec, top, "", {}, calls[0])
        if len(ranked) < k:
            return none(top, "no plan meets every limit at once")
    found = [r for r in (first(opt.metrics[m], max_t) for m in limits) if r.meets_limits]
    if found:
        best = min(found, key=lambda r: r.value(metric))
        return Answer(dataclasses.replace(best, proven_optimal=False), top, "", {}, calls[0])
    return none(top, f"no plan among the {TOP_K_STEPS[-1]} best meets every limit")


def meets(values: dict[str, float], limits: dict[str, float]) -> bool:
    return all(values[m] <= lim for m, lim in limits.items())


def _fmt(metric: str, v: float) -> str:
    return {"days": f"{v:,.1f} days", "cost_usd": f"${v:,.0f}", "energy_mwh": f"{v:,.0f} MWh",
            "gpu_hours": f"{v:,.0f} GPU-hours"}[metric]


# ---- the outer problem -------------------------------------------------------------------
def procure(model: ModelSpec, tokens: float, *, days: float | None = None,
            budget_usd: float | None = None, objective: str | None = None,
            templates: Sequence[ClusterSpec] | None = None, max_gpus: int = DEFAULT_MAX_GPUS,
            counts: Sequence[int] | None = None, pricing: PricingSpec | None = None,
            pareto: bool = False, pareto_horizon: float = 2.0,
            base: dict[str, Any] | None = None, options: SpaceOptions | None = None,
            time_limit_s: float = 60.0, workers: int | None = None,
            progress: Callable[[str], None] | None = None) -> ProcureResult:
    """The option (template, GPU count) and plan that minimize ``objective`` over training
    on ``tokens`` tokens, within ``days`` and ``budget_usd`` when given.

    ``objective``: cost (default), energy, gpu_hours, or time (default with a budget).
    ``workers``: inner solves at once, in worker processes (default: the CPUs). With
    ``pareto``, every option within ``pareto_horizon`` times the limits is solved for
    the fronts of days against cost and against energy. Raises :class:`InfeasibleError`
    (``.result`` holds the partial :class:`ProcureResult`) when nothing meets the limits.
    """
    from planner.specs.pricing import load_pricing

    t0 = time.perf_counter()
    say = progress or (lambda _m: None)
    objective = objective or ("time" if budget_usd is not None else "cost")
    if objective not in OBJECTIVE_METRIC:
        raise InputError(f"--objective '{objective}': expected one of "
                         f"{', '.join(OBJECTIVE_METRIC)}")
    for name, v in (("--tokens", tokens), ("--days", days), ("--budget", budget_usd),
                    ("--max-gpus", max_gpus), ("pareto_horizon", pareto_horizon)):
        if v is not None and not (isinstance(v, (int, float)) and v > 0 and math.isfinite(v)):
            raise InputError(f"{name} {v!r}: expected a positive number")
    if pareto_horizon < 1:
        raise InputError(f"pareto_horizon {pareto_horizon}: expected at least 1")
    pricing = pricing or load_pricing()
    templates = list(templates) if templates is not None else catalog_templates()
    if not templates:
        raise InputError("no cluster template to choose from (check --gpus and --cluster)")
    names = [t.name for t in templates]
    if len(set(names)) != len(names):
        raise InputError(f"cluster templates need distinct names, got {names}")
    pricing = price_keys(pricing, templates)
    plan_base = model_defaults(model)
    plan_base.update(base or {})
    require_batch(model, plan_base)
    sequences, seq_len = int(plan_base["global_batch_size"]), int(plan_base["seq_len"])
    iterations = tokens / (sequences * seq_len)
    metric = OBJECTIVE_METRIC[objective]
    limits = {m: v for m, v in (("days", days), ("cost_usd", budget_usd)) if v is not None}

    opts: list[Option] = []
    for tpl in templates:
        for n in (sorted(set(counts)) if counts else candidate_counts(tpl, max_gpus)):
            try:
                cl = tpl.resized(n) if n != tpl.num_gpus else tpl
            except ValueError as e:
                raise InputError(f"--counts {n} for cluster '{tpl.name}': {e}") from None
            t_lb = gemm_time_lower_bound_s(model, cl.gpu, n, sequences, seq_len,
                                           plan_base.get("dtype", "bf16"))
            opts.append(Option(tpl.name, cl, option_metrics(cl, iterations, pricing, tpl.name),
                               t_lb))
    if not opts:
        raise InputError(f"no GPU count to consider: --max-gpus {max_gpus} is below the "
                         "smallest count of every template")
    inner = Inner(model, plan_base, options or SpaceOptions(), time_limit_s)
    stats: dict[str, Any] = {"options": len(opts), "pruned_by_limits": 0,
                             "pruned_by_incumbent": 0, "pruned_by_dominance": 0, "solved": 0,
                             "solver_calls": 0}
    answers: dict[Option, Answer] = {}
    records: dict[Option, Procured] = {}  # per option solved: its best plan by the objective
    choice: tuple[float, int, Procured] | None = None  # (value, rank in the order, record)

    def take(o: Option, i: int, ans: Answer, chooses: bool = True) -> None:
        nonlocal choice
        answers[o] = ans
        stats["solved"] += 1
        stats["solver_calls"] += ans.solver_calls
        if ans.top is not None:
            records[o] = ans.top
        if chooses and ans.best is not None and (choice is None
                                                 or (ans.best.value(metric), i) < choice[:2]):
            choice = (ans.best.value(metric), i, ans.best)

    # 1. Options whose bounds already break a limit cannot answer.
    live = [o for o in opts if meets({m: o.bound(m) for m in limits}, limits)]
    stats["pruned_by_limits"] = len(opts) - len(live)
    live.sort(key=lambda o: (o.bound(metric), o.bound("days")))

    # 2. Branch and bound: options in order of the objective's lower bound, until the next
    # bound is no better than the incumbent.
    def gate(o: Option, i: int) -> str:
        if choice is not None and o.bound(metric) >= choice[0]:
            stats["pruned_by_incumbent"] = len(live) - i
            return "stop"
        say(f"option {i + 1} of {len(live)}: {o.label()}"
            + (f"; best so far {_fmt(metric, choice[0])}" if choice else ""))
        return "run"

    with _pool(workers, len(live) + (len(opts) if pareto else 0)) as pool:
        _schedule(pool, live, gate, take, inner, metric, limits)
        # 3. The fronts: every option within the horizon that no record dominates.
        horizon = {m: pareto_horizon * v for m, v in limits.items()}
        if pareto:
            rest = [o for o in opts if o not in answers
                    and meets({m: o.bound(m) for m in horizon}, horizon)]
            rest.sort(key=lambda o: (o.bound(metric), o.bound("days")))

            def gate_front(o: Option, i: int) -> str:
                if _dominated(o, list(records.values())):
                    stats["pruned_by_dominance"] += 1
                    return "skip"
                say(f"Pareto fronts: option {i + 1} of {len(rest)}: {o.label()}")
                return "run"

            # Options outside the branch and bound's reach cannot beat the choice: their
            # bounds break a limit, or are no better than the incumbent.
            _schedule(pool, rest, gate_front, lambda o, i, a: take(o, i, a, chooses=False),
                      inner, metric, limits, top_only=True)
    stats["wall_s"] = time.perf_counter() - t0
    query = {"model": model.name, "tokens": tokens, "days": days, "budget_usd": budget_usd,
             "objective": objective, "pricing": pricing.mode, "max_gpus": max_gpus,
             "global_batch_size": sequences, "seq_len": seq_len,
             "pareto_horizon": pareto_horizon, "templates": [t.name for t in templates]}
    result = ProcureResult(query, choice[2] if choice else None,
                           sorted(records.values(), key=lambda r: (r.days, r.cost_usd)),
                           [], [], pareto, stats)
    if pareto:
        result.pareto = pareto_front(result.in_view(), "cost_usd")
        result.pareto_energy = pareto_front(result.in_view(), "energy_mwh")
    if choice is None:
        err = explain(opts, answers, limits, max_gpus, inner)
        stats["wall_s"] = time.perf_counter() - t0
        err.result = result  # type: ignore[attr-defined]
        raise err
    return result


def _pool(workers: int | None, jobs: int) -> Any:
    """Worker processes for the inner solves (``forkserver`` with the planner preloaded, so
    that no solver thread is ever forked), or the calling process when one is enough."""
    n = min(workers if workers is not None else min(_cpus(), 8), max(jobs, 1))
    if n <= 1:
        return _Serial()
    import multiprocessing as mp

    method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
    ctx = mp.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(["planner.orchestration.procure"])
    pool = ProcessPoolExecutor(max_workers=n, mp_context=ctx)
    pool.width = n  # type: ignore[attr-defined]
    return pool


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class _Serial:
    """An executor that runs each job when it is submitted."""

    width = 1

    def __enter__(self) -> "_Serial":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        f: Future = Future()
        f.set_result(fn(*args))
        return f


def _schedule(pool: Any, order: Sequence[Option], gate: Callable[[Option, int], str],
              take: Callable[[Option, int, Answer], None], inner: Inner, metric: str,
              limits: dict[str, float], top_only: bool = False) -> None:
    """Answer the options of ``order``, as many at once as the pool has workers; ``gate``
    decides before each one whether to run it, skip it, or stop. Results are handed to
    ``take`` as they come."""
    width = pool.width
    pending: dict[Future, tuple[Option, int]] = {}
    i = 0
    while True:
        while i < len(order) and len(pending) < width:
            verdict = gate(order[i], i)
            if verdict == "stop":
                i = len(order)
                break
            if verdict == "run":
                job = pool.submit(answer_option, inner, order[i], metric, limits, top_only)
                pending[job] = (order[i], i)
            i += 1
        if not pending:
            return
        finished, _ = wait(pending, return_when=FIRST_COMPLETED)
        for f in sorted(finished, key=lambda f: pending[f][1]):
            o, j = pending.pop(f)
            take(o, j, f.result())


def _dominated(o: Option, records: Sequence[Procured]) -> bool:
    """True when some record is at least as good as ``o``'s bounds on days, cost and
    energy, so that ``o`` cannot appear on either front."""
    d, c, e = o.bound("days"), o.bound("cost_usd"), o.bound("energy_mwh")
    return (any(r.days <= d and r.cost_usd <= c for r in records)
            and any(r.days <= d and r.energy_mwh <= e for r in records))


#: Options ruled out by their bounds that an explanation may solve, to report exact values.
EXPLAIN_SOLVES = 8


def explain(opts: Sequence[Option], answers: dict[Option, Answer], limits: dict[str, float],
            max_gpus: int, inner: Inner) -> InfeasibleError:
    """Why no option meets the limits: for each limit, the least value any option reaches,
    and what to relax. Without an incumbent, branch and bound prunes nothing, so every
    option the bounds let through has been solved, with the least value of each limit; the
    options ruled out by a bound below the best exact value are solved here (up to
    ``EXPLAIN_SOLVES`` of them), so that the figure is exact where it can be."""
    names = {"days": "--days", "cost_usd": "--budget"}
    asked = " and ".join(f"{names[m]} {_fmt(m, v)}" for m, v in limits.items())
    reasons: list[str] = []
    hints: list[str] = []
    for m, limit in limits.items():
        known = {o: a.minima[m] for o, a in answers.items() if m in a.minima}
        rest = sorted((o for o in opts if o not in answers), key=lambda o: o.bound(m))
        for o in rest[:EXPLAIN_SOLVES]:
            if known and o.bound(m) >= min(known.values()):
                break
            top = answer_option(inner, o, m, {}, top_only=True).top
            if top is not None:
                known[o] = top.value(m)
        unsolved = [o for o in rest if o not in known]
        best = min(known.items(), key=lambda kv: kv[1], default=None)
        floor = min(unsolved, key=lambda o: o.bound(m), default=None)
        if floor is not None and (best is None or floor.bound(m) < best[1]):
            o, v, exact = floor, floor.bound(m), False
        elif best is not None:
            (o, v), exact = best, True
        else:
            continue
        if v <= limit:
            continue
        word = {"days": "fastest", "cost_usd": "cheapest"}[m]
        reasons.append(f"the {word} option, {o.label()}, needs "
                       f"{'' if exact else 'at least '}{_fmt(m, v)} > {_fmt(m, limit)}"
                       + ("" if exact else " (a bound: every GEMM at the GPU's best rate)"))
        hints.append(f"{names[m]} {math.ceil(v) if m == 'days' else _round_up(v)} or more")
        if m == "days" and 2 * o.num_gpus > max_gpus:
            hints.append(f"a larger cluster: --max-gpus {4 * max_gpus}")
    if not reasons:
        nofit = [a.reason for a in answers.values() if a.top is None]
        if nofit and all(a.top is None for a in answers.values()):
            reasons.append(nofit[-1])
            hints.append("more GPUs (--max-gpus), or GPUs with more memory (--gpus)")
        else:
            reasons.append(f"each limit is met by some option, but no option meets {asked} "
                           "at once")
            hints.append("relax one of the limits")
    return InfeasibleError(f"no option in the catalog meets {asked or 'the request'}",
                           reasons, hints)


def _round_up(usd: float) -> str:
    """Dollars rounded up to three significant digits, e.g. 53,800,000."""
    step = 10 ** max(math.floor(math.log10(usd)) - 2, 0) if usd > 0 else 1
    return f"{math.ceil(usd / step) * step:,.0f}"
