"""Plots people would rather look at than read (matplotlib, written to PNG)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from planner.costmodel.train.evaluator import OFFLOAD_KEY, TIME_KEYS, Estimate
from planner.errors import InputError
from planner.fileio import atomic_output
from planner.report.procure import money, tokens_text

COLORS = {
    "forward": "#4C72B0", "backward": "#55A868", "recompute": "#8172B3",
    "tp_comm": "#C44E52", "cp_comm": "#DD8452", "ep_comm": "#937860",
    "pp_comm": "#DA8BC3", "dp_comm": "#8C8C8C", "bubble": "#CCB974", "optimizer": "#64B5CD",
    "straggler": "#FF9DA7", OFFLOAD_KEY: "#B07AA1",
}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, plt: Any, path: str | Path, *, force: bool = True,
                **kwargs: Any) -> Path:
    """Save ``fig`` to ``path`` through a temporary file renamed over it (never through a
    link, never half a PNG; ``force`` False: not over a file that appeared meanwhile), in
    the format of the path's suffix (PNG without one), then close it."""
    out = Path(path)
    try:
        with atomic_output(out, "--plot", force=force) as tmp:
            try:
                fig.savefig(tmp, format=out.suffix[1:].lower() or "png", **kwargs)
            except ValueError as err:  # "Format 'xyz' is not supported"
                raise InputError(f"--plot {out}: {err}") from None
    finally:
        plt.close(fig)
    return out


def plot_breakdown(items: Sequence[tuple[str, Estimate]], path: str | Path,
                   title: str = "Iteration time breakdown", *, force: bool = True) -> Path:
    """Stacked horizontal bars of the iteration-time components, one bar per plan."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.6 * len(items)))
    labels = [label for label, _ in items]
    left = [0.0] * len(items)
    for key in TIME_KEYS + (OFFLOAD_KEY,):
        vals = [est.time_breakdown_s.get(key, 0.0) for _, est in items]
        if not any(vals):
            continue
        ax.barh(labels, vals, left=left, color=COLORS[key], label=key.replace("_", " "))
        left = [a + b for a, b in zip(left, vals)]
    for y, (_, est) in enumerate(items):
        if est.iteration_time_s:
            mfu = f"  {est.iteration_time_s:.2f} s, MFU {est.mfu:.0%}" if est.mfu else ""
            ax.text(left[y], y, mfu, va="center", fontsize=8)
    ax.set_xlabel("seconds per iteration")
    ax.set_title(title)
    ax.invert_yaxis()
    ax.set_xlim(0, max(left) * 1.3 if left and max(left) > 0 else 1)
    if ax.get_legend_handles_labels()[0]:
        # beside the bars, not below them: below, it sat on the x tick labels
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    else:  # nothing to draw: a plan that cannot be costed has no breakdown; say so
        ax.text(0.5, 0.5, "no time breakdown: the plan cannot be costed", transform=ax.transAxes,
                ha="center", va="center", fontsize=9)
    fig.tight_layout()
    return save_figure(fig, plt, path, force=force, dpi=130, bbox_inches="tight")


def plot_pareto(result: Any, path: str | Path, title: str | None = None, *,
                force: bool = True) -> Path:
    """Time to train against cost and against energy, one point per option solved (its best
    plan by the objective), the Pareto fronts as steps, the limits dashed, the choice
    starred. ``result`` is a :class:`planner.procurement.ProcureResult`."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2))

    records = result.in_view()
    # One colour per GPU type; per cluster template when templates share a GPU (RAMP and a
    # fat tree of A100s).
    by_template = len({r.cluster for r in records}) > len({r.gpu for r in records})

    def group(r) -> str:
        """The legend entry: the GPU type (or template), owned apart from new."""
        return (r.cluster if by_template else r.gpu) + (" (owned)" if r.owned else "")

    groups = sorted({group(r) for r in records})
    cmap = plt.get_cmap("tab10")
    color = {g: cmap(i % 10) for i, g in enumerate(groups)}
    q = result.query
    panels = ((axes[0], "cost_usd", result.pareto, 1e-6, "cost (million USD)"),
              (axes[1], "energy_mwh", result.pareto_energy, 1.0, "energy (MWh)"))
    for ax, key, front, scale, label in panels:
        for g in groups:
            pts = [r for r in records if group(r) == g]
            owned = g.endswith(" (owned)")  # hollow squares: capital already spent
            ax.scatter([r.days for r in pts], [r.value(key) * scale for r in pts], s=28,
                       marker="s" if owned else "o", facecolors="none" if owned else color[g],
                       edgecolors=color[g], label=g, alpha=0.85, zorder=3)
        if front:
            xs = [r.days for r in front]
            ys = [r.value(key) * scale for r in front]
            ax.step(xs, ys, where="post", color="black", lw=1.2, alpha=0.7, zorder=2,
                    label="Pareto front")
            for r in front:
                ax.annotate(f"{r.num_gpus:,}x {r.gpu}" + (f" ({r.cluster})" if by_template
                                                          else "") + (", owned" if r.owned else ""),
                            (r.days, r.value(key) * scale),
                            textcoords="offset points", xytext=(4, 4), fontsize=7)
        if result.choice is not None:
            c = result.choice
            ax.scatter([c.days], [c.value(key) * scale], marker="*", s=260, color="gold",
                       edgecolor="black", zorder=4, label="choice")
        if q.get("days"):
            ax.axvline(q["days"], color="firebrick", ls="--", lw=1, label="deadline")
        if key == "cost_usd" and q.get("budget_usd"):
            ax.axhline(q["budget_usd"] * scale, color="firebrick", ls=":", lw=1, label="budget")
        ax.set_xlabel("days to train")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="upper right")
    limits = [f"deadline {q['days']:g} days" if q.get("days") else "",
              f"budget {money(q['budget_usd'])}" if q.get("budget_usd") else ""]
    fig.suptitle(title or ", ".join(x for x in (
        f"{q['model']} on {tokens_text(q['tokens'])} tokens", *limits,
        f"{q['pricing']} pricing: one point per {'cluster' if by_template else 'GPU type'} "
        "and count (its best plan)") if x))
    fig.tight_layout()
    return save_figure(fig, plt, path, force=force, dpi=130, bbox_inches="tight")
