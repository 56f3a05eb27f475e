"""What the ``planner`` commands share: the consoles, the progress spinner, the JSON
emitter, the error printer and the output-file check. Options, their help and choices are
the requests' (planner/specs/requests.py, through planner/cli/options.py).

The command modules import from here and from the layers below (api, specs, report),
never from ``planner.cli`` itself.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from rich.console import Console
from rich.markup import escape

from planner.errors import InfeasibleError, PlannerError
from planner.fileio import check_outputs
from planner.orchestration.overrun import overrun_fields, overrun_line, overrun_s
from planner.report.tables import fit_table, left_out_note
from planner.validation.coverage import calibration_notes

out = Console()
err = Console(stderr=True)
#: When the command started (``planner.cli.main`` resets it): a time limit is the user's
#: for the whole command, reading and checking the inputs included.
COMMAND_START_S = [time.monotonic()]

def warn_calibration(cluster: Any, plan: Any) -> list[str]:
    """Print (and return) what the plan uses beyond its GPU's calibration runs."""
    notes = calibration_notes(cluster, plan)
    for n in notes:
        err.print(f"[yellow]calibration:[/] {escape(n)}")
    return notes


def _emit_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=False))


class LazyStatus:
    """A spinner on stderr that appears only once a search has run for a second."""

    def __init__(self, console: Console, enabled: bool):
        self.console, self.enabled = console, enabled and console.is_terminal
        self.t0 = time.perf_counter()
        self.status = None
        self.last = "starting"

    def __call__(self, message: str) -> None:
        self.last = message
        if not self.enabled:
            return
        if self.status is None and time.perf_counter() - self.t0 > 1.0:
            self.status = self.console.status(escape(message))
            self.status.start()
        elif self.status is not None:
            self.status.update(escape(message))

    def stop(self) -> None:
        if self.status is not None:
            self.status.stop()


#: seconds of quiet before a progress bar appears on a terminal (a quick answer shows none)
PROGRESS_DELAY_S = 1.0
#: seconds before plain progress lines appear on a stderr that is no terminal (a log, a
#: pipe), and the least interval between two of them (issue 38: a command running longer
#: than 2 s says what it is doing, terminal or not)
PLAIN_DELAY_S = 2.0
PLAIN_EVERY_S = 1.0


class ProgressLine:
    """Progress of a long search on stderr: on a terminal, a rich line with the step being
    solved, the time spent, and a bar with an ETA when the step says ``i of n``; elsewhere
    (a log file, a pipe) plain lines ``[12.3 s] option 3 of 12: ...`` once the command has
    run :data:`PLAIN_DELAY_S`, at most one per :data:`PLAIN_EVERY_S`. Never on stdout;
    off when ``enabled`` is false (--quiet, --json, --csv)."""

    COUNT = re.compile(r"(\d[\d,]*) of (\d[\d,]*)")

    def __init__(self, console: Console, enabled: bool):
        self.console, self.enabled = console, enabled
        self.live = enabled and console.is_terminal  # the rich bar; else plain lines
        self.t0 = time.perf_counter()
        self.bar: Any = None
        self.task: Any = None
        self.last = "starting"
        self.printed_at: float | None = None

    def __call__(self, message: str) -> None:
        self.last = message
        if not self.enabled:
            return
        if not self.live:
            return self._plain(message)
        if self.bar is None:
            if time.perf_counter() - self.t0 < PROGRESS_DELAY_S:
                return
            from rich.progress import (BarColumn, Progress, SpinnerColumn, TextColumn,
                                       TimeElapsedColumn, TimeRemainingColumn)

            self.bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                TimeElapsedColumn(), TextColumn("ETA"),
                                TimeRemainingColumn(), console=self.console, transient=True)
            self.task = self.bar.add_task(escape(message), total=None)
            self.bar.start()
        count = self.COUNT.search(message)
        if count:  # "option 3 of 12": 2 done of 12
            done, total = (int(g.replace(",", "")) for g in count.groups())
            self.bar.update(self.task, description=escape(message), total=total,
                            completed=max(done - 1, 0))
        else:
            self.bar.update(self.task, description=escape(message))

    def _plain(self, message: str) -> None:
        now = time.perf_counter()
        if now - self.t0 < PLAIN_DELAY_S or (
                self.printed_at is not None and now - self.printed_at < PLAIN_EVERY_S):
            return
        self.printed_at = now
        self.console.print(f"[{now - self.t0:.1f} s] {message}", markup=False,
                           highlight=False, soft_wrap=True)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def print_table(console: Console, table: Any, *, whole: tuple[str, ...] = (),
                words: tuple[str, ...] = (), drop: tuple[str, ...] = ()) -> None:
    """``table`` within the console's width: the ``whole`` columns (names) never cut, the
    others wrapped, the ``drop`` columns left out (and named) only when nothing else fits
    (planner/report/tables.py)."""
    fitted, dropped = fit_table(table, console.width, whole=whole, words=words, drop=drop)
    console.print(fitted)
    if (note := left_out_note(dropped, console.width)) is not None:
        console.print(note, style="dim", highlight=False)


