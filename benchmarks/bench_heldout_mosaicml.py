"""Held-out check on another framework: MosaicML's MPT runs (PyTorch FSDP, FlashAttention,
bf16) on A100 and H100. On A100 this is the corner the solver lands in (FlashAttention, no
TP, large GEMMs), which the A100 calibration set (Korthikanti et al. 2022: unfused
attention, tp 8) does not cover; on H100 it is BF16, which the FP8 recipes do not cover.
Nothing here is fitted.

Measurements: MosaicML llm-foundry, ``scripts/train/benchmarking/README.md``, tables "A100
80GB with 1600 Gbps node-node interconnect (RoCE)" and "H100 80GB BF16": MPT models (GELU
MLP 4x, LayerNorm without bias, tied embeddings, vocabulary 50,368) trained with PyTorch
FSDP FULL_SHARD (ZeRO-3), FlashAttention, bf16, on 8-64 GPUs; throughput in tokens/s/GPU.

    python benchmarks/bench_heldout_mosaicml.py
"""

from __future__ import annotations

from planner.costmodel.train.evaluator import evaluate
from planner.specs.loaders import load_cluster
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan
from planner.validation.errors import summary

#: cluster, name, hidden, layers, heads, sequence, GPUs, microbatch, global batch,
#: activation checkpointing, measured tokens/s/GPU, published MFU %.
A100, H100 = "dgx-a100-superpod", "dgx-h100-superpod"
ROWS = [
    (A100, "mpt-1b", 2048, 24, 16, 2048, 8, 14, 448, False, 20513, 59.86),
    (A100, "mpt-3b", 2560, 32, 20, 2048, 8, 10, 160, False, 10811, 62.11),
    (A100, "mpt-7b", 4096, 32, 32, 2048, 8, 6, 96, False, 4641, 64.23),
    (A100, "mpt-13b", 5120, 40, 40, 2048, 8, 2, 48, False, 2262, 59.57),
    (A100, "mpt-7b 8K", 4096, 32, 32, 8192, 8, 8, 128, True, 3206, 54.47),
    (A100, "mpt-13b 4K", 5120, 40, 40, 4096, 8, 10, 240, True, 2060, 57.62),
    (A100, "mpt-30b", 7168, 48, 56, 2048, 8, 3, 504, True, 916, 55.30),
    (A100, "mpt-70b", 8192, 80, 64, 2048, 64, 8, 2048, True, 410, 53.33),
    (H100, "mpt-7b", 4096, 32, 32, 2048, 8, 6, 48, False, 10643, 46.44),
    (H100, "mpt-13b", 5120, 40, 40, 2048, 8, 2, 16, False, 4792, 39.79),
    (H100, "mpt-13b", 5120, 40, 40, 2048, 64, 2, 128, False, 4800, 39.86),
    (H100, "mpt-7b 4K", 4096, 32, 32, 4096, 8, 16, 256, True, 8611, 40.42),
    (H100, "mpt-13b 4K", 5120, 40, 40, 4096, 8, 10, 240, True, 4717, 41.60),
    (H100, "mpt-30b", 7168, 48, 56, 2048, 8, 3, 504, True, 2002, 38.11),
    (H100, "mpt-30b", 7168, 48, 56, 2048, 32, 14, 1344, True, 2308, 43.92),
    (H100, "mpt-70b", 8192, 80, 64, 2048, 64, 8, 2048, True, 1039, 42.57),
]


def main() -> None:
    print(f"{'GPU':4s} {'run':11s} {'GPUs':>4s} {'recompute':>9s} {'published':>9s} "
          f"{'predicted':>9s} {'error':>7s}  MFU pub/pred")
    errors: dict[tuple[str, bool], list[float]] = {}
    for cluster, name, d, layers, heads, seq, gpus, mb, gbs, ac, measured, mfu in ROWS:
        model = ModelSpec(name=name, num_layers=layers, hidden_size=d, num_attention_heads=heads,
                          num_kv_heads=heads, ffn_hidden_size=4 * d, ffn_type="gelu",
                          vocab_size=50368, seq_len=seq, global_batch_size=gbs,
                          tied_embeddings=True, norm_type="layernorm", bias=False,
                          position_embedding="none")  # MPT: ALiBi, no RoPE
        plan = Plan(dp=gpus, microbatch_size=mb, global_batch_size=gbs, seq_len=seq,
                    zero_stage=3, recompute="full" if ac else "none", attention="flash")
        est = evaluate(model, load_cluster(cluster, gpus), plan)
        predicted = gbs * seq / est.iteration_time_s / gpus
        err = predicted / measured - 1
        gen = "A100" if cluster == A100 else "H100"
        errors.setdefault((gen, ac), []).append(err)
        print(f"{gen:4s} {name:11s} {gpus:4d} {'full' if ac else 'none':>9s} {measured:9,d} "
              f"{predicted:9,.0f} {err:+7.1%}  {mfu:.1f}/{100 * est.mfu:.1f}")
    for (gen, ac), errs in errors.items():
        print(f"{gen} {'full recompute' if ac else 'no recompute'}: {summary(errs)}")
    print(f"all: {summary([e for errs in errors.values() for e in errs])}")


if __name__ == "__main__":
    main()
