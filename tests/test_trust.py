"""Mechanisms that keep the optimum honest (trust at the optimum): each test pins a
mechanism by its direction and hand-checked size, not the numbers of a calibration row."""

from __future__ import annotations

import pytest

from planner.costmodel import constants as C
from planner.costmodel.compose import dp_window_microbatches, headroom_bytes, split_p2p
from planner.costmodel.compute import gemm_efficiency, gemm_time_s
from planner.costmodel.train.evaluator import evaluate
from planner.costmodel.layer import layer_cost, masked_attention_flops_per_sequence
from planner.costmodel.train.stage import head_cost
from planner.costmodel.shapes import LayerShape, LayerStrategy, Net
from planner.specs.loaders import load_gpu, load_model
from planner.specs.plan import Plan
from planner.validation.microbench import cap_violations, gemm_caps

from conftest import small_cluster, tiny_model


def test_gemm_efficiency_saturates_and_never_exceeds_the_fitted_fraction():
    gpu = load_gpu("b200")
    frac, h = gpu.gemm_peak_fraction("fp8"), gpu.efficiency.gemm_half_dim
    effs = [gemm_efficiency(gpu, "fp8", d, d, d) for d in (h, 2 * h, 8 * h, 64 * h, 1e9)]
    assert effs == sorted(effs) and effs[-1] <= frac
    assert effs[0] == pytest.approx(frac / 8)  # each factor is 1/2 at the half dimension
    assert effs[2] == pytest.approx(frac * (8 / 9) ** 3)
    # below the half dimension the factor stays 1/2 and the roofline decides: a GEMV is
    # bandwidth bound, not slowed by a vanishing efficiency
    t = gemm_time_s(gpu, "fp8", 1, 8192, 8192, elem_bytes=2.0)
    assert t == pytest.approx(2 * (8192 + 8192 * 8192 + 8192) / (gpu.hbm_Bps * gpu.efficiency.hbm_fraction)
                              + gpu.efficiency.kernel_overhead_us * 1e-6)


def test_catalog_gemm_curves_never_beat_the_cublas_microbenchmark():
    """The fitted curve stays at or under measured cuBLASLt throughput on every published
    shape; a curve pushed 10 % above the H100 fit's asymptote is caught."""
    names = {g for e in gemm_caps()["measured"] for g in e["gpus"]}
    assert {"a100-sxm-80gb", "h100-sxm", "b200"} <= names
    for name in sorted(names):
        assert cap_violations(load_gpu(name)) == [], name
    gpu = load_gpu("h100-sxm")
    eff = gpu.efficiency.model_copy(update={"fp8_gemm_peak_fraction": 0.8, "gemm_half_dim": 128})
    hot = cap_violations(gpu.model_copy(update={"efficiency": eff}))
    assert hot and all(v.predicted_tflops > 1.03 * v.measured_tflops for v in hot)


def test_fp8_training_keeps_the_lm_head_in_bf16():
    """Megatron's output layer is not a Transformer Engine module: under FP8 the head costs
    what it costs in BF16, and more than an FP8 GEMM of the same shape would."""
    model = tiny_model(vocab_size=256000, hidden_size=4096, num_attention_heads=32,
                       num_kv_heads=8, ffn_hidden_size=16384)
    gpu = load_gpu("h100")
    net = Net(tuple(small_cluster(8).topology), (1,), (1,))
    shape = LayerShape(tp=1, cp=1, mbs=1, seq=4096)
    fp8 = head_cost(model, gpu, net, shape, LayerStrategy(dtype="fp8"))
    bf16 = head_cost(model, gpu, net, shape, LayerStrategy(dtype="bf16"))
    assert (fp8.fwd_s, fp8.bwd_s) == (bf16.fwd_s, bf16.bwd_s)
    head_fp8 = gemm_time_s(gpu, "fp8", 4096, 256000, 4096)
    head_bf16 = gemm_time_s(gpu, "bf16", 4096, 256000, 4096)
    assert head_bf16 > 1.5 * head_fp8
    assert fp8.fwd_s > head_bf16


