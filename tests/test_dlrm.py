"""DLRM training plans (issue 16): spec bounds, hand-checked costs, CP-SAT = MILP = brute
force on randomized small instances, a TorchRec-style greedy baseline the exact answer
beats, MAD-Max Table I, the CLI and bad input."""

from __future__ import annotations

import json
import math
import random
import time

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formulations.dlrm.search import exhaustive, solve_sharding, torchrec_greedy
from planner.costmodel.dlrm.model import dense_cost, links, table_options
from planner.costmodel.dlrm.evaluate import evaluate_dlrm
from planner.errors import InfeasibleError, InputError
from planner.specs.dlrm import SHARDING_TYPES, DLRMPlan, DLRMSpec
from planner.specs.loaders import load_cluster, load_gpu, load_model

from conftest import ROOT
from test_cli import run

CATALOG = ROOT / "hardware_catalog"


def tiny_model(**kw) -> DLRMSpec:
    base = dict(name="tiny-dlrm", bottom_mlp=[32, 16], top_mlp=[16, 1], global_batch_size=1024,
                tables=[dict(name="a", rows=1000, dim=16, pooling=2)])
    return DLRMSpec(**{**base, **kw})


def small_cluster(ranks: int, node: int, hbm_mib: float = 40_000) -> object:
    """``ranks`` A100s, ``node`` per NVLink domain, with ``hbm_mib`` of HBM and no reserve."""
    gpu = load_gpu("a100-sxm-40gb").model_copy(update={"hbm_gib": hbm_mib / 1024})
    levels = [dict(name="nvlink", size=node, bandwidth_GBps=300, efficiency=0.8, latency_us=2)]
    if ranks > node:
        levels.append(dict(name="net", size=ranks // node, bandwidth_GBps=25, efficiency=0.9,
                           latency_us=5))
    from planner.specs.cluster import ClusterSpec

    return ClusterSpec(name=f"test-{ranks}", gpu=gpu, num_gpus=ranks, topology=levels,
                       memory_reserve_gib=0)


# ---- spec ------------------------------------------------------------------------------
def test_catalog_models_and_cluster():
    a, b, cr = load_model("dlrm-a"), load_model("dlrm-b"), load_model("criteo-dlrm")
    # MAD-Max's released configs: 801.2B (emb_dim 94) and 332.1B parameters (notes 4.2)
    assert a.total_params / 1e9 == pytest.approx(801.17, abs=0.01)
    assert b.total_params / 1e9 == pytest.approx(332.11, abs=0.01)
    # MLPerf DLRM: 26 tables, 479 = 128 + 27*26/2 top inputs, ~24B parameters
    assert cr.num_tables == 26 and cr.interaction_dim == 479 and cr.top_in == 479
    assert sum(t.rows for t in cr.tables) == 187_767_399
    z = load_cluster("zionex-128")
    assert z.num_gpus == 128 and z.gpu.hbm_gib == 40 and [lv.size for lv in z.topology] == [8, 16]
    # Table III: 38.4 TB/s intra-node, 25.6 Tbps inter-node, unidirectional, over 128 GPUs
    assert z.topology[0].bandwidth_GBps * 128 == pytest.approx(38_400)
    assert z.topology[1].bandwidth_GBps * 8 * 128 / 1000 == pytest.approx(25.6)


@pytest.mark.parametrize("change, field", [
    (dict(tables=[dict(name="a", rows=10**13, dim=16, pooling=1)]), "rows"),
    (dict(tables=[dict(name="a", rows=10, dim=16, pooling=-1)]), "pooling"),
    (dict(tables=[dict(name="a", rows=10, dim=16, pooling=1, skew=2)]), "skew"),
    (dict(tables=[dict(name="a", rows=10, dim=0, pooling=1)]), "dim"),
    (dict(tables=[]), "tables"),
    (dict(global_batch_size=0), "global_batch_size"),
    (dict(tables=[dict(name="a", rows=10, dim=8, pooling=1)]), "interaction dot"),
    (dict(interaction=dict(kind="dcnv2")), "cross layer"),
    (dict(tables=[dict(name="a", rows=10, dim=16, pooling=1)] * 2), "unique"),
])
def test_bad_specs_name_the_field(tmp_path, change, field):
    data = {**tiny_model().to_dict(), **change, "kind": "dlrm"}
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match=field):
        load_model(str(p))


