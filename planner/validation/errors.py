"""One line summarizing relative errors (predicted / measured - 1) of a set of runs, as the
held-out benchmarks print it."""

from __future__ import annotations

import statistics
from typing import Sequence


def summary(errors: Sequence[float]) -> str:
    """``MAPE x %, mean +y %, max +z %, n runs`` (max: the error of largest magnitude)."""
    if not errors:
        return "no runs"
    return (f"MAPE {statistics.mean(abs(e) for e in errors):.1%}, mean "
            f"{statistics.mean(errors):+.1%}, max {max(errors, key=abs):+.1%}, "
            f"{len(errors)} runs")
