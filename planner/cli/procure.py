"""``planner procure``: what to buy or rent to train a model on a token budget.

The search is planner/procurement/'s; docs/procure.md states the semantics.
"""

from __future__ import annotations

import signal
from typing import Any, Optional

from rich.markup import escape

from planner.api import procure as run_procure
from planner.cli.console import (
    ProgressLine,
    _emit_json,
    check_files,
    err,
    out,
    warn_calibration,
)
from planner.cli.options import command
from planner.cli.serve import show_procure_serve
from planner.errors import InfeasibleError
from planner.procurement.trainserve import TrainServeResult
from planner.specs.requests import ProcureOutput, ProcureRequest, engine_profile
from planner.workers import signals_raise
from planner.cli.dlrm import show_procure_dlrm
from planner.report.plots import plot_pareto
from planner.report.procure import print_procurement, procurement_csv


@command(ProcureRequest, ProcureOutput)
def procure(request: ProcureRequest, output: ProcureOutput) -> None:
    """Buy or rent: the cheapest cluster and plan to train by a deadline, or fastest in a budget."""
    if request.serve:  # the cheapest serving fleet (planner/cli/serve.py prints it)
        eng = engine_profile(request.engine)
        res = run_procure(request.model_copy(update={"engine": eng}))
        return show_procure_serve(res, eng, request.rate_rps, output.as_json)
    check_files([("--plot", output.plot_path)],
                [("the model", request.model), ("the prices", request.prices),
                 *(("a cluster", c.strip()) for arg in request.clusters or []
                   for c in arg.split(","))], output.force)
    fronts = request.pareto or bool(output.plot_path) or output.as_json or output.as_csv
    status = ProgressLine(err, not (output.as_json or output.as_csv or output.quiet))
    result = None
    failure: InfeasibleError | None = None
    try:
        with signals_raise(signal.SIGTERM):  # stops the workers, as Ctrl-C does
            result = run_procure(request.model_copy(update={"pareto": fronts}),
                                 progress=status)
    except InfeasibleError as e:
        failure, result = e, getattr(e, "result", None)
    finally:
        status.stop()
    if isinstance(result, TrainServeResult):  # train, then serve
        return _show_train_serve(result, output.as_json)
    if result is not None:
        _show(result, failure, plot=output.plot_path, json_=output.as_json,
              csv_=output.as_csv, fronts=fronts, force=output.force)
    if failure is not None:
        raise failure


def _show(result: Any, failure: InfeasibleError | None, *, plot: Optional[str], json_: bool,
          csv_: bool, fronts: bool, force: bool = False) -> None:
    """The procurement as a plot, one JSON object, CSV or tables (with the failure, if any,
    in the JSON object)."""
    if getattr(getattr(result, "model", None), "kind", "") == "dlrm":
        return show_procure_dlrm(result, json_)

    if plot:
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


def _show_train_serve(res: TrainServeResult, json_: bool) -> None:
    """A training campaign followed by serving: the training choice, the serving fleets
    considered, the answer and its break-even (one JSON object with --json)."""
    if json_:
        return _emit_json(res.to_json())

    print_procurement(out, res.training, False)
    out.print(escape(res.summary), highlight=False, soft_wrap=True)
