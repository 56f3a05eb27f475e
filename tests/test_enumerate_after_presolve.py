"""The points presolve leaves, costed plan by plan instead of by the model (issue 38 item
2): ``run_search(enumerate_plans=N)`` returns brute force's answer, and builds no model."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings

import planner.orchestration.train as train
from formulations.train.exhaustive import run_exhaustive
from formulations.train.search import SearchStats, _enumerate, lower_bounds, run_search
from planner.costmodel.train.batch import inner_columns
from planner.costmodel.train.tables import build_tables
from planner.specs.loaders import load_cluster, load_model

from instances import instances, moe_instances, offload_instances


def _same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(math.isclose(x, y, rel_tol=1e-9, abs_tol=0.0)
                                    for x, y in zip(a, b))


def _check(space, objective, top_k) -> None:
    ref = run_exhaustive(space, objective, top_k)
    ref_vals = [c.objective for c in ref.candidates]
    if not space.outers:
        return
    tb = build_tables(space, objective)
    # the enumeration alone, with no incumbent from presolve: brute force over the space
    pool: dict = {}
    _enumerate(tb, inner_columns(tb), lower_bounds(tb), top_k, None, pool, SearchStats())
    alone = sorted(c.objective for c in pool.values() if math.isfinite(c.objective))[:top_k]
    assert _same(alone, ref_vals), (alone, ref_vals)
    res = run_search(tb, "cpsat", top_k, time_limit_s=120, enumerate_plans=10**9)
    vals = [c.objective for c in res.candidates]
    assert res.stats.solver_calls == 0  # the model was never built
    if ref.status == "infeasible":
        assert res.status == "infeasible" and not vals
        return
    assert res.status == "optimal" and res.stats.plans_enumerated > 0
    assert _same(vals, ref_vals), (vals, ref_vals)
    for c in res.candidates:  # the bound each plan carries is below its exact value
        assert c.bound is not None and c.bound <= c.objective


_SETTINGS = dict(deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@settings(max_examples=30, **_SETTINGS)
@given(case=instances())
def test_enumerated_answer_is_brute_force(case):
    _check(*case)


@settings(max_examples=8, **_SETTINGS)
@given(case=moe_instances())
def test_enumerated_answer_is_brute_force_moe(case):
    _check(*case)


@settings(max_examples=8, **_SETTINGS)
@given(case=offload_instances())
def test_enumerated_answer_is_brute_force_offload_tier(case):
    _check(*case)


def test_enumeration_keeps_every_feasible_plan_when_fewer_than_k():
    """K above the number of feasible plans: each of them is one of the K best, and the
    enumeration returns them all (brute force's count), not only presolve's incumbents."""
    from conftest import small_cluster, tiny_model
    from formulations.train.space import SearchSpace
    from planner.specs.plan_base import model_defaults
    from instances import OPTIONS

    # 17 of its 360 plans fit in 40 GB
    model = tiny_model(num_layers=32, hidden_size=4096, num_attention_heads=16, num_kv_heads=8,
                       ffn_hidden_size=16384, seq_len=2048, global_batch_size=8)
    space = SearchSpace(model, small_cluster(4, domain=4, gpu="a100-sxm-40gb"),
                        model_defaults(model), {"zero_stage": 1}, OPTIONS)
    top_k = 10**6
    ref = run_exhaustive(space, "time", top_k)
    assert 1 < len(ref.candidates) < top_k
    tb = build_tables(space, "time")
    pool: dict = {}
    _enumerate(tb, inner_columns(tb), lower_bounds(tb), top_k, None, pool, SearchStats())
    assert sum(math.isfinite(c.objective) for c in pool.values()) == len(ref.candidates)
    res = run_search(tb, "cpsat", top_k, time_limit_s=120, enumerate_plans=10**9)
    assert res.stats.solver_calls == 0 and len(res.candidates) == len(ref.candidates)


@pytest.mark.parametrize("top_k", [1, 3])
def test_solve_enumerates_what_presolve_leaves(monkeypatch, top_k):
    """``planner.solve`` costs the few points left after presolve without the model, and
    answers what the model and brute force answer."""
    model, cluster = load_model("llama3-8b"), load_cluster("dgx-h100-superpod", 64)
    fast = train.solve(model, cluster, top_k=top_k)
    assert fast.stats["plans_enumerated"] > 0 and fast.stats["solver_calls"] == 0
    monkeypatch.setattr(train, "ENUMERATE_MAX_PLANS", 0)
    modelled = train.solve(model, cluster, top_k=top_k)
    assert modelled.stats["plans_enumerated"] == 0 and modelled.stats["solver_calls"] >= 1
    brute = train.solve(model, cluster, top_k=top_k, backend="exhaustive")
    for res in (modelled, brute):
        assert res.status == fast.status == "optimal"
        assert [p.objective for p in fast.plans] == pytest.approx(
            [p.objective for p in res.plans], rel=1e-12)
    assert fast.best.plan == modelled.best.plan == brute.best.plan


def test_an_enumerated_answer_does_not_claim_a_model():
    """No formulation ran: the answer carries no model value, and its footer names what
    proved it instead of the backend alone."""
    from planner.report.text import solver_lines

    model, cluster = load_model("llama3-8b"), load_cluster("dgx-h100-superpod", 64)
    fast = train.solve(model, cluster)
    assert fast.stats["plans_enumerated"] > 0
    assert fast.best.solver_objective is None and fast.model_vs_evaluator_rel_diff is None
    footer = " ".join(solver_lines(fast))
    assert "cpsat not needed" in footer and "formulation's lower bound" not in footer
