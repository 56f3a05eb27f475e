"""The serving Pareto front as a plot: output tokens/s per GPU against tokens/s per user."""

from __future__ import annotations

import math
from pathlib import Path

from planner.report.plots import _pyplot, save_figure

#: The serving calibration set: TensorRT-LLM v0.6.1 on H100 SXM with FP8 weights
#: (hardware_catalog/calibration/trtllm_serving_h100.yaml; docs/serving.md, Calibration).
CALIBRATED_GPUS = ("h100-sxm",)
CALIBRATED_WEIGHTS = ("fp8",)


def serve_notes(plan, model_has_moe: bool = False, model_has_mla: bool = False
                ) -> tuple[list[str], list[str]]:
    """(calibration notes, quantization notes) of a serving plan: what it uses beyond the
    serving calibration set, and which accuracy-changing weight formats it chose."""
    calib, quant = [], []
    pools = [("", plan)] if plan.prefill is None else [("decode pool: ", plan),
                                                       ("prefill pool: ", plan.prefill)]
    if plan.prefill is not None:
        calib.append("disaggregated prefill/decode pools are not calibrated (no measured "
                     "rows): the KV transfer and the pools' queueing are modelled only")
    if model_has_moe or model_has_mla:
        calib.append("MoE and MLA serving are not calibrated (no measured rows)")
    for label, p in pools:
        gpu = str(p.gpu)
        if gpu.lower() not in CALIBRATED_GPUS:
            calib.append(f"{label}{gpu}: serving is calibrated on H100 only (TensorRT-LLM "
                         "v0.6.1 FP8 rows); its figures use the training-fitted efficiencies")
        if p.weight_dtype in ("int4", "fp4"):
            calib.append(f"{label}weights {p.weight_dtype} are not calibrated (no measured "
                         "rows); expect the prediction to be optimistic")
            quant.append(f"{label}weights {p.weight_dtype}: 4-bit quantization changes the "
                         "model's accuracy; check it on your evaluations")
        elif p.weight_dtype == "fp8":
            quant.append(f"{label}weights fp8: FP8 quantization (usually a small accuracy "
                         "change); --weight-dtypes bf16 keeps the model's weights")
        elif p.weight_dtype not in CALIBRATED_WEIGHTS:
            calib.append(f"{label}weights {p.weight_dtype}: the serving set measures FP8 "
                         "weights; other widths use the same kernels' rooflines")
    return list(dict.fromkeys(calib)), list(dict.fromkeys(quant))


def time_limit_line(solver: dict) -> str | None:
    """What a time-limited answer is worth: how far from the best possible at most (the
    solver's gap), or that this is unknown; None for a proven answer."""
    if solver.get("status") != "time_limit":
        return None
    gap = solver.get("gap")
    how = (" (the solver had found none: a fleet of one layout per pool read off the tables)"
           if solver.get("found_by") == "tables" else "")
    if solver.get("tables_complete") is False:
        return (f"time limit reached while tabulating: best of the {solver['rows']:,} layouts "
                f"tabulated{how}, gap unknown (the rest of the search space was left out)")
    if gap is None:
        return f"time limit reached: best found{how}, gap unknown (no bound from the solver)"
    pct = math.ceil(gap * 1e4) / 100  # rounded up: "within" must hold
    return f"time limit reached: best found{how}, within {pct:,.2f} % of optimal"


#: where a label may sit, in points from its marker (first that fits wins)
LABEL_OFFSETS = ((4, 4), (4, -10), (-4, 4), (-4, -10), (0, 8), (0, -14))


