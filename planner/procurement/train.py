"""The outer problem: which option (cluster template x GPU count) and plan minimize the
objective over training on a token budget, within the limits.

An outer decomposition over *options*, each answered by the proven-optimal inner solve
(:mod:`planner.procurement.option`), with a branch and bound over the options in the order of
their lower bounds. docs/procure.md states the query semantics and argues that the answer
is optimal over (template, count, plan); tests/test_procure.py checks it against
exhaustive search.

Every quantity over the token budget is *linear* in one iteration's time ``T`` and GPU
busy time ``B`` for a fixed option: ``q = time x T + busy x B``
(:class:`planner.procurement.metrics.Linear`). Days, GPU-hours and rented cost have
``busy = 0``; energy and owned cost (electricity) do not.
"""

from __future__ import annotations

import math
import os
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any, Callable, Mapping, Sequence

from formulations.train.space import SpaceOptions
from planner.costmodel.train.goodput import training_goodput
from planner.errors import InfeasibleError, InputError
from planner.procurement.bounds import BoundedOption, WorkTable, plan_bounds
from planner.procurement.explain import explain
from planner.procurement.metrics import (
    OBJECTIVE_METRIC,
    Option,
    fmt,
    gemm_time_lower_bound_s,
    meets,
    option_metrics,
    price_keys,
)
from planner.procurement.option import Answer, Inputs, answer_option
from planner.procurement.rentbuy import try_rent_or_buy
from planner.procurement.results import ProcureResult, Procured, pareto_front
from planner.procurement.site import (
    FLAGS,
    binding,
    check_figures,
    fmt_site,
    round_up,
    site_figures,
    within,
)
from planner.procurement.templates import DEFAULT_MAX_GPUS, candidate_counts, catalog_templates
from planner.specs.cluster import ClusterSpec
from planner.specs.model import ModelSpec
from planner.specs.plan_base import model_defaults, require_batch, require_one_iteration
from planner.specs.pricing import PricingSpec, load_pricing
from planner.specs.site import InventorySpec, SiteSpec, inventory_from
from planner.specs.validate import validate
from planner.workers import WorkerPool
from planner.specs.loaders import load_cluster


