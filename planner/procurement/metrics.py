"""What training on an option (a cluster template at one GPU count) costs: days, dollars,
MWh and GPU-hours, each linear in one iteration's time and GPU busy time; the lower bound
every plan of an option obeys; prices."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import planner.catalog as catalog
from planner.costmodel.energy import (
    energy_coefficients,
    network_capex_usd_per_gpu,
    price_per_gpu_hour,
)
from planner.costmodel.train.goodput import Goodput
from planner.costmodel.layer import head_model_flops_per_token, layer_model_flops_per_token
from planner.costmodel.objective import J_PER_MWH, SECONDS_PER_DAY, Objective
from planner.errors import InputError
from planner.specs.cluster import ClusterSpec
from planner.specs.gpu import GPUSpec
from planner.specs.model import ModelSpec
from planner.specs.pricing import HOURS_PER_YEAR, J_PER_KWH, PricingSpec


#: What ``objective`` minimizes, as the record field it names.
OBJECTIVE_METRIC = {"cost": "cost_usd", "energy": "energy_mwh", "gpu_hours": "gpu_hours",
                    "time": "days"}


METRICS = ("days", "cost_usd", "energy_mwh", "gpu_hours")


@dataclass(frozen=True)
class Linear:
    """``time x T + busy x B``: a total over the token budget from one iteration's time
    ``T`` and mean GPU busy time ``B`` (both in seconds)."""

    time: float
    busy: float = 0.0

    def __call__(self, t_s: float, busy_s: float) -> float:
        return self.time * t_s + self.busy * busy_s

    def scaled(self, factor: float) -> "Linear":
        return Linear(self.time * factor, self.busy * factor)

    def objective(self) -> Objective:
        """The inner solve's objective that orders plans as this total does: the time
        objective when only time counts, else this fixed linear ranking itself."""
        if self.busy <= 0:
            return Objective.of("time")
        return Objective.weighted(self.time, self.busy)


#: The ranking by iteration time alone.
TIME = Linear(1.0)


@dataclass(frozen=True, eq=False)
class Option:
    template: str
    cluster: ClusterSpec  # resized to the option's count
    metrics: dict[str, Linear]
    t_lb_s: float  # lower bound of both T and B: the GEMMs at the GPU's best GEMM rate
    goodput: Goodput | None = None  # what divides ``metrics``; None: ideal figures
    owned: bool = False  # GPUs already owned: capital sunk, operating cost only
    site: dict[str, float | None] | None = None  # facility_power_mw, racks (site.py)

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
        return f"{self.num_gpus:,}x {self.gpu} ({self.template}{', owned' if self.owned else ''})"


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


def rent_price(cluster: ClusterSpec, pricing: PricingSpec, template: str | None = None
               ) -> float:
    """On-demand USD per GPU-hour: the pricing's cluster entry, else its GPU entry, else the
    cluster's, else the GPU's catalog price."""
    mine = pricing.for_cluster(template or cluster.name)
    price = mine.price_per_gpu_hour
    if price is None:
        price = pricing.for_gpu(cluster.gpu.name).price_per_gpu_hour
    if price is None:
        price = price_per_gpu_hour(cluster)
    if price is None:
        gpu = cluster.gpu.name
        raise InputError(f"GPU '{gpu}' (cluster '{cluster.name}') has no price_per_gpu_hour; "
                         f"set gpus.{gpu}.price_per_gpu_hour in a --prices file")
    return price


def capital_per_gpu(cluster: ClusterSpec, pricing: PricingSpec, template: str | None = None
                    ) -> float:
    """Purchase price per GPU, USD: the GPU's (pricing entry, else catalog) plus the
    network's where the cluster prices it."""
    override = pricing.for_gpu(cluster.gpu.name)
    capex = override.capex_usd if override.capex_usd is not None else cluster.gpu.capex_usd
    if capex is None:
        gpu = cluster.gpu.name
        raise InputError(f"GPU '{gpu}' has no capex_usd for --pricing own; set "
                         f"gpus.{gpu}.capex_usd in a --prices file")
    return capex + network_capex(cluster, pricing.for_cluster(template or cluster.name)
                                 .cost_usd_per_Gbps)


def option_metrics(cluster: ClusterSpec, iterations: float, pricing: PricingSpec,
                   template: str | None = None, owned: bool = False) -> dict[str, Linear]:
    """Days, dollars, MWh and GPU-hours of ``iterations`` iterations on ``cluster``
    (docs/procure.md, "Pricing" and "Energy"); ``template`` names the cluster's entry in
    ``pricing.clusters`` (default: the cluster's name). ``owned``: GPUs already owned, whose
    capital is sunk: the cost is the electricity and the operating cost per GPU-hour only,
    whatever ``pricing.mode``."""
    n = cluster.num_gpus
    a_j, b_j = energy_coefficients(cluster, n)  # J per second of T and of B, PUE included
    usd_per_j = pricing.electricity_usd_per_kwh / J_PER_KWH
    operating_per_s = n * pricing.operating_usd_per_gpu_hour / 3600.0
    if owned:
        cost = Linear(iterations * (operating_per_s + usd_per_j * a_j),
                      iterations * usd_per_j * b_j)
    elif pricing.mode == "rent":
        cost = Linear(iterations * n * rent_price(cluster, pricing, template) / 3600.0)
    else:
        capex = capital_per_gpu(cluster, pricing, template)
        capital_per_s = n * capex / (pricing.depreciation_years * HOURS_PER_YEAR * 3600.0)
        cost = Linear(iterations * (capital_per_s + operating_per_s + usd_per_j * a_j),
                      iterations * usd_per_j * b_j)
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


def meets(values: dict[str, float], limits: dict[str, float]) -> bool:
    return all(values[m] <= lim for m, lim in limits.items())


def fmt(metric: str, v: float) -> str:
    return {"days": f"{v:,.1f} days", "cost_usd": f"${v:,.0f}", "energy_mwh": f"{v:,.0f} MWh",
            "gpu_hours": f"{v:,.0f} GPU-hours"}[metric]
