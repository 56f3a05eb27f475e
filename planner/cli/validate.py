"""``planner validate``: every shared calibration set, predicted against published."""

from __future__ import annotations

import typer
from rich.table import Table

from planner.cli.console import _emit_json, out, print_table
from planner.validation import run_recipes, run_validation
from planner.validation.corpus import sources
from planner.validation.fit import fit_summary
from planner.validation.heldout import heldout_report
from planner.validation.torchtitan import run_torchtitan


def validate(json_: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Run every calibration set (Korthikanti et al. on A100; NVIDIA's NeMo FP8 recipes on
    H100 and B200; torchtitan's own H100 runs): predicted against published time,
    throughput and memory, with the mean absolute percentage error per GPU generation and
    framework."""
    # lazily: planner.validation.serving builds the ServeEngine spec validator at import
    from planner.validation.serving import run_serving

    rep, nemo, serving = run_validation(), run_recipes(), run_serving()
    titan = run_torchtitan()
    mape = _mape_by_generation(rep, nemo, titan)
    held = heldout_report()
    if json_:
        _emit_json({"heldout_by_source": held, "corpus_sources": sources(),
                    "korthikanti2022": rep.to_json(), "nemo_recipes": nemo.to_json(),
                    "torchtitan_runs": titan.to_json(), "mape_by_generation": mape,
                    "fit": fit_summary(), "serving": serving.to_json()})
        return
    _print_korthikanti(rep)
    _print_recipes(nemo)
    _print_recipes(titan, "H100 BF16/FP8: torchtitan's own runs, tokens/s/GPU predicted vs "
                   "published", "H100 torchtitan")
    _print_serving(serving)
    _print_fit(mape, fit_summary())
    _print_heldout(held)


def _print_heldout(held: dict) -> None:
    """The headline: every corpus source held out in turn (tools/calibrate.py --write)."""
    for label, rows in held["by"].items():
        t = Table(title=f"Held out by source, per {label}: predicted vs published throughput "
                  "(positive: optimistic)", header_style="bold")
        for col in (label, "runs", "sources", "MAPE", "mean", "max"):
            t.add_column(col, justify="left" if col == label else "right")
        for r in rows:
            t.add_row(r["key"], str(r["runs"]), str(r["sources"]), f"{r['mape']:.1%}",
                      f"{r['bias']:+.1%}", f"{r['max']:+.1%}")
        print_table(out, t, whole=(label,))
    for bad in held["infeasible"]:
        out.print(f"published configuration that does not fit in the model: {bad['run']} "
                  f"({bad['source']}): {bad['why']}", highlight=False, soft_wrap=True)
    slope = held["slope_per_decade_of_gpus"]
    out.print(f"held out by source: {held['runs']} runs from {held['sources']} sources, MAPE "
              f"{held['mape']:.1%}, mean {held['bias']:+.1%}; residual slope "
              f"{'n/a' if slope is None else f'{slope:+.1%}'} per tenfold GPUs "
              "(docs/validation.md lists the sources)")


def _print_fit(mape: dict[str, float], fits: dict) -> None:
    t = Table(title="Per fit group (a GPU, or a framework's own fit on a GPU): the error of "
              "the shipped parameters on the group's runs, and with each source held out in "
              "turn (python tools/calibrate.py --write)", header_style="bold")
    for col in ("group", "runs", "sources", "MAPE", "held out: MAPE (mean)"):
        t.add_column(col, justify="left" if col == "group" else "right")
    for gen, f in fits.items():
        loo = ("only one source" if f["leave_one_source_out_mape"] is None else
               f"{f['leave_one_source_out_mape']:.1%} ({f['leave_one_source_out_bias']:+.1%})")
        t.add_row(gen, str(f["runs"]), str(f["sources"]), f"{f['calibration_mape']:.1%}", loo)
    print_table(out, t, whole=("group",))


def _mape_by_generation(rep, nemo, titan) -> dict[str, float]:
    """Per generation and the framework of its runs (the generation alone: Megatron-LM or
    NeMo, i.e. Megatron-Core)."""
    return {"A100": rep.mape, **{g: nemo.mape(g) for g in nemo.by_generation()},
            **{f"{g} torchtitan": titan.mape(g) for g in titan.by_generation()}}


def _print_korthikanti(rep) -> None:
    t = Table(title=f"A100 fp16: iteration time, predicted vs published ({rep.source})",
              header_style="bold")
    for col in ("model", "mode", "predicted s", "published s", "error"):
        t.add_column(col, justify="right" if col not in ("model", "mode") else "left")
    for r in rep.time_rows:
        t.add_row(r.model, r.mode, f"{r.predicted_s:.2f}", f"{r.published_s:.2f}", f"{r.error:+.1%}")
    print_table(out, t, whole=("model",))
    out.print(f"A100: MAPE {rep.mape:.2%}, max |error| {rep.max_error:.2%}  "
              "(Calculon on the same set: 3.65% mean, 8.87% max)")
    tm = Table(title="A100: memory per GPU, first stage (Figure 1)", header_style="bold")
    for col in ("model", "quantity", "predicted GiB", "published GiB", "error"):
        tm.add_column(col, justify="right" if "GiB" in col or col == "error" else "left")
    for r in rep.memory_rows:
        tm.add_row(r.model, r.quantity, f"{r.predicted_gib:.2f}", f"{r.published_gib:.2f}",
                   f"{r.error:+.1%}")
    print_table(out, tm, whole=("model",))


def _print_recipes(nemo, title: str = "H100/B200 FP8: NVIDIA NeMo recipes, tokens/s/GPU "
                   "predicted vs published", label: str | None = None) -> None:
    t = Table(title=title, header_style="bold")
    for col in ("run", "GPUs", "predicted", "published", "error"):
        t.add_column(col, justify="left" if col == "run" else "right")
    for r in nemo.rows:
        t.add_row(r.name, str(r.gpus), f"{r.predicted:,.0f}" if r.feasible else "does not fit",
                  f"{r.measured:,.0f}", f"{r.error:+.1%}")
    print_table(out, t, whole=("run",))
    for g in nemo.by_generation():
        out.print(f"{label or g}: MAPE {nemo.mape(g):.2%}, max |error| {nemo.max_error(g):.2%}")


def _print_serving(serving) -> None:
    t = Table(title=f"Serving, H100 FP8: predicted vs published ({serving.source})",
              header_style="bold")
    for col in ("model", "tp", "batch", "isl/osl", "metric", "predicted", "published", "error"):
        t.add_column(col, justify="left" if col in ("model", "metric") else "right")
    for r in serving.rows:
        name = "tok/s/GPU" if r.metric.startswith("output") else "TTFT ms"
        t.add_row(r.model, str(r.tp), str(r.batch), f"{r.isl}/{r.osl}", name,
                  f"{r.predicted:,.1f}", f"{r.measured:,.1f}", f"{r.error:+.1%}")
    print_table(out, t, whole=("model", "metric"), drop=("batch",))
    for metric, label in (("output_tokens_per_s_per_gpu", "output tokens/s/GPU"),
                          ("first_token_latency_ms", "TTFT")):
        out.print(f"serving {label}: MAPE {serving.mape(metric):.2%}, "
                  f"max |error| {serving.max_error(metric):.2%}")