def procure(model: ModelSpec, tokens: float, *, days: float | None = None,
            budget_usd: float | None = None, objective: str | None = None,
            templates: Sequence[ClusterSpec] | None = None, max_gpus: int = DEFAULT_MAX_GPUS,
            counts: Sequence[int] | None = None, pricing: PricingSpec | None = None,
            pareto: bool = False, pareto_horizon: float = 2.0,
            base: dict[str, Any] | None = None, options: SpaceOptions | None = None,
            time_limit_s: float = 60.0, workers: int | None = None,
            progress: Callable[[str], None] | None = None, goodput: str = "on",
            max_power_mw: float | None = None, max_racks: int | None = None,
            max_ports: int | None = None, owned: Mapping[str, int] | InventorySpec | None = None
            ) -> ProcureResult:
    """The option (template, GPU count) and plan that minimize ``objective`` over training
    on ``tokens`` tokens, within ``days`` and ``budget_usd`` when given.

    ``objective``: cost (default), energy, gpu_hours, or time (default with a budget).
    ``workers``: inner solves at once, in worker processes (default: the CPUs). With
    ``pareto``, every option within ``pareto_horizon`` times the limits is solved for
    the fronts of days against cost and against energy. ``goodput`` (on, async, off): every
    total, and the ``days`` limit, is the effective one, divided by the option's
    training-time fraction under failures and checkpoints (planner/costmodel/train/goodput.py);
    ``off`` keeps the ideal ones. ``max_power_mw``, ``max_racks``, ``max_ports``: the site's limits
    (planner/procurement/site.py). ``owned``: GPUs already owned, ``{cluster: count}``
    (:func:`planner.specs.site.load_inventory`), charged electricity and operating cost
    only; the result's ``owned`` says what they save against the best new-only option, its
    ``rent_or_buy`` the chosen cluster's break-even (planner/procurement/rentbuy.py). Raises :class:`InfeasibleError`
    (``.result`` holds the partial :class:`ProcureResult`) when nothing meets the limits.
    """
    t0 = time.perf_counter()
    say = progress or (lambda _m: None)
    objective = _check_query(tokens, days, budget_usd, max_gpus, pareto_horizon, objective)
    templates, pricing = _templates(templates, pricing)
    plan_base = model_defaults(model)
    plan_base.update(base or {})
    require_batch(model, plan_base)
    sequences, seq_len = int(plan_base["global_batch_size"]), int(plan_base["seq_len"])
    require_one_iteration(tokens, sequences, seq_len)
    iterations = tokens / (sequences * seq_len)
    metric = OBJECTIVE_METRIC[objective]
    limits = {m: v for m, v in (("days", days), ("cost_usd", budget_usd)) if v is not None}
    site = _site(max_power_mw, max_racks, max_ports)
    fleet = _owned_templates(owned, templates)

    untrainable: list[str] = []
    inner = Inputs(model, plan_base, options or SpaceOptions(), time_limit_s)
    every = _options(model, templates, counts, max_gpus, pricing, plan_base, iterations,
                     goodput, untrainable, fleet, WorkTable(model, plan_base, inner.options))
    check_figures(every, site)
    opts = [o for o in every if within(o, site)]  # what the site holds
    bb = _BranchAndBound(metric, limits, say, len(opts))
    horizon = {m: pareto_horizon * v for m, v in limits.items()} if pareto else None
    worth = _search(bb, _pool(workers, len(every) * (2 if pareto else 1)), opts, inner,
                    fleet, horizon)
    stats = bb.stats
    stats["outside_site"] = len(every) - len(opts)  # options over a site limit
    stats["untrainable"] = untrainable  # options left out: they would not train (goodput)
    stats["wall_s"] = time.perf_counter() - t0  # the total: the time limit is per inner solve
    stats["time_limit_per_solve_s"] = time_limit_s
    query = {"model": model.name, "tokens": tokens, "days": days, "budget_usd": budget_usd,
             "objective": objective, "pricing": pricing.mode, "max_gpus": max_gpus,
             "global_batch_size": sequences, "seq_len": seq_len,
             "pareto_horizon": pareto_horizon, "templates": [t.name for t in templates],
             "goodput": goodput, "max_power_mw": max_power_mw, "max_racks": max_racks, "max_ports": max_ports,
             "owned": {t.name: k for t, k in fleet} or None}
    result = ProcureResult(query, bb.choice[2] if bb.choice else None,
                           sorted(bb.records.values(), key=lambda r: (r.days, r.cost_usd)),
                           [], [], pareto, stats, worth)
    if pareto:
        result.pareto = pareto_front(result.in_view(), "cost_usd")
        result.pareto_energy = pareto_front(result.in_view(), "energy_mwh")
    if bb.choice is not None and not bb.choice[2].owned:
        c = bb.choice[2]
        o = next(o for o in opts if not o.owned and o.template == c.cluster
                 and o.num_gpus == c.num_gpus)
        result.rent_or_buy = try_rent_or_buy(c, o.cluster, pricing, o.template)
    if bb.choice is None:
        err = _why_none(every, opts, site, limits, metric, inner, bb, max_gpus)
        stats["wall_s"] = time.perf_counter() - t0
        err.result = result  # type: ignore[attr-defined]
        raise err
    return result


def _search(bb: "_BranchAndBound", pool: Any, opts: list[Option], inner: Inputs,
            fleet: Sequence[tuple[ClusterSpec, int]], horizon: dict[str, float] | None
            ) -> dict[str, Any] | None:
    """The branch and bound over ``opts``; then, with an owned fleet, its worth (before the
    fronts: their answers are top-only); then the fronts within ``horizon`` when given."""
    worth = None
    with pool:
        if opts:
            bb.run(pool, opts, inner)
        if fleet and bb.choice is not None:
            worth = _owned_worth(pool, bb, [o for o in opts if not o.owned], inner, fleet)
        if horizon is not None and opts:
            bb.fronts(pool, opts, inner, horizon)
    return worth


def _templates(templates: Sequence[ClusterSpec] | None, pricing: PricingSpec | None
               ) -> tuple[list[ClusterSpec], PricingSpec]:
    """The query's templates (default: the catalog's), distinctly named, and the pricing
    with its cluster keys mapped to them."""
    pricing = pricing or load_pricing()
    out = list(templates) if templates is not None else catalog_templates()
    if not out:
        raise InputError("no cluster template to choose from (check --gpus and --cluster)")
    names = [t.name for t in out]
    if len(set(names)) != len(names):
        raise InputError(f"cluster templates need distinct names, got {names}")
    return out, price_keys(pricing, out)


