"""Serving inputs: the workload (prompt and output lengths, offered load, latency SLOs) and
one serving plan (the layout of a replica, its batch and precisions, and the pools)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt, model_validator

from planner.specs.base import Spec, notes_field
from planner.specs.names import Name
from planner.errors import InputError
from planner.specs.loaders import load_catalog_profile, reference

WeightDtype = Literal["bf16", "fp8", "int4", "fp4"]
KVDtype = Literal["bf16", "fp8"]
ServeMode = Literal["aggregated", "disaggregated"]
#: the engines planner/export/serve_launch.py writes launch commands for
Launcher = Literal["trtllm", "vllm", "sglang"]
#: Longest prompt/output accepted: 16,777,216 tokens, far above any served context
#: (Llama 4 Scout: 10M tokens); bounds the cost-model arithmetic.
MAX_SERVE_TOKENS = 1 << 24
#: At most a million concurrent sequences per replica and a million replicas.
MAX_CONCURRENCY = 1 << 20
MAX_REPLICAS = 1 << 20


class ServeWorkload(Spec):
    """What is served: ``isl`` prompt tokens and ``osl`` output tokens per request, an
    offered Poisson load ``rate_rps`` (None: the offline maximum-throughput question) and
    the latency SLOs at ``percentile``."""

    isl: PositiveInt = Field(..., le=MAX_SERVE_TOKENS, description="input (prompt) tokens")
    osl: PositiveInt = Field(..., le=MAX_SERVE_TOKENS, description="output tokens")
    rate_rps: float | None = Field(None, gt=0, le=1e9, description="offered requests/s")
    ttft_ms: float | None = Field(None, gt=0, le=1e9, description="time-to-first-token SLO")
    tpot_ms: float | None = Field(None, gt=0, le=1e9, description="time-per-output-token SLO")
    percentile: float = Field(0.99, gt=0, lt=1, description="the SLOs hold at this quantile")


class ServePlan(Spec):
    """One serving configuration. A replica is ``tp x pp`` GPUs of one type (``gpu``, the
    cluster's when None) holding the whole model; ``ep`` (dividing ``tp``) shards the
    experts of MoE layers over the TP ranks instead of splitting each expert. Aggregated
    (``prefill`` None): ``replicas`` serve prefill and decode with continuous batching and
    chunked prefill (``prefill_chunk`` tokens per step). Disaggregated: ``replicas`` decode,
    and the pool ``prefill`` (its own layout, GPU type, replicas and chunk) prefills; the
    KV cache crosses the network between them."""

    tp: PositiveInt = Field(1, le=4096)
    pp: PositiveInt = Field(1, le=4096)
    ep: PositiveInt = Field(1, le=4096)
    concurrency: PositiveInt = Field(64, le=MAX_CONCURRENCY, description="max sequences")
    weight_dtype: WeightDtype = "bf16"
    kv_dtype: KVDtype = "bf16"
    prefill_chunk: PositiveInt = Field(2048, le=MAX_SERVE_TOKENS, description="tokens/step")
    replicas: PositiveInt = Field(1, le=MAX_REPLICAS)
    gpu: Name | None = Field(None, description="GPU type of the replicas (catalog name)")
    prefill: "ServePlan | None" = Field(None, description="disaggregated: the prefill pool")

    @model_validator(mode="after")
    def _check(self) -> "ServePlan":
        if self.tp % self.ep:
            raise ValueError(f"ep={self.ep} must divide tp={self.tp} (experts are sharded "
                             "over the tensor-parallel ranks)")
        if self.prefill is not None and self.prefill.prefill is not None:
            raise ValueError("prefill: a prefill pool has no prefill pool of its own")
        if self.prefill is not None and self.prefill.kv_dtype != self.kv_dtype:
            raise ValueError(f"prefill.kv_dtype={self.prefill.kv_dtype} must equal kv_dtype="
                             f"{self.kv_dtype}: the decode pool reads the cache it receives")
        return self

    @property
    def mode(self) -> ServeMode:
        return "aggregated" if self.prefill is None else "disaggregated"

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp

    @property
    def num_gpus(self) -> int:
        pre = self.prefill.num_gpus if self.prefill is not None else 0
        return self.gpus_per_replica * self.replicas + pre


class ServeEngine(Spec):
    """What the serving engine's kernels do that the hardware does not decide.

    ``gqa_kv_shared``: the decode attention kernel reads each KV head once for its group
    of query heads (TensorRT-LLM's XQA kernels, integrated for Hopper in v0.10.0, its
    release notes; FlashInfer/FlashAttention decode in vLLM and SGLang). False: once per
    query head, as TensorRT-LLM's masked multi-head attention did before XQA (v0.6.1, the
    calibration set). ``request_overhead_ms``: fixed host time per request before its first
    token (scheduling, input copy, sampling); ``collective_overhead_us``: the launch and
    synchronization of each TP/EP collective beyond the links' latency (an NCCL kernel per
    all-reduce). The class defaults are the fit on the whole calibration set by
    tools/calibrate_serving.py (TensorRT-LLM v0.6.1); the shipped profiles take the
    collective overhead from a measured custom all-reduce instead. Per-engine profiles,
    each field cited in ``sources``: ``hardware_catalog/engines/`` (:func:`load_engine`)."""

    name: Name = "default"
    aliases: list[Name] = Field(default_factory=list)
    version: str = Field("", max_length=400, description="the engine version it follows")
    description: str = Field("", max_length=400, description="what the profile is, for "
                             "`planner catalog engines`")
    notes: str | None = notes_field()
    launcher: Launcher | None = Field(
        None, description="whose launch command `serve --launch` prints for this engine")
    sources: dict[str, str] = Field(default_factory=dict, description="field -> citation, "
                                    "or what fitted or assumed it")
    gqa_kv_shared: bool = True
    # fitted by tools/calibrate_serving.py on TensorRT-LLM H100 FP8 over the measured kernel
    # table (MAPE 7.7% output tokens/s/GPU, 7.8% TTFT over 24 rows)
    request_overhead_ms: float = Field(3.5, ge=0, le=1e6)
    collective_overhead_us: float = Field(30.0, ge=0, le=1e6, description="per TP/EP collective")
    kernel_fraction: float = Field(
        0.95, gt=0, le=1, description="share of the GPU kernel table's microbenchmarked speed "
        "the engine's GEMMs and attention run at (the serving engine's own, in place of the "
        "training framework's fit in the GPU file): fitted by tools/calibrate_serving.py")
    fp8_act_quant_kernels: int = Field(
        0, ge=0, le=4, description="kernel launches that quantize each FP8 GEMM's bf16 input "
        "to FP8 (each reads the input, the last writes it): 2 for a dynamic per-tensor scale "
        "(an amax reduction, then the quantize), 1 for a static scale, 0 where a fused "
        "producer writes FP8 or nothing is charged (the v0.6.1 fit: the class default)")


#: the ServeEngine fields that change an estimate: a catalog profile cites each
ENGINE_FIELDS = ("gqa_kv_shared", "request_overhead_ms", "collective_overhead_us",
                 "kernel_fraction", "fp8_act_quant_kernels")


def load_engine(ref: "str | ServeEngine") -> ServeEngine:
    """A catalog serving-engine profile by name or alias, an engine YAML file, or an engine
    object as is. No default here: a request without an engine runs
    :data:`planner.specs.requests.DEFAULT_ENGINE`."""
    if isinstance(ref, ServeEngine):
        return ref

    ref = reference(ref, "--engine")
    engine = load_catalog_profile(ServeEngine, "engines", ref, "--engine", "serving engine",
                                  "an engine YAML file")
    check_cited(engine, ref)
    return engine


def check_cited(engine: ServeEngine, where: str) -> None:
    """An engine file cites every estimate field it sets (``sources``: field -> citation),
    and each key of ``sources`` names one of those fields: an uncited figure, or a
    citation under a misspelt key, is refused (the class defaults are cited in this
    module). Objects built in code are not checked."""
    import difflib

    for key in engine.sources:
        if key not in ENGINE_FIELDS:
            near = difflib.get_close_matches(key, ENGINE_FIELDS, n=1)
            hint = (f"did you mean {near[0]}?" if near
                    else f"expected one of {', '.join(ENGINE_FIELDS)}")
            raise InputError(f"{where}: sources.{key}: not a field an engine cites; {hint}")
    uncited = [f for f in ENGINE_FIELDS
               if f in engine.model_fields_set and f not in engine.sources]
    if uncited:
        raise InputError(f"{where}: sources: no citation for {', '.join(uncited)}; expected "
                         "field: citation (the engine file and version, or what fitted or "
                         "assumed it) for every field the file sets")
