"""The serving cost model: hand-checked sizes and times, the M/D/1 queue, the evaluator's
reasons, the calibration bar, and properties (decode time grows with context; more HBM
never lowers the feasible concurrency)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.costmodel.layer import embedding_params, head_params, layer_params
from planner.costmodel.serve.queueing import busy_arrivals_quantile, md1_wait_s
from planner.costmodel.serve.evaluate import evaluate_serve, kv_transfer_s, replica_perf
from planner.costmodel.serve.step import (
    decode_step_s,
    kv_bytes_per_sequence,
    kv_bytes_per_token_layer,
    max_concurrency,
    serve_memory,
    weight_bytes_per_gpu,
)
from planner.specs.loaders import load_cluster, load_model
from planner.specs.serve import ServeEngine, ServePlan, ServeWorkload

#: The engine every figure here was measured with, named: the v0.6.1 fit (ServeEngine's
#: class defaults), as planner validate's serving rows use it.
ENGINE = ServeEngine()

H100 = load_cluster("dgx-h100-superpod")
B200 = load_cluster("dgx-b200-superpod")
L7 = load_model("llama2-7b")
L70 = load_model("llama2-70b")


def test_kv_bytes_per_token_hand_checked():
    # Llama 2 70B: 8 KV heads of 128; tp 2 holds 4 -> K and V, 1 byte each in fp8
    assert kv_bytes_per_token_layer(L70, 2, "fp8") == 2 * 4 * 128 * 1
    # tp 16 > 8 KV heads: each rank keeps one head (replicated)
    assert kv_bytes_per_token_layer(L70, 16, "bf16") == 2 * 1 * 128 * 2
    # DeepSeek-V3 MLA: latent 512 + RoPE key 64, bf16, whatever the tp
    ds = load_model("deepseek-v3")
    assert kv_bytes_per_token_layer(ds, 8, "bf16") == (512 + 64) * 2
    # a sequence of 20 tokens holds two 16-token blocks in each of the 32 layers
    plan = ServePlan(kv_dtype="bf16")
    assert kv_bytes_per_sequence(L7, plan, 20) == 32 * 32 * 2 * 4096 * 2


def test_weight_bytes_hand_checked():
    plan = ServePlan(tp=1, weight_dtype="fp8")
    layers = 32 * layer_params(L7, "dense", 1)
    ends = embedding_params(L7, 1) + head_params(L7, 1, separate=False)
    assert weight_bytes_per_gpu(L7, plan) == pytest.approx(layers * 1.0 + ends * 2.0)
    # int4 weight-only: half a byte plus one fp16 scale per 128 weights
    int4 = weight_bytes_per_gpu(L7, plan.model_copy(update={"weight_dtype": "int4"}))
    assert int4 == pytest.approx(layers * (0.5 + 2 / 128) + ends * 2.0)


def test_decode_batch_one_reads_the_weights_at_the_measured_gemv_speed():
    """A batch-1 decode step of Llama 2 7B in bf16 is bound by reading 13.5 GB of weights at
    the speed the H100's kernel table measured for M = 1 GEMMs (2.1-2.9 TB/s by shape,
    below the 3.35 TB/s datasheet), plus launches and small kernels."""
    plan = ServePlan(tp=1, concurrency=1, weight_dtype="bf16")
    t = decode_step_s(L7, H100, plan, 128, ENGINE)
    weights = weight_bytes_per_gpu(L7, plan)
    assert weights / 2.9e12 < t < 1.25 * weights / 2.1e12


def test_fp8_weights_shorten_the_batch_one_decode_as_measured():
    """fp8 weights halve the bytes, but the measured small-M fp8 GEMMs (torch._scaled_mm)
    run at about the bf16 time on the smaller shapes (H100 table: 4096 x 4096 at M = 16,
    15.1 us either way): the step shortens by a third, not a half."""
    bf16 = decode_step_s(L7, H100, ServePlan(concurrency=1), 128, ENGINE)
    fp8 = decode_step_s(L7, H100, ServePlan(concurrency=1, weight_dtype="fp8"), 128, ENGINE)
    assert 0.5 < fp8 / bf16 < 0.8


def test_md1_queue_hand_checked():
    # Pollaczek-Khinchine, deterministic service: rho s / (2 (1 - rho))
    assert md1_wait_s(0.5, 1.0) == pytest.approx(0.5)
    assert md1_wait_s(0.8, 2.0) == pytest.approx(0.8 * 2 / 0.4)
    assert md1_wait_s(0.005, 1.0, 0.99) == 0.0  # P(wait > 0) = rho < 1 %
    assert md1_wait_s(1.0, 1.0) == math.inf
    # the tail's decay: rho (e^x - 1) = x at x = theta s; P99 = ln(rho / 0.01) / theta
    w = md1_wait_s(0.5, 1.0, 0.99)
    x = math.log(0.5 / 0.01) / w
    assert 0.5 * (math.exp(x) - 1) == pytest.approx(x, rel=1e-9)
    assert w > md1_wait_s(0.5, 1.0)  # the P99 wait exceeds the mean


def _busy_arrivals_exact(a: float, rho: float, quantile: float) -> int:
    """The least n with P(N <= n) >= quantile, N the arrivals of an M/D/1 busy period
    started by work x (a = lam x, rho = lam s): P(N = n) = x / (x + n s) times the Poisson
    probability of n arrivals in x + n s (Takacs's hitting-time formula)."""
    total = 0.0
    for n in range(100_000):
        mu = a + n * rho
        total += a / mu * math.exp(n * math.log(mu) - mu - math.lgamma(n + 1))
        if total >= quantile:
            return n
    raise AssertionError("not reached")


@pytest.mark.parametrize("a,rho", [(12.0, 0.4), (20.0, 0.6), (50.0, 0.2), (10.0, 0.0)])
def test_busy_arrivals_quantile_against_takacs(a, rho):
    """Prefills landing in a decode window of a = lam x arrivals, each lengthening it by
    its service: the P99 count from the cumulants lands within 4 % of the exact
    distribution's, where the Poisson quantile at the mean count a / (1 - rho), which
    leaves the lengthening out, falls short by up to a quarter."""
    exact = _busy_arrivals_exact(a, rho, 0.99)
    assert busy_arrivals_quantile(1.0, a, rho, 0.99) == pytest.approx(exact, rel=0.04)
    mean = a / (1 - rho)
    assert busy_arrivals_quantile(1.0, a, rho, 0.5) == pytest.approx(mean, rel=0.05)
    if rho >= 0.4:
        assert mean + 2.3263 * math.sqrt(mean) < 0.85 * exact
    assert busy_arrivals_quantile(1.0, a, 1.0, 0.99) == math.inf
    assert busy_arrivals_quantile(1.0, 0.0, rho, 0.99) == 0.0


def test_unsupported_layouts_say_why():
    w = ServeWorkload(isl=128, osl=128)
    fp4 = evaluate_serve(L7, H100, ServePlan(weight_dtype="fp4"), w, ENGINE)
    assert not fp4.feasible and "FP4" in fp4.reasons[0]
    assert evaluate_serve(L7, B200, ServePlan(weight_dtype="fp4"), w, ENGINE).feasible
    ep = evaluate_serve(L7, H100, ServePlan(tp=2, ep=2), w, ENGINE)
    assert not ep.feasible and "ep=2" in ep.reasons[0]
    heads = evaluate_serve(load_model("falcon-180b"), H100, ServePlan(tp=3), w, ENGINE)
    assert "does not divide" in heads.reasons[0]
    big = evaluate_serve(L70, H100, ServePlan(tp=1), w, ENGINE)
    assert not big.feasible and "exceeds" in big.reasons[0] and "HBM" in big.reasons[0]


def test_memory_limit_is_exactly_max_concurrency():
    plan = ServePlan(tp=2, weight_dtype="fp8", kv_dtype="fp8")
    n = max_concurrency(L70, H100, plan, 2048, 2048)
    assert n > 10
    fits = serve_memory(L70, H100, plan.model_copy(update={"concurrency": n}), 2048, 2048)
    over = serve_memory(L70, H100, plan.model_copy(update={"concurrency": n + 1}), 2048, 2048)
    assert fits.total <= fits.capacity < over.total


def test_slos_and_load():
    plan = ServePlan(tp=2, concurrency=64, weight_dtype="fp8", kv_dtype="fp8", replicas=4)
    light = evaluate_serve(L70, H100, plan, ServeWorkload(isl=1024, osl=128, rate_rps=1), ENGINE)
    heavy = evaluate_serve(L70, H100, plan, ServeWorkload(isl=1024, osl=128, rate_rps=12), ENGINE)
    assert light.feasible and light.ttft_p99_ms >= light.ttft_ms
    assert heavy.ttft_ms > light.ttft_ms and heavy.tpot_ms > light.tpot_ms
    assert light.output_tokens_per_s == pytest.approx(128.0)
    over = evaluate_serve(L70, H100, plan, ServeWorkload(isl=1024, osl=128, rate_rps=1e4), ENGINE)
    assert not over.feasible and "saturates" in over.reasons[0] and over.ttft_ms is None
    tight = evaluate_serve(L70, H100, plan, ServeWorkload(isl=1024, osl=128, rate_rps=1,
                                                          tpot_ms=1.0), ENGINE)
    assert not tight.feasible and "TPOT" in tight.reasons[0]


def test_disaggregated_decode_is_not_stalled_by_prefill():
    w = ServeWorkload(isl=4096, osl=256, rate_rps=2)
    agg = ServePlan(tp=2, concurrency=64, weight_dtype="fp8", replicas=2)
    dis = ServePlan.model_validate(dict(agg.to_dict(), replicas=1, prefill=dict(
        tp=2, weight_dtype="fp8", concurrency=8, prefill_chunk=8192)))
    a, d = evaluate_serve(L70, H100, agg, w, ENGINE), evaluate_serve(L70, H100, dis, w, ENGINE)
    perf = replica_perf(L70, H100, dis, 4096, 256, ENGINE)
    assert kv_transfer_s(L70, H100, dis.prefill, 4096) > 0 and d.num_gpus == 4
    # the step of the batch in flight (plus half a step's wait to join, over osl - 1 tokens)
    assert d.feasible and d.tpot_ms == pytest.approx(perf.step_s(d.decode_batch) * 1e3, rel=0.005) \
        and d.tpot_ms < a.tpot_ms


def test_calibration_within_15_percent():
    from planner.validation.serving import run_serving

    rep = run_serving().to_json()
    assert len(rep["rows"]) == 24
    assert rep["mape"]["output_tokens_per_s_per_gpu"] <= 0.15
    assert rep["mape"]["first_token_latency_ms"] <= 0.15


@settings(max_examples=25, deadline=None)
@given(c1=st.integers(1, 32768), c2=st.integers(1, 32768), batch=st.integers(1, 512),
       tp=st.sampled_from([1, 2, 4, 8]), kv=st.sampled_from(["bf16", "fp8"]))
def test_decode_step_grows_with_context(c1, c2, batch, tp, kv):
    plan = ServePlan(tp=tp, concurrency=batch, kv_dtype=kv, weight_dtype="fp8")
    lo, hi = sorted((c1, c2))
    assert decode_step_s(L70, H100, plan, lo, ENGINE) <= decode_step_s(L70, H100, plan, hi, ENGINE)
    if hi > lo:
        assert decode_step_s(L70, H100, plan, lo, ENGINE) < decode_step_s(L70, H100, plan, hi, ENGINE)


@settings(max_examples=25, deadline=None)
@given(hbm1=st.floats(20, 400), hbm2=st.floats(20, 400), isl=st.integers(1, 32768),
       osl=st.integers(1, 8192), tp=st.sampled_from([1, 2, 4, 8]))
def test_more_hbm_never_lowers_the_feasible_concurrency(hbm1, hbm2, isl, osl, tp):
    lo, hi = sorted((hbm1, hbm2))
    plan = ServePlan(tp=tp, weight_dtype="fp8")

    def with_hbm(gib):
        return H100.model_copy(update={"gpu": H100.gpu.model_copy(update={"hbm_gib": gib})})

    assert (max_concurrency(L70, with_hbm(lo), plan, isl, osl)
            <= max_concurrency(L70, with_hbm(hi), plan, isl, osl))


@pytest.mark.parametrize("rho", [1 - 1e-16, 1 - 1e-12, 1e-9, 0.3])
def test_md1_tail_is_finite_near_the_edges(rho):
    w = md1_wait_s(rho, 1.0, 0.99)
    assert math.isfinite(w) and w >= 0


def _finite(obj) -> bool:
    if isinstance(obj, dict):
        return all(_finite(v) for v in obj.values())
    if isinstance(obj, list):
        return all(_finite(v) for v in obj)
    return not isinstance(obj, float) or math.isfinite(obj)


@settings(max_examples=40, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8, 16]), pp=st.sampled_from([1, 2, 3]),
       batch=st.integers(1, 4096), wd=st.sampled_from(["bf16", "fp8", "int4", "fp4"]),
       kv=st.sampled_from(["bf16", "fp8"]), chunk=st.integers(1, 1 << 16),
       isl=st.integers(1, 1 << 20), osl=st.integers(1, 1 << 14),
       rate=st.one_of(st.none(), st.floats(1e-6, 1e6)),
       ttft=st.one_of(st.none(), st.floats(1e-3, 1e7)),
       tpot=st.one_of(st.none(), st.floats(1e-3, 1e6)),
       model=st.sampled_from(["llama2-7b", "mixtral-8x7b", "deepseek-v3"]),
       disagg=st.booleans())
