"""The exact evaluator: feasibility reasons, breakdowns, determinism, calibration."""

from __future__ import annotations

import pytest

from planner.costmodel.constants import GiB
from planner.costmodel.train.evaluator import MEMORY_KEYS, OFFLOAD_KEY, TIME_KEYS, evaluate
from planner.specs.loaders import load_cluster, load_model
from planner.specs.plan import Plan
from planner.validation import run_validation

from conftest import small_cluster, tiny_model


def plan70(**kw) -> Plan:
    base = dict(tp=8, pp=4, dp=32, microbatch_size=1, global_batch_size=512, seq_len=8192,
                virtual_stages=5, sequence_parallel=True, recompute="selective", zero_stage=1)
    base.update(kw)
    return Plan(**base)


def test_breakdowns_sum_to_totals(llama70b, superpod):
    est = evaluate(llama70b, superpod, plan70())
    assert est.feasible, est.reasons
    assert set(est.time_breakdown_s) == set(TIME_KEYS) | {OFFLOAD_KEY}  # a tier: host DDR5
    assert set(est.memory_breakdown_bytes) == set(MEMORY_KEYS)
    assert sum(est.time_breakdown_s.values()) == pytest.approx(est.iteration_time_s, rel=1e-12)
    assert sum(est.memory_breakdown_bytes.values()) == pytest.approx(est.memory_per_gpu_bytes)
    assert 0.3 < est.mfu < 0.6
    assert est.tokens_per_s == pytest.approx(512 * 8192 / est.iteration_time_s)


def test_deterministic(llama70b, superpod):
    a = evaluate(llama70b, superpod, plan70())
    b = evaluate(llama70b, superpod, plan70())
    assert a == b


def test_tp_not_dividing_heads(llama70b, superpod):
    est = evaluate(llama70b, superpod, plan70(tp=3, dp=32))
    assert not est.feasible
    assert any("tp=3 does not divide num_attention_heads=64" in r for r in est.reasons)


def test_degree_product_must_equal_gpu_count(llama70b, superpod):
    est = evaluate(llama70b, superpod, plan70(dp=16))
    assert not est.feasible
    assert any("= 512 but the cluster has 1024 GPUs" in r for r in est.reasons)
    assert evaluate(llama70b, superpod, plan70(dp=16), allow_idle_gpus=True).feasible
    too_many = evaluate(llama70b, superpod, plan70(dp=64))
    assert any("2048 GPUs, but the cluster has 1024" in r for r in too_many.reasons)


def test_out_of_memory_is_explained(llama70b, superpod):
    est = evaluate(llama70b, superpod, plan70(tp=1, pp=1, dp=1024, virtual_stages=1,
                                              recompute="none", zero_stage=0,
                                              sequence_parallel=False))
    assert not est.feasible
    msg = " ".join(est.reasons)
    assert "GiB per GPU" in msg and "HBM is 80 GiB" in msg
    assert est.memory_per_gpu_bytes > 80 * GiB


def test_batch_and_layer_divisibility(llama70b, superpod):
    est = evaluate(llama70b, superpod, plan70(microbatch_size=3))
    assert any("not divisible by dp x microbatch_size" in r for r in est.reasons)
    est = evaluate(llama70b, superpod, plan70(virtual_stages=3))
    assert any("num_layers=80 is not divisible by pp x virtual_stages = 12" in r for r in est.reasons)
    assert evaluate(llama70b, superpod, plan70(virtual_stages=3, uneven_pipeline=True)).feasible


def test_placement_validation(llama70b, superpod):
    bad = plan70(placement={"domain": {"tp": 4, "dp": 4}})
    est = evaluate(llama70b, superpod, bad)
    assert not est.feasible and any("multiply to 16" in r for r in est.reasons)
    ok = evaluate(llama70b, superpod, plan70(placement={"domain": {"tp": 4, "dp": 2}}))
    assert ok.feasible
    # TP split across domains is slower than TP inside the domain.
    base = evaluate(llama70b, superpod, plan70())
    assert ok.iteration_time_s > base.iteration_time_s


def test_recompute_trades_time_for_memory(llama70b, superpod):
    none = evaluate(llama70b, superpod, plan70(recompute="none"))
    full = evaluate(llama70b, superpod, plan70(recompute="full"))
    assert full.iteration_time_s > none.iteration_time_s
    assert full.memory_per_gpu_bytes < none.memory_per_gpu_bytes
    assert full.hfu > full.mfu


def test_zero_sharding_reduces_memory(superpod):
    m = tiny_model()
    c = small_cluster(16)
    p = Plan(tp=2, pp=1, dp=8, microbatch_size=1, global_batch_size=64, seq_len=2048)
    mems = [evaluate(m, c, p.model_copy(update={"zero_stage": z})).memory_breakdown_bytes
            for z in range(4)]
    states = [x["weights"] + x["gradients"] + x["optimizer"] for x in mems]
    assert states[0] > states[1] > states[2] > states[3]


def test_interleaving_shrinks_the_bubble(llama70b, superpod):
    v1 = evaluate(llama70b, superpod, plan70(virtual_stages=1))
    v5 = evaluate(llama70b, superpod, plan70(virtual_stages=5))
    assert v5.time_breakdown_s["bubble"] < v1.time_breakdown_s["bubble"] / 4


def test_calibration_meets_the_acceptance_thresholds():
    """Korthikanti et al. 2022: Table 5 iteration-time MAPE <= 8%, Figure 1 memory within 10%."""
    rep = run_validation()
    assert len(rep.time_rows) == 8 and len(rep.memory_rows) == 12
    assert rep.mape <= 0.08
    assert rep.memory_max_error <= 0.10


def test_llama3_405b_production_plan_is_plausible():
    """Meta reports 38-43% BF16 MFU for Llama 3 405B on 16K H100 (Dubey et al. 2024, Table 4)."""
    c = load_cluster("dgx-h100-superpod", gpus=16384)
    m = load_model("llama3-405b")
    p = Plan(tp=8, pp=16, dp=128, microbatch_size=1, global_batch_size=2048, seq_len=8192,
             virtual_stages=4, uneven_pipeline=True, sequence_parallel=True,
             recompute="selective", zero_stage=1)
    est = evaluate(m, c, p)
    # Meta ran it on 80 GiB. This interleaved schedule holds more microbatches in flight
    # than Meta's tuned one (Sec. 3.3.2: fewer layers on the end stages, a tunable in-flight
    # count; not public), so the model may find it a few GiB short: memory is the only
    # reason it may give, and by less than 10 %.
    assert all("HBM is 80 GiB" in r for r in est.reasons)
    assert est.memory_per_gpu_bytes < 1.1 * est.hbm_capacity_bytes
    assert 0.33 <= est.mfu <= 0.48
