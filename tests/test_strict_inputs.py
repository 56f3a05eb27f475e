"""Strict inputs: every spec refuses a key it does not declare (naming the closest valid
one, the file and the key's path), no boolean is taken as a number, empty names and
nonsense token counts are refused, ``--from megatron`` refuses shell control flow it
cannot follow, and the goodput maths never raises (issue "One request, one road", item 4).

Each test here failed before the mechanism it names (extra="ignore", lax numbers, ...)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from conftest import DATA, ROOT
from planner import catalog
from planner.errors import InputError
from planner.specs.loaders import load_cluster, load_gpu, load_model, read_structured
from test_cli import run

CATALOG = ROOT / "hardware_catalog"
EXAMPLES = ROOT / "examples"


def _write(tmp_path: Path, name: str, data: dict) -> str:
    p = tmp_path / name
    p.write_text(json.dumps(data) if name.endswith(".json") else yaml.safe_dump(data))
    return str(p)


def _catalog(kind: str, name: str) -> dict:
    return yaml.safe_load((CATALOG / kind / f"{name}.yaml").read_text())


# ---- every shipped file loads --------------------------------------------------------
def _load_example(path: Path) -> str:
    """Load an example file by what it is; the kind, for the test's coverage check."""
    from planner.export.megatron import tokenize
    from planner.specs.loaders import plan_from_dict
    from planner.specs.mixed import load_mixed_cluster
    from planner.specs.pricing import load_pricing
    from planner.sweep.spec import load_sweep

    if path.suffix == ".sh" and ".megatron" in path.name:
        tokenize(path.read_text())
        return "megatron script"
    data = read_structured(path)
    for key, kind, load in (("command", "sweep", lambda: load_sweep(path)),
                            ("gpu", "cluster", lambda: load_cluster(str(path))),
                            ("pools", "mixed cluster", lambda: load_mixed_cluster(str(path))),
                            ("num_layers", "model", lambda: load_model(str(path))),
                            ("mode", "pricing", lambda: load_pricing(str(path))),
                            ("tp", "plan", lambda: plan_from_dict(data, str(path)))):
        if key in data:
            load()
            return kind
    raise AssertionError(f"{path}: no loader for this file")


#: example files that are no planner input: shell scripts that run the planner, and the
#: launch files `planner export` writes (checked by tests/test_check_exports.py)
NOT_INPUTS = (".md", ".toml", ".txt", ".json", ".py")
#: the jobs that launch an export (Slurm, Kubernetes): the cluster's inputs, not the planner's
LAUNCH_FILES = (".sbatch", ".k8s.yaml")


def test_every_example_file_loads():
    files = sorted(p for p in EXAMPLES.rglob("*") if p.is_file())
    loaded = {}
    for p in files:
        if p.suffix in NOT_INPUTS or p.name.endswith(LAUNCH_FILES) or (
                p.suffix == ".sh" and ".megatron" not in p.name):
            continue
        loaded[p.name] = _load_example(p)
    # every kind of input is among them (a loader that found nothing would pass vacuously)
    assert set(loaded.values()) == {"megatron script", "sweep", "cluster", "model",
                                    "pricing", "plan", "mixed cluster"}
    assert len(loaded) >= 20


def test_every_catalog_file_loads():
    from planner.specs.framework import load_framework
    from planner.specs.kernels import KernelTable
    from planner.specs.pricing import load_pricing
    from planner.specs.serve import load_engine
    from planner.specs.validate import validate

    loaders = {"gpus": load_gpu, "clusters": load_cluster, "models": load_model,
               "frameworks": load_framework, "engines": load_engine}
    seen = 0
    for kind, load in loaders.items():
        for path in sorted((CATALOG / kind).glob("*.yaml")):
            load(str(path))
            seen += 1
    assert seen == sum(len(catalog.names(k)) for k in loaders)
    for path in sorted((CATALOG / "kernels").glob("*.yaml")):
        validate(KernelTable, read_structured(path), str(path))
    load_pricing(str(CATALOG / "pricing" / "default.yaml"))


def test_every_calibration_row_builds_its_specs():
    """The calibration files' models and plans are built as specs too: a key the spec does
    not declare would be refused there."""
    from planner.validation import korthikanti, nemo, serving, torchtitan

    data = nemo.nemo_data()
    for row in nemo.recipe_rows(data):
        nemo.recipe_model(data, row["model"])
        nemo.recipe_plan(row)
    for r in torchtitan.plannable_runs():
        torchtitan.run_plan(r, torchtitan.run_model(r))
    for row in serving.serving_data()["rows"]:
        serving.row_plan(row)
    cal = korthikanti.calibration_data()
    assert cal  # its plans are built in code from the rows' numbers
    for path in (CATALOG / "calibration").glob("*.yaml"):
        read_structured(path)


