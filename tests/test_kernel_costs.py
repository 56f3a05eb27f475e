"""The cost model's kernel speeds come from the measured kernel tables: GEMM, fused attention
by the framework's backend, and copies (planner.costmodel.compute); the framework-level
``kernel_fraction`` is the only factor between a microbenchmark and a training step."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from planner.costmodel.attention import attention_core
from planner.costmodel.compute import elementwise_time_s, flash_attention_time_s, gemm_time_s
from planner.costmodel.runtime import apply_profile
from planner.costmodel.shapes import LayerShape, LayerStrategy
from planner.specs.framework import load_framework
from planner.specs.loaders import load_cluster, load_gpu, load_model

SHARED = Path(__file__).resolve().parents[2] / "shared" / "calibration" / \
    "hopper_microbench_2026-11.yaml"
BACKENDS = {"FLASH_ATTENTION": "flash2", "CUDNN_ATTENTION": "cudnn"}


def kernel_speed(gpu_name: str, **eff):
    """The GPU as the cost model sees it, at the kernels' own speed (kernel_fraction 1)."""
    gpu = load_gpu(gpu_name)
    return gpu.model_copy(update={"efficiency": gpu.efficiency.model_copy(
        update={"kernel_fraction": 1.0, "kernel_overhead_us": 0.0, **eff})})


@pytest.mark.skipif(not SHARED.exists(), reason="the shared calibration folder is absent")
@pytest.mark.parametrize("gpu_name", ["h100-sxm", "h200"])
def test_gemm_attention_and_copy_speeds_are_the_microbenchmarks(gpu_name):
    """Every GEMM shape, attention backend and copy in the shared Hopper file, timed by the
    cost model's own kernel functions: within 10 % (they are read, not fitted)."""
    ref = yaml.safe_load(SHARED.read_text())
    gpu = kernel_speed(gpu_name)
    for r in ref["gemm"][gpu_name]:
        flops = 2 * r["m"] * r["n"] * r["k"]
        t = gemm_time_s(gpu, r["dtype"], r["m"], r["n"], r["k"],
                        elem_bytes=1 if r["dtype"] == "fp8" else 2)
        assert flops / t / 1e12 == pytest.approx(r["tflops"], rel=0.10), r
    for r in ref["attention"].get(gpu_name, []):
        g = kernel_speed(gpu_name, attention_backend=BACKENDS[r["backend"]])
        flops = 4 * r["batch"] * r["heads"] * r["seq"] ** 2 * r["head_dim"] / 2
        t_f, t_b = flash_attention_time_s(g, "bf16", flops, seq=r["seq"], head_dim=r["head_dim"])
        assert flops / t_f / 1e12 == pytest.approx(r["fwd_tflops"], rel=0.10), r
        assert 2.5 * flops / t_b / 1e12 == pytest.approx(r["bwd_tflops"], rel=0.10), r
    copy = ref["copy"][gpu_name]
    t = elementwise_time_s(gpu, copy["bytes"])
    assert copy["bytes"] / t / 1e9 == pytest.approx(copy["read_plus_write_GBps"], rel=0.10)


@pytest.mark.parametrize("gpu_name", ["h100-sxm", "h200", "a100-sxm-80gb"])
def test_memory_bound_time_runs_at_the_tables_largest_measured_copy(gpu_name):
    """Norms, activations and casts move their bytes at the GPU's kernel table's sustained
    copy rate (its largest measured copy, read plus write), not at a fraction of the
    datasheet's HBM bandwidth."""
    table = yaml.safe_load((Path(__file__).resolve().parents[1] / "hardware_catalog" / "kernels"
                            / f"{gpu_name}.yaml").read_text())
    copies = [r for r in table["memory"] if r["op"] == "copy"]
    size = max(r["bytes"] for r in copies)
    # at one size the row the shared reference file confirms wins (kernels.copy_GBps)
    big = max((r for r in copies if r["bytes"] == size), key=lambda r: "ref" in r)
    gpu = kernel_speed(gpu_name)
    nbytes = 10 * big["bytes"]
    assert nbytes / elementwise_time_s(gpu, nbytes) / 1e9 == pytest.approx(big["GBps"], rel=1e-6)
    assert big["GBps"] * 1e9 != pytest.approx(gpu.hbm_Bps * gpu.efficiency.hbm_fraction, rel=0.01)


