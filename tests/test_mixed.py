"""Mixed-fleet training (issue 39 item 3): the mixed cluster spec, the exact evaluator of a
plan whose stages sit on different GPU pools, and the proven solve over the mixed space."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formulations.train.mixed import pool_orders, run_mixed_search, shapes
from formulations.train.options import SpaceOptions
from planner import api
from planner.costmodel.compose import straggler_share
from planner.costmodel.pipeline import chunk_sizes
from planner.costmodel.train.evaluator import evaluate
from planner.costmodel.train.mixed import evaluate_mixed, pool_terms, stage_width
from planner.costmodel.train.stage import optimizer_step_s, p2p_bytes, stage_params_split
from planner.costmodel.layer import LayerShape
from planner.errors import InputError
from planner.orchestration.mixed import solve_mixed
from planner.specs.mixed import MixedClusterSpec, MixedPlan, PoolLink, mixed_from_dict
from planner.specs.plan import Plan
from planner.specs.plan_base import model_defaults

from conftest import ROOT, small_cluster, tiny_model


def mixed(a, b, bw=25.0, latency_us=10.0, eff=1.0) -> MixedClusterSpec:
    return MixedClusterSpec(name="mix", pools=[{"name": "h", "cluster": a},
                                               {"name": "a", "cluster": b}],
                            join=PoolLink(name="dcn", bandwidth_GBps=bw, latency_us=latency_us,
                                          efficiency=eff))


def mplan(plan: Plan, pools: list[str], layers: list[int]) -> MixedPlan:
    return MixedPlan(plan=plan, stages=[{"pool": p, "layers": n} for p, n in zip(pools, layers)])


def compositions(total: int, parts: int):
    for cuts in itertools.combinations(range(1, total), parts - 1):
        b = (0,) + cuts + (total,)
        yield [b[i + 1] - b[i] for i in range(parts)]


# ---- the spec ------------------------------------------------------------------------------
def test_example_file_loads():
    mc = api.load_mixed_cluster(str(ROOT / "examples" / "mixed-h100-a100.yaml"))
    assert [(p.name, p.cluster.num_gpus, p.cluster.gpu.name) for p in mc.pools] == [
        ("h100", 512, "h100-sxm"), ("a100", 512, "a100-sxm-80gb")]
    assert mc.join.bandwidth_GBps == 25 and mc.num_gpus == 1024


def test_spec_errors_name_the_field():
    a, b = small_cluster(8), small_cluster(8, gpu="a100-sxm-80gb")
    # the join cannot give a GPU more than its own outermost level (8 GPUs: NVSwitch 450)
    with pytest.raises(ValueError, match="exceeds pool 'h''s outermost level"):
        mixed(small_cluster(16), small_cluster(16, gpu="a100-sxm-80gb"), bw=100)
    with pytest.raises(ValueError, match="names must be unique"):
        MixedClusterSpec(name="x", pools=[{"name": "h", "cluster": a}, {"name": "h", "cluster": b}],
                         join=PoolLink(name="j", bandwidth_GBps=10))
    with pytest.raises(InputError, match=r"pools\.0\.num_gpus|pools.0 \(h\): num_gpus"):
        mixed_from_dict({"name": "x", "join": {"name": "j", "bandwidth_GBps": 10},
                         "pools": [{"name": "h", "cluster": "dgx-h100-superpod", "num_gpus": 0},
                                   {"name": "a", "cluster": "dgx-a100-superpod"}]}, "f.yaml")
    with pytest.raises(InputError, match="unknown key"):
        mixed_from_dict({"name": "x", "join": {"name": "j", "bandwidth_GBps": 10, "bw": 1},
                         "pools": [{"name": "h", "cluster": "dgx-h100-superpod"},
                                   {"name": "a", "cluster": "dgx-a100-superpod"}]}, "f.yaml")
    plan = Plan(global_batch_size=8, seq_len=2048, pp=2)
    with pytest.raises(ValueError, match="2 stages given|1 stages given"):
        mplan(plan, ["h"], [8])
    with pytest.raises(ValueError, match="interleaved"):
        mplan(plan.model_copy(update={"virtual_stages": 2}), ["h", "a"], [4, 4])


def test_structure_reasons():
    model = tiny_model()
    mc = mixed(small_cluster(8), small_cluster(8, gpu="a100-sxm-80gb"))
    plan = Plan(global_batch_size=64, seq_len=2048, tp=8, pp=2)
    est = evaluate_mixed(model, mc, mplan(plan, ["h", "x"], [4, 4]))
    assert not est.feasible and "pools ['x']" in est.reasons[0]
    est = evaluate_mixed(model, mc, mplan(plan, ["h", "a"], [4, 3]))
    assert not est.feasible and "hold 7 layers" in est.reasons[0]
    est = evaluate_mixed(model, mc, mplan(plan.model_copy(update={"tp": 4, "dp": 2}),
                                          ["h", "h"], [4, 4]))
    assert not est.feasible and "16 GPUs, but the pool has 8" in est.reasons[0]


# ---- the evaluator ---------------------------------------------------------------------------
@pytest.mark.parametrize("kw", [dict(tp=2, pp=4, dp=2), dict(tp=8, pp=2),
                                dict(dp=16, zero_stage=1),
                                dict(tp=2, pp=2, dp=4, recompute="full", sequence_parallel=True),
                                dict(tp=4, pp=4, zero_stage=3, dp=1)])
def test_one_pool_is_the_single_type_evaluator(kw):
    """Every stage on one pool, Megatron's default split: the single-type evaluator's
    figures exactly (the join is appended but never crossed)."""
    model = tiny_model(tied_embeddings=True)
    a = small_cluster(16)
    mc = mixed(a, small_cluster(16, gpu="a100-sxm-80gb"))
    plan = Plan(global_batch_size=64, seq_len=2048, uneven_pipeline=True, **kw)
    one = evaluate(model, a, plan)
    two = evaluate_mixed(model, mc, mplan(plan, ["h"] * plan.pp,
                                          chunk_sizes(8, plan.pp, True)))
    assert two.feasible == one.feasible
    for f in ("iteration_time_s", "memory_per_gpu_bytes", "energy_j", "mfu", "gpu_busy_s",
              "hardware_flops"):
        assert getattr(two, f) == pytest.approx(getattr(one, f), rel=1e-12), f
    assert two.time_breakdown_s == pytest.approx(one.time_breakdown_s, rel=1e-12)


def test_cross_pool_send_uses_the_join():
    """A pipeline send to another pool takes bytes / (join bandwidth x efficiency) + its
    latency; within a pool, the pool's own level. Stage p2p = forward + backward send."""
    model = tiny_model()
    mc = mixed(small_cluster(8), small_cluster(8, gpu="a100-sxm-80gb"), bw=5.0,
               latency_us=100.0, eff=0.5)
    plan = Plan(global_batch_size=64, seq_len=2048, tp=4, pp=4, dp=1)
    est = evaluate_mixed(model, mc, mplan(plan, ["h", "h", "a", "a"], [2, 2, 2, 2]))
    size = 2048 * 1024 * 2 / 4  # tokens x hidden x bf16 / tp
    join = size / (5e9 * 0.5) + 100e-6
    nvs = size / (450e9 * 0.8) + 2e-6  # small_cluster's NVSwitch: 450 GB/s, eff 0.8, 2 us
    assert size == p2p_bytes(model, LayerShape(4, 1, 1, 2048))
    assert [s.p2p_s for s in est.stages] == pytest.approx(
        [2 * nvs, nvs + join, join + nvs, 2 * nvs], rel=1e-12)
    # and the slow join costs time: the same plan with all four stages on the H100 pool
    # (16 GPUs: pp 4 x tp 4) is faster than the H100 half of the cross-pool plan alone
    assert est.stages[1].stage_time_s > est.stages[0].stage_time_s


