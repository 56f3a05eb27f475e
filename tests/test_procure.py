"""`planner procure`: hand-checked answers, agreement with exhaustive search over (template,
GPU count, plan), monotonicity properties, pricing files and the CLI."""

from __future__ import annotations

import csv
import io
import json
import math
from functools import lru_cache

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formulations.train.space import SearchSpace, SpaceOptions
from planner.costmodel.train.batch import evaluate_columns, inner_columns
from planner.costmodel.train.tables import build_tables
from planner.errors import InfeasibleError, InputError
from planner.procurement import (
    METRICS,
    OBJECTIVE_METRIC,
    candidate_counts,
    catalog_templates,
    derived_template,
    gemm_time_lower_bound_s,
    option_metrics,
    procure,
)
from planner.procurement.metrics import meets
from planner.specs.plan_base import model_defaults
from planner.specs.loaders import load_cluster, load_gpu
from planner.specs.pricing import load_pricing

from conftest import DATA, ROOT, small_cluster, tiny_model
from test_cli import run

OPTIONS = SpaceOptions(max_microbatch=4, max_virtual_stages=2, min_cp_tokens=256)
COUNTS = (1, 2, 4, 8)
TOKENS = 2e10
MODEL = tiny_model(num_layers=4, hidden_size=512, num_attention_heads=8, num_kv_heads=8,
                   ffn_hidden_size=2048, global_batch_size=8, seq_len=1024)


def named(cluster, name, **update):
    return cluster.model_copy(update={"name": name, **update})


#: A tiny hand-made catalog: an H100 and an A100 template with different networks.
TEMPLATES = (
    named(small_cluster(8, domain=4, gpu="h100-sxm"), "alpha", pue=1.25, node_power_w=400.0),
    named(small_cluster(8, domain=8, gpu="a100-sxm-80gb"), "beta", pue=1.1),
)
#: Instances for the exhaustive comparison: ``dense``, where each option's fastest plan is
#: also its least-energy one, and ``comm``, a communication-bound model whose least-energy
#: plans are slower than the fastest (so a deadline sends the search down the top-K list).
INSTANCES = {
    "dense": (MODEL, TEMPLATES, COUNTS),
    "comm": (tiny_model(num_layers=4, hidden_size=256, num_attention_heads=8, num_kv_heads=8,
                        ffn_hidden_size=1024, global_batch_size=8, seq_len=512),
             (TEMPLATES[0], named(small_cluster(8, domain=4, gpu="mi300x"), "gamma")),
             (2, 4, 8)),
}


def ask(instance: str = "dense", **kw):
    model, templates, counts = INSTANCES[instance]
    kw.setdefault("templates", templates)
    kw.setdefault("counts", counts)
    kw.setdefault("options", OPTIONS)
    kw.setdefault("workers", 1)
    # the exhaustive reference sums ideal totals; goodput divides each option's totals by
    # one constant of its own (tests/test_goodput.py)
    kw.setdefault("goodput", "off")
    return procure(model, TOKENS, **kw)


# ---- the reference: every (template, count, plan), evaluated -------------------------------
@lru_cache(maxsize=None)
def every_plan(instance: str, template_index: int, n: int) -> tuple[tuple[float, float], ...]:
    """(iteration time, GPU busy time) of every feasible plan of one option."""
    model, templates, _ = INSTANCES[instance]
    cl = templates[template_index].resized(n)
    space = SearchSpace(model, cl, model_defaults(model), {}, OPTIONS)
    if not space.outers:
        return ()
    # the vectorized evaluator (equal to evaluate plan by plan: tests/test_batch.py)
    tb = build_tables(space)
    est = evaluate_columns(tb, *inner_columns(tb))
    ok = est.feasible
    return tuple(zip(est.iteration_time_s[ok].tolist(), est.gpu_busy_s[ok].tolist()))


def brute_force(objective: str, limits: dict[str, float], pricing=None,
                instance: str = "dense", template_ids=None, counts=None) -> float | None:
    """The optimum over every (template, count, plan) of the instance (or of the subset of
    ``template_ids`` and ``counts``), each plan evaluated."""
    model, templates, all_counts = INSTANCES[instance]
    pricing = pricing or load_pricing()
    iterations = TOKENS / (model.global_batch_size * model.seq_len)
    best = None
    for i in range(len(templates)) if template_ids is None else template_ids:
        for n in all_counts if counts is None else counts:
            metrics = option_metrics(templates[i].resized(n), iterations, pricing)
            for t, b in every_plan(instance, i, n):
                vals = {m: metrics[m](t, b) for m in METRICS}
                if meets(vals, limits):
                    v = vals[OBJECTIVE_METRIC[objective]]
                    best = v if best is None else min(best, v)
    return best


