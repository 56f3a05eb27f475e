"""Fit the framework-level parameters on the validation corpus, and hold out each source.

One fit per *group*, never per data point: a group is a GPU's own efficiency parameters (the
GPU file's ``efficiency``) or a framework's own fit on a GPU (its profile's ``fit``), and it
is fitted on every corpus run whose prediction reads it (``planner.validation.corpus``:
``fit_group``), from every source:

- A100, H100 and B200 (kernel tables: published microbenchmarks, measured):
  ``kernel_fraction`` (the share of the microbenchmarked kernel speed a training step
  sustains) and ``overlap_slowdown``;
- H100 torchtitan: the torchtitan profile's ``kernel_fraction`` and ``overlap_slowdown``;
- MoE megatron: Megatron-Core's host time per local expert of an MoE layer's forward
  (``moe_expert_host_us`` in the megatron-core and nemo profiles' kernels), fitted on the MoE
  runs of those frameworks (every GPU) over the dense groups' parameters.

Every other parameter keeps its literature value (the GPU file's ``sources``). Grid points
whose GEMM curve beats a measured cuBLASLt throughput (``planner.validation.microbench``,
``hardware_catalog/calibration/cublas_gemm.yaml``) are dropped: the fit may not buy accuracy
with GEMMs faster than the silicon runs them. The grid point with the least mean absolute
percentage error is printed beside the shipped values; copy it into
``hardware_catalog/gpus/<gpu>.yaml`` (or a profile's ``fit``) by hand.

Held out by source: each source's runs are predicted by the group refitted on the other
sources' runs. The figure that counts is that one, not the in-sample fit.

    python tools/calibrate.py              # every group
    python tools/calibrate.py H100         # one
    python tools/calibrate.py --write      # and write fit_summary.yaml and heldout_residuals.yaml
    python tools/calibrate.py --apply --write   # first write each group's best point into its
                                                # GPU file or profile, then measure and record
"""

from __future__ import annotations

import itertools
import os
import statistics
import sys
from pathlib import Path
from typing import Callable, Iterable, Sequence

import yaml

from planner.specs.cluster import ClusterSpec
from planner.specs.gpu import GPUSpec
from planner.specs.loaders import load_gpu
from planner.validation.corpus import Run, corpus_runs, fit_group
from planner.validation.microbench import cap_violations

#: Prior: overlapped NCCL kernels slow concurrent compute by 10-50% (Rashidi et al., ISCA
#: 2021, ACE, Sec. 3); the fit may not leave that range.
SLOWDOWN = [0.1, 0.2, 0.3, 0.4, 0.5]


def with_efficiency(cluster: ClusterSpec, **eff: float) -> ClusterSpec:
    gpu = cluster.gpu.model_copy(update={"efficiency": cluster.gpu.efficiency.model_copy(update=eff)})
    return cluster.model_copy(update={"gpu": gpu})


def group_errors(runs: Sequence[Run], drop_profile_fit: bool = False) -> Callable[..., list[float]]:
    """Errors (residuals; 1.0 where the plan does not fit) of ``runs`` at a grid point, or
    as shipped without one. The point's parameters replace the GPU file's values; with
    ``drop_profile_fit`` (a framework's own group, or its runs predicted without it) the
    framework profile's fit on that GPU is removed first."""

    def errors(**eff: float) -> list[float]:
        out = []
        for r in runs:
            c = r.costed_cluster(profile_fit=not (eff and drop_profile_fit))
            est = r.estimate(with_efficiency(c, **eff) if eff else c)
            e = r.residual(est)
            out.append(1.0 if e is None else e)
        return out

    return errors


def fp8_grid(attn_fwd: float, attn_bwd: float) -> Iterable[dict[str, float]]:
    for g, h, a, k in itertools.product([round(0.5 + 0.02 * i, 2) for i in range(21)],
                                        [128, 256, 512, 768, 1024, 1536], [0.7, 0.85, 1.0],
                                        SLOWDOWN):
        yield dict(fp8_gemm_peak_fraction=g, gemm_half_dim=h, overlap_slowdown=k,
                   attention_fwd_fraction=round(attn_fwd * a, 3),
                   attention_bwd_fraction=round(attn_bwd * a, 3))


