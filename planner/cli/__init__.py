"""The ``planner`` command line: the typer app and ``main``.

Each command lives in its own module (``solve``, ``evaluate``, ``procure``, ``serve``,
``sweep``, ``export``, ``validate``, ``catalog``, ``collective``; DLRM's solve and evaluate
in ``dlrm``); what they share is in ``console``. The modules import from
``console`` and the layers below, never from this package's ``__init__``.

Exit codes: 0 ok, 1 infeasible (reasons printed), 2 bad input, 130 Ctrl-C (143 SIGTERM
in sweep and procure: their workers are stopped first).
"""

from __future__ import annotations

import signal
import sys
import time

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption

from planner import __version__
from planner.cli.catalog import catalog_cmd as _catalog
from planner.cli.collective import collective as _collective
from planner.cli.console import COMMAND_START_S, print_error
from planner.cli.evaluate import evaluate as _evaluate
from planner.cli.export import export as _export
from planner.cli.procure import procure as _procure
from planner.cli.serve import serve as _serve
from planner.cli.solve import solve as _solve
from planner.cli.sweep import sweep as _sweep
from planner.cli.validate import validate as _validate
from planner.errors import PlannerError
from planner.workers import Interrupted, signals_raise

def _plain_metavars(params: list) -> list:
    """Help shows a boolean flag as a plain flag (typer would print ``<bool>``) and a
    repeatable option with its own metavar (``--fix FIELD=VALUE``; ``VALUE`` where none is
    given, never ``<list[str]>``)."""
    for p in params:
        if isinstance(p, TyperOption) and p.metavar is None:
            if p.is_bool_flag:
                p.metavar = ""
            elif p.multiple:
                p.metavar = "VALUE"
    return params


class _Command(TyperCommand):
    def get_params(self, ctx):  # type: ignore[no-untyped-def]
        return _plain_metavars(super().get_params(ctx))


class _Group(TyperGroup):
    def get_params(self, ctx):  # type: ignore[no-untyped-def]
        return _plain_metavars(super().get_params(ctx))


app = typer.Typer(
    name="planner",
    cls=_Group,
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


# ignore_unknown_options: `evaluate --from megatron "--tensor-model-parallel-size 8 ..."` reads
# the quoted Megatron-LM arguments as ARGS (an unknown option alone is still refused, by evaluate)
app.command("evaluate", cls=_Command,
            context_settings={"ignore_unknown_options": True})(_evaluate)
app.command("catalog", cls=_Command)(_catalog)
app.command("validate", cls=_Command)(_validate)
app.command("solve", cls=_Command)(_solve)
app.command("collective", cls=_Command)(_collective)
app.command("procure", cls=_Command)(_procure)
app.command("serve", cls=_Command)(_serve)
app.command("export", cls=_Command)(_export)
app.command("sweep", cls=_Command)(_sweep)


def main() -> None:
    # Ctrl-C raises Interrupted: a KeyboardInterrupt would become click's "Aborted!", exit 1
    COMMAND_START_S[0] = time.monotonic()
    with signals_raise(signal.SIGINT):
        try:
            app()
        except PlannerError as e:
            print_error(e)
            sys.exit(e.exit_code)
        except MemoryError:  # a std::bad_alloc that reached Python too, wherever it surfaced
            print("planner: out of memory (the process's memory limit, or the machine's); "
                  "give it more, or a smaller input", file=sys.stderr)
            sys.exit(1)
        except Interrupted as e:
            for s in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C: still one line
                signal.signal(s, signal.SIG_IGN)
            print(e.message, file=sys.stderr)
            sys.exit(e.exit_code)


__all__ = ["app", "main"]
