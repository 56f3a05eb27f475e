"""``planner serve``: the worked example, JSON keys, fixed knobs, GPU budgets, backends,
Hugging Face configs, the plot, infeasible answers and bad input; a looser SLO never
needs more GPUs."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formulations.serve.space import ServeSpace
from planner.orchestration.serve import plan_serve
from planner.specs.loaders import load_cluster, load_model
from planner.specs.serve import ServeWorkload, load_engine

from conftest import DATA
from test_cli import run

BASE = ["serve", "-m", "llama3-70b", "-c", "dgx-h100-superpod", "--isl", "2048", "--osl", "256"]
FAST = ["--fix", "kv_dtype=fp8", "--fix", "pp=1"]
KEYS = ("ttft_ms", "tpot_ms", "ttft_p99_ms", "tpot_p99_ms", "output_tokens_per_s",
        "output_tokens_per_s_per_gpu", "requests_per_s", "memory_per_gpu_gib", "feasible",
        "reasons")


def _json(capsys, *args: str) -> dict:
    code, out, err = run(capsys, *BASE, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_worked_example_meets_the_slos(capsys):
    data = _json(capsys, "--ttft-ms", "500", "--tpot-ms", "30", "--rate", "20", *FAST)
    est = data["estimate"]
    assert set(KEYS) <= set(est) and {"plan", "estimate", "solver"} <= set(data)
    assert est["feasible"] and est["reasons"] == []
    assert est["ttft_p99_ms"] <= 500 and est["tpot_p99_ms"] <= 30
    assert est["requests_per_s"] == pytest.approx(20)
    assert est["output_tokens_per_s"] == pytest.approx(20 * 256)
    assert data["solver"]["status"] == "optimal" and data["solver"]["objective"] == "gpus"


def test_backends_give_the_same_fleet(capsys):
    args = ("--ttft-ms", "500", "--tpot-ms", "30", "--rate", "20", "--objective", "cost",
            "--fix", "weight_dtype=fp8", "--fix", "tp=4", *FAST)
    values = {_json(capsys, *args, "--backend", b)["solver"]["objective_value"]
              for b in ("cpsat", "milp", "exhaustive")}
    assert len(values) == 1


def test_fixed_knobs_are_kept(capsys):
    data = _json(capsys, "--rate", "5", "--fix", "tp=4", "--fix", "concurrency=64",
                 "--fix", "weight_dtype=fp8", "--fix", "mode=aggregated", *FAST)
    plan = data["plan"]
    assert (plan["tp"], plan["concurrency"], plan["weight_dtype"]) == (4, 64, "fp8")
    assert "prefill" not in plan and data["solver"]["mode"] == "aggregated"


@pytest.mark.slow(reason="three serving searches through the CLI")
@pytest.mark.parametrize("gpus", [1, 2, 4])
def test_a_gpu_budget_inside_one_node(capsys, gpus):
    code, out, err = run(capsys, "serve", "-m", "llama3-8b", "-c", "dgx-h100-superpod", "--isl",
                         "1024", "--osl", "128", "--gpus", str(gpus), "--fix", "kv_dtype=fp8",
                         "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["estimate"]["num_gpus"] <= gpus and data["estimate"]["output_tokens_per_s"] > 0


def test_offline_question_and_pareto_plot(capsys, tmp_path):
    png = tmp_path / "front.png"
    data = _json(capsys, "--pareto", "--plot", str(png), *FAST)
    assert data["estimate"]["offline"] and data["estimate"]["num_gpus"] >= 1
    front = data["pareto"]
    assert len(front) >= 2 and png.stat().st_size > 5000
    users = [p["tokens_per_s_per_user"] for p in front]
    per_gpu = [p["tokens_per_s_per_gpu"] for p in front]
    assert users == sorted(users, reverse=True) and per_gpu == sorted(per_gpu)


def test_hugging_face_config_and_text_output(capsys):
    code, out, _ = run(capsys, "serve", "-m", str(DATA / "mixtral-8x7b-config.json"), "-c",
                       "dgx-h100-superpod", "--isl", "1024", "--osl", "256", "--rate", "10",
                       "--tpot-ms", "50", "--fix", "kv_dtype=fp8", "--fix", "pp=1")
    assert code == 0
    assert "TTFT" in out and "requests/s" in out and "GPUs" in out


def test_unmeetable_slo_is_infeasible(capsys):
    code, _, err = run(capsys, *BASE, "--tpot-ms", "0.5", "--rate", "1", *FAST)
    assert code == 1 and "infeasible" in err and "hint" in err


@pytest.mark.parametrize("args,message", [
    (["--isl", "0"], "isl"),
    (["--rate", "nan"], "--rate"),
    (["--rate", "-1"], "--rate"),
    (["--ttft-ms", "inf"], "--ttft-ms"),
    (["--percentile", "100"], "--percentile"),
    (["--fix", "nonsense=1"], "nonsense"),
    (["--fix", "tp=abc"], "tp"),
    (["--fix", "tp"], "FIELD=VALUE"),
    (["--fix", "weight_dtype=fp3"], "weight_dtype"),
    (["--fix", "mode=both"], "mode"),
    (["--objective", "cost"], "--rate"),
    (["--rate", "5", "--objective", "throughput"], "offline"),
    (["--gpus", "0"], "--gpus"),
    (["-m", "nope"], "nope"),
    (["--plot", "/nonexistent/x.png"], "--plot"),
])
def test_bad_input_names_the_field(capsys, args, message):
    code, _, err = run(capsys, *BASE, *args)
    assert code == 2 and message in err


def test_no_cluster_is_bad_input(capsys):
    code, _, err = run(capsys, "serve", "-m", "llama3-8b", "--isl", "8", "--osl", "8")
    assert code == 2 and "--cluster" in err


L8 = load_model("llama3-8b")
H100 = load_cluster("dgx-h100-superpod")
TINY = ServeSpace(tp=(1, 2), pp=(1,), concurrency=(4, 16, 64, 256), weight_dtype=("fp8",),
                  kv_dtype=("fp8",), prefill_chunk=(2048,))


@settings(max_examples=12, deadline=None)
@given(ttft=st.sampled_from([60.0, 120.0, 400.0, 2000.0]), tpot=st.sampled_from(
    [8.0, 15.0, 40.0, 200.0]), loose=st.sampled_from([1.0, 1.5, 4.0]),
    rate=st.sampled_from([5.0, 40.0, 300.0]))
def test_a_looser_slo_never_needs_more_gpus(ttft, tpot, loose, rate):
    def gpus(t1, t2):
        w = ServeWorkload(isl=1024, osl=128, rate_rps=rate, ttft_ms=t1, tpot_ms=t2)
        try:
            return plan_serve(L8, [H100], w, space=TINY,
                              engine=load_engine("trtllm")).estimate.num_gpus
        except Exception as e:  # infeasible: needs "infinitely many"
            assert "no fleet" in str(e)
            return float("inf")

    assert gpus(ttft * loose, tpot * loose) <= gpus(ttft, tpot)


def test_simulation_checks_the_queueing_model(capsys):
    """The seeded simulation of the worked example's plan lands within 15 % of the
    model's P99 TTFT and TPOT (docs/serving.md gives the figures), the same twice."""
    args = ("--ttft-ms", "500", "--tpot-ms", "30", "--rate", "20", "--simulate", "5000", *FAST)
    data = _json(capsys, *args)
    sim, est = data["simulation"], data["estimate"]
    assert sim == _json(capsys, *args)["simulation"]
    assert sim["ttft_p99_ms"] == pytest.approx(est["ttft_p99_ms"], rel=0.15)
    assert sim["tpot_p99_ms"] == pytest.approx(est["tpot_p99_ms"], rel=0.15)
    assert sim["ttft_p50_ms"] <= sim["ttft_p99_ms"]