def fastest_days(instance: str = "dense") -> float:
    return brute_force("time", {}, instance=instance)


def answer(objective: str, instance: str = "dense", **kw) -> float | None:
    try:
        res = ask(instance, objective=objective, **kw)
    except InfeasibleError:
        return None
    return res.choice.value(OBJECTIVE_METRIC[objective])


# ---- hand-checked ------------------------------------------------------------------------
def test_hand_checked_tiny_catalog():
    """Two templates with the same hardware and network, one at half the price: the cheap
    one wins at the same count and plan, and every total follows from the plan's
    iteration time T and busy time B by the formulas of docs/procure.md."""
    base = named(small_cluster(8, domain=4, gpu="h100-sxm"), "dear", pue=1.5,
                 node_power_w=500.0, price_per_gpu_hour=4.0)
    levels = [lv.model_copy(update={"power_w_per_gpu": 20.0}) for lv in base.topology]
    dear = base.model_copy(update={"topology": levels})
    cheap = named(dear, "cheap", price_per_gpu_hour=2.0)
    res = ask(templates=[dear, cheap], counts=[4, 8], pareto=True)
    c = res.choice
    assert c.cluster == "cheap" and c.gpu == "h100-sxm"
    rival = next(r for r in res.records if r.cluster == "dear" and r.num_gpus == c.num_gpus)
    assert rival.plan == c.plan and math.isclose(rival.cost_usd, 2 * c.cost_usd, rel_tol=1e-12)

    est, n = c.estimate, c.num_gpus
    t, b = est.iteration_time_s, est.gpu_busy_s
    iters = TOKENS / (8 * 1024)
    hours = iters * t / 3600
    assert math.isclose(c.days, hours / 24, rel_tol=1e-12)
    assert math.isclose(c.gpu_hours, n * hours, rel_tol=1e-12)
    assert math.isclose(c.cost_usd, 2.0 * n * hours, rel_tol=1e-12)
    # H100: idle 75 W, TDP 700 W; nodes of 4 GPUs at 500 W; 20 W network per GPU; PUE 1.5
    watts_t = n * 75 + (n // 4) * 500 + n * 20
    joules = 1.5 * (watts_t * t + n * (700 - 75) * b) * iters
    assert math.isclose(c.energy_mwh, joules / 3.6e9, rel_tol=1e-12)
    assert c.mfu == est.mfu and 0 < c.mfu < 1

    # Owning: $1 per GPU-hour of capital (8,760 x 5 years) plus 10 cents per kWh.
    own = load_pricing(mode="own", overrides={
        "depreciation_years": 5, "electricity_usd_per_kwh": 0.1,
        "gpus": {"h100": {"capex_usd": 8760 * 5}}})
    o = ask(templates=[cheap], counts=[c.num_gpus], pricing=own).choice
    assert math.isclose(o.cost_usd, o.gpu_hours * 1.0 + o.energy_mwh * 1000 * 0.1,
                        rel_tol=1e-12)


def test_deadline_and_budget_by_hand():
    """A deadline between the 4- and 8-GPU times of the cheap option leaves 8 GPUs (or the
    other template); the rented cost of any option is price x GPU-hours."""
    res = ask(pareto=True)
    alpha = {r.num_gpus: r for r in res.records if r.cluster == "alpha"}
    deadline = (alpha[4].days + alpha[8].days) / 2
    got = ask(days=deadline).choice
    assert got.days <= deadline
    assert math.isclose(got.value("cost_usd"), brute_force("cost", {"days": deadline}),
                        rel_tol=1e-9)
    # the fastest option within a budget of the 8-GPU alpha's cost
    fast = ask(budget_usd=alpha[8].cost_usd).choice
    assert fast.cost_usd <= alpha[8].cost_usd * (1 + 1e-12)
    assert fast.days <= alpha[8].days * (1 + 1e-12)


# ---- exhaustive agreement ------------------------------------------------------------------
#: (objective, deadline as a multiple of the fastest option's days, budget as a multiple of
#: the cheapest option's cost, pricing)
CASES = [
    ("cost", None, None, "rent"), ("cost", 1.3, None, "rent"), ("cost", 2.5, None, "rent"),
    ("cost", 1.5, 1.4, "rent"), ("cost", 1.05, 1.05, "rent"),
    ("cost", None, None, "own"), ("cost", 1.2, None, "own"), ("cost", 2.0, None, "own"),
    ("energy", None, None, "rent"), ("energy", 1.2, None, "rent"), ("energy", 2.0, None, "rent"),
    ("gpu_hours", 1.6, None, "rent"), ("time", None, None, "rent"),
    ("time", None, 1.1, "rent"), ("time", None, 1.5, "rent"), ("time", None, 1.2, "own"),
]


@pytest.mark.slow(reason="32 procurements, each against brute force over every plan")
@pytest.mark.parametrize("instance", sorted(INSTANCES))
@pytest.mark.parametrize("objective,days,budget,pricing", CASES)
def test_optimum_equals_exhaustive_search(instance, objective, days, budget, pricing):
    spec = load_pricing(mode=pricing)
    limits = {}
    if days is not None:
        limits["days"] = days * fastest_days(instance)
    if budget is not None:
        limits["cost_usd"] = budget * brute_force("cost", {}, spec, instance)
    want = brute_force(objective, limits, spec, instance)
    got = answer(objective, instance, days=limits.get("days"),
                 budget_usd=limits.get("cost_usd"), pricing=spec)
    if want is None:
        assert got is None
    else:
        assert got is not None and math.isclose(got, want, rel_tol=1e-9), (got, want)


@pytest.mark.parametrize("objective", ["energy", "cost"])
def test_solver_deadline_and_top_k_match_brute_force(objective):
    """The inner solve under an iteration-time limit (a constraint of the formulation) and
    its K best plans equal brute force over the same space."""
    from planner.orchestration.train import solve

    model, templates, _ = INSTANCES["comm"]
    cl = templates[0].resized(8)
    fastest = solve(model, cl, options=OPTIONS).best.estimate.iteration_time_s
    for limit, k in ((fastest * 1.02, 1), (fastest * 1.3, 1), (None, 12)):
        got = solve(model, cl, objective=objective, options=OPTIONS, top_k=k,
                    max_iteration_time_s=limit)
        want = solve(model, cl, objective=objective, options=OPTIONS, top_k=k,
                     max_iteration_time_s=limit, backend="exhaustive")
        assert len(got.plans) == len(want.plans) == k
        for a, b in zip(got.plans, want.plans):
            assert math.isclose(a.objective, b.objective, rel_tol=1e-9)
            assert limit is None or a.estimate.iteration_time_s <= limit
    with pytest.raises(InfeasibleError, match="iterates within"):
        solve(model, cl, options=OPTIONS, max_iteration_time_s=fastest * 0.99)


def test_infeasible_deadline_is_explained():
    with pytest.raises(InfeasibleError) as e:
        ask(days=fastest_days() * 0.99)
    assert "fastest option" in e.value.reasons[0]
    assert any("--days" in h for h in e.value.hints)
    assert e.value.result.choice is None


def test_bounds_hold_for_solved_plans():
    """The pruning bound is below the iteration and busy time of every plan solved."""
    res = ask(pareto=True)
    for r in res.records:
        lb = gemm_time_lower_bound_s(MODEL, load_gpu(r.gpu), r.num_gpus, 8, 1024, "bf16")
        assert lb <= r.estimate.gpu_busy_s <= r.estimate.iteration_time_s


@pytest.mark.slow(reason="starts a process pool")
def test_parallel_workers_give_the_same_answer():
    one = ask(days=1.0)
    two = ask(days=1.0, workers=2)
    assert math.isclose(one.choice.cost_usd, two.choice.cost_usd, rel_tol=1e-12)
    assert (one.choice.cluster, one.choice.num_gpus) == (two.choice.cluster, two.choice.num_gpus)


def test_pareto_fronts_are_nondominated():
    res = ask(pareto=True)
    for front, key in ((res.pareto, "cost_usd"), (res.pareto_energy, "energy_mwh")):
        assert front
        days = [r.days for r in front]
        vals = [r.value(key) for r in front]
        assert days == sorted(days) and vals == sorted(vals, reverse=True)
        for r in res.records:  # nothing beats a front point on both axes
            assert not any(r.days < f.days and r.value(key) < f.value(key) for f in front)


# ---- monotonicity ----------------------------------------------------------------------------
PROPS = settings(max_examples=6, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.slow(reason="hypothesis examples, two procurements each")
@PROPS
@given(f=st.floats(1.0, 8.0), g=st.floats(0.0, 3.0),
       objective=st.sampled_from(["cost", "energy", "gpu_hours"]))
def test_longer_deadline_never_costs_more(f, g, objective):
    d1 = fastest_days() * f
    short, long_ = answer(objective, days=d1), answer(objective, days=d1 * (1 + g))
    # no deadline shorter than the fastest option's: both have an answer
    assert short is not None and long_ is not None
    assert long_ <= short * (1 + 1e-12)


@pytest.mark.slow(reason="hypothesis examples, two procurements each")
@PROPS
@given(f=st.floats(1.0, 3.0), g=st.floats(0.0, 2.0))
def test_larger_budget_never_trains_slower(f, g):
    cheapest = brute_force("cost", {})
    b1 = cheapest * f
    small, large = answer("time", budget_usd=b1), answer("time", budget_usd=b1 * (1 + g))
    # no budget below the cheapest option's cost: both have an answer
    assert small is not None and large is not None
    assert large <= small * (1 + 1e-12)


@pytest.mark.slow(reason="hypothesis examples, two procurements each")
@PROPS
@given(cut=st.floats(0.1, 1.0), gpu=st.sampled_from(["h100-sxm", "a100-sxm-80gb"]),
       f=st.sampled_from([None, 1.0, 1.5, 3.0]))
def test_cheaper_gpu_never_raises_the_optimum_cost(cut, gpu, f):
    # deadlines as multiples of the fastest option's days: each has an answer and rules
    # out the cheapest option (a deadline of a day or more never binds on this catalog)
    days = None if f is None else f * fastest_days()
    price = load_gpu(gpu).price_per_gpu_hour
    full = answer("cost", days=days)
    cheaper = answer("cost", days=days, pricing=load_pricing(
        overrides={"gpus": {gpu: {"price_per_gpu_hour": price * cut}}}))
    assert full is not None and cheaper is not None
    assert cheaper <= full * (1 + 1e-12)


# ---- catalog, counts, pricing -----------------------------------------------------------------
def test_catalog_templates_cover_every_gpu():
    templates = catalog_templates()
    assert {t.gpu.name for t in templates} >= {"h100-sxm", "h200", "b200", "gb200", "mi300x",
                                                "a100-sxm-40gb", "a100-sxm-80gb"}
    # a GPU with its own catalog cluster gets no derived template beside it
    assert [t.name for t in templates if t.gpu.name == "h200"] == ["dgx-h200-superpod"]
    a100 = next(t for t in templates if t.gpu.name == "a100-sxm-40gb")
    assert a100.name == "dgx-a100-superpod:a100-sxm-40gb"
    assert a100.topology[1].bandwidth_GBps == 25 and a100.offload.bandwidth_GBps == 32
    # a derived template's NVLink level runs at its GPU's own bandwidth, not the base's
    moved = derived_template(load_cluster("dgx-h100-superpod"), load_gpu("a100-sxm-40gb"))
    assert moved.topology[0].bandwidth_GBps == 300 and moved.price_per_gpu_hour is None
    only = catalog_templates(["h100", "b200"])
    assert {t.gpu.name for t in only} == {"h100-sxm", "b200"}
    with pytest.raises(InputError, match="closest"):
        catalog_templates(["h10x"])


def test_h200_cluster_is_the_dgx_h100_template_with_h200():
    """The DGX H200 is the DGX H100 chassis with H200 GPUs (NVIDIA DGX BasePOD reference
    architecture): the catalog cluster agrees with the template it replaces in every field
    but its name and sources, so replacing it moves no training figure."""
    real = load_cluster("h200-superpod")
    derived = derived_template(load_cluster("dgx-h100-superpod"), load_gpu("h200"))
    own = {"name": True, "aliases": True, "source": True, "offload": {"source"}}
    assert real.name == "dgx-h200-superpod"
    assert real.model_dump(exclude=own) == derived.model_dump(exclude=own)


def test_candidate_counts():
    assert candidate_counts(load_cluster("dgx-h100-superpod"), 64) == [1, 2, 4, 8, 16, 32, 64]
    nvl = candidate_counts(load_cluster("gb200-nvl72"), 600)
    assert nvl[-3:] == [144, 288, 576] and 72 in nvl and 600 not in nvl


def test_pricing_file_overrides(tmp_path):
    path = tmp_path / "prices.yaml"
    path.write_text(yaml.safe_dump({"mode": "own", "electricity_usd_per_kwh": 0.05,
                                    "gpus": {"h100": {"capex_usd": 20000}}}))
    p = load_pricing(str(path))
    assert p.mode == "own" and p.electricity_usd_per_kwh == 0.05
    assert p.for_gpu("h100-sxm").capex_usd == 20000 and p.depreciation_years == 5
    assert load_pricing(str(path), mode="rent").mode == "rent"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"gpus": {"h1000": {"capex_usd": 1}}}))
    with pytest.raises(InputError, match="closest"):
        load_pricing(str(bad))
    bad.write_text(yaml.safe_dump({"electricity": 0.1}))
    with pytest.raises(InputError, match="unknown pricing keys"):
        load_pricing(str(bad))
    bad.write_text(yaml.safe_dump({"depreciation_years": -1}))
    with pytest.raises(InputError, match="depreciation_years"):
        load_pricing(str(bad))


