"""Goodput: failures, checkpoints and restarts in days and dollars
(planner/costmodel/train/goodput.py, docs/cost-model.md "Goodput")."""

from __future__ import annotations

import json
import math

import pytest

from planner.costmodel.train.goodput import (
    checkpoint_bytes,
    daly_interval_s,
    effective_fraction,
    job_goodput,
    lost_per_failure_s,
    model_checkpoint_bytes,
    plan_checkpoint_bytes_per_gpu,
    training_goodput,
    young_interval_s,
)
from planner.errors import InputError
from planner.orchestration.train import effective_totals
from planner.specs.loaders import load_cluster, load_model
from planner.specs.plan import Plan

from conftest import small_cluster, tiny_model
from test_cli import run


# ---- the interval and the lost work, by hand ----------------------------------------------
def test_young_and_daly_intervals_by_hand():
    # Young: sqrt(2 x 60 s x 36,000 s) = sqrt(4.32e6) = 2,078.46 s
    assert young_interval_s(60, 36000) == pytest.approx(2078.4609690826528, rel=1e-12)
    # Daly: x = 60 / 72,000; 2,078.46 x (1 + sqrt(x)/3 + x/9) - 60 = 2,038.65 s
    x = 60 / 72000
    assert daly_interval_s(60, 36000) == pytest.approx(
        2078.4609690826528 * (1 + math.sqrt(x) / 3 + x / 9) - 60, rel=1e-12)
    assert daly_interval_s(60, 36000) == pytest.approx(2038.6534, abs=1e-3)
    assert daly_interval_s(100, 40) == 40  # delta >= 2M: checkpoint once per M


def test_lost_work_and_fraction_by_hand():
    # tau 1,000 s, delta 10 s, R 600 s, M 36,000 s: half an interval with its checkpoint
    # (505 s) plus the restart is lost per interruption
    assert lost_per_failure_s(1000, 10, 600) == 1105
    f = effective_fraction(1000, 10, 600, 36000)
    # Daly's complete model: 1000 / (36000 e^{600/36000} (e^{1010/36000} - 1))
    assert f == pytest.approx(0.9601386561, rel=1e-9)
    # ... and its first order: tau/(tau+delta) x (1 - (R + (tau+delta)/2)/M) = 0.95971
    assert f == pytest.approx(1000 / 1010 * (1 - 1105 / 36000), abs=1e-3)
    assert effective_fraction(1000, 10, 600, math.inf) == 1.0


def test_daly_interval_maximizes_the_fraction():
    """The chosen interval is the best one: shorter or longer intervals train less."""
    for delta, m in ((3.0, 1e4), (60.0, 3.6e4), (600.0, 2e4)):
        tau = daly_interval_s(delta, m)
        best = effective_fraction(tau, delta, 600, m)
        for k in (0.7, 0.9, 1.1, 1.4):
            assert effective_fraction(k * tau, delta, 600, m) < best


# ---- checkpoint size -----------------------------------------------------------------------
@pytest.mark.parametrize("zero,expected", [(0, 14e9), (1, 3.5e9), (2, 3.5e9), (3, 1.75e9)])
def test_checkpoint_bytes_per_zero_stage(zero, expected):
    """1e9 parameters on one GPU of 8 data-parallel ranks: bf16 weights (2 B) and fp32
    master + Adam moments (12 B); ZeRO 1 and 2 shard the optimizer (gradients are not
    saved), ZeRO 3 the weights too."""
    assert checkpoint_bytes(1e9, zero, 8, "bf16") == pytest.approx(expected)


def test_checkpoint_saves_no_fp8_cast_cache():
    assert checkpoint_bytes(1e9, 0, 1, "fp8") == checkpoint_bytes(1e9, 0, 1, "bf16") == 14e9
    plan = {"dtype": "fp8", "fp8_params": True}  # FP8 model copy: 1 B
    from planner.costmodel.numerics import Numerics
    assert checkpoint_bytes(1e9, 0, 1, Numerics.of(plan)) == 13e9


def test_plan_checkpoint_per_gpu_sums_to_the_model_under_zero3():
    """ZeRO 3 keeps no copy twice, so the GPUs' shares add up to one checkpoint; ZeRO 1
    replicates the weights over dp."""
    model = tiny_model(num_layers=4, hidden_size=512, num_attention_heads=8, num_kv_heads=8,
                       ffn_hidden_size=2048, global_batch_size=8, seq_len=1024)
    whole = model_checkpoint_bytes(model)
    z3 = Plan(tp=1, pp=1, dp=8, global_batch_size=8, seq_len=1024, zero_stage=3)
    assert plan_checkpoint_bytes_per_gpu(model, z3) * 8 == pytest.approx(whole)
    z1 = Plan(tp=1, pp=1, dp=8, global_batch_size=8, seq_len=1024, zero_stage=1)
    assert plan_checkpoint_bytes_per_gpu(model, z1) == pytest.approx(whole * (2 + 12 / 8) / 14)


