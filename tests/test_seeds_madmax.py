"""MAD-Max seed (Hsia et al., ISCA 2024): GPT-3 175B pre-training strategies on
its 2048-A100 LLM system, speed-ups over the FSDP baseline.

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

from planner.costmodel.train.evaluator import Estimate, evaluate
from planner.costmodel.train.streams import two_stream_iteration
from planner.specs.loaders import load_cluster, load_model
from planner.specs.plan import Plan

SYSTEM = "examples/seeds/madmax-dc-a-2048.yaml"


def madmax_cluster():
    """MAD-Max's system as its model sees it: compute at the measured kernel speeds with no
    framework-level loss on top (its released code times each op from microbenchmarked
    efficiencies), i.e. the A100 kernel table at kernel_fraction 1.0, not the catalog's fit
    over other teams' end-to-end runs; and independent compute and communication streams
    (MAD-Max Sec. III: kernels start once their dependencies resolve), so overlapped
    collectives do not slow compute (overlap_slowdown 0)."""
    c = load_cluster(SYSTEM)
    eff = c.gpu.efficiency.model_copy(update={"kernel_fraction": 1.0, "overlap_slowdown": 0.0})
    return c.model_copy(update={"gpu": c.gpu.model_copy(update={"efficiency": eff})})
B = 2048

STRATEGIES = {
    "FSDP": dict(tp=1, dp=2048, zero_stage=3),
    "DDP": dict(tp=1, dp=2048, zero_stage=0),
    "(TP,DDP)": dict(tp=8, dp=256, zero_stage=0,
                     placement={"order": ["tp", "cp", "dp", "pp"], "domain": {"tp": 8}}),
    "(DDP,TP)": dict(tp=256, dp=8, zero_stage=0,
                     placement={"order": ["dp", "tp", "cp", "pp"], "domain": {"dp": 8}}),
}


def plan_for(strategy: str, **extra) -> Plan:
    kw = dict(STRATEGIES[strategy])
    return Plan(global_batch_size=B, seq_len=2048, microbatch_size=B // kw["dp"], dtype="fp16",
                overlap_param_gather=True, overlap_dp_grad_reduce=True, **kw, **extra)


def run(strategy: str, **extra) -> Estimate:
    return evaluate(load_model("gpt3-175b"), madmax_cluster(), plan_for(strategy, **extra))


def stream_speedups(prefetch: str = "madmax") -> dict[str, float]:
    """Speed-ups over FSDP with MAD-Max's two-stream overlap model (the named variant in
    planner/costmodel/train/streams.py) on our compute and collective times."""
    model, cluster = load_model("gpt3-175b"), madmax_cluster()
    t = {s: two_stream_iteration(model, cluster, plan_for(s), prefetch).iteration_s
         for s in STRATEGIES}
    return {s: t["FSDP"] / t[s] for s in t}


def test_strategy_ratios_with_madmax_stream_model():
    """MAD-Max Sec. VI (GPT-3, 2048 A100): DDP 1.68x, (TP,DDP) 1.34x, (DDP,TP) 0.18x over
    FSDP. Ours with MAD-Max's two-stream overlap model (pre-optimized FSDP prefetch, one
    communication stream, fp16 weight/gradient payloads, no optimizer step):
    DDP 1.60x, (TP,DDP) 1.37x (tolerance 10%); (DDP,TP) 0.03x (only < 0.18x asserted:
    our ring all-reduce across 256 nodes is 6x slower than MAD-Max's calibrated 60 GB/s).
    FSDP iteration 15.43 s against MAD-Max's 16.38 s (10%)."""
    s = stream_speedups()
    assert s["DDP"] == pytest.approx(1.68, rel=0.10)
    assert s["(TP,DDP)"] == pytest.approx(1.34, rel=0.10)
    assert s["(DDP,TP)"] < 0.18
    assert s["DDP"] > s["(TP,DDP)"] > 1.0 > s["(DDP,TP)"]
    fsdp = two_stream_iteration(load_model("gpt3-175b"), madmax_cluster(), plan_for("FSDP"))
    assert fsdp.iteration_s == pytest.approx(16.38, rel=0.10)


def test_optimized_prefetch_shrinks_the_gains():
    """MAD-Max Fig. 9: FSDP with prefetching hides most of its all-gathers; the gains of
    DDP over FSDP then shrink (ours: 1.60x -> 1.40x)."""
    pre, opt = stream_speedups("madmax"), stream_speedups("optimized")
    assert 1.0 < opt["DDP"] < pre["DDP"]
    assert 1.0 < opt["(TP,DDP)"] < pre["(TP,DDP)"]


def speedups(without_optimizer: bool = False) -> dict[str, float]:
    """Speed-up over FSDP. ``without_optimizer``: MAD-Max does not model the optimizer
    step (MAD-Max, Hsia et al. 2024), so its accounting drops it."""
    t = {}
    for s in STRATEGIES:
        est = run(s)
        t[s] = est.iteration_time_s - (est.time_breakdown_s["optimizer"]
                                       if without_optimizer else 0.0)
    return {s: t["FSDP"] / t[s] for s in t}


def test_order_matters_tp_inside_the_node():
    """MAD-Max Insight 3: (TP,DDP) 1.34x vs (DDP,TP) 0.18x over FSDP, i.e. 7.4x apart; TP
    across nodes is the worst strategy. Ours (default evaluator): 1.19x vs 0.03x (34x apart; our ring
    all-reduce over 256 nodes moves 2(n-1)/n of the activations at the per-GPU 25 GB/s,
    MAD-Max's calibrated bandwidth is 60 GB/s and has no (n-1)/n term).
    Tolerance: ordering, and (TP,DDP)/(DDP,TP) > 5."""
    s = speedups()
    assert min(s, key=s.get) == "(DDP,TP)"
    assert s["(TP,DDP)"] / s["(DDP,TP)"] > 5
    assert s["(DDP,TP)"] < 0.18


def test_gemm_time_matches_madmax():
    """MAD-Max's released code gives GPT-3 FSDP-2048 a GEMM time of 9.72 s per iteration
    (MAD-Max, Hsia et al. 2024) at 70.5 % of the fp16 peak for every GEMM. Ours times each
    GEMM from the published A100 cuBLASLt speeds, which run at most 256.5 TFLOP/s (82.2 % of
    peak, 16384^3): no slower than MAD-Max's assumption, and no faster than every GEMM at
    the fastest published speed, 9.72 x 0.705 / 0.822 = 8.34 s (forward + backward: 9.23 s)."""
    bd = run("FSDP").time_breakdown_s
    assert 9.72 * 0.705 / (256.5 / 312) <= bd["forward"] + bd["backward"] <= 9.72


def test_memory_validity_labels():
    """MAD-Max Insight 2: on 40 GB A100s any inter-node replication of GPT-3's transformer
    layers is OOM (DDP, (TP,DDP)); FSDP is the valid baseline. Ours agrees (FSDP needs
    full recomputation to fit its activations; MAD-Max counts weights only)."""
    assert not run("DDP", recompute="full").feasible
    assert not run("(TP,DDP)", recompute="full").feasible
    assert run("FSDP", recompute="full").feasible


def test_default_model_follows_madmax_ranking():
    """With the product's default evaluator, FSDP's per-microbatch gathers and
    reduce-scatters are charged in full (``compose.SHARDED_MICROBATCH_OVERLAP``), and
    MAD-Max's ranking appears without its stream model: (TP,DDP) 1.19x over FSDP (MAD-Max
    1.34x), DDP 1.00x with the full-replica Adam step it does not model and 1.35x without it
    (MAD-Max 1.68x); FSDP 17.41 s per iteration against MAD-Max's 16.38 s. When FSDP's
    traffic overlapped like Megatron's buckets, FSDP ranked first (DDP 0.69x)."""
    s = speedups()
    s_no_opt = speedups(without_optimizer=True)
    assert s["(TP,DDP)"] == pytest.approx(1.34, rel=0.15)
    assert s["(TP,DDP)"] > 1.0 and s_no_opt["DDP"] > 1.2
    assert s_no_opt["DDP"] == pytest.approx(1.68, rel=0.25)
    assert run("FSDP").iteration_time_s == pytest.approx(16.38, rel=0.10)


def test_stream_model_scope():
    """The MAD-Max variant refuses what MAD-Max does not model."""
    model, cluster = load_model("gpt3-175b"), madmax_cluster()
    with pytest.raises(ValueError):
        two_stream_iteration(model, cluster, plan_for("DDP").model_copy(update={"zero_stage": 1}))
    with pytest.raises(ValueError):
        two_stream_iteration(model, cluster, Plan(global_batch_size=2 * B, seq_len=2048,
                                                   dp=2048, microbatch_size=1, dtype="fp16"))
