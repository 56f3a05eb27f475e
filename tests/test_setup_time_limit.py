"""A solve whose set-up spends its ``--time-limit`` still answers (issue 38 item 2): the best
plan of the points in bound order, marked ``time_limit`` (never proven), with a bound over
the whole space. No timed assertion: the limit is too small for any set-up."""

from __future__ import annotations

import json
import math

import numpy as np

from formulations.train.search import evaluate_key, inner_keys, lower_bounds
from planner.costmodel.train.tables import build_tables
from planner.orchestration.train import build_space, solve
from planner.specs.loaders import load_cluster, load_model


def _first_feasible_in_bound_order(model, cluster) -> float:
    """By hand: the points sorted by their lower bound; the best exact objective of the
    first point that holds a feasible plan."""
    tb = build_tables(build_space(model, cluster))
    lb = lower_bounds(tb)
    for q in np.argsort(lb, kind="stable"):
        if not math.isfinite(lb[q]):
            break
        vals = [evaluate_key(tb, k).objective for k in inner_keys(tb, int(q))]
        if any(math.isfinite(v) for v in vals):
            return min(vals)
    raise AssertionError("no feasible point")


def test_setup_past_the_limit_returns_the_best_plan_found():
    model, cluster = load_model("llama3-8b"), load_cluster("dgx-h100-superpod", 8)
    cut = solve(model, cluster, time_limit_s=1e-9)  # spent before the space is enumerated
    assert cut.status == "time_limit" and cut.status_text == "best found (time limit)"
    assert cut.best.estimate.feasible
    assert cut.best.objective == _first_feasible_in_bound_order(model, cluster)
    full = solve(model, cluster)
    assert full.status == "optimal"
    # a plan of the space, no better than the optimum; the bound holds over the whole space
    assert cut.best.objective >= full.best.objective
    assert cut.proven_bound is not None and cut.proven_bound <= full.best.objective
    assert cut.optimality_gap is not None and cut.optimality_gap >= 0.0


def test_cli_setup_past_the_limit_exits_with_a_plan(capsys):
    from test_cli import run

    code, out, err = run(capsys, "solve", "-m", "llama3-8b", "-c", "dgx-h100-superpod",
                         "--gpus", "8", "--time-limit", "1e-9", "--json")
    s = json.loads(out)["solver"]
    assert code == 0 and s["status"] == "time_limit" and s["optimality_gap"] is not None
    assert "past --time-limit" in err
