"""`planner solve`: JSON contract, fixed knobs, partial plans, infeasible and bad requests."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from planner.costmodel.train.evaluator import evaluate
from planner.specs.loaders import load_cluster, load_model, load_plan_dict, plan_from_dict

from test_cli import SUPERPOD, run

SMALL = ["-m", "llama3-8b", "-c", SUPERPOD, "--gpus", "16", "--global-batch", "64",
         "--max-microbatch", "4", "--max-virtual-stages", "2"]


@pytest.fixture(scope="module")
def best_json():
    """One solve shared by the tests that only read its output."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "planner.cli", "solve", *SMALL, "--json",
                           "--top", "3"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.slow(reason="an end-to-end solve of a catalog model")
def test_solve_json_contract(best_json):
    data = best_json
    assert set(data) >= {"plan", "estimate", "solver", "alternatives"}
    for key in ("backend", "status", "solve_time_s", "objective", "solver_objective",
                "evaluator_objective", "model_vs_evaluator_rel_diff", "optimality_gap"):
        assert key in data["solver"], key
    assert data["solver"]["status"] == "optimal" and data["solver"]["backend"] == "cpsat"
    assert data["solver"]["status_text"] == "proven optimal"
    assert data["solver"]["optimality_gap"] == 0.0 and "gap" not in data["solver"]
    # the estimate has the keys of `planner evaluate --json`
    for key in ("iteration_time_s", "memory_per_gpu_gib", "time_breakdown_s", "mfu",
                "feasible", "reasons"):
        assert key in data["estimate"], key
    assert data["estimate"]["feasible"] is True
    assert math.isclose(data["solver"]["evaluator_objective"],
                        data["estimate"]["iteration_time_s"], rel_tol=1e-12)
    s = data["solver"]
    if s["plans_enumerated"]:  # presolve left few plans, each costed exactly: no model ran
        assert s["solver_calls"] == 0
        assert s["solver_objective"] is None and s["model_vs_evaluator_rel_diff"] is None
    else:
        # the formulation's value is a lower bound on the exact one
        # (up to float rounding: the vectorized and the scalar evaluator sum in other orders)
        assert s["solver_objective"] <= s["evaluator_objective"] * (1 + 1e-12)
        assert -1e-12 <= s["model_vs_evaluator_rel_diff"] < 1e-3


def test_solve_top_k_distinct_and_ordered(best_json):
    alts = best_json["alternatives"]
    assert len(alts) == 2
    times = [best_json["estimate"]["iteration_time_s"]] + [
        a["estimate"]["iteration_time_s"] for a in alts]
    assert times == sorted(times)
    plans = [json.dumps(best_json["plan"], sort_keys=True)] + [
        json.dumps(a["plan"], sort_keys=True) for a in alts]
    assert len(set(plans)) == 3


def test_solve_plan_matches_evaluator(best_json, tmp_path):
    """The plan file written by --out is accepted by `planner evaluate` as is."""
    path = tmp_path / "best.yaml"
    path.write_text(yaml.safe_dump(best_json["plan"]))
    est = evaluate(load_model("llama3-8b"), load_cluster(SUPERPOD, 16), plan_from_dict(load_plan_dict(str(path)), str(path)))
    assert est.feasible
    assert math.isclose(est.iteration_time_s, best_json["estimate"]["iteration_time_s"],
                        rel_tol=1e-12)


@pytest.mark.slow(reason="an end-to-end solve of a catalog model")
def test_solve_out_then_evaluate(capsys, tmp_path):
    path = tmp_path / "plan.yaml"
    code, out, _ = run(capsys, "solve", *SMALL, "--out", str(path))
    assert code == 0 and "best plan" in out and path.exists()
    code, out, _ = run(capsys, "evaluate", "-m", "llama3-8b", "-c", SUPERPOD, "--gpus", "16",
                       "-p", str(path), "--json")
    assert code == 0 and json.loads(out)["feasible"] is True


def test_solve_fixed_knobs_are_respected(capsys):
    code, out, _ = run(capsys, "solve", *SMALL, "--fix", "tp=2", "--fix", "recompute=full",
                       "--fix", "zero_stage=0", "--json")
    assert code == 0, out
    plan = json.loads(out)["plan"]
    assert plan["tp"] == 2 and plan["recompute"] == "full" and plan["zero_stage"] == 0


def test_solve_partial_plan_file(capsys, tmp_path):
    path = tmp_path / "partial.yaml"
    path.write_text("pp: 2\nsequence_parallel: false\n")
    code, out, _ = run(capsys, "solve", *SMALL, "--plan", str(path), "--json")
    assert code == 0, out
    plan = json.loads(out)["plan"]
    assert plan["pp"] == 2 and plan["sequence_parallel"] is False