def test_without_a_table_the_fitted_curves_stand():
    """The switch: the same GPU without its table falls back to the fitted fractions, which
    differ from the measurement (so the test above fails if the table is not read)."""
    gpu = kernel_speed("h100-sxm")
    bare = gpu.model_copy(update={"kernel_table": None})
    m = n = k = 8192
    measured = 2 * m * n * k / gemm_time_s(gpu, "bf16", m, n, k) / 1e12
    fitted = 2 * m * n * k / gemm_time_s(bare, "bf16", m, n, k) / 1e12
    assert abs(measured / fitted - 1) > 0.15


def test_kernel_fraction_scales_kernel_time_and_nothing_else():
    gpu = kernel_speed("h100-sxm")
    slow = gpu.model_copy(update={"efficiency": gpu.efficiency.model_copy(
        update={"kernel_fraction": 0.5})})
    assert gemm_time_s(slow, "bf16", 8192, 8192, 8192) == pytest.approx(
        2 * gemm_time_s(gpu, "bf16", 8192, 8192, 8192))
    assert flash_attention_time_s(slow, "bf16", 1e12, seq=8192)[0] == pytest.approx(
        2 * flash_attention_time_s(gpu, "bf16", 1e12, seq=8192)[0])
    assert elementwise_time_s(slow, 1e9) == elementwise_time_s(gpu, 1e9)


def test_the_framework_picks_the_attention_kernel():
    """torchtitan runs SDPA's FlashAttention-2, Megatron-Core cuDNN's fused attention: the
    same layer's attention core is costed with each one's measured speed (cuDNN ~1.8x on
    H100 at 8K), and Megatron-Core, whose kernels are the GPU file's, changes only its MoE
    layers' host time (the GPU file's default: grouped experts launched ahead) and, for a
    ZeRO-3 plan, Megatron-FSDP's overlapped sharded traffic."""
    model = load_model("llama3-8b")
    base = load_cluster("dgx-h100-superpod")
    titan = apply_profile(base, load_framework("torchtitan"))
    mcore = apply_profile(base, load_framework("megatron-core"))
    assert mcore.gpu.efficiency.moe_expert_host_us > 0 == base.gpu.efficiency.moe_expert_host_us
    assert mcore.gpu.efficiency.sharded_overlap and not base.gpu.efficiency.sharded_overlap
    assert mcore.gpu.efficiency.model_copy(update={"moe_expert_host_us": 0.0,
                                                   "sharded_overlap": False}) == \
        base.gpu.efficiency
    assert titan.gpu.efficiency.attention_backend == "flash2"
    shape, strat = LayerShape(tp=1, cp=1, mbs=1, seq=8192), LayerStrategy()
    fwd_cudnn, bwd_cudnn, _ = attention_core(model, base.gpu, shape, strat)
    fwd_flash, bwd_flash, _ = attention_core(model, titan.gpu, shape, strat)
    # the kernels' own ratio: each profile's fitted kernel_fraction divided out
    kf = titan.gpu.efficiency.kernel_fraction / base.gpu.efficiency.kernel_fraction
    assert 1.5 < fwd_flash * kf / fwd_cudnn < 2.2
    assert 1.3 < bwd_flash * kf / bwd_cudnn < 2.0


def test_context_parallel_ranks_run_attention_at_their_block_length():
    """A CP rank's ring steps are blocks of seq/cp tokens: at 128K with cp=16 the kernel
    runs at the 8K speed, not the 128K one (the two differ in the H100 table)."""
    model = load_model("llama3-8b")
    gpu = load_cluster("dgx-h100-superpod").gpu
    strat = LayerStrategy()
    t16, _, f16 = attention_core(model, gpu, LayerShape(tp=1, cp=16, mbs=1, seq=131072), strat)
    t1, _, f1 = attention_core(model, gpu, LayerShape(tp=1, cp=1, mbs=1, seq=8192), strat)
    # same kernel length (8K blocks), 16x the FLOPs per rank of a lone 8K sequence
    assert f16 == pytest.approx(16 * f1)
    assert t16 == pytest.approx(16 * (t1 - 4e-6) + 4e-6, rel=1e-9)