def _site(max_power_mw: float | None, max_racks: int | None, max_ports: int | None
          ) -> dict[str, float]:
    """The site limits given, checked (:class:`SiteSpec`), keyed by the option figure."""
    given = {k: v for k, v in (("max_power_mw", max_power_mw), ("max_racks", max_racks),
                               ("max_ports", max_ports)) if v is not None}
    return validate(SiteSpec, given, "site limits").limits()


def _why_none(every: list[Option], held: list[Option], site: dict[str, float],
              limits: dict[str, float], metric: str, inner: Inputs, bb: "_BranchAndBound",
              max_gpus: int) -> InfeasibleError:
    """Why no option meets the limits: a binding site limit and what it would take; else
    nothing fits the site at all; else the query's own limits (:func:`explain`)."""
    err = binding(every, site, limits, metric, inner) if site else None
    if err is None and not held:
        err = _nothing_fits(every, site)
    if err is None:
        err = explain(held, bb.answers, limits, max_gpus, inner)
    return err


def _check_query(tokens: float, days: float | None, budget_usd: float | None, max_gpus: int,
                 pareto_horizon: float, objective: str | None) -> str:
    """The objective's name (default: time with a budget, else cost); raises InputError on
    a limit that is not a positive finite number."""
    objective = objective or ("time" if budget_usd is not None else "cost")
    if not isinstance(objective, str) or objective not in OBJECTIVE_METRIC:
        raise InputError(f"--objective '{objective}': expected one of "
                         f"{', '.join(OBJECTIVE_METRIC)}")
    for name, v in (("--tokens", tokens), ("--days", days), ("--budget", budget_usd),
                    ("--max-gpus", max_gpus), ("pareto_horizon", pareto_horizon)):
        required = name in ("--tokens", "--max-gpus", "pareto_horizon")
        if (v is not None or required) and not (
                isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
                and math.isfinite(v)):
            raise InputError(f"{name} {v!r}: expected a positive number")
    if not isinstance(max_gpus, int):
        raise InputError(f"--max-gpus {max_gpus!r}: expected a positive integer")
    if pareto_horizon < 1:
        raise InputError(f"pareto_horizon {pareto_horizon}: expected at least 1")
    return objective


def _owned_templates(owned: Mapping[str, int] | InventorySpec | None,
                     templates: Sequence[ClusterSpec]) -> list[tuple[ClusterSpec, int]]:
    """Each owned cluster with its GPU count: a template of the query when the key names one
    (name or alias), else the catalog cluster or cluster file it names."""
    if owned is None:
        return []

    inv = inventory_from(owned, "owned inventory")
    by_name = {a.lower(): t for t in templates for a in (t.name, *t.aliases)}
    out: list[tuple[ClusterSpec, int]] = []
    for key, count in inv.owned.items():
        tpl = by_name.get(key.lower())
        if tpl is None:
            try:
                tpl = load_cluster(key)
            except InputError as e:
                raise InputError(f"owned inventory: {key}: {e}") from None
        if any(t.name == tpl.name for t, _ in out):
            raise InputError(f"owned inventory: cluster '{tpl.name}' is listed twice")
        out.append((tpl, count))
    return out


def _owned_counts(tpl: ClusterSpec, owned: int, counts: Sequence[int] | None) -> list[int]:
    """Counts of an owned cluster to consider: the candidate grid (or ``counts``) up to the
    count owned, and the count owned itself where the cluster resizes to it."""
    if counts:
        return sorted(c for c in set(counts) if c <= owned)
    grid = set(candidate_counts(tpl, owned))
    try:
        tpl.resized(owned)
        grid.add(owned)
    except ValueError:
        pass
    return sorted(grid)


