"""CLI paths: output, JSON keys, exit codes and clear errors (never tracebacks)."""

from __future__ import annotations

import json
import sys

import pytest

from planner.cli import main

from conftest import DATA, ROOT

SUPERPOD = str(ROOT / "examples" / "superpod.yaml")


def run(capsys, *args: str) -> tuple[int, str, str]:
    old = sys.argv
    sys.argv = ["planner", *args]
    code = 0
    try:
        main()
    except SystemExit as e:
        code = int(e.code or 0)
    finally:
        sys.argv = old
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err and "Traceback" not in cap.out
    return code, cap.out, cap.err


def test_evaluate_table(capsys):
    code, out, _ = run(capsys, "evaluate", "--model", "llama70b", "--cluster", SUPERPOD,
                       "--plan", str(DATA / "plan-tp8.yaml"))
    assert code == 0
    assert "iteration time" in out and "MFU" in out and "activations" in out


def test_evaluate_json_keys(capsys):
    code, out, _ = run(capsys, "evaluate", "-m", "llama70b", "-c", SUPERPOD, "-p",
                       str(DATA / "plan-tp8.yaml"), "--json")
    assert code == 0
    data = json.loads(out)
    for key in ("iteration_time_s", "memory_per_gpu_gib", "time_breakdown_s",
                "memory_breakdown_gib", "mfu", "tokens_per_s", "feasible", "reasons", "plan"):
        assert key in data
    assert data["feasible"] is True and data["plan"]["tp"] == 8