# ---- unknown keys --------------------------------------------------------------------
def test_model_typo_names_the_closest_key(capsys, tmp_path):
    model = {**_catalog("models", "llama3-8b"), "tie_embeddings": True}
    model.pop("tied_embeddings")
    path = _write(tmp_path, "m.yaml", model)
    code, out, err = run(capsys, "evaluate", "-m", path, "-c", "dgx-h100-superpod",
                         "--gpus", "8")
    assert code == 2 and out == ""
    assert path in err and "tie_embeddings" in err and "did you mean tied_embeddings" in err


def test_topology_level_typo_names_its_path(tmp_path):
    data = yaml.safe_load((EXAMPLES / "superpod.yaml").read_text())
    data["topology"][1]["latncy_us"] = 3
    path = _write(tmp_path, "c.yaml", data)
    with pytest.raises(InputError) as e:
        load_cluster(path)
    msg = str(e.value)
    assert path in msg and "topology.1.latncy_us" in msg and "did you mean latency_us" in msg


def test_framework_typo_keeps_no_restriction_silently(capsys, tmp_path):
    """``zero_stage:`` for ``zero_stages:`` dropped torchtitan's restriction to ZeRO 0/3,
    so a ZeRO-1 plan "ran" on it; now the profile is refused."""
    prof = _catalog("frameworks", "torchtitan")
    prof["zero_stage"] = prof.pop("zero_stages")
    path = _write(tmp_path, "tt.yaml", prof)
    code, out, err = run(capsys, "evaluate", "-m", "llama3-8b", "-c", "dgx-h100-superpod",
                         "--gpus", "8", "--set", "zero_stage=1", "--framework", path)
    assert code == 2 and out == ""
    assert "zero_stage:" in err and "did you mean zero_stages" in err


def _dlrm_model() -> dict:
    return {"kind": "dlrm", "name": "two", "bottom_mlp": [64, 16], "top_mlp": [32, 1],
            "global_batch_size": 1024,
            "tables": [{"name": "a", "rows": 1000, "dim": 16, "pooling": 2}]}


def _frobnicated(kind: str, tmp_path: Path) -> tuple[str, object]:
    """A file of ``kind`` with an unknown top-level key, and how to load it."""
    from planner.specs.framework import load_framework
    from planner.specs.kernels import KernelTable
    from planner.specs.pricing import load_pricing
    from planner.specs.serve import load_engine
    from planner.specs.validate import validate
    from planner.sweep.spec import load_sweep

    base, load = {
        "model": (_catalog("models", "llama3-8b"), load_model),
        "dlrm model": (_dlrm_model(), load_model),
        "gpu": (_catalog("gpus", "h100-sxm"), load_gpu),
        "cluster": (_catalog("clusters", "dgx-h100-superpod"), load_cluster),
        "framework": (_catalog("frameworks", "megatron-core"), load_framework),
        "engine": (_catalog("engines", "vllm"), load_engine),
        "pricing": ({"mode": "own"}, load_pricing),
        "sweep": ({"base": {"model": "llama3-8b", "cluster": "dgx-h100-superpod"},
                   "axes": {"hbm_capacity": [1, 2]}}, load_sweep),
        "kernel table": (_catalog("kernels", "h100-sxm"),
                         lambda p: validate(KernelTable, read_structured(Path(p)), p)),
    }[kind]
    return _write(tmp_path, "f.yaml", {**base, "frobnicate": 1}), load


@pytest.mark.parametrize("kind", ["model", "dlrm model", "gpu", "cluster", "framework",
                                  "engine", "pricing", "sweep", "kernel table"])
def test_every_spec_refuses_an_unknown_key(kind, tmp_path):
    path, load = _frobnicated(kind, tmp_path)
    with pytest.raises(InputError) as e:
        load(path)  # type: ignore[operator]
    assert "frobnicate" in str(e.value) and path in str(e.value), str(e.value)


def test_plan_file_unknown_key_is_refused_with_the_field_meant(capsys, tmp_path):
    plan = yaml.safe_load((EXAMPLES / "llama70b-plan.yaml").read_text())
    plan["tensor_model_parallel_size"] = plan.pop("tp")
    path = _write(tmp_path, "p.yaml", plan)
    code, out, err = run(capsys, "evaluate", "-m", "llama3-70b", "-c", "dgx-h100-superpod",
                         "--plan", path)
    assert code == 2 and out == "" and "tensor_model_parallel_size (did you mean tp?)" in err