def test_simulation_needs_a_rate(capsys):
    code, _, err = run(capsys, *BASE, "--simulate", "1000", *FAST)
    assert code == 2 and "--rate" in err


@pytest.mark.slow(reason="a serving procurement over the catalog")
def test_procure_serve_cheapest_fleet(capsys):
    args = ["procure", "-m", "llama3-8b", "--serve", "--rate", "50", "--isl", "1024", "--osl",
            "128", "--ttft-ms", "300", "--tpot-ms", "40", "--gpus", "h100,b200", "--json"]
    code, out, err = run(capsys, *args)
    assert code == 0, err
    data = json.loads(out)
    best = data["best"]["estimate"]
    per = [o["estimate"]["usd_per_hour"] for o in data["options"] if "estimate" in o]
    assert len(per) == 2 and best["usd_per_hour"] <= min(per) and best["feasible"]
    code, out, _ = run(capsys, *args, "--pricing", "own")
    own = json.loads(out)
    assert code == 0 and own["pricing"] == "own"
    assert own["best"]["estimate"]["usd_per_hour"] != best["usd_per_hour"]


@pytest.mark.parametrize("args,message", [
    (["--serve", "--isl", "8", "--osl", "8"], "--rate"),
    (["--serve", "--rate", "1", "--isl", "8", "--osl", "8", "--gpus", "nope"], "--gpus"),
    ([], "--tokens"),
])
def test_procure_serve_bad_input(capsys, args, message):
    code, _, err = run(capsys, "procure", "-m", "llama3-8b", *args)
    assert code == 2 and message in err


