"""The offload memory tier (ZeRO-Offload / ZeRO-Infinity): hand-checked formulas, the
evaluator's accounting, the solver's choice, and the CLI."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formulations.train.build import build_model
from formulations.linear import CpsatSession
from formulations.train.search import evaluate_key, inner_keys, lower_bounds, run_search
from formulations.train.space import STATES, SearchSpace, SpaceOptions
from planner.costmodel.train.tables import build_tables
from planner.costmodel.train.evaluator import OFFLOAD_KEY, evaluate
from planner.costmodel.train.offload import host_state_bytes, offload_times, optimizer_shard
from planner.costmodel.train.stage import state_bytes
from planner.errors import InfeasibleError
from planner.orchestration.train import solve
from planner.specs.plan_base import model_defaults
from planner.specs.cluster import OffloadTier
from planner.specs.loaders import load_cluster, load_model
from planner.specs.plan import Plan

from conftest import small_cluster, tiny_model
from test_cli import SUPERPOD, run

GiB = 2**30
#: PCIe Gen5 x16 at 80 %: 51.2 GB/s per direction; CPU Adam at 1e9 parameters/s.
TIER = OffloadTier(name="host DDR5", capacity_gib_per_gpu=256, bandwidth_GBps=64,
                   efficiency=0.8, cpu_adam_params_per_s=1e9)


def tiered(cluster, tier: OffloadTier = TIER):
    """``cluster`` with an offload tier; without the straggler term, which scales the whole
    step (offload included) and is tests/test_network_scale.py's."""
    return cluster.model_copy(update={"offload": tier, "step_time_cv": 0.0})


# ---- formulas, by hand --------------------------------------------------------------------
def test_zero_offload_formulas_by_hand():
    """1e9 parameters on a stage, ZeRO-1 over 8 ranks: each GPU owns 1.25e8 parameters."""
    p, n = 1e9, 8
    assert optimizer_shard(p, 1, n) == 1.25e8
    assert optimizer_shard(p, 0, n) == 1e9  # ZeRO 0: every rank steps all of them
    gpu = state_bytes(p, 1, n, "bf16", offload_optimizer=True)
    assert (gpu.weights, gpu.gradients, gpu.optimizer) == (2e9, 4e9, 0.0)
    saved = state_bytes(p, 1, n, "bf16").optimizer - gpu.optimizer
    assert saved == 1.5e9  # 12 B x 1.25e8
    host = host_state_bytes(p, 1, n, "bf16", True, False)
    assert (host.weights, host.gradients, host.optimizer) == (0.0, 5e8, 1.5e9)
    t = offload_times(TIER, p, 1, n, "bf16", True, False)
    assert t.grad_down_s == pytest.approx(1.25e8 * 4 / 51.2e9)  # 9.765625 ms
    assert t.grad_down_s == pytest.approx(0.009765625)
    assert t.param_copy_s == pytest.approx(0.0048828125)  # 2 B x 1.25e8 up
    assert t.step_s == pytest.approx(0.125)  # 1.25e8 / 1e9 per s
    assert t.fetch_s == 0.0


def test_zero_infinity_param_offload_by_hand():
    """ZeRO 3 over 8 ranks with the parameter shards in the tier: 2.5e8 B per GPU, fetched
    for each pass; no upload after a CPU step (the parameters already live there)."""
    p, n = 1e9, 8
    gpu = state_bytes(p, 3, n, "bf16", True, True)
    assert (gpu.weights, gpu.gradients, gpu.optimizer) == (0.0, 5e8, 0.0)
    host = host_state_bytes(p, 3, n, "bf16", True, True)
    assert (host.weights, host.gradients, host.optimizer) == (2.5e8, 5e8, 1.5e9)
    t = offload_times(TIER, p, 3, n, "bf16", True, True)
    assert t.fetch_s == pytest.approx(2.5e8 / 51.2e9)  # 4.8828125 ms per pass
    assert t.param_copy_s == 0.0
    # parameters offloaded, optimizer on the GPU: the updated shard goes down instead
    t = offload_times(TIER, p, 3, n, "bf16", False, True)
    assert (t.grad_down_s, t.step_s) == (0.0, 0.0)
    assert t.param_copy_s == pytest.approx(0.0048828125)


