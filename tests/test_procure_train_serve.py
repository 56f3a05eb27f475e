"""Training and serving bought together (issue 39 item 4; planner/procurement/trainserve.py).

The tiny catalog of tests/test_procure.py, A100s rented at $5.00/GPU-hour (so that renting
them to serve is dearer than keeping the H100s): within 0.1 days the cheapest training is 4
rented H100 (``alpha``, test_procure_site.py). The tiny model at 1 request/s (512 tokens in,
128 out, TTFT 1 s, TPOT 50 ms) is served by one GPU of either type. By hand (catalog: H100
$2.50/GPU-hour, $30,000, 700 W; A100 $17,000, 400 W; $0.082/kWh):

    reuse (keep renting 1 H100):  2.50 x 24                         = $60.00/day
    buy 1 A100 to serve:          $17,000 + 1.1 x 400 W x 24 h x $0.082/kWh
                                = $17,000 + $0.86592/day
    break-even: 17,000 / (60 - 0.86592)                              = 287.48 days

so 30 days of serving reuse the training fleet ($1,800 against $17,026) and 400 days buy
A100s ($17,346 against $24,000).
"""

from __future__ import annotations

from functools import lru_cache

import pytest

from planner.errors import InputError
from planner.orchestration.serve import workload
from planner.procurement.trainserve import procure_train_serve
from planner.specs.pricing import load_pricing
from planner.specs.serve import load_engine

from test_procure import MODEL, OPTIONS, TEMPLATES, TOKENS

A100_RENT = {"gpus": {"a100-sxm-80gb": {"price_per_gpu_hour": 5.0}}}
SERVE = workload(512, 128, 1.0, 1000.0, 50.0)
TRT = load_engine("trtllm")  # planner serve's default engine (the request's)
REUSE_PER_DAY = 2.50 * 24
A100_RUN_PER_DAY = 1.1 * 400 / 1000 * 24 * 0.082
BREAK_EVEN = 17000 / (REUSE_PER_DAY - A100_RUN_PER_DAY)


@lru_cache(maxsize=None)
def ask(serve_days: float, mode: str = "rent", owned: tuple = ()):
    return procure_train_serve(
        MODEL, TOKENS, engine=TRT, serve=SERVE, serve_days=serve_days, days=0.1, templates=TEMPLATES,
        counts=(4, 8), options=OPTIONS, workers=1, goodput="off",
        pricing=load_pricing(mode=mode, overrides=A100_RENT), owned=dict(owned) or None)


def test_short_serving_reuses_the_training_fleet():
    res = ask(30.0)
    c = res.training.choice
    assert (c.cluster, c.num_gpus, res.holding) == ("alpha", 4, "rented")
    assert res.choice == "reuse" and res.serving.how == "reuse"
    assert res.reuse.result.plan.gpu == "h100-sxm" and res.reuse.num_gpus == 1
    assert res.reuse.cost_usd == pytest.approx(REUSE_PER_DAY * 30)
    buy = res.separate["buy"]
    assert buy.result.plan.gpu == "a100-sxm-80gb" and buy.num_gpus == 1
    assert buy.cost_usd == pytest.approx(17000 + A100_RUN_PER_DAY * 30)
    assert res.total_usd == pytest.approx(c.cost_usd + 1800.0)
    assert res.training_cost_usd == c.cost_usd  # rented: procure's rented cost as is


def test_long_serving_buys_a_serving_fleet():
    res = ask(400.0)
    assert res.choice == "separate" and res.serving.how == "buy"
    s = res.serving
    assert s.result.plan.gpu == "a100-sxm-80gb"
    assert s.capital_usd == 17000.0
    assert s.usd_per_day == pytest.approx(A100_RUN_PER_DAY)
    assert res.reuse.cost_usd == pytest.approx(REUSE_PER_DAY * 400)
    assert res.total_usd == pytest.approx(res.training_cost_usd + 17000
                                          + A100_RUN_PER_DAY * 400)
    assert "bought 1x a100-sxm-80gb" in res.summary


def test_break_even_serving_period():
    """Either period names the same crossing, 287.48 days, between the two answers."""
    for days in (30.0, 400.0):
        res = ask(days)
        assert res.break_even_days == pytest.approx(BREAK_EVEN)
        assert res.break_even_exact
    assert 30 < BREAK_EVEN < 400
    assert "past 287 days of serving" in ask(30.0).summary
    js = ask(400.0).to_json()
    assert js["choice"] == "separate" and js["break_even_days"] == pytest.approx(BREAK_EVEN)


def test_owned_training_fleet_serves_at_its_running_cost():
    """8 owned A100 train (sunk capital, test_procure_site.py); reusing one to serve costs its
    electricity only, 1.1 x 400 W x $0.082/kWh: no fleet to buy is cheaper per day, so there
    is no break-even (reuse wins for good)."""
    res = ask(400.0, owned=(("beta", 8),))
    assert res.holding == "owned" and res.choice == "reuse"
    assert res.reuse.result.plan.gpu == "a100-sxm-80gb"
    assert res.reuse.cost_usd == pytest.approx(A100_RUN_PER_DAY * 400 * res.reuse.num_gpus)
    assert res.break_even_days is None