# ---- Llama 3 405B: >90 % effective training time ------------------------------------------
def test_llama3_405b_effective_training_time():
    """Dubey et al. 2024, Sec. 3.3.4: 466 job interruptions in a 54-day snapshot on 16,384
    H100 (TP8 CP1 PP16 DP128, Table 4), and "higher than 90% effective training time"."""
    model = load_model("llama3-405b")
    cluster = load_cluster("dgx-h100-superpod", 16384).model_copy(
        update={"failures_per_gpu_hour": 466 / (54 * 24 * 16384)})
    plan = Plan(tp=8, cp=1, pp=16, dp=128, global_batch_size=1024, seq_len=8192,
                microbatch_size=1, zero_stage=1, uneven_pipeline=True)
    g = training_goodput(model, cluster, plan.world_size, plan)
    assert g.mtbf_s == pytest.approx(54 * 86400 / 466)  # 2.8 h between interruptions
    assert abs(g.fraction - 0.90) <= 0.05, g
    # each GPU's share of the checkpoint: the paper's "1 MB to 4 GB per GPU" (Sec. 3.3.1)
    assert 1e6 <= g.checkpoint_bytes / plan.world_size <= 4e9
    # the resident state per GPU (ZeRO 1 over dp 128): bf16 weights of 1/128 of the
    # model plus 1/16,384 of the optimizer states
    per_gpu = plan_checkpoint_bytes_per_gpu(model, plan)
    assert 5e9 < per_gpu < 8e9


def test_async_checkpoints_block_less_and_need_the_write_to_finish():
    model = load_model("llama3-405b")
    cluster = load_cluster("dgx-h100-superpod", 16384)
    sync = training_goodput(model, cluster, 16384, "bf16", "on")
    asy = training_goodput(model, cluster, 16384, "bf16", "async")
    assert asy.blocking_s < sync.blocking_s == sync.write_s
    assert asy.interval_s >= asy.write_s
    assert asy.fraction > sync.fraction
    slow = cluster.model_copy(update={"checkpoint_write_GBps_per_gpu": 1e-4})  # 1 h writes
    s = training_goodput(model, slow, 16384, "bf16", "async")
    assert s.interval_s == s.write_s  # the next checkpoint waits for the last write


def test_no_failures_is_the_ideal_figure():
    c = small_cluster(8).model_copy(update={"failures_per_gpu_hour": 0.0})
    g = job_goodput(c, 8, 1e12)
    assert g.fraction == 1.0
    assert json.dumps(g.to_json(), allow_nan=False)  # no infinities in JSON


def test_bad_settings_are_input_errors():
    with pytest.raises(InputError, match="--goodput 'maybe'"):
        training_goodput(tiny_model(), small_cluster(8), 8, "bf16", "maybe")
    with pytest.raises(ValueError, match="failures_per_gpu_hour"):
        small_cluster(8).model_validate({**small_cluster(8).model_dump(),
                                         "failures_per_gpu_hour": -1})


# ---- wired into the totals ------------------------------------------------------------------
def test_effective_totals_divide_by_the_fraction_and_off_is_ideal():
    ideal = {"days": 10.0, "gpu_hours": 100.0, "energy_mwh": 5.0, "cost_usd": None}
    g = job_goodput(small_cluster(8).model_copy(update={"failures_per_gpu_hour": 0.01}),
                    8, 1e12)
    eff = effective_totals(ideal, g)
    assert eff["days"] == pytest.approx(10.0 / g.fraction) and eff["cost_usd"] is None
    assert eff["ideal"] == ideal and g.fraction < 0.99
    assert effective_totals(ideal, None) == {**ideal, "goodput": None}


@pytest.mark.slow(reason="an end-to-end solve of a catalog model, twice")
def test_solve_cli_goodput_on_and_off(capsys):
    fixed = ["--fix", "tp=8", "--fix", "pp=1", "--fix", "cp=1", "--fix", "microbatch_size=1",
             "--fix", "recompute=full", "--fix", "zero_stage=1", "--fix", "virtual_stages=1",
             "--fix", "sequence_parallel=true"]
    args = ["solve", "-m", "llama3-8b", "-c", "dgx-h100-superpod", "--gpus", "64",
            "--tokens", "1e12", "--json", "--time-limit", "30", *fixed]
    code, out, err = run(capsys, *args)
    assert code == 0, err
    on = json.loads(out)["totals"]
    code, out, err = run(capsys, *args, "--goodput", "off")
    assert code == 0, err
    off = json.loads(out)["totals"]
    assert off["goodput"] is None and "ideal" not in off
    assert on["ideal"]["days"] == pytest.approx(off["days"])
    assert on["days"] == pytest.approx(off["days"] / on["goodput"]["fraction"])
    assert on["days"] > off["days"]
    assert run(capsys, *args, "--goodput", "maybe")[0] == 2


# ---- procurement: the deadline is in effective days ----------------------------------------
def test_failure_rate_changes_the_procurement_choice():
    """Two templates of the same hardware, the flaky one cheaper: ideally the flaky one
    meets the deadline at the lower price; with its failures it misses it (its effective
    days are the ideal ones over its goodput), and the reliable one is chosen."""
    from planner.api import procure
    from test_procure import MODEL, OPTIONS

    base = small_cluster(8, domain=4, gpu="h100-sxm")
    flaky = base.model_copy(update={"name": "flaky", "price_per_gpu_hour": 1.0,
                                    "failures_per_gpu_hour": 0.2, "restart_s": 900})
    steady = base.model_copy(update={"name": "steady", "price_per_gpu_hour": 2.0})
    kw = dict(clusters=[flaky, steady], counts=[8], options=OPTIONS, workers=1)
    ideal = procure(MODEL, 2e10, goodput="off", **kw)
    assert ideal.choice.cluster == "flaky" and ideal.choice.goodput is None
    days = ideal.choice.days * 1.2
    res = procure(MODEL, 2e10, days=days, **kw)
    assert res.choice.cluster == "steady" and res.choice.days <= days
    assert res.choice.ideal("days") < res.choice.days
    flaky_rec = next(r for r in res.records if r.cluster == "flaky")
    assert flaky_rec.ideal("days") == pytest.approx(ideal.choice.days)  # off restores it
    assert flaky_rec.days > days and not flaky_rec.meets_limits
    assert procure(MODEL, 2e10, days=days, goodput="off", **kw).choice.cluster == "flaky"
