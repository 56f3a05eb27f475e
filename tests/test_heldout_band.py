"""The validation corpus, held out by source, and the error band every answer carries."""

from __future__ import annotations

import importlib.util
import json
import statistics
from pathlib import Path

import pytest

from planner.validation import band as B
from planner.validation.band import Band, Regime, band_for, conformal_pct, distance
from planner.validation.corpus import corpus_runs, fit_group, sources
from planner.validation.heldout import heldout_report, residual_slope, stale_runs

ROOT = Path(__file__).resolve().parents[1]


def _calibrate():
    spec = importlib.util.spec_from_file_location("calibrate", ROOT / "tools" / "calibrate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _regime(r: dict) -> Regime:
    return Regime(r["generation"], r["family"], r["dtype"], r["gpus"], r["seq_len"], r["moe"])


# ---- the conformal band, by hand ------------------------------------------------------
def test_conformal_band_is_the_kth_smallest_residual():
    # n = 10: k = ceil(0.9 x 11) = 10, the largest |r|; n = 19: k = 18
    ten = [0.01 * i for i in range(1, 11)]
    assert conformal_pct(ten) == pytest.approx(10.0)
    nineteen = [-0.01 * i for i in range(1, 20)]  # the sign does not matter
    assert conformal_pct(nineteen) == pytest.approx(18.0)
    # n = 8: k = ceil(8.1) = 9 > 8: too few runs for a 90 % band
    assert conformal_pct(ten[:8]) is None
    assert B.MIN_RUNS == 9


def test_distance_counts_each_regime_difference():
    rec = dict(generation="H100", family="megatron", dtype="fp8", gpus=64, seq_len=4096,
               moe=False)
    same = Regime("H100", "megatron", "fp8", 64, 4096, False)
    assert distance(same, rec) == 0
    assert distance(Regime("H200", "megatron", "fp8", 64, 4096, False), rec) == B.SIBLING
    assert distance(Regime("A100", "megatron", "fp8", 64, 4096, False), rec) == float("inf")
    assert distance(Regime("H100", "megatron", "fp8", 640, 4096, False), rec) == pytest.approx(1)
    assert distance(Regime("H100", "megatron", "fp8", 64, 65536, False), rec) == pytest.approx(1)
    assert distance(Regime("H100", "torchtitan", "bf16", 64, 4096, True), rec) == 2.5


def test_too_few_near_runs_give_no_band_and_say_so():
    recs = [dict(source=f"s{i}", generation="H100", family="megatron", dtype="bf16", gpus=64,
                 seq_len=4096, moe=False, heldout_residual=0.05) for i in range(8)]
    b = band_for(Regime("H100", "megatron", "bf16", 64, 4096, False), recs)
    assert b.pct is None and "8 held-out run(s)" in b.note and "9 are needed" in b.note
    b9 = band_for(Regime("H100", "megatron", "bf16", 64, 4096, False), recs + [
        dict(recs[0], source="s9", heldout_residual=-0.02)])
    assert b9.pct == pytest.approx(5.0) and "9 runs held out by source" in b9.note


def test_a_wider_neighbourhood_is_used_only_when_the_near_one_is_thin():
    near = dict(generation="A100", family="megatron", dtype="bf16", gpus=64, seq_len=2048,
                moe=False)
    recs = [dict(near, source="a", heldout_residual=0.02)] * 9 + [
        dict(near, gpus=2048, source="b", heldout_residual=0.30)] * 9
    here = Regime("A100", "megatron", "bf16", 64, 2048, False)
    assert band_for(here, recs).pct == pytest.approx(2.0)  # radius 1.0 holds 9
    # a regime 1.2 decades away sees only the far runs within 1.5
    far = Regime("A100", "megatron", "bf16", 1024, 2048, False)
    assert band_for(far, recs).pct == pytest.approx(30.0)


# ---- the corpus and the held-out file ---------------------------------------------------
def test_every_corpus_run_is_costed_and_cited():
    runs = corpus_runs()
    assert len(runs) >= 90
    cites = sources()
    assert len(cites) >= 10 and all(len(c) > 20 for c in cites.values())
    gens = {r.generation for r in runs}
    assert {"A100", "H100", "B200", "GB200"} <= gens


def test_the_recorded_residuals_are_this_cost_model():
    """A change that moves a corpus prediction needs `python tools/calibrate.py --write`."""
    assert stale_runs() == []


def test_fit_groups_follow_what_a_prediction_reads():
    by = {r.name: fit_group(r) for r in corpus_runs()}
    assert by["korthikanti-megatron-22b-full"] == "A100 megatron-core"
    assert by["mosaicml-a100-mpt-7b-8"] == "A100"
    assert by["tt-8b-8gpu-fsdp"] == "H100 torchtitan"
    assert by["nemo2407-h100-llama2-7b-8"] == "H100"
    assert by["nemo2504-gb200-llama3-8b"] == "B200"  # the same die: one fit
    assert by["mlperf51-hpe-h200-llama31-8b-fp8-64"] == "H100"
    assert by["amd-pt2502-mi300x-llama31-8b-bf16-8k"] is None  # no fit reads the MI300X


def test_holding_a_source_out_refits_without_it():
    cal = _calibrate()
    # two grid points, two sources: source 0's runs favour point A, source 1's point B
    results = [([0.0, 0.0, 0.3, 0.3], {"p": "A"}), ([0.2, 0.2, 0.0, 0.0], {"p": "B"})]
    keep_without_0 = [False, False, True, True]
    assert cal.best_point(results, keep_without_0)[1] == {"p": "B"}
    assert cal.best_point(results, [True, True, False, False])[1] == {"p": "A"}


def test_residual_slope_on_hand_numbers():
    recs = [dict(gpus=g, heldout_residual=e) for g, e in ((10, 0.0), (100, 0.1), (1000, 0.2))]
    assert residual_slope(recs) == pytest.approx(0.1)
    assert residual_slope([dict(gpus=8, heldout_residual=0.1)]) is None


# ---- the band against the held-out runs ---------------------------------------------------
def _bands_without_own_source():
    out = []
    for r in B.heldout_records():
        b = band_for(_regime(r), exclude_source=r["source"])
        if b.pct is not None:
            out.append((r, b))
    return out


def test_the_band_covers_at_least_80_percent_of_runs_held_out_by_source():
    """Each held-out run against the band built without its own source's runs."""
    banded = _bands_without_own_source()
    assert len(banded) >= 40  # the band exists for most of the corpus
    inside = sum(abs(r["heldout_residual"]) * 100 <= b.pct for r, b in banded)
    assert inside / len(banded) >= 0.8


def test_bands_are_narrower_where_more_runs_are_near():
    banded = _bands_without_own_source()
    many = [b.pct for _, b in banded if b.radius == B.RADII[0]]
    few = [b.pct for _, b in banded if b.radius != B.RADII[0]]
    assert len(many) >= 5 and len(few) >= 5
    assert statistics.median(many) < statistics.median(few)


def test_validate_reports_the_held_out_figures():
    rep = heldout_report()
    assert rep["runs"] == len(B.heldout_records())
    fw = rep["by"]["framework x generation"]
    assert sum(r["runs"] for r in fw) == rep["runs"]


# ---- every answer carries it ---------------------------------------------------------------
def test_solve_and_evaluate_carry_the_band():
    from planner.api import evaluate, solve
    from planner.specs.loaders import load_cluster

    res = solve("llama3-8b", "dgx-h100-superpod", gpus=64, global_batch_size=256,
                dtype="fp8", time_limit_s=30)
    est = res.best.estimate
    assert est.expected_error_note
    data = res.to_json()["estimate"]
    assert "expected_error_pct" in data and "expected_error_note" in data
    h100 = load_cluster("dgx-h100-superpod", 64)
    ev = evaluate("llama3-8b", h100, res.best.plan)
    assert ev.expected_error_pct == est.expected_error_pct
    # a framework changes the regime (its own held-out runs)
    tt = evaluate("llama3-8b", h100, dict(res.best.plan.to_dict(), dtype="bf16",
                                                            fp8_params=False),
                  framework="torchtitan")
    assert "torchtitan" in tt.expected_error_note


def test_a_gpu_without_validated_runs_says_so():
    from planner.api import evaluate

    est = evaluate("llama3-8b", "mi300x-cluster", dict(dp=8, global_batch_size=64,
                                                       seq_len=4096))
    if est.feasible:
        assert est.expected_error_pct is None and est.expected_error_note.startswith("no band")


def test_serve_json_has_a_null_band_with_its_reason(capsys):
    from planner.validation.band import SERVING

    assert SERVING.pct is None and SERVING.to_json()["expected_error_note"].startswith("no band")
    assert json.loads(json.dumps(SERVING.to_json()))["expected_error_pct"] is None
    assert isinstance(SERVING, Band)


# ---- trust at the optimum ------------------------------------------------------------------
def test_an_optimum_far_beyond_the_best_published_run_says_why(monkeypatch):
    """A published Llama 3 8B run at tp 8 (a slow plan for 8 GPUs), measured at 60 % of what
    the model predicts for the optimum: the comparison says so and names tp as what makes
    the difference, setting tp back alone slowing the optimum."""
    import dataclasses

    from planner.api import evaluate, solve
    from planner.specs.loaders import load_cluster, load_model
    from planner.validation import trust

    res = solve("llama3-8b", "dgx-h100-superpod", gpus=8, global_batch_size=64, seq_len=8192,
                dtype="bf16", fix={"tp": 1}, time_limit_s=30)
    best = res.best
    ref_plan = best.plan.model_copy(update={"tp": 8, "dp": best.plan.dp * best.plan.cp // 8,
                                            "cp": 1, "sequence_parallel": True,
                                            "tp_comm": "rs_ag"})
    h100 = load_cluster("dgx-h100-superpod", 8)
    ref = evaluate("llama3-8b", h100, ref_plan)
    assert ref.feasible and ref.iteration_time_s > best.estimate.iteration_time_s
    template = next(r for r in corpus_runs() if r.generation == "H100")
    tps = 64 * 8192 / best.estimate.iteration_time_s / 8
    fake = dataclasses.replace(template, name="fake-8b-tp8", source="fake",
                               model=load_model("llama3-8b"), cluster=h100, plan=ref_plan,
                               metric="tokens_per_s_per_gpu", measured=0.6 * tps)
    monkeypatch.setattr(trust, "similar_runs", lambda *a: [fake])
    out = trust.published_comparison(fake.model, h100, best.plan, best.estimate, 10.0)
    assert out is not None and out["beyond_band"]
    assert out["gain_pct"] == pytest.approx(100 * (1 / 0.6 - 1), rel=1e-6)
    top = out["differences"][0]
    assert top["setting"].startswith("parallel degrees tp1") and "-> tp8 cp1" in top["setting"]
    assert top["slowdown_pct"] == pytest.approx(
        100 * (ref.iteration_time_s / best.estimate.iteration_time_s - 1), rel=1e-9)
    assert "parallel degrees" in out["note"]
    # within the band: reported, not flagged
    near = dataclasses.replace(fake, measured=0.97 * tps)
    monkeypatch.setattr(trust, "similar_runs", lambda *a: [near])
    quiet = trust.published_comparison(fake.model, h100, best.plan, best.estimate, 10.0)
    assert not quiet["beyond_band"] and quiet["note"] is None


def test_a_corpus_run_with_an_unknown_key_is_refused_naming_the_closest(tmp_path, monkeypatch):
    """A typo in a source file (here ``microbatch`` for ``microbatch_size`` in a run's plan,
    and ``hbm_gb`` in its GPU fields) is refused with the file, the run and the closest key."""
    from planner.errors import InputError
    from planner.validation import corpus

    base = dict(source=dict(id="s", citation="a citation long enough to count",
                            framework="Megatron-LM", framework_family="megatron",
                            metric="tokens_per_s_per_gpu"),
                runs=[dict(name="r", model="llama3-8b", cluster="dgx-h100-superpod", gpus=8,
                           plan=dict(microbatch=1, global_batch_size=64, seq_len=8192),
                           measured=1000.0)])
    f = corpus.CorpusFile.model_validate(base)
    with pytest.raises(InputError, match=r"(?s)run r: plan.*did you mean microbatch_size"):
        corpus._file_runs("s.yaml", f)
    base["runs"][0]["plan"] = dict(global_batch_size=64, seq_len=8192)
    base["runs"][0]["gpu"] = {"hbm_gb": 40}
    with pytest.raises(InputError, match=r"(?s)run r: gpu.*hbm_gib"):
        corpus._file_runs("s.yaml", corpus.CorpusFile.model_validate(base))


def test_similar_published_runs_are_found_through_the_index():
    """Same model, generation, precision and sequence within 2x GPUs: NeMo 24.12's Llama 3
    8B FP8 run on 8 H100 is similar to an FP8 plan on 8 or 16 of them, not to a bf16 one, a
    4K-token one or one on 64 GPUs."""
    from planner.specs.loaders import load_cluster, load_model
    from planner.specs.plan import Plan
    from planner.validation.trust import similar_runs

    m = load_model("llama3-8b")
    def names(gpus, **kw):
        p = Plan(**{**dict(dp=gpus, global_batch_size=128, seq_len=8192, dtype="fp8"), **kw})
        return {r.name for r in similar_runs(m, load_cluster("dgx-h100-superpod", gpus), p)}
    assert "nemo2412-h100-llama3-8b" in names(8) and "nemo2412-h100-llama3-8b" in names(16)
    assert "nemo2412-h100-llama3-8b" not in names(8, dtype="bf16")
    assert "nemo2412-h100-llama3-8b" not in names(8, seq_len=4096)
    assert "nemo2412-h100-llama3-8b" not in names(64)