def test_owned_cost_includes_network_capital():
    """Owning a RAMP cluster also buys its optical network ($/Gb/s x capacity per GPU)."""
    from planner.costmodel.energy import network_capex_usd_per_gpu

    ramp = load_cluster("ramp-a100").resized(64)
    bare = ramp.model_copy(update={"topology": [
        lv.model_copy(update={"cost_usd_per_Gbps": 0.0}) for lv in ramp.topology]})
    own = load_pricing(mode="own")
    net = network_capex_usd_per_gpu(ramp)
    assert net > 0
    extra = (option_metrics(ramp, 100.0, own)["cost_usd"].time
             - option_metrics(bare, 100.0, own)["cost_usd"].time)
    assert math.isclose(extra, 100.0 * 64 * net / (5 * 8760 * 3600), rel_tol=1e-9)


def test_bad_queries():
    with pytest.raises(InputError, match="--days"):
        ask(days=-1)
    with pytest.raises(InputError, match="--objective"):
        ask(objective="speed")
    with pytest.raises(InputError, match="--max-gpus"):
        procure(MODEL, TOKENS, templates=TEMPLATES, max_gpus=0)
    with pytest.raises(InputError, match="distinct names"):
        ask(templates=[TEMPLATES[0], TEMPLATES[0]])


