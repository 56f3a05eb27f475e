"""``planner procure --serve``: the cheapest fleet that serves a rate within the SLOs,
across the catalog's GPU types, rented or owned.

Each GPU type's cluster template gets its hourly price per GPU from the pricing (rent: the
price list; own: capital over the depreciation period, network capital included, plus the
electricity of a GPU at full load with its share of the node and network and PUE, the
terms ``planner procure`` uses for training, docs/procure.md); then the serving search
(planner/orchestration/serve.py) minimizes $/h, once per GPU type alone and once with
every type allowed (mixed SKUs across the prefill and decode pools).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.costmodel.energy import energy_coefficients, network_capex_usd_per_gpu
from planner.costmodel.energy import price_per_gpu_hour as catalog_price
from planner.errors import InfeasibleError, InputError
from planner.orchestration.serve import ServeResult, plan_serve
from planner.specs.cluster import ClusterSpec
from planner.specs.model import ModelSpec
from planner.specs.pricing import PricingSpec
from planner.specs.serve import ServeEngine, ServeWorkload

HOURS_PER_YEAR = 8760.0


def hourly_price(cluster: ClusterSpec, pricing: PricingSpec) -> float | None:
    """USD per GPU-hour of ``cluster`` under ``pricing`` (None: no price known)."""
    gpu = cluster.gpu
    if pricing.mode == "rent":
        return (pricing.for_cluster(cluster.name).price_per_gpu_hour
                or pricing.for_gpu(gpu.name).price_per_gpu_hour or catalog_price(cluster))
    capex = pricing.for_gpu(gpu.name).capex_usd or gpu.capex_usd
    if capex is None:
        return None
    a, b = energy_coefficients(cluster, cluster.node_size)
    watts = (a + b) / cluster.node_size  # one GPU at full load with its share, PUE included
    return ((capex + network_capex_usd_per_gpu(cluster))
            / (pricing.depreciation_years * HOURS_PER_YEAR)
            + watts / 1000.0 * pricing.electricity_usd_per_kwh)


@dataclass
class ServeProcurement:
    mode: str  # rent or own
    per_gpu: list[tuple[str, ServeResult | None, str]] = field(default_factory=list)
    best: ServeResult | None = None

    def to_json(self) -> dict:
        def one(res: ServeResult | None) -> dict | None:
            if res is None:
                return None
            return {"plan": res.plan.to_dict(), "estimate": res.estimate.to_json(),
                    "solver": res.solver}
        return {"pricing": self.mode, "best": one(self.best),
                "options": [{"gpu": g, "why_not": why or None, **(one(r) or {})}
                            for g, r, why in self.per_gpu]}


def procure_serve(model: ModelSpec, templates: list[ClusterSpec], w: ServeWorkload,
                  pricing: PricingSpec, engine: ServeEngine) -> ServeProcurement:
    """The cheapest fleet per GPU type and overall (module docstring), costed with
    ``engine`` (the request's, resolved by planner.api)."""
    if w.rate_rps is None:
        raise InputError("procure --serve needs --rate (the requests/s to serve)")
    priced = []
    for c in templates:
        price = hourly_price(c, pricing)
        if price is not None:
            priced.append(c.model_copy(update={"price_per_gpu_hour": price}))
    if not priced:
        raise InputError("procure --serve: no GPU type has a price under this pricing")
    out = ServeProcurement(pricing.mode)
    for c in priced:
        try:
            out.per_gpu.append((c.gpu.name, plan_serve(model, [c], w, objective="cost",
                                                     engine=engine), ""))
        except InfeasibleError as e:
            out.per_gpu.append((c.gpu.name, None, str(e)))
    if all(r is None for _, r, _ in out.per_gpu):
        raise InfeasibleError(f"no GPU type serves {w.rate_rps:g} requests/s within the SLOs",
                              reasons=[f"{g}: {why}" for g, _, why in out.per_gpu],
                              hints=["loosen --ttft-ms/--tpot-ms"])
    out.best = plan_serve(model, priced, w, objective="cost", engine=engine)
    return out
