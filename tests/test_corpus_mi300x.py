"""The MI300X rows of the validation corpus: their tokens/s are the published TFLOP/s divided
by the FLOP count each benchmark script logs (hand-coded here from the scripts, not from the
planner), so a transcription or conversion slip fails."""

import pytest

from planner.validation.corpus import runs_from, sources

#: AMD rocm/pytorch-training v25.2 README, 'MI300X platform performance results' (TFLOP/s/GPU)
TABLE = {"amd-pt2502-mi300x-llama31-8b-bf16-8k": 542.94,
         "amd-pt2502-mi300x-llama31-8b-fp8-8k": 737.40,
         "amd-pt2502-mi300x-llama31-8b-bf16-4k": 523.79,
         "amd-pt2502-mi300x-llama31-8b-fp8-4k": 735.44,
         "amd-pt2502-mi300x-llama31-70b-bf16-8k-torchtitan": 426.79}


def amd_benchmark_flops_per_token(L, E, H, J, K, V, T):
    """AMD-AIG-AIMA/pytorch-training-benchmark llama.py LLaMAConfig.estimate_flops_per_token:
    3 x (weight GEMMs per layer x L + LM head) + 3 x non-causal attention, per token."""
    d = E // H
    weights = 2 * K * E * 2 + 2 * K * E + 2 * E * (H + 2 * J) * d + 2 * E * H * d
    return 3 * (weights * L + 2 * E * V) + 3 * 4 * T * H * d * L


def torchtitan_flops_per_token(L, E, H, KV, F, V, T):
    """torchtitan get_num_flop_per_token: 6 x (parameters less the token embedding)
    + 12 x l x h x q x t."""
    d = E // H
    per_layer = E * H * d + 2 * E * KV * d + H * d * E + 3 * E * F + 2 * E  # attn, MLP, 2 norms
    params = L * per_layer + E + V * E  # final norm and the untied output projection
    return 6 * params + 12 * L * H * d * T


def test_llama31_8b_flop_count_on_hand_numbers():
    # Llama 3.1 8B at 8192: 3 x (436,207,616 x 32 + 1,050,673,152) + 12,884,901,888
    assert amd_benchmark_flops_per_token(32, 4096, 32, 8, 14336, 128256, 8192) == 57_912_852_480


def test_mi300x_rows_are_the_published_tflops_over_the_scripts_flop_count():
    runs = {r.name: r for f in ("corpus/amd-pytorch-training-mi300x.yaml",
                                "corpus/amd-pytorch-training-mi300x-torchtitan.yaml")
            for r in runs_from(f)}
    assert set(runs) == set(TABLE)
    for name, tflops in TABLE.items():
        r = runs[name]
        assert r.generation == "MI300X" and r.gpus == 8
        if "70b" in name:
            fpt = torchtitan_flops_per_token(80, 8192, 64, 8, 28672, 128256, r.seq_len)
        else:
            fpt = amd_benchmark_flops_per_token(32, 4096, 32, 8, 14336, 128256, r.seq_len)
        assert r.measured == pytest.approx(tflops * 1e12 / fpt, rel=1e-4)
    assert "amd-pytorch-training-v25.2" in sources()


#: MLPerf Training v5.1 H200 runs: (global batch, median logged train_step_time in s, GPUs),
#: read off the runs' MLLOG lines (see each corpus file's note)
MLPERF_H200 = {"mlperf50-nebius-h200-llama31-405b-fp8-512": (1152, 50.011, 512),
               "mlperf50-nebius-h200-llama31-405b-fp8-1024": (1152, 25.355, 1024),
               "mlperf51-hpe-h200-llama31-8b-fp8-64": (32, 0.3532, 64)}


def test_mlperf_h200_rows_are_the_logged_step_times():
    runs = {r.name: r for f in ("corpus/mlperf50-nebius-h200.yaml", "corpus/mlperf51-hpe-h200.yaml")
            for r in runs_from(f)}
    assert set(runs) == set(MLPERF_H200)
    for name, (gbs, step_s, gpus) in MLPERF_H200.items():
        r = runs[name]
        assert r.generation == "H200" and r.gpus == gpus and r.plan.global_batch_size == gbs
        assert r.measured == pytest.approx(gbs * 8192 / step_s / gpus, rel=2e-4)
