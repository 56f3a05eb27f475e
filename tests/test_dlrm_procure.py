"""DLRM procurement's branch and bound (planner/procurement/dlrm.py, issue 38): the choice
and its figures are those of brute force (every option's exhaustive optimum, priced and
compared by hand), options that cannot win are never solved, and every bound is below
the option's solved figures."""

from __future__ import annotations

import pytest

import planner.procurement.dlrm as proc
from formulations.dlrm.search import exhaustive
from planner.errors import InfeasibleError
from planner.procurement.metrics import option_metrics
from planner.specs.pricing import load_pricing

from test_dlrm import small_cluster, tiny_model

COUNTS = (1, 2, 4)
SAMPLES = 1e9


def _case():
    model = tiny_model(tables=[dict(name="a", rows=1000, dim=16, pooling=2),
                               dict(name="b", rows=400_000, dim=16, pooling=80)])
    templates = [small_cluster(4, 2),
                 small_cluster(4, 4, hbm_mib=80_000).model_copy(update={"name": "big-hbm"})]
    return model, templates, load_pricing(None, None, None)


def _brute_force(model, templates, pricing, obj, days=None):
    """Every option's exhaustive optimum (formulations/dlrm/search.py ``exhaustive``
    enumerates every plan), its metrics, and the least by (objective, days) within
    ``days``."""
    rows = []
    for tpl in templates:
        for n in COUNTS:
            c = tpl if n == tpl.num_gpus else tpl.resized(n)
            try:
                t = exhaustive(model, c).estimate.iteration_time_s
            except InfeasibleError:
                continue
            met = option_metrics(c, SAMPLES / model.global_batch_size, pricing, tpl.name)
            rows.append((tpl.name, n, t, {k: m(t, t) for k, m in met.items()}))
    ok = [r for r in rows if days is None or r[3]["days"] <= days]
    return rows, min(ok, key=lambda r: (r[3][obj], r[3]["days"]))


@pytest.mark.parametrize("objective, obj", [("cost", "cost_usd"), ("time", "days"),
                                            ("energy", "energy_mwh")])
def test_choice_and_figures_equal_brute_force(objective, obj):
    model, templates, pricing = _case()
    rows, best = _brute_force(model, templates, pricing, obj)
    res = proc.procure_dlrm(model, SAMPLES, templates=templates, pricing=pricing,
                            objective=objective, counts=COUNTS, time_limit_s=10)
    c = res.choice
    assert (c.template, c.cluster.num_gpus) == best[:2]
    assert c.iteration_time_s == pytest.approx(best[2], rel=1e-9)
    for k, v in best[3].items():
        assert c.values[k] == pytest.approx(v, rel=1e-9)
    # every option is either solved or bounded out, and a bound is below the optimum
    done = {(o.template, o.cluster.num_gpus) for o in res.options}
    cut = {(b.template, b.cluster.num_gpus): b for b in res.pruned}
    assert done | set(cut) >= {r[:2] for r in rows} and not done & set(cut)
    for name, n, t, values in rows:
        if (name, n) in cut:
            b = cut[name, n]
            assert b.iteration_time_lb_s <= t * (1 + 1e-12)
            assert all(b.values[k] <= v * (1 + 1e-12) for k, v in values.items())
            assert b.why == "dominated" and b.values[obj] > best[3][obj]


def test_dominated_options_are_never_solved(monkeypatch):
    model, templates, pricing = _case()
    calls = []
    real = proc.solve_sharding

    def counting(m, c, *a, **kw):
        calls.append((c.name, c.num_gpus))
        return real(m, c, *a, **kw)

    monkeypatch.setattr(proc, "solve_sharding", counting)
    args = dict(templates=templates, pricing=pricing, counts=COUNTS, time_limit_s=10)
    full = proc.procure_dlrm(model, SAMPLES, prune=False, **args)
    assert len(calls) == len(templates) * len(COUNTS) and not full.pruned
    calls.clear()
    res = proc.procure_dlrm(model, SAMPLES, **args)
    assert res.pruned and len(calls) == len(templates) * len(COUNTS) - len(res.pruned)
    assert {(b.template, b.cluster.num_gpus) for b in res.pruned}.isdisjoint(
        {(c, n) for c, n in calls})
    # the same choice and figures as solving every option
    assert (res.choice.template, res.choice.cluster.num_gpus) == (
        full.choice.template, full.choice.cluster.num_gpus)
    assert res.choice.values == pytest.approx(full.choice.values, rel=1e-9)
    solved = {(o.template, o.cluster.num_gpus): o for o in full.options}
    for b in res.pruned:  # each bound is below what solving the option gives
        o = solved[b.template, b.cluster.num_gpus]
        assert all(b.values[k] <= o.values[k] * (1 + 1e-12) for k in o.values)


def test_options_past_the_limits_are_bounded_out():
    model, templates, pricing = _case()
    rows, _ = _brute_force(model, templates, pricing, "cost_usd")
    # a days limit between the fastest and the slowest option
    days = sorted(r[3]["days"] for r in rows)[len(rows) // 2]
    _, best = _brute_force(model, templates, pricing, "cost_usd", days)
    res = proc.procure_dlrm(model, SAMPLES, templates=templates, pricing=pricing, days=days,
                            counts=COUNTS, time_limit_s=10)
    assert (res.choice.template, res.choice.cluster.num_gpus) == best[:2]
    assert all(o.values["days"] <= days or o is not res.choice for o in res.options)
    for b in res.pruned:
        assert b.why in ("limits", "dominated")
        assert b.why != "limits" or b.values["days"] > days
