"""MoE parallel folding as Megatron-Core runs it (issue "One request, one road", items 1-2).

Megatron-Core numbers the expert ranks with their own RankGenerator: expert-TP x EP x
expert-DP x PP = world, so the EP group may span the attention's TP, CP and DP ranks
(megatron/core/parallel_state.py initialize_model_parallel, NVIDIA/Megatron-LM commit
00caa53: the only check is that world is divisible by etp x ep x pp; expert_data_parallel_size
= world // (etp x ep x pp)). Megatron-Bridge's H100 recipe for Qwen3-235B-A22B runs
TP2 PP8 VP4 EP32 with expert_tensor_parallel_size=1 on 256 GPUs (DP16): EP32 > DP16
(scripts/performance/configs/qwen/qwen3_workload_base_configs.py,
QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V1).
"""

from __future__ import annotations

import pytest


from planner.costmodel import constants as C
from planner.costmodel.train.evaluator import evaluate
from planner.costmodel.train.stage import stage_params_split
from planner.specs.loaders import load_cluster, load_model
from planner.specs.plan import Plan

from conftest import small_cluster, tiny_model

QWEN3_H100 = dict(tp=2, pp=8, dp=16, ep=32, virtual_stages=4, uneven_pipeline=True,
                  sequence_parallel=True, zero_stage=1, microbatch_size=1,
                  global_batch_size=2048, seq_len=4096)


def _h100(gpus: int = 256):
    return load_cluster("dgx-h100-superpod", gpus)


def test_qwen3_235b_ep32_etp_default_is_rejected_not_a_crash():
    """The reproducer: expert_tp defaults to tp = 2, so etp x ep = 64 exceeds the 32 ranks
    of a stage; the evaluator raised ZeroDivisionError in optimizer_step_s (an expert
    data-parallel size of 0). It must name the rule instead."""
    est = evaluate(load_model("qwen3-235b-a22b"), _h100(), Plan(**QWEN3_H100))
    assert not est.feasible
    assert any("expert_tp x ep = 2 x 32 must divide tp x cp x dp = 32" in r
               for r in est.reasons)


def test_qwen3_235b_published_folding_passes_the_plan_checks():
    """EP32 over TP2 x DP16 with expert TP 1 is what Megatron-Core runs: no structural
    reason (the old rule 'ep divides dp x cp' rejected it)."""
    est = evaluate(load_model("qwen3-235b-a22b"), _h100(), Plan(**QWEN3_H100, expert_tp=1,
                                                                dtype="fp8"))
    assert not any("ep=" in r or "expert_tp" in r for r in est.reasons), est.reasons
    assert est.iteration_time_s > 0


@pytest.mark.parametrize("tp,cp,dp,ep,etp,ok", [
    (2, 1, 16, 32, 1, True),   # Qwen3-235B on H100: EP spans TP and DP
    (2, 1, 16, 32, 2, False),  # etp x ep = 64 > 32 ranks
    (4, 1, 2, 8, 1, True),     # ep 8 > dp 2: all of EP folded into TP x DP
    (2, 2, 2, 8, 1, True),     # EP over TP x CP x DP
    (2, 1, 4, 8, 2, False),    # etp x ep = 16 does not divide 8
    (4, 1, 4, 4, 2, True),     # expert_tp 2 with tp 4: allowed (Megatron asks no etp | tp)
])
def test_folding_rule_is_megatron_cores(tp, cp, dp, ep, etp, ok):
    m = tiny_model(num_layers=2, num_attention_heads=16, num_kv_heads=8, seq_len=64,
                   global_batch_size=dp * 2,
                   moe=dict(num_experts=8, top_k=2, expert_ffn_hidden_size=512))
    c = small_cluster(tp * cp * dp, domain=8)
    est = evaluate(m, c, Plan(tp=tp, cp=cp, dp=dp, ep=ep, expert_tp=etp, seq_len=64,
                              global_batch_size=dp * 2, sequence_parallel=tp > 1))
    folded = [r for r in est.reasons if "expert_tp x ep" in r]
    assert (not folded) == ok, est.reasons


