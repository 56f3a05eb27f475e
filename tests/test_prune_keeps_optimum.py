"""Bounding before tabulating never drops one of the K best plans (issue 38 item 2): on
random instances, brute force over the space that
:func:`planner.orchestration.train.prune_before_tabulating` keeps returns what brute force
over the whole space returns. On one GPU the network-free bound is the real one, and it
meets the optimum's value: a bound scaled up by as little as 1e-6 drops the optimum there,
and these tests fail."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formulations.train.exhaustive import run_exhaustive
from formulations.train.space import SearchSpace
from planner.costmodel.objective import Objective
from planner.orchestration.train import prune_before_tabulating

from conftest import small_cluster
from instances import instances, moe_instances, offload_instances

_SETTINGS = dict(deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _values(space, objective, top_k) -> list[float]:
    return [c.objective for c in run_exhaustive(space, objective, top_k).candidates]


def _check(space, objective: str, top_k: int) -> int:
    """Brute force over the pruned space equals brute force over the whole; returns the
    points pruned."""
    kept, pruned = prune_before_tabulating(space, Objective.of(objective), top_k, None,
                                           min_points=0)
    whole = _values(space, objective, top_k)
    cut = _values(kept, objective, top_k)
    assert len(cut) == len(whole) and all(
        math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0) for a, b in zip(cut, whole)), \
        (cut, whole, pruned)
    return pruned


@st.composite
def one_gpu(draw):
    """:func:`instances` on a single GPU: no network, so the network-free bound is the
    tables' own, tight at the optimum."""
    space, objective, top_k = draw(instances())
    gpu = space.cluster.gpu.name
    fixed = {k: v for k, v in space.fixed.items() if k != "tp"}
    cluster = small_cluster(1, domain=1, gpu=gpu)
    return SearchSpace(space.model, cluster, space.base, fixed, space.options), objective, top_k


@settings(max_examples=25, **_SETTINGS)
@given(case=instances())
def test_pruning_keeps_the_k_best(case):
    _check(*case)


@settings(max_examples=8, **_SETTINGS)
@given(case=offload_instances())
def test_pruning_keeps_the_k_best_offload_tier(case):
    _check(*case)


@settings(max_examples=6, **_SETTINGS)
@given(case=moe_instances())
def test_pruning_keeps_the_k_best_moe(case):
    _check(*case)


@settings(max_examples=25, **_SETTINGS)
@given(case=one_gpu())
def test_pruning_keeps_the_k_best_where_the_bound_is_tight(case):
    _check(*case)


def test_kept_space_takes_the_bound_tables_outer_rows(monkeypatch):
    """The tabulation of the kept outers takes their per-outer rows from the network-free
    tables' memo (no second pass over them), and its tables are those worked out afresh,
    array for array."""
    from dataclasses import fields

    import numpy as np

    import planner.costmodel.train.tables as tables
    from planner.orchestration.train import build_space
    from planner.specs.loaders import load_cluster, load_model

    space = build_space(load_model("mixtral-8x7b"), load_cluster("dgx-h100-superpod", 64))
    memo: dict = {}
    kept, pruned = prune_before_tabulating(space, Objective.of("time"), 1, None,
                                           min_points=0, memo=memo)
    assert pruned > 0
    fresh = tables.build_tables(kept, "energy")
    passes = []
    real = tables._outer_arrays
    monkeypatch.setattr(tables, "_outer_arrays", lambda ctx: passes.append(1) or real(ctx))
    reused = tables.build_tables(kept, "energy", memo=memo)
    assert not passes  # every row came from the memo
    for f in fields(fresh.terms):
        a, b = getattr(fresh.terms, f.name), getattr(reused.terms, f.name)
        assert a.shape == b.shape and np.array_equal(a, b), f.name