# ---- hand-checked costs ----------------------------------------------------------------
def test_hand_checked_costs_dlrm_b_on_zionex():
    m, c = load_model("dlrm-b"), load_cluster("zionex-128")
    ln = links(m, c)
    # all-to-all per byte: 15/16 of the buffer leaves the node at 25 GB/s x 0.9, the NVLink
    # level (7/8 at 300 x 0.8) pipelined in 64 chunks (network.pipelined_time)
    inter, intra = (15 / 16) / 22.5e9, (7 / 8) / 240e9
    assert ln.a2a[0] == pytest.approx(inter + intra / 64, rel=1e-12)
    assert ln.a2a[1] == pytest.approx(7e-6)  # one direct step per level: 2 + 5 us
    tw = next(o for o in table_options(m, c, 0) if o.kind == "table_wise")
    B, p, d, bw = 262_144, 70, 92, 1555e9 * 0.56
    assert tw.cost.lookup_fwd_s == pytest.approx((B * p * d * 2 + B * d * 2) / bw, rel=1e-12)
    assert tw.cost.lookup_bwd_s == pytest.approx((B * d * 2 + B * p * (2 * d * 2 + 8)) / bw,
                                                 rel=1e-12)
    assert tw.cost.comm_fwd_s == pytest.approx(ln.a2a[0] * B * d * 2, rel=1e-12)
    # rows x (fp16 row + fp32 Adagrad accumulator) + pooled output and its gradient
    assert tw.cost.memory_bytes == 7_050_000 * (92 * 2 + 4) + 2 * B * 92 * 2
    dn = dense_cost(m, c)
    assert m.dense_params == 44 * (826 * 826 + 826)
    assert dn.grad_bytes == 4 * m.dense_params


def test_all_table_wise_plan_by_hand():
    """DLRM-B, 4 tables per rank: each phase is 4 x one table's cost (+ latency)."""
    m, c = load_model("dlrm-b"), load_cluster("zionex-128")
    plan = DLRMPlan(tables=[dict(table="sparse", sharding_type="table_wise", copies=512,
                                 ranks={r: 4 for r in range(128)})])
    est = evaluate_dlrm(m, c, plan)
    tw = next(o for o in table_options(m, c, 0) if o.kind == "table_wise")
    assert est.phases_s["lookup_fwd"] == pytest.approx(4 * tw.cost.lookup_fwd_s)
    assert est.phases_s["dist_fwd"] == pytest.approx(4 * tw.cost.comm_fwd_s + 7e-6)
    assert est.iteration_time_s == pytest.approx(sum(est.phases_s.values()))
    assert est.samples_per_s == pytest.approx(262_144 / est.iteration_time_s)
    assert est.feasible and est.memory_per_gpu_gib < 40


@pytest.mark.parametrize("plan, msg", [
    (dict(table="nope", sharding_type="table_wise", ranks={0: 1}), "not in model"),
    (dict(table="a", sharding_type="table_wise", ranks={9: 1}), "out of range"),
    (dict(table="a", sharding_type="table_wise", ranks={0: 2}), "out of range"),
    (dict(table="a", sharding_type="column_wise", shards=3, ranks={0: 1, 1: 1, 2: 1}),
     "not available"),
    (dict(table="a", sharding_type="row_wise", ranks={0: 1}), "every rank"),
    (dict(table="a", sharding_type="table_wise", copies=2, ranks={0: 1, 1: 1}), "exactly once"),
])
def test_bad_plans(plan, msg):
    with pytest.raises(InputError, match=msg):
        evaluate_dlrm(tiny_model(), small_cluster(4, 2), DLRMPlan(tables=[plan]))


# ---- exactness: CP-SAT = MILP = brute force --------------------------------------------
def random_instance(seed: int):
    rng = random.Random(seed)
    ranks, node = rng.choice([(2, 2), (2, 1), (4, 2), (4, 4), (8, 4), (8, 2)])
    n_tables = 2 if ranks == 8 else rng.choice([2, 3])
    tables = []
    for i in range(n_tables):
        dim = rng.choice([6, 18, 8, 16]) if ranks < 8 else rng.choice([6, 18])
        tables.append(dict(name=f"t{i}", rows=rng.choice([10**4, 10**5, 10**6, 4 * 10**6]),
                           dim=dim, pooling=rng.choice([1, 4, 30]),
                           skew=rng.choice([0.0, 0.0, 0.5]),
                           count=2 if (ranks <= 2 and rng.random() < 0.3) else 1))
    m = DLRMSpec(name=f"r{seed}", tables=tables, bottom_mlp=[64, 32], top_mlp=[32, 1],
                 interaction=dict(kind="none"), global_batch_size=rng.choice([2048, 16384]),
                 emb_dtype=rng.choice(["fp16", "fp32"]))
    return m, small_cluster(ranks, node, hbm_mib=rng.choice([60, 150, 400, 40_000]))


def _solve(fn):
    try:
        return fn()
    except InfeasibleError:
        return None


def backends_agree(m: DLRMSpec, c, seed: int):
    """Brute force's answer (None when nothing fits), after checking that CP-SAT and the
    MILP reach the same iteration time or also find nothing."""
    ref = _solve(lambda: exhaustive(m, c))
    cp = _solve(lambda: solve_sharding(m, c, "cpsat", 20, workers=1))
    mi = _solve(lambda: solve_sharding(m, c, "milp", 20))
    if ref is None:
        assert cp is None and mi is None, seed
        return None
    # the model rounds each coefficient down to a tick (1 ps): a few ticks of slack
    t = ref.estimate.iteration_time_s
    tol = 1e-9 * t + 1e-10
    assert cp.estimate.iteration_time_s == pytest.approx(t, abs=tol), seed
    assert mi.estimate.iteration_time_s == pytest.approx(t, abs=tol), seed
    return ref


