"""Issue 29's rough edges: tables that fit an 80-column terminal with whole names, and the
frameworks' spellings of plan fields pointed at the plan's names."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from rich.console import Console
from rich.table import Table

from planner.report.tables import fit_table

from test_cli import run


def _lines_fit(text: str, width: int) -> None:
    long = [line for line in text.splitlines() if len(line) > width]
    assert not long, f"{len(long)} lines over {width} columns, e.g. {long[0]!r}"
    assert "…" not in text  # rich's mark for a cut cell


@pytest.mark.parametrize("kind", ["models", "clusters", "gpus", "frameworks", "engines"])
def test_catalog_fits_80_columns_with_whole_names(capsys, monkeypatch, kind):
    code, js, _ = run(capsys, "catalog", kind, "--json")
    assert code == 0
    rows = json.loads(js)
    monkeypatch.setenv("COLUMNS", "80")
    code, text, _ = run(capsys, "catalog", kind)
    assert code == 0
    _lines_fit(text, 80)
    cells = {w.strip(",") for line in text.splitlines() for w in line.replace("│", " ").split()}
    for r in rows:
        names = [r["name"], *r.get("aliases", []), *([r["gpu"]] if "gpu" in r else [])]
        for name in names:
            assert name in cells, f"{kind}: {name!r} is not whole at 80 columns"


def test_fit_table_keeps_names_and_numbers_whole_and_names_what_it_leaves_out():
    t = Table()
    for col, just in (("name", "left"), ("notes", "left"), ("a", "right"), ("b", "right"),
                      ("extra", "left")):
        t.add_column(col, justify=just)
    t.add_row("a-rather-long-catalog-name", "words that wrap at spaces " * 3, "12,345.6",
              "98,765.4", "x" * 30)
    fitted, dropped = fit_table(t, 60, whole=("name",), drop=("extra",))
    assert dropped == ["extra"]
    console = Console(width=60, record=True, file=open("/dev/null", "w"))
    console.print(fitted)
    text = console.export_text()
    _lines_fit(text, 60)
    for word in ("a-rather-long-catalog-name", "12,345.6", "98,765.4"):
        assert word in text
    # a table that fits is left as it is
    same, none = fit_table(t, 400)
    assert same is t and none == []


def test_validate_serving_table_fits_80_columns():
    from planner.cli.validate import _print_serving
    from planner.cli import validate as v
    from planner.validation.serving import run_serving

    console = Console(width=80, record=True, file=open("/dev/null", "w"))
    serving = run_serving()
    old = v.out
    v.out = console
    try:
        _print_serving(serving)
    finally:
        v.out = old
    text = console.export_text()
    _lines_fit(text, 80)
    for r in serving.rows:
        assert r.model in text and f"{r.predicted:,.1f}" in text and f"{r.measured:,.1f}" in text


def test_procure_front_table_fits_80_columns():
    from planner.report.procure import print_procurement

    recs = [SimpleNamespace(num_gpus=n, gpu="a100-sxm-80gb", cluster="dgx-a100-superpod",
                            days=100.0 / n, cost_usd=1.2e6 + n, energy_mwh=50.0 + n, mfu=0.5,
                            meets_limits=True, plan=n) for n in (1024, 2048, 4096)]
    res = SimpleNamespace(pareto=recs, pareto_energy=recs[:2], choice=None, stats=dict(
        options=3, pruned_by_limits=0, solved=3, pruned_by_incumbent=0, pruned_by_dominance=0,
        solver_calls=3, wall_s=1.0))
    console = Console(width=80, record=True, file=open("/dev/null", "w"))
    print_procurement(console, res, True)
    text = console.export_text()
    _lines_fit(text, 80)
    for r in recs:
        assert f"{r.num_gpus:,} x a100-sxm-80gb" in text and "dgx-a100-superpod" in text


@pytest.mark.parametrize("spelling, field", [
    ("tensor_parallel", "tp"), ("--tensor-model-parallel-size", "tp"),
    ("pipeline_model_parallel_size", "pp"), ("parallelism.context_parallel_degree", "cp"),
    ("data_parallel", "dp"), ("micro_batch_size", "microbatch_size"),
    ("virtual_pipeline_model_parallel_size", "virtual_stages")])
def test_framework_spellings_point_at_the_plan_field(capsys, spelling, field):
    code, _, err = run(capsys, "solve", "-m", "llama3-8b", "-c", "dgx-h100-superpod", "--gpus",
                       "8", f"--fix={spelling}=2")
    assert code != 0
    assert f"calls it {field}" in err, err
    assert "closest" not in err  # difflib's guess (sequence_parallel for tensor_parallel)


def test_framework_spellings_are_suggested_never_accepted():
    from planner.specs.loaders import FRAMEWORK_SPELLINGS, unknown_plan_keys
    from planner.specs.plan import Plan

    assert not set(FRAMEWORK_SPELLINGS) & set(Plan.model_fields)
    assert set(FRAMEWORK_SPELLINGS.values()) <= set(Plan.model_fields)
    assert unknown_plan_keys({"tensor_model_parallel_size": 8}) == [
        "tensor_model_parallel_size (did you mean tp?)"]


def test_serve_fix_points_a_framework_spelling_at_the_knob(capsys):
    code, _, err = run(capsys, "serve", "-m", "llama3-8b", "-c", "dgx-h100-superpod", "--gpus",
                       "8", "--isl", "128", "--osl", "128", "--rate", "1",
                       "--fix", "tensor_parallel_size=8")
    assert code != 0 and "tensor_parallel_size is tp" in err, err


def _captured(monkeypatch, module) -> list:
    figs: list = []
    monkeypatch.setattr(module, "_save", lambda fig, plt, path, force: figs.append(fig))
    return figs


def test_heatmap_title_names_nf_only_when_a_cell_has_it(monkeypatch, tmp_path):
    import planner.report.sweep as sw

    figs = _captured(monkeypatch, sw)
    full = [dict(a=a, b=b, iteration_time_s=float(a + b)) for a in (1, 2) for b in (1, 2)]
    sw.plot_heatmap(full, "a", "b", tmp_path / "x.png")
    gap = [*full[:3], dict(a=2, b=2, iteration_time_s=None)]
    sw.plot_heatmap(gap, "a", "b", tmp_path / "y.png")
    titles = [f.axes[0].get_title() for f in figs]
    assert "n/f" not in titles[0] and "n/f: nothing fits" in titles[1]


@pytest.mark.parametrize("command, value", [("procure", "cost_usd"),
                                            ("solve", "iteration_time_s")])
def test_sweep_heatmap_value_defaults_to_cost_for_procure(monkeypatch, command, value):
    import planner.cli.sweep as sw  # _plot looks plot_heatmap up in its own module
    from planner.cli.sweep import _plot

    seen = []
    monkeypatch.setattr(sw, "plot_heatmap", lambda rows, x, y, path, v, **kw: seen.append(v))
    _plot([], ["a", "b"], "p.png", None, None, None, None, None, command=command)
    assert seen == [value]


@pytest.mark.slow(reason="a serving search through the CLI")
def test_serve_says_its_price_counts_output_tokens(capsys):
    code, out, _ = run(capsys, "serve", "-m", "llama3-8b", "-c", "dgx-h100-superpod", "--gpus",
                       "1", "--isl", "128", "--osl", "128", "--rate", "1")
    assert code == 0
    assert "$ per million output tokens" in out and "per million tokens" not in out


def _overlaps(fig) -> list[tuple[str, str]]:
    """Pairs of drawn texts (tick labels, axis labels, titles, annotations, the legend box)
    whose renderer bounding boxes intersect."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    boxes = []
    for ax in fig.axes:
        texts = [*ax.get_xticklabels(), *ax.get_yticklabels(), ax.xaxis.label, ax.yaxis.label,
                 ax.title, *ax.texts]
        boxes += [(t.get_text(), t.get_window_extent(r)) for t in texts
                  if t.get_visible() and t.get_text().strip()]
        if ax.get_legend() is not None:
            boxes.append(("legend", ax.get_legend().get_window_extent(r)))
    return [(a, b) for i, (a, x) in enumerate(boxes) for b, y in boxes[i + 1:]
            if x.overlaps(y) and x.width > 0 and y.width > 0]


