"""The expected error of a training prediction, from the runs held out by source.

``tools/calibrate.py --write`` records every corpus run's residual with its source held out
(``hardware_catalog/calibration/heldout_residuals.yaml``). An answer's band is a split-conformal
prediction interval over the held-out runs *near its regime* (Vovk, Gammerman and Shafer,
"Algorithmic Learning in a Random World", 2005; Lei et al., "Distribution-free predictive
inference for regression", JASA 2018): with n exchangeable residuals, the k-th smallest
``|residual|``, k = ceil(LEVEL x (n + 1)), bounds a new one with probability at least LEVEL.
Fewer near runs give a larger k/n and so a wider band; below ``MIN_RUNS`` there is no band,
and the answer says so instead.

Nearness (:func:`distance`) counts what the held-out figures show moves the error: the GPU
generation, the framework family, the precision, the GPU count (decades), the sequence length
(factors of 16) and MoE. The weights are a stated assumption, not fitted.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Iterable, Sequence

import yaml

#: The coverage the printed band aims at (two-sided).
LEVEL = 0.9
#: Runs needed for a LEVEL band: the least n with k = ceil(LEVEL (n + 1)) <= n.
MIN_RUNS = next(n for n in range(1, 1000) if math.ceil(round(LEVEL * (n + 1), 9)) <= n)
#: A run is near an answer when its distance is at most the first of these radii that holds
#: MIN_RUNS runs; the note names the radius, so a wider neighbourhood reads as such.
RADII = (1.0, 1.5, 2.0)
#: Silicon generations close enough to share residuals, at a distance of SIBLING.
SIBLINGS = ({"H100", "H200"}, {"B200", "GB200"})
SIBLING = 0.5


#: GPU catalog name prefix -> generation label (the unit validation reports by).
GENERATIONS: tuple[tuple[str, str], ...] = (
    ("a100", "A100"), ("h100", "H100"), ("h200", "H200"), ("gb200", "GB200"), ("b200", "B200"),
    ("mi300x", "MI300X"), ("mi325x", "MI300X"), ("mi355x", "MI355X"))


def generation(gpu_name: str) -> str:
    for prefix, gen in GENERATIONS:
        if gpu_name.lower().startswith(prefix):
            return gen
    return gpu_name


@dataclass(frozen=True)
class Regime:
    """What a prediction is about, as far as its expected error goes."""

    generation: str
    family: str  # megatron | torchtitan | pytorch-fsdp | deepspeed | other
    dtype: str
    gpus: int
    seq_len: int
    moe: bool


@dataclass(frozen=True)
class Band:
    """``pct``: the symmetric band in percent of the iteration time (None: no band, ``note``
    says why); ``runs``: the held-out runs it rests on; ``bias_pct``: their mean residual."""

    pct: float | None
    note: str
    runs: int
    bias_pct: float | None = None
    radius: float | None = None  # the neighbourhood it rests on (RADII)

    def to_json(self) -> dict[str, Any]:
        return {"expected_error_pct": self.pct, "expected_error_note": self.note,
                "expected_error_runs": self.runs}


def distance(a: Regime, r: dict[str, Any]) -> float:
    """How far a held-out run ``r`` (a record of the held-out file) is from regime ``a``."""
    if a.generation != r["generation"]:
        if not any({a.generation, r["generation"]} <= s for s in SIBLINGS):
            return math.inf
        d = SIBLING
    else:
        d = 0.0
    d += 0.0 if a.family == r["family"] else 1.0
    low = {"bf16", "fp16"}
    d += 0.0 if a.dtype == r["dtype"] or {a.dtype, r["dtype"]} <= low else 0.5
    d += abs(math.log10(a.gpus / r["gpus"]))
    d += abs(math.log2(a.seq_len / r["seq_len"])) / 4
    d += 0.0 if a.moe == r["moe"] else 1.0
    return d


@lru_cache(maxsize=1)
def heldout_file() -> tuple[dict[str, Any], ...]:
    """Every corpus run as ``tools/calibrate.py --write`` recorded it."""
    path = resources.files("hardware_catalog") / "calibration" / "heldout_residuals.yaml"
    # read on every answer: libyaml's loader where PyYAML has it (6x the pure-Python one)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return tuple(yaml.load(path.read_text(), Loader=loader)["runs"])


def heldout_records() -> tuple[dict[str, Any], ...]:
    """The held-out runs (those a source hold-out could predict)."""
    return tuple(r for r in heldout_file() if r["heldout_residual"] is not None)


def conformal_pct(residuals: Sequence[float], level: float = LEVEL) -> float | None:
    """The split-conformal half-width of ``residuals`` in percent: the k-th smallest
    ``|r|``, k = ceil(level (n + 1)); None when k > n (too few runs)."""
    k = math.ceil(round(level * (len(residuals) + 1), 9))
    if k > len(residuals):
        return None
    return 100 * sorted(abs(r) for r in residuals)[k - 1]


def band_for(regime: Regime, records: Iterable[dict[str, Any]] | None = None,
             exclude_source: str | None = None) -> Band:
    """The band of a prediction in ``regime`` (``exclude_source``: leave a source's own runs
    out, as the band's own test does)."""
    recs = [r for r in (heldout_records() if records is None else records)
            if r["source"] != exclude_source]
    for radius in RADII:
        near = [r for r in recs if distance(regime, r) <= radius]
        if len(near) >= MIN_RUNS:
            break
    where = _describe(near) if near else _describe_regime(regime)
    if len(near) < MIN_RUNS:
        return Band(None, f"no band: {len(near)} held-out run(s) near this regime ({where}); "
                    f"{MIN_RUNS} are needed for a {LEVEL:.0%} band", len(near))
    res = [r["heldout_residual"] for r in near]
    pct = conformal_pct(res)
    assert pct is not None
    bias = 100 * statistics.mean(res)
    note = (f"expected within ±{pct:.0f} % ({LEVEL:.0%} band from {len(near)} runs held out "
            f"by source: {where})")
    if abs(bias) >= pct / 2:
        note += (f"; the model is {'optimistic' if bias > 0 else 'pessimistic'} there by "
                 f"{abs(bias):.0f} % on average")
    return Band(round(pct, 1), note, len(near), round(bias, 1), radius)


def _describe(near: Sequence[dict[str, Any]]) -> str:
    gens = "/".join(sorted({r["generation"] for r in near}))
    dtypes = "/".join(sorted({r["dtype"].upper() for r in near}))
    fams = "/".join(sorted({r["family"] for r in near}))
    lo, hi = min(r["gpus"] for r in near), max(r["gpus"] for r in near)
    gpus = f"{lo:,} GPUs" if lo == hi else f"{lo:,}-{hi:,} GPUs"
    srcs = len({r["source"] for r in near})
    return f"{gens} {dtypes} {fams}, {gpus}, {srcs} source{'s' if srcs > 1 else ''}"


def _describe_regime(a: Regime) -> str:
    return (f"{a.generation} {a.dtype.upper()} {a.family}{' MoE' if a.moe else ''}, "
            f"{a.gpus:,} GPUs, {a.seq_len:,} tokens")


#: Framework profile name -> family (the unit the held-out runs are grouped by).
PROFILE_FAMILY = {"megatron-core": "megatron", "nemo": "megatron", "torchtitan": "torchtitan",
                  "deepspeed": "deepspeed", "pytorch": "pytorch-fsdp"}


def regime_of(model: Any, cluster: Any, plan: Any, framework: str | None) -> Regime:
    """The regime of a plan on a cluster, run by ``framework`` (a profile name; None: the
    model's default kernels, which the Megatron family's runs calibrate)."""
    family = PROFILE_FAMILY.get(framework or "megatron-core", "other")
    return Regime(generation(cluster.gpu.name), family, plan.dtype, plan.world_size,
                  plan.seq_len, model.moe is not None)


def with_band(estimate: Any, model: Any, cluster: Any, plan: Any, framework: str | None) -> Any:
    """``estimate`` (a training Estimate) with its expected error filled in."""
    if not estimate.feasible:
        return estimate.model_copy(update={
            "expected_error_pct": None,
            "expected_error_note": "no band: the plan does not fit, so nothing is predicted"})
    band = band_for(regime_of(model, cluster, plan, framework))
    return estimate.model_copy(update={"expected_error_pct": band.pct,
                                       "expected_error_note": band.note})


#: Serving has one published throughput source per engine (TensorRT-LLM's H100 FP8 tables,
#: fitted) and a per-operation database (aiconfigurator) that checks steps, not whole
#: answers under load: no source has been held out, so there is no honest band yet.
SERVING = Band(None, "no band: serving is validated in-sample on TensorRT-LLM's H100 FP8 "
               "tables (planner validate) and step by step against aiconfigurator's measured "
               "operations; no serving source has been held out", 0)
