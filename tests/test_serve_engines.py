"""Serving engine profiles (hardware_catalog/engines/): what each engine's kernels and host
do, chosen with ``--engine`` on ``serve`` and ``procure --serve`` and ``engine=`` in the API."""

from __future__ import annotations

import json

import pytest

import planner
import planner.catalog as catalog
from planner.errors import InputError
from planner.specs.requests import DEFAULT_ENGINE, engine_profile
from planner.specs.serve import ENGINE_FIELDS, ServeEngine, load_engine

from test_cli import run

PROFILES = ("trtllm", "vllm", "sglang")
# one layout, so the search is a single row and the estimates compare like for like
ONE = ["serve", "-m", "llama3-8b", "-c", "dgx-h100-superpod", "--isl", "512", "--osl", "64",
       "--gpus", "1", "--rate", "1", "--fix", "tp=1", "--fix", "pp=1", "--fix",
       "weight_dtype=bf16", "--fix", "kv_dtype=bf16", "--fix", "concurrency=64", "--fix",
       "prefill_chunk=2048", "--fix", "mode=aggregated", "--json"]


def test_each_profile_loads_and_cites_every_field():
    assert set(PROFILES) == set(catalog.names("engines"))
    fitted = ServeEngine()  # the class defaults tools/calibrate_serving.py's fit is copied to
    for name in PROFILES:
        e = load_engine(name)
        assert e.name == name and e.launcher == name and e.version
        assert set(ENGINE_FIELDS) <= set(e.sources), name
        for f in ENGINE_FIELDS:
            if e.sources[f].startswith("assumed: TensorRT-LLM's"):
                assert getattr(e, f) == getattr(load_engine("trtllm"), f), (name, f)
            if e.sources[f].startswith("fitted by tools/calibrate_serving.py"):
                assert getattr(e, f) == getattr(fitted, f), (name, f)
    trt = load_engine("trtllm")
    assert [f for f in ENGINE_FIELDS if trt.sources[f].startswith("fitted")] == [
        "request_overhead_ms", "kernel_fraction"]
    assert engine_profile(None).name == DEFAULT_ENGINE == "trtllm"
    assert load_engine("TensorRT-LLM").name == "trtllm"
    with pytest.raises(InputError, match="--engine None: expected a catalog name"):
        load_engine(None)  # no default below the request


def test_a_bad_engine_name_lists_the_choices(capsys):
    with pytest.raises(InputError, match=r"--engine 'vlm'.*closest: vllm.*sglang, trtllm, vllm"):
        load_engine("vlm")
    code, _, err = run(capsys, *ONE[:-1], "--engine", "tgi")
    assert code == 2 and "sglang, trtllm, vllm" in " ".join(err.split()) and "'tgi'" in err
    code, _, err = run(capsys, "procure", "-m", "llama3-8b", "--tokens", "1e9", "--engine", "vllm")
    assert code == 2 and "--serve" in err


def test_request_overhead_raises_ttft_by_that_much(capsys, tmp_path):
    slow = tmp_path / "slow.yaml"
    slow.write_text("name: slow-host\nrequest_overhead_ms: 13.5\nlauncher: vllm\n"
                    "sources: {request_overhead_ms: 'what-if: 10 ms more host time'}\n")
    code, out, err = run(capsys, *ONE)
    assert code == 0, err
    base = json.loads(out)
    code, out, err = run(capsys, *ONE, "--engine", str(slow))
    assert code == 0, err
    data = json.loads(out)
    assert base["engine"]["name"] == "trtllm" and data["engine"]["name"] == "slow-host"
    gap = load_engine(str(slow)).request_overhead_ms - load_engine("trtllm").request_overhead_ms
    # at 1 request/s nobody queues: the extra host time is all the TTFT moves
    assert data["estimate"]["ttft_ms"] - base["estimate"]["ttft_ms"] == pytest.approx(gap, abs=0.05)
    assert data["estimate"]["tpot_ms"] == pytest.approx(base["estimate"]["tpot_ms"])


def test_unshared_gqa_reads_raise_tpot_in_the_api():
    args = ("llama3-8b", "dgx-h100-superpod", 2048, 64)
    fix = {"tp": 1, "pp": 1, "weight_dtype": "bf16", "kv_dtype": "bf16", "concurrency": 64,
           "prefill_chunk": 2048, "mode": "aggregated"}
    shared = planner.serve(*args, rate_rps=4, gpus=1, fix=fix, engine="vllm")
    mha = planner.serve(*args, rate_rps=4, gpus=1, fix=fix,
                        engine=load_engine("vllm").model_copy(update={"gqa_kv_shared": False}))
    assert mha.plan == shared.plan
    assert mha.estimate.tpot_ms > shared.estimate.tpot_ms


