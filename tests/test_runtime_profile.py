"""One runtime profile (issue 37 item 2): a training framework and a serving engine are both
applied to a cluster by :func:`planner.costmodel.runtime.apply_profile`; each workload's
default profile is declared once, in :mod:`planner.specs.requests`, and the layers below
take the resolved profile explicitly; the search space receives a framework's defaults
once; the frameworks that run a solve's answer are worked out once, by the API."""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil

import pytest

import planner
from planner.costmodel import frameworks
from planner.costmodel.runtime import apply_profile
from planner.costmodel.serve.step import prefill
from planner.specs.framework import load_framework
from planner.specs.loaders import load_cluster, load_model
from planner.specs.serve import ServePlan, load_engine

from test_cli import run


def test_apply_profile_sets_what_each_runtime_runs():
    """A framework sets its kernels (attention backend, sharding prefetch, loss buffers,
    expert host time) and, on a GPU it was fitted on, its kernel_fraction; an engine sets
    its kernel_fraction. None, and a second application, change nothing."""
    c = load_cluster("dgx-h100-superpod")
    titan = load_framework("torchtitan")
    fw = apply_profile(c, titan).gpu.efficiency
    assert fw.attention_backend == titan.kernels.attention_backend
    assert fw.sharded_overlap == titan.kernels.fsdp_prefetch
    assert fw.moe_expert_host_us == titan.kernels.moe_expert_host_us
    assert fw.kernel_fraction == titan.fit[c.gpu.name].kernel_fraction
    half = load_engine("trtllm").model_copy(update={"kernel_fraction": 0.5})
    eng = apply_profile(c, half).gpu.efficiency
    assert eng.kernel_fraction == 0.5
    # an engine leaves the training framework's kernels as the GPU file states them
    assert eng.attention_backend == c.gpu.efficiency.attention_backend
    assert apply_profile(c, None) is c
    once = apply_profile(c, half)
    assert apply_profile(once, half) is once
    with pytest.raises(TypeError, match="FrameworkProfile or a ServeEngine"):
        apply_profile(c, "trtllm")  # type: ignore[arg-type]


def test_the_serving_step_runs_at_the_engines_kernel_speed():
    """A prompt's prefill on one GPU (tp = pp = 1: no exchange) is GEMMs and attention,
    scaled by the engine's kernel_fraction, plus memory-bound kernels that are not: at half
    the fraction it takes more than 1.5x and at most 2x as long."""
    m, c = load_model("llama3-8b"), load_cluster("dgx-h100-superpod")
    plan = ServePlan(tp=1, pp=1, concurrency=8, weight_dtype="bf16", kv_dtype="bf16",
                     prefill_chunk=8192)
    trt = load_engine("trtllm")
    full = prefill(m, c, plan, 8192, trt.model_copy(update={"kernel_fraction": 1.0}))
    half = prefill(m, c, plan, 8192, trt.model_copy(update={"kernel_fraction": 0.5}))
    assert 1.5 * full.latency_s < half.latency_s <= 2.0 * full.latency_s * (1 + 1e-9)


#: parameters that carry a runtime profile
PROFILE_PARAMS = ("engine", "profile", "framework", "runtime")
#: dataclass fields of that name that are not a function's input profile
NOT_INPUTS = {
    # the result's record of the framework the space obeyed (its name)
    "planner.orchestration.train.SolveResult.__init__",
    # the search bounds carry the profile the API resolved (planner.api._space_options);
    # None there is the resolved "no framework" (left: SpaceOptions is built in many places)
    "formulations.train.options.SpaceOptions.__init__",
}


def _functions(package: str):
    pkg = importlib.import_module(package)
    for info in pkgutil.walk_packages(pkg.__path__, package + "."):
        mod = importlib.import_module(info.name)
        for obj in vars(mod).values():
            members = [v for v in vars(obj).values() if inspect.isfunction(v)] \
                if inspect.isclass(obj) else [obj]
            for f in members:
                if inspect.isfunction(f) and f.__module__ == mod.__name__:
                    yield f"{mod.__name__}.{f.__qualname__}", f