def _fp8_cast_share(hidden: int) -> float:
    """Share of a layer's FP8 forward time that casting adds, measured as the model's fp8 -
    bf16 difference on an H100 whose fp8 GEMMs run at the bf16 rate (so the casts are the
    whole difference), checked against the hand count of the cast traffic."""
    model = tiny_model(hidden_size=hidden, num_attention_heads=hidden // 128,
                       num_kv_heads=hidden // 128, ffn_hidden_size=4 * hidden, ffn_type="gelu")
    gpu = load_gpu("h100").model_copy(update={"kernel_table": None})  # the fitted curves
    same = gpu.model_copy(update={
        "peak_tflops": {**gpu.peak_tflops, "fp8": gpu.peak_tflops["bf16"]},
        "efficiency": gpu.efficiency.model_copy(update={"fp8_gemm_peak_fraction": None})})
    net = Net(tuple(small_cluster(8).topology), (1,), (1,))
    shape = LayerShape(tp=1, cp=1, mbs=1, seq=4096)
    fp8 = layer_cost(model, same, net, shape, LayerStrategy(dtype="fp8")).fwd_s
    bf16 = layer_cost(model, same, net, shape, LayerStrategy(dtype="bf16")).fwd_s
    # Transformer Engine cast_transpose: read the bf16 input (2 B), write it as fp8 row-wise
    # and transposed (1 + 1 B), for the inputs of QKV, proj, FC1 and FC2
    tokens_in = 4096 * (hidden + hidden + hidden + 4 * hidden)
    hbm_Bps = 3.35e12 * gpu.efficiency.hbm_fraction  # H100 SXM: 3.35 TB/s
    assert fp8 - bf16 == pytest.approx(4 * tokens_in / hbm_Bps, rel=0.01)
    return (fp8 - bf16) / layer_cost(model, gpu, net, shape, LayerStrategy(dtype="fp8")).fwd_s


def test_fp8_casts_cost_bandwidth_and_weigh_more_on_small_models():
    small, large = _fp8_cast_share(2048), _fp8_cast_share(16384)
    assert small > 2 * large > 0.005


def test_interleaved_pipeline_sends_overlap_only_with_interleaving():
    assert split_p2p(1.0, 1, True) == (1.0, 0.0)  # 1F1B waits for its sends
    assert split_p2p(1.0, 4, True) == (0.0, 1.0)  # interleaved: behind the other chunks
    assert split_p2p(1.0, 4, False) == (1.0, 0.0)  # --no-overlap-p2p-communication
    model = tiny_model(num_layers=16)
    c = small_cluster(16)
    base = dict(pp=4, dp=4, global_batch_size=64, seq_len=2048, virtual_stages=2,
                placement={"order": ["tp", "cp", "ep", "pp", "dp"]})
    on = evaluate(model, c, Plan(**base)).time_breakdown_s["pp_comm"]
    off = evaluate(model, c, Plan(**base, overlap_p2p_comm=False)).time_breakdown_s["pp_comm"]
    assert 0 < on < off


def test_dp_overlap_window_spans_the_interleaved_cooldown():
    # Megatron-Core's interleaved schedule: 2 (pp - 1) + (v - 1) pp chunk steps on rank 0
    assert dp_window_microbatches(4, 12, 8) == pytest.approx((6 + 44) / 12)
    assert dp_window_microbatches(4, 12, 2) == 2  # at most the microbatches there are
    assert dp_window_microbatches(8, 1, 64) == 1  # 1F1B: the last backward only


def test_tp_overlap_stays_inside_the_nvlink_domain():
    """Userbuffer overlap needs NVLink peers: a TP group split over InfiniBand pays its
    forward exchanges in full, and `auto` never makes a layer slower."""
    model = tiny_model(hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
                       ffn_hidden_size=14336)
    gpu = load_gpu("h100")
    levels = tuple(small_cluster(16).topology)
    shape = LayerShape(tp=8, cp=1, mbs=1, seq=4096)
    costs = {}
    for spans in ((8, 1), (4, 2)):
        for mode in (False, True, "auto"):
            strat = LayerStrategy(sequence_parallel=True, tp_comm="rs_ag", overlap_tp_comm=mode)
            costs[spans, mode] = layer_cost(model, gpu, Net(levels, spans, (1, 1)), shape, strat)
    inside, split = (8, 1), (4, 2)
    assert costs[inside, True].tp_comm_s < costs[inside, False].tp_comm_s
    assert costs[inside, "auto"].tp_comm_s == min(costs[inside, True].tp_comm_s,
                                                  costs[inside, False].tp_comm_s)
    assert costs[split, True].tp_comm_s == costs[split, False].tp_comm_s  # not possible
    assert costs[split, False].tp_comm_s > costs[inside, False].tp_comm_s


def test_hfu_excludes_the_causal_half_flash_skips_and_mfu_states_its_convention():
    model = load_model("llama3-8b")
    c = small_cluster(8)
    plan = Plan(cp=8, global_batch_size=8, seq_len=65536, recompute="none", zero_stage=1)
    est = evaluate(model, c, plan)
    assert est.hfu < est.mfu  # masked blocks are never executed
    masked = masked_attention_flops_per_sequence(model, 65536) * 8
    assert est.model_flops - est.hardware_flops == pytest.approx(masked)
    std = evaluate(model, c, plan.model_copy(update={"attention": "standard"}))
    assert std.hardware_flops == pytest.approx(std.model_flops)  # unfused: the full square
    assert "causal" in est.to_json()["flops_convention"]


def test_memory_headroom_reserve_plus_fragmentation():
    c = small_cluster(8)
    expected = c.memory_reserve_gib * 2**30 + C.ALLOCATOR_FRAGMENTATION * c.gpu.hbm_bytes
    assert headroom_bytes(c) == pytest.approx(expected)
    est = evaluate(tiny_model(), c, Plan(dp=8, global_batch_size=64, seq_len=2048))
    assert est.memory_breakdown_bytes["reserve"] == pytest.approx(expected)


def test_a_pinned_interleaving_widens_the_space():
    """`--fix virtual_stages=12` beyond `--max-virtual-stages 8` is searched, not refused
    with a divisibility error."""
    from planner.orchestration import solve

    model = tiny_model(num_layers=48)
    res = solve(model, small_cluster(16), fixed={"pp": 2, "virtual_stages": 12, "tp": 1},
                time_limit_s=20)
    assert res.best.plan.virtual_stages == 12 and res.best.estimate.feasible


def test_calibration_notes_name_what_the_plan_extrapolates():
    from planner.specs.loaders import load_cluster
    from planner.validation.coverage import calibration_notes

    a100 = load_cluster("dgx-a100-superpod", gpus=1024)
    plan = Plan(tp=4, pp=8, dp=32, global_batch_size=1536, seq_len=2048,
                sequence_parallel=True, attention="flash")
    (note,) = calibration_notes(a100, plan)
    assert "FlashAttention" in note and "TP communication overlap" in note and "1,024" in note
    inside = plan.model_copy(update={"attention": "standard", "overlap_tp_comm": False,
                                     "dp": 8, "tp": 8, "pp": 8})
    assert calibration_notes(a100.resized(512), inside) == []
    h100 = load_cluster("dgx-h100-superpod", gpus=64)
    (note,) = calibration_notes(h100, Plan(dp=64, global_batch_size=64, seq_len=4096))
    assert "dtype bf16" in note and "ZeRO" not in note
    fsdp = Plan(dp=64, global_batch_size=64, seq_len=4096, dtype="fp8", zero_stage=3)
    (note,) = calibration_notes(h100, fsdp)
    assert "ZeRO-3" in note and "dtype" not in note
    assert calibration_notes(h100, fsdp.model_copy(update={"zero_stage": 1})) == []


def test_cli_memory_headroom_and_calibration_notes(capsys):
    import json

    from test_cli import run as run_cli

    def run(*args):
        return run_cli(capsys, *args)

    base = ["evaluate", "-m", "llama3-8b", "-c", "dgx-h100-superpod", "--gpus", "8",
            "--global-batch", "8", "--json"]
    code, out, _ = run(*base)
    default = json.loads(out)
    code, out, _ = run(*base, "--memory-headroom", "10")
    wide = json.loads(out)
    frag = 0.03 * 80
    assert default["memory_breakdown_gib"]["reserve"] == pytest.approx(2 + frag)
    assert wide["memory_breakdown_gib"]["reserve"] == pytest.approx(10 + frag)
    assert "dtype bf16" in default["calibration_notes"][0]  # H100 is fitted in FP8 only
    code, _, err = run(*base, "--memory-headroom", "nan")
    assert code == 2 and "--memory-headroom" in err


def test_half_recomputation_is_every_second_layer_in_full():
    """``recompute="half"`` (Megatron block recomputation of half a chunk, torchtitan's
    every-second-layer checkpointing): per layer, the mean of none and full in stored
    activations and half of full's recomputed forward; the stage lies strictly between."""
    model, c = tiny_model(num_layers=8), small_cluster(8)
    shape = LayerShape(tp=2, cp=1, mbs=2, seq=2048)
    net = Net(tuple(c.topology), (2,), (1,))
    cost = {m: layer_cost(model, c.gpu, net, shape, LayerStrategy(recompute=m))
            for m in ("none", "full", "half")}
    assert cost["half"].act_bytes == pytest.approx(
        (cost["none"].act_bytes + cost["full"].act_bytes) / 2)
    assert cost["half"].recompute_s == pytest.approx(cost["full"].recompute_s / 2)
    assert cost["half"].recompute_flops == pytest.approx(cost["full"].recompute_flops / 2)
    est = {m: evaluate(model, c, Plan(tp=2, dp=4, global_batch_size=16, seq_len=2048,
                                      microbatch_size=2, recompute=m))
           for m in ("none", "full", "half")}
    assert est["none"].iteration_time_s < est["half"].iteration_time_s < est["full"].iteration_time_s
    mem = {m: e.memory_breakdown_bytes["activations"] for m, e in est.items()}
    assert mem["full"] < mem["half"] < mem["none"]


def test_the_solver_recomputes_half_the_layers_when_none_does_not_fit():
    """A microbatch whose activations do not fit without recomputation but do with half:
    the optimum recomputes half the layers instead of all of them (NeMo's Llama 3 70B
    Megatron-FSDP run on 64 GB200 at 8K tokens per microbatch)."""
    from planner.orchestration import solve

    model = load_model("llama3-70b")
    from planner.specs.loaders import load_cluster

    fixed = dict(tp=1, pp=1, cp=1, dp=64, microbatch_size=1, zero_stage=3, fp8_params=True,
                 grad_reduce_dtype="bf16", global_batch_size=128, seq_len=8192, dtype="fp8")
    res = solve(model, load_cluster("gb200-nvl72", 64), fixed=fixed, time_limit_s=30)
    assert res.best.plan.recompute == "half"
    none = evaluate(model, load_cluster("gb200-nvl72", 64),
                    res.best.plan.model_copy(update={"recompute": "none"}))
    assert not none.feasible


def test_eager_elementwise_counts_each_operator_pass():
    """PyTorch eager (``fused_elementwise: false``) moves, per element, 36 B for an RMSNorm
    (fp32 cast, square, mean, scale, cast back, weight), 10 B for SwiGLU and 20 B for a
    complex RoPE, against 4, 6 and 4 fused; LayerNorm and GELU are single native kernels,
    so a LayerNorm/GELU model without RoPE costs the same either way."""
    from planner.costmodel.layer import _elementwise_bytes

    llama = tiny_model(norm_type="rmsnorm", position_embedding="rope")
    shape = LayerShape(tp=1, cp=1, mbs=1, seq=2048)
    fused = _elementwise_bytes(llama, shape, LayerStrategy())
    eager = _elementwise_bytes(llama, shape, LayerStrategy(fused_elementwise=False))
    t, h, f = 2048, 1024, 4096
    qkv = 1024 + 512  # 16 query heads and 8 KV heads of 64
    assert eager - fused == pytest.approx(t * (2 * h * (36 - 4) + f * (10 - 6) + qkv * (20 - 4)))
    mpt = tiny_model(norm_type="layernorm", ffn_type="gelu", position_embedding="learned")
    assert _elementwise_bytes(mpt, shape, LayerStrategy(fused_elementwise=False)) == \
        pytest.approx(_elementwise_bytes(mpt, shape, LayerStrategy()))


def test_eager_plans_are_slower_through_the_solver_and_export_as_such():
    """The setting reaches the search (the formulation's bound is the evaluator's time),
    torchtitan runs an eager plan without torch.compile and a fused one with it, and
    Megatron-LM, whose kernels are fused, refuses an eager plan naming the field."""
    from planner.errors import InputError
    from planner.export import Target, megatron, torchtitan
    from planner.orchestration import solve

    model, c = tiny_model(norm_type="rmsnorm", position_embedding="rope"), small_cluster(8)
    fixed = dict(dp=8, zero_stage=3, global_batch_size=64, seq_len=2048)
    fused = solve(model, c, fixed=fixed, time_limit_s=20).best
    eager = solve(model, c, fixed=dict(fixed, fused_elementwise=False), time_limit_s=20).best
    assert eager.plan.fused_elementwise is False
    assert eager.estimate.iteration_time_s > fused.estimate.iteration_time_s
    assert eager.estimate.iteration_time_s == pytest.approx(
        evaluate(model, c, eager.plan).iteration_time_s)
    t = Target(model, c)
    assert "compile" in torchtitan.config(fused.plan, t)
    assert "compile" not in torchtitan.config(eager.plan, t)
    with pytest.raises(InputError, match="fused_elementwise=false"):
        megatron.render(eager.plan.model_copy(update={"zero_stage": 1}), t)


def test_error_summary_of_the_held_out_benchmarks():
    from planner.validation.errors import summary

    assert summary([0.1, -0.2]) == "MAPE 15.0%, mean -5.0%, max -20.0%, 2 runs"
    assert summary([]) == "no runs"
