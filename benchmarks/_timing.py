"""What every timing benchmark reports beside its figures: the machine it ran on and the
spread of each timed quantity over ``--repeats`` runs.

    from _timing import add_repeats, machine, machine_line, spread, spread_text, timed

A benchmark script is run as ``python benchmarks/NAME.py``, which puts this folder first on
``sys.path``; that is how the scripts import this module.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from importlib import metadata
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def cpu_model() -> str:
    """The CPU's model name as the kernel reports it (Linux), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict:
    """CPU model, logical cores, the 1-minute load average when the run starts (other jobs
    on a shared machine move every timing), Python and the solver packages' versions."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "load_average_1min": load,
            "python": platform.python_version(), "ortools": _version("ortools"),
            "highspy": _version("highspy"), "pulp": _version("pulp")}


def machine_line() -> str:
    m = machine()
    load = "n/a" if m["load_average_1min"] is None else f"{m['load_average_1min']:.1f}"
    return (f"machine: {m['cpu']}, {m['cores']} cores, load average {load} at start; "
            f"Python {m['python']}, OR-Tools {m['ortools']}, HiGHS {m['highspy']}, "
            f"PuLP {m['pulp']}")


def add_repeats(ap: argparse.ArgumentParser, default: int = 1, *aliases: str) -> None:
    """``--repeats N``: how many times each timed quantity is measured."""
    ap.add_argument("--repeats", *aliases, dest="repeats", type=_positive, default=default,
                    help=f"runs per timed quantity; the spread is reported (default {default})")


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"--repeats must be a positive integer, got {text}")
    return n


def timed(fn: Callable[[], T], repeats: int) -> tuple[list[T], list[float]]:
    """Call ``fn`` ``repeats`` times; its results and the wall seconds of each call."""
    results, walls = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        results.append(fn())
        walls.append(time.perf_counter() - t0)
    return results, walls


def spread(samples: Sequence[float]) -> dict:
    """Repeats, min, median, max and the samples themselves (in run order)."""
    xs = [float(x) for x in samples]
    if not xs:
        raise ValueError("spread needs at least one sample, got none")
    return {"repeats": len(xs), "min": min(xs), "median": statistics.median(xs),
            "max": max(xs), "samples": xs}


def spread_text(samples: Sequence[float] | dict, unit: str = "s", fmt: str = ".2f") -> str:
    """``0.51 s (1 run)`` or ``0.51 s median of 3 (min 0.49, max 0.60)``, from the samples
    or from their :func:`spread`."""
    s = spread(samples["samples"] if isinstance(samples, dict) else samples)
    if s["repeats"] == 1:
        return f"{s['median']:{fmt}} {unit} (1 run)"
    return (f"{s['median']:{fmt}} {unit} median of {s['repeats']} "
            f"(min {s['min']:{fmt}}, max {s['max']:{fmt}})")


def merge_runs(runs: Sequence[dict], timed_keys: Sequence[str]) -> dict:
    """One row from ``runs`` (the same measurement repeated): each of ``timed_keys`` becomes
    its :func:`spread`; any other field that differs between runs (a time-limited solve may
    stop at a different incumbent) becomes the list of its values, in run order."""
    out: dict = {}
    for key in runs[0]:
        values = [r[key] for r in runs]
        if key in timed_keys:
            out[key] = spread(values)
        elif all(v == values[0] for v in values):
            out[key] = values[0]
        else:
            out[key] = values
    return out
