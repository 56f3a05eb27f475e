"""Procurement answers for people (rich text) and spreadsheets (CSV)."""

from __future__ import annotations

import csv
import io
import json

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from planner.procurement import ProcureResult, Procured
from planner.report.text import _fmt_s, goodput_text, plan_line
from planner.report.tables import fit_table, left_out_note

TITLES = {"cost": "cheapest", "energy": "least energy", "gpu_hours": "fewest GPU-hours",
          "time": "fastest"}
CSV_PLAN_FIELDS = ("tp", "cp", "pp", "dp", "ep", "microbatch_size", "virtual_stages",
                   "sequence_parallel", "recompute", "zero_stage", "global_batch_size",
                   "seq_len", "dtype")


def money(usd: float) -> str:
    if abs(usd) >= 1e9:
        return f"${usd / 1e9:,.2f}B"
    if abs(usd) >= 1e6:
        return f"${usd / 1e6:,.1f}M"
    if abs(usd) >= 1e3:
        return f"${usd:,.0f}"
    return f"${usd:,.2f}"


def hours_text(hours: float) -> str:
    """GPU-hours in a unit that suits their size: ``1.23M``, ``45,678``, ``0.75``."""
    if abs(hours) >= 1e6:
        return f"{hours / 1e6:,.2f}M"
    if abs(hours) >= 100:
        return f"{hours:,.0f}"
    return f"{hours:.3g}"


def energy_text(mwh: float) -> str:
    """Energy in MWh, or kWh below one MWh (a small run is not ``0 MWh``)."""
    if abs(mwh) >= 10:
        return f"{mwh:,.0f} MWh"
    if abs(mwh) >= 1:
        return f"{mwh:.2f} MWh"
    return f"{mwh * 1e3:,.3g} kWh"


#: significant digits of a CSV number: a float carries 15-17, the last of which are the
#: binary rounding of sums and products (4.999999999999999 for 5); --json keeps them all
CSV_DIGITS = 12


def csv_number(v: object) -> object:
    """``v`` rounded to :data:`CSV_DIGITS` significant digits when a finite float."""
    if isinstance(v, float) and v == v and abs(v) != float("inf"):
        return float(f"{v:.{CSV_DIGITS}g}")
    return v