# ---- CLI ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cli_catalog(tmp_path_factory):
    d = tmp_path_factory.mktemp("catalog")
    paths = []
    for name, gpu, domain in (("alpha", "h100", 4), ("beta", "a100", 8)):
        p = d / f"{name}.yaml"
        p.write_text(yaml.safe_dump({
            "name": name, "gpu": gpu, "num_gpus": 8, "topology": [
                {"name": "nvswitch", "size": domain, "bandwidth_GBps": 300}]
            + ([{"name": "ib", "size": 8 // domain, "bandwidth_GBps": 50}] if domain < 8 else [])}))
        paths += ["--cluster", str(p)]
    return ["-m", str(DATA / "tiny-model.yaml"), "--tokens", "1e10", "--counts", "2,4,8",
            "--workers", "1", *paths]


def test_cli_json(capsys, cli_catalog):
    code, out, _ = run(capsys, "procure", *cli_catalog, "--days", "30", "--json")
    assert code == 0
    data = json.loads(out)
    for key in ("gpu", "num_gpus", "cluster", "plan", "days", "cost_usd", "energy_mwh",
                "gpu_hours", "mfu"):
        assert key in data["choice"], key
        assert all(key in r for r in data["pareto"])
    assert data["pareto"] and data["query"]["objective"] == "cost"
    assert data["choice"]["days"] <= 30 and data["stats"]["pareto_computed"] is True
    # the chosen plan is bf16: the H100 and A100 fits have no bf16 / FlashAttention runs
    # in common with it, so the choice is flagged as extrapolated
    assert data["calibration_notes"] and data["choice"]["gpu"] in data["calibration_notes"][0]


def test_cli_text_pareto_and_plot(capsys, cli_catalog, tmp_path):
    png = tmp_path / "pareto.png"
    code, out, _ = run(capsys, "procure", *cli_catalog, "--days", "30", "--pareto",
                       "--plot", str(png), "--objective", "energy")
    assert code == 0
    assert "least energy" in out and "Pareto fronts" in out and "MWh" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_csv(capsys, cli_catalog):
    code, out, _ = run(capsys, "procure", *cli_catalog, "--csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) >= 2 and sum(r["choice"] == "True" for r in rows) == 1
    assert {"gpu", "num_gpus", "cluster", "days", "cost_usd", "energy_mwh", "gpu_hours", "mfu",
            "tp", "pp", "dp"} <= set(rows[0])


def test_cli_budget_is_fastest_within_it(capsys, cli_catalog):
    code, out, _ = run(capsys, "procure", *cli_catalog, "--json")
    cheapest = json.loads(out)["choice"]
    code, out, _ = run(capsys, "procure", *cli_catalog, "--budget",
                       str(cheapest["cost_usd"] * 3), "--json")
    assert code == 0
    data = json.loads(out)
    assert data["query"]["objective"] == "time"
    assert data["choice"]["days"] <= cheapest["days"]
    assert data["choice"]["cost_usd"] <= cheapest["cost_usd"] * 3


def test_cli_infeasible_deadline_exit_1(capsys):
    code, out, err = run(capsys, "procure", "-m", "llama3-405b", "--tokens", "15e12",
                         "--days", "5", "--max-gpus", "1024")
    assert code == 1
    assert "fastest option" in err and "days" in err and "--max-gpus" in err


def test_cli_infeasible_json(capsys):
    code, out, _ = run(capsys, "procure", "-m", "llama3-405b", "--tokens", "15e12",
                       "--days", "5", "--max-gpus", "1024", "--json", "--gpus", "h100")
    assert code == 1
    data = json.loads(out)
    assert data["choice"] is None and data["reasons"] and data["hints"]


def test_cli_bad_gpu_exit_2(capsys):
    code, _, err = run(capsys, "procure", "-m", "llama3-405b", "--tokens", "15e12",
                       "--days", "90", "--gpus", "h100,b2000")
    assert code == 2 and "b2000" in err and "closest" in err and "b200" in err


def test_cli_bad_prices_exit_2(capsys, cli_catalog, tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("gpus: {h100: {price: 1}}\n")
    code, _, err = run(capsys, "procure", *cli_catalog, "--prices", str(path))
    assert code == 2 and "price_per_gpu_hour" in err


def test_cli_prices_change_the_cost(capsys, cli_catalog, tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("gpus: {h100: {price_per_gpu_hour: 0.01}, a100: {price_per_gpu_hour: 0.01}}\n")
    code, out, _ = run(capsys, "procure", *cli_catalog, "--prices", str(path), "--json")
    assert code == 0
    c = json.loads(out)["choice"]
    assert math.isclose(c["cost_usd"], 0.01 * c["gpu_hours"], rel_tol=1e-9)


def test_cli_cluster_list_and_cluster_prices(capsys, tmp_path):
    """--cluster takes a comma-separated list of catalog names and files; a pricing file
    prices one of two clusters with the same GPU apart (clusters.<name>): the fat tree at
    $1,000 per Gb/s loses to RAMP."""
    fat = str(ROOT / "examples" / "ramp-baseline-fat-tree.yaml")
    args = ["procure", "-m", str(DATA / "tiny-model.yaml"), "--tokens", "1e10", "--counts",
            "16,32", "--workers", "1", "--pricing", "own", "--json", "--cluster", f"ramp,{fat}"]
    png = tmp_path / "ramp-or-fat.png"  # one colour per template: both have A100s
    code, out, _ = run(capsys, *args, "--plot", str(png))
    assert code == 0 and png.read_bytes()[:4] == b"\x89PNG"
    data = json.loads(out)
    assert data["query"]["templates"] == ["ramp-a100", "ramp-baseline-fat-tree"]
    assert data["choice"]["cluster"] == "ramp-baseline-fat-tree"
    path = tmp_path / "p.yaml"
    path.write_text("clusters: {ramp-baseline-fat-tree: {cost_usd_per_Gbps: 1000}}\n")
    code, out, _ = run(capsys, *args, "--prices", str(path))
    assert code == 0 and json.loads(out)["choice"]["cluster"] == "ramp-a100"
    code, _, err = run(capsys, "procure", "-m", str(DATA / "tiny-model.yaml"), "--tokens",
                       "1e10", "--cluster", f"ramp-a10,{fat}")
    assert code == 2 and "closest: ramp-a100" in err