# ---- the evaluator ------------------------------------------------------------------------
MODEL = tiny_model(num_layers=4, hidden_size=1024, num_attention_heads=16, num_kv_heads=8,
                   ffn_hidden_size=4096, seq_len=2048, global_batch_size=16)


def _plan(**kw) -> Plan:
    base = dict(tp=2, pp=1, dp=4, global_batch_size=16, seq_len=2048, zero_stage=1)
    base.update(kw)
    return Plan(**base)


def test_evaluator_moves_the_optimizer_to_the_tier():
    cl = tiered(small_cluster(8, domain=8))
    on_gpu, off = evaluate(MODEL, cl, _plan()), evaluate(MODEL, cl, _plan(offload_optimizer=True))
    assert on_gpu.feasible and off.feasible
    saved = on_gpu.memory_breakdown_bytes["optimizer"]
    assert off.memory_breakdown_bytes["optimizer"] == 0.0
    assert on_gpu.memory_per_gpu_bytes - off.memory_per_gpu_bytes == pytest.approx(saved)
    # the tier holds the 12 B of states and the 4 B fp32 gradient shard
    assert off.host_memory_per_gpu_bytes == pytest.approx(saved * 16 / 12)
    assert on_gpu.host_memory_per_gpu_bytes == 0.0
    # time: pp = 1, so the change is the offload term minus the GPU's own Adam step
    assert on_gpu.time_breakdown_s[OFFLOAD_KEY] == 0.0
    assert off.time_breakdown_s["optimizer"] == 0.0
    delta = off.iteration_time_s - on_gpu.iteration_time_s
    assert delta == pytest.approx(off.time_breakdown_s[OFFLOAD_KEY]
                                  - on_gpu.time_breakdown_s["optimizer"], rel=1e-9)
    assert math.isclose(sum(off.time_breakdown_s.values()), off.iteration_time_s, rel_tol=1e-12)
    # the CPU step and the upload are exposed; the gradient transfer hides behind backward
    # except its last layer's share (one bucket)
    params = on_gpu.memory_breakdown_bytes["weights"] / 2
    t = offload_times(TIER, params, 1, 4, "bf16", True, False)
    assert off.time_breakdown_s[OFFLOAD_KEY] == pytest.approx(
        t.step_s + t.param_copy_s + t.grad_down_s / MODEL.num_layers, rel=1e-9)


def test_json_reports_the_tier_only_on_clusters_with_one():
    plain = evaluate(MODEL, small_cluster(8), _plan()).to_json()
    assert "host_memory_per_gpu_gib" not in plain and OFFLOAD_KEY not in plain["time_breakdown_s"]
    est = evaluate(MODEL, tiered(small_cluster(8)), _plan(offload_optimizer=True)).to_json()
    assert est["host_capacity_gib"] == 256 and est["host_memory_per_gpu_gib"] > 0
    assert set(est["host_memory_breakdown_gib"]) == {"weights", "gradients", "optimizer"}
    assert est["time_breakdown_s"][OFFLOAD_KEY] > 0


def test_offloading_without_a_tier_is_infeasible_with_a_reason():
    est = evaluate(MODEL, small_cluster(8), _plan(offload_optimizer=True))
    assert not est.feasible
    assert any("offload_optimizer=true needs an offload memory tier" in r for r in est.reasons)


def test_param_offload_needs_zero_3():
    with pytest.raises(ValueError, match="offload_params=true needs zero_stage=3"):
        _plan(offload_params=True, zero_stage=2)
    assert _plan(offload_params=True, zero_stage=3).offload_params