@pytest.mark.slow(reason="110 DLRM instances through three solvers")
def test_cpsat_milp_exhaustive_agree_on_110_instances():
    infeasible, used = 0, set()
    for seed in range(110):
        ref = backends_agree(*random_instance(seed), seed)
        if ref is None:
            infeasible += 1
            continue
        used |= {p.sharding_type for p in ref.plan.tables}
    # memory-bound instances with no plan occur, and the optima use every sharding type
    assert 5 <= infeasible <= 60 and used == set(SHARDING_TYPES)


def test_solver_value_is_a_lower_bound_within_rounding():
    m, c = random_instance(3)
    s = solve_sharding(m, c, "cpsat", 20)
    assert s.status == "optimal"
    assert s.model_objective_s <= s.estimate.iteration_time_s
    # each coefficient is rounded down by under a tick (1 ps); a rank's row has a few terms
    assert 0 <= s.estimate.iteration_time_s - s.model_objective_s < 50e-12


# ---- the baseline: TorchRec's greedy partitioner (formulations/dlrm/greedy.py) ----------------
def test_greedy_is_provably_worse():
    """Lookup loads 3, 3, 2, 2, 2 on two ranks: greedy (longest first, least loaded) puts
    3+2+2 = 7 on one rank; the optimum splits 3+3 | 2+2+2 = 6 (Graham's LPT bound). Every
    other phase is the same (the same tables, all table-wise), so the iteration is longer
    by a sixth of the optimum's lookups, forward and backward."""
    tables = [dict(name=f"t{i}", rows=10**5, dim=32, pooling=p)
              for i, p in enumerate([300, 300, 200, 200, 200])]
    m = DLRMSpec(name="lpt", tables=tables, bottom_mlp=[8, 32], top_mlp=[8, 1],
                 global_batch_size=8192, interaction=dict(kind="none"))
    c = small_cluster(2, 2)
    greedy = evaluate_dlrm(m, c, torchrec_greedy(m, c))
    best = solve_sharding(m, c, "cpsat", 20, kinds=("table_wise",))
    g, o = greedy.phases_s["lookup_fwd"], best.estimate.phases_s["lookup_fwd"]
    per = o / 6
    assert g / per == pytest.approx(7, rel=0.02) and o / per == pytest.approx(6)
    ob = best.estimate.phases_s["lookup_bwd"]
    assert greedy.phases_s["lookup_bwd"] / ob == pytest.approx(7 / 6, rel=0.02)
    longer = greedy.iteration_time_s - best.estimate.iteration_time_s
    assert longer == pytest.approx((o + ob) / 6, rel=0.02)
    full = solve_sharding(m, c, "cpsat", 20)  # with every sharding type: no worse
    assert full.estimate.iteration_time_s <= best.estimate.iteration_time_s * (1 + 1e-12)


# ---- MAD-Max Table I -------------------------------------------------------------------
#: Measured on 128 A100 40GB (ZionEX), MAD-Max Table I. The one fitted number is the
#: A100's embedding_lookup_fraction (hardware_catalog/gpus); docs/dlrm.md explains why no
#: single lookup rate brings both within 10 % (DLRM-A is bound by the pooled all-to-all,
#: DLRM-B by the lookups). The test holds the published measurement and the error bound,
#: not the model's own error.
TABLE_I = [("dlrm-a", 1.2e6), ("dlrm-b", 3.4e6)]


@pytest.mark.parametrize("name, measured", TABLE_I)
def test_madmax_table_i(name, measured):
    s = solve_sharding(load_model(name), load_cluster("zionex-128"), "cpsat", 60)
    assert s.status == "optimal" and s.estimate.feasible
    rel = s.estimate.samples_per_s / measured - 1
    assert abs(rel) <= 0.16


@pytest.mark.slow(reason="solves the two MAD-Max seed models")
def test_dlrm_a_is_network_bound_and_b_lookup_bound():
    """The seeds' breakdowns: DLRM-A's pooled all-to-all is the largest phase (MAD-Max:
    communication exposed 75-82%); DLRM-B's lookups are."""
    c = load_cluster("zionex-128")
    a = solve_sharding(load_model("dlrm-a"), c, "cpsat", 60).estimate.phases_s
    b = solve_sharding(load_model("dlrm-b"), c, "cpsat", 60).estimate.phases_s
    assert a["dist_fwd"] + a["dist_bwd"] > a["lookup_fwd"] + a["lookup_bwd"]
    assert b["lookup_fwd"] + b["lookup_bwd"] > 2 * (b["dist_fwd"] + b["dist_bwd"])


@pytest.mark.slow(reason="solves the seed models on several networks")
def test_faster_network_speeds_up_network_bound_dlrm_a_most():
    """RAMP's trend (Ottino, Benjamin, Zervas, "RAMP: A Flat Nanosecond Optical Network and
    MPI Operations for Distributed Deep Learning Systems", arXiv 2211.15226, 2022, Sec. 8.1
    and Fig. 17: the all-to-all dominates DLRM's data transfer): all-to-all-bound DLRM
    gains from a faster network; 4x the inter-node bandwidth helps DLRM-A far more than
    DLRM-B."""
    c = load_cluster("zionex-128")
    fast = c.model_copy(update={"topology": [c.topology[0], c.topology[1].model_copy(
        update={"bandwidth_GBps": 100})]})
    gain = {}
    for n in ("dlrm-a", "dlrm-b"):
        m = load_model(n)
        gain[n] = (solve_sharding(m, fast, "cpsat", 60).estimate.samples_per_s
                   / solve_sharding(m, c, "cpsat", 60).estimate.samples_per_s)
    assert gain["dlrm-a"] > 1.3 and gain["dlrm-a"] > gain["dlrm-b"] + 0.15


