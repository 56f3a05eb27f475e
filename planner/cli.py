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
    from planner.plans import build_plan

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