def test_memory_is_checked_against_each_stages_gpu():
    """A stage that needs more than 40 GiB fits on an 80 GB H100 and not on an A100-40GB:
    the plan with it on the A100 pool is refused naming that stage and GPU; swapped, it
    fits."""
    model = tiny_model(hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
                       ffn_hidden_size=14336, num_layers=12)
    mc = mixed(small_cluster(1, domain=1), small_cluster(1, domain=1, gpu="a100-sxm-40gb"))
    plan = Plan(global_batch_size=8, seq_len=2048, pp=2, dp=1)
    heavy_on_a = evaluate_mixed(model, mc, mplan(plan, ["h", "a"], [2, 10]))
    heavy_on_h = evaluate_mixed(model, mc, mplan(plan, ["a", "h"], [2, 10]))
    gib = 2**30
    # the 10-layer stage: ~45 GiB (Adam states of ~0.3 B parameters at 16 B each, and more)
    assert 40 * gib < heavy_on_a.stages[1].memory_bytes < 80 * gib * 0.9
    assert 40 * gib < heavy_on_h.stages[1].memory_bytes < 80 * gib * 0.9
    assert not heavy_on_a.feasible
    assert "stage 1 (pool 'a'" in heavy_on_a.reasons[0] and "a100-sxm-40gb" in heavy_on_a.reasons[0]
    assert heavy_on_h.feasible, heavy_on_h.reasons


