"""NVIDIA's published NeMo FP8 pre-training recipes on H100 and B200, predicted against the
published tokens per second per GPU.

Source data: ``hardware_catalog/calibration/nvidia_nemo_2407_2502.yaml`` (a copy of the
project's shared set: NeMo 24.07 and 25.02 performance summaries). The tables publish the
parallel sizes; the rest of each plan is what NeMo's performance recipes set for every run
(``scripts/llm/performance`` and ``nemo/collections/llm/recipes``, NeMo 2.x):

- sequence parallelism and TP communication overlap (``MegatronCommOverlapCallback``,
  ``tp_comm_overlap=True``) whenever tp > 1;
- the distributed optimizer (``zero_stage: 1``) with overlapped gradient reduce-scatter and
  parameter all-gather;
- ``bf16_with_fp8_mixed``: FP8 parameters (``fp8_params``/``fp8_param_gather``) and bf16
  gradient reduction (``grad_reduce_in_fp32=False``);
- no activation recomputation; FlashAttention (cuDNN fused attention); ring context
  parallelism (Megatron-Core's ``cp_comm_type`` p2p).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Any

import yaml

from planner.costmodel.train.evaluator import Estimate, evaluate
from planner.specs.cluster import ClusterSpec
from planner.specs.loaders import load_cluster, load_model
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan

FILE = "nvidia_nemo_2407_2502.yaml"
#: The settings NeMo's performance recipes use for every run (module docstring).
RECIPE_SETTINGS: dict[str, Any] = dict(zero_stage=1, fp8_params=True, grad_reduce_dtype="bf16",
                                       recompute="none", attention="flash", cp_comm="ring")


def nemo_data() -> dict:
    path = resources.files("hardware_catalog") / "calibration" / FILE
    return yaml.safe_load(path.read_text())


def recipe_model(data: dict, name: str) -> ModelSpec:
    entry = data["models"][name]
    if "catalog" in entry:
        return load_model(entry["catalog"])
    return ModelSpec.model_validate(entry["file"])


def recipe_base(row: dict) -> dict[str, Any]:
    """What the free solve is given: batch, sequence length, dtype and the recipe's numeric
    settings (precision choices, not parallelization)."""
    return dict(global_batch_size=row["gbs"], seq_len=row["seq"], dtype=row["dtype"],
                fp8_params=row["dtype"] == "fp8",
                grad_reduce_dtype="bf16" if row["dtype"] == "fp8" else "fp32")


def recipe_plan(row: dict) -> Plan:
    """The published recipe as a plan: the row's parallel sizes plus the recipe settings."""
    fix = dict(row["fix"])
    tp = fix.get("tp", 1)
    data = dict(RECIPE_SETTINGS, **recipe_base(row), **fix,
                sequence_parallel=tp > 1, overlap_tp_comm=tp > 1)
    return Plan.model_validate(data)


def recipe_cluster(row: dict) -> ClusterSpec:
    return load_cluster(row["cluster"], row["gpus"])


def tokens_per_s_per_gpu(row: dict, est: Estimate) -> float:
    assert est.iteration_time_s
    return row["gbs"] * row["seq"] / est.iteration_time_s / row["gpus"]


@dataclass
class RecipeRow:
    name: str
    gen: str
    model: str
    gpus: int
    predicted: float  # tokens/s/GPU
    measured: float
    feasible: bool
    memory_gib: float | None

    @property
    def error(self) -> float:
        return (self.predicted - self.measured) / self.measured


@dataclass
class RecipeReport:
    source: str
    rows: list[RecipeRow]

    def by_generation(self) -> dict[str, list[RecipeRow]]:
        out: dict[str, list[RecipeRow]] = {}
        for r in self.rows:
            out.setdefault(r.gen, []).append(r)
        return out

    def mape(self, gen: str | None = None) -> float:
        rows = [r for r in self.rows if gen is None or r.gen == gen]
        return statistics.mean(abs(r.error) for r in rows)

    def max_error(self, gen: str | None = None) -> float:
        return max(abs(r.error) for r in self.rows if gen is None or r.gen == gen)

    def to_json(self) -> dict:
        return {
            "source": self.source,
            "metric": "tokens per second per GPU",
            "rows": [dict(asdict(r), error=r.error) for r in self.rows],
            "mape_by_generation": {g: self.mape(g) for g in self.by_generation()},
            "max_abs_error_by_generation": {g: self.max_error(g) for g in self.by_generation()},
        }


def recipe_rows(data: dict | None = None) -> list[dict]:
    return list((data or nemo_data())["rows"])


def run_recipes(cluster_for=recipe_cluster) -> RecipeReport:
    """Every row evaluated with its published plan (``cluster_for(row)`` lets the
    calibration tool swap efficiency parameters)."""
    data = nemo_data()
    rows = []
    for row in data["rows"]:
        est = evaluate(recipe_model(data, row["model"]), cluster_for(row), recipe_plan(row))
        pred = tokens_per_s_per_gpu(row, est) if est.feasible else 0.0
        mem = est.memory_per_gpu_bytes / 2**30 if est.memory_per_gpu_bytes else None
        rows.append(RecipeRow(row["name"], row["gen"], row["model"], row["gpus"], pred,
                              float(row["measured"]), est.feasible, mem))
    return RecipeReport("; ".join(data["sources"].values()), rows)
