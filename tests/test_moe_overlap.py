"""Megatron-Core combined 1F1B (EP all-to-all overlap) and the published Megatron-Bridge
throughput of Qwen3-235B-A22B on 256 H100, which runs it.

The schedule (Megatron-LM docs/user-guide/features/moe_a2a_overlap.md, "Fine-grained
execution"): the forward of microbatch i+1 is paired with the backward of microbatch i,
layer by layer; compute runs F.attn, B.expert, F.expert, B.attn and the communication
stream B.combine, F.dispatch, B.dispatch, F.combine, each waiting on its producer.
"""

from __future__ import annotations

import pytest

from planner.costmodel.moe import paired_exposed_ep_s
from planner.costmodel.train.evaluator import evaluate
from planner.export.megatron import parse_args
from planner.specs.loaders import load_cluster, load_model
from planner.specs.plan import Plan

from conftest import small_cluster, tiny_model


def test_paired_schedule_by_hand():
    # compute-bound: attn 1 / expert 1 forward, 2 / 2 backward, each all-to-all 0.5.
    # Timeline: F.attn 0-1 | B.combine 0-0.5; F.dispatch 1-1.5 | B.expert 1-3;
    # B.dispatch 3-3.5 | F.expert 3-4; F.combine 4-4.5 | B.attn 4-6: span 6 = compute 6
    assert paired_exposed_ep_s(1, 1, 2, 2, 0.5, 0.5) == 0.0
    # communication-bound: every compute node 1, every all-to-all 3.
    # B.combine 0-3 | F.attn 0-1; F.dispatch 3-6 | B.expert 3-4; B.dispatch 6-9 |
    # F.expert 6-7; F.combine 9-12 | B.attn 9-10: span 12, compute 4 -> 8 of the 12 exposed
    assert paired_exposed_ep_s(1, 1, 1, 1, 3, 3) == 8.0
    # nothing to hide behind: all of it exposed
    assert paired_exposed_ep_s(0, 0, 0, 0, 1, 2) == 6.0


QWEN3_H100 = dict(tp=2, pp=8, dp=16, ep=32, expert_tp=1, virtual_stages=4,
                  uneven_pipeline=True, sequence_parallel=True, zero_stage=1,
                  microbatch_size=1, seq_len=4096, dtype="fp8")


def _qwen3(gbs: int, overlap: bool):
    return evaluate(load_model("qwen3-235b-a22b"), load_cluster("dgx-h100-superpod", 256),
                    Plan(**QWEN3_H100, global_batch_size=gbs, overlap_moe_ep_comm=overlap))


def test_overlap_hides_ep_comm_within_the_compute_it_pairs_with():
    off, on = _qwen3(2048, False), _qwen3(2048, True)
    ep_off, ep_on = off.time_breakdown_s["ep_comm"], on.time_breakdown_s["ep_comm"]
    compute = off.time_breakdown_s["forward"] + off.time_breakdown_s["backward"]
    # the overlap adds no work (the breakdown is the bottleneck stage's, which the shorter
    # EP time may move to another stage, so its forward need not be equal)
    assert (on.model_flops, on.hardware_flops) == (off.model_flops, off.hardware_flops)
    # hidden at most behind all of the compute, and some of it hidden
    assert ep_off - compute <= ep_on < ep_off
    assert on.iteration_time_s < off.iteration_time_s


# Megatron-Bridge docs/performance-summary-archive.md (NVIDIA-NeMo/Megatron-Bridge), DGX-H100,
# Qwen3_235B_a22B, 256 GPUs, FP8 (current scaling), MBS 1, sequence 4096, TP2 PP8 VP4 EP32:
# 25.11 container GBS 2048: 1575 tokens/s/GPU (233 model TFLOP/s/GPU);
# 26.02 container GBS 8192: 1633 tokens/s/GPU (242). The recipe
# (scripts/performance/configs/qwen/qwen3_workload_base_configs.py,
# QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V1/V2): expert_tensor_parallel_size=1,
# moe_token_dispatcher_type="alltoall", moe_a2a_overlap=True; experts force-balanced.
PUBLISHED = [(2048, 1575), (8192, 1633)]