# ---- CLI -------------------------------------------------------------------------------
def test_cli_solve_dlrm_json(capsys):
    code, out, _ = run(capsys, "solve", "-m", "dlrm-b", "-c", "zionex-128", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["feasible"] is True and data["solver"]["status"] == "optimal"
    assert {"samples_per_s", "iteration_time_s", "memory_per_gpu_gib"} <= set(data["estimate"])
    tables = data["plan"]["tables"]
    assert sum(t["copies"] for t in tables) == 512
    assert data["estimate"]["samples_per_s"] == pytest.approx(
        262_144 / data["estimate"]["iteration_time_s"])


@pytest.mark.slow(reason="DLRM solves with every backend through the CLI")
def test_cli_solve_dlrm_text_and_backends(capsys, tmp_path):
    code, out, _ = run(capsys, "solve", "-m", "criteo-dlrm", "-c", "dgx-a100-superpod",
                       "--gpus", "4", "--backend", "milp")
    assert code == 0 and "sharding plan" in out and "samples/s" in out and "cat_0" in out
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump({**tiny_model().to_dict(), "kind": "dlrm"}))
    times = []
    for backend in ("cpsat", "milp", "exhaustive"):
        code, out, _ = run(capsys, "solve", "-m", str(p), "-c", "dgx-a100-superpod",
                           "--gpus", "4", "--backend", backend, "--json")
        assert code == 0
        times.append(json.loads(out)["estimate"]["iteration_time_s"])
    assert times[0] == pytest.approx(times[1], rel=1e-9) == pytest.approx(times[2], rel=1e-9)


def test_cli_dlrm_errors(capsys):
    code, _, err = run(capsys, "solve", "-m", "dlrm-a", "-c", "zionex-128", "--backend",
                       "exhaustive")
    assert code == 2 and "exhaustive" in err
    code, _, err = run(capsys, "solve", "-m", "dlrm-a", "-c", "zionex-128", "--fix", "tp=2")
    assert code == 2 and "transformer" in err
    code, _, err = run(capsys, "solve", "-m", "dlrm-b", "-c", "zionex-128", "--objective",
                       "cost")
    assert code == 2 and "objective" in err
    code, out, err = run(capsys, "solve", "-m", "dlrm-a", "-c", "zionex-128", "--gpus", "8",
                         "--json")
    assert code == 1 and json.loads(out)["feasible"] is False and "GiB" in err
    code, _, err = run(capsys, "evaluate", "-m", "dlrm-a", "-c", "zionex-128", "-p",
                       str(ROOT / "tests" / "data" / "plan-tp8.yaml"))
    assert code == 2 and "DLRM" in err


# ---- fuzzed model files ------------------------------------------------------------------
SEEDS = [yaml.safe_load((CATALOG / "models" / f"{n}.yaml").read_text())
         for n in ("dlrm-a", "dlrm-b", "criteo-dlrm")]
VALUES = [None, 0, -1, 1, 2.5, 10**13, float("nan"), float("inf"), "x", [], {}, True, 1e308]


@st.composite
def mutated_dlrm(draw):
    data = json.loads(json.dumps(draw(st.sampled_from(SEEDS))))
    data["tables"] = data["tables"][:3]
    for t in data["tables"]:
        t["count"] = min(t.get("count", 1), 4)
        t.setdefault("cache_load_factor", 0.2)  # UVM caching's fields, to be mutated too
        t.setdefault("cache_hit_rate", 0.5)
    for _ in range(draw(st.integers(1, 3))):
        tables = [t for t in data["tables"] if isinstance(t, dict)] if isinstance(
            data["tables"], list) else []
        target = draw(st.sampled_from(["top", "table"])) if tables else "top"
        holder = data if target == "top" else draw(st.sampled_from(tables))
        key = draw(st.sampled_from(sorted(holder)))
        holder[key] = draw(st.sampled_from(VALUES))
    return data


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=mutated_dlrm())
def test_fuzzed_dlrm_files(tmp_path, data):
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump(data))
    try:
        m = load_model(str(p))
    except InputError as e:
        assert str(e).strip()
        return
    try:
        res = solve_sharding(m, load_cluster("dgx-a100-superpod", 4), "cpsat", 10)
    except (InputError, InfeasibleError) as e:
        assert str(e).strip()
        return
    est = res.estimate
    assert math.isfinite(est.iteration_time_s) and est.samples_per_s > 0


