"""The lower bounds that prune procurement options before any solve
(planner/procurement/bounds.py): below the iteration and busy time of every plan of small
spaces, and a whole-catalog answer equal to brute force over every (template, count, plan),
with fewer options solved than the GEMM bound alone lets through."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import planner.procurement.train as train
from formulations.train.space import SearchSpace, SpaceOptions
from planner.costmodel.train.batch import evaluate_columns, inner_columns
from planner.costmodel.train.tables import build_tables
from planner.errors import InfeasibleError
from planner.procurement import OBJECTIVE_METRIC, procure
from planner.procurement.bounds import WorkTable, plan_bounds
from planner.procurement.metrics import gemm_time_lower_bound_s
from planner.specs.plan_base import model_defaults
from planner.specs.pricing import load_pricing

from conftest import small_cluster, tiny_model
from test_procure import INSTANCES, OPTIONS, TOKENS, every_plan
from test_procure import brute_force as procure_brute_force

SETTINGS = settings(max_examples=25, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


def all_plans(model, cluster, options):
    """(iteration time, busy time) arrays of every plan of the space, memory aside."""
    space = SearchSpace(model, cluster, model_defaults(model), {}, options)
    if not space.outers:
        return np.zeros(0), np.zeros(0)
    tb = build_tables(space)
    est = evaluate_columns(tb, *inner_columns(tb))
    t, b = np.asarray(est.iteration_time_s, float), np.asarray(est.gpu_busy_s, float)
    ok = np.isfinite(t) & np.isfinite(b)
    return t[ok], b[ok]


@pytest.mark.slow(reason="hypothesis examples, each a whole space evaluated")
@SETTINGS
@given(layers=st.sampled_from([2, 3, 4, 6]), heads_kv=st.sampled_from([(2, 1), (4, 4), (8, 2), (8, 8)]),
       hidden=st.sampled_from([256, 512]), gb=st.sampled_from([1, 2, 4, 6, 8, 12]),
       seq=st.sampled_from([512, 1024]), n=st.sampled_from([1, 2, 3, 4, 6, 8]),
       domain=st.sampled_from([2, 4, 8]), gpu=st.sampled_from(["h100-sxm", "mi300x", "b200"]),
       cv=st.sampled_from([0.0, 0.01, 0.05]), mbs=st.sampled_from([1, 2, 4]),
       v=st.sampled_from([1, 2, 3]), min_cp=st.sampled_from([128, 256, 4096]),
       idle=st.booleans(), uneven=st.booleans())
def test_bounds_below_every_plan(layers, heads_kv, hidden, gb, seq, n, domain, gpu, cv, mbs,
                                 v, min_cp, idle, uneven):
    """Every plan the option's space holds (each inner choice: recomputation, sequence
    parallelism, ZeRO stage, placement) iterates no faster than the time bound and keeps
    its GPUs busy no less than the busy bound. Small batches and few KV heads force
    pipelines (dp <= batch, tp | KV heads), where the bubble term binds."""
    model = tiny_model(num_layers=layers, hidden_size=hidden, num_attention_heads=heads_kv[0],
                       num_kv_heads=heads_kv[1], ffn_hidden_size=4 * hidden,
                       global_batch_size=gb, seq_len=seq)
    cluster = small_cluster(8, domain=domain, gpu=gpu).model_copy(
        update={"step_time_cv": cv}).resized(n)
    options = SpaceOptions(max_microbatch=mbs, max_virtual_stages=v, min_cp_tokens=min_cp,
                           allow_idle_gpus=idle, allow_uneven=uneven)
    t, b = all_plans(model, cluster, options)
    got = plan_bounds(WorkTable(model, model_defaults(model), options), cluster)
    if not len(t):
        return
    assert got is not None
    assert t.min() >= got[0] * (1 - 1e-12), (t.min(), got[0])
    assert b.min() >= got[1] * (1 - 1e-12), (b.min(), got[1])
    assert got[1] <= got[0]


def test_bounds_beat_the_gemm_bound():
    """On the tiny catalog the time bound lies between the GEMM bound and the fastest plan,
    strictly above the GEMM bound (the kernels' real rates, the bubble, stragglers)."""
    model, templates, counts = INSTANCES["dense"]
    table = WorkTable(model, model_defaults(model), OPTIONS)
    for i, tpl in enumerate(templates):
        for n in counts:
            cl = tpl.resized(n)
            gemm = gemm_time_lower_bound_s(model, cl.gpu, n, model.global_batch_size,
                                           model.seq_len, "bf16")
            t_lb, b_lb = plan_bounds(table, cl)
            fastest = min(t for t, _ in every_plan("dense", i, n))
            least_busy = min(b for _, b in every_plan("dense", i, n))
            assert gemm < t_lb <= fastest and b_lb <= least_busy


def brute_force(instance, template_ids, counts, objective, limits, pricing):
    """The optimum over every (template, count, plan) of the subset, each plan evaluated."""
    return procure_brute_force(objective, limits, pricing, instance, template_ids, counts)


def solve_subset(instance, template_ids, counts, objective, limits, pricing):
    model, templates, _ = INSTANCES[instance]
    try:
        res = procure(model, TOKENS, templates=[templates[i] for i in template_ids],
                      counts=counts, objective=objective, days=limits.get("days"),
                      budget_usd=limits.get("cost_usd"), pricing=pricing, options=OPTIONS,
                      workers=1, goodput="off")
    except InfeasibleError:
        return None, None
    return res.choice.value(OBJECTIVE_METRIC[objective]), res.stats


@pytest.mark.slow(reason="hypothesis examples, a procurement and brute force each")
@SETTINGS
@given(instance=st.sampled_from(sorted(INSTANCES)), data=st.data(),
       objective=st.sampled_from(["cost", "energy", "gpu_hours", "time"]),
       deadline=st.sampled_from([None, 1.05, 1.3, 2.5]), pricing=st.sampled_from(["rent", "own"]))
def test_pruning_never_drops_the_optimum(instance, data, objective, deadline, pricing):
    """Over random sub-catalogs (templates and counts), the answer equals brute force over
    every (template, count, plan): no option the bounds prune holds a better plan."""
    _, templates, counts = INSTANCES[instance]
    ids = data.draw(st.lists(st.sampled_from(range(len(templates))), min_size=1, unique=True))
    ns = data.draw(st.lists(st.sampled_from(counts), min_size=1, unique=True))
    spec = load_pricing(mode=pricing)
    limits = {}
    if deadline is not None:  # above the fastest option's days (equal to it, rounding decides)
        fastest = brute_force(instance, ids, ns, "time", {}, spec)
        limits["days"] = deadline * fastest
    want = brute_force(instance, ids, ns, objective, limits, spec)
    got, _ = solve_subset(instance, ids, sorted(ns), objective, limits, spec)
    if want is None:
        assert got is None
    else:
        assert got is not None and math.isclose(got, want, rel_tol=1e-9), (got, want)


@pytest.mark.parametrize("instance", sorted(INSTANCES))
@pytest.mark.parametrize("objective", ["cost", "energy", "time"])
def test_stronger_bounds_solve_fewer_options(instance, objective, monkeypatch):
    """The whole tiny catalog: the same optimum as brute force, with fewer options solved
    than with the GEMM bound alone (the bounds switched off)."""
    _, templates, counts = INSTANCES[instance]
    ids, spec = list(range(len(templates))), load_pricing()
    want = brute_force(instance, ids, counts, objective, {}, spec)
    got, stats = solve_subset(instance, ids, list(counts), objective, {}, spec)
    monkeypatch.setattr(train, "plan_bounds", lambda *a: None)
    gemm_only, stats_off = solve_subset(instance, ids, list(counts), objective, {}, spec)
    assert math.isclose(got, want, rel_tol=1e-9) and math.isclose(gemm_only, want, rel_tol=1e-9)
    assert stats["solved"] < stats_off["solved"]
