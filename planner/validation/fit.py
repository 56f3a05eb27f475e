"""The calibration fit's own record: per GPU generation (and the framework its runs used),
the shipped parameters' error and the leave-one-out error, as ``tools/calibrate.py --write``
measured them (``hardware_catalog/calibration/fit_summary.yaml``)."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

import yaml


@lru_cache(maxsize=1)
def fit_summary() -> dict[str, dict[str, Any]]:
    """Generation -> the fit's figures (fractions, not percent)."""
    path = resources.files("hardware_catalog") / "calibration" / "fit_summary.yaml"
    return yaml.safe_load(path.read_text())["fits"]
