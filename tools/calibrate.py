"""Fit each GPU generation's shared efficiency parameters on the shared calibration sets.

One fit per GPU and dtype, never per data point. Each generation is fitted on its set:

- A100 (fp16): Korthikanti et al. 2022 Table 5 (8 runs): ``kernel_fraction`` and
  ``overlap_slowdown`` over the published kernel table (hardware_catalog/kernels/
  a100-sxm-80gb.yaml), as for the H100;
- H100 and B200 (FP8): NVIDIA's NeMo 24.07/25.02 recipes (9 and 6 runs):
  ``fp8_gemm_peak_fraction``, ``gemm_half_dim`` (how large a GEMM must be to approach
  that fraction: the saturating curve), a common scale of the two attention-kernel
  fractions, and ``overlap_slowdown``.

Every other parameter keeps its literature value (the GPU file's ``sources``). Grid points
whose GEMM curve beats a measured cuBLASLt throughput (``planner.validation.microbench``,
``hardware_catalog/calibration/cublas_gemm.yaml``) are dropped: the fit may not buy accuracy
on the recipes with GEMMs faster than the silicon runs them. The remaining grid
point with the least mean absolute percentage error is printed beside the shipped values;
copy it into ``hardware_catalog/gpus/<gpu>.yaml`` by hand (the file cites this tool), or
for a framework's own runs into its profile's ``fit`` (hardware_catalog/frameworks/).

- H100, torchtitan: torchtitan's own published runs (Llama 3.1 8B-405B on 8-512 Grand
  Teton H100s): ``kernel_fraction`` and ``overlap_slowdown`` of the torchtitan profile.

    python tools/calibrate.py              # every generation
    python tools/calibrate.py H100         # one
    python tools/calibrate.py --write      # and write hardware_catalog/calibration/fit_summary.yaml
"""

from __future__ import annotations

import itertools
import statistics
import sys
from pathlib import Path
from typing import Callable, Iterable

import yaml

from planner.costmodel.train.evaluator import evaluate
from planner.specs.cluster import ClusterSpec
from planner.specs.gpu import GPUSpec
from planner.specs.loaders import load_cluster, load_gpu, load_model
from planner.validation import MODES, calibration_data, calibration_plan
from planner.validation.microbench import cap_violations
from planner.costmodel.frameworks import framework_cluster
from planner.specs.framework import load_framework
from planner.validation.torchtitan import tokens_per_s_per_gpu as tokens_per_s_per_gpu_tt
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


def torchtitan_errors() -> Callable[..., list[float]]:
    """torchtitan's own H100 runs (hardware_catalog/calibration/torchtitan_h100.yaml), each
    costed as torchtitan runs it (its attention kernel; its fit is what is being fitted)."""
    from planner.validation.torchtitan import plannable_runs, run_cluster, run_model, run_plan

    runs = plannable_runs()
    models = {r["name"]: run_model(r) for r in runs}
    plans = {r["name"]: run_plan(r, models[r["name"]]) for r in runs}
    shipped = load_framework("torchtitan")
    bare = shipped.model_copy(update={"fit": {}})

    def errors(**eff: float) -> list[float]:
        """With ``eff``, a grid point over the GPU file's values; without, as shipped (the
        profile's own fit applied)."""
        out = []
        for r in runs:
            c = with_efficiency(framework_cluster(run_cluster(r), bare if eff else shipped),
                                **eff)
            est = evaluate(models[r["name"]], c, plans[r["name"]])
            out.append(tokens_per_s_per_gpu_tt(r, est) / r["measured_tps_per_gpu"] - 1
                       if est.feasible else 1.0)
        return out

    return errors


def fp8_grid(attn_fwd: float, attn_bwd: float) -> Iterable[dict[str, float]]:
    for g, h, a, k in itertools.product([round(0.5 + 0.02 * i, 2) for i in range(21)],
                                        [128, 256, 512, 768, 1024, 1536], [0.7, 0.85, 1.0],
                                        SLOWDOWN):
        yield dict(fp8_gemm_peak_fraction=g, gemm_half_dim=h, overlap_slowdown=k,
                   attention_fwd_fraction=round(attn_fwd * a, 3),
                   attention_bwd_fraction=round(attn_bwd * a, 3))


def table_grid() -> Iterable[dict[str, float]]:
    """The framework-level parameters of a GPU with a measured kernel table: the share of
    the microbenchmarked kernel speed a training step sustains, and the overlap slowdown."""
    for f, k in itertools.product([round(0.70 + 0.01 * i, 2) for i in range(31)], SLOWDOWN):
        yield dict(kernel_fraction=f, overlap_slowdown=k)


