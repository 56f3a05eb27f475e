"""Collectives at scale and stragglers (issue 27): NCCL's algorithm choice against hand
calculation, and weak data-parallel scaling that slows with the number of replicas."""

from __future__ import annotations

import math

import pytest

from planner.costmodel.compose import expected_max_normal, straggler_share
from planner.costmodel.train.evaluator import evaluate
from planner.costmodel.network import collective_time_s, nccl_algorithm, nccl_tree_bw_factor
from planner.specs.cluster import TopologyLevel
from planner.specs.loaders import load_cluster, load_model
from planner.specs.plan import Plan

NV = TopologyLevel(name="nv", kind="switch", size=8, bandwidth_GBps=450, latency_us=2)
IB = TopologyLevel(name="ib", kind="switch", size=512, bandwidth_GBps=50, latency_us=5,
                   algorithm="nccl")
B = 50e9  # the IB level's bytes/s per GPU
LAT = 5e-6


def ring_s(n: int, size: float) -> float:
    return 2 * (n - 1) / n * size / B + 2 * (n - 1) * LAT


def tree_s(n: int, size: float) -> float:
    # NCCL 2.30.7 tuning.cc: algBw = 0.5 x 0.92 x busBw (x treeCorrectionFactor below
    # 512 MB), latency 2 log2i(nNodes) x interLat
    return size / (0.5 * 0.92 * nccl_tree_bw_factor(size) / 0.92 * B) + 2 * int(math.log2(n)) * LAT


@pytest.mark.parametrize("n, size, algo", [
    (8, 1e9, "ring"),     # few nodes, large message: the ring's bandwidth wins
    (96, 1e6, "tree"),    # small message: 2 log2 n steps beat 2 (n - 1)
    (96, 1e9, "ring"),
    (512, 1e9, "tree"),   # 1022 ring steps of 5 us outweigh the tree's bandwidth loss
])
def test_nccl_choice_matches_hand_calculation(n, size, algo):
    assert nccl_algorithm("allreduce", IB, n, size, outer=True, top=True) == algo
    expected = min(ring_s(n, size), tree_s(n, size))
    assert collective_time_s("allreduce", size, (1, n), (NV, IB)) == pytest.approx(expected)
    assert (ring_s(n, size) < tree_s(n, size)) == (algo == "ring")


def test_nccl_tree_factor_hand_values():
    assert nccl_tree_bw_factor(2e9) == pytest.approx(0.92)           # beyond the table
    assert nccl_tree_bw_factor(160e6) == pytest.approx(0.92 * 0.9)   # log2(160e6 / 64) = 21
    assert nccl_tree_bw_factor(1e6) == pytest.approx(0.92 * 0.5)     # log2(1e6 / 64) = 13


def test_unbounded_message_takes_the_large_message_limit():
    """``inf`` (the default message of collective_coeffs) is the limit of NCCL's model as
    the message grows: the least bytes-per-bandwidth term wins, and nothing overflows."""
    from planner.costmodel.network import collective_coeffs
    assert nccl_tree_bw_factor(math.inf) == pytest.approx(0.92)
    # ring 2 (n-1)/n per byte against the tree's 2 / 0.92: the ring at any n
    assert nccl_algorithm("allreduce", IB, 4096, math.inf, outer=True, top=True) == "ring"
    sharp = IB.model_copy(update={"in_network_reduction": True})
    assert nccl_algorithm("allreduce", sharp, 4096, math.inf, outer=True, top=True) \
        == "in_network"
    a, b = collective_coeffs("allreduce", (1, 512), (NV, IB))
    assert a == pytest.approx(2 * 511 / 512 / B)
    assert b == pytest.approx(2 * 511 * LAT)


def test_nccl_ring_latency_grows_with_the_group_where_halving_doubling_does_not():
    """Reduce-scatter has only NCCL's ring: n - 1 steps of latency (halving-doubling
    would take ceil(log2 n))."""
    hd = IB.model_copy(update={"algorithm": "halving_doubling"})
    for n in (96, 288):
        t = collective_time_s("reduce_scatter", 1.0, (1, n), (NV, IB))
        assert t == pytest.approx((n - 1) / n / B + (n - 1) * LAT)
        assert collective_time_s("reduce_scatter", 1.0, (1, n), (NV, hd)) == pytest.approx(
            (n - 1) / n / B + math.ceil(math.log2(n)) * LAT)


