"""What a procurement answers: one record per option solved, the choice, the fronts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from planner.costmodel.train.evaluator import Estimate
from planner.costmodel.train.goodput import Goodput
from planner.procurement.metrics import METRICS, meets
from planner.specs.plan import Plan


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
    goodput: Goodput | None = None  # what the totals are divided by; None: ideal figures
    owned: bool = False  # on GPUs already owned (capital sunk)
    facility_power_mw: float | None = None  # peak, PUE included (planner/procurement/site.py)
    racks: int | None = None  # None: the cluster gives no rack figure
    ports: int | None = None  # compute-fabric switch ports; None: not stated

    @property
    def mfu(self) -> float | None:
        return self.estimate.mfu

    def ideal(self, metric: str) -> float:
        """``metric`` without failures and checkpoints."""
        return self.value(metric) * (1.0 if self.goodput is None else self.goodput.fraction)

    def value(self, metric: str) -> float:
        return float(getattr(self, metric))

    @property
    def band_pct(self) -> float | None:
        """The plan's expected error (percent of its iteration time); days, GPU-hours, cost
        and energy scale with the iteration time, so they carry the same band."""
        return self.estimate.expected_error_pct

    def within_band(self, metric: str) -> float | None:
        """``metric`` at the slow edge of the band: what the answer stays within at the
        band's confidence (planner.validation.band.LEVEL)."""
        b = self.band_pct
        return None if b is None else self.value(metric) * (1 + b / 100)

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu, "num_gpus": self.num_gpus, "cluster": self.cluster,
            "plan": self.plan.to_dict(), "days": self.days, "cost_usd": self.cost_usd,
            "energy_mwh": self.energy_mwh, "gpu_hours": self.gpu_hours, "mfu": self.mfu,
            "iteration_time_s": self.estimate.iteration_time_s,
            "usd_per_gpu_hour": self.cost_usd / self.gpu_hours if self.gpu_hours else None,
            "owned": self.owned, "facility_power_mw": self.facility_power_mw,
            "racks": self.racks, "ports": self.ports,
            "meets_limits": self.meets_limits, "proven_optimal": self.proven_optimal,
            "expected_error_pct": self.band_pct,
            "expected_error_note": self.estimate.expected_error_note,
            "at_band_edge": None if self.band_pct is None else {
                m: self.within_band(m) for m in ("days", "cost_usd", "gpu_hours", "energy_mwh")},
            **({"goodput": None} if self.goodput is None else {
                "ideal": {m: self.ideal(m) for m in METRICS},
                "goodput": self.goodput.to_json()}),
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
    owned: dict[str, Any] | None = None  # what the owned fleet is worth (train.py)
    rent_or_buy: dict[str, Any] | None = None  # the choice's break-even (rentbuy.py)

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
            "owned": self.owned,
            "rent_or_buy": self.rent_or_buy,
        }


def pareto_front(records: Sequence[Procured], y: str, x: str = "days") -> list[Procured]:
    """Records no other record beats on both ``x`` and ``y`` (ties kept once), by ``x``."""
    front: list[Procured] = []
    for r in sorted(records, key=lambda r: (r.value(x), r.value(y))):
        if not front or r.value(y) < front[-1].value(y):
            front.append(r)
    return front