# ---- TorchRec export ---------------------------------------------------------------------
#: torchrec/distributed/types.py ShardingType values (pytorch/torchrec@a48cef79)
TORCHREC_TYPES = {"data_parallel", "table_wise", "column_wise", "row_wise", "table_row_wise",
                  "table_column_wise", "grid_shard"}


def _tbe_sized(m: DLRMSpec, c):
    """The instance with every table 8x wider (and 8x the HBM): column shards of 2 and 4
    are then multiples of 4, as FBGEMM needs."""
    tables = [t.model_copy(update={"dim": 8 * t.dim}) for t in m.tables]
    gpu = c.gpu.model_copy(update={"hbm_gib": 8 * c.gpu.hbm_gib})
    return m.model_copy(update={"tables": tables}), c.model_copy(update={"gpu": gpu})


def test_torchrec_export_refuses_shards_fbgemm_cannot_hold():
    """FBGEMM's kernels take dims that are multiples of 4 (dlrm-a's 94 is not); a
    data-parallel table is written with TorchRec's sharding_spec None."""
    from planner.export.torchrec import torchrec_plan

    m = DLRMSpec(name="d", tables=[dict(name="a", rows=1000, dim=94, pooling=2),
                                   dict(name="b", rows=1000, dim=40, pooling=2)],
                 bottom_mlp=[64, 32], top_mlp=[32, 1], interaction=dict(kind="none"),
                 global_batch_size=64)
    c = small_cluster(4, 2)
    tw = dict(sharding_type="table_wise", ranks={0: 1})
    dp = dict(sharding_type="data_parallel")
    plan = DLRMPlan(tables=[dict(table="a", **tw), dict(table="b", **dp)])
    with pytest.raises(InputError, match=r"table 'a' \(table_wise, dim 94\): 94 is not a "
                       "multiple of 4.*dim 96"):
        torchrec_plan(m, c, plan)
    cw = dict(sharding_type="column_wise", shards=4, ranks={0: 1, 1: 1, 2: 1, 3: 1})
    with pytest.raises(InputError, match=r"table 'b' \(column_wise, dim 40 in 4 column "
                       r"shards of 10\): 10 is not a multiple of 4.*dim 48"):
        torchrec_plan(m, c, DLRMPlan(tables=[dict(table="a", **dp), dict(table="b", **cw)]))
    out = torchrec_plan(m, c, DLRMPlan(tables=[dict(table="a", **dp), dict(table="b", **tw)]))
    assert out["sharding_plan"]["a"]["sharding_spec"] is None
    assert out["sharding_plan"]["b"]["sharding_spec"][0]["shard_sizes"] == [1000, 40]


def test_torchrec_export_covers_every_shard():
    from planner.export.torchrec import torchrec_plan

    covered = 0
    for seed in range(40):
        m, c = _tbe_sized(*random_instance(seed))
        try:
            s = solve_sharding(m, c, "cpsat", 20)
        except InfeasibleError:
            continue
        tr = torchrec_plan(m, c, s.plan)
        assert len(tr["sharding_plan"]) == m.num_tables == len(tr["parameter_constraints"])
        held = {r: 0 for r in range(c.num_gpus)}
        for name, ps in tr["sharding_plan"].items():
            t = next(t for t in m.tables if name == t.name or name.startswith(t.name + "_"))
            assert ps["sharding_type"] in TORCHREC_TYPES
            assert tr["parameter_constraints"][name]["sharding_types"] == [ps["sharding_type"]]
            spec = ps["sharding_spec"]
            if ps["sharding_type"] in ("row_wise", "table_row_wise"):
                assert sum(x["shard_sizes"][0] for x in spec) == t.rows
            if ps["sharding_type"] == "column_wise":
                assert sum(x["shard_sizes"][1] for x in spec) == t.dim
                assert len(set(ps["ranks"])) == len(ps["ranks"])  # distinct ranks
            if ps["sharding_type"] in ("table_wise", "column_wise"):
                for r in ps["ranks"]:
                    held[r] += 1
            covered += 1
        want = {r: 0 for r in range(c.num_gpus)}
        for p in s.plan.tables:
            for r, k in p.ranks.items():
                want[r] += k
        assert held == want  # the export puts every table-/column-wise shard where the plan does
    assert covered > 60


def test_cli_out_writes_torchrec_plan(capsys, tmp_path):
    path = tmp_path / "plan.json"
    code, out, _ = run(capsys, "solve", "-m", "dlrm-b", "-c", "zionex-128", "--out", str(path))
    assert code == 0 and "TorchRec" in out
    data = json.loads(path.read_text())
    sp = data["torchrec"]["sharding_plan"]
    assert len(sp) == 512 and sp["sparse_0"]["compute_kernel"] == "fused"
    assert sorted(r for p in sp.values() for r in p["ranks"]) == sorted(list(range(128)) * 4)


