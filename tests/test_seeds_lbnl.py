"""LBNL seed (Subramanian et al. 2024): the GPT3-175B optimum on 512 A100 with
4-GPU NVS domains, and the NVS-domain findings for GPT3-1T on B200.

The systems are Table A3 of the paper (NVS and IB bandwidth, latencies, 70% network
efficiency); the search is the paper's: fp16, no interleaving, no context parallelism,
distributed optimizer (ZeRO 1), microbatch <= 2.
"""

from __future__ import annotations

import pytest

from formulations.train.space import SpaceOptions
from planner.orchestration import solve
from planner.specs.loaders import cluster_from_dict, load_model
from planner.specs.model import ModelSpec

FIXED = dict(dtype="fp16", virtual_stages=1, cp=1, zero_stage=1)
OPTIONS = SpaceOptions(max_microbatch=2, allow_uneven=False)


def lbnl_system(gpu: str, nvs: int, n: int, nvs_GBps: float, ib_GBps: float):
    """Table A3: NVS latency 2.5 us, IB latency 5 us, network efficiency 0.7."""
    levels = [dict(name="nvs", kind="switch", size=min(nvs, n), bandwidth_GBps=nvs_GBps,
                   latency_us=2.5, efficiency=0.7)]
    if n > nvs:
        levels.append(dict(name="ib", kind="switch", size=n // nvs, bandwidth_GBps=ib_GBps,
                           latency_us=5.0, efficiency=0.7))
    return cluster_from_dict({"name": f"lbnl-{gpu}-nvs{nvs}", "gpu": gpu, "num_gpus": n,
                              "topology": levels}, "LBNL Table A3")


#: GPT3-1T of LBNL Sec. 4.2: l = 2048, e = 25600, 160 heads, 128 layers.
GPT3_1T = ModelSpec(name="gpt3-1t", num_layers=128, hidden_size=25600, num_attention_heads=160,
                    ffn_hidden_size=4 * 25600, vocab_size=51200, seq_len=2048,
                    position_embedding="learned", bias=True)


def best(model, cluster, batch, fixed=None, top_k=1):
    # the system as LBNL's model sees it: compute at 0.8 of peak (its released code), which is
    # the A100 kernel table's own speed (its fastest GEMM: 0.82), no framework-level loss on
    # top, and no slowdown of compute by overlapped communication (the model has none)
    eff = cluster.gpu.efficiency.model_copy(update={"kernel_fraction": 1.0,
                                                    "overlap_slowdown": 0.0})
    cluster = cluster.model_copy(update={"gpu": cluster.gpu.model_copy(update={"efficiency": eff})})
    res = solve(model, cluster, fixed={**FIXED, **(fixed or {})},
                base=dict(global_batch_size=batch, seq_len=2048), top_k=top_k,
                time_limit_s=60, options=OPTIONS)
    return res.plans


def key(p):
    return (p.plan.tp, p.plan.pp, p.plan.dp, p.plan.microbatch_size)


def test_gpt3_175b_512_a100_nvs4_optimum():
    """LBNL: (n_t, n_p, n_d, b_m) = (4, 16, 8, 1), validated on Perlmutter within 11%.
    Ours: TP 4 filling the NVS4 domain and b_m = 1, as LBNL; (4, 16, 8, 1) is within LBNL's
    own gap between these two of our optimum (LBNL ranks them 1st and 3rd, 0.9% apart; ours
    puts (4, 8, 16, 1) first, 0.1-0.2% ahead, the order hanging on the fitted A100)."""
    plans = best(load_model("gpt3-175b"), lbnl_system("a100-sxm-80gb", 4, 512, 300, 25),
                 1024, top_k=5)
    top = plans[0]
    assert top.plan.tp == 4 and top.plan.microbatch_size == 1
    assert top.plan.placement.domain["tp"] == 4
    times: dict[tuple, float] = {}
    for p in plans:  # the best variant (SP, recompute) of each (tp, pp, dp, mbs)
        times[key(p)] = min(times.get(key(p), float("inf")), p.estimate.iteration_time_s)
    assert (4, 16, 8, 1) in times
    assert times[(4, 16, 8, 1)] <= 1.009 * top.estimate.iteration_time_s
    # LBNL's own prediction is 22.47 s (LBNL, Subramanian et al. 2024); ours is within 12%.
    assert top.estimate.iteration_time_s == pytest.approx(22.47, rel=0.12)


def b200(nvs: int, n: int):
    return lbnl_system("b200", nvs, n, 900, 100)


def test_large_nvs_domains_pay_off_at_pretraining_scale():
    """LBNL Sec. 5 (3, 4): NVS64 over NVS8 gains little at fine-tuning scale and O(days)
    at pre-training scale. Ours: <1% at 512 GPUs, >8% at 16,384."""
    gain = {}
    for n in (512, 16384):
        t8 = best(GPT3_1T, b200(8, n), 4096)[0].estimate.iteration_time_s
        t64 = best(GPT3_1T, b200(64, n), 4096)[0].estimate.iteration_time_s
        gain[n] = t8 / t64
    assert gain[512] < 1.01
    assert gain[16384] > 1.08
    assert gain[16384] > gain[512]


def test_tp8_fills_the_nvs8_domain_at_scale():
    """LBNL Fig. 4: at >= 8192 B200 GPUs the full NVS8 domain serves TP. Ours: at 16,384
    the optimum puts 8 TP ranks in the domain; at 8,192 the best plan with TP 8 in the
    domain is within 0.5% of our optimum (TP 8 over two half-domains)."""
    top = best(GPT3_1T, b200(8, 16384), 4096)[0]
    assert top.plan.placement.domain["tp"] == 8
    opt = best(GPT3_1T, b200(8, 8192), 4096)[0].estimate.iteration_time_s
    in_domain = best(GPT3_1T, b200(8, 8192), 4096,
                     fixed={"tp": 8, "placement": {"domain": {"tp": 8, "cp": 1, "dp": 1, "pp": 1}}})
    assert in_domain[0].estimate.iteration_time_s <= 1.005 * opt
