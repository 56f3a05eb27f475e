"""Procurement as buyers face it (issue 39 items 1, 2, 5): site limits (facility power,
racks), an owned fleet whose capital is sunk, and rent against buy with its break-even.

The tiny catalog of tests/test_procure.py: ``alpha`` (H100, 4-GPU nodes of 400 W non-GPU
power, PUE 1.25) and ``beta`` (A100, 8-GPU nodes, no node power, PUE 1.1), no network power.
Peak facility power, by hand (catalog TDPs: H100 700 W, A100 400 W):

    alpha, 4 GPUs: 1.25 x (4 x 700 + 1 x 400) = 4,000 W
    alpha, 8 GPUs: 1.25 x (8 x 700 + 2 x 400) = 8,000 W
    beta,  8 GPUs: 1.10 x (8 x 400)           = 3,520 W

Within 0.1 days the options that train the model in time are alpha 4, alpha 8 and beta 8;
the cheapest rented one is alpha 4 (4 H100 at $2.50 for about 0.076 days, against 8 A100 at
$1.60 for about 0.084 days).
"""

from __future__ import annotations

import math

import pytest

from planner.errors import InfeasibleError, InputError
from planner.procurement.rentbuy import break_even_days, rent_usd
from planner.specs.pricing import load_pricing
from planner.specs.site import inventory_from, load_inventory

from test_procure import TEMPLATES, ask

DAYS = 0.1


def test_peak_facility_power_by_hand():
    res = ask(days=DAYS, pareto=True)
    power = {(r.cluster, r.num_gpus): r.facility_power_mw for r in res.records}
    assert math.isclose(power[("alpha", 4)], 4000e-6, rel_tol=1e-12)
    assert math.isclose(power[("alpha", 8)], 8000e-6, rel_tol=1e-12)
    assert math.isclose(power[("beta", 8)], 3520e-6, rel_tol=1e-12)
    assert res.to_json()["choice"]["facility_power_mw"] == res.choice.facility_power_mw


def test_power_cap_changes_the_gpu_type():
    """Uncapped, 4 H100 (4.0 kW) are the cheapest within the deadline; at 3.8 kW neither
    H100 option fits and 8 A100 (3.52 kW) are chosen."""
    free = ask(days=DAYS)
    assert (free.choice.gpu, free.choice.num_gpus) == ("h100-sxm", 4)
    capped = ask(days=DAYS, max_power_mw=0.0038)
    assert (capped.choice.gpu, capped.choice.num_gpus) == ("a100-sxm-80gb", 8)
    assert math.isclose(capped.choice.facility_power_mw, 3520e-6, rel_tol=1e-12)
    assert capped.choice.facility_power_mw <= 0.0038
    assert capped.stats["outside_site"] > 0


def test_infeasible_power_cap_names_the_megawatts_needed():
    """At 3 kW nothing that meets 0.1 days fits: the least-power option meeting it is 8 A100,
    which need 3.52 kW (0.00352 MW)."""
    with pytest.raises(InfeasibleError) as e:
        ask(days=DAYS, max_power_mw=0.003)
    text = str(e.value) + " ".join(e.value.reasons) + " ".join(e.value.hints)
    assert "needs 0.00352 MW; the site has 0.003 MW (--max-power-mw)" in text, text
    assert "8x a100-sxm-80gb (beta)" in text
    assert "--max-power-mw 0.00352 or more" in text


def test_nothing_fits_the_site():
    """Below the smallest option's power (1 A100: 1.1 x 400 W = 440 W) nothing fits."""
    with pytest.raises(InfeasibleError) as e:
        ask(max_power_mw=0.0004)
    assert "needs 0.00044 MW; the site has 0.0004 MW" in " ".join(e.value.reasons)