def host_grid() -> Iterable[dict[str, float]]:
    """Host time per local expert of an MoE layer's forward, 0 to 1 ms (a CPU launches a
    kernel in a few microseconds to tens of microseconds: TaxBreak, arXiv:2603.12465)."""
    for us in range(0, 1001, 25):
        yield dict(moe_expert_host_us=float(us))


def table_grid() -> Iterable[dict[str, float]]:
    """The framework-level parameters of a GPU with a measured kernel table: the share of
    the microbenchmarked kernel speed a training step sustains, and the overlap slowdown."""
    for f, k in itertools.product([round(0.60 + 0.01 * i, 2) for i in range(41)], SLOWDOWN):
        yield dict(kernel_fraction=f, overlap_slowdown=k)


#: fit group -> (GPU file, grid); the attention scale applies to the literature values below
#: (FlashAttention-3, Shah et al. 2024: H100 forward up to 75%; Hopper values for Blackwell), so
#: the fitted fractions stay tied to a published kernel. Which runs a group fits:
#: planner.validation.corpus.fit_group.
GENERATIONS = {
    "A100": ("a100-sxm-80gb", table_grid),
    "H100": ("h100-sxm", table_grid),
    # the B200 reads its published table (hardware_catalog/kernels/b200.yaml: FP8 GEMM,
    # cuDNN/FlashAttention-2 attention); fp8_grid fits the curve where a GPU has none
    "B200": ("b200", table_grid),
    "H100 torchtitan": ("h100-sxm", table_grid),
    "A100 megatron-core": ("a100-sxm-80gb", table_grid),
    "MoE megatron": (None, host_grid),
}
#: groups that replace a framework profile's own fit on a GPU (the rest set GPU or kernel
#: parameters over the profile's fit)
PROFILE_FIT_GROUPS = {"H100 torchtitan", "A100 megatron-core"}
#: the frameworks whose MoE runs the MoE group fits (Megatron-Core underneath)
MOE_PROFILES = ("megatron-core", "nemo")


def in_group(r: Run, gen: str) -> bool:
    """Whether group ``gen`` is fitted on run ``r``: dense runs of the frameworks the product
    models by their GPU or profile group; MoE runs of Megatron-Core by the MoE group."""
    if gen == "MoE megatron":
        return r.moe and r.profile in MOE_PROFILES
    return not r.moe and r.family != "other" and fit_group(r) == gen


def beats_microbenchmark(gpu: GPUSpec | None, point: dict[str, float]) -> bool:
    if gpu is None:  # a group of host parameters: no kernel speed to check
        return False
    gpu = gpu.model_copy(update={"efficiency": gpu.efficiency.model_copy(update=point)})
    return bool(cap_violations(gpu))


def _mape(errs: Iterable[float]) -> float:
    errs = list(errs)
    return statistics.mean(abs(x) for x in errs) if errs else 0.0


def best_point(results: list[tuple[list[float], dict[str, float]]],
               keep: Sequence[bool]) -> tuple[list[float], dict[str, float]]:
    """The grid point with the least absolute error over the runs marked ``keep``."""
    return min(results, key=lambda r: sum(abs(x) for x, k in zip(r[0], keep) if k))


#: A run identifies a group's parameters when its residual moves by more than this across the
#: grid (5 points of error); a held-out refit whose other sources offer fewer than
#: ``IDENTIFYING_SOURCES`` sources of such runs is printed and recorded as weakly identified.
MOVES = 0.05
IDENTIFYING_SOURCES = 2