def test_breakdown_legend_clear_of_the_tick_labels(monkeypatch, tmp_path):
    import planner.report.plots as plots
    from planner import evaluate

    figs = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, plt, path, **kw: figs.append(fig))
    from planner.specs.loaders import load_cluster

    est = evaluate("llama3-8b", load_cluster("dgx-h100-superpod").resized(8),
                   plan={"tp": 1, "dp": 8, "global_batch_size": 64, "seq_len": 8192})
    plots.plot_breakdown([("dp8", est)], tmp_path / "b.png")
    legend_hits = [p for p in _overlaps(figs[0]) if "legend" in p]
    assert not legend_hits, legend_hits


REPO = __import__("pathlib").Path(__file__).resolve().parents[1]


def test_sweep_paths_are_relative_to_the_sweep_file(capsys, monkeypatch, tmp_path):
    import shutil

    import yaml

    from conftest import DATA

    folder = tmp_path / "sweeps"
    folder.mkdir()
    shutil.copy(DATA / "tiny-model.yaml", folder / "tiny.yaml")
    (folder / "s.yaml").write_text(yaml.safe_dump({
        "base": {"model": "tiny.yaml", "cluster": "dgx-h100-superpod", "gpus": 8,
                 "time_limit_s": 30},
        "axes": {"hbm_capacity": [1, 2]}}))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, out, err = run(capsys, "sweep", "../sweeps/s.yaml", "--workers", "1")
    assert code == 0, err
    rows = out.strip().splitlines()[1:]
    assert len(rows) == 2 and all(",optimal," in r for r in rows), out