# ---- procurement -------------------------------------------------------------------------
def test_procure_dlrm_cheapest_within_days(capsys):
    code, out, _ = run(capsys, "procure", "-m", "dlrm-b", "--tokens", "2e10", "--days", "1",
                       "--cluster", "dgx-a100-superpod", "--counts", "4,16,32", "--json")
    assert code == 0
    data = json.loads(out)
    opts = {o["num_gpus"]: o for o in data["options"]}
    cut = {b["num_gpus"]: b for b in data["pruned"]}
    # 4 GPUs of 80 GB cannot hold 332B fp16 parameters (664 GB); 16 and 32 can (solved,
    # or bounded out unsolved: procurement/dlrm.py)
    assert set(opts) | set(cut) == {16, 32} and not set(opts) & set(cut)
    assert any("4x" in s for s in data["skipped"])
    for o in opts.values():  # days = samples / samples per second
        assert o["days"] == pytest.approx(2e10 / o["samples_per_s"] / 86400, rel=1e-9)
    ok = [o for o in opts.values() if o["days"] <= 1]
    assert data["choice"]["cost_usd"] == min(o["cost_usd"] for o in ok)
    for b in cut.values():  # no plan of a pruned option is within the limits and cheaper
        assert (b["lower_bounds"]["cost_usd"] > data["choice"]["cost_usd"]
                or b["lower_bounds"]["days"] > 1)
    code, _, err = run(capsys, "procure", "-m", "dlrm-b", "--tokens", "1e15", "--days", "1",
                       "--cluster", "dgx-a100-superpod", "--counts", "32")
    assert code == 1 and "within the limits" in err


@pytest.mark.slow(reason="solves every instance to compare its bounds")
def test_work_and_lp_bounds_are_below_every_optimum():
    from formulations.dlrm.bound import lp_bound_s
    from formulations.dlrm.search import work_bound_s

    above_work = 0
    for seed in range(60):
        m, c = random_instance(seed)
        try:
            t = exhaustive(m, c).estimate.iteration_time_s
        except InfeasibleError:
            continue
        lp = lp_bound_s(m, c)
        assert work_bound_s(m, c) <= t * (1 + 1e-12)
        assert lp is not None and lp <= t * (1 + 1e-12), seed
        above_work += lp > work_bound_s(m, c) * (1 + 1e-6)
    assert above_work >= 10  # the LP's per-table cuts and floors do bind


def many_tables(seed: int, n: int, ranks: int, node: int):
    rng = random.Random(seed)
    tables = [dict(name=f"t{i}", rows=int(10 ** rng.uniform(3, 6.5)), dim=rng.choice([16, 32]),
                   pooling=rng.choice([1, 5, 30]), skew=rng.choice([0.0, 0.3]))
              for i in range(n)]
    m = DLRMSpec(name=f"many{seed}", tables=tables, bottom_mlp=[64, 32], top_mlp=[32, 1],
                 interaction=dict(kind="none"), global_batch_size=8192)
    return m, small_cluster(ranks, node, hbm_mib=rng.choice([400, 40_000]))


@pytest.mark.slow(reason="CP-SAT and MILP proofs on four random instances")
@pytest.mark.parametrize("seed", range(4))
def test_local_search_start_is_exact_where_proven(seed):
    """With 6+ table entries CP-SAT starts from the local search's plan
    (formulations/dlrm/local.py); CP-SAT and the MILP still agree on the proven optimum, the
    search's own plan is valid and no faster than it, and the LP bound is below it."""
    from formulations.dlrm.build import build
    from formulations.dlrm.bound import lp_bound_s
    from formulations.dlrm.local import local_plan
    from formulations.dlrm.search import _values, decode

    m, c = many_tables(seed, 6, 4, 2)
    cp = solve_sharding(m, c, "cpsat", 60, workers=2)
    mi = solve_sharding(m, c, "milp", 60)
    assert cp.status == mi.status == "optimal"
    t = mi.estimate.iteration_time_s
    assert cp.estimate.iteration_time_s == pytest.approx(t, abs=1e-9 * t + 1e-10)
    _, vm = build(m, c)
    hint = local_plan(m, c, vm, time.perf_counter() + 5)
    est = evaluate_dlrm(m, c, decode(m, vm, _values(vm, hint)))
    assert est.feasible and est.iteration_time_s >= t * (1 - 1e-9)
    assert lp_bound_s(m, c) <= t * (1 + 1e-12)


@pytest.mark.slow(reason="local searches on models above the exact model's size")
@pytest.mark.parametrize("seed", range(3))
def test_models_too_large_to_build_get_the_local_search_and_its_gap(seed, monkeypatch, capsys,
                                                                     tmp_path):
    """Above MAX_MODEL_VARS the exact model is not built (memory grows ~1.2 KB per
    variable): the local search's plan comes back as status ``heuristic``, valid, no
    faster than the proven optimum, with the bound below the optimum."""
    import formulations.dlrm.search as ds

    m, c = many_tables(seed, 8, 4, 2)
    exact = solve_sharding(m, c, "milp", 60)
    assert exact.status == "optimal"
    t = exact.estimate.iteration_time_s
    monkeypatch.setattr(ds, "MAX_MODEL_VARS", 10)
    monkeypatch.setattr(ds, "build", lambda *a, **k: pytest.fail("the exact model was built"))
    for backend in ("cpsat", "milp"):
        h = solve_sharding(m, c, backend, 3)
        assert h.status == "heuristic" and h.estimate.feasible and h.model_objective_s is None
        assert h.estimate.iteration_time_s >= t * (1 - 1e-9)
        assert h.bound_s <= t * (1 + 1e-12) and 0 <= h.optimality_gap < 1
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump(m.to_dict()))
    cp = tmp_path / "c.yaml"
    cp.write_text(yaml.safe_dump(c.to_dict()))
    code, out, _ = run(capsys, "solve", "-m", str(p), "-c", str(cp), "--time-limit", "3", "--json")
    assert code == 0
    solver = json.loads(out)["solver"]
    assert solver["status"] == "heuristic" and "local search" in solver["status_text"]
    code, out, _ = run(capsys, "solve", "-m", str(p), "-c", str(cp), "--time-limit", "3")
    assert code == 0 and "best found by local search" in out and "gap to bound" in out


