"""The planner's serving step times against aiconfigurator's measured TensorRT-LLM
per-operation database (hardware_catalog/calibration/aiconfigurator_steps.yaml, composed by
benchmarks/bench_aiconfigurator.py): Llama 3 8B/70B, TP 1/2/4/8, H100 SXM and H200, BF16
and FP8 weights.
Issue 29 asks for 15 % on every row; these tests assert the rows where that holds today
and pin the cause of the rest (docs/serving.md, "Against aiconfigurator's database")."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from planner.specs.serve import load_engine

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "bench_aiconfigurator", ROOT / "benchmarks" / "bench_aiconfigurator.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


@pytest.fixture(scope="module")
def shipped():
    return bench.rows("bf16", "trtllm")


def _off(rows):
    return [(r["model"], r["gpu"], r["tp"], r["phase"], r["size"], round(r["ratio"], 3))
            for r in rows if abs(r["ratio"] - 1) > bench.BOUND]


def test_the_extracted_rows_are_cited_and_read_as_stored():
    db = bench.database()
    assert db["source"]["repo"] == "ai-dynamo/aiconfigurator" and len(db["source"]["commit"]) == 40
    h100 = bench.AicGPU("h100_sxm", "bf16")
    m, n, k, ms = db["gpus"]["h100_sxm"]["gemm"]["bfloat16"][0]
    assert h100.gemm_s(m, n, k) == pytest.approx(ms * 1e-3)
    # off the grid: between the bracketing rows
    lo, hi = h100.gemm_s(128, 4096, 12288), h100.gemm_s(128, 4096, 16384)
    assert lo < h100.gemm_s(128, 4096, 14336) < hi


def test_single_gpu_steps_within_15_percent(shipped):
    """TP 1: every prefill (ISL 512-8192) and decode (batch 1-128) row of both models on
    both GPUs: the GEMM roofline, FlashAttention and decode attention alone."""
    rows = [r for r in shipped if r["tp"] == 1]
    assert len(rows) == 2 * 2 * 7
    assert _off(rows) == []


def test_long_prefill_within_15_percent_at_every_tp(shipped):
    rows = [r for r in shipped if r["phase"] == "prefill" and r["size"] >= 2048]
    assert len(rows) == 2 * 2 * 4 * 2
    assert _off(rows) == []


def test_small_batch_decode_at_tp_within_15_percent(shipped):
    """Decode at batch <= 8 and TP > 1, where the all-reduces weigh most: within 15 % with
    the profile's all-reduce (the network model alone: aiconfigurator measures TensorRT-LLM
    1.3's custom all-reduce at 2.8-6.4 us per call for these messages, less than the
    network model charges). The 30 us per collective fitted on v0.6.1 misses them by up
    to 2x."""
    rows = [r for r in shipped if r["phase"] == "decode" and r["size"] <= 8 and r["tp"] > 1]
    assert len(rows) == 2 * 2 * 3 * 2
    assert _off(rows) == []
    old = load_engine("trtllm").model_copy(update={"collective_overhead_us": 30.0})
    pick = [r for r in bench.rows("bf16", old)
            if r["phase"] == "decode" and r["size"] <= 8 and r["tp"] > 1]
    assert max(r["ratio"] for r in pick) > 1 + bench.BOUND


def test_rows_within_15_percent(shipped):
    """At least 103 of the 112 BF16 rows; those left are too fast, not too slow (decode at
    batch 32-128 with TP 2 or 8, the 8B prefill of 512 tokens at TP 8; docs/serving.md)."""
    off = _off(shipped)
    assert len(shipped) == 112 and len(shipped) - len(off) >= 103
    assert all(r[5] < 1 for r in off)


def test_fp8_rows_within_15_percent_with_the_activation_quantize():
    """FP8 weights: aiconfigurator's fp8 GEMM rows include TensorRT-LLM's dynamic per-tensor
    quantize of each bf16 GEMM input (an amax reduction and a quantize, ~8.5 us per GEMM at
    small m); with the trtllm profile charging it, at least 105 of 112 rows are within 15 %.
    Without it, 56."""
    fp8 = bench.rows("fp8", "trtllm")
    assert len(fp8) == 112 and len(fp8) - len(_off(fp8)) >= 105
    bare = load_engine("trtllm").model_copy(update={"fp8_act_quant_kernels": 0})
    without = bench.rows("fp8", bare)
    assert len(without) - len(_off(without)) < 105
    assert all(r["ratio"] < 1 for r in without if abs(r["ratio"] - 1) > bench.BOUND)