def test_example_sweeps_run_from_any_directory(monkeypatch, tmp_path):
    from planner.sweep import expand, load_sweep
    from planner.sweep.point import check_points

    monkeypatch.chdir(tmp_path)
    files = [f for f in sorted((REPO / "examples" / "sweeps").glob("*.yaml"))
             if "\naxes:" in f.read_text()]
    assert len(files) >= 3
    for f in files:
        check_points(expand(load_sweep(f), str(f)))  # loads every model and cluster


def test_lbnl_heatmap_axes_name_the_unit_and_base(monkeypatch):
    import planner.report.sweep as sw
    from planner.cli.sweep import _plot
    from planner.sweep import expand, load_sweep
    from planner.sweep.scaling import axis_labels

    figs = _captured(monkeypatch, sw)
    points = expand(load_sweep(REPO / "examples" / "sweeps" / "lbnl-hbm.yaml"))
    axes = list(points[0].axes)
    rows = [{**p.axes, "iteration_time_s": 1.0} for p in points]
    _plot(rows, axes, "x.png", None, None, None, None, None, labels=axis_labels(axes, points))
    ax = figs[0].axes[0]
    # the catalog B200: 167.6 GiB = 180 GB of HBM3e at 8 TB/s
    assert ax.get_xlabel() == "HBM capacity, x 180 GB"
    assert ax.get_ylabel() == "HBM bandwidth, x 8 TB/s"


def test_procure_csv_rounds_float_noise():
    from planner.report.procure import procurement_csv

    rec = SimpleNamespace(gpu="h100-sxm", num_gpus=8, cluster="dgx-h100-superpod", plan=None,
                          days=4.999999999999999, cost_usd=1234.5678901234567)
    rec.to_json = lambda: dict(
        gpu="h100-sxm", num_gpus=8, cluster="dgx-h100-superpod", days=4.999999999999999,
        cost_usd=1234.5678901234567, energy_mwh=0.1 + 0.2, gpu_hours=960.0, mfu=0.5,
        iteration_time_s=2.0, usd_per_gpu_hour=2.5, meets_limits=True, proven_optimal=True,
        plan={})
    res = SimpleNamespace(records=[rec], choice=rec, pareto=[], pareto_energy=[])
    text = procurement_csv(res)
    assert "4.999999999999999" not in text and "0.30000000000000004" not in text
    row = text.splitlines()[1].split(",")
    assert row[4:7] == ["5.0", "1234.56789012", "0.3"]