def test_launch_commands_name_each_engines_arguments(capsys):
    data = _json(capsys, "--ttft-ms", "500", "--tpot-ms", "30", "--rate", "20", "--launch",
                 "--fix", "mode=disaggregated", "--fix", "kv_dtype=fp8")
    launch, plan = data["launch"], data["plan"]
    assert set(launch) == {"vllm", "sglang", "trtllm"}
    for engine, pools in launch.items():
        assert [p["pool"] for p in pools] == ["prefill", "decode"]
        assert all("#" not in p["command"] for p in pools)  # safe to paste
    decode = {e: p[1]["command"] for e, p in launch.items()}
    assert f"--tensor-parallel-size {plan['tp']}" in decode["vllm"]
    assert f"--max-num-seqs {plan['concurrency']}" in decode["vllm"]
    assert "--kv-cache-dtype fp8" in decode["vllm"]
    assert f"--tp-size {plan['tp']}" in decode["sglang"]
    assert "--disaggregation-mode decode" in decode["sglang"]
    assert f"--max_batch_size {plan['concurrency']}" in decode["trtllm"]
    assert "--server_role generation" in decode["trtllm"]
    assert "--server_role context" in launch["trtllm"][0]["command"]


@pytest.mark.slow(reason="serving searches through the CLI for every engine")
def test_launch_commands_load_the_weights_not_the_catalog_name(capsys, tmp_path):
    """The engines load a Hugging Face id or a path: the model file's hf_id, a config.json's
    folder or --model-path; a model that names no weights is refused before the search."""
    small = ["serve", "-m", "llama3-8b", "-c", "dgx-h100-superpod", "--isl", "2048", "--osl",
             "256", *FAST, "--launch", "--json"]
    for extra, weights in (([], "meta-llama/Meta-Llama-3-8B"), (["--model-path", "/ckpt/l3"],
                                                                 "/ckpt/l3")):
        code, out, err = run(capsys, *small, *extra)
        assert code == 0, err
        launch = json.loads(out)["launch"]
        assert launch["vllm"][0]["command"].startswith(f"vllm serve {weights} ")
        assert f"--model-path {weights} " in launch["sglang"][0]["command"]
        assert launch["trtllm"][0]["command"].startswith(f"trtllm-serve {weights} ")
    folder = tmp_path / "mixtral"
    folder.mkdir()
    (folder / "config.json").write_text((DATA / "mixtral-8x7b-config.json").read_text())
    code, out, err = run(capsys, "serve", "-m", str(folder / "config.json"), *small[3:])
    assert code == 0, err
    assert json.loads(out)["launch"]["vllm"][0]["command"].startswith(f"vllm serve {folder} ")
    code, _, err = run(capsys, "serve", "-m", "gpt3-175b", *small[3:])
    assert code == 2 and "no hf_id" in " ".join(err.split()) and "--model-path" in err
    code, _, err = run(capsys, *small[:-2], "--model-path", "/ckpt/l3")
    assert code == 2 and "give --launch too" in " ".join(err.split())
    code, _, err = run(capsys, *small, "--model-path", " ")
    assert code == 2 and "--model-path: expected" in " ".join(err.split())


