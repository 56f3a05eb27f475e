"""The validation corpus: every published training run the project costs, by source.

A *source* is one published table, paper or benchmark document (one team's measurements).
Validation holds out each source in turn (``tools/calibrate.py``); the error band on every
answer comes from those held-out residuals (:mod:`planner.validation.band`).

Runs come from two kinds of files under ``hardware_catalog/calibration/``:

- the original calibration sets with their own formats (Korthikanti et al. 2022, NVIDIA's NeMo
  24.07/25.02 tables, torchtitan's H100 benchmarks), read through their modules;
- ``corpus/*.yaml``: one file per source in one schema (:class:`CorpusFile`): the citation, the
  framework that ran it, the plan fields the source states (``plan``) and those it does not
  (``assumed``, with why), and the measured figure.

The residual of a run is ``predicted throughput / measured throughput - 1``, which equals
``measured time / predicted time - 1``: positive means the model is optimistic (predicts the
run faster than it ran), and ``|residual| <= b`` means the measured iteration time lies within
``+-b`` of the prediction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Callable, Literal

import yaml
from pydantic import Field

from planner.costmodel.frameworks import unstated_defaults
from planner.costmodel.runtime import apply_profile
from planner.costmodel.train.evaluator import Estimate, evaluate
from planner.errors import InputError
from planner.specs.base import Spec
from planner.specs.cluster import ClusterSpec
from planner.specs.framework import load_framework
from planner.specs.loaders import load_cluster, load_model
from planner.specs.model import ModelSpec
from planner.specs.gpu import GPUSpec
from planner.specs.plan import Plan
from planner.specs.validate import validate
from planner.validation.band import generation
from planner.validation.korthikanti import FRAMEWORK, MODES, calibration_data, calibration_plan
from planner.validation.torchtitan import FRAMEWORK as TORCHTITAN
from planner.validation.torchtitan import (
    plannable_runs, run_cluster, run_model, run_plan, torchtitan_data)
from planner.validation.nemo import nemo_data, recipe_cluster, recipe_model, recipe_plan

Metric = Literal["tokens_per_s_per_gpu", "iteration_time_s"]

class CorpusSource(Spec):
    """Who measured the runs of one file, and how they ran."""

    id: str = Field(min_length=1, description="short stable key of the source")
    citation: str = Field(min_length=1, description="paper + table/figure, or document + page")
    url: str | None = Field(None, description="where the source can be read")
    framework: str = Field(min_length=1, description="what ran the jobs, as the source names it "
                           "(the label validation reports by)")
    framework_family: Literal["megatron", "torchtitan", "pytorch-fsdp", "deepspeed", "other"] = Field(
        description="the framework's family, for grouping held-out residuals: Megatron-LM, "
        "Megatron-Core and NeMo are one family")
    profile: str | None = Field(None, description="the framework profile the runs are costed with "
                                "(hardware_catalog/frameworks); null: the catalog GPU as it is")
    metric: Metric = Field(description="what `measured` is; throughput figures a source gives as "
                           "TFLOP/s or MFU are converted by the file's author (see each run's note)")
    notes: str | None = Field(None, description="what the source says about all its runs")


class CorpusRun(Spec):
    """One published run: the plan as far as the source states it, and what it measured."""

    name: str = Field(min_length=1, description="unique run name")
    model: str = Field(min_length=1, description="catalog model name or a key of the file's models")
    cluster: str = Field(min_length=1, description="catalog cluster the run's GPUs match")
    gpus: int = Field(gt=0, description="GPUs of the run")
    gpu: dict[str, float] = Field(default_factory=dict, description="GPU fields that differ "
                                  "from the catalog's (e.g. hbm_gib of a 40 GB A100)")
    plan: dict[str, Any] = Field(description="plan fields the source states")
    assumed: dict[str, Any] = Field(default_factory=dict, description="plan fields the source does "
                                    "not state, as assumed for this run")
    assumed_why: str | None = Field(None, description="why the assumed values")
    measured: float = Field(gt=0, description="the published figure, in the source's metric")
    note: str | None = Field(None, description="the table row, conversions, caveats")


class CorpusFile(Spec):
    source: CorpusSource
    network_GBps_per_gpu: float | None = Field(
        None, gt=0, description="the inter-node bandwidth per GPU the source states, where it "
        "differs from the catalog cluster's outermost level (which it replaces)")
    network_why: str | None = Field(None, description="where the source states it")
    sharded_overlap: bool | None = Field(
        None, description="the source states that its sharded (ZeRO-3/FSDP) traffic is "
        "scheduled behind compute every microbatch (GPUEfficiency.sharded_overlap), for a "
        "framework no profile describes; null: the profile's, or the catalog GPU's")
    sharded_overlap_why: str | None = Field(None, description="where the source states it")
    defaults: dict[str, Any] = Field(default_factory=dict, description="plan fields every run "
                                     "of the source states")
    assumed: dict[str, Any] = Field(default_factory=dict, description="plan fields no run "
                                    "states, assumed for all")
    assumed_why: str | None = Field(None, description="why the shared assumed values")
    models: dict[str, dict[str, Any]] = Field(default_factory=dict, description="models not in "
                                              "the catalog, as ModelSpec fields")
    runs: list[CorpusRun] = Field(min_length=1)


@dataclass(frozen=True)
class Run:
    """One published run, ready to cost."""

    name: str
    source: str
    citation: str
    framework: str
    family: str
    profile: str | None
    model: ModelSpec
    cluster: ClusterSpec  # before the framework profile is applied
    plan: Plan
    metric: Metric
    measured: float
    origin: str  # the file under hardware_catalog/calibration/ the run is read from

    @property
    def generation(self) -> str:
        return generation(self.cluster.gpu.name)

    @property
    def dtype(self) -> str:
        return self.plan.dtype

    @property
    def gpus(self) -> int:
        return self.cluster.num_gpus

    @property
    def seq_len(self) -> int:
        return self.plan.seq_len

    @property
    def moe(self) -> bool:
        return self.model.moe is not None

    def costed_cluster(self, profile_fit: bool = True) -> ClusterSpec:
        """The cluster as the run's framework runs it; ``profile_fit=False`` drops the
        profile's fitted parameters (the fit then comes from the caller)."""
        if self.profile is None:
            return self.cluster
        prof = load_framework(self.profile)
        if not profile_fit:
            prof = prof.model_copy(update={"fit": {}})
        return apply_profile(self.cluster, prof)

    def estimate(self, cluster: ClusterSpec | None = None, plan: Plan | None = None) -> Estimate:
        return evaluate(self.model, cluster or self.costed_cluster(), plan or self.plan)

    def residual(self, est: Estimate, plan: Plan | None = None) -> float | None:
        """predicted throughput / measured - 1 (None: the plan does not fit)."""
        if not est.feasible or not est.iteration_time_s:
            return None
        if self.metric == "iteration_time_s":
            return self.measured / est.iteration_time_s - 1
        p = plan or self.plan
        tps = p.global_batch_size * p.seq_len / est.iteration_time_s / self.gpus
        return tps / self.measured - 1


