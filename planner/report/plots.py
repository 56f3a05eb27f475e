"""Plots people would rather look at than read (matplotlib, written to PNG)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from planner.costmodel.evaluator import TIME_KEYS, Estimate

COLORS = {
    "forward": "#4C72B0", "backward": "#55A868", "recompute": "#8172B3",
    "tp_comm": "#C44E52", "cp_comm": "#DD8452", "ep_comm": "#937860",
    "pp_comm": "#DA8BC3", "dp_comm": "#8C8C8C", "bubble": "#CCB974", "optimizer": "#64B5CD",
}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_breakdown(items: Sequence[tuple[str, Estimate]], path: str | Path,
                   title: str = "Iteration time breakdown") -> Path:
    """Stacked horizontal bars of the iteration-time components, one bar per plan."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.6 * len(items)))
    labels = [label for label, _ in items]
    left = [0.0] * len(items)
    for key in TIME_KEYS:
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
    ax.legend(ncol=5, fontsize=7, loc="lower center", bbox_to_anchor=(0.5, -0.25 - 0.1 / max(1, len(items))),
              frameon=False)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return out