def test_procure_small_run_in_units_that_show_it(capsys):
    code, out, _ = run(capsys, "procure", "-m", "llama3-8b", "--tokens", "1e9", "--gpus",
                       "h100", "--counts", "8")
    assert code == 0
    hours = next(line for line in out.splitlines() if "GPU-hours" in line)
    energy = next(line for line in out.splitlines() if "energy " in line)
    assert "0.00M" not in hours and "(ideal " in hours, hours  # ~30 GPU-hours
    assert " 0 MWh" not in energy and "kWh" in energy, energy


def test_procure_serve_rows_by_cost_and_price_per_output_token(capsys, monkeypatch):
    import planner.api as api

    def fleet(gpu, usd_per_hour):
        plan = SimpleNamespace(replicas=1, gpu=gpu, tp=1, pp=1, weight_dtype="fp8",
                               concurrency=64, prefill=None)
        est = SimpleNamespace(num_gpus=1, usd_per_hour=usd_per_hour,
                              usd_per_million_tokens=usd_per_hour / 10)
        return SimpleNamespace(plan=plan, estimate=est, solver={"mode": "aggregated"})

    rows = [("b200", fleet("b200", 5.0), ""), ("a100-sxm-40gb", None, "too slow"),
            ("mi300x", fleet("mi300x", 2.2), ""), ("h100-sxm", fleet("h100-sxm", 2.5), "")]
    # the command reaches it through planner.api (the one road), which holds the name
    monkeypatch.setattr(api, "procure_serve", lambda *a, **k: SimpleNamespace(
        mode="rent", per_gpu=rows, best=rows[2][1]))
    code, out, _ = run(capsys, "procure", "--serve", "-m", "llama3-8b", "--rate", "1",
                       "--isl", "128", "--osl", "128", "--gpus", "h100")
    assert code == 0
    order = [g for line in out.splitlines() for g in ("mi300x", "h100-sxm", "b200",
                                                       "a100-sxm-40gb") if f"│ {g} " in line]
    assert order == ["mi300x", "h100-sxm", "b200", "a100-sxm-40gb"], out
    header = out.split("│ mi300x")[0]  # the title and the (maybe wrapped) column names
    assert "output" in header and "$/Mtok" not in out


def test_a_time_limit_spent_in_set_up_is_not_called_infeasible(capsys):
    """A limit that runs out before the search still answers with the first plan found in
    bound order, marked as a time-limited answer (never infeasible, never optimal), in the
    CLI and in a sweep row."""
    from planner.sweep.point import run_point

    code, out, err = run(capsys, "solve", "-m", "llama3-70b", "-c", "dgx-h100-superpod",
                         "--gpus", "64", "--time-limit", "0.001")
    assert code == 0 and "infeasible" not in err and "past --time-limit" in err, err
    assert "best found (time limit)" in out
    row = run_point({"model": "llama3-70b", "cluster": "dgx-h100-superpod", "gpus": 64,
                     "time_limit_s": 0.001})
    assert row["status"] == "time_limit" and row["iteration_time_s"] > 0, row


#: Llama 3 8B as Megatron-LM arguments, TP 8, no --global-batch-size
MEGATRON_8B = ("--tensor-model-parallel-size 8 --micro-batch-size 1 --seq-length 8192 --bf16 "
               "--normalization RMSNorm --swiglu --position-embedding-type rope "
               "--untie-embeddings-and-output-weights --group-query-attention "
               "--num-query-groups 8 --disable-bias-linear --attention-dropout 0.0 "
               "--hidden-dropout 0.0 --rotary-base 500000")
EVAL_64 = ("evaluate", "-m", "llama3-8b", "-c", "dgx-h100-superpod", "--gpus", "64",
           "--from", "megatron")


