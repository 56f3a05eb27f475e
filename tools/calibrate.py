"""Fit each GPU generation's shared efficiency parameters on the shared calibration sets.

One fit per GPU and dtype, never per data point. Each generation is fitted on its set:

- A100 (fp16): Korthikanti et al. 2022 Table 5 (8 runs): ``gemm_peak_fraction`` and
  ``overlap_slowdown``;
- H100 and B200 (FP8): NVIDIA's NeMo 24.07/25.02 recipes (9 and 6 runs):
  ``fp8_gemm_peak_fraction``, ``gemm_half_dim`` (how large a GEMM must be to approach
  that fraction: the saturating curve), a common scale of the two attention-kernel
  fractions, and ``overlap_slowdown``.

Every other parameter keeps its literature value (the GPU file's ``sources``). Grid points
whose GEMM curve beats a measured cuBLASLt throughput (``planner.validation.microbench``,
``hardware_catalog/calibration/cublas_gemm.yaml``) are dropped: the fit may not buy accuracy
on the recipes with GEMMs faster than the silicon runs them. The remaining grid
point with the least mean absolute percentage error is printed beside the shipped values;
copy it into ``hardware_catalog/gpus/<gpu>.yaml`` by hand (the file cites this tool).

    python tools/calibrate.py              # every generation
    python tools/calibrate.py H100         # one
"""

from __future__ import annotations

import itertools
import statistics
import sys
from typing import Callable, Iterable

from planner.costmodel.evaluator import evaluate
from planner.specs.cluster import ClusterSpec
from planner.specs.gpu import GPUSpec
from planner.specs.loaders import load_cluster, load_gpu, load_model
from planner.validation import MODES, calibration_data, calibration_plan
from planner.validation.microbench import cap_violations
from planner.validation.nemo import (
    nemo_data,
    recipe_cluster,
    recipe_model,
    recipe_plan,
    tokens_per_s_per_gpu,
)

#: Prior: overlapped NCCL kernels slow concurrent compute by 10-50% (Rashidi et al., ISCA
#: 2021, ACE, Sec. 3); the fit may not leave that range.
SLOWDOWN = [0.1, 0.2, 0.3, 0.4, 0.5]


def with_efficiency(cluster: ClusterSpec, **eff: float) -> ClusterSpec:
    gpu = cluster.gpu.model_copy(update={"efficiency": cluster.gpu.efficiency.model_copy(update=eff)})
    return cluster.model_copy(update={"gpu": gpu})


def korthikanti_errors(**eff: float) -> list[float]:
    data = calibration_data()
    base = with_efficiency(load_cluster("dgx-a100-superpod"), **eff)
    out = []
    for name, run in data["runs"].items():
        model, c = load_model(name), base.resized(run["gpus"])
        for mode in MODES:
            est = evaluate(model, c, calibration_plan(run, data["models"][name]["seq_len"], mode))
            pub = data["iteration_time_s"][name][mode]
            out.append((est.iteration_time_s - pub) / pub)
    return out


def nemo_errors(gen: str) -> Callable[..., list[float]]:
    data = nemo_data()
    rows = [r for r in data["rows"] if r["gen"] == gen]
    models = {r["model"]: recipe_model(data, r["model"]) for r in rows}
    clusters = {r["name"]: recipe_cluster(r) for r in rows}

    def errors(**eff: float) -> list[float]:
        out = []
        for r in rows:
            est = evaluate(models[r["model"]], with_efficiency(clusters[r["name"]], **eff),
                           recipe_plan(r))
            out.append(tokens_per_s_per_gpu(r, est) / r["measured"] - 1 if est.feasible else 1.0)
        return out

    return errors


def a100_grid() -> Iterable[dict[str, float]]:
    for g, k in itertools.product([round(0.70 + 0.01 * i, 2) for i in range(16)], SLOWDOWN):
        yield dict(gemm_peak_fraction=g, overlap_slowdown=k)


def fp8_grid(attn_fwd: float, attn_bwd: float) -> Iterable[dict[str, float]]:
    for g, h, a, k in itertools.product([round(0.5 + 0.02 * i, 2) for i in range(21)],
                                        [128, 256, 512, 768, 1024, 1536], [0.7, 0.85, 1.0],
                                        SLOWDOWN):
        yield dict(fp8_gemm_peak_fraction=g, gemm_half_dim=h, overlap_slowdown=k,
                   attention_fwd_fraction=round(attn_fwd * a, 3),
                   attention_bwd_fraction=round(attn_bwd * a, 3))


#: generation -> (GPU file, error function, grid); the attention scale applies to the
#: literature values below (FlashAttention-3, Shah et al. 2024: H100 forward up to 75%;
#: Hopper values for Blackwell), so the fitted fractions stay tied to a published kernel.
GENERATIONS = {
    "A100": ("a100-sxm-80gb", lambda: korthikanti_errors, a100_grid),
    "H100": ("h100-sxm", lambda: nemo_errors("H100"), lambda: fp8_grid(0.55, 0.45)),
    "B200": ("b200", lambda: nemo_errors("B200"), lambda: fp8_grid(0.50, 0.40)),
}


def beats_microbenchmark(gpu: GPUSpec, point: dict[str, float]) -> bool:
    gpu = gpu.model_copy(update={"efficiency": gpu.efficiency.model_copy(update=point)})
    return bool(cap_violations(gpu))


def fit(gen: str) -> None:
    gpu_name, make_errors, grid = GENERATIONS[gen]
    errors, gpu = make_errors(), load_gpu(gpu_name)
    results, dropped = [], 0
    for point in grid():
        if beats_microbenchmark(gpu, point):
            dropped += 1
            continue
        e = errors(**point)
        results.append((statistics.mean(abs(x) for x in e), max(abs(x) for x in e), point))
    results.sort(key=lambda r: r[0])
    print(f"\n== {gen} ({gpu_name}) ==  ({dropped} grid points beat the cuBLASLt "
          f"microbenchmark and were dropped)\nMAPE    max     parameters")
    for mape, mx, point in results[:5]:
        print(f"{mape:6.2%}  {mx:6.2%}  {point}")
    shipped = errors()
    print(f"shipped {gpu_name}: MAPE {statistics.mean(abs(x) for x in shipped):.2%}, "
          f"max {max(abs(x) for x in shipped):.2%}")


def main(argv: list[str]) -> None:
    for gen in argv or list(GENERATIONS):
        if gen not in GENERATIONS:
            raise SystemExit(f"unknown generation {gen!r}; expected one of {list(GENERATIONS)}")
        fit(gen)


if __name__ == "__main__":
    main(sys.argv[1:])
