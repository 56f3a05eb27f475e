"""MAD-Max seed (Hsia et al. ISCA 2024, notes 002): GPT-3 175B pre-training strategies on
its 2048-A100 LLM system, speed-ups over the FSDP baseline (issue 6).

Strategies in our plan schema (global batch 2048 sequences of 2048 tokens, fp16; each
data-parallel rank runs its local batch as one microbatch, as MAD-Max does):
  FSDP        zero_stage 3 over 2048 ranks, parameter all-gathers overlapped (prefetch)
  DDP         zero_stage 0, gradient all-reduce overlapped with the backward pass
  (TP, DDP)   tp 8 inside the node, dp 256 across nodes
  (DDP, TP)   dp 8 inside the node, tp 256 across nodes
MAD-Max's HSDP (FSDP 8, DDP 256) has no counterpart in our schema (ZeRO shards over the
whole data-parallel group).
"""

from __future__ import annotations

import pytest

from planner.costmodel.evaluator import Estimate, evaluate
from planner.specs.loaders import load_cluster, load_model
from planner.specs.plan import Plan

SYSTEM = "examples/seeds/madmax-dc-a-2048.yaml"
B = 2048

STRATEGIES = {
    "FSDP": dict(tp=1, dp=2048, zero_stage=3),
    "DDP": dict(tp=1, dp=2048, zero_stage=0),
    "(TP,DDP)": dict(tp=8, dp=256, zero_stage=0,
                     placement={"order": ["tp", "cp", "dp", "pp"], "domain": {"tp": 8}}),
    "(DDP,TP)": dict(tp=256, dp=8, zero_stage=0,
                     placement={"order": ["dp", "tp", "cp", "pp"], "domain": {"dp": 8}}),
}


def run(strategy: str, **extra) -> Estimate:
    kw = dict(STRATEGIES[strategy])
    plan = Plan(global_batch_size=B, seq_len=2048, microbatch_size=B // kw["dp"], dtype="fp16",
                overlap_param_gather=True, overlap_dp_grad_reduce=True, **kw, **extra)
    return evaluate(load_model("gpt3-175b"), load_cluster(SYSTEM), plan)


def speedups(without_optimizer: bool = False) -> dict[str, float]:
    """Speed-up over FSDP. ``without_optimizer``: MAD-Max does not model the optimizer
    step (notes 002, Sec. 2.5), so its accounting drops it."""
    t = {}
    for s in STRATEGIES:
        est = run(s)
        t[s] = est.iteration_time_s - (est.time_breakdown_s["optimizer"]
                                       if without_optimizer else 0.0)
    return {s: t["FSDP"] / t[s] for s in t}


def test_order_matters_tp_inside_the_node():
    """MAD-Max Insight 3: (TP,DDP) 1.34x vs (DDP,TP) 0.18x over FSDP, i.e. 7.4x apart; TP
    across nodes is the worst strategy. Ours: 0.82x vs 0.02x (34x apart; our ring
    all-reduce over 256 nodes moves 2(n-1)/n of the activations at the per-GPU 25 GB/s,
    MAD-Max's calibrated bandwidth is 60 GB/s and has no (n-1)/n term).
    Tolerance: ordering, and (TP,DDP)/(DDP,TP) > 5."""
    s = speedups()
    assert min(s, key=s.get) == "(DDP,TP)"
    assert s["(TP,DDP)"] / s["(DDP,TP)"] > 5
    assert s["(DDP,TP)"] < 0.18


def test_gemm_time_matches_madmax():
    """MAD-Max's released code gives GPT-3 FSDP-2048 a GEMM time of 9.72 s per iteration
    (notes 002, Sec. 4.7; 70.5% of the fp16 peak). Ours: forward + backward 9.59 s.
    Tolerance: 5%."""
    bd = run("FSDP").time_breakdown_s
    assert bd["forward"] + bd["backward"] == pytest.approx(9.72, rel=0.05)


def test_memory_validity_labels():
    """MAD-Max Insight 2: on 40 GB A100s any inter-node replication of GPT-3's transformer
    layers is OOM (DDP, (TP,DDP)); FSDP is the valid baseline. Ours agrees (FSDP needs
    full recomputation to fit its activations; MAD-Max counts weights only)."""
    assert not run("DDP", recompute="full").feasible
    assert not run("(TP,DDP)", recompute="full").feasible
    assert run("FSDP", recompute="full").feasible


def test_ddp_speedups_not_reproduced():
    """MAD-Max: DDP 1.68x and (TP,DDP) 1.34x over FSDP (memory unconstrained). Ours:
    0.69x and 0.82x; 0.93x and 0.85x in MAD-Max's accounting without the optimizer step.
    Not reproduced (docs/seeds.md): MAD-Max's FSDP baseline leaves 6.7 s of its 8.7 s of
    all-gathers/reduce-scatters exposed (pre-optimized prefetch on one communication
    stream), reduces fp16 gradients (ours fp32) and drops the optimizer step. The test
    pins the gap so that a cost-model change that closes it updates docs/seeds.md."""
    s = speedups()
    s_no_opt = speedups(without_optimizer=True)
    assert s["DDP"] < 1.0 and s["(TP,DDP)"] < 1.0
    assert s_no_opt["DDP"] < 1.68 / 1.5 and s_no_opt["(TP,DDP)"] < 1.34 / 1.3
