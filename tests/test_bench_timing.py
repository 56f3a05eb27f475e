"""benchmarks/_timing.py: the spread over repeats and the machine line every timing
benchmark prints (issue 28 item 4), and that every benchmark that times something uses it."""

from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("_timing", ROOT / "benchmarks" / "_timing.py")
timing = importlib.util.module_from_spec(spec)
spec.loader.exec_module(timing)


def test_spread_is_min_median_max_of_the_repeats():
    s = timing.spread([3.0, 1.0, 2.0, 10.0])
    assert (s["repeats"], s["min"], s["median"], s["max"]) == (4, 1.0, 2.5, 10.0)
    assert s["samples"] == [3.0, 1.0, 2.0, 10.0]  # run order kept
    assert timing.spread_text([0.5]) == "0.50 s (1 run)"
    assert timing.spread_text(s) == "2.50 s median of 4 (min 1.00, max 10.00)"
    with pytest.raises(ValueError, match="at least one sample"):
        timing.spread([])


def test_merge_runs_lists_results_that_differ_between_repeats():
    # made-up runs: the spread of a quantity given by hand, not a measured time
    runs = [{"status": "optimal", "ms": 4.9, "spent": 1.0},
            {"status": "time_limit", "ms": 4.9, "spent": 3.0}]
    row = timing.merge_runs(runs, ["spent"])
    assert row["ms"] == 4.9
    assert row["status"] == ["optimal", "time_limit"]
    assert (row["spent"]["min"], row["spent"]["max"]) == (1.0, 3.0)


def test_repeats_option_takes_an_alias_and_refuses_zero():
    ap = argparse.ArgumentParser()
    timing.add_repeats(ap, 1, "--repeat")
    assert ap.parse_args([]).repeats == 1
    assert ap.parse_args(["--repeat", "3"]).repeats == 3
    with pytest.raises(SystemExit):
        ap.parse_args(["--repeats", "0"])


def test_machine_line_names_cpu_cores_python_and_ortools():
    line = timing.machine_line()
    for part in ("cores", "Python", "OR-Tools", "load average"):
        assert part in line


@pytest.mark.parametrize("path", sorted((ROOT / "benchmarks").glob("bench_*.py")),
                         ids=lambda p: p.name)
def test_every_timing_benchmark_reports_machine_and_repeats(path):
    """A benchmark that reads a clock (or a solver's solve time) prints the machine and
    takes ``--repeats``."""
    src = path.read_text(encoding="utf-8")
    if not re.search(r"perf_counter|solve_time_s|\btimed\(", src):
        pytest.skip("times nothing")
    assert "machine_line()" in src
    assert "add_repeats(" in src
