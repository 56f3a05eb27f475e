"""How far the cost model's kernel speeds are from the measured kernel tables.

For each GPU with a table in ``hardware_catalog/kernels/``, as predicted / measured (a ratio
above 1 is a kernel the model runs faster than the silicon did), two columns:

- ``table``: the cost model reading the table (``gemm_time_s``, ``flash_attention_time_s``
  with the backend's name), at the kernels' own speed (``kernel_fraction`` 1, no launch
  overhead): interpolation error only;
- ``fitted``: the fallback curves the GPU file states (``gemm_peak_fraction``,
  ``attention_*_fraction``), which GPUs without a table still use.

GEMMs over the measured shapes with every dimension at least 1,024; attention over every
measured case of each backend (the A100's published table has forward figures only).

    python benchmarks/bench_kernel_gap.py
"""

from __future__ import annotations

import statistics

from planner.costmodel.compute import flash_attention_time_s, gemm_time_s
from planner.specs.kernels import kernel_table
from planner.specs.loaders import load_gpu

GPUS = ("h100-sxm", "h200", "a100-sxm-80gb")
BACKENDS = {"FLASH_ATTENTION": "flash2", "CUDNN_ATTENTION": "cudnn"}


def _summary(ratios: list[float]) -> str:
    return f"median {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"


def _gpus(name: str):
    gpu = load_gpu(name)
    own = gpu.model_copy(update={"efficiency": gpu.efficiency.model_copy(
        update={"kernel_fraction": 1.0, "kernel_overhead_us": 0.0})})
    fitted = own.model_copy(update={"kernel_table": None})
    return {"table": own, "fitted": fitted}


def main() -> None:
    for name in GPUS:
        table = kernel_table(name)
        if table is None:
            continue
        print(f"{name}: {table.source}")
        gpus = _gpus(name)
        for dtype in ("bf16", "fp16", "fp8"):
            rows = [r for r in table.gemm if r.dtype == dtype and min(r.m, r.n, r.k) >= 1024]
            if not rows:
                continue
            cols = []
            for label, gpu in gpus.items():
                ratios = [2 * r.m * r.n * r.k / gemm_time_s(gpu, dtype, r.m, r.n, r.k) / 1e12
                          / r.tflops for r in rows]
                cols.append(f"{label} {_summary(ratios)}")
            print(f"  gemm {dtype} (n={len(rows)}): " + "; ".join(cols))
        for backend, short in BACKENDS.items():
            rows = [r for r in table.attention if r.backend == backend and r.causal]
            for i, what in enumerate(("fwd", "bwd")):
                if i:  # a publication may give the forward only
                    rows = [r for r in rows if r.bwd_us is not None]
                if not rows:
                    continue
                cols = []
                for label, gpu in gpus.items():
                    g = gpu.model_copy(update={"efficiency": gpu.efficiency.model_copy(
                        update={"attention_backend": short})})
                    ratios = []
                    for r in rows:
                        flops = 2 * 2 * r.batch * r.heads * r.seq ** 2 * r.head_dim / 2
                        t = flash_attention_time_s(g, "bf16", flops, seq=r.seq,
                                                   head_dim=r.head_dim,
                                                   grouped=r.kv_heads < r.heads)[i]
                        ratios.append((r.fwd_us if i == 0 else r.bwd_us) * 1e-6 / t)
                    cols.append(f"{label} {_summary(ratios)}")
                print(f"  attention {backend} {what} (n={len(rows)}, causal): " + "; ".join(cols))


if __name__ == "__main__":
    main()