def test_solve_fixed_is_never_better_than_free(capsys, best_json):
    code, out, _ = run(capsys, "solve", *SMALL, "--fix", "tp=1", "--json")
    assert code == 0
    fixed_t = json.loads(out)["estimate"]["iteration_time_s"]
    assert fixed_t >= best_json["estimate"]["iteration_time_s"] * (1 - 1e-12)


@pytest.mark.parametrize("backend", ["milp", "exhaustive"])
def test_solve_backends_agree(capsys, best_json, backend):
    code, out, _ = run(capsys, "solve", *SMALL, "--backend", backend, "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["solver"]["backend"] == backend
    assert math.isclose(data["estimate"]["iteration_time_s"],
                        best_json["estimate"]["iteration_time_s"], rel_tol=1e-9)


def test_solve_other_objectives(capsys):
    code, out, _ = run(capsys, "solve", *SMALL, "--objective", "energy", "--tokens", "1e9",
                       "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["solver"]["objective"] == "energy" and data["solver"]["evaluator_objective"] > 0


@pytest.mark.slow(reason="an end-to-end solve of a catalog model")
def test_solve_out_of_memory_explains(capsys):
    code, out, err = run(capsys, "solve", "-m", "llama3-405b", "-c", SUPERPOD, "--gpus", "16",
                         "--json")
    assert code == 1
    data = json.loads(out)
    assert data["plan"] is None and data["solver"]["status"] == "infeasible"
    assert any("even at maximum sharding" in r and "HBM is 80 GiB" in r
               for r in data["reasons"])
    assert data["hints"] and "infeasible" in err


def test_solve_empty_space_names_the_rule(capsys):
    code, _, err = run(capsys, "solve", *SMALL, "--fix", "tp=3")
    assert code in (1, 2)
    assert "tp" in err and "3" in err


def test_solve_fix_divisibility_infeasible(capsys):
    # a global batch of 6 sequences cannot be split over dp=4
    code, _, err = run(capsys, "solve", *SMALL, "--global-batch", "6", "--fix", "dp=4")
    assert code == 1
    assert "batch" in err and "6" in err


@pytest.mark.parametrize("args, needle", [
    (["--fix", "tpp=2"], "tpp"),
    (["--fix", "tp=two"], "tp"),
    (["--objective", "speed"], "speed"),
    (["--backend", "gurobi"], "gurobi"),
    (["--top", "0"], "--top"),
])
def test_solve_bad_input_exit_2(capsys, args, needle):
    code, _, err = run(capsys, "solve", *SMALL, *args)
    assert code == 2
    assert needle in err


def test_solve_unknown_model_suggests(capsys):
    code, _, err = run(capsys, "solve", "-m", "llama3-70", "-c", SUPERPOD)
    assert code == 2 and "llama3-70b" in err


def test_solve_table_output(capsys):
    code, out, _ = run(capsys, "solve", *SMALL, "--top", "2")
    assert code == 0
    assert "best plan" in out and "MFU" in out and "optimal" in out


@pytest.mark.slow(reason="an end-to-end solve of a catalog model")
def test_python_api_solve():
    import planner
    from planner.errors import InfeasibleError

    res = planner.solve("llama3-8b", SUPERPOD, gpus=16, fix={"tp": 2}, global_batch_size=64,
                        top_k=2)
    assert res.status == "optimal" and res.best.plan.tp == 2
    assert res.best.estimate.feasible and len(res.plans) == 2
    assert res.plans[0].objective <= res.plans[1].objective
    with pytest.raises(InfeasibleError) as info:
        planner.solve("llama3-405b", SUPERPOD, gpus=16)
    assert info.value.reasons and info.value.hints


def test_search_bounds_are_declared_once():
    """The solve command's search-bound options come from SpaceOptions' own declaration
    (default and help), so the CLI and the API cannot drift apart."""
    import inspect
    from dataclasses import fields

    from formulations.train.options import SpaceOptions, knob
    from planner.cli.solve import solve

    params = inspect.signature(solve).parameters
    flagged = {f.name: f for f in fields(SpaceOptions) if f.metadata.get("flag")}
    assert set(flagged) == {"max_microbatch", "max_virtual_stages", "allow_idle_gpus",
                            "allow_uneven"}
    by_flag = {p.default.param_decls[0]: p.default for p in params.values()
               if getattr(p.default, "param_decls", None)}
    for name, f in flagged.items():
        default, help_text, flag = knob(name)
        opt = by_flag[flag]
        assert opt.default == default and opt.help == help_text == f.metadata["help"]
    # the inverted flag leaves the field at its default
    assert knob("allow_uneven")[0] is (not SpaceOptions().allow_uneven)
