"""The ``planner`` command line.

Exit codes: 0 ok, 1 infeasible (reasons printed), 2 bad input.
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from planner import __version__, catalog
from planner.errors import InfeasibleError, InputError, PlannerError

app = typer.Typer(
    name="planner",
    help="Plan distributed training of large transformers: evaluate a plan, find the best "
    "one (solve), or choose what to buy (procure).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)


def _version(value: bool) -> None:
    if value:
        print(f"planner {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    pass


def _emit_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=False))


def _overrides(sets: list[str], shortcuts: dict[str, Any]) -> list[tuple[str, Any]]:
    from planner.specs.loaders import parse_override

    pairs = [parse_override(s) for s in sets]
    pairs += [(k, v) for k, v in shortcuts.items() if v is not None]
    return pairs


# ---- evaluate ------------------------------------------------------------------------
MODEL_HELP = "Catalog name (`planner catalog models`), model YAML, or Hugging Face config.json."
CLUSTER_HELP = "Catalog name (`planner catalog clusters`) or cluster YAML."


@app.command()
def evaluate(
    model: str = typer.Option(..., "--model", "-m", help=MODEL_HELP),
    cluster: str = typer.Option(..., "--cluster", "-c", help=CLUSTER_HELP),
    plan: Optional[str] = typer.Option(None, "--plan", "-p", help="Plan YAML (see docs/formats.md)."),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="Resize the cluster's outermost level."),
    set_: list[str] = typer.Option([], "--set", help="Override a plan field: FIELD=VALUE (repeatable)."),
    tp: Optional[int] = typer.Option(None, "--tp", help="Tensor-parallel degree."),
    pp: Optional[int] = typer.Option(None, "--pp", help="Pipeline-parallel degree."),
    dp: Optional[int] = typer.Option(None, "--dp", help="Data-parallel degree (default: GPUs / (tp cp pp))."),
    cp: Optional[int] = typer.Option(None, "--cp", help="Context-parallel degree."),
    mbs: Optional[int] = typer.Option(None, "--mbs", help="Microbatch size (sequences)."),
    global_batch: Optional[int] = typer.Option(None, "--global-batch", help="Global batch (sequences)."),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help="Sequence length (tokens)."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="bf16, fp16 or fp8."),
    json_: bool = typer.Option(False, "--json", help="Print the stable JSON object instead of tables."),
    plot: Optional[str] = typer.Option(None, "--plot", help="Write a stacked-bar PNG of the time breakdown."),
) -> None:
    """Predict what one training plan costs: iteration time, memory, MFU and breakdowns."""
    from planner.api import evaluate_plan
    from planner.costmodel.network import PlacementError, domain_factors
    from planner.report.text import print_estimate
    from planner.specs.loaders import load_cluster, load_model

    m = load_model(model)
    c = load_cluster(cluster, gpus)
    warnings: list[str] = []
    shortcuts = dict(tp=tp, pp=pp, dp=dp, cp=cp, microbatch_size=mbs,
                     global_batch_size=global_batch, seq_len=seq_len, dtype=dtype)
    from planner.specs.plan_base import build_plan

    p = build_plan(m, c, plan, _overrides(set_, shortcuts), warnings)
    for w in warnings:
        err.print(f"[yellow]warning:[/] {escape(w)}")
    est = evaluate_plan(m, c, p)
    if plot:
        from planner.report.plots import plot_breakdown

        plot_breakdown([(f"{m.name} on {c.num_gpus}x {c.gpu.name}", est)], plot)
    if json_:
        _emit_json({"plan": p.to_dict(), **est.to_json()})
    else:
        try:
            domain = domain_factors(p, c.domain_size)
        except PlacementError:
            domain = None
        print_estimate(out, f"{m.name} on {c.name} ({c.num_gpus}x {c.gpu.name})", p, est, domain)
        if plot:
            out.print(f"wrote {plot}")
    if not est.feasible:
        raise typer.Exit(1)


# ---- catalog -------------------------------------------------------------------------
class CatalogKind(str, Enum):
    gpus = "gpus"
    clusters = "clusters"
    models = "models"


@app.command("catalog")
def catalog_cmd(
    kind: CatalogKind = typer.Argument(..., help="gpus, clusters or models"),
    json_: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List the shipped GPUs, clusters or models."""
    from planner.specs.loaders import load_cluster, load_gpu, load_model

    rows: list[dict[str, Any]] = []
    if kind is CatalogKind.gpus:
        for n in catalog.names("gpus"):
            g = load_gpu(n)
            rows.append(dict(name=g.name, bf16_tflops=g.peak_flops("bf16") / 1e12,
                             fp8_tflops=g.peak_tflops.get("fp8"), hbm_gib=g.hbm_gib,
                             hbm_TBps=g.hbm_TBps, nvlink_GBps=g.nvlink_GBps, tdp_w=g.tdp_w,
                             usd_per_gpu_hour=g.price_per_gpu_hour, aliases=g.aliases))
    elif kind is CatalogKind.clusters:
        for n in catalog.names("clusters"):
            c = load_cluster(n)
            topo = " > ".join(f"{lv.name}({lv.size}, {lv.bandwidth_GBps:g} GB/s)" for lv in c.topology)
            rows.append(dict(name=c.name, gpu=c.gpu.name, num_gpus=c.num_gpus, topology=topo,
                             aliases=c.aliases))
    else:
        from planner.costmodel.layer import total_params

        for n in catalog.names("models"):
            mm = load_model(n)
            rows.append(dict(name=mm.name, params_b=round(total_params(mm) / 1e9, 2),
                             layers=mm.num_layers, hidden=mm.hidden_size,
                             heads=f"{mm.num_attention_heads}/{mm.kv_heads}",
                             ffn=f"{mm.ffn_hidden_size} {mm.ffn_type}", vocab=mm.vocab_size,
                             seq_len=mm.seq_len, moe=bool(mm.moe), aliases=mm.aliases))
    if json_:
        _emit_json(rows)
        return
    table = Table(title=f"catalog: {kind.value}", header_style="bold")
    for col in rows[0]:
        table.add_column(col)
    for r in rows:
        table.add_row(*[", ".join(v) if isinstance(v, list) else ("-" if v is None else str(v))
                        for v in r.values()])
    out.print(table)


