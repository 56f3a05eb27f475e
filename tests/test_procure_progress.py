"""`planner procure` reports progress on stderr when it runs long, terminal or not (issue
38): plain, throttled lines where stderr is a log or a pipe; none with --quiet."""

from __future__ import annotations

import io

from rich.console import Console

import planner.cli.console as console
from planner.cli.console import ProgressLine


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def progress(monkeypatch, enabled: bool = True) -> tuple[ProgressLine, io.StringIO, Clock]:
    clock = Clock()
    monkeypatch.setattr(console.time, "perf_counter", clock)
    buf = io.StringIO()
    line = ProgressLine(Console(file=buf, force_terminal=False, width=200), enabled)
    return line, buf, clock


def test_plain_lines_when_stderr_is_no_terminal(monkeypatch):
    """Nothing in the first 2 s; then one line per message, at most one a second, each with
    the time spent."""
    line, buf, clock = progress(monkeypatch)
    line("option 1 of 9: 8x h100")
    clock.now += 1.5
    line("option 2 of 9: 16x h100")
    assert buf.getvalue() == ""  # a quick answer prints nothing
    clock.now += 1.0
    line("option 3 of 9: 32x h100")
    clock.now += 0.5
    line("option 4 of 9: 64x h100")  # within a second of the last line: left out
    clock.now += 1.0
    line("option 5 of 9: 64x b200")
    line.stop()
    assert buf.getvalue().splitlines() == ["[2.5 s] option 3 of 9: 32x h100",
                                           "[4.0 s] option 5 of 9: 64x b200"]


def test_quiet_prints_nothing(monkeypatch):
    line, buf, clock = progress(monkeypatch, enabled=False)
    clock.now += 10.0
    line("option 1 of 2: 8x h100")
    line.stop()
    assert buf.getvalue() == ""
