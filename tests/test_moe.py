"""MoE and context-parallel terms, checked against hand-computed values."""

from __future__ import annotations

import pytest

from planner.costmodel.train.evaluator import evaluate
from planner.costmodel.layer import (
    LayerShape,
    LayerStrategy,
    activation_bytes,
    active_params,
    layer_model_flops_per_token,
    layer_params,
    total_params,
)
from planner.costmodel.moe import (
    alltoall_bytes,
    expert_spans,
    moe_activation_bytes,
    moe_layer_params,
)
from planner.costmodel.network import level_traffic
from planner.specs.loaders import load_model
from planner.specs.plan import Plan

from conftest import small_cluster, tiny_model


def tiny_moe(**moe):
    """h=64, 4 heads of 16, SwiGLU; layer 0 dense (FFN 256), layer 1 MoE: 4 experts of
    128, top-2, one shared expert of 128."""
    spec = dict(num_experts=4, top_k=2, expert_ffn_hidden_size=128, num_shared_experts=1,
                first_k_dense=1)
    spec.update(moe)
    return tiny_model(num_layers=2, hidden_size=64, num_attention_heads=4, num_kv_heads=4,
                      ffn_hidden_size=256, vocab_size=100, seq_len=32, global_batch_size=8,
                      norm_type="rmsnorm", moe=spec)


def test_layer_kinds_interleave():
    m = tiny_model(num_layers=8, moe=dict(num_experts=4, expert_ffn_hidden_size=64,
                                          first_k_dense=2, every_n=2))
    assert m.layer_kinds() == ["dense", "dense", "moe", "dense", "moe", "dense", "moe", "dense"]
    assert m.layer_counts() == {"dense": 5, "moe": 3}


def test_moe_parameters_by_hand():
    m = tiny_moe()
    attn = 64 * (64 + 2 * 64) + 64 * 64  # QKV + output projection = 16384
    norms = 2 * 64
    dense = attn + 3 * 64 * 256 + norms  # 65664
    router, shared, expert = 64 * 4, 3 * 64 * 128, 3 * 64 * 128
    assert layer_params(m, "dense", 1) == dense
    assert moe_layer_params(m, 1, 1, 1) == (attn + norms + router + shared, 4 * expert)
    ends = 100 * 64 + 100 * 64 + 64  # embedding, head, final norm
    assert total_params(m) == dense + attn + norms + router + shared + 4 * expert + ends  # 218176
    assert active_params(m) == total_params(m) - 2 * expert  # top-2 of 4: 169024
    # sharded: attention and shared experts by tp, experts by ep and etp, router replicated
    rest, routed = moe_layer_params(m, tp=2, ep=2, etp=2)
    assert rest == attn / 2 + norms + router + shared / 2
    assert routed == 2 * expert / 2


def test_published_moe_sizes():
    mix = load_model("mixtral-8x7b")  # Jiang et al. 2024: 46.7B total, 12.9B active
    assert total_params(mix) / 1e9 == pytest.approx(46.7, abs=0.05)
    assert active_params(mix) / 1e9 == pytest.approx(12.9, abs=0.05)


def test_moe_flops_by_hand():
    m = tiny_moe()
    seq = 32
    attn_gemm = 2 * 64 * 192 + 2 * 64 * 64
    router, shared, routed = 2 * 64 * 4, 2 * 3 * 64 * 128, 2 * 2 * 3 * 64 * 128  # top-2
    core = 4 * seq * 64
    assert layer_model_flops_per_token(m, "moe", seq) == attn_gemm + router + shared + routed + core
    # capacity padding is hardware work, not model FLOPs
    padded = tiny_moe(capacity_factor=1.5)
    assert layer_model_flops_per_token(padded, "moe", seq) == layer_model_flops_per_token(m, "moe", seq)


def test_alltoall_volume_by_hand():
    m = tiny_moe()
    shape = LayerShape(tp=2, cp=1, mbs=2, seq=32, ep=4, etp=1)
    # 64 tokens per TP group, 32 routed by each TP rank, top-2 -> 64 copies of h=64 at 2 B
    assert alltoall_bytes(m, shape) == 64 * 64 * 2
    assert alltoall_bytes(tiny_moe(capacity_factor=1.5), shape) == 1.5 * 64 * 64 * 2
    lv = small_cluster(16, domain=8).topology
    # 3/4 of the buffer leaves each GPU when the EP group of 4 sits in one domain...
    assert level_traffic("all_to_all", 8192, (4, 1), lv)[0][0] == 6144
    # ...and an EP group of 2 x 2 sends 1/2 inside the domain, 1/2 over the fabric
    assert [b for b, _ in level_traffic("all_to_all", 8192, (2, 2), lv)] == [4096, 4096]


