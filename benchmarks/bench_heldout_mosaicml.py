"""Held-out check on another framework: MosaicML's MPT runs (PyTorch FSDP, FlashAttention,
bf16) on A100 and H100. On A100 this is the corner the solver lands in (FlashAttention, no
TP, large GEMMs), which the A100 calibration set (Korthikanti et al. 2022: unfused
attention, tp 8) does not cover; on H100 it is BF16, which the FP8 recipes do not cover.
Nothing here is fitted.

Measurements (``hardware_catalog/calibration/corpus/mosaicml-llm-foundry.yaml``): MosaicML llm-foundry, ``scripts/train/benchmarking/README.md``, tables "A100
80GB with 1600 Gbps node-node interconnect (RoCE)" and "H100 80GB BF16": MPT models (GELU
MLP 4x, LayerNorm without bias, tied embeddings, vocabulary 50,368) trained with PyTorch
FSDP FULL_SHARD (ZeRO-3), FlashAttention, bf16, on 8-64 GPUs; throughput in tokens/s/GPU.

    python benchmarks/bench_heldout_mosaicml.py
"""

from __future__ import annotations

from planner.validation.corpus import corpus_runs
from planner.validation.errors import summary

#: the 80 GB tables (the 40 GB one, the same document, is another file of the corpus)
ORIGIN = "corpus/mosaicml-llm-foundry.yaml"


def main() -> None:
    print(f"{'GPU':4s} {'run':30s} {'GPUs':>4s} {'recompute':>9s} {'published':>9s} "
          f"{'predicted':>9s} {'error':>7s}  MFU predicted")
    errors: dict[tuple[str, bool], list[float]] = {}
    for run in (r for r in corpus_runs() if r.origin == ORIGIN):
        est = run.estimate()
        err = run.residual(est)
        assert err is not None, f"{run.name}: {est.reasons}"
        ac = run.plan.recompute == "full"
        errors.setdefault((run.generation, ac), []).append(err)
        print(f"{run.generation:4s} {run.name:30s} {run.gpus:4d} {run.plan.recompute:>9s} "
              f"{run.measured:9,.0f} {run.measured * (1 + err):9,.0f} {err:+7.1%}  "
              f"{100 * est.mfu:.1f}")
    for (gen, ac), errs in errors.items():
        print(f"{gen} {'full recompute' if ac else 'no recompute'}: {summary(errs)}")
    print(f"all: {summary([e for errs in errors.values() for e in errs])}")


if __name__ == "__main__":
    main()