# ---- the solve -----------------------------------------------------------------------------
def test_mixed_plan_beats_either_pool_with_stages_balanced_by_speed():
    """One H100 and one A100 (80 GB), an 8-layer model, tp = dp = 1: alone, a GPU runs all
    8 layers for each of the m = 16 microbatches; together, two stages of n and 8 - n
    layers with ``T(n) = m max(S0, S1) + (S0 + S1)/2 + max(R0, R1)`` (Narayanan et al.
    2021's 1F1B: the slowest stage paces the m microbatches, the fill and drain pass once
    through every stage). Computed here by hand from one layer's time on each GPU, the
    ends' times, the send over the join and each stage's Adam step."""
    model = tiny_model(num_layers=8, global_batch_size=16)
    h, a = small_cluster(1, domain=1), small_cluster(1, domain=1, gpu="a100-sxm-80gb")
    mc = mixed(h, a, bw=50.0, latency_us=10.0)
    fixed = {"microbatch_size": 1, "recompute": "none", "zero_stage": 0}
    res = solve_mixed(model, mc, fixed=fixed, backend="exhaustive", time_limit_s=120)
    assert res.status == "optimal" and res.best_kind == "mixed"

    plan = Plan(global_batch_size=16, seq_len=2048, pp=2, microbatch_size=1)
    m = 16
    size = p2p_bytes(model, LayerShape(1, 1, 1, 2048))
    send = size / 50e9 + 10e-6
    s = straggler_share(0.01, 2)
    best = (math.inf, None)
    for order in (("h", "a"), ("a", "h")):
        t = {p: pool_terms(model, mc, plan, p, 1) for p in order}
        layer = {p: t[p].costs["dense"].fwd_s + t[p].costs["dense"].bwd_s for p in order}
        emb = t[order[0]].emb.fwd_s + t[order[0]].emb.bwd_s
        head = t[order[1]].head.fwd_s + t[order[1]].head.bwd_s
        for n in range(1, 8):
            s0 = n * layer[order[0]] + emb + 2 * send
            s1 = (8 - n) * layer[order[1]] + head + 2 * send
            r0 = optimizer_step_s(mc.pool(order[0]).cluster.gpu, stage_params_split(
                model, 1, 2, {"dense": n}, True, False)[0], 0, 1)
            r1 = optimizer_step_s(mc.pool(order[1]).cluster.gpu, stage_params_split(
                model, 1, 2, {"dense": 8 - n}, False, True)[0], 0, 1)
            total = (m * max(s0, s1) + (s0 + s1) / 2 + max(r0, r1)) * (1 + s)
            best = min(best, (total, (order, n)), key=lambda x: x[0])
    total, (order, n) = best
    assert res.iteration_time_s == pytest.approx(total, rel=1e-9)
    got = res.mixed.plan
    assert (tuple(got.pools), got.layers[0]) == (order, n)
    # balanced by speed: the stage times meet, n c_0 + e_0 = (8 - n) c_1 + e_1 (each
    # stage's per-layer time c and its end, embedding first, head last), to a layer; the
    # A100, 2.5x slower per layer, holds fewer layers
    t0, t1 = (pool_terms(model, mc, plan, p, 1) for p in got.pools)
    c0, c1 = (x.costs["dense"].fwd_s + x.costs["dense"].bwd_s for x in (t0, t1))
    e0, e1 = t0.emb.fwd_s + t0.emb.bwd_s, t1.head.fwd_s + t1.head.bwd_s
    balanced = (8 * c1 + e1 - e0) / (c0 + c1)
    assert abs(got.layers[0] - balanced) <= 1.0
    assert got.layers[got.pools.index("a")] < got.layers[got.pools.index("h")]
    # faster than either GPU alone (their proven single-pool optima)
    for pool in ("h", "a"):
        assert res.iteration_time_s < res.single[pool].estimate.iteration_time_s


