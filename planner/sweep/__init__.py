"""What-if sweeps: grids of solves or procurements over models, clusters, GPU counts,
hardware scalings, prices, token budgets and deadlines, run on a local process pool or on
Ray, written as one table (Parquet or CSV), resumable. See README "What-if sweeps"."""

from __future__ import annotations

from planner.sweep.point import TERMS, run_point
from planner.sweep.runners import BACKENDS, run_sweep
from planner.sweep.spec import Point, PointSpec, SweepSpec, expand, load_sweep, sweep_from_dict
from planner.sweep.table import RESULT_COLUMNS, read_rows, write_table

__all__ = ["BACKENDS", "RESULT_COLUMNS", "TERMS", "Point", "PointSpec", "SweepSpec", "expand",
           "load_sweep", "read_rows", "run_point", "run_sweep", "sweep_from_dict",
           "write_table"]
