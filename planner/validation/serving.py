"""Published LLM serving measurements predicted by the serving cost model: TensorRT-LLM's
H100 FP8 peak-throughput table (output tokens/s per GPU, static batching) and its batch-1
first-token latencies (``hardware_catalog/calibration/trtllm_serving_h100.yaml``, a copy of
the serving rows of the project's shared set).

Each row becomes a plan from what the row publishes: tp, pp, the batch as the concurrency,
FP8 weights and FP8 KV cache (the doc's build commands: ``--fp8_kv_cache``). Static
batching prefills the whole batch at once (TensorRT-LLM removes input padding), so the
prefill token budget is the batch's prompt tokens, up to :data:`MAX_PREFILL_TOKENS`. Only
GPU properties are fitted (``tools/calibrate_serving.py``), never a row.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from importlib import resources

import yaml

from planner.costmodel.serve.evaluate import evaluate_serve
from planner.specs.loaders import load_cluster, load_model
from planner.specs.serve import ServeEngine, ServePlan, ServeWorkload

FILE = "trtllm_serving_h100.yaml"
#: The H100 runs were built on DGX H100 nodes (8 GPUs on NVSwitch).
CLUSTER = "dgx-h100-superpod"
#: The largest prefill step the model gives a static batch: beyond 16K tokens a GEMM's
#: efficiency no longer changes (the saturating curve of planner/costmodel/compute.py).
MAX_PREFILL_TOKENS = 16384


def serving_data() -> dict:
    return yaml.safe_load((resources.files("hardware_catalog") / "calibration" / FILE).read_text())


#: TensorRT-LLM v0.5/v0.6.1: masked multi-head attention in decode, no XQA (ServeEngine).
ENGINE = ServeEngine(name="TensorRT-LLM v0.6.1", gqa_kv_shared=False)


def row_plan(row: dict) -> ServePlan:
    batch = int(row["batch"])
    return ServePlan(tp=row["tp"], pp=row["pp"], concurrency=batch, weight_dtype="fp8",
                     kv_dtype="fp8", prefill_chunk=min(batch * row["isl"], MAX_PREFILL_TOKENS))


@dataclass
class ServingRow:
    model: str
    tp: int
    batch: int
    isl: int
    osl: int
    metric: str  # output_tokens_per_s_per_gpu or first_token_latency_ms
    predicted: float
    measured: float

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0


def predict(row: dict, engine: ServeEngine = ENGINE) -> ServingRow:
    model = load_model(row["model"])
    cluster = load_cluster(CLUSTER)
    plan = row_plan(row)
    est = evaluate_serve(model, cluster, plan, ServeWorkload(isl=row["isl"], osl=row["osl"]),
                         engine)
    metric, measured = next(iter(row["measured"].items()))
    value = (est.output_tokens_per_s_per_gpu if metric == "output_tokens_per_s_per_gpu"
             else est.ttft_ms)
    return ServingRow(row["model"], row["tp"], plan.concurrency, row["isl"], row["osl"], metric,
                      float(value or 0.0), float(measured))


@dataclass
class ServingReport:
    rows: list[ServingRow]
    source: str = "NVIDIA/TensorRT-LLM docs/source/performance.md @77d24b5 (H100 SXM, FP8)"

    def of(self, metric: str) -> list[ServingRow]:
        return [r for r in self.rows if r.metric == metric]

    def mape(self, metric: str) -> float:
        return statistics.fmean(abs(r.error) for r in self.of(metric))

    def max_error(self, metric: str) -> float:
        return max(abs(r.error) for r in self.of(metric))

    def to_json(self) -> dict:
        metrics = sorted({r.metric for r in self.rows})
        return {"source": self.source,
                "rows": [dict(asdict(r), error=r.error) for r in self.rows],
                "mape": {m: self.mape(m) for m in metrics},
                "max_error": {m: self.max_error(m) for m in metrics}}


def run_serving(engine: ServeEngine = ENGINE) -> ServingReport:
    rows = [r for r in serving_data()["rows"] if r.get("kind") == "serving"]
    return ServingReport([predict(r, engine) for r in rows])