def test_every_answer_is_finite_or_says_why(tp, pp, batch, wd, kv, chunk, isl, osl, rate, ttft,
                                            tpot, model, disagg):
    plan = ServePlan(tp=tp, pp=pp, concurrency=batch, weight_dtype=wd, kv_dtype=kv,
                     prefill_chunk=chunk, replicas=2,
                     prefill=dict(tp=tp, kv_dtype=kv, replicas=3) if disagg else None)
    w = ServeWorkload(isl=isl, osl=osl, rate_rps=rate, ttft_ms=ttft, tpot_ms=tpot)
    est = evaluate_serve(load_model(model), B200, plan, w, ENGINE)
    assert _finite(est.to_json())
    assert est.feasible == (not est.reasons)
    if est.feasible and rate is not None:
        assert est.ttft_p99_ms is not None and est.tpot_p99_ms is not None


def test_mdc_wait_far_from_saturation_is_zero_without_overflow():
    """A lightly loaded pool (beta = (c - a) / sqrt(a) = 38): phi(beta) is a denormal and
    the Halfin-Whitt ratio beta Phi / phi overflows a float; computed in logs the chance of
    waiting is 0, with no overflow warning (numpy scalars warned before)."""
    import warnings

    import numpy as np

    from planner.costmodel.serve.queueing import mdc_wait_s

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for c in (39, 1024):
            assert mdc_wait_s(np.float64(1.0), np.float64(1.0), c) == 0.0
            assert mdc_wait_s(np.float64(1.0), np.float64(1.0), c, 0.99) == 0.0
    # near saturation the wait is positive and finite
    assert 0 < mdc_wait_s(60.0, 1.0, 64) < math.inf