def _corpus_folder():
    return resources.files("hardware_catalog") / "calibration" / "corpus"


def _corpus_names() -> list[str]:
    return sorted(e.name for e in _corpus_folder().iterdir() if e.name.endswith(".yaml"))


def _corpus_file(name: str) -> CorpusFile:
    data = yaml.safe_load((_corpus_folder() / name).read_text())
    return validate(CorpusFile, data, f"calibration corpus file {name}")


def _file_runs(fname: str, f: CorpusFile) -> list[Run]:
    runs = []
    for r in f.runs:
        where = f"calibration corpus file {fname}, run {r.name}"
        model = (validate(ModelSpec, dict(f.models[r.model], name=r.model), f"{where}: model")
                 if r.model in f.models else load_model(r.model))
        cluster = load_cluster(r.cluster, r.gpus)
        if r.gpu:  # validated: an unknown GPU field is refused, not set
            gpu = validate(GPUSpec, {**cluster.gpu.model_dump(), **r.gpu}, f"{where}: gpu")
            cluster = cluster.model_copy(update={"gpu": gpu})
        if f.network_GBps_per_gpu is not None:
            *inner, outer = cluster.topology
            cluster = cluster.model_copy(update={"topology": [*inner, outer.model_copy(
                update={"bandwidth_GBps": f.network_GBps_per_gpu})]})
        if f.sharded_overlap is not None:
            if f.source.profile is not None:
                raise InputError(f"{fname}: sharded_overlap is the profile's "
                                 f"({f.source.profile}); state it only for a source without one")
            eff = cluster.gpu.efficiency.model_copy(update={"sharded_overlap": f.sharded_overlap})
            cluster = cluster.model_copy(update={"gpu": cluster.gpu.model_copy(
                update={"efficiency": eff})})
        fields = {**f.defaults, **f.assumed, **r.plan, **r.assumed}
        if "dp" not in fields:
            per = fields.get("tp", 1) * fields.get("pp", 1) * fields.get("cp", 1)
            if r.gpus % per:
                raise InputError(f"{fname} run {r.name}: gpus {r.gpus} is not a multiple of "
                                 f"tp x pp x cp = {per}")
            fields["dp"] = r.gpus // per
        if f.source.profile is not None:  # what the source leaves unstated: its framework's
            fields = unstated_defaults(load_framework(f.source.profile), fields)
        plan = validate(Plan, fields, f"{where}: plan")
        runs.append(Run(r.name, f.source.id, f.source.citation, f.source.framework,
                        f.source.framework_family, f.source.profile, model, cluster, plan,
                        f.source.metric, r.measured, f"corpus/{fname}"))
    return runs