def test_evaluate_overrides_and_resize(capsys):
    code, out, _ = run(capsys, "evaluate", "-m", "llama70b", "-c", "dgx-h100-superpod",
                       "--gpus", "2048", "-p", str(DATA / "plan-tp8.yaml"), "--dp", "64",
                       "--set", "recompute=full", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["num_gpus"] == 2048 and data["plan"]["recompute"] == "full"


def test_evaluate_without_plan_uses_model_defaults(capsys):
    code, out, _ = run(capsys, "evaluate", "-m", "llama3-8b", "-c", SUPERPOD, "--gpus", "8",
                       "--tp", "2", "--set", "zero_stage=1", "--set", "recompute=full", "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["plan"]["dp"] == 4 and data["plan"]["seq_len"] == 8192
    assert data["plan"]["global_batch_size"] == 512


def test_evaluate_infeasible_exit_1_with_reasons(capsys):
    code, out, _ = run(capsys, "evaluate", "-m", "llama70b", "-c", SUPERPOD, "--tp", "1",
                       "--pp", "1", "--json")
    assert code == 1
    data = json.loads(out)
    assert data["feasible"] is False and any("HBM is 80 GiB" in r for r in data["reasons"])


def test_tp_not_dividing_heads_exit_1(capsys):
    code, out, _ = run(capsys, "evaluate", "-m", "llama70b", "-c", SUPERPOD, "--gpus", "24",
                       "--tp", "3")
    assert code == 1
    assert "does not divide num_attention_heads=64" in out


def test_unknown_model_exit_2(capsys):
    code, _, err = run(capsys, "evaluate", "-m", "llama-70", "-c", SUPERPOD)
    assert code == 2 and "unknown model 'llama-70'" in err and "closest" in err


def test_malformed_yaml_exit_2(capsys):
    code, _, err = run(capsys, "evaluate", "-m", str(DATA / "bad-syntax.yaml"), "-c", SUPERPOD)
    assert code == 2 and "malformed YAML" in err


def test_wrong_type_exit_2(capsys):
    code, _, err = run(capsys, "evaluate", "-m", "llama70b", "-c", SUPERPOD, "--set", "tp=eight")
    assert code == 2 and "tp" in err and "'eight'" in err


def test_unknown_plan_field_exit_2(capsys):
    code, _, err = run(capsys, "evaluate", "-m", "llama70b", "-c", SUPERPOD, "--set", "tensor=8")
    assert code == 2 and "'tensor' is not a plan field" in err


def test_plan_file_with_unknown_key_is_refused(capsys, tmp_path):
    # refused, not warned about: the plan would be costed with virtual_stages' default
    p = tmp_path / "plan.yaml"
    p.write_text((DATA / "plan-tp8.yaml").read_text() + "\nvirtual_stage: 2\n")
    code, out, err = run(capsys, "evaluate", "-m", "llama70b", "-c", SUPERPOD, "-p", str(p))
    assert code == 2 and out == "" and "virtual_stage (did you mean virtual_stages?)" in err


def test_catalog(capsys):
    for kind in ("gpus", "clusters", "models"):
        code, out, _ = run(capsys, "catalog", kind, "--json")
        assert code == 0 and len(json.loads(out)) >= 4
    code, _, err = run(capsys, "catalog", "tpus")
    assert code == 2


@pytest.mark.slow(reason="runs planner validate over the whole corpus")
def test_validate_json(capsys):
    code, out, _ = run(capsys, "validate", "--json")
    assert code == 0
    data = json.loads(out)
    assert len(data["korthikanti2022"]["iteration_time"]) == 8
    assert len(data["nemo_recipes"]["rows"]) == 15
    # each fit group's record: its runs, its sources, and the held-out figure where a
    # source can be held out (planner/validation/heldout.py; tools/calibrate.py --write)
    fits = data["fit"]
    assert set(fits) == {"A100", "H100", "B200", "H100 torchtitan", "A100 megatron-core",
                         "MoE megatron"}
    # a group fitted on several sources records its held-out figure; one source cannot
    assert all((f["leave_one_source_out_mape"] is None) == (f["sources"] < 2)
               for f in fits.values())
    assert len(data["torchtitan_runs"]["rows"]) == 29
    held = data["heldout_by_source"]
    assert held["runs"] >= 80 and held["sources"] >= 10
    assert len(data["corpus_sources"]) >= held["sources"]
    labels = set(held["by"])
    assert labels == {"framework x generation", "GPU count", "sequence length", "precision",
                      "dense / MoE"}
    for rows in held["by"].values():  # every slice counts every held-out run once
        assert sum(r["runs"] for r in rows) == held["runs"]


def test_evaluate_plot(capsys, tmp_path):
    png = tmp_path / "b.png"
    code, _, _ = run(capsys, "evaluate", "-m", "llama70b", "-c", SUPERPOD, "-p",
                     str(DATA / "plan-tp8.yaml"), "--plot", str(png))
    assert code == 0 and png.stat().st_size > 5000


def test_plot_of_an_infeasible_plan_says_so(tmp_path):
    """A plan that cannot be costed has no breakdown: the figure says so, without a
    plotting warning (matplotlib warned about an empty legend; found by the fuzzer)."""
    import warnings

    from planner.costmodel.train.evaluator import evaluate
    from planner.report.plots import plot_breakdown
    from planner.specs.loaders import load_cluster, load_model
    from planner.specs.plan import Plan

    est = evaluate(load_model("llama3-8b"), load_cluster(SUPERPOD, 64),
                   Plan(pp=64, global_batch_size=64, seq_len=8192))  # 32 layers: no costing
    assert not est.feasible and not est.time_breakdown_s
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        png = plot_breakdown([("dp8", est)], tmp_path / "x.png")
    assert png.stat().st_size > 1000


@pytest.mark.parametrize("command", [[], ["solve"], ["evaluate"], ["procure"], ["collective"],
                                     ["catalog"], ["validate"]])
def test_help_metavars(capsys, command):
    """Boolean flags read as plain flags and repeatable options show what they take, never
    typer's ``<bool>`` or ``<list[str]>``."""
    code, out, _ = run(capsys, *command, "--help")
    assert code == 0 and "--help" in out
    assert "<bool>" not in out and "<list[" not in out
    if command == ["solve"]:
        assert "FIELD=VALUE" in out
