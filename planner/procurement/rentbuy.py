"""Rent or buy: the days of use at which buying a cluster beats renting it
(docs/procure.md, "Rent or buy").

Renting D days on a term ``t`` (on-demand, or a reservation: a discount for paying at least
``commitment_days``) costs ``rate_t x max(D, c_t)``, with ``rate_t = n x 24 x price x (1 -
discount_t)`` per day. Buying costs the capital up front (GPUs, plus the network where the
cluster prices it; no resale value) plus the running cost per day of use (the job's mean
facility power x the electricity price, plus any operating cost per GPU-hour):
``capital + running x D``. The break-even duration is the least ``D*`` from which buying is
never dearer than the cheapest rental term: the last point where the two cross.
"""

from __future__ import annotations

from typing import Any, Sequence

from planner.errors import InputError
from planner.procurement.metrics import capital_per_gpu, rent_price
from planner.procurement.results import Procured
from planner.specs.cluster import ClusterSpec
from planner.specs.pricing import PricingSpec

ON_DEMAND = "on-demand"


def rent_usd(d: float, terms: Sequence[tuple[float, float]]) -> float:
    """The cheapest rental of ``d`` days over ``terms`` ``(USD per day, commitment days)``."""
    return min(rate * max(d, commit) for rate, commit in terms)


def break_even_days(capital_usd: float, running_usd_per_day: float,
                    terms: Sequence[tuple[float, float]]) -> float | None:
    """The least D* such that ``capital + running x D <= rent_usd(D, terms)`` for every
    ``D >= D*``; None when renting stays cheaper however long the use (running cost per day
    at least the cheapest rate). Buy minus rent is continuous and piecewise linear, so it
    changes sign only where buying crosses one term's flat part (``D < c``) or its linear
    part; between those points its sign is that of any interior point."""
    if not terms:
        raise ValueError("no rental term")

    def gap(d: float) -> float:
        return capital_usd + running_usd_per_day * d - rent_usd(d, terms)

    points = {0.0}
    for rate, commit in terms:
        points.add(commit)
        if running_usd_per_day > 0:
            flat = (rate * commit - capital_usd) / running_usd_per_day
            if 0 <= flat <= commit:
                points.add(flat)
        if rate > running_usd_per_day:
            cross = capital_usd / (rate - running_usd_per_day)
            if cross >= commit:
                points.add(cross)
    pts = sorted(points)
    if gap(pts[-1] + 1.0) > 0:
        return None  # buying stays dearer past the last crossing
    for lo, hi in zip(reversed(pts[:-1]), reversed(pts[1:])):
        if gap((lo + hi) / 2) > 0:
            return hi
    return 0.0  # no crossing inside: buying is never dearer (continuity)


def rent_or_buy(rec: Procured, cluster: ClusterSpec, pricing: PricingSpec,
                template: str) -> dict[str, Any]:
    """Renting against buying the cluster of ``rec`` (its GPU count, its plan's mean
    power): each term's cost per day, the capital and running cost of buying, the break-even
    duration and which is cheaper for this job; the prices with their sources and date.
    Raises InputError when the GPU has no rental price or no purchase price."""
    n = cluster.num_gpus
    price = rent_price(cluster, pricing, template)
    capex = capital_per_gpu(cluster, pricing, template)
    gpu = cluster.gpu
    mean_mw = rec.energy_mwh / (rec.days * 24.0) if rec.days > 0 else 0.0  # PUE included
    running = (pricing.electricity_usd_per_kwh * mean_mw * 1000.0 * 24.0
               + n * 24.0 * pricing.operating_usd_per_gpu_hour)
    named = {ON_DEMAND: (0.0, 0.0), **{k: (t.discount, t.commitment_days)
                                      for k, t in pricing.rental_terms.items()}}
    per_day = {k: n * 24.0 * price * (1.0 - disc) for k, (disc, _c) in named.items()}
    terms = [(per_day[k], c) for k, (_d, c) in named.items()]
    capital = n * capex
    d_star = break_even_days(capital, running, terms)
    job_rent = {k: per_day[k] * max(rec.days, c) for k, (_d, c) in named.items()}
    best_term = min(job_rent, key=job_rent.__getitem__)
    job_buy = capital + running * rec.days
    life_days = pricing.depreciation_years * 365.0
    overrides = (pricing.for_cluster(template).price_per_gpu_hour is not None
                 or pricing.for_gpu(gpu.name).price_per_gpu_hour is not None)
    return {
        "cluster": template, "gpu": gpu.name, "num_gpus": n,
        "on_demand_usd_per_gpu_hour": price,
        "price_source": "the pricing file" if overrides else (
            "the cluster file" if cluster.price_per_gpu_hour is not None
            else gpu.sources.get("price_per_gpu_hour")),
        "capex_usd_per_gpu": capex,
        "capex_source": ("the pricing file" if pricing.for_gpu(gpu.name).capex_usd is not None
                         else gpu.sources.get("capex_usd")),
        "pricing_date": pricing.date,
        "rent_usd_per_day": per_day,
        "commitment_days": {k: c for k, (_d, c) in named.items()},
        "capital_usd": capital,
        "running_usd_per_day": running,
        "mean_facility_power_mw": mean_mw,
        "break_even_days": d_star,
        "depreciation_days": life_days,
        "job_days": rec.days,
        "job_rent_usd": job_rent[best_term], "job_rent_term": best_term,
        "job_buy_usd": job_buy,
        "cheaper_for_the_job": "buy" if job_buy < job_rent[best_term] else "rent",
        "summary": _summary(n, gpu.name, per_day, capital, running, d_star, life_days,
                            rec.days, job_buy < job_rent[best_term]),
    }


def try_rent_or_buy(rec: Procured, cluster: ClusterSpec, pricing: PricingSpec,
                    template: str) -> dict[str, Any]:
    """:func:`rent_or_buy`, or ``{"unavailable": why}`` when a price is missing."""
    try:
        return rent_or_buy(rec, cluster, pricing, template)
    except InputError as e:
        return {"unavailable": str(e)}


def _summary(n: int, gpu: str, per_day: dict[str, float], capital: float, running: float,
             d_star: float | None, life_days: float, job_days: float, buy: bool) -> str:
    head = (f"renting {n:,}x {gpu} costs ${per_day[ON_DEMAND]:,.0f}/day on demand; buying "
            f"costs ${capital:,.0f} plus ${running:,.0f}/day to run")
    if d_star is None:
        when = "buying never beats renting"
    else:
        when = f"buying beats renting after {d_star:,.0f} days of use"
        if d_star > life_days:
            when += f", beyond the {life_days:,.0f}-day depreciation life"
    return (f"{head}: {when}; for this {job_days:,.1f}-day job "
            f"{'buying' if buy else 'renting'} is cheaper")