def test_dlrm_plan_unknown_key_names_the_placement(capsys, tmp_path):
    model = _write(tmp_path, "m.yaml", _dlrm_model())
    plan = _write(tmp_path, "p.yaml", {"tables": [
        {"table": "a", "sharding_type": "table_wise", "ranks": {0: 1}, "rnaks": {1: 1}}]})
    code, _, err = run(capsys, "evaluate", "-m", model, "-c", "dgx-a100-superpod",
                       "--gpus", "2", "--plan", plan)
    assert code == 2 and "tables.0.rnaks" in err and "did you mean ranks" in err


def test_documentation_keys_are_declared_fields(data_dir):
    """``notes:`` is a field of every file format (not a blanket allow-list): the test
    data's model carries one; ``source``/``sources`` are fields of the catalog's."""
    from planner.specs.model import ModelSpec

    assert load_model(str(data_dir / "tiny-model.yaml")).notes
    assert ModelSpec.model_fields["notes"].description
    assert ModelSpec.model_fields["source"].description


# ---- values taken silently -----------------------------------------------------------
def test_no_boolean_is_taken_as_a_number(tmp_path):
    data = yaml.safe_load((EXAMPLES / "superpod.yaml").read_text())
    path = _write(tmp_path, "c.yaml", {**data, "failures_per_gpu_hour": True})
    with pytest.raises(InputError) as e:
        load_cluster(path)
    assert "failures_per_gpu_hour: expected a number, not a boolean" in str(e.value)
    model = {**_catalog("models", "llama3-8b"), "num_layers": True}
    with pytest.raises(InputError, match="num_layers: expected a number"):
        load_model(_write(tmp_path, "m.yaml", model))
    gpu = _catalog("gpus", "h100-sxm")  # an element of a mapping of numbers
    gpu["peak_tflops"] = {**gpu["peak_tflops"], "bf16": False}
    with pytest.raises(InputError, match=r"peak_tflops.bf16: expected a number"):
        load_gpu(_write(tmp_path, "g.yaml", gpu))
    # a boolean field still takes a boolean
    assert load_model(_write(tmp_path, "t.yaml", {**_catalog("models", "llama3-8b"),
                                                  "tied_embeddings": True})).tied_embeddings


@pytest.mark.parametrize("command", [
    ("solve", "-m", "llama3-8b", "-c", "dgx-h100-superpod", "--gpus", "8"),
    ("evaluate", "-m", "llama3-8b", "-c", "dgx-h100-superpod", "--gpus", "8"),
    ("procure", "-m", "llama3-8b", "--tokens", "1e12")])
def test_empty_framework_name_is_refused(capsys, command):
    code, out, err = run(capsys, *command, "--framework", "")
    assert code == 2 and out == "" and "framework ''" in err


def test_engine_file_must_cite_what_it_sets(tmp_path):
    from planner.specs.serve import load_engine

    engine = {**_catalog("engines", "vllm"), "sources": {}}
    with pytest.raises(InputError, match="no citation for gqa_kv_shared"):
        load_engine(_write(tmp_path, "e.yaml", engine))
    typo = _catalog("engines", "vllm")
    typo["sources"]["kernel_fracton"] = typo["sources"].pop("kernel_fraction")
    with pytest.raises(InputError, match="sources.kernel_fracton.*did you mean kernel_fraction"):
        load_engine(_write(tmp_path, "e2.yaml", typo))


def test_framework_citation_under_a_misspelt_key_is_refused(tmp_path):
    from planner.specs.framework import load_framework

    prof = _catalog("frameworks", "torchtitan")
    prof["sources"]["zero_stagez"] = prof["sources"]["zero_stages"]
    with pytest.raises(InputError, match="sources.zero_stagez.*did you mean zero_stages"):
        load_framework(_write(tmp_path, "f.yaml", prof))


def test_dlrm_shard_on_a_node_a_rank_wise_sharding_never_reads(capsys, tmp_path):
    """``nodes: {"77": 1}`` on a table-wise placement of a 4-GPU cluster was accepted and
    ignored (table_wise reads ranks)."""
    model = _write(tmp_path, "m.yaml", _dlrm_model())
    plan = _write(tmp_path, "p.yaml", {"tables": [
        {"table": "a", "sharding_type": "table_wise", "ranks": {0: 1}, "nodes": {"77": 1}}]})
    code, out, err = run(capsys, "evaluate", "-m", model, "-c", "dgx-a100-superpod",
                         "--gpus", "4", "--plan", plan, "--json")
    assert code == 2 and out == "" and "give ranks, not nodes [77]" in err


@pytest.mark.parametrize("command", [("procure",), ("solve", "-c", "dgx-h100-superpod",
                                                  "--gpus", "8")])
def test_fewer_tokens_than_one_iteration_are_refused(capsys, command):
    # llama3-8b's catalog batch: 512 sequences of 8,192 tokens = 4,194,304 per iteration
    code, out, err = run(capsys, *command, "-m", "llama3-8b", "--tokens", "1e-300", "--json")
    assert code == 2 and out == "" and "fewer than one iteration's 4,194,304 tokens" in err