@pytest.mark.parametrize("gbs,published", PUBLISHED)
def test_qwen3_235b_h100_published_throughput_is_bracketed(gbs, published):
    """The run overlaps its all-to-alls: it cannot beat the fully paired schedule nor lose
    to no overlap at all. Predicted without overlap 1396/1410, with it 1976/1996 tokens/s
    per GPU (this commit): the bracket holds, the bracket's width is the EP traffic."""
    slow = _qwen3(gbs, False)
    fast = _qwen3(gbs, True)
    per_gpu = lambda e: e.tokens_per_s / e.num_gpus  # noqa: E731
    assert per_gpu(slow) < published < per_gpu(fast)


@pytest.mark.parametrize("gbs,published", PUBLISHED)
def test_qwen3_235b_h100_published_throughput_within_30_percent(gbs, published):
    """With the recipe's settings (combined 1F1B on) the prediction is 22-25% above the
    published figure: the stated tolerance is 30%. Unmodelled and suspected: NCCL
    all-to-all efficiency across 4 nodes (the IB level's 0.9 is an all-reduce figure),
    the alltoall dispatcher's host synchronisation of the per-expert token counts, and
    Hopper's CUDA_DEVICE_MAX_CONNECTIONS conflict between TP and EP overlap (the Megatron
    guide's 'tuning conflict')."""
    est = _qwen3(gbs, True)
    assert est.tokens_per_s / est.num_gpus == pytest.approx(published, rel=0.30)


def test_overlap_plan_rules():
    m = tiny_model(num_layers=4, num_attention_heads=16, num_kv_heads=8, seq_len=64,
                   global_batch_size=16,
                   moe=dict(num_experts=8, top_k=2, expert_ffn_hidden_size=512))
    c = small_cluster(16, domain=8)
    base = dict(seq_len=64, global_batch_size=16, overlap_moe_ep_comm=True)
    est = evaluate(m, c, Plan(dp=8, pp=2, ep=8, **base))
    assert any("needs virtual_stages > 1" in r for r in est.reasons)
    est = evaluate(m, c, Plan(dp=8, pp=2, ep=8, virtual_stages=2, **base))
    assert not any("overlap_moe_ep_comm" in r for r in est.reasons), est.reasons
    est = evaluate(m, c, Plan(dp=16, ep=1, **base))
    assert any("ep > 1" in r for r in est.reasons)


def test_megatron_flag_round_trip_and_framework_support():
    from planner.costmodel.frameworks import plan_violations
    from planner.export.common import Target
    from planner.export.megatron import to_args
    from planner.specs.framework import load_framework

    m = load_model("qwen3-235b-a22b")
    c = load_cluster("dgx-h100-superpod", 256)
    plan = Plan(**QWEN3_H100, global_batch_size=2048, overlap_moe_ep_comm=True)
    args = to_args(plan, Target(m, c))
    assert "--overlap-moe-expert-parallel-comm" in args
    back, _ = parse_args(" ".join(args), Target(m, c))
    assert back.overlap_moe_ep_comm and back.ep == 32 and back.expert_tp == 1
    for fw, ok in (("megatron-core", True), ("nemo", True), ("torchtitan", False)):
        bad = [v for v in plan_violations(load_framework(fw), plan, m)
               if v.field == "overlap_moe_ep_comm"]
        assert (not bad) == ok


def test_solvers_agree_with_brute_force_under_overlap():
    """With combined 1F1B as the run's setting, CP-SAT and the MILP find the plans brute
    force finds, and each returned plan's estimate equals the evaluator's (the overlap
    reaches the search tables through the same layer costs)."""
    from formulations.train.space import SearchSpace
    from instances import MOE_OPTIONS
    from planner.specs.plan_base import model_defaults
    from test_optimality import _check

    m = tiny_model(num_layers=4, hidden_size=256, num_attention_heads=8, num_kv_heads=8,
                   ffn_hidden_size=512, seq_len=512, global_batch_size=8,
                   moe=dict(num_experts=8, top_k=2, expert_ffn_hidden_size=512))
    base = model_defaults(m) | {"overlap_moe_ep_comm": True}
    space = SearchSpace(m, small_cluster(8, domain=4), base, {"zero_stage": 1}, MOE_OPTIONS)
    assert space.outers and all(o.ep > 1 for o in space.outers)
    _check(space, "time", 2, presolve=True)
