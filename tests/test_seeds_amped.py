"""AMPeD seed (Moolchandani et al.): Table II TFLOP/s, the Case Study I
ordering of mappings and the Case Study III optical-substrate progression.

AMPeD has no reference code, no latencies and no published eff(ub) parameters; every
system here uses our catalog GPUs and link efficiencies, fixed once per system. AMPeD's
literal pipeline bubble (Eq. 8) is the named variant ``bubble_factor(..., "amped")``;
the default stays Megatron's ``(pp - 1)/v`` (docs/seeds.md says why).
"""

from __future__ import annotations

import pytest

from planner.costmodel.train.evaluator import Estimate, evaluate
from planner.costmodel.pipeline import bubble_factor
from planner.costmodel.runtime import apply_profile
from planner.specs.framework import load_framework
from planner.specs.loaders import cluster_from_dict, load_cluster, load_model


def amped_system(gpus: int):
    """Selene as AMPeD's case studies model it: GEMMs at its microbatch efficiency, about
    0.80 of peak at ub >= 128 (AMPeD's eff(ub) fit), which is the A100 table's own speed
    (its fastest GEMM is 0.82 of peak) with no framework-level loss, and no slowdown of
    compute by overlapped communication (AMPeD has no contention term)."""
    c = load_cluster("dgx-a100-superpod", gpus)
    eff = c.gpu.efficiency.model_copy(update={"kernel_fraction": 1.0, "overlap_slowdown": 0.0})
    return c.model_copy(update={"gpu": c.gpu.model_copy(update={"efficiency": eff})})


def selene(gpus: int):
    """Selene as Megatron-LM runs on it (the megatron-core profile: its kernels and its fit
    on NVIDIA's own A100 runs), the system AMPeD validates against."""
    return apply_profile(load_cluster("dgx-a100-superpod", gpus),
                             load_framework("megatron-core"))
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan

SEEDS = "examples/seeds"


# ---- Table II: Megatron-LM runs, TFLOP/s per GPU ---------------------------------------
#: (name, heads, hidden, layers, TP, PP, GPUs, global batch, published TFLOP/s, AMPeD's).
#: Narayanan et al. 2021 Table 1; DP = GPUs/(TP PP): 15 for 310B (AMPeD prints 12, which
#: does not multiply to Megatron's 1920 GPUs; AMPeD, Moolchandani et al.).
TABLE2 = [
    ("145b", 96, 12288, 80, 8, 8, 1536, 2304, 148, 147),
    ("310b", 128, 16384, 96, 8, 16, 1920, 2160, 155, 162),
    ("530b", 128, 20480, 105, 8, 35, 2520, 2520, 163, 148.6),
    ("1t", 160, 25600, 128, 8, 64, 3072, 3072, 163, 144.3),
]


def megatron_model(name: str, heads: int, h: int, layers: int) -> ModelSpec:
    return ModelSpec(name=f"megatron-{name}", num_layers=layers, hidden_size=h,
                     num_attention_heads=heads, ffn_hidden_size=4 * h, vocab_size=51200,
                     seq_len=2048, position_embedding="learned", bias=True)


def megatron_tflops(est: Estimate, b: int, layers: int, h: int, n: int) -> float:
    """Megatron's FLOP count (Narayanan et al. 2021, Eq. 3, with recomputation), the
    count behind the published TFLOP/s: 96 B s L h^2 (1 + s/6h + V/16Lh)."""
    s, v = 2048, 51200
    f = 96 * b * s * layers * h * h * (1 + s / (6 * h) + v / (16 * layers * h))
    return f / est.iteration_time_s / n / 1e12


def table2_row(name, heads, h, layers, tp, pp, n, b) -> Estimate:
    """Megatron 2021 settings: fp16, full recomputation, microbatch 1, no sequence
    parallelism, no FlashAttention (2021), no distributed optimizer; R = 1 as in AMPeD
    (no interleaving). System: Selene, our dgx-a100-superpod catalog entry."""
    plan = Plan(tp=tp, pp=pp, dp=n // (tp * pp), global_batch_size=b, seq_len=2048,
                microbatch_size=1, recompute="full", attention="standard", zero_stage=0,
                dtype="fp16", virtual_stages=1)
    return evaluate(megatron_model(name, heads, h, layers), selene(n), plan)


@pytest.mark.parametrize("row", TABLE2, ids=[r[0] for r in TABLE2])
def test_table2_tflops_within_12_percent(row):
    """AMPeD Table II: estimates within 12% of the published Megatron TFLOP/s/GPU.
    Ours (R = 1): 162.4, 167.8, 170.8, 174.5 against 148, 155, 163, 163 (+5 to +10%).
    Tolerance: 12% of the published value, AMPeD's own error bar."""
    name, heads, h, layers, tp, pp, n, b, published, _amped = row
    est = table2_row(name, heads, h, layers, tp, pp, n, b)
    assert est.feasible
    assert megatron_tflops(est, b, layers, h, n) == pytest.approx(published, rel=0.12)