def test_launch_prints_the_named_engine_only(capsys):
    code, out, err = run(capsys, *ONE, "--launch", "--engine", "sglang")
    assert code == 0, err
    data = json.loads(out)
    assert data["engine"]["name"] == "sglang" and set(data["launch"]) == {"sglang"}
    code, out, err = run(capsys, *ONE, "--launch")  # the default engine: every command
    assert code == 0, err
    assert set(json.loads(out)["launch"]) == set(PROFILES)
    code, out, err = run(capsys, *ONE[:-1], "--engine", "vllm")
    assert code == 0, err
    assert "engine: vllm" in out


def test_catalog_lists_engines(capsys):
    code, out, _ = run(capsys, "catalog", "engines", "--json")
    assert code == 0
    assert {r["name"] for r in json.loads(out)} == set(PROFILES)


def test_procure_serve_uses_the_engine(capsys, tmp_path):
    slow = tmp_path / "slow.yaml"
    slow.write_text("name: slow-host\nrequest_overhead_ms: 1000\n"
                    "sources: {request_overhead_ms: 'what-if: a second of host time'}\n")
    # TTFT is ~25 ms with trtllm's host time; a second of it misses a 500 ms SLO
    code, _, err = run(capsys, "procure", "-m", "llama3-8b", "--serve", "--rate", "2", "--isl",
                       "512", "--osl", "64", "-c", "dgx-h100-superpod", "--ttft-ms", "500",
                       "--engine", str(slow))
    assert code == 1 and "no GPU type serves 2 requests/s" in err


def test_the_api_costs_with_the_requests_default_engine():
    """planner.evaluate_serve and planner.serve without an engine cost with the one default,
    the request's (DEFAULT_ENGINE); the orchestration below takes the engine explicitly, so
    it cannot fall back on the v0.6.1 class defaults (the validation engine), which differ."""
    from formulations.serve.space import ServeSpace
    from planner.orchestration.serve import plan_serve
    from planner.specs.loaders import load_cluster, load_model
    from planner.specs.serve import ServeWorkload

    plan = {"tp": 2, "pp": 1, "concurrency": 16, "weight_dtype": "fp8", "kv_dtype": "fp8",
            "prefill_chunk": 2048}
    args = ("llama3-8b", "dgx-h100-superpod", plan, 1024, 128)
    plain = planner.evaluate_serve(*args, rate_rps=5.0)
    named = planner.evaluate_serve(*args, rate_rps=5.0, engine=DEFAULT_ENGINE)
    old = planner.evaluate_serve(*args, rate_rps=5.0, engine=ServeEngine())
    assert plain.tpot_ms == named.tpot_ms and plain.ttft_ms == named.ttft_ms
    assert old.tpot_ms != named.tpot_ms
    m, c = load_model("llama3-8b"), load_cluster("dgx-h100-superpod")
    space = ServeSpace(tp=(2,), pp=(1,), concurrency=(16,), weight_dtype=("fp8",),
                       kv_dtype=("fp8",), prefill_chunk=(2048,))
    with pytest.raises(TypeError, match="engine"):
        plan_serve(m, [c], ServeWorkload(isl=1024, osl=128, rate_rps=5.0), space=space)


def test_the_serving_cost_model_requires_its_engine():
    """One default engine per workload, applied at the API edge (planner serve's trtllm):
    below it, every function that costs a serving step takes the engine explicitly, so a
    call without one cannot silently cost with the v0.6.1 fit (ServeEngine's class
    defaults) and disagree with planner.evaluate_serve."""
    import inspect

    from formulations.serve import space
    from planner.costmodel.serve import evaluate, step
    from planner.orchestration import serve as orchestration
    from planner.validation import serve_sim

    functions = [step.replica_net, step.decode_step_s, step.prefill, evaluate.replica_perf,
                 evaluate.evaluate_serve, orchestration.reachable, orchestration.pareto_front,
                 serve_sim.simulate, space.pool_rows, space.tables, space.timed_tables]
    for f in functions:
        f = inspect.unwrap(f)
        param = inspect.signature(f).parameters["engine"]
        assert param.default is inspect.Parameter.empty, f.__qualname__
