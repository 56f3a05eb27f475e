"""DeepSpeed's gradient-reduction buckets: its ZeRO optimizer allocates reduce_bucket_size
(5e8 elements by default, deepspeed/runtime/zero/config.py v0.18.0) in the model's dtype
before each backward, and a second such buffer with overlap_comm at ZeRO-1/2
(stage_1_and_2.py backward_prologue); ZeRO-3 keeps one (stage3.py)."""

from __future__ import annotations

import pytest

from planner import api
from planner.costmodel.runtime import apply_profile
from planner.costmodel.train.batch import evaluate_many
from planner.specs.framework import load_framework
from planner.specs.loaders import load_cluster, load_model

GIB = 2**30


def _cluster(gpus: int = 8):
    return load_cluster("dgx-h100-superpod", gpus)


def _plan(**kw):
    base = {"dp": 8, "zero_stage": 2, "global_batch_size": 64, "microbatch_size": 1,
            "seq_len": 8192, "recompute": "full", "dtype": "bf16", "grad_reduce_dtype": "bf16",
            "overlap_dp_grad_reduce": True, "overlap_param_gather": True}
    return {**base, **kw}


@pytest.mark.parametrize("kw, buffers", [
    ({}, 2),  # ZeRO-2, overlap_comm over 8 ranks: buf_0 and buf_1
    ({"overlap_dp_grad_reduce": False, "overlap_param_gather": False}, 1),
    ({"zero_stage": 3}, 1),
    ({"zero_stage": 0, "overlap_dp_grad_reduce": False, "overlap_param_gather": False}, 0),
])
def test_buckets_by_hand(kw, buffers):
    with_ds = api.evaluate("llama3-8b", _cluster(), _plan(**kw), framework="deepspeed")
    plain = api.evaluate("llama3-8b", _cluster(), _plan(**kw))
    extra = (with_ds.memory_breakdown_bytes["comm_buffers"]
             - plain.memory_breakdown_bytes["comm_buffers"])
    assert extra == pytest.approx(buffers * 5e8 * 2)  # bf16: 2 bytes an element


def test_the_profile_declares_the_default_bucket():
    assert load_framework("deepspeed").kernels.reduce_bucket_elements == 5e8
    assert load_framework("torchtitan").kernels.reduce_bucket_elements == 0


def test_tables_charge_what_the_evaluator_charges():
    """The search's tables (the vectorized evaluator reads them) carry the same buckets."""
    from planner.specs.plan import Plan

    cluster = apply_profile(_cluster(), load_framework("deepspeed"))
    model = load_model("llama3-8b")
    plans = [Plan(**_plan(**kw)) for kw in ({}, {"zero_stage": 1}, {"zero_stage": 3})]
    many = evaluate_many(model, cluster, plans)
    for i, p in enumerate(plans):
        one = api.evaluate(model, cluster, p)
        assert many.memory_per_gpu_bytes[i] == pytest.approx(one.memory_per_gpu_bytes, rel=1e-9)
