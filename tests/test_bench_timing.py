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


def _entry_points():
    spec_ = importlib.util.spec_from_file_location(
        "bench_entry_points", ROOT / "benchmarks" / "bench_entry_points.py")
    mod = importlib.util.module_from_spec(spec_)
    import sys
    sys.path.insert(0, str(ROOT / "benchmarks"))  # its `from _timing import ...`
    try:
        spec_.loader.exec_module(mod)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return mod


def test_entry_points_load_loops_are_started_and_stopped():
    """bench_entry_points --load N: N busy loops run beside the rows and are stopped after."""
    bench = _entry_points()
    loops = bench.busy_loops(2)
    assert [p.poll() for p in loops] == [None, None]  # running
    bench.stop(loops)
    assert all(p.poll() is not None for p in loops)


def test_entry_points_refuse_an_unknown_row():
    bench = _entry_points()
    args = argparse.Namespace(only="nonsense", load=0, repeats=1, timeout=10.0,
                              exhaustive_limit=1.0, plans=10, seed=0)
    with pytest.raises(SystemExit, match="nonsense: unknown"):
        bench.run(args)