def test_a_downloaded_config_names_its_weights():
    from planner.specs.hf import model_from_hf

    cfg = json.loads((DATA / "mixtral-8x7b-config.json").read_text())
    cfg.pop("_name_or_path", None)
    assert model_from_hf(cfg, "x").hf_id is None
    named = model_from_hf({**cfg, "_name_or_path": "mistralai/Mixtral-8x7B-v0.1"}, "x")
    assert named.hf_id == "mistralai/Mixtral-8x7B-v0.1"
    assert load_model("llama3-405b").hf_id == "meta-llama/Llama-3.1-405B"


def test_python_api():
    import planner

    res = planner.serve("llama3-8b", "dgx-h100-superpod", 1024, 128, rate_rps=10, tpot_ms=40,
                        fix={"kv_dtype": "fp8", "pp": 1})
    assert res.estimate.feasible and res.estimate.requests_per_s == pytest.approx(10)
    again = planner.evaluate_serve("llama3-8b", "dgx-h100-superpod", res.plan, 1024, 128,
                                   rate_rps=10, tpot_ms=40)
    assert again.to_json() == res.estimate.to_json()
    with pytest.raises(planner.InputError, match="isl"):
        planner.serve("llama3-8b", "dgx-h100-superpod", "1024", 128)
    with pytest.raises(planner.InputError, match="fix"):
        planner.serve("llama3-8b", "dgx-h100-superpod", 8, 8, fix=["tp=2"])
    with pytest.raises(planner.InputError, match="serve plan"):
        planner.evaluate_serve("llama3-8b", "dgx-h100-superpod", {"tp": "x"}, 8, 8)


def test_a_dlrm_is_not_served(capsys):
    code, _, err = run(capsys, "serve", "-m", "dlrm-a", "-c", "dgx-h100-superpod", "--isl", "8",
                       "--osl", "8")
    assert code == 2 and "transformer" in err


@pytest.mark.parametrize("args,reason", [
    (["--fix", "ep=4", "--rate", "1"], "ep=4 does not divide the experts of a dense model"),
    (["--fix", "pp=1000", "--rate", "1"], "pp=1000 exceeds the 80 layers"),
])
def test_no_layout_says_why(capsys, args, reason):
    code, _, err = run(capsys, *BASE, *args)
    assert code == 1 and reason in err


def test_an_enormous_rate_is_capped_at_the_replica_limit(capsys):
    code, out, err = run(capsys, "serve", "-m", "llama3-8b", "-c", "dgx-h100-superpod", "--isl",
                         "128", "--osl", "128", "--rate", "1e9", "--fix", "weight_dtype=fp8",
                         "--fix", "kv_dtype=fp8", "--fix", "pp=1", "--json")
    assert code in (0, 1) and "Traceback" not in err
    if code == 0:
        assert json.loads(out)["plan"]["replicas"] <= 1 << 20


def test_serve_help(capsys):
    code, out, _ = run(capsys, "serve", "--help")
    assert code == 0 and "--ttft-ms" in out and "FIELD=VALUE" in out and "NAME|PATH" in out
    assert "<bool>" not in out and "<list[" not in out


# ---- time limits (issue "One request, one road", item 5) ---------------------------------
REPRO = ["serve", "-m", "llama3-8b", "-c", "dgx-h100-superpod", "--isl", "1024", "--osl",
         "128", "--ttft-ms", "500", "--tpot-ms", "50", "--rate", "5",
         "--weight-dtypes", "fp8,int4,fp4,bf16"]