def test_expert_group_spans():
    # A stage of tp 4 x dp 8, 2 dp ranks per 8-GPU domain: ranks 0-31, domain = ranks 0-7.
    # Megatron-Core's expert RankGenerator (order tp-cp-ep-dp-pp, tp=etp, dp=edp) numbers
    # the same ranks etp innermost, then ep, then edp (MoE parallel folding):
    tp_s, cp_s, dp_s = (4, 1), (1, 1), (2, 4)
    # etp 1, ep 4: EP = ranks {0,1,2,3} (the attention's TP group), one domain;
    # EDP = {0,4,...,28}: 2 per domain, 4 domains
    ep_s, etp_s, edp_s = expert_spans(tp_s, cp_s, dp_s, ep=4, etp=1)
    assert ep_s == (4, 1) and etp_s == (1, 1) and edp_s == (2, 4)
    # etp 4, ep 2: ETP = {0..3}, EP = {0,4}, EDP = {0,8,16,24}
    ep_s, etp_s, edp_s = expert_spans(tp_s, cp_s, dp_s, ep=2, etp=4)
    assert ep_s == (2, 1) and etp_s == (4, 1) and edp_s == (1, 4)
    # Qwen3-235B on DGX H100 (Megatron-Bridge H100 recipe: TP2, ETP1, EP32, DP16): the
    # stage's 32 ranks are 4 nodes of tp2 x dp4; EP = 32 consecutive ranks = 8 per node x
    # 4 nodes, and no expert data parallelism is left (edp = 32 / 32 = 1)
    ep_s, etp_s, edp_s = expert_spans((2, 1), (1, 1), (4, 4), ep=32, etp=1)
    assert ep_s == (8, 4) and etp_s == (1, 1) and edp_s == (1, 1)
    # rank order tp-cp-dp-ep-pp (ep outside dp), etp 1: EDP = ranks {0..7}, one domain;
    # EP = {0,8,16,24}, one per domain
    ep_s, _, edp_s = expert_spans(tp_s, cp_s, dp_s, ep=4, etp=1,
                                  order=("tp", "cp", "dp", "ep", "pp"))
    assert edp_s == (8, 1) and ep_s == (1, 4)


def test_moe_activation_memory_by_hand():
    m = tiny_moe()
    shape = LayerShape(tp=1, cp=1, mbs=2, seq=32, ep=1, etp=1)
    a, t, h = 2, 64, 64
    received = 2 * t  # top-2
    expected = (
        4 * a * t * h  # two norm inputs, QKV input, shared FC1 input
        + a * t * 192 + a * t * 64  # Q, K, V and the projection input
        + a * t * h + 4 * t * 4  # router input, fp32 router probabilities
        + 3 * a * t * 128  # shared expert SwiGLU activations
        + a * received * h + 3 * a * received * 128 + a * received * h  # experts
        + 4 * 2 * 4 * 32  # FlashAttention log-sum-exp, fp32
    )
    assert moe_activation_bytes(m, shape, LayerStrategy()) == expected == 256000
    assert moe_activation_bytes(m, shape, LayerStrategy(recompute="full")) == a * t * h


def test_cp_activation_memory_by_hand():
    m = tiny_model(hidden_size=1024, num_attention_heads=16, num_kv_heads=8,
                   ffn_hidden_size=4096, seq_len=4096)
    one = activation_bytes(m, LayerShape(1, 1, 1, 4096), LayerStrategy())
    four = activation_bytes(m, LayerShape(1, 4, 1, 4096), LayerStrategy())
    t, h, a = 1024, 1024, 2
    q, kv, f = 1024, 512, 4096
    expected = 4 * a * t * h + a * t * (q + 2 * kv) + a * t * q + 3 * a * t * f + 4 * 16 * 4096 / 4
    assert four == expected
    assert four == pytest.approx(one / 4, rel=1e-12)


def test_moe_plan_evaluates_and_ep_shards_experts():
    m = load_model("mixtral-8x7b")
    c = small_cluster(64, domain=8)
    base = dict(tp=2, pp=2, dp=16, global_batch_size=64, seq_len=4096, sequence_parallel=True,
                recompute="selective", zero_stage=1)
    one = evaluate(m, c, Plan(**base))
    eight = evaluate(m, c, Plan(**base, ep=8))
    assert not one.feasible and eight.feasible  # all 8 experts on every GPU do not fit
    # ep = 1 still all-gathers the routed tokens over the expert TP group (etp = tp = 2)
    assert 0 < one.time_breakdown_s["ep_comm"] < eight.time_breakdown_s["ep_comm"]
    alone = evaluate(m, c, Plan(**base, expert_tp=1))
    assert alone.time_breakdown_s["ep_comm"] == 0
    # expert weights are split 8 ways: the weights drop by 7/8 of the routed experts
    routed = 32 * moe_layer_params(m, 2, 1, 2)[1] / 2  # per pipeline stage, per GPU
    saved = one.memory_breakdown_bytes["weights"] - eight.memory_breakdown_bytes["weights"]
    assert saved == pytest.approx(routed * 7 / 8 * 2, rel=1e-9)