def test_expert_optimizer_states_shard_over_expert_data_parallel():
    """ZeRO-1 shards the routed experts' optimizer states over edp = world / (pp etp ep),
    the rest over dp x cp (Megatron-Core's distributed optimizer over the expert-DP group;
    megatron/training/theoretical_memory_usage.py: 12 / expert_data_parallel_size for the
    expert parameters). tp 2, dp 2, ep 4, etp 1: edp = 4 / 4 = 1 (no sharding of the
    experts' states), dp x cp = 2 for the rest."""
    m = tiny_model(num_layers=2, hidden_size=64, num_attention_heads=4, num_kv_heads=4,
                   ffn_hidden_size=256, vocab_size=128, seq_len=32, global_batch_size=8,
                   moe=dict(num_experts=4, top_k=2, expert_ffn_hidden_size=128))
    plan = Plan(tp=2, dp=2, ep=4, expert_tp=1, zero_stage=1, sequence_parallel=True,
                seq_len=32, global_batch_size=8)
    est = evaluate(m, small_cluster(4, domain=8), plan)
    assert not [r for r in est.reasons if "ep" in r], est.reasons
    own, experts = stage_params_split(m, 2, 1, {"moe": 2}, True, True, ep=4, etp=1)
    assert experts == 2 * (4 / 4) * 3 * 64 * 128  # one expert per GPU, unsplit
    expected = C.OPTIMIZER_BYTES * (own / 2 + experts / 1)
    assert est.memory_breakdown_bytes["optimizer"] == pytest.approx(expected, rel=1e-12)


def test_search_space_offers_folded_plans():
    """The search space holds ep beyond dp x cp (folded over TP) with expert TP 1, and only
    where etp x ep divides the stage; brute force agrees with the solvers on this space
    (tests/test_optimality_moe.py)."""
    from formulations.train.space import SearchSpace
    from instances import MOE_OPTIONS
    from planner.specs.plan_base import model_defaults

    m = tiny_model(num_layers=2, hidden_size=256, num_attention_heads=8, num_kv_heads=8,
                   ffn_hidden_size=512, seq_len=512, global_batch_size=8,
                   moe=dict(num_experts=8, top_k=2, expert_ffn_hidden_size=256))
    space = SearchSpace(m, small_cluster(8, domain=8), model_defaults(m), {}, MOE_OPTIONS)
    got = {(o.tp, o.cp, o.dp, o.ep, o.etp) for o in space.outers}
    assert (2, 1, 4, 8, 1) in got and (4, 1, 2, 8, 1) in got  # ep 8 > dp x cp
    assert all((tp * cp * dp) % (ep * etp) == 0 for tp, cp, dp, ep, etp in got)
    assert (2, 1, 4, 8, 2) not in got


@pytest.mark.parametrize("framework,plan,ok", [
    ("megatron-core", dict(tp=2, dp=16, ep=32, expert_tp=1), True),
    ("nemo", dict(tp=2, dp=16, ep=32, expert_tp=1), True),
    # torchtitan with etp 1: EP holds all of tp (2) and part of dp: 32 | 2 x 16
    ("torchtitan", dict(tp=2, dp=16, ep=32, expert_tp=1), True),
    # cp 4 x tp 2 = 8 ranks EP must hold whole: ep 4 is not a multiple of 8
    ("torchtitan", dict(tp=2, cp=4, dp=4, ep=4, expert_tp=1), False),
    ("megatron-core", dict(tp=2, cp=4, dp=4, ep=4, expert_tp=1), True),
    # torchtitan with etp = tp: EP inside cp x dp
    ("torchtitan", dict(tp=2, dp=16, ep=32, expert_tp=2), False),
])
def test_framework_expert_groups(framework, plan, ok):
    """Who folds: Megatron-Core and NeMo (any etp x ep dividing the stage); torchtitan
    borrows EP from all of cp (and tp when etp = 1) and part of dp
    (torchtitan/distributed/parallel_dims.py)."""
    from planner.costmodel.frameworks import plan_violations
    from planner.specs.framework import load_framework

    m = load_model("qwen3-235b-a22b")
    p = Plan(pp=8, global_batch_size=2048, seq_len=4096, sequence_parallel=True, **plan)
    bad = [v for v in plan_violations(load_framework(framework), p, m) if v.field == "ep"]
    assert (not bad) == ok, bad