def test_host_capacity_is_a_feasibility_check():
    small = OffloadTier(capacity_gib_per_gpu=0.01, bandwidth_GBps=64,
                        cpu_adam_params_per_s=1e9)
    est = evaluate(MODEL, tiered(small_cluster(8), small), _plan(offload_optimizer=True))
    assert not est.feasible
    assert any("offload-tier memory" in r and "0.01 GiB per GPU" in r for r in est.reasons)


def test_plan_files_do_not_change_when_nothing_is_offloaded():
    assert "offload_optimizer" not in _plan().to_dict()
    d = _plan(offload_optimizer=True).to_dict()
    assert d["offload_optimizer"] is True and "offload_params" not in d
    assert Plan.model_validate(d) == _plan(offload_optimizer=True)


@st.composite
def offload_plans(draw):
    tp = draw(st.sampled_from([1, 2, 4]))
    pp = draw(st.sampled_from([1, 2]))
    dp = 8 // (tp * pp)
    zero = draw(st.integers(0, 3))
    mbs = draw(st.sampled_from([1, 2]))
    return Plan(tp=tp, pp=pp, dp=dp, microbatch_size=mbs, global_batch_size=dp * mbs * 2,
                seq_len=draw(st.sampled_from([1024, 2048])), zero_stage=zero,
                recompute=draw(st.sampled_from(["none", "selective", "full", "half"])),
                sequence_parallel=draw(st.booleans()) and tp > 1,
                dtype=draw(st.sampled_from(["bf16", "fp8"])),
                offload_optimizer=draw(st.booleans()),
                offload_params=zero == 3 and draw(st.booleans()))


@settings(max_examples=60, deadline=None)
@given(plan=offload_plans(), bw=st.sampled_from([16.0, 64.0, 450.0]))
def test_offload_never_raises_gpu_memory(plan, bw):
    """Whatever is offloaded, HBM use per GPU (every component) never grows; time falls at
    most by the GPU's Adam step, and without a pipeline grows by at most the offload term."""
    tier = TIER.model_copy(update={"bandwidth_GBps": bw})
    cl = tiered(small_cluster(8, domain=4), tier)
    base = plan.model_copy(update={"offload_optimizer": False, "offload_params": False})
    a, b = evaluate(MODEL, cl, base), evaluate(MODEL, cl, plan)
    assert b.memory_per_gpu_bytes <= a.memory_per_gpu_bytes
    for k, v in b.memory_breakdown_bytes.items():
        assert v <= a.memory_breakdown_bytes[k]
    assert b.iteration_time_s >= a.iteration_time_s - a.time_breakdown_s["optimizer"] * (1 + 1e-9)
    if plan.pp == 1:  # no bubble: the offload term is the whole difference
        assert b.iteration_time_s <= (a.iteration_time_s + b.time_breakdown_s[OFFLOAD_KEY]) * (
            1 + 1e-12)
    if a.feasible and not plan.offloads:
        assert b.feasible


# ---- the formulation --------------------------------------------------------------------
OPTS = SpaceOptions(max_microbatch=2, max_virtual_stages=2, min_cp_tokens=256)


@pytest.fixture(scope="module")
def tiered_tables():
    model = tiny_model(num_layers=4, global_batch_size=8)
    space = SearchSpace(model, tiered(small_cluster(8, domain=4)), model_defaults(model), {},
                        OPTS)
    return build_tables(space)


def test_state_options_with_a_tier(tiered_tables):
    space = tiered_tables.space
    o = next(o for o in space.outers if o.dp * o.cp > 1)
    assert [STATES[k] for k in space.state_options(o)] == list(STATES)
    one = next(o for o in space.outers if o.dp * o.cp == 1)
    assert [STATES[k] for k in space.state_options(one)] == [
        (0, False, False), (0, True, False), (3, False, True), (3, True, True)]
    plain = SearchSpace(space.model, small_cluster(8, domain=4), space.base, {}, OPTS)
    assert plain.state_options(o) == [0, 1, 2, 3]
    assert plain.state_options(one) == [0]
    fixed = SearchSpace(space.model, space.cluster, space.base,
                        {"offload_optimizer": True, "zero_stage": 2}, OPTS)
    assert [STATES[k] for k in fixed.state_options(o)] == [(2, True, False)]


