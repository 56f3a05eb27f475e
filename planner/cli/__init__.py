"""The ``planner`` command line: the typer app and ``main``.

Each command lives in its own module (``evaluate``, ``catalog``, ``validate``, ``solve``,
``collective``, ``procure``); what they share is in ``console``. The modules import from
``console`` and the layers below, never from this package's ``__init__``.

Exit codes: 0 ok, 1 infeasible (reasons printed), 2 bad input.
"""

from __future__ import annotations

import sys

import typer

from planner import __version__
from planner.cli.catalog import catalog_cmd as _catalog
from planner.cli.collective import collective as _collective
from planner.cli.console import print_error
from planner.cli.evaluate import evaluate as _evaluate
from planner.cli.procure import procure as _procure
from planner.cli.solve import solve as _solve
from planner.cli.validate import validate as _validate
from planner.errors import PlannerError

app = typer.Typer(
    name="planner",
    help="Plan distributed training of large transformers: evaluate a plan, find the best "
    "one (solve), or choose what to buy (procure).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        print(f"planner {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    pass


app.command("evaluate")(_evaluate)
app.command("catalog")(_catalog)
app.command("validate")(_validate)
app.command("solve")(_solve)
app.command("collective")(_collective)
app.command("procure")(_procure)


def main() -> None:
    try:
        app()
    except PlannerError as e:
        print_error(e)
        sys.exit(e.exit_code)


__all__ = ["app", "main"]