def test_below_the_requests_every_profile_is_required():
    """Each workload's default profile is declared once, in the request specs
    (DEFAULT_FRAMEWORK: none, DEFAULT_ENGINE: trtllm); below planner.api, every function of
    the cost model, the formulations, the orchestration and the procurement that takes a
    profile takes it without a default, and the loaders have no default name either."""
    from planner.specs import requests

    assert requests.DEFAULT_FRAMEWORK is None and requests.DEFAULT_ENGINE == "trtllm"
    defaulted = []
    for package in ("planner.costmodel", "formulations", "planner.orchestration",
                    "planner.procurement"):
        for name, f in _functions(package):
            params = inspect.signature(inspect.unwrap(f)).parameters
            defaulted += [f"{name}({p})" for p in PROFILE_PARAMS if p in params
                          and params[p].default is not inspect.Parameter.empty
                          and name not in NOT_INPUTS]
    assert not defaulted
    assert inspect.signature(apply_profile).parameters["profile"].default is \
        inspect.Parameter.empty
    for loader in (load_framework, load_engine):
        assert inspect.signature(loader).parameters["ref"].default is inspect.Parameter.empty


def test_the_space_receives_the_framework_defaults_once(monkeypatch):
    """build_space fills a framework's defaults for the settings the caller left open, once;
    the space only checks them (a base without them is refused, not filled again)."""
    from formulations.train import space as space_module
    from formulations.train.space import SearchSpace, SpaceOptions
    from planner.orchestration import train
    from planner.specs.plan_base import model_defaults

    calls = []
    real = frameworks.framework_defaults

    def counted(*args, **kw):
        calls.append(args[0].name)
        return real(*args, **kw)

    for module in (train, space_module, frameworks):
        if hasattr(module, "framework_defaults"):
            monkeypatch.setattr(module, "framework_defaults", counted)
    m, c = load_model("llama3-8b"), load_cluster("dgx-h100-superpod", 8)
    opts = SpaceOptions(framework=load_framework("torchtitan"))
    space = train.build_space(m, c, {"tp": 2}, None, opts)
    assert calls == ["torchtitan"]
    assert space.base["attention"] in opts.framework.attention
    with pytest.raises(ValueError, match="lacks torchtitan's"):
        SearchSpace(m, c, model_defaults(m), {}, opts)


def test_the_frameworks_that_run_the_answer_are_worked_out_once(capsys, monkeypatch):
    """planner.solve's result names the catalog frameworks that run its best plan (each
    checked against the rules), and planner solve prints them from it: the rules are read
    for the catalog once per solve."""
    calls = []
    real = frameworks.catalog_violations

    def counted(*args, **kw):
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(frameworks, "catalog_violations", counted)
    args = ["-m", "llama3-8b", "-c", "dgx-h100-superpod", "--gpus", "8", "--fix", "tp=2",
            "--fix", "pp=1", "--max-microbatch", "1", "--max-virtual-stages", "1"]
    code, out, err = run(capsys, "solve", *args, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert len(calls) == 1
    m, c = load_model("llama3-8b"), load_cluster("dgx-h100-superpod", 8)
    plan = planner.Plan.model_validate(data["plan"])
    runs = [n for n, v in real(plan, m, c).items() if not v]
    assert data["frameworks_that_run_it"] == runs
    res = planner.solve("llama3-8b", "dgx-h100-superpod", gpus=8, fix={"tp": 2, "pp": 1},
                        max_microbatch=1, max_virtual_stages=1)
    assert res.frameworks_that_run_it == runs and len(calls) == 2
    assert res.to_json()["frameworks_that_run_it"] == runs
    code, out, err = run(capsys, "solve", *args)
    assert code == 0, err
    assert "frameworks that run this plan: " + ", ".join(runs) in " ".join(out.split())
    assert len(calls) == 3

