"""How far the cost model's kernel speeds are from the measured kernel tables.

For each GPU with a table in ``hardware_catalog/kernels/``: the cost model's GEMM throughput
(``planner.costmodel.compute.gemm_time_s``) over the measured shapes with every dimension at
least 1,024, and its fused-attention throughput (``flash_attention_time_s``) against each
measured backend, as predicted / measured. A ratio above 1 is a kernel the model runs faster
than the silicon did.

    python benchmarks/bench_kernel_gap.py
"""

from __future__ import annotations

import statistics

from planner.costmodel.compute import flash_attention_time_s, gemm_time_s
from planner.specs.kernels import kernel_table
from planner.specs.loaders import load_gpu

GPUS = ("h100-sxm", "h200")


def _summary(ratios: list[float]) -> str:
    return (f"n={len(ratios):3d}  median {statistics.median(ratios):.2f}  "
            f"range {min(ratios):.2f}-{max(ratios):.2f}")


def main() -> None:
    for name in GPUS:
        table, gpu = kernel_table(name), load_gpu(name)
        if table is None:
            continue
        print(f"{name}: {table.source}")
        for dtype in ("bf16", "fp8"):
            ratios = []
            for r in table.gemm:
                if r.dtype != dtype or min(r.m, r.n, r.k) < 1024:
                    continue
                pred_tflops = 2 * r.m * r.n * r.k / gemm_time_s(gpu, dtype, r.m, r.n, r.k) / 1e12
                ratios.append(pred_tflops / r.tflops)
            print(f"  gemm {dtype}: predicted/measured {_summary(ratios)}")
        for backend in ("FLASH_ATTENTION", "CUDNN_ATTENTION"):
            fwd, bwd = [], []
            for r in table.attention:
                if r.backend != backend:
                    continue
                flops = 2 * 2 * r.batch * r.heads * r.seq ** 2 * r.head_dim / (2 if r.causal else 1)
                t_f, t_b = flash_attention_time_s(gpu, "bf16", flops)
                fwd.append(r.fwd_us * 1e-6 / t_f)
                bwd.append(r.bwd_us * 1e-6 / t_b)
            print(f"  attention {backend} fwd: predicted/measured {_summary(fwd)}")
            print(f"  attention {backend} bwd: predicted/measured {_summary(bwd)}")


if __name__ == "__main__":
    main()
