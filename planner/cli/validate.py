"""``planner validate``: the calibration set, predicted against published."""

from __future__ import annotations

import typer
from rich.table import Table

from planner.cli.console import _emit_json, out


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
