"""The serving Pareto front as a plot: output tokens/s per GPU against tokens/s per user."""

from __future__ import annotations

from pathlib import Path

from planner.report.plots import _pyplot, save_figure


def plot_serve_pareto(front: list[dict], path: str | Path, title: str = "Serving", *,
                      force: bool = True) -> Path:
    """One marker per layout on the front, coloured by GPU type, joined in order of
    per-user speed."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs = [p["tokens_per_s_per_user"] for p in front]
    ys = [p["tokens_per_s_per_gpu"] for p in front]
    ax.plot(xs, ys, color="#999999", lw=1, zorder=1)
    for gpu in sorted({p["gpu"] for p in front}):
        pts = [p for p in front if p["gpu"] == gpu]
        ax.scatter([p["tokens_per_s_per_user"] for p in pts],
                   [p["tokens_per_s_per_gpu"] for p in pts], label=gpu, zorder=2)
    for p in front:
        q = p["plan"]
        ax.annotate(f"tp{q['tp']}pp{q['pp']} {q['weight_dtype']} B{q['concurrency']}",
                    (p["tokens_per_s_per_user"], p["tokens_per_s_per_gpu"]), fontsize=6,
                    xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("output tokens/s per user (1 / TPOT)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.set_title(f"{title}: Pareto front within the SLOs")
    ax.grid(alpha=0.3)
    if front:
        ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, plt, path, force=force, dpi=130)