def test_bought_training_fleet_is_charged_its_capital_once():
    """--pricing own: the campaign buys its 4 H100 ($120,000 up front, plus the training's
    electricity); serving on one then costs its running cost, 1.25 x (700 + 400 / 4) W x
    $0.082/kWh x 24 = $1.968/day, far below any fleet to buy."""
    res = ask(30.0, mode="own")
    c = res.training.choice
    assert res.holding == "bought" and (c.gpu, c.num_gpus) == ("h100-sxm", 4)
    assert res.training_cost_usd == pytest.approx(4 * 30000 + 0.082 * c.energy_mwh * 1000)
    assert res.choice == "reuse"
    assert res.reuse.cost_usd == pytest.approx(1.25 * 800 / 1000 * 0.082 * 24 * 30)


def test_bad_inputs_name_the_field():
    with pytest.raises(InputError, match="--serve-days"):
        procure_train_serve(MODEL, TOKENS, engine=TRT, serve=SERVE, serve_days=0, days=0.1)
    with pytest.raises(InputError, match="--serve-rate"):
        procure_train_serve(MODEL, TOKENS, engine=TRT, serve=workload(512, 128), serve_days=30, days=0.1)
    with pytest.raises(InputError, match="--objective energy"):
        procure_train_serve(MODEL, TOKENS, engine=TRT, serve=SERVE, serve_days=30, days=0.1,
                            objective="energy")


def test_break_even_re_solves_the_fleet_to_buy():
    """With H100s at $10,000 to buy, the fleet to buy depends on the period: over 10,000 days
    1 A100 ($17,000 + $0.866/day) beats 1 H100 ($10,000 + 1.25 x 800 W x $0.082/kWh x 24 =
    $1.968/day; they cross at 7,000 / 1.102 = 6,352 days), but near the crossing with reuse
    it is the H100: 17,000 / (60 - 0.866) = 287.5 days is not where the answer flips; it
    flips at 10,000 / (60 - 1.968) = 172.3 days."""
    res = procure_train_serve(
        MODEL, TOKENS, engine=TRT, serve=SERVE, serve_days=10000.0, days=0.1, templates=TEMPLATES,
        counts=(4, 8), options=OPTIONS, workers=1, goodput="off",
        pricing=load_pricing(overrides={"gpus": {
            "a100-sxm-80gb": {"price_per_gpu_hour": 5.0},
            "h100-sxm": {"capex_usd": 10000.0}}}))
    assert res.choice == "separate" and res.serving.result.plan.gpu == "a100-sxm-80gb"
    h100_run = 1.25 * 800 / 1000 * 0.082 * 24
    assert res.break_even_days == pytest.approx(10000 / (REUSE_PER_DAY - h100_run))
    assert res.break_even_exact


def test_reuse_is_limited_to_the_training_fleet():
    """Trained on one H100 (the only count allowed, no deadline), the fleet cannot serve
    5,000 requests/s: one H100 saturates at about 4,100 (the serving evaluator's capacity),
    so reuse has no answer and a separate fleet (at least two GPUs) is chosen."""
    res = procure_train_serve(
        MODEL, TOKENS, engine=TRT, serve=workload(512, 128, 5000.0, 1000.0, 50.0), serve_days=30.0,
        templates=TEMPLATES, counts=(1,), options=OPTIONS, workers=1, goodput="off",
        pricing=load_pricing(overrides=A100_RENT))
    assert res.training.choice.num_gpus == 1
    assert res.reuse is None and "does not serve 5000 requests/s" in res.why_not["reuse"]
    assert res.choice == "separate" and res.serving.num_gpus >= 2
    assert res.break_even_days is None


def test_break_even_looks_past_the_fleet_bought_for_the_period():
    """A bought training fleet (--pricing own) of 4 H100 serves at $1.968/day. With H100s at
    $1,000 to buy, the cheapest fleet to buy for 30 days is one H100 ($1,000 + $1.968/day),
    never cheaper than reuse; but one A100 ($17,000 + $0.866/day) is, past 17,000 / (1.968 -
    0.86592) = 15,426 days: the break-even is found from the fleet cheapest over a century."""
    res = procure_train_serve(
        MODEL, TOKENS, engine=TRT, serve=SERVE, serve_days=30.0, days=0.1, templates=TEMPLATES,
        counts=(4, 8), options=OPTIONS, workers=1, goodput="off",
        pricing=load_pricing(mode="own", overrides={"gpus": {"h100-sxm": {"capex_usd": 1000.0}}}))
    assert res.holding == "bought" and res.choice == "reuse"
    assert res.separate["buy"].result.plan.gpu == "h100-sxm"
    h100_run = 1.25 * 800 / 1000 * 0.082 * 24
    assert res.break_even_days == pytest.approx(17000 / (h100_run - A100_RUN_PER_DAY))
    assert res.break_even_exact
