"""The formulation is the evaluator's cost model: exact at every plan, and its presolve
bound is a bound."""

from __future__ import annotations

import math
import random

import pytest

from formulations.train.build import build_model
from formulations.linear import CpsatSession, MilpSession
from formulations.train.search import evaluate_key, inner_keys, lower_bounds, run_search
from formulations.train.space import SearchSpace, SpaceOptions
from planner.costmodel.train.tables import build_tables
from planner.specs.plan_base import model_defaults

from conftest import small_cluster, tiny_model

OPTS = SpaceOptions(max_microbatch=4, max_virtual_stages=2, min_cp_tokens=256)


@pytest.fixture(scope="module")
def tables():
    model = tiny_model(num_layers=6, global_batch_size=16, tied_embeddings=True)
    space = SearchSpace(model, small_cluster(16, domain=4), model_defaults(model), {}, OPTS)
    return build_tables(space)


def _model_value(tb, key, backend="cpsat"):
    lm, vm = build_model(tb, [key[0]])
    for i in vm.literals(key):
        v = lm.vars[i]
        v.lb = v.ub = 1
    sess = CpsatSession(lm) if backend == "cpsat" else MilpSession(lm)
    res = sess.solve(30)
    return res, vm


def test_model_objective_equals_evaluator_at_fixed_plans(tables):
    """Fix a plan in the model: its objective is the evaluator's time, to a few ticks."""
    rng = random.Random(7)
    keys = [k for q in rng.sample(range(tables.num_points), 12) for k in inner_keys(tables, q)]
    checked = 0
    for key in rng.sample(keys, 30):
        cand = evaluate_key(tables, key)
        res, vm = _model_value(tables, key)
        if not cand.estimate.feasible:
            continue
        assert res.status == "optimal"
        model_s = res.objective / (vm.obj_scale * vm.ticks.per_s)
        # a lower bound up to the integer rounding of the exposure variables (one tick each)
        assert model_s <= cand.objective * (1 + 1e-9) + 4 / vm.ticks.per_s
        assert model_s == pytest.approx(cand.objective, rel=1e-6)  # ...and a tight one
        checked += 1
    assert checked >= 10


def test_memory_rows_admit_every_feasible_plan(tables):
    rng = random.Random(3)
    checked = 0
    for q in rng.sample(range(tables.num_points), 15):
        for key in inner_keys(tables, q):
            if evaluate_key(tables, key).estimate.feasible:
                res, _ = _model_value(tables, key, "milp")
                assert res.status == "optimal", key
                checked += 1
    # the tiny model fits at every sampled point: at least one plan each was checked
    assert checked >= 15


def test_presolve_bound_never_exceeds_the_exact_value(tables):
    lb = lower_bounds(tables)
    points = range(0, tables.num_points, max(1, tables.num_points // 40))
    finite = 0
    for q in points:
        exact = min((evaluate_key(tables, k).objective for k in inner_keys(tables, q)),
                    default=math.inf)
        assert lb[q] <= exact * (1 + 1e-12), q
        finite += exact < math.inf
    # a bound under an infeasible point (inf) checks nothing: most points have a plan
    assert finite > len(points) // 2


def test_energy_objective_bound(tables):
    space = tables.space
    tb = build_tables(space, "energy")
    lb = lower_bounds(tb)
    for q in range(0, tb.num_points, max(1, tb.num_points // 20)):
        exact = min(evaluate_key(tb, k).objective for k in inner_keys(tb, q))
        assert lb[q] <= exact * (1 + 1e-12)


def test_rows_stay_inside_double_precision(tables):
    lm, _ = build_model(tables)
    # every row's largest partial sum (|coefficient| x the variable's bound) stays exact in a
    # double: below 2^53, with room for the solvers' presolve (SAFE = 2^53 / 64)
    bound = {i: max(abs(v.lb), abs(v.ub)) for i, v in enumerate(lm.vars)}
    assert len(lm.cons) > 0
    for c in lm.cons:
        assert sum(abs(a) * bound[i] for i, a in c.expr.items()) < 2**53 // 64, c


def test_fixed_knobs_restrict_the_answer():
    model = tiny_model(num_layers=8, global_batch_size=32)
    space = SearchSpace(model, small_cluster(16), model_defaults(model),
                        {"tp": 4, "recompute": "full", "zero_stage": 0}, OPTS)
    res = run_search(build_tables(space), "cpsat")
    p = res.best.plan
    assert (p.tp, p.recompute, p.zero_stage) == (4, "full", 0)


def test_ortools_and_highspy_load_together():
    """ortools bundles HiGHS; a mismatched highspy breaks whichever is imported second."""
    from ortools.sat.python import cp_model  # noqa: F401
    import highspy

    highspy.Highs()
    import pulp

    assert pulp.HiGHS().available()


def test_linear_rows_reproduce_the_composition_on_random_points():
    """Each row builder linearizes a function of planner.costmodel.compose (stage time,
    tail, iteration time with the schedule's bubble, memory, busy time): with a plan fixed,
    the model's objective is compose's value for it (through the vectorized evaluator),
    for a busy-time objective too, on a cluster with an offload tier."""
    import numpy as np

    from planner.costmodel.train.batch import evaluate_columns, objective_values
    from planner.specs.loaders import load_cluster

    model = tiny_model(num_layers=6, global_batch_size=16, tied_embeddings=True)
    cluster = load_cluster("dgx-h100-superpod", 16)
    space = SearchSpace(model, cluster, model_defaults(model), {}, OPTS)
    tb = build_tables(space, "energy")
    rng = random.Random(11)
    keys = [k for q in rng.sample(range(tb.num_points), 10) for k in inner_keys(tb, q)]
    checked = 0
    for key in rng.sample(keys, 25):
        q, rc, sp, z = key
        est = evaluate_columns(tb, np.array([q]), np.array([rc]), np.array([sp]), np.array([z]))
        if not est.feasible[0]:
            continue
        composed = float(objective_values(tb, np.array([q]), est)[0])
        res, vm = _model_value(tb, key)
        assert res.status == "optimal"
        assert res.objective / (vm.obj_scale * vm.ticks.per_s) == pytest.approx(composed,
                                                                                 rel=1e-5)
        checked += 1
    assert checked >= 8


def test_one_mapping_from_the_search_vocabulary_to_plan_fields():
    """Every Outer/Inner attribute names the plan field it decides (PLAN_FIELD), each a
    field of Plan and a decision of the search; a plan the space writes carries the
    point's values under those names."""
    from dataclasses import fields

    from planner.costmodel.train.points import DECISIONS, PLAN_FIELD, Inner, Outer
    from planner.specs.loaders import load_cluster, load_model
    from planner.specs.plan import Plan

    attrs = {f.name for f in fields(Outer)} | {f.name for f in fields(Inner)}
    assert set(PLAN_FIELD) == attrs
    assert set(PLAN_FIELD.values()) <= set(Plan.model_fields) & set(DECISIONS)
    space = SearchSpace(load_model("llama3-8b"), load_cluster("dgx-h100-superpod", 16),
                        {"global_batch_size": 32, "seq_len": 4096}, options=OPTS)
    o = space.outers[-1]
    inner = next(iter(space.inners(o)))
    plan = space.plan(o, None, inner)
    for name in ("tp", "cp", "pp", "dp", "mbs", "v", "uneven", "cpc", "sp", "zero"):
        src = o if hasattr(o, name) else inner
        assert getattr(plan, PLAN_FIELD[name]) == getattr(src, name), name