def _options(model: ModelSpec, templates: Sequence[ClusterSpec], counts: Sequence[int] | None,
             max_gpus: int, pricing: PricingSpec, plan_base: dict[str, Any],
             iterations: float, goodput: str = "on",
             untrainable: list[str] | None = None,
             fleet: Sequence[tuple[ClusterSpec, int]] = (),
             work: WorkTable | None = None) -> list[Option]:
    """Every (template, GPU count) with its metrics (effective ones: divided by the
    option's goodput fraction, which no plan changes), lower bounds (the GEMM bound, and
    with ``work`` the stronger ones of planner/procurement/bounds.py) and site figures; then
    each owned cluster at the counts it holds (``fleet``), priced as owned. An option whose
    job would not train (:attr:`Goodput.trains`) is left out, why appended to
    ``untrainable``."""
    sequences, seq_len = int(plan_base["global_batch_size"]), int(plan_base["seq_len"])
    opts: list[Option] = []
    untrainable = [] if untrainable is None else untrainable
    grid = [(tpl, sorted(set(counts)) if counts else candidate_counts(tpl, max_gpus), False)
            for tpl in templates]
    grid += [(tpl, _owned_counts(tpl, k, counts), True) for tpl, k in fleet]
    for tpl, ns, is_owned in grid:
        for n in ns:
            try:
                cl = tpl.resized(n) if n != tpl.num_gpus else tpl
            except ValueError as e:
                raise InputError(f"--counts {n} for cluster '{tpl.name}': {e}") from None
            t_lb = gemm_time_lower_bound_s(model, cl.gpu, n, sequences, seq_len,
                                           plan_base.get("dtype", "bf16"))
            g = training_goodput(model, cl, n, plan_base, goodput)
            if g is not None and not g.trains:  # its totals would be infinite
                untrainable.append(g.why_not(cl))
                continue
            tb = plan_bounds(work, cl) if work is not None else None
            metrics = option_metrics(cl, iterations, pricing, tpl.name, owned=is_owned)
            if g is not None:
                metrics = {k: v.scaled(1.0 / g.fraction) for k, v in metrics.items()}
            # both bounds hold for every plan: the larger one (planner/procurement/bounds.py)
            t_b = (t_lb, t_lb) if tb is None else (max(t_lb, tb[0]), max(t_lb, tb[1]))
            opts.append(BoundedOption(tpl.name, cl, metrics, t_b[0], g, is_owned,
                                      site_figures(cl), b_lb_s=t_b[1]))
    if not opts and untrainable:
        raise InputError(f"no option trains: {untrainable[0]}"
                         + (f" (and {len(untrainable) - 1} more options)"
                            if len(untrainable) > 1 else ""))
    if not opts:
        raise InputError(f"no GPU count to consider: --max-gpus {max_gpus} is below the "
                         "smallest count of every template")
    return opts


def _owned_worth(pool: Any, bb: "_BranchAndBound", new: list[Option], inner: Inputs,
                 fleet: Sequence[tuple[ClusterSpec, int]]) -> dict[str, Any]:
    """What the owned fleet is worth to this job: the best new-only option (a second branch
    and bound over the options that are not owned, reusing every answer already computed)
    against the choice, in the objective's metric."""
    assert bb.choice is not None
    choice = bb.choice[2]
    out: dict[str, Any] = {"fleet": {t.name: k for t, k in fleet}, "chosen": choice.owned,
                           "metric": bb.metric}
    if not choice.owned:
        out.update(best_new=None, saving=0.0,
                   note="the choice is new hardware: the owned fleet saves nothing here")
        return out
    alone = _BranchAndBound(bb.metric, bb.limits, bb.say, len(new))
    alone.run(pool, new, inner, known=bb.answers)
    if alone.choice is None:
        out.update(best_new=None, saving=None,
                   note="no new option meets the limits: only the owned fleet does")
        return out
    best = alone.choice[2]
    out.update(best_new={k: best.to_json()[k] for k in
                         ("gpu", "num_gpus", "cluster", "days", "cost_usd", "energy_mwh",
                          "gpu_hours")},
               saving=best.value(bb.metric) - choice.value(bb.metric),
               note=f"the owned {choice.num_gpus:,}x {choice.gpu} save "
                    f"{fmt(bb.metric, best.value(bb.metric) - choice.value(bb.metric))} "
                    f"against the best new option, {best.num_gpus:,}x {best.gpu} "
                    f"({best.cluster})")
    return out


def _nothing_fits(opts: Sequence[Option], site: dict[str, float]) -> InfeasibleError:
    """No option fits the site at all: the least figure of each limit."""
    reasons, hints = [], []
    for m, cap in site.items():
        least = min(opts, key=lambda o: o.site[m])  # type: ignore[index]
        need = least.site[m]  # type: ignore[index]
        if need > cap:
            reasons.append(f"the smallest option, {least.label()}, needs {fmt_site(m, need)}; "
                           f"the site has {cap:g}{' MW' if m == 'facility_power_mw' else ''}")
            hints.append(f"{FLAGS[m]} {round_up(need, m)} or more")
    if not reasons:  # each limit alone admits some option, none admits one at once
        reasons.append("each site limit admits some option, but no option meets them all")
        hints.append("relax one of the site limits")
    return InfeasibleError("no option fits the site", reasons, hints)