def test_rack_limit_binds():
    """One node per rack: 8 H100 (two 4-GPU nodes) take 2 racks; within 0.06 days only they
    train the model in time, so one rack is too few and the answer says two are needed."""
    racked = [TEMPLATES[0].model_copy(update={"gpus_per_rack": 4}),
              TEMPLATES[1].model_copy(update={"gpus_per_rack": 8})]
    assert ask(templates=racked, days=0.06).choice.racks == 2
    with pytest.raises(InfeasibleError) as e:
        ask(templates=racked, days=0.06, max_racks=1)
    assert "needs 2 racks; the site has 1 (--max-racks)" in " ".join(e.value.reasons)


def test_rack_limit_needs_rack_figures():
    with pytest.raises(InputError, match="cluster 'alpha' has no gpus_per_rack"):
        ask(days=DAYS, max_racks=4)


def test_site_limits_are_checked():
    with pytest.raises(InputError, match="max_power_mw"):
        ask(days=DAYS, max_power_mw=-1.0)


# ---- owned inventory ----------------------------------------------------------------------
def test_owned_fleet_wins_because_its_capital_is_sunk():
    """8 owned A100 cost their electricity only (0.082 $/kWh x the job's energy), far below
    renting 4 H100: they are chosen, and the fleet is worth the rented option's cost minus
    that electricity. The same A100 rented are not chosen (test_power_cap's free answer)."""
    free = ask(days=DAYS)
    res = ask(days=DAYS, owned={"beta": 8})
    c = res.choice
    assert (c.cluster, c.num_gpus, c.owned) == ("beta", 8, True)
    assert math.isclose(c.cost_usd, 0.082 * c.energy_mwh * 1000, rel_tol=1e-9)
    worth = res.owned
    assert worth["chosen"] and worth["best_new"]["cluster"] == free.choice.cluster
    assert worth["best_new"]["num_gpus"] == free.choice.num_gpus
    assert math.isclose(worth["saving"], free.choice.cost_usd - c.cost_usd, rel_tol=1e-9)
    assert res.to_json()["choice"]["owned"] is True
    assert res.rent_or_buy is None  # nothing to rent or buy


def test_owned_fleet_too_small_is_not_chosen():
    """4 owned A100 take about 0.138 days: over the deadline, so new hardware is chosen and
    the fleet saves nothing."""
    res = ask(days=DAYS, owned={"beta": 4})
    assert not res.choice.owned and res.owned["saving"] == 0.0
    assert all(not (r.owned and r.num_gpus > 4) for r in res.records)


def test_owned_operating_cost_is_charged():
    """An operating cost per GPU-hour is added to the owned fleet's electricity."""
    base = ask(days=DAYS, owned={"beta": 8}).choice
    dear = ask(days=DAYS, owned={"beta": 8},
               pricing=load_pricing(overrides={"operating_usd_per_gpu_hour": 1.0})).choice
    assert dear.owned
    assert math.isclose(dear.cost_usd, base.cost_usd + 1.0 * base.gpu_hours, rel_tol=1e-9)


def test_inventory_spec(tmp_path):
    f = tmp_path / "inventory.yaml"
    f.write_text("dgx-a100-superpod: 1024\n")
    assert load_inventory(f).owned == {"dgx-a100-superpod": 1024}
    for bad in ({"beta": 0}, {"beta": 2.5}, {"beta": True}, {}, ["beta"]):
        with pytest.raises(InputError):
            inventory_from(bad)
    with pytest.raises(InputError, match="owned inventory: nosuch"):
        ask(days=DAYS, owned={"nosuch": 8})


# ---- rent or buy --------------------------------------------------------------------------
def test_break_even_on_demand_by_hand():
    """$1,000 capital, $1/day to run, $11/day to rent: 1,000 + D = 11 D at D = 100."""
    assert break_even_days(1000.0, 1.0, [(11.0, 0.0)]) == pytest.approx(100.0)
    assert break_even_days(1000.0, 11.0, [(11.0, 0.0)]) is None  # running = renting: never