def _stopped_before_a_plan(monkeypatch):
    """Every solver as if its time ran out before its first plan (no incumbent, no
    bound)."""
    import formulations.serve.search as search
    from formulations.serve.search import ServeSolution

    for backend in ("cpsat", "milp"):
        monkeypatch.setattr(search, f"_{backend}", lambda problem, limit, _b=backend:
                            ServeSolution("time_limit", _b))


def test_a_solve_stopped_before_its_first_plan_answers_the_tables_fleet(monkeypatch, capsys):
    """The reproducer's request when the solver finds nothing by the limit: the answer is
    the fleet read off the tables (status time_limit, gap unknown, never 'optimal'),
    here the proven optimum of the aggregated mode (one layout, no budget). It used to
    exit 1, hinting --backend cpsat, the backend in use."""
    args = [*REPRO, "--fix", "mode=aggregated", "--fix", "kv_dtype=fp8", "--time-limit", "20"]
    code, out, err = run(capsys, *args, "--json")
    assert code == 0, err
    proven = json.loads(out)["solver"]
    assert proven["status"] == "optimal" and proven["found_by"] == "solver"
    _stopped_before_a_plan(monkeypatch)
    code, out, err = run(capsys, *args, "--json")
    assert code == 0, err
    data = json.loads(out)
    s = data["solver"]
    assert s["status"] == "time_limit" and s["found_by"] == "tables" and s["gap"] is None
    assert s["objective_value"] == proven["objective_value"] and data["estimate"]["feasible"]
    code, out, _ = run(capsys, *args)
    assert code == 0 and "fleet of one layout per pool read off the tables" in " ".join(
        out.split())
    assert "time_limit" in out.split("\n")[1] and "optimal" not in out.split("\n")[1]


@pytest.mark.parametrize("backend", ["cpsat", "milp"])
def test_time_limit_hints_never_name_the_backend_in_use(monkeypatch, capsys, backend):
    """No plan by the limit (the solver found none, and one GPU holds no fleet of the
    tables for this rate): exit 1 with status time_limit, the hints never the backend
    that just ran out; and past the limit the overrun line, as for a plan."""
    _stopped_before_a_plan(monkeypatch)
    code, out, err = run(capsys, *REPRO[:-2], "--rate", "1000", "--gpus", "1", "--fix",
                         "mode=aggregated", "--backend", backend, "--json")
    assert code == 1
    d = json.loads(out)
    assert d["solver"]["status"] == "time_limit" and "raise --time-limit" in d["hints"]
    assert f"--backend {backend}" not in d["hints"]
    assert ("--backend cpsat" in d["hints"]) == (backend != "cpsat")
    code, out, err = run(capsys, *REPRO[:-2], "--rate", "1000", "--gpus", "1",
                         "--backend", backend, "--time-limit", "0.01", "--json")
    assert code == 1 and "past --time-limit 0.01" in err
    s = json.loads(out)["solver"]
    assert s["status"] == "time_limit" and s["time_limit_overrun_s"] > 0


def test_tabulating_stops_at_the_limit_once_a_plan_is_possible():
    """The reproducer's space (2,203 layouts) under a limit far shorter than tabulating it:
    the tables stop at the limit once a mode has a row in each pool, and the answer is
    the best of those tabulated (status time_limit, gap unknown: the layouts left out may
    be better). It used to tabulate every layout whatever the limit, then say 'optimal'."""
    from formulations.serve.space import weight_dtypes

    from planner.orchestration.serve import workload

    w = workload(1024, 128, 5.0, 500, 50)
    space = ServeSpace(weight_dtype=weight_dtypes("fp8,int4,fp4,bf16"))
    res = plan_serve(load_model("llama3-8b"), [load_cluster("dgx-h100-superpod")], w,
                     space=space, time_limit_s=1e-6, engine=load_engine("trtllm"))
    s = res.solver
    assert s["tables_complete"] is False and s["status"] == "time_limit" and s["gap"] is None
    assert 0 < s["rows"] < 2203 and res.estimate.feasible
    assert s["time_limit_overrun_s"] > 0 and "tabulating" in s["overrun_note"]
    from planner.report.serve import time_limit_line

    assert "left out" in time_limit_line(s)