# ---- Case Study I: which mapping on 128 nodes x 8 A100 ----------------------------------
B_CS1 = 16384

#: AMPeD's mappings as (tp, pp, dp, what sits in the 8-GPU node). AMPeD's "pure PP
#: inter-node, degree 128" exceeds the 80 layers; PP 16 x DP 8 is our nearest legal one.
MAPPINGS = {
    "TP intra, DP inter": (8, 1, 128, {"tp": 8}),
    "TP intra, PP+DP inter": (8, 16, 8, {"tp": 8}),
    "TP intra, TP+DP inter": (16, 1, 64, {"tp": 8}),
    "DP intra, PP+DP inter": (1, 16, 64, {"dp": 8}),
    "PP intra, TP+DP inter": (2, 8, 64, {"pp": 8}),
}


def case1(mapping: str, bubble: str) -> float:
    """Iteration time of one mapping. AMPeD's convention: microbatch ub = B/(DP PP) and
    N_ub = PP microbatches per pipeline (AMPeD, Moolchandani et al.). ``bubble``: our default
    ("megatron") or AMPeD's literal Eq. 8 ("amped"), applied to the same stage times."""
    tp, pp, dp, domain = MAPPINGS[mapping]
    order = list(domain) + [d for d in ("tp", "cp", "dp", "pp") if d not in domain]
    plan = Plan(tp=tp, pp=pp, dp=dp, global_batch_size=B_CS1, seq_len=2048,
                microbatch_size=B_CS1 // (dp * pp), recompute="full", zero_stage=1,
                dtype="fp16", placement={"order": order, "domain": domain})
    model = load_model(f"{SEEDS}/megatron-145b.yaml")
    est = evaluate(model, amped_system(1024), plan)
    t = est.iteration_time_s
    if bubble == "amped" and pp > 1:
        bd = est.time_breakdown_s
        m = est.num_microbatches
        mean_stage = bd["bubble"] / bubble_factor(pp, 1)
        compute = sum(bd[k] for k in ("forward", "backward", "recompute"))
        comm = bd["tp_comm"] + bd["pp_comm"]
        share = comm / (compute + comm)
        t += (bubble_factor(pp, 1, "amped", num_layers=model.num_layers, num_microbatches=m,
                            comm_share=share) * mean_stage - bd["bubble"])
    return t


def days(t_iter: float) -> float:
    """Days for 300B tokens (AMPeD does not state its N_batch)."""
    return t_iter * 300e9 / (B_CS1 * 2048) / 86400


def test_case1_tp_intra_dp_inter_is_best():
    """AMPeD Case Study I (B = 16384): TP intra-node + DP inter-node is the best mapping
    (~18 days), ahead of TP intra + PP inter (~21 d) and of every mapping that puts TP on
    the inter-node links (~57 d, ~90 d). Ours, days for 300B tokens (default bubble):
    19.9 vs 39.3 (PP inter), 23.3 (TP inter), 33.0 (DP intra), 36.9 (PP intra + TP inter).
    Tolerance: ordering; the absolute ~18 days within 15% (N_batch is our guess)."""
    t = {k: case1(k, "megatron") for k in MAPPINGS}
    assert min(t, key=t.get) == "TP intra, DP inter"
    assert t["TP intra, TP+DP inter"] > t["TP intra, DP inter"]
    assert days(t["TP intra, DP inter"]) == pytest.approx(18, rel=0.15)


def test_case1_with_amped_bubble():
    """With AMPeD's literal bubble, TP intra + DP inter still beats PP inter and TP inter,
    as in the paper. (AMPeD also puts DP intra + PP/DP inter far behind, 36-38 days, from
    eff(ub = 16) ~ 30 %, which our GEMM model does not have; that ordering is not
    reproduced, docs/seeds.md, and not asserted either way.)"""
    t = {k: case1(k, "amped") for k in MAPPINGS}
    assert t["TP intra, DP inter"] < t["TP intra, PP+DP inter"]
    assert t["TP intra, DP inter"] < t["TP intra, TP+DP inter"]


def test_case1_amped_bubble_makes_pp_inter_close_to_dp_inter():
    """AMPeD: PP inter-node is only ~17% slower than DP inter-node (21 vs 18 days), which
    needs its literal Eq. 8 bubble. With the ``amped`` variant ours is within 10% of that
    ratio; with our default (textbook 1F1B, N_ub = PP) PP inter is ~2x slower."""
    ratio_amped = case1("TP intra, PP+DP inter", "amped") / case1("TP intra, DP inter", "amped")
    ratio_default = (case1("TP intra, PP+DP inter", "megatron")
                     / case1("TP intra, DP inter", "megatron"))
    assert ratio_amped == pytest.approx(21 / 18, rel=0.10)
    assert ratio_default > 1.8


