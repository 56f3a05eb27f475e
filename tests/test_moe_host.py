"""The host-bound MoE forward (planner/costmodel/moe.py host_stall_s): after the token
dispatcher's device-to-host sync the GPU waits while the host launches each local expert."""

from __future__ import annotations

import pytest

from planner.costmodel.layer import LayerShape, LayerStrategy
from planner.costmodel.moe import host_stall_s, moe_layer_cost
from planner.costmodel.shapes import Net
from planner.validation.corpus import corpus_runs

from conftest import small_cluster
from test_moe import tiny_moe


def _gpu(host_us: float):
    gpu = small_cluster().gpu
    return gpu.model_copy(update={"efficiency": gpu.efficiency.model_copy(
        update={"moe_expert_host_us": host_us})})


def test_stall_by_hand():
    m = tiny_moe(num_experts=64)
    shape = LayerShape(tp=1, cp=1, mbs=1, seq=32, ep=4)  # 16 local experts
    gpu = _gpu(100.0)  # 16 x 100 us = 1.6 ms of host work
    assert host_stall_s(gpu, m, shape, 0.5e-3) == pytest.approx(1.1e-3)
    assert host_stall_s(gpu, m, shape, 2e-3) == 0.0  # the GPU is the slower: no wait
    assert host_stall_s(_gpu(0.0), m, shape, 0.0) == 0.0


def test_stall_lands_on_forward_only():
    """Switched off (0 us) the layer is the GPU's; switched on, only the forward (and a
    full recomputation of it) grows, by the stall; the backward reuses the host splits."""
    m = tiny_moe(num_experts=64)
    shape = LayerShape(tp=1, cp=1, mbs=1, seq=32, ep=4)
    net = Net(levels=small_cluster().topology, tp_spans=(1,), cp_spans=(1,), ep_spans=(4,),
              etp_spans=(1,))
    for recompute, again in (("none", 0.0), ("full", 1.0)):
        strat = LayerStrategy(layer_type="moe", recompute=recompute)
        off = moe_layer_cost(m, _gpu(0.0), net, shape, strat)
        on = moe_layer_cost(m, _gpu(100.0), net, shape, strat)
        # tp = cp = 1: the forward is its kernels and one dispatch and combine (the EP time
        # is both ways, plus the recomputed forward's)
        ep_one = off.ep_comm_s / (2 + again)
        stall = on.fwd_s - off.fwd_s
        assert stall > 1e-3  # a tiny layer: the host's 1.6 ms dominates
        assert stall == pytest.approx(1.6e-3 - off.fwd_s - ep_one, rel=1e-9)
        assert on.bwd_s == off.bwd_s
        assert on.recompute_s - off.recompute_s == pytest.approx(again * stall)


def test_published_host_bound_run():
    """Megatron-Bridge 25.11's Qwen3-30B-A3B on 8 B200 at microbatch 1 (16 local experts of
    768, 9,299 tokens/s/GPU) is host-bound: without the stall the model is more than twice
    as fast as published; with the Megatron-Core profile's host time it is near."""
    run = next(r for r in corpus_runs() if r.name == "mbridge2511-b200-qwen3-30b-a3b-fp8-mx-8")
    c = run.costed_cluster()
    assert c.gpu.efficiency.moe_expert_host_us > 0
    on = run.residual(run.estimate(c))
    gpu = c.gpu.model_copy(update={"efficiency": c.gpu.efficiency.model_copy(
        update={"moe_expert_host_us": 0.0})})
    off = run.residual(run.estimate(c.model_copy(update={"gpu": gpu})))
    assert off > 1.0
    assert abs(on) < 0.15