def test_a_frameworks_own_fit_replaces_the_gpus_on_that_gpu_only():
    """A profile fitted on its own runs on a GPU costs that GPU with its parameters; other
    GPUs keep their files' values (Megatron-Core's fit)."""
    from planner.specs.framework import FrameworkFit

    titan = load_framework("torchtitan")
    fitted = titan.model_copy(update={"fit": {"h100-sxm": FrameworkFit(
        kernel_fraction=0.5, overlap_slowdown=0.4, source="test")}})
    h100 = apply_profile(load_cluster("dgx-h100-superpod"), fitted)
    assert (h100.gpu.efficiency.kernel_fraction, h100.gpu.efficiency.overlap_slowdown) == \
        (0.5, 0.4)
    b200 = load_cluster("dgx-b200-superpod")
    assert apply_profile(b200, fitted).gpu.efficiency.kernel_fraction == \
        b200.gpu.efficiency.kernel_fraction
    base = load_cluster("dgx-h100-superpod")
    plan = dict(tp=1, pp=1, dp=8, cp=1, microbatch_size=1, global_batch_size=8,
                seq_len=4096, zero_stage=3, recompute="full")
    from planner.api import evaluate

    small = base.resized(8)
    slow = evaluate("llama3-8b", apply_profile(small, fitted), plan).iteration_time_s
    fast = evaluate("llama3-8b", apply_profile(small, titan), plan).iteration_time_s
    assert slow > 1.25 * fast  # compute at 0.8/0.5 of the speed; communication unchanged


def test_a_gpu_scaled_from_the_measured_one_runs_its_kernels_at_the_same_fraction():
    """What-if sweeps scale a GPU's peak and bandwidth: the measured kernels keep their
    fraction of peak, so twice the peak halves GEMM and attention time, and twice the HBM
    bandwidth halves memory-bound time."""
    gpu = load_gpu("h100-sxm")
    fast = gpu.model_copy(update={"peak_tflops": {k: 2 * v for k, v in gpu.peak_tflops.items()},
                                  "hbm_TBps": 2 * gpu.hbm_TBps})
    overhead = gpu.efficiency.kernel_overhead_us * 1e-6
    assert gemm_time_s(fast, "bf16", 8192, 8192, 8192) - overhead == pytest.approx(
        (gemm_time_s(gpu, "bf16", 8192, 8192, 8192) - overhead) / 2)
    assert flash_attention_time_s(fast, "bf16", 1e12, seq=8192)[0] - overhead == pytest.approx(
        (flash_attention_time_s(gpu, "bf16", 1e12, seq=8192)[0] - overhead) / 2)
    assert elementwise_time_s(fast, 1e9) == pytest.approx(elementwise_time_s(gpu, 1e9) / 2)


def test_a_serving_engine_runs_the_kernels_at_its_own_fraction():
    """Serving costs the GPU's measured kernels at the engine's kernel_fraction, not at the
    training framework's in the GPU file: a compute-bound prefill slows in proportion."""
    from planner.costmodel.serve.step import prefill
    from planner.specs.serve import ServeEngine, ServePlan

    model = load_model("llama3-8b")
    cluster = load_cluster("dgx-h100-superpod").resized(8)
    plan = ServePlan(tp=1, prefill_chunk=8192)
    full = prefill(model, cluster, plan, 8192, ServeEngine(kernel_fraction=1.0)).latency_s
    half = prefill(model, cluster, plan, 8192, ServeEngine(kernel_fraction=0.5)).latency_s
    assert 1.6 < half / full <= 2.0
    gpu_fraction = cluster.gpu.efficiency.kernel_fraction
    assert prefill(model, cluster, plan, 8192,
                   ServeEngine(kernel_fraction=gpu_fraction)).latency_s != pytest.approx(full)
