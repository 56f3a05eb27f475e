"""``planner sweep``: a grid of solves or procurements (planner/sweep/), as one table."""

from __future__ import annotations

import contextlib
import signal
from enum import Enum
from typing import Any, Optional

import typer

from rich.markup import escape

from planner.cli.console import check_files, err
from planner.errors import InputError
from planner.workers import signals_raise
from planner.report.sweep import plot_bottlenecks, plot_heatmap
from planner.sweep import expand, load_sweep, run_sweep
from planner.sweep.runners import check_run_options
from planner.sweep.scaling import axis_labels
from planner.sweep.table import done_results, output_format, output_lock


class Backend(str, Enum):
    local = "local"
    ray = "ray"


class PlotKind(str, Enum):
    heatmap = "heatmap"
    bottleneck = "bottleneck"


def _progress(total: int, done: int, quiet: bool = False):
    """A rich progress bar with an ETA on stderr (hidden with --quiet or when stderr is not
    a terminal)."""
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    bar = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("ETA"), TimeRemainingColumn(), console=err,
                   disable=quiet or not err.is_terminal)
    task = bar.add_task("sweep", total=total, completed=done)
    return bar, (lambda _p, _r: bar.advance(task))


def _plot(rows: list[dict[str, Any]], axes: list[str], path: str, kind: PlotKind | None,
          x: str | None, y: str | None, value: str | None, group: str | None,
          force: bool = False, command: str = "solve",
          labels: dict[str, str] | None = None) -> None:
    kind = kind or (PlotKind.heatmap if len(axes) >= 2 else PlotKind.bottleneck)
    if kind == PlotKind.heatmap:
        if len(axes) < 2 and (x is None or y is None):
            raise InputError("--plot heatmap: needs two axes (--x and --y)")
        # a procure sweep asks what it costs; a solve sweep how fast it runs
        default = "cost_usd" if command == "procure" else "iteration_time_s"
        plot_heatmap(rows, x or axes[0], y or axes[1], path, value or default, force=force,
                     labels=labels)
    else:
        plot_bottlenecks(rows, x or axes[-1], path,
                         group=group or (axes[0] if len(axes) >= 2 and x is None else None),
                         force=force, labels=labels)
    err.print(f"plot written to {path}", soft_wrap=True)


def sweep(
    sweep_file: str = typer.Argument(..., metavar="SWEEP.yaml", help="Sweep file: base point "
                                     "and axes (README, What-if sweeps)."),
    out_path: Optional[str] = typer.Option(None, "--out", "-o", help="Results table, .parquet "
                                           "or .csv; points already in it are not run again."),
    backend: Backend = typer.Option(Backend.local, "--backend", help="local (process pool) "
                                    "or ray (Ray tasks; needs the package's ray extra)."),
    address: Optional[str] = typer.Option(None, "--address", help="Ray cluster: auto or "
                                          "ray://HOST:PORT (default: a local Ray instance)."),
    workers: Optional[int] = typer.Option(None, "--workers", "-j", help="Points at once "
                                          "(default: one per CPU)."),
    plot: Optional[str] = typer.Option(None, "--plot", help="Draw a PNG: a heatmap over two "
                                       "axes, or bottleneck bars along one."),
    plot_kind: Optional[PlotKind] = typer.Option(None, "--plot-kind", help="heatmap (default "
                                                 "with two axes or more) or bottleneck."),
    x: Optional[str] = typer.Option(None, "--x", help="Plot axis (default: the first; the "
                                    "last for bottleneck bars)."),
    y: Optional[str] = typer.Option(None, "--y", help="Heatmap's second axis."),
    value: Optional[str] = typer.Option(None, "--value", help="Heatmap value: "
                                        "iteration_time_s (default; cost_usd for a procure "
                                        "sweep), train_days, mfu, ..."),
    group: Optional[str] = typer.Option(None, "--group", help="Bottleneck bars: one panel "
                                        "per value of this axis."),
    force: bool = typer.Option(False, "--force", help="Replace a --plot file that exists "
                               "(--out is resumed, never replaced)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar on stderr."),
) -> None:
    """Run a what-if sweep: every point of the grid is a solve or a procure."""
    check_run_options(backend.value, address, workers)
    if out_path:
        output_format(out_path)
    spec = load_sweep(sweep_file)
    # --out is the resumable table: updated in place, under its lock (planner/sweep/table.py)
    check_files([("--out", out_path), ("--plot", plot)],
                [("the sweep file", sweep_file), *_spec_inputs(spec)], force, keep=("--out",))
    with output_lock(out_path) if out_path else contextlib.nullcontext():
        points = expand(spec, sweep_file)
        done = len(done_results(out_path, points, warn=_warn)) if out_path else 0
        unique = len({p.key for p in points})  # points with the same settings run once
        err.print(f"{len(points)} points ({unique} distinct)"
                  + (f", {done} already in {out_path}" if done else ""), soft_wrap=True)
        bar, tick = _progress(unique, done, quiet)
        with bar, signals_raise(signal.SIGTERM):  # stop the workers and save, as on Ctrl-C
            rows = run_sweep(points, out=out_path, backend=backend.value, address=address,
                             workers=workers, on_result=tick)
    axes = list(points[0].axes)
    _summary(rows, axes, out_path)
    if plot:
        _plot(rows, axes, plot, plot_kind, x, y, value, group, force, spec.command,
              axis_labels(axes, points))


def _warn(message: str) -> None:
    err.print(f"[yellow]warning:[/] {escape(message)}", highlight=False, soft_wrap=True)


def _spec_inputs(spec: Any) -> list[tuple[str, str]]:
    """The files a sweep reads (models, clusters and cluster templates given as paths):
    no output may replace one."""
    out: list[tuple[str, str]] = []
    for name in ("model", "cluster", "clusters"):
        axis = spec.axes.get(name)
        values = [spec.base.get(name), *(axis if isinstance(axis, list) else [])]
        values += [sets.get(name) for axis in spec.axes.values() if isinstance(axis, dict)
                   for sets in axis.values() if isinstance(sets, dict)]
        out += [(f"a sweep's {name}", v.strip()) for value in values if isinstance(value, str)
                for v in value.split(",") if v.strip()]
    return out


def _summary(rows: list[dict[str, Any]], axes: list[str], out_path: str | None) -> None:
    """The table on stdout when not written to a file; counts on stderr."""
    infeasible = sum(r["status"] == "infeasible" for r in rows)
    # a time-limited point without a plan is no proof that nothing fits
    unanswered = sum(r["status"] == "time_limit" and r.get("iteration_time_s") is None
                     for r in rows)
    if out_path:
        err.print(f"{len(rows)} rows written to {out_path} ({infeasible} infeasible"
                  + (f", {unanswered} without a plan at the time limit" if unanswered else "")
                  + ")", soft_wrap=True)
        return
    import csv
    import sys

    cols = ["point_key", *axes, "status", "tp", "pp", "dp", "cp", "iteration_time_s", "mfu",
            "memory_per_gpu_gib", "bottleneck", "train_days", "cost_usd"]
    w = csv.writer(sys.stdout)
    w.writerow(cols)
    for r in rows:
        w.writerow(["" if r.get(c) is None else r.get(c) for c in cols])
