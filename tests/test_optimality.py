"""Provably optimal: CP-SAT = MILP = exhaustive on randomized small instances.

Each backend's answer is re-evaluated by the exact evaluator; the optimal values agree to a
relative 1e-9 (the K best values too), or all three report infeasible. 200 instances with
the bound presolve, 40 more with the raw formulation.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formulations.train.exhaustive import run_exhaustive
from formulations.train.search import run_search
from planner.costmodel.train.tables import build_tables
from planner.costmodel.train.evaluator import evaluate

from instances import instances, offload_instances


def _same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(math.isclose(x, y, rel_tol=1e-9, abs_tol=0.0)
                                    for x, y in zip(a, b))


def _check(space, objective, top_k, presolve: bool) -> None:
    ref = run_exhaustive(space, objective, top_k)
    ref_vals = [c.objective for c in ref.candidates]
    if not space.outers:
        assert ref.status == "infeasible"
        return
    tb = build_tables(space, objective)
    for backend in ("cpsat", "milp"):
        res = run_search(tb, backend, top_k, time_limit_s=120, use_presolve=presolve)
        vals = [c.objective for c in res.candidates]
        assert res.status in ("optimal", "infeasible"), (backend, res.status)
        if ref.status == "infeasible":
            assert res.status == "infeasible" and not vals, (backend, vals)
            continue
        assert _same(vals, ref_vals), (backend, presolve, vals, ref_vals)
        for c in res.candidates:  # every returned plan passes the evaluator's check
            est = evaluate(space.model, space.cluster, c.plan)
            assert est.feasible and est == c.estimate
        assert len({repr(c.plan) for c in res.candidates}) == len(res.candidates)


@pytest.mark.slow(reason="200 instances through CP-SAT, MILP and brute force")
@settings(max_examples=200, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=instances())
def test_backends_agree_with_exhaustive(case):
    space, objective, top_k = case
    _check(space, objective, top_k, presolve=True)


@pytest.mark.slow(reason="40 instances without the presolve through CP-SAT, MILP and brute force")
@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=instances(max_gpus=8))
def test_raw_formulation_agrees_with_exhaustive(case):
    """Without the presolve the model alone must find and prove the optimum."""
    space, objective, top_k = case
    _check(space, objective, top_k, presolve=False)


@pytest.mark.slow(reason="16 offload instances through CP-SAT, MILP and brute force")
@settings(max_examples=16, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=offload_instances(), presolve=st.sampled_from([True, True, True, False]))
def test_backends_agree_with_offload_tier(case, presolve):
    """Clusters with an offload tier: ZeRO-Offload and ZeRO-Infinity options in the space,
    host capacity as a constraint; about a quarter of the instances without the presolve."""
    space, objective, top_k = case
    _check(space, objective, top_k, presolve=presolve)
