"""Sweep plots: heatmaps of the best value over two axes (as the LBNL figures: Subramanian
et al. 2024, Figs. A5-A6) and bottleneck bars along a scaling axis (as MAD-Max: Hsia et
al., ISCA 2024, Figs. 19-20). Both take the sweep table's rows (dicts)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

from planner.errors import InputError
from planner.report.plots import _pyplot, save_figure

#: the limiting terms of a row (planner/sweep/point.py) and their colours
TERM_COLORS = {"compute": "#4C72B0", "memory": "#55A868", "network": "#C44E52",
               "bubble": "#CCB974", "straggler": "#FF9DA7"}
LABELS = {"iteration_time_s": "best iteration time (s)", "train_days": "days to train",
          "cost_usd": "cost (USD)", "mfu": "MFU", "energy_mwh": "energy (MWh)",
          "gpu_hours": "GPU-hours"}
#: values where higher is better (the best row maximizes them)
HIGHER_IS_BETTER = ("mfu", "tokens_per_s")


def _check_axis(rows: Sequence[dict[str, Any]], name: str, option: str) -> None:
    if not rows or name not in rows[0]:
        have = ", ".join(k for k in (rows[0] if rows else {}) if k != "point_key")
        raise InputError(f"{option} {name!r}: not a column of the table; expected one of {have}")


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def _order(values: list[Any]) -> list[Any]:
    """Axis values in order: numbers ascending, labels as first seen."""
    uniq = list(dict.fromkeys(values))
    if all(isinstance(v, (int, float)) for v in uniq):
        return sorted(uniq)
    return uniq


def best_by(rows: Sequence[dict[str, Any]], keys: Sequence[str], value: str
            ) -> dict[tuple, dict[str, Any]]:
    """The best feasible row per combination of ``keys`` (over every other axis)."""
    sign = -1.0 if value in HIGHER_IS_BETTER else 1.0
    best: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        v = _num(r.get(value))
        if v is None:
            continue
        k = tuple(r[a] for a in keys)
        if k not in best or sign * v < sign * float(best[k][value]):
            best[k] = r
    return best


def plot_heatmap(rows: Sequence[dict[str, Any]], x: str, y: str, path: str | Path,
                 value: str = "iteration_time_s", title: str | None = None, *,
                 force: bool = True, labels: dict[str, str] | None = None) -> Path:
    """The best ``value`` for each (x, y) over the other axes; cells with no feasible
    point are grey and marked. ``labels``: axis titles by axis name (what a factor
    scales and its base, planner/sweep/scaling.py axis_labels); the names otherwise."""
    for name, opt in ((x, "--x"), (y, "--y"), (value, "--value")):
        _check_axis(rows, name, opt)
    xs, ys = _order([r[x] for r in rows]), _order([r[y] for r in rows])
    best = best_by(rows, (x, y), value)
    import numpy as np

    grid = np.full((len(ys), len(xs)), np.nan)
    for (xv, yv), r in best.items():
        grid[ys.index(yv), xs.index(xv)] = float(r[value])
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(xs), 1.0 + 0.6 * len(ys)))
    cmap = plt.get_cmap("viridis").with_extremes(bad="#DDDDDD")
    if value not in HIGHER_IS_BETTER:  # the best cells are bright either way
        cmap = cmap.reversed()
    im = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, aspect="auto", origin="lower")
    for i in range(len(ys)):
        for j in range(len(xs)):
            v = grid[i, j]
            bright = np.isnan(v) or (im.norm(v) > 0.5) == (value in HIGHER_IS_BETTER)
            ax.text(j, i, "n/f" if np.isnan(v) else f"{v:.3g}", ha="center", va="center",
                    fontsize=7, color="black" if bright else "white")
    ax.set_xticks(range(len(xs)), [f"{v:g}" if isinstance(v, float) else str(v) for v in xs])
    ax.set_yticks(range(len(ys)), [f"{v:g}" if isinstance(v, float) else str(v) for v in ys])
    ax.set_xlabel((labels or {}).get(x, x))
    ax.set_ylabel((labels or {}).get(y, y))
    fig.colorbar(im, ax=ax, label=LABELS.get(value, value))
    # the legend for the n/f mark only where a cell carries it
    nf = " (n/f: nothing fits)" if np.isnan(grid).any() else ""
    names = {a: (labels or {}).get(a, a).split(",")[0] for a in (x, y)}  # no base
    ax.set_title(title or f"{LABELS.get(value, value)} over {names[x]} x {names[y]}{nf}",
                 fontsize=9)
    return _save(fig, plt, path, force)


def plot_bottlenecks(rows: Sequence[dict[str, Any]], x: str, path: str | Path,
                     group: str | None = None, title: str | None = None, *,
                     force: bool = True, labels: dict[str, str] | None = None) -> Path:
    """Stacked bars of the best plan's limiting terms (compute, memory, network, pipeline
    bubble) per value of ``x``, one panel per value of ``group``; each bar is labelled
    with its speed-up over the panel's first bar and its bottleneck."""
    _check_axis(rows, x, "--x")
    if group is not None:
        _check_axis(rows, group, "--group")
    groups = _order([r[group] for r in rows]) if group else [None]
    xs = _order([r[x] for r in rows])
    best = best_by(rows, (group, x) if group else (x,), "iteration_time_s")
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(groups), figsize=(1.5 + 2.6 * len(groups), 3.6),
                             sharey=True, squeeze=False)
    for ax, g in zip(axes[0], groups):
        _bottleneck_panel(ax, [best.get((g, v) if group else (v,)) for v in xs], xs)
        ax.set_title(str(g) if group else "", fontsize=9)
        ax.set_xlabel((labels or {}).get(x, x))
    axes[0][0].set_ylabel("seconds per iteration")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, frameon=False, ncol=4, loc="lower center",
               bbox_to_anchor=(0.5, -0.06))
    fig.suptitle(title or f"What limits the optimum along {x}", fontsize=10)
    return _save(fig, plt, path, force)


def _bottleneck_panel(ax: Any, picked: list[dict[str, Any] | None], xs: list[Any]) -> None:
    base = next((r["iteration_time_s"] for r in picked if r), None)
    bottom = [0.0] * len(xs)
    for term, color in TERM_COLORS.items():
        vals = [float(r[f"t_{term}_s"]) if r else 0.0 for r in picked]
        ax.bar(range(len(xs)), vals, bottom=bottom, color=color, label=term)
        bottom = [a + b for a, b in zip(bottom, vals)]
    for i, r in enumerate(picked):
        text = "n/f" if r is None else f"{base / r['iteration_time_s']:.2f}x\n{r['bottleneck']}"
        ax.text(i, bottom[i], text, ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(xs)), [f"{v:g}" if isinstance(v, float) else str(v) for v in xs])
    ax.set_ylim(0, max(bottom + [1e-9]) * 1.3)


def _save(fig: Any, plt: Any, path: str | Path, force: bool) -> Path:
    fig.tight_layout()
    return save_figure(fig, plt, path, force=force, dpi=130, bbox_inches="tight")