# ---- --from megatron: shell it cannot follow -----------------------------------------
def _from_megatron(capsys, script: str) -> tuple[int, str]:
    code, _, err = run(capsys, "evaluate", "-m", "llama3-8b", "-c", "dgx-h100-superpod",
                       "--gpus", "8", "--from", "megatron", script)
    return code, err


ARGS = ("torchrun pretrain_gpt.py --tensor-model-parallel-size $TP --global-batch-size 64 "
        "--bf16")


def test_megatron_if_else_is_refused_naming_the_line(capsys):
    code, err = _from_megatron(capsys, f"if true; then TP=4; else TP=8; fi\n{ARGS}")
    assert code == 2 and "line 1: 'if'" in err and "control flow" in err
    code, err = _from_megatron(capsys, f"NODES=1\n\nif [ -n \"$X\" ]\nthen\n  TP=4\nelse\n"
                               f"  TP=8\nfi\n{ARGS}")
    assert code == 2 and "line 4: 'if'" not in err and "line 3: 'if'" in err


@pytest.mark.parametrize("script", [
    "case $X in a) TP=4;; esac", "for t in 4 8; do TP=$t; done", "while false; do TP=4; done",
    "set_tp() { TP=4; }", "[ -n \"$X\" ] && TP=4", "false || TP=4"])
def test_megatron_other_control_flow_is_refused(capsys, script):
    code, err = _from_megatron(capsys, f"TP=8\n{script}\n{ARGS}")
    assert code == 2 and "line 2" in err, err


def test_megatron_reserved_words_as_arguments_still_read():
    from planner.export.shell import command_words

    _, words = command_words("TP=8\n" + ARGS + " --data-path done --x then")
    assert words[:2] == ["--tensor-model-parallel-size", "8"]
    assert words[-4:] == ["--data-path", "done", "--x", "then"]


# ---- goodput maths -------------------------------------------------------------------
def test_goodput_fraction_beyond_exp_range_is_finite():
    """Daly's fraction tau / (M e^{R/M} (e^{(tau+delta)/M} - 1)) with R = 720 M and
    tau = M, delta = 0: e^{-720} / (e - 1) (math.exp(720) overflows no float, but the
    product with M and e - 1 did, giving 0 and then a division by zero)."""
    from planner.costmodel.train.goodput import effective_fraction

    m = 3600.0
    f = effective_fraction(m, 0.0, 720 * m, m)
    assert f == pytest.approx(math.exp(-720) / (math.e - 1), rel=1e-6) and f > 0
    assert effective_fraction(m, 0.0, 1e6 * m, m) == 0.0  # underflows, never raises
    assert effective_fraction(m, 1e40, 0.0, m) == 0.0  # a checkpoint of 1e40 s


@pytest.mark.parametrize("update, field", [
    ({"failures_per_gpu_hour": 1, "restart_s": 1e6}, "restart_s 1e+06"),
    ({"failures_per_gpu_hour": 1, "restart_s": 159300}, "restart_s 159300"),
    ({"checkpoint_write_GBps_per_gpu": 1e-30}, "checkpoint_write_GBps_per_gpu 1e-30")])
def test_goodput_that_never_trains_is_refused_naming_the_fields(capsys, tmp_path, update,
                                                                 field):
    data = {**_catalog("clusters", "dgx-h100-superpod"), **update, "name": "flaky"}
    path = _write(tmp_path, "c.yaml", data)
    code, out, err = run(capsys, "procure", "-m", str(DATA / "tiny-model.yaml"), "--tokens",
                         "1e10", "-c", path, "--counts", "16", "--json")
    assert code == 2 and out == "" and "Traceback" not in err
    assert "no option trains" in err and field in err and "goodput" in err


def test_procure_leaves_out_only_the_options_that_never_train(capsys, tmp_path):
    data = {**_catalog("clusters", "dgx-h100-superpod"), "failures_per_gpu_hour": 1,
            "restart_s": 159300, "name": "flaky"}
    path = _write(tmp_path, "c.yaml", data)
    code, out, err = run(capsys, "procure", "-m", str(DATA / "tiny-model.yaml"), "--tokens",
                         "1e10", "-c", path, "-c", "dgx-h100-superpod", "--counts", "8",
                         "--json", "--time-limit", "10")
    assert code == 0, err
    res = json.loads(out)
    assert res["choice"]["cluster"] == "dgx-h100-superpod"
    assert len(res["stats"]["untrainable"]) == 1 and "flaky" in res["stats"]["untrainable"][0]
    assert "Infinity" not in out and "NaN" not in out