def test_bubble_variant_leaves_default_unchanged():
    assert bubble_factor(8, 1) == 7.0
    assert bubble_factor(8, 2) == 3.5
    assert bubble_factor(8, 1, "megatron") == 7.0
    # all compute (no communication): one average layer of compute per bubble step
    assert bubble_factor(8, 1, "amped", num_layers=80, num_microbatches=8) == pytest.approx(7 / 80)
    with pytest.raises(ValueError):
        bubble_factor(8, 1, "gpipe")


# ---- Case Study III: optical substrates for GLaM on 3072 H100 ---------------------------
def substrate(per_node: int, offchip_x: float, inter_node_GBps_per_node: float):
    """The reference system with ``per_node`` accelerators on one substrate, the off-chip
    (intra) bandwidth scaled by ``offchip_x`` and the node's inter-node bandwidth."""
    ref = load_cluster(f"{SEEDS}/amped-case3-reference.yaml")
    nv, ib = ref.topology
    levels = [dict(nv.model_dump(), size=per_node, bandwidth_GBps=nv.bandwidth_GBps * offchip_x),
              dict(ib.model_dump(), size=ref.num_gpus // per_node,
                   bandwidth_GBps=inter_node_GBps_per_node / per_node)]
    return cluster_from_dict({"name": f"amped-substrate-{per_node}", "gpu": ref.gpu.model_dump(),
                              "num_gpus": ref.num_gpus, "topology": levels}, "AMPeD Case III")


OFFCHIP = 450.0  # GB/s, Table IV BW_intra of the H100 (3.6 Tb/s)
#: AMPeD Fig. 11 bars: (accelerators per node, off-chip scale, node inter-node GB/s).
#: Inter-node BW of a substrate = off-chip BW x accelerators on its edge (8, 12, 20, 24).
CASE3 = {
    "reference": (8, 1, 8 * 50.0),
    "opt1 (8 x off-chip)": (8, 1, 8 * OFFCHIP),
    "opt2 16/node": (16, 1, 12 * OFFCHIP),
    "opt2 32/node": (32, 1, 20 * OFFCHIP),
    "opt3 2x off-chip": (32, 2, 2 * 20 * OFFCHIP),
    "opt3 4x off-chip": (32, 4, 4 * 20 * OFFCHIP),
}


def case3(bar: str, tp_fills_node: bool = False) -> float:
    """GLaM, B = 8192, 8-bit, TP inside the node and DP (with 32-way expert parallelism)
    across. ``tp_fills_node``: AMPeD's mapping, TP = accelerators per node; otherwise our
    mapping keeps TP 8 and puts data/expert parallelism on the rest of the substrate."""
    per_node, x, inter = CASE3[bar]
    tp = per_node if tp_fills_node else 8
    domain = {"tp": tp} if tp == per_node else {"tp": 8, "dp": per_node // 8}
    plan = Plan(tp=tp, dp=3072 // tp, ep=32, global_batch_size=8192, seq_len=1024,
                microbatch_size=1, dtype="fp8", zero_stage=1,
                placement={"order": ["tp", "cp", "ep", "dp", "pp"], "domain": domain})
    # 8192 is not a multiple of dp = 384 (AMPeD has no such rule): the evaluator rounds the
    # microbatch count up, so the feasibility flag is not asserted.
    return evaluate(load_model(f"{SEEDS}/glam-64b64e.yaml"), substrate(per_node, x, inter),
                    plan).iteration_time_s


def test_case3_progression():
    """AMPeD Case Study III: Opt.1 (inter-node BW = 8 x off-chip) +42%; larger substrates
    +29% more; 2x / 4x off-chip BW +54% / +110% more; ~3.85x overall.
    Ours: Opt.1 1.52x (tolerance 10% of 1.42); larger substrates 0.98x (flat, not the
    paper's 1.29x: our GEMM efficiency does not improve with AMPeD's larger microbatch);
    2x / 4x off-chip 1.19x / 1.29x; 1.91x overall, against ~3.85x (not reproduced,
    docs/seeds.md). Asserted: Opt.1's gain, that each off-chip doubling helps, and that
    AMPeD's own mapping for big substrates (TP = substrate size) loses in our model."""
    t = {bar: case3(bar) for bar in CASE3}
    opt1 = t["reference"] / t["opt1 (8 x off-chip)"]
    assert opt1 == pytest.approx(1.42, rel=0.10)
    assert t["opt3 2x off-chip"] < t["opt2 32/node"]
    assert t["opt3 4x off-chip"] < t["opt3 2x off-chip"]
    overall = t["reference"] / t["opt3 4x off-chip"]
    assert 1.5 < overall < 3.85
    # TP 32 over the substrate costs more than it gains (AMPeD's gain is eff(ub))
    assert case3("opt2 32/node", tp_fills_node=True) > t["opt2 32/node"]
