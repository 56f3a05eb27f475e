"""The serving search: CP-SAT = MILP = brute force on randomized instances (one pool or
disaggregated prefill + decode pools, mixed GPU types, up to two layouts per pool, every
objective, with and without a GPU budget), the answer checked by the evaluator, and a
looser SLO never needing more GPUs."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formulations.serve.search import BACKENDS, ServeProblem, presolve, solve
from formulations.serve.space import SCALE, Row, ServeSpace, tables
from planner.errors import InputError
from planner.specs.loaders import load_cluster, load_model
from planner.specs.serve import ServeEngine, ServePlan, ServeWorkload

H100 = load_cluster("dgx-h100-superpod")
B200 = load_cluster("dgx-b200-superpod")
L8 = load_model("llama3-8b")
SMALL = ServeSpace(tp=(1, 2), pp=(1,), concurrency=(8, 32, 128), weight_dtype=("bf16", "fp8"),
                   kv_dtype=("fp8",), prefill_chunk=(2048,))


def _random_row(rng: random.Random, pool: str, scale: int) -> Row:
    cluster = rng.choice([H100, B200])
    gpus = rng.choice([1, 2, 4, 8])
    cap = rng.randint(1, 40) * scale
    coef = {"gpus": gpus, "cost": gpus * rng.choice([2_500_000, 5_000_000, 3_140_000]),
            "energy": gpus * rng.randint(500_000, 1_400_000)}
    return Row(pool, ServePlan(tp=gpus, gpu=cluster.gpu.name), cluster, gpus, cap, coef)


def _random_problem(rng: random.Random) -> ServeProblem:
    names = rng.choice([("aggregated",), ("prefill", "decode")])
    scale = rng.choice([1, 7, 10**5, 123457])
    pools = {p: [_random_row(rng, p, scale) for _ in range(rng.randint(1, 5))] for p in names}
    objective = rng.choice(["gpus", "cost", "energy", "throughput"])
    top = max(r.cap for rows in pools.values() for r in rows)
    rate = None if objective == "throughput" else rng.randint(1, 6 * top)
    budget = rng.choice([None, rng.randint(4, 40)]) if rate else rng.randint(1, 24)
    return ServeProblem(pools, objective, rate, budget, rng.choice([1, 1, 2]))


def test_backends_agree_on_120_random_instances():
    rng = random.Random(15)
    statuses = set()
    for _ in range(120):
        problem = _random_problem(rng)
        out = [solve(problem, b) for b in BACKENDS]
        statuses.add(out[0].status)
        assert len({o.status for o in out}) == 1, (problem, out)
        if out[0].status == "optimal":
            values = [o.objective for o in out]
            assert values[0] == values[1] == values[2], (problem, out)
    assert statuses == {"optimal", "infeasible"}  # both kinds of answer were exercised


@pytest.fixture(scope="module")
def small_tables():
    w = ServeWorkload(isl=1024, osl=128, ttft_ms=300, tpot_ms=40, rate_rps=50)
    return tables(L8, [H100, B200], w, SMALL, ServeEngine())


@pytest.mark.parametrize("mode", ["aggregated", "disaggregated"])
@pytest.mark.parametrize("objective,rate,budget,k", [
    ("gpus", 50, None, 1), ("cost", 120, None, 2), ("energy", 50, 40, 1),
    ("throughput", None, 16, 1), ("throughput", None, 9, 2), ("gpus", 400, 24, 1)])
def test_backends_agree_on_cost_model_tables(small_tables, mode, objective, rate, budget, k):
    problem = ServeProblem(small_tables[mode], objective,
                           None if rate is None else rate * SCALE, budget, k)
    out = [solve(problem, b) for b in BACKENDS]
    assert len({o.status for o in out}) == 1
    assert out[0].objective == out[1].objective == out[2].objective


def test_answers_need_what_they_need():
    problem = ServeProblem({"aggregated": [_random_row(random.Random(1), "aggregated", 10)]},
                           "throughput")
    with pytest.raises(InputError, match="--gpus"):
        solve(problem)
    with pytest.raises(InputError, match="--rate"):
        solve(ServeProblem(problem.pools, "cost"))


def test_presolve_keeps_the_optimum():
    rng = random.Random(7)
    for _ in range(40):
        problem = _random_problem(rng)
        small = presolve(problem)
        assert all(len(small.pools[p]) <= len(problem.pools[p]) for p in problem.pools)
        a, b = solve(problem, "exhaustive"), solve(small, "cpsat")
        assert a.status == b.status and a.objective == b.objective


@pytest.mark.slow(reason="a serving search over one cluster per GPU type")
def test_a_fleet_mixing_gpu_types_is_evaluated_on_each_types_own_cluster():
    """The search tabulates each GPU type on its own catalog cluster; the evaluator must
    cost each pool there too. Llama 3 70B at 200 requests/s with MI300X decode and B200
    prefill (each pool as the search lays it out for its own type): evaluated with the B200
    pool on the MI300X cluster's network, its prefill ran at 1.5x its capacity
    ("saturates")."""
    from planner import catalog
    from planner.costmodel.serve.evaluate import evaluate_serve
    from planner.orchestration.serve import plan_serve
    from planner.specs.loaders import load_cluster, load_model
    from planner.specs.serve import ServeWorkload, load_engine

    seen = {}
    for name in catalog.names("clusters"):
        c = load_cluster(name)
        seen.setdefault(c.gpu.name, c)
    model, clusters = load_model("llama3-70b"), list(seen.values())
    w = ServeWorkload(isl=2048, osl=256, rate_rps=200, ttft_ms=500, tpot_ms=30)
    pools = {g: plan_serve(model, clusters, w, objective="cost",
                           fix={"gpu": g, "mode": "disaggregated"},
                           engine=load_engine("trtllm")).plan
             for g in ("mi300x", "b200")}
    mixed = pools["mi300x"].model_copy(update={"prefill": pools["b200"].prefill})
    assert mixed.prefill is not None and mixed.prefill.gpu != mixed.gpu
    est = evaluate_serve(model, seen["mi300x"], mixed, w, load_engine("trtllm"), tuple(clusters))
    assert est.feasible, est.reasons


# ---- time limits (issue "One request, one road", item 5) ---------------------------------
def test_table_incumbent_is_a_fleet_and_the_one_layout_optimum_with_a_rate():
    """The tables' one-pass fleet (a solve stopped before its first plan answers it) keeps
    every constraint; with a rate, one layout per pool and no budget it is the brute
    force's optimum (each pool's cheapest row covering the rate); never better than it."""
    from formulations.serve.search import feasible, table_incumbent, value_of

    rng = random.Random(5)
    checked = exact = 0
    for _ in range(150):
        problem = _random_problem(rng)
        counts = table_incumbent(problem)
        best = solve(problem, "exhaustive")
        if counts is None:
            continue
        checked += 1
        assert feasible(problem, counts) and best.status == "optimal", (problem, counts)
        value = value_of(problem, counts)
        if problem.objective == "throughput":
            assert 0 < value <= best.objective
        else:
            assert value >= best.objective
            if problem.max_layouts == 1 and problem.budget is None:
                exact += 1
                assert value == best.objective, (problem, counts)
    assert checked >= 80 and exact >= 10