class _BranchAndBound:
    """Options in the order of the objective's lower bound, answered until the next bound
    is no better than the incumbent; then, for the fronts, every option within the horizon
    that no record dominates."""

    def __init__(self, metric: str, limits: dict[str, float], say: Callable[[str], None],
                 n_options: int):
        self.metric, self.limits, self.say = metric, limits, say
        self.stats: dict[str, Any] = {"options": n_options, "pruned_by_limits": 0,
                                      "pruned_by_incumbent": 0, "pruned_by_dominance": 0,
                                      "solved": 0, "solver_calls": 0}
        self.answers: dict[Option, Answer] = {}
        self.records: dict[Option, Procured] = {}  # per option solved: its best by the objective
        self.choice: tuple[float, int, Procured] | None = None  # (value, rank, record)
        self.live: list[Option] = []

    def take(self, o: Option, i: int, ans: Answer, chooses: bool = True) -> None:
        self.answers[o] = ans
        self.stats["solved"] += 1
        self.stats["solver_calls"] += ans.solver_calls
        if ans.top is not None:
            self.records[o] = ans.top
        value = ans.best.value(self.metric) if ans.best is not None else math.inf
        if chooses and ans.best is not None and (self.choice is None
                                                 or (value, i) < self.choice[:2]):
            self.choice = (value, i, ans.best)

    def gate(self, o: Option, i: int) -> str:
        if self.choice is not None and o.bound(self.metric) >= self.choice[0]:
            self.stats["pruned_by_incumbent"] = len(self.live) - i
            return "stop"
        self.say(f"option {i + 1} of {len(self.live)}: {o.label()}"
                 + (f"; best so far {fmt(self.metric, self.choice[0])}" if self.choice else ""))
        return "run"

    def run(self, pool: Any, opts: list[Option], inner: Inputs,
            known: dict[Option, Answer] | None = None) -> None:
        """``known``: answers already computed (by the same limits and metric), taken
        instead of solving again."""
        # options whose bounds already break a limit cannot answer
        lim = self.limits
        self.live = [o for o in opts if meets({m: o.bound(m) for m in lim}, lim)]
        self.stats["pruned_by_limits"] = len(opts) - len(self.live)
        self.live.sort(key=lambda o: (o.bound(self.metric), o.bound("days")))
        gate = self.gate
        if known:
            def gate(o: Option, i: int) -> str:  # noqa: F811 (the known answers first)
                verdict = self.gate(o, i)
                if verdict == "run" and o in known:
                    self.take(o, i, known[o])
                    return "skip"
                return verdict
        _schedule(pool, self.live, gate, self.take, inner, self.metric, lim)

    def fronts(self, pool: Any, opts: list[Option], inner: Inputs,
               horizon: dict[str, float]) -> None:
        """Options outside the branch and bound's reach cannot beat the choice (their
        bounds break a limit, or are no better than the incumbent); those within the
        horizon may still be on a front."""
        rest = [o for o in opts if o not in self.answers
                and meets({m: o.bound(m) for m in horizon}, horizon)]
        rest.sort(key=lambda o: (o.bound(self.metric), o.bound("days")))

        def gate_front(o: Option, i: int) -> str:
            if _dominated(o, list(self.records.values())):
                self.stats["pruned_by_dominance"] += 1
                return "skip"
            self.say(f"Pareto fronts: option {i + 1} of {len(rest)}: {o.label()}")
            return "run"

        _schedule(pool, rest, gate_front, lambda o, i, a: self.take(o, i, a, chooses=False),
                  inner, self.metric, self.limits, top_only=True)


#: What the forkserver imports before serving: first the module that makes it (and the
#: workers it forks) ignore Ctrl-C, then the solver, so that no solver thread is forked.
FORKSERVER_PRELOAD = ["planner.procurement.deaf", "planner.procurement.train"]


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
        ctx.set_forkserver_preload(FORKSERVER_PRELOAD)
    pool = WorkerPool(max_workers=n, mp_context=ctx)
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
              take: Callable[[Option, int, Answer], None], inner: Inputs, metric: str,
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