def moving_runs(results: Sequence[tuple[list[float], dict[str, float]]], keep: Sequence[bool],
                tol: float = MOVES) -> list[int]:
    """The runs marked ``keep`` whose error over the grid ``results`` spans more than ``tol``:
    the runs that can tell the grid points apart. The rest are indifferent to the parameters
    (a dense run under the MoE host time, say), so a refit on them alone is set by noise or
    by the grid's edge."""
    return [i for i, k in enumerate(keep)
            if k and max(e[i] for e, _ in results) - min(e[i] for e, _ in results) > tol]


def grid_results(gen: str, runs: Sequence[Run]
                 ) -> tuple[list[tuple[list[float], dict[str, float]]], int]:
    """Every grid point of group ``gen`` that does not beat the cuBLASLt microbenchmark, with
    the errors of ``runs`` there, and how many points were dropped."""
    gpu_name, grid = GENERATIONS[gen]
    errors = group_errors(runs, drop_profile_fit=gen in PROFILE_FIT_GROUPS)
    gpu = load_gpu(gpu_name) if gpu_name else None
    results, dropped = [], 0
    for point in grid():
        if beats_microbenchmark(gpu, point):
            dropped += 1
            continue
        results.append((errors(**point), point))
    return results, dropped


def fit(gen: str, runs: Sequence[Run], everything: Sequence[Run]) -> tuple[dict, list[dict]]:
    """Fit group ``gen`` on ``runs``; print the best grid points and the shipped error; hold
    out each source in turn (the group refitted on the other sources' runs). A source that
    is the group's only one is predicted, for a framework group, by the GPU's own group
    refitted without it (what the model would say had the framework never been fitted);
    for a GPU group it cannot be held out. Returns the summary and one record per run."""
    results, dropped = grid_results(gen, runs)
    results.sort(key=lambda r: _mape(r[0]))
    gpu_name = GENERATIONS[gen][0]
    print(f"\n== {gen} ({gpu_name}): {len(runs)} runs from "
          f"{len({r.source for r in runs})} sources ==  ({dropped} grid points beat the "
          f"cuBLASLt microbenchmark and were dropped)\nMAPE    max     parameters")
    for e, point in results[:5]:
        print(f"{_mape(e):6.2%}  {max(abs(x) for x in e):6.2%}  {point}")
    shipped = group_errors(runs)()
    held: list[float | None] = [None] * len(runs)
    how: list[str] = [""] * len(runs)
    for src in sorted({r.source for r in runs}):
        mine = [r.source == src for r in runs]
        if not all(mine):
            keep = [not m for m in mine]
            errs, point = best_point(results, keep)
            moving = moving_runs(results, keep)
            n_src = len({runs[i].source for i in moving})
            note = "group refitted without its source"
            if n_src < IDENTIFYING_SOURCES:
                # the other sources barely constrain the parameters: the refit is not a
                # prediction from them, and the held-out residual says little
                note += (f" (weakly identified: {len(moving)} runs from {n_src} sources move "
                         f"by more than {MOVES:.0%} across the grid)")
                print(f"held out {src}: refit at {point} is weakly identified: {len(moving)} "
                      f"other runs from {n_src} sources move by more than {MOVES:.0%}")
            for i, m in enumerate(mine):
                if m:
                    held[i], how[i] = errs[i], note
        elif gen in PROFILE_FIT_GROUPS:
            parent = gen.split(" ")[0]
            own = [r for r, m in zip(runs, mine) if m]
            prior = [r for r in everything if fit_group(r) == parent and r.source != src]
            p_results, _ = grid_results(parent, prior)
            _, point = best_point(p_results, [True] * len(prior))
            errs = group_errors(own, drop_profile_fit=True)(**point)
            for i, e in zip([i for i, m in enumerate(mine) if m], errs):
                held[i], how[i] = e, f"{parent} group fitted without its source; no {gen} fit"
        else:
            for i in range(len(runs)):
                how[i] = "not held out: the only source of its group"
    loo = [h for h in held if h is not None]
    print(f"shipped: MAPE {_mape(shipped):.2%}, max {max(abs(x) for x in shipped):.2%}")
    if loo:
        print(f"held out by source ({len(loo)} runs): MAPE {_mape(loo):.2%}, mean "
              f"{statistics.mean(loo):+.2%}, max {max(abs(x) for x in loo):.2%}")
    summary = {"framework": FRAMEWORKS.get(gen, ""), "gpu": gpu_name, "runs": len(runs),
               "sources": len({r.source for r in runs}), "grid_points": len(results),
               "best": results[0][1],
               "calibration_mape_at_best": round(_mape(results[0][0]), 4),
               "calibration_mape": round(_mape(shipped), 4),
               "calibration_max": round(max(abs(x) for x in shipped), 4),
               "leave_one_source_out_mape": round(_mape(loo), 4) if loo else None,
               "leave_one_source_out_bias": round(statistics.mean(loo), 4) if loo else None}
    return summary, [record(r, s, h, w, gen) for r, s, h, w in zip(runs, shipped, held, how)]


