"""``planner procure``: what to buy or rent to train a model on a token budget.

The search is planner/procurement/'s; docs/procure.md states the semantics.
"""

from __future__ import annotations

import signal
from enum import Enum
from typing import Any, Optional

import typer

from planner.cli.console import (
    DTYPE_HELP,
    SEQ_LEN_HELP,
    ProgressLine,
    _emit_json,
    FORCE_HELP,
    check_files,
    err,
    out,
    warn_calibration,
)
from planner.cli.serve import procure_serve_cmd
from planner.specs.requests import GOODPUT_HELP


class GoodputSetting(str, Enum):
    on = "on"
    async_ = "async"
    off = "off"
from planner.errors import InfeasibleError, InputError
from planner.procurement import DEFAULT_MAX_GPUS
from planner.workers import signals_raise


class ProcureObjective(str, Enum):
    cost = "cost"
    energy = "energy"
    gpu_hours = "gpu-hours"
    time = "time"


class PricingMode(str, Enum):
    rent = "rent"
    own = "own"


def _counts(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        vals = [int(float(v)) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"--counts: expected comma-separated GPU counts, got '{text}'") from None
    if not vals or min(vals) < 1:
        raise InputError(f"--counts '{text}': expected positive GPU counts")
    return vals


ENGINE_HELP = "--serve: the serving engine (planner catalog engines; default trtllm)."
PROCURE_FRAMEWORK_HELP = ("The training framework (planner catalog frameworks): each option's "
                          "plan is one it can run (default: any plan the cost model accepts).")
TIME_LIMIT_HELP = ("Seconds per inner solve (one per option answered), not for the whole "
                   "command: the total is reported (stats.wall_s).")
QUIET_HELP = "No progress line on stderr (none with --json or --csv either)."


def procure(
    model: str = typer.Option(..., "--model", "-m", help="Catalog name, model YAML, or "
                              "Hugging Face config.json."),
    tokens: Optional[float] = typer.Option(None, "--tokens", help="Tokens to train on, e.g. "
                                           "15e12 (required unless --serve)."),
    days: Optional[float] = typer.Option(None, "--days", help="Deadline: train within this many days."),
    budget: Optional[float] = typer.Option(None, "--budget", help="Budget in USD: the fastest "
                                           "option within it (objective time unless --objective)."),
    objective: Optional[ProcureObjective] = typer.Option(
        None, "--objective", help="What to minimize: cost (default), energy, gpu-hours, or "
        "time (default with --budget)."),
    gpus: Optional[str] = typer.Option(None, "--gpus", help="Only these GPU types, "
                                       "comma-separated (e.g. h100,b200)."),
    cluster: list[str] = typer.Option([], "--cluster", "-c", metavar="NAME|PATH",
                                      help="Cluster templates to "
                                      "consider instead of the catalog's: catalog names or "
                                      "cluster YAML files, comma-separated or repeated "
                                      "(e.g. ramp-a100,examples/ramp-baseline-fat-tree.yaml)."),
    max_gpus: int = typer.Option(DEFAULT_MAX_GPUS, "--max-gpus", help="Largest cluster to consider."),
    counts: Optional[str] = typer.Option(None, "--counts", help="GPU counts to consider, "
                                         "comma-separated, instead of the powers-of-two grid."),
    pricing: Optional[PricingMode] = typer.Option(
        None, "--pricing", help="rent (USD per GPU-hour) or own (capital over the "
        "depreciation period plus electricity); default from --prices, else rent."),
    prices: Optional[str] = typer.Option(None, "--prices", help="Pricing YAML overriding the "
                                         "catalog's prices (docs/formats.md)."),
    pareto: bool = typer.Option(False, "--pareto", help="Print the Pareto fronts of days "
                                "against cost and against energy."),
    plot: Optional[str] = typer.Option(None, "--plot", help="Draw the fronts to this PNG."),
    json_: bool = typer.Option(False, "--json", help="Print one JSON object (with the fronts)."),
    csv_: bool = typer.Option(False, "--csv", help="Print CSV, one row per option solved."),
    global_batch: Optional[int] = typer.Option(None, "--global-batch", help="Global batch "
                                               "(sequences); default from the model."),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help=SEQ_LEN_HELP),
    dtype: Optional[str] = typer.Option(None, "--dtype", help=DTYPE_HELP),
    time_limit: float = typer.Option(60.0, "--time-limit", help=TIME_LIMIT_HELP),
    workers: Optional[int] = typer.Option(None, "--workers", help="Inner solves at once "
                                          "(default: the CPUs)."),
    serve: bool = typer.Option(False, "--serve", help="Serving: cheapest fleet (docs/serving.md)."),
    rate: Optional[float] = typer.Option(None, "--rate", help="--serve: requests/s to serve."),
    isl: Optional[int] = typer.Option(None, "--isl", help="--serve: input tokens per request."),
    osl: Optional[int] = typer.Option(None, "--osl", help="--serve: output tokens per request."),
    ttft_ms: Optional[float] = typer.Option(None, "--ttft-ms", help="--serve: P99 TTFT SLO."),
    tpot_ms: Optional[float] = typer.Option(None, "--tpot-ms", help="--serve: P99 TPOT SLO."),
    engine: Optional[str] = typer.Option(None, "--engine", metavar="NAME|PATH", help=ENGINE_HELP),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
    framework: Optional[str] = typer.Option(None, "--framework", help=PROCURE_FRAMEWORK_HELP),
    goodput: GoodputSetting = typer.Option(
        GoodputSetting.on, "--goodput", help=GOODPUT_HELP + " --days limits the effective days."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Buy or rent: the cheapest cluster and plan to train by a deadline, or fastest in a budget."""
    from planner.api import procure as run_procure

    if serve:  # planner/cli/serve.py
        return procure_serve_cmd(model, gpus, cluster, pricing, prices, json_, rate, isl, osl, ttft_ms, tpot_ms, engine)
    _check_args(model, tokens, json_, csv_, workers, plot, prices, cluster, force, engine)
    fronts = pareto or bool(plot) or json_ or csv_
    status = ProgressLine(err, not (json_ or csv_ or quiet))
    result = None
    failure: InfeasibleError | None = None
    try:
        with signals_raise(signal.SIGTERM):  # stops the workers, as Ctrl-C does
            result = run_procure(
                model, tokens, days=days, budget_usd=budget,
                objective=objective.value.replace("-", "_") if objective else None,
                gpus=gpus, clusters=list(cluster) or None, max_gpus=max_gpus,
                counts=_counts(counts), pricing=pricing.value if pricing else None,
                prices=prices, pareto=fronts, global_batch_size=global_batch,
                seq_len=seq_len, dtype=dtype, time_limit_s=time_limit, workers=workers,
                progress=status, framework=framework, goodput=goodput.value)
    except InfeasibleError as e:
        failure, result = e, getattr(e, "result", None)
    finally:
        status.stop()
    if result is not None:
        _show(result, failure, plot=plot, json_=json_, csv_=csv_, fronts=fronts, force=force)
    if failure is not None:
        raise failure


def _check_args(model: str, tokens: float | None, json_: bool, csv_: bool,
                workers: int | None, plot: str | None, prices: str | None,
                cluster: list[str], force: bool, engine: str | None = None) -> None:
    """Refuse bad options and unwritable or clobbering outputs before any solve."""
    if engine is not None:
        raise InputError(f"--engine {engine}: a serving engine, for --serve only (training "
                         "takes --framework)")
    if tokens is None:
        raise InputError("--tokens: required (the tokens to train on), unless --serve")
    if json_ and csv_:
        raise InputError("--json and --csv: choose one")
    if workers is not None and workers < 1:
        raise InputError(f"--workers {workers}: expected a positive integer")
    check_files([("--plot", plot)],
                [("the model", model), ("the prices", prices),
                 *(("a cluster", c.strip()) for arg in cluster for c in arg.split(","))],
                force)


def _show(result: Any, failure: InfeasibleError | None, *, plot: Optional[str], json_: bool,
          csv_: bool, fronts: bool, force: bool = False) -> None:
    """The procurement as a plot, one JSON object, CSV or tables (with the failure, if any,
    in the JSON object)."""
    if getattr(getattr(result, "model", None), "kind", "") == "dlrm":
        from planner.cli.dlrm import show_procure_dlrm  # --tokens counted samples

        return show_procure_dlrm(result, json_)
    from planner.report.procure import print_procurement, procurement_csv

    if plot:
        from planner.report.plots import plot_pareto

        plot_pareto(result, plot, force=force)
    choice = getattr(result, "choice", None)
    notes = warn_calibration(choice.gpu, choice.plan) if choice is not None else []
    if json_:
        data = {**result.to_json(), "calibration_notes": notes}
        if failure is not None:
            data.update(message=str(failure), reasons=failure.reasons, hints=failure.hints)
        _emit_json(data)
    elif csv_:
        print(procurement_csv(result), end="")
    else:
        print_procurement(out, result, fronts)
        if plot:
            out.print(f"wrote {plot}")