def test_nccl_picks_in_network_reduction_where_the_switch_has_it():
    sharp = IB.model_copy(update={"in_network_reduction": True})
    assert nccl_algorithm("allreduce", sharp, 96, 1e9, outer=True, top=True) == "in_network"
    assert collective_time_s("allreduce", 1e9, (1, 96), (NV, sharp)) == pytest.approx(
        1e9 / B + 2 * LAT)


def test_expected_max_of_normals():
    # Blom's approximation against tabulated expected maxima (Harter 1961): n = 2: 0.5642,
    # n = 10: 1.5388, n = 100: 2.5076; and the sqrt(2 ln n) growth
    assert expected_max_normal(1) == 0.0
    for n, exact in ((2, 0.5642), (10, 1.5388), (100, 2.5076)):
        assert expected_max_normal(n) == pytest.approx(exact, rel=0.05)
    assert expected_max_normal(10**6) == pytest.approx(math.sqrt(2 * math.log(10**6)), rel=0.1)
    assert straggler_share(0.01, 100) == pytest.approx(0.025)  # 0.02499 rounded up
    assert straggler_share(0.01, 10) == pytest.approx(0.016)  # 0.01547 rounded up
    assert straggler_share(0.0, 10**4) == 0.0


def _weak_scaling(cluster):
    model = load_model("nemotron-4-15b")
    out = []
    for dp in (96, 192, 288):
        plan = Plan(tp=8, pp=1, dp=dp, microbatch_size=1, global_batch_size=4 * dp, seq_len=4096,
                    zero_stage=1, sequence_parallel=True)
        est = evaluate(model, cluster.resized(8 * dp), plan)
        assert est.feasible, est.reasons
        out.append(est)
    return out


def test_weak_data_parallel_scaling_slows_with_replicas():
    """Nemotron-4 15B at TP8 and 4 sequences per replica (Parmar et al. 2024, Table 2): the
    compute per GPU is the same at DP 96, 192 and 288; the step slows because the slowest of
    more GPUs sets it and NCCL's collectives take more steps."""
    cluster = load_cluster("dgx-h100-superpod")
    est = _weak_scaling(cluster)
    times = [e.iteration_time_s for e in est]
    assert times[0] < times[1] < times[2]
    strag = [e.time_breakdown_s["straggler"] for e in est]
    assert 0 < strag[0] < strag[1] < strag[2]
    # switched off (no spread, the ASTRA-sim halving-doubling default): only the ring's
    # (n - 1) / n bandwidth factor is left, a third of the rise
    flat = cluster.model_copy(update={"step_time_cv": 0.0, "topology": [
        lv.model_copy(update={"algorithm": "auto"}) for lv in cluster.topology]})
    flat_times = [e.iteration_time_s for e in _weak_scaling(flat)]
    assert flat_times[2] - flat_times[0] < (times[2] - times[0]) / 2


def test_dp_traffic_takes_the_algorithm_of_its_bucket():
    """Megatron-Core hands NCCL buckets of max(40M, 1M x dp) parameters: at dp 512 a 2 GB
    fp32 bucket, for which NCCL's ring wins, even when the stage's gradient is 4 MB (for
    which alone the tree would win)."""
    from planner.costmodel.train.stage import dp_bucket_params, dp_comm
    assert dp_bucket_params(96) == 96e6 and dp_bucket_params(8) == 40e6
    grad_bytes = 1e6 * 4.0  # fp32 gradients of 1M parameters
    assert nccl_algorithm("allreduce", IB, 512, grad_bytes, outer=True, top=True) == "tree"
    assert nccl_algorithm("allreduce", IB, 512, 512e6 * 4.0, outer=True, top=True) == "ring"
    c = dp_comm(1e6, 0, (1, 512), (NV, IB), 64, "bf16")
    assert c.grad_s == pytest.approx(ring_s(512, grad_bytes))


def test_calibration_note_at_scale_says_what_the_straggler_term_assumes():
    from planner.validation.coverage import calibration_notes

    h100 = load_cluster("dgx-h100-superpod", gpus=1024)
    plan = Plan(tp=8, dp=128, global_batch_size=1024, seq_len=4096, dtype="fp8")
    (note,) = calibration_notes(h100, plan)
    assert "1,024 GPUs" in note and "step_time_cv 0.01" in note
    assert "not fitted" in note and "stragglers and jitter at scale are not modelled" not in note