def _brute_force(model, mc, base, fixed, opts):
    best = math.inf
    for order in pool_orders(mc):
        for plan in shapes(model, mc, order, base, fixed, opts):
            w = stage_width(plan)
            pools = [p for p in order for _ in range(mc.pool(p).cluster.num_gpus // w)]
            if len(pools) > model.num_layers:
                continue
            for split in compositions(model.num_layers, len(pools)):
                e = evaluate_mixed(model, mc, mplan(plan, pools, split))
                if e.feasible:
                    best = min(best, e.iteration_time_s)
    return best


@pytest.mark.parametrize("case", ["dense", "first_k_dense_moe"])
def test_multi_pool_search_equals_brute_force(case):
    """Every (shape, pool order, layer split) of the multi-pool space evaluated exactly:
    the search's answer has the least time (a homogeneous model goes through the per-class
    tables, a dense+MoE one through the per-segment tables)."""
    if case == "dense":
        model = tiny_model(num_layers=6, global_batch_size=16)
    else:
        model = tiny_model(num_layers=5, global_batch_size=16,
                           moe={"num_experts": 4, "top_k": 2, "expert_ffn_hidden_size": 1024,
                                "first_k_dense": 2})
    mc = mixed(small_cluster(4, domain=4), small_cluster(4, domain=4, gpu="a100-sxm-40gb"),
               bw=2.0, latency_us=50.0)
    base, fixed = model_defaults(model), {"zero_stage": 1}
    opts = SpaceOptions(max_microbatch=2)
    res = run_mixed_search(model, mc, base, fixed, opts)
    assert res.status == "optimal"
    assert res.best.iteration_time_s == pytest.approx(
        _brute_force(model, mc, base, fixed, opts), rel=1e-12)


GPUS = ["h100-sxm", "a100-sxm-80gb", "a100-sxm-40gb", "b200"]


@settings(max_examples=6, deadline=None)
@given(g1=st.sampled_from(GPUS), g2=st.sampled_from(GPUS), n1=st.sampled_from([1, 2, 4]),
       n2=st.sampled_from([1, 2, 4]), layers=st.integers(2, 6),
       batch=st.sampled_from([4, 8, 16]), bw=st.sampled_from([0.5, 5.0, 25.0]))
def test_never_slower_than_the_best_single_pool(g1, g2, n1, n2, layers, batch, bw):
    """The mixed solve is never slower than the fastest pool alone (the single-type
    solve's proven optimum on each pool), and its answer is what the evaluator says."""
    model = tiny_model(num_layers=layers, global_batch_size=batch)
    mc = mixed(small_cluster(n1, domain=n1, gpu=g1), small_cluster(n2, domain=n2, gpu=g2),
               bw=bw)
    fixed = {"zero_stage": 1, "recompute": "none"}
    res = solve_mixed(model, mc, fixed=fixed, backend="exhaustive", time_limit_s=300,
                      options=SpaceOptions(max_microbatch=2, max_virtual_stages=2))
    assert res.status == "optimal"
    alone = min(s.estimate.iteration_time_s for s in res.single.values() if s is not None)
    assert res.iteration_time_s <= alone * (1 + 1e-12)
    if res.best_kind == "mixed":
        again = evaluate_mixed(model, mc, res.mixed.plan)
        assert again.feasible and again.iteration_time_s == pytest.approx(
            res.iteration_time_s, rel=1e-12)
        assert res.iteration_time_s < alone


def test_api_round_trip():
    model = tiny_model(num_layers=4, global_batch_size=8)
    mc = mixed(small_cluster(1, domain=1), small_cluster(1, domain=1, gpu="a100-sxm-80gb"),
               bw=50.0)
    res = api.solve_mixed(model, mc, fix={"microbatch_size": 1}, backend="exhaustive")
    j = res.to_json()
    assert j["status"] == "optimal" and set(j["single_pool"]) == {"h", "a"}
    if res.best_kind == "mixed":
        est = api.evaluate_mixed(model, mc, j["plan"])
        assert est.iteration_time_s == pytest.approx(res.iteration_time_s, rel=1e-12)


# ---- export ------------------------------------------------------------------------------
def test_megatron_export_writes_the_layout_and_refuses_what_it_cannot_run():
    from planner.export.mixed import megatron_mixed_args, stage_ranks

    model = tiny_model()
    mc = mixed(small_cluster(8), small_cluster(8, gpu="a100-sxm-80gb"))
    plan = Plan(global_batch_size=64, seq_len=2048, tp=8, pp=2, zero_stage=0)
    mp = mplan(plan, ["a", "h"], [3, 5])
    args = megatron_mixed_args(model, mc, mp)
    i = args.index("--pipeline-model-parallel-layout")
    # Megatron-LM's layout: E the embedding, t a decoder layer, | between stages, L the loss
    assert args[i + 1] == "Et*3|t*5L"
    assert "--decoder-first-pipeline-num-layers" not in args
    assert stage_ranks(mp) == [(0, 7, "a"), (8, 15, "h")]
    with pytest.raises(InputError, match="zero_stage=3"):
        megatron_mixed_args(model, mc, mplan(plan.model_copy(
            update={"zero_stage": 3, "dp": 1}), ["a", "h"], [3, 5]))
    odd = Plan(global_batch_size=64, seq_len=2048, tp=4, pp=2, dp=2,
               placement={"order": ["tp", "pp", "cp", "ep", "dp"]})
    with pytest.raises(InputError, match="placement.order=tp-pp-cp-ep-dp: a mixed plan"):
        megatron_mixed_args(model, mc, mplan(odd, ["a", "h"], [3, 5]))


def test_cpsat_mixed_solve_equals_brute_force_over_the_whole_mixed_space():
    """The whole mixed space by brute force: each pool alone by the exhaustive backend
    (every plan of its single-type space evaluated), every multi-pool plan by the mixed
    evaluator; solve_mixed with CP-SAT for the pools alone finds the same time."""
    from planner.orchestration.train import solve

    model = tiny_model(num_layers=6, global_batch_size=16)
    mc = mixed(small_cluster(4, domain=4), small_cluster(4, domain=4, gpu="a100-sxm-40gb"),
               bw=2.0, latency_us=50.0)
    fixed = {"zero_stage": 1}
    opts = SpaceOptions(max_microbatch=2, max_virtual_stages=2)
    res = solve_mixed(model, mc, fixed=fixed, backend="cpsat", options=opts,
                      time_limit_s=300)
    assert res.status == "optimal"
    alone = [solve(model, p.cluster, fixed=fixed, backend="exhaustive", options=opts,
                   time_limit_s=300).best.estimate.iteration_time_s for p in mc.pools]
    across = _brute_force(model, mc, model_defaults(model), fixed, opts)
    assert res.iteration_time_s == pytest.approx(min(alone + [across]), rel=1e-12)


def test_single_type_loader_names_a_mixed_file():
    from planner.specs.loaders import load_cluster

    with pytest.raises(InputError, match="a mixed cluster .*solve_mixed"):
        load_cluster(str(ROOT / "examples" / "mixed-h100-a100.yaml"))


def test_non_contiguous_pools_cross_the_join_at_every_change():
    """The evaluator takes any stage order: h, a, h crosses the join twice, and each
    stage's two sends are both over it."""
    model = tiny_model()
    mc = mixed(small_cluster(16), small_cluster(8, gpu="a100-sxm-80gb"), bw=5.0,
               latency_us=100.0)
    plan = Plan(global_batch_size=64, seq_len=2048, tp=8, pp=3, dp=1)
    est = evaluate_mixed(model, mc, mplan(plan, ["h", "a", "h"], [3, 2, 3]))
    join = 2048 * 1024 * 2 / 8 / 5e9 + 100e-6
    assert est.feasible, est.reasons
    assert [s.p2p_s for s in est.stages] == pytest.approx([2 * join] * 3, rel=1e-12)
    assert est.gpus_per_pool == {"h": 16, "a": 8}


def test_straggler_share_is_the_largest_spread_over_all_the_gpus():
    """A synchronous step waits for the slowest GPU of the whole job: the straggler factor
    is straggler_share of the pools' largest step-time spread over all the GPUs."""
    model = tiny_model()
    h = small_cluster(8).model_copy(update={"step_time_cv": 0.0})
    a = small_cluster(8, gpu="a100-sxm-80gb").model_copy(update={"step_time_cv": 0.05})
    mc = mixed(h, a)
    plan = Plan(global_batch_size=64, seq_len=2048, tp=8, pp=2)
    est = evaluate_mixed(model, mc, mplan(plan, ["h", "a"], [5, 3]))
    s = straggler_share(0.05, 16)
    assert s > 0
    t = est.iteration_time_s
    assert est.time_breakdown_s["straggler"] == pytest.approx(t * s / (1 + s), rel=1e-12)


def test_a_time_limited_search_is_not_called_optimal():
    model = tiny_model(num_layers=6, global_batch_size=16)
    mc = mixed(small_cluster(4, domain=4), small_cluster(4, domain=4, gpu="a100-sxm-40gb"))
    res = run_mixed_search(model, mc, model_defaults(model), {}, SpaceOptions(),
                           time_limit_s=1e-9)
    assert res.status == "time_limit" and res.best is None
