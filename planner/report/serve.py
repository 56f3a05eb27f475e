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
    if gap is None:
        return "time limit reached: best found, gap unknown (no bound from the solver)"
    pct = math.ceil(gap * 1e4) / 100  # rounded up: "within" must hold
    return f"time limit reached: best found, within {pct:,.2f} % of optimal"


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