# ---- validate ------------------------------------------------------------------------
@app.command()
def validate(json_: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Run the calibration set: predicted against published iteration time and memory."""
    from planner.validation import run_validation

    rep = run_validation()
    if json_:
        _emit_json(rep.to_json())
        return
    t = Table(title=f"iteration time, predicted vs published ({rep.source})", header_style="bold")
    for col in ("model", "mode", "predicted s", "published s", "error"):
        t.add_column(col, justify="right" if col not in ("model", "mode") else "left")
    for r in rep.time_rows:
        t.add_row(r.model, r.mode, f"{r.predicted_s:.2f}", f"{r.published_s:.2f}", f"{r.error:+.1%}")
    out.print(t)
    out.print(f"MAPE {rep.mape:.2%}, max |error| {rep.max_error:.2%}  "
              "(Calculon on the same set: 3.65% mean, 8.87% max)")
    tm = Table(title="memory per GPU, first stage (Figure 1)", header_style="bold")
    for col in ("model", "quantity", "predicted GiB", "published GiB", "error"):
        tm.add_column(col, justify="right" if "GiB" in col or col == "error" else "left")
    for r in rep.memory_rows:
        tm.add_row(r.model, r.quantity, f"{r.predicted_gib:.2f}", f"{r.published_gib:.2f}",
                   f"{r.error:+.1%}")
    out.print(tm)


# ---- solve ---------------------------------------------------------------------------
class LazyStatus:
    """A spinner on stderr that appears only once a search has run for a second."""

    def __init__(self, console: Console, enabled: bool):
        import time

        self.console, self.enabled = console, enabled and console.is_terminal
        self.t0 = time.perf_counter()
        self.status = None
        self.last = "starting"

    def __call__(self, message: str) -> None:
        import time

        self.last = message
        if not self.enabled:
            return
        if self.status is None and time.perf_counter() - self.t0 > 1.0:
            self.status = self.console.status(escape(message))
            self.status.start()
        elif self.status is not None:
            self.status.update(escape(message))

    def stop(self) -> None:
        if self.status is not None:
            self.status.stop()


class Objective(str, Enum):
    time = "time"
    tokens = "tokens"
    gpu_hours = "gpu-hours"
    energy = "energy"
    cost = "cost"


class BackendName(str, Enum):
    cpsat = "cpsat"
    milp = "milp"
    exhaustive = "exhaustive"


@app.command()
def solve(
    model: str = typer.Option(..., "--model", "-m", help=MODEL_HELP),
    cluster: str = typer.Option(..., "--cluster", "-c", help=CLUSTER_HELP),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="Resize the cluster's outermost level."),
    objective: Objective = typer.Option(Objective.time, "--objective", help="What to minimize."),
    backend: BackendName = typer.Option(BackendName.cpsat, "--backend",
                                        help="cpsat (default), milp, or exhaustive (brute force)."),
    time_limit: float = typer.Option(60.0, "--time-limit", help="Seconds before giving up the proof."),
    top: int = typer.Option(1, "--top", help="Return the K best distinct plans."),
    fix: list[str] = typer.Option([], "--fix", help="Fix a plan field: FIELD=VALUE (repeatable), "
                                  "e.g. --fix tp=8 --fix recompute=full --fix placement.domain.tp=8."),
    plan: Optional[str] = typer.Option(None, "--plan", "-p", help="Partial plan YAML: its fields are fixed."),
    global_batch: Optional[int] = typer.Option(None, "--global-batch", help="Global batch (sequences); default from the model."),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help="Sequence length; default from the model."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="bf16, fp16 or fp8; default from the model."),
    tokens: Optional[float] = typer.Option(None, "--tokens", help="Token budget: report totals (days, GPU-hours, MWh, USD)."),
    out_path: Optional[str] = typer.Option(None, "--out", help="Write the best plan as a plan YAML."),
    json_: bool = typer.Option(False, "--json", help="Print one JSON object."),
    verbose: bool = typer.Option(False, "--verbose", help="Show the solver log."),
    no_presolve: bool = typer.Option(False, "--no-presolve", help="Skip the bound presolve (slower)."),
    allow_idle_gpus: bool = typer.Option(False, "--allow-idle-gpus", help="Plans may leave GPUs idle."),
    even_pipeline: bool = typer.Option(False, "--even-pipeline", help="Layers must divide pp x virtual stages."),
    max_microbatch: int = typer.Option(16, "--max-microbatch", help="Largest microbatch to consider."),
    max_virtual_stages: int = typer.Option(8, "--max-virtual-stages", help="Most interleaved chunks per GPU."),
) -> None:
    """Find the best parallelization plan, proven optimal over the search space."""
    import yaml

    from formulations.space import SpaceOptions
    from planner.costmodel.network import PlacementError, domain_factors
    from planner.report.text import print_estimate, solve_tables
    from planner.orchestration import solve as run_solve
    from planner.specs.loaders import apply_overrides, load_cluster, load_model, load_plan_dict, parse_override

    m = load_model(model)
    c = load_cluster(cluster, gpus)
    fixed: dict[str, Any] = load_plan_dict(plan) if plan else {}
    fixed = apply_overrides(fixed, [parse_override(f) for f in fix])
    base = {k: v for k, v in dict(global_batch_size=global_batch, seq_len=seq_len,
                                  dtype=dtype).items() if v is not None}
    opts = SpaceOptions(max_microbatch=max_microbatch, max_virtual_stages=max_virtual_stages,
                        allow_idle_gpus=allow_idle_gpus, allow_uneven=not even_pipeline)
    status = LazyStatus(err, not json_)
    log = (lambda line: err.print(escape(line), highlight=False)) if verbose else None
    try:
        res = run_solve(m, c, fixed=fixed, base=base, objective=objective.value.replace("-", "_"),
                        backend=backend.value, top_k=top, time_limit_s=time_limit,
                        presolve=not no_presolve, options=opts, tokens=tokens,
                        progress=status, log=log)
    except InfeasibleError as e:
        if json_:  # scripts still get one object, then the reasons on stderr and exit 1
            _emit_json({"plan": None, "estimate": None,
                        "solver": {"backend": backend.value, "status": "infeasible",
                                   "objective": objective.value.replace("-", "_")},
                        "alternatives": [], "message": str(e), "reasons": e.reasons,
                        "hints": e.hints})
        raise
    finally:
        status.stop()
    best = res.best
    if out_path:
        with open(out_path, "w") as fh:
            yaml.safe_dump(best.plan.to_dict(), fh, sort_keys=False)
    if json_:
        _emit_json(res.to_json())
        return
    try:
        domain = domain_factors(best.plan, c.domain_size)
    except PlacementError:
        domain = None
    print_estimate(out, f"best plan: {m.name} on {c.name} ({c.num_gpus}x {c.gpu.name})",
                   best.plan, best.estimate, domain)
    solve_tables(out, res)
    if out_path:
        out.print(f"wrote {out_path}")


# ---- collective (planner/cli_collective.py) -------------------------------------------
from planner.cli_collective import collective as _collective  # noqa: E402

app.command("collective")(_collective)

# ---- procure (planner/cli_procure.py) -----------------------------------------------------
from planner.cli_procure import procure as _procure  # noqa: E402

app.command("procure")(_procure)


def main() -> None:
    try:
        app()
    except InfeasibleError as e:
        err.print(f"[bold red]infeasible:[/] {escape(str(e))}")
        for r in e.reasons:
            err.print(f"  - {escape(r)}")
        for h in e.hints:
            err.print(f"  [cyan]hint:[/] {escape(h)}")
        sys.exit(e.exit_code)
    except (InputError, PlannerError) as e:
        err.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False)
        sys.exit(e.exit_code)


if __name__ == "__main__":  # pragma: no cover
    main()