def point_labels(front: list[dict]) -> list[str]:
    """A label per point: the layout (``tp8pp1 fp8 B16``), with the plan fields that tell
    apart points whose layouts read the same (``kv_dtype fp8``), so that no two points
    share one."""
    def base(p: dict) -> str:
        q = p["plan"]
        return f"{p['gpu']} tp{q['tp']}pp{q['pp']} {q['weight_dtype']} B{q['concurrency']}"

    heads = [base(p) for p in front]
    if len({p["gpu"] for p in front}) == 1:  # the legend names the one GPU type
        heads = [h.split(" ", 1)[1] for h in heads]
    labels = list(heads)
    for head in set(heads):
        same = [i for i, h in enumerate(heads) if h == head]
        if len(same) < 2:
            continue
        plans = [front[i]["plan"] for i in same]
        keys = [k for k in plans[0] if not isinstance(plans[0][k], (dict, list))
                and len({repr(q.get(k)) for q in plans}) > 1]
        for i, q in zip(same, plans):
            labels[i] = head + "".join(f" {k} {q.get(k)}" for k in keys)
    for i, text in enumerate(labels):  # still the same (plans alike in every scalar)
        if labels.count(text) > 1:
            labels[i] = f"{text} #{labels[:i + 1].count(text)}"
    return labels


def _place_labels(fig, ax, front: list[dict], labels: list[str]) -> int:
    """Annotate the points whose labels fit inside the axes without touching another
    label or the legend, ends of the front first; returns how many were placed."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    inside = ax.get_window_extent(r)
    taken = [ax.get_legend().get_window_extent(r)] if ax.get_legend() else []
    # the markers too: a label over another point hides it
    from matplotlib.transforms import Bbox

    half = 3.5 * fig.dpi / 72  # the scatter marker's radius, 3.5 points
    taken += [Bbox.from_extents(x - half, y - half, x + half, y + half)
              for x, y in ax.transData.transform(
                  [(p["tokens_per_s_per_user"], p["tokens_per_s_per_gpu"]) for p in front])]
    n = len(front)
    # the two ends, then ever finer halvings: a spread of the front before its crowd
    placed = 0
    for i in dict.fromkeys([0, n - 1, *_spread(n)] if n > 1 else range(n)):
        p = front[i]
        for dx, dy in LABEL_OFFSETS:
            t = ax.annotate(labels[i], (p["tokens_per_s_per_user"], p["tokens_per_s_per_gpu"]),
                            fontsize=6, xytext=(dx, dy), textcoords="offset points",
                            ha="left" if dx > 0 else "right" if dx < 0 else "center")
            box = t.get_window_extent(r)
            fits = (inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0
                    and box.y1 <= inside.y1)
            if fits and not any(box.overlaps(b) for b in taken):
                taken.append(box)
                placed += 1
                break
            t.remove()
    return placed


def _spread(n: int) -> list[int]:
    """0..n-1 in an order that halves the gaps: the middle, the quarters, ..."""
    out, step = [], n
    while step > 1:
        step = max(1, step // 2)
        out += [i for i in range(0, n, step) if i not in out]
    return out


def plot_serve_pareto(front: list[dict], path: str | Path, title: str = "Serving", *,
                      force: bool = True) -> Path:
    """One marker per layout on the front, coloured by GPU type, joined in order of
    per-user speed; labels where they fit clear of each other, the legend and the edges
    (the title says how many)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs = [p["tokens_per_s_per_user"] for p in front]
    ys = [p["tokens_per_s_per_gpu"] for p in front]
    ax.plot(xs, ys, color="#999999", lw=1, zorder=1)
    for gpu in sorted({p["gpu"] for p in front}):
        pts = [p for p in front if p["gpu"] == gpu]
        ax.scatter([p["tokens_per_s_per_user"] for p in pts],
                   [p["tokens_per_s_per_gpu"] for p in pts], label=gpu, zorder=2)
    ax.set_xlabel("output tokens/s per user (1 / TPOT)")
    ax.set_ylabel("output tokens/s per GPU")
    n = len(front)
    # the second line is laid out at its longest, then says how many labels fitted
    head = f"{title}: Pareto front within the SLOs"
    ax.set_title(f"{head}\n{n} of {n} layouts labelled", fontsize=10)
    ax.grid(alpha=0.3)
    if front:
        ax.legend(fontsize=8, loc="lower left")
    ax.margins(0.08)
    fig.tight_layout()
    placed = _place_labels(fig, ax, front, point_labels(front))
    ax.set_title(head if placed == n else f"{head}\n{placed} of {n} layouts labelled",
                 fontsize=10)
    return save_figure(fig, plt, path, force=force, dpi=130)