CITE_KORTHIKANTI = ("Korthikanti et al., 'Reducing Activation Recomputation in Large Transformer "
                    "Models', MLSys 2023 (arXiv 2205.05198), Table 5 (Selene, A100 80GB)")


def _korthikanti_runs() -> list[Run]:
    data = calibration_data()
    base = load_cluster("dgx-a100-superpod")
    out = []
    for name, run in data["runs"].items():
        model = load_model(name)
        for mode in MODES:
            plan = calibration_plan(run, data["models"][name]["seq_len"], mode)
            out.append(Run(f"korthikanti-{name}-{mode}", "korthikanti2022", CITE_KORTHIKANTI,
                           "Megatron-LM (2022)", "megatron", FRAMEWORK, model,
                           base.resized(run["gpus"]), plan, "iteration_time_s",
                           float(data["iteration_time_s"][name][mode]), "korthikanti2022.yaml"))
    return out


def _nemo_runs() -> list[Run]:
    data = nemo_data()
    out = []
    for row in data["rows"]:
        src = row["name"].split("-")[0]  # nemo2407 / nemo2502
        out.append(Run(row["name"], src, data["sources"][src], "NeMo (Megatron-Core)",
                       "megatron", None, recipe_model(data, row["model"]), recipe_cluster(row),
                       recipe_plan(row), "tokens_per_s_per_gpu", float(row["measured"]),
                       "nvidia_nemo_2407_2502.yaml"))
    return out


def _torchtitan_runs() -> list[Run]:
    data = torchtitan_data()
    out = []
    for r in plannable_runs(data):
        src = r["source"].split()[0]
        model = run_model(r)
        plan = run_plan(r, model)
        # torchtitan logs local_batch x fsdp x seq tokens per step: the plan's global batch
        out.append(Run(r["name"], src, data["sources"][src], "torchtitan", "torchtitan",
                       TORCHTITAN, model, run_cluster(r), plan, "tokens_per_s_per_gpu",
                       float(r["measured_tps_per_gpu"]), "torchtitan_h100.yaml"))
    return out


#: The original calibration sets, each read by its own module, by file.
LEGACY: dict[str, Callable[[], list[Run]]] = {
    "korthikanti2022.yaml": _korthikanti_runs, "nvidia_nemo_2407_2502.yaml": _nemo_runs,
    "torchtitan_h100.yaml": _torchtitan_runs}


@lru_cache(maxsize=None)
def runs_from(origin: str) -> tuple[Run, ...]:
    """The runs of one file (``Run.origin``: a legacy set's file name or ``corpus/NAME``)."""
    if origin in LEGACY:
        return tuple(LEGACY[origin]())
    name = origin.removeprefix("corpus/")
    return tuple(_file_runs(name, _corpus_file(name)))


@lru_cache(maxsize=1)
def corpus_runs() -> tuple[Run, ...]:
    """Every run of every source, in a stable order."""
    runs = [r for origin in (*LEGACY, *(f"corpus/{n}" for n in _corpus_names()))
            for r in runs_from(origin)]
    names = [r.name for r in runs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise InputError(f"calibration corpus: run names {dup} appear more than once")
    return tuple(runs)


def sources() -> dict[str, str]:
    """source id -> citation."""
    return {r.source: r.citation for r in corpus_runs()}


def gpu_bucket(gpus: int) -> str:
    """The GPU-count decade a run falls in: '1-9', '10-99', ..."""
    lo = 10 ** int(math.floor(math.log10(gpus)))
    return f"{lo:,}-{10 * lo - 1:,}"


def seq_bucket(seq_len: int) -> str:
    if seq_len <= 4096:
        return "<=4K"
    if seq_len <= 16384:
        return "8K-16K"
    return ">16K"


#: GPU catalog name -> the fit group of its own efficiency parameters (tools/calibrate.py).
#: a GPU's fit group: the H200 is the H100's die at the same 700 W, the GB200 the B200's die
#: (each reads its own kernel table or its sibling's at its own peaks), so one framework-level
#: fit covers both, fitted on both GPUs' runs
GPU_GROUPS: dict[str, str] = {"a100-sxm-80gb": "A100", "h100-sxm": "H100", "h200": "H100",
                              "b200": "B200", "gb200": "B200"}


def fit_group(run: Run) -> str | None:
    """Which fitted parameters a run's prediction reads: its framework's own fit on its GPU
    ('H100 torchtitan'), else its GPU's ('A100'); None where no fit reads its GPU."""
    gpu = run.cluster.gpu.name
    if run.profile is not None and gpu in load_framework(run.profile).fit:
        return f"{GPU_GROUPS.get(gpu, generation(gpu))} {run.profile}"
    return GPU_GROUPS.get(gpu)