def record(r: Run, shipped: float | None, held: float | None, how: str,
           group: str | None) -> dict:
    """One run's line in the held-out file (planner.validation.band reads it); a run whose
    published plan does not fit has no residual, and ``held_out`` gives the reason."""
    return {"run": r.name, "origin": r.origin, "model": r.model.name, "source": r.source,
            "framework": r.framework, "family": r.family,
            "profile": r.profile, "generation": r.generation, "dtype": r.dtype,
            "gpus": r.gpus, "seq_len": r.seq_len, "moe": r.moe, "group": group,
            "feasible": shipped is not None,
            "residual": None if shipped is None else round(shipped, 4),
            "heldout_residual": None if held is None else round(held, 4), "held_out": how}


#: Where each group's point is written: GPU files (their ``efficiency``), or a profile's
#: ``fit`` on a GPU (``profile:gpu``). The A100 40 GB is the same silicon as the 80 GB.
TARGETS = {"A100": ("gpus/a100-sxm-80gb.yaml", "gpus/a100-sxm-40gb.yaml"),
           "H100": ("gpus/h100-sxm.yaml", "gpus/h200.yaml"),
           "B200": ("gpus/b200.yaml", "gpus/gb200.yaml"),
           "H100 torchtitan": ("frameworks/torchtitan.yaml:h100-sxm",),
           "A100 megatron-core": ("frameworks/megatron-core.yaml:a100-sxm-80gb",),
           "MoE megatron": ("frameworks/megatron-core.yaml#kernels",
                            "frameworks/nemo.yaml#kernels")}


def write_point(gen: str, point: dict[str, float]) -> list[str]:
    """Write group ``gen``'s fitted point into its files, each value on the line where the
    file has the key (comments and order kept); the figures of the fit are recorded in
    fit_summary.yaml, which the files' sources cite."""
    out = []
    for target in TARGETS[gen]:
        fname, _, gpu = target.partition(":")
        fname, _, top = fname.partition("#")
        path = CALIBRATION.parent / fname
        lines = path.read_text().splitlines()
        block = f"  {gpu}:" if gpu else f"{top or 'efficiency'}:"
        start = next(i for i, line in enumerate(lines) if line.rstrip() == block)
        indent = "    " if gpu else "  "
        for key, value in point.items():
            for i in range(start + 1, len(lines)):
                if not lines[i].startswith(indent):
                    raise SystemExit(f"{fname}: no {key} under {block.strip()}")
                if lines[i].startswith(f"{indent}{key}:"):
                    lines[i] = f"{indent}{key}: {value}"
                    break
        path.write_text("\n".join(lines) + "\n")
        out.append(fname)
    return out


#: The framework each group's runs mostly used (the first sources fitted).
FRAMEWORKS = {"A100": ("other teams than NVIDIA's Megatron-LM (Megatron-DeepSpeed, NeMo 2022, "
                       "FSDP, torchtitan)"),
              "H100": "NeMo (Megatron-Core) and others", "B200": "NeMo 25.02 (Megatron-Core)",
              "H100 torchtitan": "torchtitan (2024-08 to 2025-06, Grand Teton H100)",
              "A100 megatron-core": "Megatron-LM (NVIDIA's own runs on Selene, 2020-2022)",
              "MoE megatron": "Megatron-Core MoE (NeMo, Megatron-Bridge; H100, B200, GB200)"}
