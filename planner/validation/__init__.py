"""Predicted against published, on every shared calibration set: Korthikanti et al. 2022
on A100 (fp16) and NVIDIA's NeMo FP8 recipes on H100 and B200. Efficiency parameters are
properties of the GPU and dtype, fitted once per generation by ``tools/calibrate.py``;
nothing here is tuned per row."""

from planner.validation.korthikanti import (
    MODES,
    ValidationReport,
    calibration_data,
    calibration_plan,
    run_validation,
)
from planner.validation.nemo import RecipeReport, RecipeRow, nemo_data, recipe_rows, run_recipes

__all__ = ["MODES", "ValidationReport", "calibration_data", "calibration_plan", "run_validation",
           "RecipeReport", "RecipeRow", "nemo_data", "recipe_rows", "run_recipes"]