@pytest.mark.parametrize("args", [f"... {MEGATRON_8B}", f"{MEGATRON_8B} --bf16 …"])
def test_from_megatron_refuses_a_pasted_ellipsis(capsys, args):
    code, _, err = run(capsys, *EVAL_64, args)
    assert code == 2 and "literal '...'" in err, err


def test_from_megatron_names_the_global_batch_default(capsys):
    code, out, _ = run(capsys, *EVAL_64, MEGATRON_8B.replace("micro-batch-size 1",
                                                             "micro-batch-size 2"))
    assert code == 0
    assert "global batch 16 = micro 2 x dp 8 (no --global-batch-size given)" in out, out
    code, js, _ = run(capsys, *EVAL_64, MEGATRON_8B, "--json")
    assert json.loads(js)["defaults"] == [
        "global batch 8 = micro 1 x dp 8 (no --global-batch-size given)"]
    code, js, _ = run(capsys, *EVAL_64, MEGATRON_8B + " --global-batch-size 8", "--json")
    assert json.loads(js)["defaults"] == []


def test_serve_pareto_labels_clear_unique_and_inside(monkeypatch, tmp_path):
    import planner.report.serve as sv

    figs: list = []
    monkeypatch.setattr(sv, "save_figure", lambda fig, plt, path, **kw: figs.append(fig))
    # a crowded front as serve --pareto gives it: 32 layouts, pairs alike but for KV dtype
    front = []
    for i in range(32):
        plan = {"tp": 8 if i < 20 else 4, "pp": 1 + i % 2, "weight_dtype": "fp8",
                "concurrency": 2 ** (i // 4), "kv_dtype": "fp8" if i % 4 > 1 else "bf16",
                "replicas": 1, "prefill": None}
        front.append({"gpu": "h100-sxm", "tokens_per_s_per_user": 120.0 - 2.4 * i,
                      "tokens_per_s_per_gpu": 1.0 + 0.3 * i * i, "plan": plan})
    sv.plot_serve_pareto(front, tmp_path / "f.png", "llama3-70b")
    fig = figs[0]
    assert not _overlaps(fig), _overlaps(fig)[:3]
    r = fig.canvas.get_renderer()
    texts = [t for ax in fig.axes for t in (*ax.texts, ax.title, ax.xaxis.label,
                                            ax.yaxis.label) if t.get_text()]
    off = [t.get_text() for t in texts
           if not fig.bbox.contains(*t.get_window_extent(r).p0)
           or not fig.bbox.contains(*t.get_window_extent(r).p1)]
    assert not off, off
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert len(labels) == len(set(labels)) >= 8, labels
    every = sv.point_labels(front)
    assert len(set(every)) == len(front)  # each point has a label of its own


@pytest.mark.slow(reason="catalog procurements through the CLI")
@pytest.mark.parametrize("flags, shown", [((), True), (("--quiet",), False),
                                          (("--json",), False)])
def test_procure_progress_on_stderr_only(capsys, monkeypatch, flags, shown):
    import io

    import planner.cli.console as console
    import planner.cli.procure as procure

    buf = io.StringIO()
    monkeypatch.setattr(procure, "err", Console(file=buf, force_terminal=True, width=120))
    monkeypatch.setattr(console, "PROGRESS_DELAY_S", 0.0)
    code, out, _ = run(capsys, "procure", "-m", "llama3-8b", "--tokens", "1e9", "--gpus",
                       "h100", "--counts", "8,16", *flags)
    assert code == 0
    text = buf.getvalue()
    assert ("option 1 of 2" in text) == ("ETA" in text) == shown, text
    assert "option 1 of" not in out


def test_sweep_quiet_hides_the_bar(monkeypatch):
    import planner.cli.sweep as sw

    monkeypatch.setattr(sw, "err", Console(file=open("/dev/null", "w"), force_terminal=True))
    bar, _ = sw._progress(10, 0)
    assert not bar.disable
    bar, _ = sw._progress(10, 0, quiet=True)
    assert bar.disable