def test_moe_structure_errors():
    m = load_model("mixtral-8x7b")
    c = small_cluster(64, domain=8)
    est = evaluate(m, c, Plan(tp=2, pp=2, dp=16, ep=16, global_batch_size=64, seq_len=4096))
    assert any("ep=16 does not divide moe.num_experts=8" in r for r in est.reasons)
    est = evaluate(m, c, Plan(tp=4, pp=1, dp=16, expert_tp=3, global_batch_size=64, seq_len=4096))
    assert any("expert_tp x ep = 3 x 1 must divide tp x cp x dp = 64" in r for r in est.reasons)
    est = evaluate(tiny_model(), small_cluster(8), Plan(dp=8, ep=2, global_batch_size=64,
                                                        seq_len=2048))
    assert any("needs a mixture-of-experts model" in r for r in est.reasons)


@pytest.mark.parametrize("name,total_b,active_b", [
    ("mixtral-8x22b", 141, 39),  # Mistral AI announcement
    ("deepseek-v3", 671, 37),  # DeepSeek-V3 report, Table 1 / abstract
    ("qwen1.5-moe-a2.7b", 14.3, 2.7),  # Qwen blog
    ("qwen2-57b-a14b", 57, 14),  # Qwen2 report, Table 1
    ("qwen3-235b-a22b", 235, 22),  # Qwen3 Technical Report (Qwen Team 2025), Table 2
])
def test_catalog_moe_sizes(name, total_b, active_b):
    m = load_model(name)
    assert total_params(m) / 1e9 == pytest.approx(total_b, rel=0.015)
    assert active_params(m) / 1e9 == pytest.approx(active_b, rel=0.03)


@pytest.mark.parametrize("config,catalog", [
    ("mixtral-8x7b-config.json", "mixtral-8x7b"),
    ("qwen1.5-moe-a2.7b-config.json", "qwen1.5-moe-a2.7b"),
    ("deepseek-v3-config.json", "deepseek-v3"),
])
def test_hf_moe_configs_match_the_catalog(data_dir, config, catalog):
    hf = load_model(str(data_dir / config))
    ref = load_model(catalog)
    drop = {"moe_layers", "first_k_dense", "every_n"}  # compared through layer_kinds()
    assert hf.moe.model_dump(exclude=drop) == ref.moe.model_dump(exclude=drop)
    assert hf.mla == ref.mla
    assert hf.layer_kinds() == ref.layer_kinds()
    assert total_params(hf) == total_params(ref)
    assert active_params(hf) == active_params(ref)


def test_hf_errors_name_the_field(data_dir, tmp_path):
    from planner.errors import InputError

    with pytest.raises(InputError, match="deepseek_v3 config.json is missing 'kv_lora_rank'"):
        load_model(str(data_dir / "deepseek-v3-missing-config.json"))
    bad = tmp_path / "config.json"
    bad.write_text('{"architectures": ["Foo"], "hidden_size": 8}')
    with pytest.raises(InputError, match="no 'model_type'"):
        load_model(str(bad))
    bad.write_text('{"model_type": "mamba", "hidden_size": 8}')
    with pytest.raises(InputError, match="model_type 'mamba' is not supported.*deepseek_v3"):
        load_model(str(bad))


def test_fp8_expert_gemm_inputs_are_kept_as_casts():
    """Under FP8 the routed experts keep the 1-byte casts of their two GEMM inputs (the
    gathered tokens for FC1, the activation output for FC2) instead of BF16 (Megatron-LM
    moe_a2a_overlap.md: the expert node frees its input for FP8, "Low precision saves a
    cast tensor"): the layer stores (2 - 1) x (R h + R f_e) bytes less."""
    m = tiny_moe()
    shape = LayerShape(tp=1, cp=1, mbs=2, seq=32, ep=1, etp=1)
    received = 2 * 64  # top-2 of 64 tokens
    bf16 = moe_activation_bytes(m, shape, LayerStrategy(dtype="bf16"))
    fp8 = moe_activation_bytes(m, shape, LayerStrategy(dtype="fp8"))
    assert bf16 - fp8 == (2 - 1) * (received * 64 + received * 128)