def test_model_equals_evaluator_at_offloading_plans(tiered_tables):
    """Fix an offloading plan in the model: its value is the evaluator's, to the rounding;
    the presolve bound never exceeds it."""
    tb = tiered_tables
    lb = lower_bounds(tb)
    checked = 0
    for q in range(0, tb.num_points, max(1, tb.num_points // 12)):
        for key in inner_keys(tb, q):
            z, oo, op = STATES[key[3]]
            if not (oo or op) or key[1] != (0,) or key[2]:
                continue
            cand = evaluate_key(tb, key)
            assert lb[q] <= cand.objective * (1 + 1e-12)
            if not cand.estimate.feasible:
                continue
            lm, vm = build_model(tb, [q])
            for i in vm.literals(key):
                lm.vars[i].lb = lm.vars[i].ub = 1
            res = CpsatSession(lm).solve(30)
            assert res.status == "optimal"
            model_s = res.objective / (vm.obj_scale * vm.ticks.per_s)
            # integer exposure variables round up by a tick each, m times over the microbatches
            assert model_s <= cand.objective * (1 + 1e-9) + 4 / vm.ticks.per_s
            assert model_s == pytest.approx(cand.objective, rel=1e-6)
            checked += 1
    assert checked >= 5


def test_fixed_offload_through_the_search():
    model = tiny_model(num_layers=4, global_batch_size=8)
    space = SearchSpace(model, tiered(small_cluster(8, domain=4)), model_defaults(model),
                        {"offload_optimizer": True}, OPTS)
    best = run_search(build_tables(space), "cpsat").best
    assert best.plan.offload_optimizer and best.estimate.feasible


# ---- the solver decides ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def llama70b_8gpu():
    return load_model("llama3-70b"), load_cluster("dgx-h100-superpod", gpus=8)


def test_70b_on_one_node_needs_the_tier(llama70b_8gpu):
    """Llama 3 70B, full training (Adam, 18 B/parameter = 1.26 TB of states) on one 8x H100
    node: out of HBM at any sharding; with the DGX's host memory it fits, and the solver
    offloads the optimizer. CP-SAT and MILP agree."""
    model, cl = llama70b_8gpu
    base = {"global_batch_size": 64}
    with pytest.raises(InfeasibleError, match="no plan fits in memory"):
        solve(model, cl.model_copy(update={"offload": None}), base=base)
    res = solve(model, cl, base=base)
    best = res.best
    assert res.status == "optimal"
    assert best.plan.offload_optimizer
    est = best.estimate
    assert est.feasible and est.memory_per_gpu_bytes <= 80 * GiB
    assert 0 < est.host_memory_per_gpu_bytes <= 256 * GiB
    assert est.time_breakdown_s[OFFLOAD_KEY] > 0
    milp = solve(model, cl, base=base, backend="milp")
    assert milp.best.objective == pytest.approx(best.objective, rel=1e-9)


def test_no_offload_when_hbm_suffices():
    """With room in HBM, offloading only adds time: the tier changes nothing."""
    model = load_model("llama3-8b")
    base = {"global_batch_size": 64}
    opts = SpaceOptions(max_microbatch=4, max_virtual_stages=2)
    cl = load_cluster(SUPERPOD, gpus=16)
    plain = solve(model, cl.model_copy(update={"offload": None}), base=base, options=opts)
    tier = solve(model, cl, base=base, options=opts)
    assert not tier.best.plan.offloads
    assert tier.best.objective == pytest.approx(plain.best.objective, rel=1e-12)


def test_fixed_offload_without_a_tier_is_explained(llama70b_8gpu):
    model, cl = llama70b_8gpu
    with pytest.raises(InfeasibleError) as err:
        solve(model, cl.model_copy(update={"offload": None}),
              fixed={"offload_optimizer": True}, base={"global_batch_size": 64})
    assert "needs an offload memory tier" in err.value.reasons[0]


# ---- CLI ------------------------------------------------------------------------------------
def test_cli_fix_offload_json(capsys):
    code, out, _ = run(capsys, "solve", "-m", "llama3-70b", "-c", SUPERPOD,
                       "--gpus", "8", "--global-batch", "64", "--fix", "offload_optimizer=true",
                       "--fix", "offload_params=false", "--json", "--framework", "deepspeed")
    assert code == 0
    data = json.loads(out)
    assert data["plan"]["offload_optimizer"] is True and "offload_params" not in data["plan"]
    est = data["estimate"]
    assert est["time_breakdown_s"]["offload"] > 0
    assert math.isclose(sum(est["time_breakdown_s"].values()), est["iteration_time_s"],
                        rel_tol=1e-9)
    assert 0 < est["host_memory_per_gpu_gib"] <= est["host_capacity_gib"] == 256
    assert est["memory_breakdown_gib"]["optimizer"] == 0


def test_cli_offload_without_tier_exits_1(capsys):
    code, out, err = run(capsys, "solve", "-m", "llama3-70b", "-c", "ramp-a100",
                         "--gpus", "8", "--global-batch", "64", "--fix",
                         "offload_optimizer=true", "--json")
    assert code == 1
    data = json.loads(out)
    assert data["solver"]["status"] == "infeasible"
    assert "needs an offload memory tier" in data["reasons"][0]
    assert "dgx-a100-superpod" in data["hints"][0]


def test_raw_formulation_with_a_tight_tier_matches_exhaustive():
    """Without the presolve, on a small GPU with a small tier (both memories bind), the
    model alone finds and proves the exhaustive optimum, for CP-SAT and MILP."""
    from formulations.train.exhaustive import run_exhaustive

    model = tiny_model(num_layers=8, hidden_size=2048, num_attention_heads=16,
                       ffn_hidden_size=8192, global_batch_size=8)
    cl = small_cluster(4, domain=4, gpu="a100-sxm-40gb")
    cl = cl.model_copy(update={"gpu": cl.gpu.model_copy(update={"hbm_gib": 4.0})})
    tier = TIER.model_copy(update={"capacity_gib_per_gpu": 2.5})
    space = SearchSpace(model, tiered(cl, tier), model_defaults(model), {}, OPTS)
    ref = run_exhaustive(space, "time", 2)
    assert ref.best.plan.offloads
    tb = build_tables(space)
    for backend in ("cpsat", "milp"):
        res = run_search(tb, backend, 2, use_presolve=False)
        assert res.status == "optimal"
        assert [c.objective for c in res.candidates] == pytest.approx(
            [c.objective for c in ref.candidates], rel=1e-9)


def test_moe_experts_offload_with_their_own_shards():
    """Routed experts are sharded over the expert-data-parallel group: their offloaded states
    follow that sharding, and the model still agrees with brute force."""
    from formulations.train.exhaustive import run_exhaustive

    model = tiny_model(num_layers=2, hidden_size=512, num_attention_heads=8, num_kv_heads=8,
                       ffn_hidden_size=1024, seq_len=512, global_batch_size=4,
                       moe=dict(num_experts=4, top_k=2, expert_ffn_hidden_size=2048))
    cl = small_cluster(4, domain=4, gpu="a100-sxm-40gb")
    cl = cl.model_copy(update={"gpu": cl.gpu.model_copy(update={"hbm_gib": 2.2})})
    space = SearchSpace(model, tiered(cl), model_defaults(model), {"pp": 1},
                        SpaceOptions(max_microbatch=1, max_virtual_stages=1))
    ref = run_exhaustive(space, "time", 1)
    assert ref.best.plan.offloads and ref.best.plan.ep > 1
    est = ref.best.estimate
    assert est.memory_breakdown_bytes["optimizer"] == 0.0 and est.host_memory_per_gpu_bytes > 0
    res = run_search(build_tables(space), "cpsat", 1)
    assert res.best.objective == pytest.approx(ref.best.objective, rel=1e-9)