def test_model_size_counts_the_exact_models_variables():
    from formulations.dlrm.build import build
    from formulations.dlrm.search import model_vars

    for seed in range(5):
        m, c = random_instance(seed)
        lm, vm = build(m, c)
        assert model_vars(m, c) == len(vm.m) + len(vm.n) + len(vm.z)


@pytest.mark.slow(reason="a 60-table local search on 32 ranks")
def test_local_search_beats_greedy_at_scale():
    """60 random tables on 32 ranks: the search's plan is within its reported bound gap and
    better than TorchRec's greedy partitioner (one of its warm starts) by more than the gap
    it leaves open, so the greedy plan is provably not optimal."""
    m, c = many_tables(7, 60, 32, 8)
    s = solve_sharding(m, c, "cpsat", 3, workers=2)
    greedy = evaluate_dlrm(m, c, torchrec_greedy(m, c))
    t = s.estimate.iteration_time_s
    assert s.estimate.feasible and s.bound_s <= t
    assert greedy.iteration_time_s - t > t - s.bound_s
    assert s.status == "optimal" or 0 < s.optimality_gap < 0.25  # measured 9%


def test_ramp_dlrm_speedup_over_fat_tree():
    """RAMP Table 10's 256-GPU DLRM (328B parameters) on RAMP against the paper's fat-tree
    baseline: all-to-all bound, so RAMP is several times faster (RAMP reports 7.8-58x
    across 256-65K servers: Ottino, Benjamin, Zervas, "RAMP: A Flat Nanosecond Optical
    Network and MPI Operations for Distributed Deep Learning Systems", arXiv 2211.15226,
    2022, Sec. 8.1, Fig. 17; ours at 256 GPUs: 8.4x)."""
    m = load_model("ramp-dlrm-256")
    assert m.embedding_params == 327_680_000_000
    ramp = solve_sharding(m, load_cluster("ramp-a100", 256), "cpsat", 30).estimate
    tree = solve_sharding(m, load_cluster(str(ROOT / "examples" / "ramp-baseline-fat-tree.yaml"),
                                          256), "cpsat", 30).estimate
    speedup = tree.iteration_time_s / ramp.iteration_time_s
    assert 5 < speedup < 58 and ramp.feasible and tree.feasible


@settings(max_examples=25, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10**6), factor=st.sampled_from([1.5, 4.0]))
def test_more_memory_never_slows_the_optimum(seed, factor):
    """Property: a GPU with more HBM admits every plan the smaller one did."""
    m, c = random_instance(seed)
    big = c.model_copy(update={"gpu": c.gpu.model_copy(update={"hbm_gib": c.gpu.hbm_gib * factor})})
    small = _solve(lambda: solve_sharding(m, c, "cpsat", 20, workers=1))
    large = _solve(lambda: solve_sharding(m, big, "cpsat", 20, workers=1))
    if small is not None:  # then the large one is feasible too, and no slower
        assert large is not None
        assert large.estimate.iteration_time_s <= small.estimate.iteration_time_s * (1 + 1e-9)
    if large is None:
        return
    est = large.estimate
    assert est.iteration_time_s == pytest.approx(sum(est.phases_s.values()), rel=1e-12)


# ---- time limits (issue "One request, one road", item 5) ---------------------------------
def tight_tables(n: int, spare: float = 1.045):
    """``n`` distinct tables (1e3-1e8 rows) on 8 A100s whose HBM holds every table-wise
    shard with ``spare`` of room: TorchRec's greedy partitioner (largest first onto the
    least-loaded rank with room) places them; the local search, which picks finer or
    replicated options, runs out of memory on such tight GPUs."""
    rng = random.Random(0)
    tables = [dict(name=f"t{i}", rows=int(10 ** rng.uniform(3, 8)),
                   dim=rng.choice([16, 32, 64, 128]), pooling=rng.choice([1, 5, 30]))
              for i in range(n)]
    m = DLRMSpec(name=f"tight{n}", tables=tables, bottom_mlp=[64, 32], top_mlp=[32, 1],
                 interaction=dict(kind="none"), global_batch_size=8192)
    roomy = small_cluster(8, 8, 10**9)
    tw = sum(next(o for o in table_options(m, roomy, i) if o.kind == "table_wise"
                  ).cost.memory_bytes for i in range(n))
    need = tw / 8 + dense_cost(m, roomy).memory_bytes
    return m, small_cluster(8, 8, round(need * spare / 2**20))