def tokens_text(tokens: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if tokens >= scale:
            return f"{tokens / scale:g}{unit}"
    return f"{tokens:g}"


def query_text(q: dict) -> str:
    limits = []
    if q.get("days") is not None:
        limits.append(f"within {q['days']:g} days")
    if q.get("budget_usd") is not None:
        limits.append(f"within {money(q['budget_usd'])}")
    return (f"{q['model']}, {tokens_text(q['tokens'])} tokens"
            + (f" {' and '.join(limits)}" if limits else "") + f", {q['pricing']} pricing")


def choice_panel(res: ProcureResult) -> Panel:
    c = res.choice
    assert c is not None
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row("cluster", escape(f"{c.num_gpus:,} x {c.gpu} ({c.cluster}"
                                   f"{', owned' if c.owned else ''})"))
    if c.facility_power_mw is not None:
        counts = "".join(f", {v:,} {k}" for k, v in (("racks", c.racks), ("ports", c.ports))
                         if v is not None)
        mw = c.facility_power_mw
        power = f"{mw:,.2f} MW" if mw >= 1 else f"{mw * 1000:,.1f} kW"
        grid.add_row("site", f"{power} peak (PUE included){counts}")
    grid.add_row("plan", plan_line(c.plan))
    mfu = f", MFU {c.mfu:.1%}" if c.mfu is not None else ""
    grid.add_row("time to train", f"{c.days:,.1f} days{_ideal(c, 'days', '{:,.1f}')} "
                 f"({_fmt_s(c.estimate.iteration_time_s)} per iteration{mfu})")
    grid.add_row("cost", f"{money(c.cost_usd)}{_ideal(c, 'cost_usd', None)} "
                 f"({money(c.cost_usd / c.gpu_hours)} per GPU-hour)")
    grid.add_row("energy", f"{energy_text(c.energy_mwh)}{_ideal(c, 'energy_mwh', None)}")
    grid.add_row("GPU-hours", f"{hours_text(c.gpu_hours)}{_ideal(c, 'gpu_hours', None)}")
    if c.goodput is not None:
        grid.add_row("goodput", goodput_text(c.goodput.to_json()).removeprefix("goodput "))
    band = c.band_pct
    if band is not None:
        grid.add_row("expected error", f"±{band:.0f} % on days and cost: at most "
                     f"{c.within_band('days'):,.1f} days and {money(c.within_band('cost_usd'))} "
                     "with 90 % confidence")
    if c.estimate.expected_error_note:
        grid.add_row("", escape(c.estimate.expected_error_note))
    if res.owned is not None:
        grid.add_row("owned fleet", escape(res.owned["note"]))
    if res.rent_or_buy is not None:
        rb = res.rent_or_buy
        grid.add_row("rent or buy", escape(rb.get("summary") or rb.get("unavailable", "")))
    parts: list = [grid]
    if not c.proven_optimal:
        parts.append(Text("not proven optimal: an inner solve stopped at its time limit, or "
                          "the plan meeting the limits was not among the objective's best",
                          style="yellow"))
    title = f"{TITLES[res.query['objective']]}: {query_text(res.query)}"
    return Panel(Group(*parts), title=escape(title), expand=False)


def _ideal(c: Procured, metric: str, form: str | None) -> str:
    """`` (ideal X)`` beside an effective figure, when goodput is counted."""
    if c.goodput is None:
        return ""
    v = c.ideal(metric)
    text = {"cost_usd": money, "gpu_hours": hours_text, "energy_mwh": energy_text}.get(
        metric, form.format if form else str)(v)
    return f" (ideal {text})"


def front_table(res: ProcureResult) -> Table:
    """Both fronts in one table, by days: which front each row is on, and the choice."""
    on_cost = {id(r) for r in res.pareto}
    on_energy = {id(r) for r in res.pareto_energy}
    rows = {id(r): r for r in [*res.pareto, *res.pareto_energy]}
    t = Table(title="Pareto fronts: time to train against cost and against energy",
              header_style="bold")
    for col in ("option", "cluster", "days", "cost", "MWh", "MFU", "front", "limits"):
        t.add_column(col, justify="left" if col in ("option", "cluster", "front") else "right")
    for r in sorted(rows.values(), key=lambda r: (r.days, r.cost_usd)):
        front = "+".join(n for n, s in (("cost", on_cost), ("energy", on_energy)) if id(r) in s)
        mark = " *choice*" if _same(r, res.choice) else ""
        t.add_row(escape(f"{r.num_gpus:,} x {r.gpu}"), escape(r.cluster), f"{r.days:,.1f}", money(r.cost_usd),
                  f"{r.energy_mwh:,.0f}", "-" if r.mfu is None else f"{r.mfu:.1%}",
                  front + mark, "met" if r.meets_limits else "no")
    return t


def _same(a: Procured, b: Procured | None) -> bool:
    return b is not None and (a.gpu, a.num_gpus, a.cluster, a.plan) == (
        b.gpu, b.num_gpus, b.cluster, b.plan)


def stats_line(res: ProcureResult) -> str:
    s = res.stats
    return (f"{s['options']} options (template x GPU count): {s['pruned_by_limits']} ruled out "
            f"by lower bounds, {s['solved']} solved, {s['pruned_by_incumbent']} pruned by the "
            f"incumbent, {s['pruned_by_dominance']} by the fronts; {s['solver_calls']} solver "
            f"calls in {s['wall_s']:.1f} s"
            + (f" (--time-limit {s['time_limit_per_solve_s']:g} s is per solve)"
               if "time_limit_per_solve_s" in s else "")
            + (f"; {len(s['untrainable'])} left out: they would not train ("
               f"{s['untrainable'][0]})" if s.get("untrainable") else ""))


def print_procurement(console: Console, res: ProcureResult, pareto: bool) -> None:
    if res.choice is not None:
        console.print(choice_panel(res))
    if pareto:
        table, dropped = fit_table(front_table(res), console.width,
                                   whole=("option", "cost", "days"), words=("cluster",),
                                   drop=("limits", "MFU", "MWh"))
        console.print(table)
        if (note := left_out_note(dropped, console.width)) is not None:
            console.print(note, style="dim", highlight=False)
    console.print(stats_line(res), style="dim", highlight=False)


def procurement_csv(res: ProcureResult) -> str:
    """One row per option solved (its best plan by the objective), plus the choice when it
    is another plan; flags for the fronts, the limits and the choice."""
    rows = list(res.records)
    if res.choice is not None and not any(_same(r, res.choice) for r in rows):
        rows.append(res.choice)
    on_cost = {id(r) for r in res.pareto}
    on_energy = {id(r) for r in res.pareto_energy}
    buf = io.StringIO()
    keys = ["gpu", "num_gpus", "cluster", "days", "cost_usd", "energy_mwh", "gpu_hours", "mfu",
            "iteration_time_s", "usd_per_gpu_hour", "meets_limits", "proven_optimal", "owned",
            "facility_power_mw", "racks", "ports"]
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["choice", *keys, "on_cost_front", "on_energy_front", *CSV_PLAN_FIELDS])
    for r in sorted(rows, key=lambda r: (r.days, r.cost_usd)):
        data = r.to_json()
        plan = data["plan"]
        w.writerow([_same(r, res.choice), *[csv_number(data.get(k)) for k in keys],
                    id(r) in on_cost,
                    id(r) in on_energy,
                    *[json.dumps(plan.get(f)) if isinstance(plan.get(f), dict) else plan.get(f)
                      for f in CSV_PLAN_FIELDS]])
    return buf.getvalue()