CALIBRATION = Path(__file__).resolve().parents[1] / "hardware_catalog" / "calibration"
SUMMARY = CALIBRATION / "fit_summary.yaml"
HELDOUT = CALIBRATION / "heldout_residuals.yaml"


def main(argv: list[str]) -> None:
    write = "--write" in argv
    apply = "--apply" in argv
    gens = [a for a in argv if a not in ("--write", "--apply")] or list(GENERATIONS)
    for gen in gens:
        if gen not in GENERATIONS:
            raise SystemExit(f"unknown group {gen!r}; expected one of {list(GENERATIONS)}")
    everything, records = [], []
    for r in corpus_runs():  # a published plan that does not fit has nothing to fit or hold out
        est = r.estimate()
        if est.feasible:
            everything.append(r)
        else:
            records.append(record(r, None, None, "does not fit: " + "; ".join(est.reasons),
                                  fit_group(r)))
    summaries = {}
    # fitted: dense runs of the frameworks the product models (a profile or a family it
    # costs); a framework it has no profile for (MaxText, Meta's own) is only held out
    dense = [r for r in everything if not r.moe and r.family != "other"]
    fitted = set()
    for gen in gens:
        runs = [r for r in everything if in_group(r, gen)]
        summaries[gen], recs = fit(gen, runs, dense)
        records.extend(recs)
        fitted.update(r.name for r in runs)
    for r in everything:
        # the dense parameters are never fitted on MoE runs: what they miss there is a
        # mechanism of the MoE layer, fitted only by the MoE group
        if r.name not in fitted and (r not in dense or fit_group(r) is None):
            e = r.residual(r.estimate())
            why = ("MoE: no MoE fit for this framework" if r.moe else "no fit reads this GPU"
                   if fit_group(r) is None else "a framework without a profile: not fitted")
            records.append(record(r, e, e, why, fit_group(r)))
    if apply:  # the best points into the files, then measure again as shipped
        for gen in gens:
            print("wrote", ", ".join(write_point(gen, summaries[gen]["best"])))
        os.execv(sys.executable, [sys.executable, __file__,
                                  *(a for a in argv if a != "--apply")])
    if write:
        if set(gens) != set(GENERATIONS):
            raise SystemExit("--write refits every group (the held-out file lists every run)")
        SUMMARY.write_text(SUMMARY_HEADER + yaml.safe_dump({"fits": summaries}, sort_keys=False))
        order = {r.name: i for i, r in enumerate(corpus_runs())}
        records.sort(key=lambda d: order[d["run"]])
        HELDOUT.write_text(HELDOUT_HEADER + yaml.safe_dump({"runs": records}, sort_keys=False,
                                                           width=120))
        print(f"wrote {SUMMARY.relative_to(SUMMARY.parents[2])} and "
              f"{HELDOUT.relative_to(HELDOUT.parents[2])}")


SUMMARY_HEADER = """\
# Written by `python tools/calibrate.py --write`: per fit group (a GPU, or a framework's own
# fit on a GPU), the shipped parameters' error on its runs, the best grid point, and the error
# with each source held out in turn (the group refitted on the other sources). `planner
# validate` prints it; tests/test_cli.py checks the shipped error still matches the live one.
"""
HELDOUT_HEADER = """\
# Written by `python tools/calibrate.py --write`: every run of the validation corpus
# (planner/validation/corpus.py) with its residual as shipped and held out by source
# (predicted throughput / measured - 1; positive: the model is optimistic). The error band
# printed with every answer (planner/validation/band.py) comes from the held-out residuals.
"""


if __name__ == "__main__":
    main(sys.argv[1:])