def say_overrun(fields: dict[str, Any], time_limit_s: float) -> None:
    """One stderr line when the command ran more than 10 % past ``--time-limit``: the
    answer's own overrun and why (``fields``), or more where reading and checking the
    inputs before the search took the rest (counted from :data:`COMMAND_START_S`)."""
    total = overrun_s(time.monotonic() - COMMAND_START_S[0], time_limit_s)
    stated = fields.get("time_limit_overrun_s")
    if total is not None and (stated is None or total > stated):
        before = total - (stated or 0.0)
        why = fields.get("overrun_note")
        fields = {"time_limit_overrun_s": total, "overrun_note": (
            f"{why}; " if why else "") + f"{before:.2f} s of it went to reading and checking the "
            "inputs before the search"}
    line = overrun_line(fields, time_limit_s)
    if line is not None:
        err.print(escape(line), highlight=False, soft_wrap=True)


def say_failed_overrun(search_start_s: float, time_limit_s: float, why: str
                       ) -> dict[str, Any]:
    """:func:`say_overrun` for a search that ended without a plan (``search_start_s``: its
    :func:`time.monotonic` start): the overrun fields for the JSON answer, or nothing."""
    fields = overrun_fields(time.monotonic() - search_start_s, time_limit_s, why)
    say_overrun(fields, time_limit_s)
    return fields


def print_error(e: PlannerError) -> None:
    """An error as ``main`` shows it on stderr: infeasible with its reasons and hints, or
    one line for bad input."""
    if isinstance(e, InfeasibleError):
        # a time limit that ran out before any plan proves nothing infeasible
        label = "time limit" if e.status == "time_limit" else "infeasible"
        err.print(f"[bold red]{label}:[/] {escape(str(e))}", soft_wrap=True)
        for r in e.reasons:
            err.print(f"  - {escape(r)}", soft_wrap=True)
        for h in e.hints:
            err.print(f"  [cyan]hint:[/] {escape(h)}", soft_wrap=True)
    else:
        # soft_wrap: the terminal folds long lines; a newline inside a path would break
        # copying it.
        err.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)


def check_files(outputs: list[tuple[str, str | None]], inputs: list[tuple[str, str | None]],
                force: bool, keep: tuple[str, ...] = ()) -> None:
    """Every command's output check, before any work: each output (option, path) is
    writable, exists only with --force, and is no input (what, path) nor another output
    (planner/fileio.py)."""
    check_outputs(outputs, inputs, force=force, keep=keep)


def warn_context_length(model: Any, seq_len: int | None, plan_sets_seq: bool = False) -> None:
    """A Hugging Face config gives a context limit (max_position_embeddings), not the
    training sequence length: say which length is used when the user gave none."""
    if seq_len is None and not plan_sets_seq and "Hugging Face" in (model.source or ""):
        err.print(f"[yellow]warning:[/] {escape(model.name)}: sequence length "
                  f"{model.seq_len:,} is the config's max_position_embeddings, a context "
                  "limit; pass --seq-len for the training length")