#: generation -> (GPU file, error function, grid); the attention scale applies to the
#: literature values below (FlashAttention-3, Shah et al. 2024: H100 forward up to 75%;
#: Hopper values for Blackwell), so the fitted fractions stay tied to a published kernel.
GENERATIONS = {
    "A100": ("a100-sxm-80gb", lambda: korthikanti_errors, table_grid),
    "H100": ("h100-sxm", lambda: nemo_errors("H100"), table_grid),
    "B200": ("b200", lambda: nemo_errors("B200"), lambda: fp8_grid(0.50, 0.40)),
    "H100 torchtitan": ("h100-sxm", torchtitan_errors, table_grid),
}


def beats_microbenchmark(gpu: GPUSpec, point: dict[str, float]) -> bool:
    gpu = gpu.model_copy(update={"efficiency": gpu.efficiency.model_copy(update=point)})
    return bool(cap_violations(gpu))


def leave_one_out(results: list[tuple[list[float], dict[str, float]]]) -> list[float]:
    """Each run's error at the grid point fitted without it (the least MAPE on the other
    runs): how well the fit predicts a run it has not seen."""
    n = len(results[0][0])
    out = []
    for i in range(n):
        def rest(errs: list[float]) -> float:
            return sum(abs(x) for j, x in enumerate(errs) if j != i)

        out.append(min(results, key=lambda r: rest(r[0]))[0][i])
    return out


def fit(gen: str) -> dict[str, object]:
    """Print the best grid points, the shipped parameters' error and the leave-one-out
    error; return the summary ``planner validate`` prints."""
    gpu_name, make_errors, grid = GENERATIONS[gen]
    errors, gpu = make_errors(), load_gpu(gpu_name)
    results, dropped = [], 0
    for point in grid():
        if beats_microbenchmark(gpu, point):
            dropped += 1
            continue
        results.append((errors(**point), point))
    results.sort(key=lambda r: statistics.mean(abs(x) for x in r[0]))
    print(f"\n== {gen} ({gpu_name}) ==  ({dropped} grid points beat the cuBLASLt "
          f"microbenchmark and were dropped)\nMAPE    max     parameters")
    for e, point in results[:5]:
        print(f"{statistics.mean(abs(x) for x in e):6.2%}  {max(abs(x) for x in e):6.2%}  {point}")
    shipped, loo = errors(), leave_one_out(results)
    print(f"shipped {gpu_name}: MAPE {statistics.mean(abs(x) for x in shipped):.2%}, "
          f"max {max(abs(x) for x in shipped):.2%}")
    print(f"leave-one-out ({len(loo)} runs, each predicted by the grid point fitted on the "
          f"others): MAPE {statistics.mean(abs(x) for x in loo):.2%}, "
          f"max {max(abs(x) for x in loo):.2%}")
    return {"framework": FRAMEWORKS[gen], "gpu": gpu_name, "runs": len(loo),
            "grid_points": len(results),
            "calibration_mape": round(statistics.mean(abs(x) for x in shipped), 4),
            "calibration_max": round(max(abs(x) for x in shipped), 4),
            "leave_one_out_mape": round(statistics.mean(abs(x) for x in loo), 4),
            "leave_one_out_max": round(max(abs(x) for x in loo), 4)}


#: The framework each generation's calibration runs used.
FRAMEWORKS = {"A100": "Megatron-LM (2022, Korthikanti et al.)",
              "H100": "NeMo 24.07/25.02 (Megatron-Core)", "B200": "NeMo 25.02 (Megatron-Core)",
              "H100 torchtitan": "torchtitan (2024-08 to 2025-06, Grand Teton H100)"}
SUMMARY = Path(__file__).resolve().parents[1] / "hardware_catalog" / "calibration" / \
    "fit_summary.yaml"


def main(argv: list[str]) -> None:
    write = "--write" in argv
    gens = [a for a in argv if a != "--write"] or list(GENERATIONS)
    summaries = {}
    for gen in gens:
        if gen not in GENERATIONS:
            raise SystemExit(f"unknown generation {gen!r}; expected one of {list(GENERATIONS)}")
        summaries[gen] = fit(gen)
    if write:
        old = yaml.safe_load(SUMMARY.read_text()) if SUMMARY.exists() else {}
        fits = {**(old or {}).get("fits", {}), **summaries}
        SUMMARY.write_text(SUMMARY_HEADER + yaml.safe_dump({"fits": fits}, sort_keys=False))
        print(f"wrote {SUMMARY.relative_to(SUMMARY.parents[2])}")


SUMMARY_HEADER = """\
# Written by `python tools/calibrate.py --write`: per generation (and the framework its
# calibration runs used), the shipped parameters' error on those runs and the leave-one-out
# error (each run predicted by the grid point fitted on the others). `planner validate`
# prints it; tests/test_cli.py checks the shipped error still matches the live one.
"""


if __name__ == "__main__":
    main(sys.argv[1:])