def test_break_even_with_a_reservation_by_hand():
    """A 1-year term at 80 % off ($2.20/day, 365 days paid at least: $803 flat) is cheaper
    than buying until 1,000 + D = 2.2 D, D = 833.3 days; on-demand alone gives 100."""
    terms = [(11.0, 0.0), (2.2, 365.0)]
    assert rent_usd(100.0, terms) == pytest.approx(803.0)
    assert break_even_days(1000.0, 1.0, terms) == pytest.approx(1000.0 / 1.2)
    # a term whose flat part is crossed, then beaten again: 50 % off for 365 days
    assert break_even_days(1000.0, 1.0, [(11.0, 0.0), (5.5, 365.0)]) == pytest.approx(100.0)


def test_rent_or_buy_of_the_choice():
    """The chosen 4 H100: capital 4 x $30,000 (catalog), rent 4 x 24 x $2.50 = $240/day,
    running = 0.082 $/kWh x the job's mean facility power; D* = capital / (rent - running)."""
    res = ask(days=DAYS)
    rb = res.rent_or_buy
    c = res.choice
    assert rb["capital_usd"] == 4 * 30000.0
    assert rb["rent_usd_per_day"] == {"on-demand": 240.0}
    running = 0.082 * c.energy_mwh * 1000 / c.days
    assert rb["running_usd_per_day"] == pytest.approx(running)
    assert rb["break_even_days"] == pytest.approx(120000.0 / (240.0 - running))
    assert rb["cheaper_for_the_job"] == "rent"
    assert rb["pricing_date"] == "2025-06" and "H100" in rb["price_source"]
    assert res.to_json()["rent_or_buy"]["break_even_days"] == rb["break_even_days"]


def test_rent_or_buy_takes_reservation_terms():
    """A 3-year term at 60 % off, 1,095 days paid: buying must beat $96/day for good, so
    D* = 120,000 / (96 - running) once past the commitment."""
    pricing = load_pricing(overrides={"rental_terms": {
        "3y": {"discount": 0.6, "commitment_days": 1095}}})
    res = ask(days=DAYS, pricing=pricing)
    rb, c = res.rent_or_buy, res.choice
    running = 0.082 * c.energy_mwh * 1000 / c.days
    assert rb["rent_usd_per_day"]["3y"] == pytest.approx(96.0)
    assert rb["break_even_days"] == pytest.approx(120000.0 / (96.0 - running))
    assert rb["job_rent_term"] == "on-demand"  # 0.08 days: the commitment is not worth it


def test_port_limit_binds():
    """One compute-fabric port per GPU: within 0.06 days only 8 H100 train in time, 8 ports;
    a site with 6 free ports is told it needs 8."""
    wired = [t.model_copy(update={"scale_out_ports_per_gpu": 1}) for t in TEMPLATES]
    assert ask(templates=wired, days=0.06).choice.ports == 8
    with pytest.raises(InfeasibleError) as e:
        ask(templates=wired, days=0.06, max_ports=6)
    assert "needs 8 ports; the site has 6 (--max-ports)" in " ".join(e.value.reasons)
    with pytest.raises(InputError, match="cluster 'alpha' has no scale_out_ports_per_gpu"):
        ask(days=DAYS, max_ports=4)


def test_the_pareto_plot_shows_owned_apart_from_new(tmp_path, monkeypatch):
    """Owned options are their own legend entry, drawn hollow: what was already bought
    against what would be (matplotlib's legend labels, read back from the figure)."""
    from planner.report import plots

    saved = {}

    def keep(fig, plt, path, **kw):
        saved["labels"] = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
        saved["hollow"] = [c.get_facecolors().size == 0 or (c.get_facecolors()[:, 3] == 0).all()
                           for c in fig.axes[0].collections if c.get_label().endswith("(owned)")]
        return path

    monkeypatch.setattr(plots, "save_figure", keep)
    res = ask(days=DAYS, owned={"beta": 8}, pareto=True)
    plots.plot_pareto(res, tmp_path / "p.png")
    assert any(label.endswith("(owned)") for label in saved["labels"])
    assert any(not label.endswith("(owned)") and label not in ("choice", "deadline",
               "Pareto front") for label in saved["labels"])
    assert saved["hollow"] and all(saved["hollow"])
