"""Megatron-LM and Megatron-Bridge exports that launch and run the plan that was costed
(issue 30): the environment, the MoE dispatcher, the RoPE base, query groups and TP,
block recomputation on unequal chunks, Megatron's example scripts read back, Bridge keys."""

from __future__ import annotations

import pytest

from conftest import small_cluster, tiny_model
from formulations.train.space import SearchSpace, SpaceOptions
from planner.costmodel.train.evaluator import check_structure
from planner.errors import InputError
from planner.export import Target, bridge, megatron
from planner.specs.hf import model_from_hf
from planner.specs.loaders import load_cluster, load_model
from planner.specs.plan import Plan
from planner.specs.plan_base import model_defaults

LLAMA3_ARCH = ("--normalization RMSNorm --position-embedding-type rope --rotary-base 500000 "
               "--swiglu --disable-bias-linear --untie-embeddings-and-output-weights "
               "--attention-dropout 0.0 --hidden-dropout 0.0 ")


def _t70(gpus: int | None = None) -> Target:
    return Target(load_model("llama3-70b"), load_cluster("examples/superpod.yaml", gpus))


def _plan(**kw) -> Plan:
    base = dict(tp=4, pp=2, cp=2, dp=64, global_batch_size=512, seq_len=8192, virtual_stages=8,
                sequence_parallel=True, zero_stage=1)
    return Plan.model_validate({**base, **kw})


def test_script_exports_cuda_device_max_connections():
    text = megatron.render(_plan(), _t70())
    lines = text.splitlines()
    launch = next(i for i, line in enumerate(lines) if line.startswith("torchrun"))
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in lines[:launch]


def test_rotary_base_is_the_models():
    args = megatron.to_args(_plan(), _t70())
    assert args[args.index("--rotary-base") + 1] == "500000"
    back, _ = megatron.parse_args(megatron.render(_plan(), _t70()), _t70())
    assert back == megatron.normalized(_plan(), _t70())
    text = megatron.render(_plan(), _t70()).replace("--rotary-base 500000", "")
    with pytest.raises(InputError, match=r"--rotary-base 10000 \(Megatron-LM's default"):
        megatron.parse_args(text, _t70())


def test_hf_config_carries_rope_theta():
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
           "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100,
           "max_position_embeddings": 128, "rope_theta": 500000.0}
    assert model_from_hf(cfg, "x").rope_theta == 500000.0
    with pytest.raises(InputError, match="rope_theta"):
        model_from_hf({**cfg, "rope_theta": "big"}, "x")


def test_moe_export_writes_alltoall_and_reads_it_back():
    m, c = load_model("mixtral-8x7b"), load_cluster("dgx-h100-superpod", 64)
    t = Target(m, c)
    plan = Plan.model_validate(dict(tp=2, pp=1, dp=32, ep=8, global_batch_size=256,
                                    seq_len=4096, zero_stage=1, sequence_parallel=True))
    args = megatron.to_args(plan, t)
    assert args[args.index("--moe-token-dispatcher-type") + 1] == "alltoall"
    back, ignored = megatron.parse_args(" ".join(args), t)
    assert "--moe-token-dispatcher-type" not in ignored
    assert back == megatron.normalized(plan, t)
    for other, needle in (("allgather", "allgather"), ("flex", "flex")):
        with pytest.raises(InputError, match=f"--moe-token-dispatcher-type {needle}.*not costed"):
            megatron.parse_args(" ".join(args).replace("alltoall", other), t)
    absent = " ".join(args).replace("--moe-token-dispatcher-type alltoall", "")
    with pytest.raises(InputError, match="allgather \\(Megatron-LM default when absent\\)"):
        megatron.parse_args(absent, t)


def test_query_groups_must_divide_by_tp():
    """Megatron-Core core_v0.15.3 transformer_config.py: num_query_groups % tp == 0 (no KV
    head replication); Llama 3 70B has 8 KV heads."""
    t = _t70()
    plan = Plan.model_validate(dict(tp=16, pp=1, cp=1, dp=64, global_batch_size=512,
                                    seq_len=8192, sequence_parallel=True, zero_stage=1))
    reasons = check_structure(t.model, t.cluster, plan)
    assert any("tp=16 does not divide num_kv_heads=8" in str(r) for r in reasons)
    ok = Plan.model_validate({**plan.to_dict(), "tp": 8, "dp": 128})
    assert not check_structure(t.model, t.cluster, ok)


def test_space_never_proposes_tp_beyond_kv_heads():
    model = tiny_model(num_layers=2, num_attention_heads=16, num_kv_heads=2,
                       global_batch_size=16, seq_len=1024)
    space = SearchSpace(model, small_cluster(16, domain=8), model_defaults(model), {},
                        SpaceOptions(max_microbatch=1, max_virtual_stages=1))
    tps = {space.plan(*pt).tp for pt in space}
    assert tps and max(tps) <= 2