def _files(tmp_path, m, c):
    p, q = tmp_path / "m.yaml", tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(m.to_dict()))
    q.write_text(yaml.safe_dump(c.to_dict()))
    return str(p), str(q)


def test_time_limit_returns_at_least_the_greedy_baseline(capsys, tmp_path):
    """400 tables on 8 tight GPUs under a limit too short to build the exact model (12,400
    variables): the local search finds no plan that fits, TorchRec's greedy does. The
    answer is the greedy's plan, said to be that ("greedy baseline (time limit)"), with
    its gap to the bound, never a claimed optimum; the limit is passed (the options alone
    take longer than 10 ms), and the stderr line says by how much. It used to exit 1
    with no plan."""
    import formulations.dlrm.search as ds
    from formulations.dlrm.local import local_state

    m, c = tight_tables(400)
    options = [table_options(m, c, i) for i in range(len(m.tables))]
    ample = time.perf_counter() + 60  # the premise: given ample time, local search places none
    assert local_state(m, c, options, ample) is None
    greedy = evaluate_dlrm(m, c, torchrec_greedy(m, c))
    assert greedy.feasible
    assert ds.model_vars(m, c) > ds.max_exact_vars(0.01)
    code, out, err = run(capsys, "solve", *_args(*_files(tmp_path, m, c)), "--json")
    assert code == 0
    d = json.loads(out)
    s = d["solver"]
    assert s["status"] == "heuristic" and s["found_by"] == "greedy"  # no exact model built
    assert s["status_text"] == "greedy baseline (time limit)"
    assert d["feasible"] and s["evaluator_objective_s"] == pytest.approx(
        greedy.iteration_time_s, rel=1e-12)
    assert s["model_objective_s"] is None and 0 < s["optimality_gap"] < 1
    assert s["time_limit_overrun_s"] == pytest.approx(s["solve_time_s"] - 0.01)
    assert "past --time-limit 0.01" in err
    code, out, _ = run(capsys, "solve", *_args(*_files(tmp_path, m, c)))
    assert code == 0 and "greedy baseline (time limit) in" in out and " by cpsat" not in out


def _args(model: str, cluster: str) -> tuple[str, ...]:
    return ("-m", model, "-c", cluster, "--time-limit", "0.01")


@pytest.mark.parametrize("backend", ["cpsat", "milp"])
def test_exact_model_with_no_plan_in_time_answers_the_greedy(monkeypatch, backend):
    """A solver that returns nothing by the limit (the MILP has no warm start; CP-SAT's
    start is the best of TorchRec's greedy, two best fits and the local search): the
    answer is never worse than TorchRec's greedy plan, and says so when it is that plan."""
    import formulations.dlrm.search as ds
    from formulations.linear import SolverOutcome

    m, c = tight_tables(40, spare=2)  # room for TorchRec's greedy plan
    nothing = SolverOutcome("unknown", None, None, 0.0)
    monkeypatch.setattr(ds, "_milp", lambda *a, **k: nothing)
    monkeypatch.setattr(ds, "_cpsat", lambda *a, **k: nothing)
    s = solve_sharding(m, c, backend, 5, workers=1)
    greedy = evaluate_dlrm(m, c, torchrec_greedy(m, c))
    assert s.status == "time_limit" and s.estimate.feasible
    assert s.estimate.iteration_time_s <= greedy.iteration_time_s * (1 + 1e-12)
    if s.found_by == "greedy":
        assert s.estimate.iteration_time_s == pytest.approx(greedy.iteration_time_s, rel=1e-12)
    else:
        assert s.estimate.iteration_time_s < greedy.iteration_time_s
    if backend == "milp":  # no start: the greedy's own plan
        assert s.found_by == "greedy" and s.model_objective_s is None


def test_no_time_left_for_cpsat_answers_the_best_start(monkeypatch):
    """When building the model and its starts took the whole limit, CP-SAT (whose loading
    alone takes seconds on large models) is not started: the best start answers."""
    import formulations.dlrm.search as ds

    m, c = tight_tables(40, spare=2)
    assert ds.model_vars(m, c) <= ds.MIN_EXACT_VARS  # the exact model is built
    monkeypatch.setattr(ds, "_cpsat", lambda *a, **k: pytest.fail("CP-SAT was started"))
    s = solve_sharding(m, c, "cpsat", 1e-4, workers=1)
    assert s.status == "time_limit" and s.estimate.feasible


def test_no_plan_in_time_still_says_the_overrun(capsys, tmp_path):
    """A search that ends without a plan after running past the limit says so as a plan
    would (the stderr line, the JSON fields)."""
    m, c = tight_tables(40, spare=0.5)  # fits nowhere
    code, out, err = run(capsys, "solve", *_args(*_files(tmp_path, m, c)), "--json")
    assert code == 1
    s = json.loads(out)["solver"]
    assert s["status"] in ("infeasible", "time_limit") and s["time_limit_overrun_s"] > 0
    assert "past --time-limit 0.01" in err and "no plan found" in err
