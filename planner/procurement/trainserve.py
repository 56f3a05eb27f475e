"""Training and serving bought together (issue 39 item 4; docs/procure.md, "Training, then
serving"): a training campaign (``tokens`` within ``days``), then serving the trained model
at a rate within its SLOs for ``serve_days``. One fleet (the training cluster reused for
serving) or a pair (the training cluster, then a serving fleet of any catalog GPU type,
rented or bought), whichever costs less over both periods.

The training answer is :func:`planner.procurement.procure`'s (cost objective). How the
training fleet is held decides what reusing it costs per GPU-hour of serving:

* rented (``pricing.mode == "rent"``): it keeps paying its rent (on demand) for the GPUs
  serving uses; the rest are handed back;
* owned (an ``owned`` inventory option was chosen): its capital is sunk, so it pays its
  running cost only: the electricity of a GPU at full load with its share of the node and
  network, PUE included, plus ``operating_usd_per_gpu_hour``;
* bought (``pricing.mode == "own"``): the campaign buys it, so its whole capital is charged
  to the campaign once (GPUs plus network, no resale: the rent-or-buy convention,
  planner/procurement/rentbuy.py) with its running cost during training; serving on it then
  pays the running cost only.

A separate serving fleet is rented (on demand) or bought (capital up front plus running cost
over ``serve_days``), whichever is cheaper; the training fleet is then handed back (rented)
or left idle (owned, bought: its capital is spent either way). Every serving fleet is the
serving search's proven cheapest (planner/orchestration/serve.py, objective cost) with each
GPU type priced per GPU-hour so that its $/h x 24 x ``serve_days`` is exactly the fleet's
cost over the period (buying: capital / (24 x ``serve_days``) + running per hour). The
serving fleet's running cost takes every GPU at full load, as ``procure --serve`` does.

Over the serving period ``S`` the reused fleet costs ``r_u x S`` and a bought one ``K +
r_b x S`` (``K``: its capital): buying beats reusing past ``S* = K / (r_u - r_b)`` when
``r_u > r_b``. The cheapest bought fleet depends on ``S`` (its capital is spread over it), so
``S*`` is found by re-solving the bought fleet at each candidate crossing until it stays put
(the cheapest bought fleet's cost is concave in ``S``, reusing is linear: one crossing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from planner.costmodel.energy import energy_coefficients
from planner.errors import InfeasibleError, InputError
from planner.orchestration.serve import ServeResult, plan_serve
from planner.procurement.metrics import capital_per_gpu, rent_price
from planner.procurement.results import ProcureResult
from planner.procurement.train import _owned_templates, _templates, procure
from planner.specs.cluster import ClusterSpec
from planner.specs.model import ModelSpec
from planner.specs.pricing import PricingSpec
from planner.specs.serve import ServeEngine, ServePlan, ServeWorkload

HOLDINGS = ("rented", "owned", "bought")
#: At most this many re-solves of the bought serving fleet while locating the break-even.
MAX_BREAK_EVEN_SOLVES = 6
#: The longest serving period asked or searched for a break-even: a century, beyond any
#: hardware's life (a longer one is a unit mistake).
MAX_SERVE_DAYS = 36500.0


def running_usd_per_gpu_hour(cluster: ClusterSpec, pricing: PricingSpec) -> float:
    """The running cost of one GPU of ``cluster`` per hour: its electricity at full load (TDP,
    with its share of the node's and network's power, PUE included: the peak facility power
    per GPU) plus the operating cost per GPU-hour."""
    a, b = energy_coefficients(cluster, cluster.node_size)
    watts = (a + b) / cluster.node_size
    return watts / 1000.0 * pricing.electricity_usd_per_kwh + pricing.operating_usd_per_gpu_hour


@dataclass
class ServeFleet:
    """One serving fleet over the serving period: how it is held, its plan and cost."""

    how: str  # reuse (the training fleet), rent or buy
    result: ServeResult
    serve_days: float
    capital_usd: float  # paid up front (buy); 0 otherwise
    usd_per_day: float  # the rest, per day of serving

    @property
    def cost_usd(self) -> float:
        return self.capital_usd + self.usd_per_day * self.serve_days

    @property
    def num_gpus(self) -> int:
        return self.result.plan.num_gpus

    def label(self) -> str:
        return _fleet_words(self.result.plan)

    def to_json(self) -> dict[str, Any]:
        return {"how": self.how, "gpus": self.label(), "num_gpus": self.num_gpus,
                "cost_usd": self.cost_usd, "capital_usd": self.capital_usd,
                "usd_per_day": self.usd_per_day, "plan": self.result.plan.to_dict(),
                "estimate": self.result.estimate.to_json(), "solver": self.result.solver}


@dataclass
class TrainServeResult:
    """The training answer, the serving fleets considered, the choice and the break-even."""

    training: ProcureResult
    holding: str  # how the training fleet is held: rented, owned or bought
    training_cost_usd: float
    serve_days: float
    reuse: ServeFleet | None
    separate: dict[str, ServeFleet] = field(default_factory=dict)  # rent, buy
    why_not: dict[str, str] = field(default_factory=dict)  # a fleet with no answer: why
    choice: str = "reuse"  # reuse or separate
    break_even_days: float | None = None
    break_even_exact: bool = True
    summary: str = ""

    @property
    def best_separate(self) -> ServeFleet | None:
        return min(self.separate.values(), key=lambda f: f.cost_usd, default=None)

    @property
    def serving(self) -> ServeFleet:
        fleet = self.reuse if self.choice == "reuse" else self.best_separate
        assert fleet is not None
        return fleet

    @property
    def total_usd(self) -> float:
        return self.training_cost_usd + self.serving.cost_usd

    def total_of(self, choice: str) -> float | None:
        fleet = self.reuse if choice == "reuse" else self.best_separate
        return None if fleet is None else self.training_cost_usd + fleet.cost_usd

    def to_json(self) -> dict[str, Any]:
        return {"training": self.training.to_json(), "holding": self.holding,
                "training_cost_usd": self.training_cost_usd, "serve_days": self.serve_days,
                "choice": self.choice, "total_usd": self.total_usd,
                "reuse": None if self.reuse is None else self.reuse.to_json(),
                "separate": {k: f.to_json() for k, f in self.separate.items()},
                "why_not": self.why_not, "break_even_days": self.break_even_days,
                "break_even_exact": self.break_even_exact, "summary": self.summary}


def procure_train_serve(model: ModelSpec, tokens: float, *, serve: ServeWorkload,
                        serve_days: float, days: float | None = None,
                        budget_usd: float | None = None,
                        templates: Sequence[ClusterSpec] | None = None,
                        serve_templates: Sequence[ClusterSpec] | None = None,
                        pricing: PricingSpec | None = None, engine: ServeEngine,
                        owned: Mapping[str, int] | None = None,
                        serve_time_limit_s: float = 60.0, **procure_kw: Any) -> TrainServeResult:
    """The cheapest campaign: train ``model`` on ``tokens`` (within ``days``, ``budget_usd``)
    with :func:`procure` (its other keywords in ``procure_kw``), then serve ``serve`` (its
    ``rate_rps`` within its SLOs) for ``serve_days`` on the training fleet or on a separate
    fleet of ``serve_templates`` (default: the training templates); module docstring.
    Raises InputError on bad input, InfeasibleError when training is infeasible or no
    fleet serves the rate."""
    _check(serve, serve_days, procure_kw.get("objective"))
    templates, pricing = _templates(templates, pricing)
    res = procure(model, tokens, days=days, budget_usd=budget_usd, templates=templates,
                  pricing=pricing, owned=owned, **procure_kw)
    c = res.choice
    assert c is not None  # procure raises otherwise
    tpl = _template_of(c.cluster, templates, owned)
    cluster = tpl.resized(c.num_gpus) if c.num_gpus != tpl.num_gpus else tpl
    holding = "owned" if c.owned else ("rented" if pricing.mode == "rent" else "bought")
    train_usd = c.cost_usd
    if holding == "bought":  # the whole capital once, and the running cost of the training
        train_usd = (c.num_gpus * capital_per_gpu(cluster, pricing, tpl.name)
                     + pricing.electricity_usd_per_kwh * c.energy_mwh * 1000.0
                     + pricing.operating_usd_per_gpu_hour * c.gpu_hours)
    out = TrainServeResult(res, holding, train_usd, serve_days, None)

    reuse_price = (rent_price(cluster, pricing, tpl.name) if holding == "rented"
                   else running_usd_per_gpu_hour(cluster, pricing))
    try:
        r = plan_serve(model, [cluster.model_copy(update={"price_per_gpu_hour": reuse_price})],
                       serve, objective="cost", gpus=c.num_gpus, engine=engine,
                       time_limit_s=serve_time_limit_s)
        out.reuse = _fleet("reuse", r, serve_days)
    except InfeasibleError as e:
        out.why_not["reuse"] = (f"the training fleet ({c.num_gpus:,}x {c.gpu}) does not serve "
                                f"{serve.rate_rps:g} requests/s within the SLOs: "
                                + str(e).split("\n")[0])
    pool = _distinct_gpus(list(serve_templates) if serve_templates is not None else templates)
    for how in ("rent", "buy"):
        try:
            out.separate[how] = _separate(model, pool, serve, serve_days, pricing, engine, how,
                                          serve_time_limit_s)
        except (InfeasibleError, InputError) as e:
            out.why_not[how] = str(e).split("\n")[0]
    if out.reuse is None and not out.separate:
        raise InfeasibleError(f"no fleet serves {serve.rate_rps:g} requests/s within the SLOs",
                              reasons=[f"{k}: {v}" for k, v in out.why_not.items()],
                              hints=["loosen --ttft-ms/--tpot-ms or lower --serve-rate"])
    sep = out.best_separate
    out.choice = ("reuse" if sep is None or (out.reuse is not None
                                             and out.reuse.cost_usd <= sep.cost_usd)
                  else "separate")
    _break_even(out, model, pool, serve, pricing, engine, serve_time_limit_s)
    out.summary = _summary(out)
    return out


def _check(serve: Any, serve_days: Any, objective: Any) -> None:
    if not isinstance(serve, ServeWorkload):
        raise InputError(f"serve {serve!r}: expected a ServeWorkload (isl, osl, rate_rps, "
                         "SLOs)"[:300])
    if serve.rate_rps is None:
        raise InputError("train and serve needs --serve-rate (the requests/s to serve)")
    if isinstance(serve_days, bool) or not isinstance(serve_days, (int, float)) or not (
            0 < serve_days <= MAX_SERVE_DAYS and math.isfinite(serve_days)):
        raise InputError(f"--serve-days {serve_days!r}: expected a positive number of days "
                         f"(at most {MAX_SERVE_DAYS:,.0f})")
    if objective not in (None, "cost"):
        raise InputError(f"--objective {objective}: training and serving together minimize "
                         "the cost of both (expected cost)")


def _template_of(name: str, templates: Sequence[ClusterSpec],
                 owned: Mapping[str, int] | None) -> ClusterSpec:
    for t in list(templates) + [t for t, _ in _owned_templates(owned, templates)]:
        if t.name == name:
            return t
    raise AssertionError(f"no template named {name}")  # procure chose one of them


def _distinct_gpus(templates: Sequence[ClusterSpec]) -> list[ClusterSpec]:
    """One template per GPU type (the first listed): the serving search tells pools apart
    by GPU type."""
    out: list[ClusterSpec] = []
    for t in templates:
        if all(o.gpu.name != t.gpu.name for o in out):
            out.append(t)
    return out


def _priced(t: ClusterSpec, pricing: PricingSpec, how: str, serve_days: float) -> float:
    """USD per GPU-hour that makes $/h x 24 x ``serve_days`` the fleet's cost (module
    docstring); InputError without a price."""
    if how == "rent":
        return rent_price(t, pricing, t.name)
    return (capital_per_gpu(t, pricing, t.name) / (24.0 * serve_days)
            + running_usd_per_gpu_hour(t, pricing))


def _separate(model: ModelSpec, pool: list[ClusterSpec], serve: ServeWorkload,
              serve_days: float, pricing: PricingSpec, engine: ServeEngine, how: str,
              time_limit_s: float) -> ServeFleet:
    """The cheapest fleet of ``pool``'s GPU types rented or bought (``how``) for
    ``serve_days``; GPU types without a price are left out."""
    priced, missing = [], []
    for t in pool:
        try:
            priced.append(t.model_copy(update={"price_per_gpu_hour":
                                               _priced(t, pricing, how, serve_days)}))
        except InputError as e:
            missing.append(str(e))
    if not priced:
        raise InputError(f"no GPU type has a price to {how}: {missing[0]}")
    r = plan_serve(model, priced, serve, objective="cost", engine=engine,
                   time_limit_s=time_limit_s)
    if how == "rent":
        return _fleet(how, r, serve_days)
    by_gpu = {t.gpu.name: t for t in pool}
    pools = _pools(r.plan, pool[0].gpu.name)
    capital = sum(k * capital_per_gpu(by_gpu[g], pricing, by_gpu[g].name) for g, k in pools)
    running = sum(k * running_usd_per_gpu_hour(by_gpu[g], pricing) for g, k in pools)
    return ServeFleet(how, r, serve_days, capital, running * 24.0)


def _fleet(how: str, r: ServeResult, serve_days: float) -> ServeFleet:
    """A fleet paid by the hour, nothing up front."""
    usd_h = r.estimate.usd_per_hour
    assert usd_h is not None  # every pool is priced
    return ServeFleet(how, r, serve_days, 0.0, usd_h * 24.0)


def _pools(plan: ServePlan, default_gpu: str) -> list[tuple[str, int]]:
    """(GPU type, GPUs) of each pool of ``plan``."""
    out = [(plan.gpu or default_gpu, plan.gpus_per_replica * plan.replicas)]
    if plan.prefill is not None:
        p = plan.prefill
        out.append((p.gpu or plan.gpu or default_gpu, p.gpus_per_replica * p.replicas))
    return out


def _fleet_words(plan: ServePlan) -> str:
    words = [f"{plan.gpus_per_replica * plan.replicas}x {plan.gpu}"]
    if plan.prefill is not None:
        p = plan.prefill
        words.append(f"{p.gpus_per_replica * p.replicas}x {p.gpu or plan.gpu} prefill")
    return " + ".join(words)


def _break_even(out: TrainServeResult, model: ModelSpec, pool: list[ClusterSpec],
                serve: ServeWorkload, pricing: PricingSpec, engine: ServeEngine,
                time_limit_s: float) -> None:
    """The serving period past which a separate fleet beats reusing the training fleet
    (module docstring); None when the answer is the same for every period: no reuse, a
    rented serving fleet cheaper per day than reusing (it wins from the first day), or no
    bought fleet cheaper than reusing within :data:`MAX_SERVE_DAYS` (the cheapest bought
    fleet's cost less reuse's is concave in the period and positive at 0: at least 0 at
    both ends means at least 0 between)."""
    reuse, rent = out.reuse, out.separate.get("rent")
    start = out.separate.get("buy")
    if reuse is None or (rent is not None and rent.usd_per_day < reuse.usd_per_day):
        return
    if start is None or start.usd_per_day >= reuse.usd_per_day * (1 - 1e-9):
        # the fleet bought for this period never catches up; one with a lower running cost
        # (more capital) may, over a longer period
        try:
            start = _separate(model, pool, serve, MAX_SERVE_DAYS, pricing, engine, "buy",
                              time_limit_s)
        except (InfeasibleError, InputError):
            return
        if start.cost_usd >= reuse.usd_per_day * MAX_SERVE_DAYS * (1 - 1e-9):
            return
    d = start.capital_usd / (reuse.usd_per_day - start.usd_per_day)
    for _ in range(MAX_BREAK_EVEN_SOLVES):
        try:
            at = _separate(model, pool, serve, d, pricing, engine, "buy", time_limit_s)
        except (InfeasibleError, InputError):
            break
        if at.cost_usd >= reuse.usd_per_day * d * (1 - 1e-9):
            out.break_even_days = d  # the cheapest fleet at d no cheaper: the crossing
            return
        d = at.capital_usd / (reuse.usd_per_day - at.usd_per_day)  # it crosses earlier
    out.break_even_days, out.break_even_exact = d, False


def _summary(out: TrainServeResult) -> str:
    c = out.training.choice
    assert c is not None
    held = {"rented": "rented", "owned": "owned", "bought": "bought"}[out.holding]
    head = (f"train on {c.num_gpus:,}x {c.gpu} ({held}, ${out.training_cost_usd:,.0f}), then "
            f"serve {out.serve_days:,.0f} days on ")
    s = out.serving
    if out.choice == "reuse":
        head += f"the training fleet ({s.label()}, ${s.cost_usd:,.0f})"
    else:
        head += f"{'bought' if s.how == 'buy' else 'rented'} {s.label()} (${s.cost_usd:,.0f})"
    head += f": ${out.total_usd:,.0f} in all"
    if out.break_even_days is not None:
        head += (f"; buying a serving fleet beats reusing the training fleet past "
                 f"{out.break_even_days:,.0f} days of serving")
    return head
