"""Rich tables for people; the JSON forms live on the result objects."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from planner.costmodel.constants import GiB
from planner.costmodel.train.evaluator import Estimate
from planner.specs.plan import WORLD_DIMS, Plan


def _fmt_s(x: float | None) -> str:
    if x is None:
        return "-"
    if x >= 100:
        return f"{x:,.0f} s"
    if x >= 1:
        return f"{x:.2f} s"
    return f"{x * 1e3:.1f} ms"


def plan_line(plan: Plan) -> str:
    dims = " ".join(f"{d.upper()}{plan.degree(d)}" for d in ("tp", "cp", "pp", "dp", "ep")
                    if plan.degree(d) > 1 or d in ("tp", "pp", "dp"))
    rec = plan.recompute if isinstance(plan.recompute, str) else ",".join(
        f"{k}:{v}" for k, v in plan.recompute.items())
    if plan.expert_tp is not None:
        dims += f" ETP{plan.expert_tp}"
    parts = [dims, f"mbs {plan.microbatch_size}", f"gbs {plan.global_batch_size}",
             f"seq {plan.seq_len}"]
    if plan.cp > 1:
        parts.append(f"CP {plan.cp_comm.replace('_', '-')}")
    if plan.virtual_stages > 1:
        parts.append(f"v{plan.virtual_stages}")
    parts += [f"SP {'on' if plan.sequence_parallel else 'off'}", f"recompute {rec}",
              f"ZeRO-{plan.zero_stage}", plan.dtype]
    off = [k for k, on in (("optimizer", plan.offload_optimizer),
                           ("params", plan.offload_params)) if on]
    if off:
        parts.append(f"offload {' + '.join(off)}")
    if not plan.fused_elementwise:
        parts.append("eager elementwise")
    return " | ".join(parts)


def placement_line(plan: Plan, domain: dict[str, int] | None) -> str:
    if not domain:
        return "-"
    inside = " x ".join(f"{d}{domain[d]}" for d in WORLD_DIMS if domain.get(d, 1) > 1) or "1"
    return f"per NVSwitch domain: {inside}; order {'-'.join(plan.placement.order)}"


def estimate_tables(est: Estimate, status: Text | None = None) -> Group:
    """The summary and breakdown tables of one estimate; ``status`` replaces the
    feasible/INFEASIBLE line (a solve's status: proven optimal or best found)."""
    summary = Table.grid(padding=(0, 2))
    summary.add_column(style="bold")
    summary.add_column()
    if status is None:
        status = Text("feasible", style="green") if est.feasible else Text("INFEASIBLE",
                                                                          style="bold red")
    summary.add_row("status", status)
    summary.add_row("iteration time", _fmt_s(est.iteration_time_s))
    if est.expected_error_note is not None and est.feasible:
        summary.add_row("expected error", Text(est.expected_error_note))  # names: not markup
    if est.memory_per_gpu_bytes is not None:
        summary.add_row(
            "memory per GPU",
            f"{est.memory_per_gpu_bytes / GiB:.1f} GiB of {est.hbm_capacity_bytes / GiB:g} GiB"
            f" (pipeline stage {est.worst_memory_stage})",
        )
    if est.host_memory_per_gpu_bytes and est.host_capacity_bytes is not None:
        summary.add_row(
            "offload tier", f"{est.host_memory_per_gpu_bytes / GiB:.1f} GiB of "
            f"{est.host_capacity_bytes / GiB:g} GiB per GPU")
    if est.mfu is not None:
        summary.add_row("MFU / HFU", f"{est.mfu:.1%} / {est.hfu:.1%}")
        summary.add_row("throughput", f"{est.tokens_per_s:,.0f} tokens/s, "
                        f"{est.tflops_per_gpu:.0f} TFLOP/s per GPU")
    summary.add_row("GPUs, microbatches", f"{est.num_gpus}, {est.num_microbatches:g}")

    parts: list = [summary]
    if est.time_breakdown_s:
        tt = Table(title="iteration time", show_edge=False, header_style="bold")
        tt.add_column("component")
        tt.add_column("time", justify="right")
        tt.add_column("share", justify="right")
        total = est.iteration_time_s or 1.0
        for k, v in est.time_breakdown_s.items():
            if v > 0:
                tt.add_row(k.replace("_", " "), _fmt_s(v), f"{v / total:.1%}")
        tm = Table(title="memory per GPU (worst stage)", show_edge=False, header_style="bold")
        tm.add_column("component")
        tm.add_column("GiB", justify="right")
        for k, v in est.memory_breakdown_bytes.items():
            if v > 0:
                label = "headroom" if k == "reserve" else k.replace("_", " ")
                tm.add_row(label, f"{v / GiB:.2f}")
        grid = Table.grid(padding=(0, 4))
        grid.add_row(tt, tm)
        parts.append(grid)
    if est.reasons:
        parts.append(Text("why it does not fit:", style="bold red"))
        for r in est.reasons:
            parts.append(Text(f"  - {r}"))
    return Group(*parts)


def print_estimate(console: Console, title: str, plan: Plan, est: Estimate,
                   domain: dict[str, int] | None = None, status: Text | None = None) -> None:
    body = Group(Text(plan_line(plan)), Text(placement_line(plan, domain), style="dim"),
                 Text(""), estimate_tables(est, status))
    console.print(Panel(body, title=Text(title), expand=False))  # names are not markup


def solve_status(res) -> Text:
    """A solve's status for the result box: proven optimal, or the best plan found."""
    return Text(res.status_text, style="green" if res.status == "optimal" else "bold yellow")


def solver_lines(res) -> list[str]:
    """The footer of ``planner solve``: the status and the optimality gap over the space,
    then how far the formulation's value for the returned plan is below the evaluator's
    (a property of the model, not an optimality gap)."""
    units = res.objective.units_for(res.tokens)
    setup = res.stats.get("setup_s")
    stats = res.stats
    enumerated = stats.get("plans_enumerated")
    # no model was built when presolve left few plans: say so, not the backend's name alone
    who = (f"presolve bound + {enumerated:,} plans costed exactly ({res.backend} not needed)"
           if enumerated else res.backend)
    line = (f"{who}: {res.status_text} in {res.solve_time_s:.2f} s"
            f"{'' if setup is None else f' (set-up {setup:.2f} s)'} over "
            f"{res.space_size:,} plans; {res.objective} = {res.best.objective:.6g} {units}; ")
    opt = res.optimality_gap
    if res.status == "optimal":
        line += "optimality gap 0 (proven)"
    elif opt is None:
        line += "optimality gap unknown (stopped before bounding the whole space)"
    else:
        line += f"optimality gap at most {opt:.1e} (bound {res.proven_bound:.6g})"
    lines = [line]
    diff = res.model_vs_evaluator_rel_diff
    detail = ""
    if (res.best.solver_objective is not None and res.backend != "exhaustive" and diff is not None
            and not enumerated):
        detail = (f"model vs evaluator: the formulation's lower bound for this plan is "
                  f"{res.best.solver_objective:.6g}, {diff:.1e} (relative) below the "
                  "evaluator's value")
    if "points_in_model" in stats:
        how = (f"their {stats['plans_enumerated']:,} plans costed one by one, no model"
               if stats.get("plans_enumerated") else f"{stats['solver_calls']} solves")
        detail += (f"{'; ' if detail else ''}{stats['points_in_model']} of {stats['points']} "
                   f"configurations after presolve, {how}, "
                   f"{stats['evaluations']} exact evaluations")
    return lines + ([detail] if detail else [])


def _totals_text(t: dict) -> str:
    cost = "" if t["cost_usd"] is None else f", ${t['cost_usd']:,.0f}"
    return (f"{t['days']:,.2f} days, {t['gpu_hours']:,.0f} GPU-hours, "
            f"{t['energy_mwh']:,.1f} MWh{cost}")


def goodput_text(g: dict) -> str:
    """One line on a goodput record (planner/costmodel/train/goodput.py ``Goodput.to_json``)."""
    if g["mtbf_s"] is None:
        return "goodput 100% (no interruptions)"
    return (f"goodput {g['fraction']:.1%}: an interruption every {g['mtbf_s'] / 3600:.2f} h, "
            f"{g['mode']} checkpoint of {g['checkpoint_gib']:,.0f} GiB every "
            f"{_fmt_s(g['interval_s'])} (blocks {_fmt_s(g['blocking_s'])}), "
            f"{_fmt_s(g['lost_per_failure_s'])} lost per interruption")


def solve_tables(console: Console, res) -> None:
    """Solver summary and the alternatives of ``planner solve``."""
    units = res.objective.units_for(res.tokens)
    for line in solver_lines(res):
        console.print(line)
    totals = res.totals()
    if totals:
        console.print(f"training on {totals['tokens']:.4g} tokens with this plan: "
                      f"{totals['iterations']:,.0f} iterations, {_totals_text(totals)}"
                      + ("" if totals["goodput"] is None else " with failures and checkpoints"),
                      highlight=False)
        if totals["goodput"] is not None:
            console.print(f"  ideal (no failures): {_totals_text(totals['ideal'])}; "
                          f"{goodput_text(totals['goodput'])}", highlight=False)
    if res.status != "optimal":
        limit = "" if res.time_limit_s is None else f" of {res.time_limit_s:g} s"
        setup = res.stats.get("setup_s")
        spent = "" if setup is None else f" (set-up took {setup:.2f} s of it)"
        console.print(f"[yellow]not proven optimal[/]: the search stopped at the time limit"
                      f"{limit}{spent}; this is the best plan found so far; raise --time-limit "
                      "for a proof")
    if len(res.plans) > 1:
        t = Table(title=f"top {len(res.plans)} plans", header_style="bold")
        for col in ("#", "plan", "placement", units, "iteration", "MFU", "memory GiB"):
            t.add_column(col, justify="right" if col not in ("plan", "placement") else "left")
        for i, p in enumerate(res.plans, 1):
            dom = p.plan.placement.domain or {}
            inside = " x ".join(f"{d}{v}" for d, v in dom.items() if v > 1) or "order"
            e = p.estimate
            t.add_row(str(i), plan_line(p.plan), inside, f"{p.objective:.6g}",
                      _fmt_s(e.iteration_time_s), f"{e.mfu:.1%}",
                      f"{e.memory_per_gpu_bytes / GiB:.1f}")
        console.print(t)


def print_mixed(console: Console, res: Any) -> None:
    """A mixed-cluster solve (planner.orchestration.mixed.MixedSolveResult): each pool
    alone, and the plan across pools with its stages."""
    console.print(f"{res.status} ({'stages across pools' if res.best_kind == 'mixed' else 'one pool'}):"
                  f" {res.iteration_time_s:.3f} s per iteration", highlight=False)
    for pool, s in res.single.items():
        if s is None:
            console.print(f"  {escape(pool)} alone: nothing fits", highlight=False)
            continue
        p = s.plan
        console.print(f"  {escape(pool)} alone: {s.estimate.iteration_time_s:.3f} s (tp={p.tp} "
                      f"cp={p.cp} pp={p.pp} dp={p.dp} v={p.virtual_stages}; "
                      f"{res.single_status[pool]})", highlight=False)
    if res.mixed is None:
        return
    p, est = res.mixed.plan.plan, res.mixed.estimate
    console.print(f"  across pools: tp={p.tp} cp={p.cp} pp={p.pp} dp={p.dp} "
                  f"mbs={p.microbatch_size} zero={p.zero_stage} recompute={p.recompute} "
                  f"({res.mixed_status})", highlight=False)
    for st in est.stages:
        console.print(f"    stage {st.rank}: {escape(st.pool)} ({st.gpu}) {st.layers} layers, "
                      f"{st.stage_time_s * 1e3:.1f} ms per microbatch, "
                      f"{st.memory_bytes / 2**30:.1f} of {st.hbm_bytes / 2**30:.0f} GiB",
                      highlight=False)
