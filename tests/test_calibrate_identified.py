"""tools/calibrate.py: which held-out refits the other sources can actually make. A run
identifies a group's parameters only if its error moves across the grid; the MoE host time
(kernels.moe_expert_host_us) leaves every dense and large-expert run where it is."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("calibrate", ROOT / "tools" / "calibrate.py")
calibrate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(calibrate)


def test_moving_runs_by_hand():
    # three grid points, four runs: run 0 moves 40 points, run 1 moves 2 (below the 5-point
    # threshold), run 2 moves 6, run 3 not at all
    results = [([+0.30, 0.10, 0.00, 0.2], {"p": 0.0}),
               ([+0.05, 0.11, 0.03, 0.2], {"p": 1.0}),
               ([-0.10, 0.12, 0.06, 0.2], {"p": 2.0})]
    assert calibrate.moving_runs(results, [True] * 4) == [0, 2]
    assert calibrate.moving_runs(results, [False, True, True, True]) == [2]  # held out: run 0
    assert calibrate.moving_runs(results, [True] * 4, tol=0.01) == [0, 1, 2]
    assert calibrate.moving_runs(results, [True] * 4, tol=1.0) == []
