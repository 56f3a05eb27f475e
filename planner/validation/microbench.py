"""Measured cuBLASLt GEMM throughput as a ceiling on the fitted efficiency curve.

A fit of the shared efficiency parameters may trade the curve's asymptote against its
half dimension; some of those trades predict GEMMs faster than the silicon runs them in a
microbenchmark. Such a fit is compensating for something else in the model, and the
solver would seek out exactly those shapes. ``hardware_catalog/calibration/cublas_gemm.yaml``
holds the measurements; :func:`cap_violations` lists the shapes a GPU's curve beats.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import yaml

from planner.costmodel.compute import gemm_efficiency
from planner.specs.gpu import GPUSpec

FILE = "cublas_gemm.yaml"
#: Microbenchmark repeatability: a prediction within 3 % above a single published figure is
#: not a violation (the A100 figures are not monotone to better than that: 4096^3 runs at
#: 73 % of peak, 2048^3 at 71 %).
TOLERANCE = 1.03


@dataclass(frozen=True)
class CapViolation:
    gpu: str
    dtype: str
    shape: tuple[float, float, float]
    predicted_tflops: float
    measured_tflops: float


@lru_cache(maxsize=1)
def gemm_caps() -> dict:
    """The measurements, read once (callers only read them)."""
    path = resources.files("hardware_catalog") / "calibration" / FILE
    return yaml.safe_load(path.read_text())


def cap_violations(gpu: GPUSpec, tolerance: float = TOLERANCE) -> list[CapViolation]:
    """Shapes where ``gpu``'s efficiency curve predicts more than the measured cuBLASLt
    throughput (times ``tolerance``); empty when the GPU has no measurement."""
    out = []
    for entry in gemm_caps()["measured"]:
        if gpu.name not in entry["gpus"]:
            continue
        dtype = entry["dtype"]
        for m, n, k, tflops in entry["shapes"]:
            pred = gemm_efficiency(gpu, dtype, m, n, k) * gpu.peak_flops(dtype) / 1e12
            if pred > tflops * tolerance:
                out.append(CapViolation(gpu.name, dtype, (m, n, k), pred, tflops))
    return out