def test_half_recompute_on_unequal_chunks_is_refused():
    """80 layers on pp 4 x v 7 = 28 chunks of 2 and 3 layers: block recomputation of the
    first 2 of each recomputes 56 layers where the plan costs 40 (issue 30)."""
    t = _t70(128)
    plan = Plan.model_validate(dict(tp=8, pp=4, dp=4, virtual_stages=7, uneven_pipeline=True,
                                    global_batch_size=512, seq_len=8192, sequence_parallel=True,
                                    zero_stage=1, recompute="half"))
    assert not check_structure(t.model, t.cluster, plan)
    for fmt, render in (("megatron", megatron.render), ("megatron-bridge", bridge.render)):
        with pytest.raises(InputError, match=f"cannot export to {fmt}: recompute=half: .*"
                                             "chunks of 2 and 3 layers"):
            render(plan, t)
    # chunks of 5 and 6 layers (base odd): block over 3 is half of each, rounded up
    even = Plan.model_validate({**plan.to_dict(), "pp": 2, "dp": 8, "virtual_stages": 7})
    args = megatron.to_args(even, t)
    assert args[args.index("--recompute-num-layers") + 1] == "3"
    script = megatron.render(plan.model_copy(update={"recompute": "selective"}), t).replace(
        "--recompute-granularity selective", "--recompute-granularity full --recompute-method "
        "block --recompute-num-layers 2")
    with pytest.raises(InputError, match="--recompute-num-layers 2 on chunks of 2 and 3 "
                                         "layers recomputes 56 of 80"):
        megatron.parse_args(script, t)


#: Megatron-LM's examples/gpt3/train_gpt3_175b_distributed.sh (core_v0.15.3), abridged
EXAMPLE = """#!/bin/bash
export CUDA_DEVICE_MAX_CONNECTIONS=1
GPUS_PER_NODE=8
NUM_NODES=128
WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))
CHECKPOINT_PATH=$1 #<Specify path>
DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NUM_NODES
)
GPT_MODEL_ARGS=(
    --num-layers 80
    --seq-length 8192
    --attention-backend flash # Can use (flash/fused/unfused/local)
)
ARCH="%s"
MODEL_PARALLEL_ARGS=(
\t--tensor-model-parallel-size 8
\t--pipeline-model-parallel-size "$PP"
)
EVAL_AND_LOGGING_ARGS=(
    --save $CHECKPOINT_PATH
)
torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \\
    ${GPT_MODEL_ARGS[@]} $ARCH \\
    "${MODEL_PARALLEL_ARGS[@]}" --bf16 --global-batch-size 512 \\
    ${EVAL_AND_LOGGING_ARGS[@]}
""" % LLAMA3_ARCH


def test_reads_megatrons_example_script_variables_and_arrays():
    t = _t70()
    with pytest.raises(InputError, match=r"--pipeline-model-parallel-size: '\$PP': not defined"):
        megatron.parse_args(EXAMPLE, t)
    plan, ignored = megatron.parse_args("PP=4\n" + EXAMPLE, t)
    assert (plan.tp, plan.pp, plan.dp) == (8, 4, 32)
    assert ignored == ["--save"]  # $1 unresolved, but its value is not read
    with pytest.raises(InputError, match="is 8 GPUs"):
        megatron.parse_args("PP=4\n" + EXAMPLE.replace("NUM_NODES=128", "NUM_NODES=1"), t)


def test_script_expansion_is_bounded():
    doubling = "A=(x)\n" + "".join(f"A=(${{A[@]}} ${{A[@]}})\n" for _ in range(20))
    with pytest.raises(InputError, match="expand to more text"):
        megatron.parse_args(doubling + "--bf16", _t70())


def test_absent_normalization_is_layernorm():
    t = _t70()
    args = LLAMA3_ARCH.replace("--normalization RMSNorm", "") + "--bf16"
    with pytest.raises(InputError, match="--normalization LayerNorm \\(Megatron-LM's default "
                                         "when absent\\) describes a different model"):
        megatron.parse_args(args, t)
    gpt = Target(load_model("gpt3-175b"), load_cluster("examples/superpod.yaml"))
    plan, _ = megatron.parse_args("--bf16 --tensor-model-parallel-size 8 "
                                  "--pipeline-model-parallel-size 8", gpt)
    assert plan.tp == 8  # GPT-3 is Megatron's defaults: LayerNorm, learned, GELU, biases


def test_bridge_layout_and_overlap_keys():
    m, c = load_model("llama3-405b"), load_cluster("dgx-h100-superpod", 16384)
    plan = Plan.model_validate(dict(tp=8, cp=2, pp=16, dp=64, virtual_stages=7,
                                    uneven_pipeline=True, global_batch_size=2048,
                                    seq_len=8192, sequence_parallel=True, zero_stage=1))
    lines = bridge.overrides(plan, Target(m, c))
    assert "model.account_for_embedding_in_pipeline_split=false" in lines
    assert "model.account_for_loss_in_pipeline_split=false" in lines
    assert any(x.startswith("model.pipeline_model_parallel_layout=") for x in lines)
    assert not any(x.startswith("comm_overlap.") for x in lines)
    assert "model.tp_comm_overlap=true" in lines and "ddp.overlap_grad_reduce=true" in lines
    assert "model.overlap_p2p_comm=true" in lines


def test_bridge_refusals_name_bridge():
    with pytest.raises(InputError, match="^cannot export to megatron-bridge: zero_stage=3"):
        bridge.render(_plan(zero_stage=3), _t70())
