"""Topologies of the seeds: ASTRA-sim shorthand, hierarchical collectives, the
``planner collective`` command, in-network reduction."""

from __future__ import annotations

import json
import math

import pytest

from planner.costmodel.network import (collective_breakdown, collective_time_s, level_traffic,
                                       pipelined_time)
from planner.errors import InputError
from planner.specs.cluster import TopologyLevel
from planner.specs.loaders import cluster_from_dict
from planner.specs.topology import parse_shorthand, shorthand_levels
from planner.specs.units import parse_bandwidth_GBps, parse_size_bytes

from test_cli import run
from test_formulas import ASTRA_TABLE3

MiB = 2**20


def levels_of(text: str, bws, lats=0.0) -> list[TopologyLevel]:
    return [TopologyLevel(**lv) for lv in shorthand_levels(text, bws, lats)]


# ---- shorthand and units ---------------------------------------------------------------
def test_parse_shorthand_kinds_and_options():
    assert parse_shorthand("Ring(2)_FC(8)_Ring(8)_Switch(4)") == [
        ("ring", 2, False), ("fully_connected", 8, False), ("ring", 8, False),
        ("switch", 4, False)]
    assert parse_shorthand("RI(4)_FullyConnected(2)_SW(16,inr)") == [
        ("ring", 4, False), ("fully_connected", 2, False), ("switch", 16, True)]


@pytest.mark.parametrize("text,needle", [
    ("Ring(2)_Torus(8)", "unknown dimension kind 'Torus'"),
    ("Ring(2)_FC8", "cannot read dimension 2 'FC8'"),
    ("Ring(0)", "at least 1"),
    ("Ring(4,inr)", "needs a Switch"),
    ("Switch(4,fast)", "unknown option 'fast'"),
    ("", "empty shorthand"),
])
def test_parse_shorthand_errors(text, needle):
    with pytest.raises(InputError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        parse_shorthand(text)


def test_units():
    assert parse_size_bytes("1GiB") == 2**30
    assert parse_size_bytes("512MB") == 512e6
    assert parse_size_bytes("64 KiB") == 65536
    assert parse_size_bytes("4096") == 4096
    assert parse_bandwidth_GBps("400Gbps") == 50  # gigabits, the network convention
    assert parse_bandwidth_GBps("50GB/s") == 50
    assert parse_bandwidth_GBps("1000", default_unit="GiB/s") == pytest.approx(1073.741824)
    for bad in ("1 parsec", "-3GB", "lots"):
        with pytest.raises(InputError):
            parse_size_bytes(bad)


def test_cluster_yaml_accepts_shorthand():
    c = cluster_from_dict({"name": "conv4d", "gpu": "h100",
                           "topology": "Ring(2)_FC(8)_Ring(8)_Switch(4)",
                           "bandwidths_GBps": [250, 200, 100, 50], "latencies_us": 0.5}, "t")
    assert c.num_gpus == 512 and c.domain_size == 2
    assert [lv.kind for lv in c.topology] == ["ring", "fully_connected", "ring", "switch"]
    assert [lv.bandwidth_GBps for lv in c.topology] == [250, 200, 100, 50]
    assert all(lv.latency_us == 0.5 for lv in c.topology)


@pytest.mark.parametrize("data,needle", [
    ({"topology": "Ring(2)_FC(8)"}, "bandwidths_GBps is required"),
    ({"topology": "Ring(2)_FC(8)", "bandwidths_GBps": [1, 2, 3]}, "3 values for the 2"),
    ({"topology": "Ring(2)_FC(8)", "bandwidths_GBps": [1, 2], "num_gpus": 8}, "num_gpus=8"),
])
def test_cluster_shorthand_errors(data, needle):
    with pytest.raises(InputError, match=needle):
        cluster_from_dict({"name": "x", "gpu": "h100", **data}, "bad.yaml")


# ---- hierarchical collectives ------------------------------------------------------------
def test_allreduce_traffic_telescopes_to_flat_ring():
    """sum_k 2(p_k-1)/prod_{j<=k} p_j = 2(1 - 1/P): the hierarchy only redistributes bytes
    (ASTRA-sim 2.0, Won et al. 2023 telescoping identity)."""
    lv = levels_of("Ring(2)_FC(8)_Ring(8)_Switch(4)", [1, 1, 1, 1])
    total = sum(b for b, _ in level_traffic("allreduce", 1.0, (2, 8, 8, 4), lv))
    assert total == pytest.approx(2 * (1 - 1 / 512))


def test_steps_per_dimension_kind():
    """Ring p-1, direct 1, halving-doubling log2 p per phase (ASTRA-sim 2.0 Table of
    topology-aware collectives); all-reduce has two phases."""
    lv = levels_of("Ring(8)_FC(8)_Switch(8)", [100, 100, 100])
    steps = [s for _, s in level_traffic("allreduce", 1.0, (8, 8, 8), lv)]
    assert steps == [14, 2, 6]
    ring_on_fc = [lv[0], lv[1].model_copy(update={"algorithm": "ring"}), lv[2]]
    assert [s for _, s in level_traffic("reduce_scatter", 1.0, (8, 8, 8), ring_on_fc)] == [7, 7, 3]


def test_all_to_all_per_dimension():
    """A2A runs one phase per dimension with the size unchanged: (p-1)/p V on FC/Switch;
    on a bidirectional ring shortest-path routing costs V floor(p^2/4)/p [derived]."""
    lv = levels_of("Ring(8)_FC(4)_Switch(2)", [100, 100, 100])
    traffic = [b for b, _ in level_traffic("all_to_all", 1.0, (8, 4, 2), lv)]
    assert traffic == pytest.approx([16 / 8, 3 / 4, 1 / 2])
    ring2 = levels_of("Ring(2)", [100])
    assert level_traffic("all_to_all", 1.0, (2,), ring2)[0][0] == pytest.approx(0.5)


def test_pipelining_bounds():
    times = [1.0, 4.0, 1.0, 0.25]
    # one chunk: the levels run one after the other (RAMP's synchronous steps)
    assert pipelined_time("allreduce", times, 1) == pytest.approx(sum(times))
    assert pipelined_time("reduce_scatter", times, 1) == pytest.approx(sum(times))
    # many chunks: the busiest level, plus the fill/drain of the levels inside it
    assert pipelined_time("allreduce", times, 64) == pytest.approx(4 + 1 / 64)
    assert pipelined_time("reduce_scatter", times, 64) == pytest.approx(4 + 2.25 / 64)
    # more chunks never slow a collective down
    ts = [pipelined_time("allreduce", times, c) for c in (1, 2, 4, 16, 64)]
    assert ts == sorted(ts, reverse=True)


# ---- ASTRA-sim 2.0 Table III through the CLI ---------------------------------------------
@pytest.mark.parametrize("dims,sizes_mib,paper_us", ASTRA_TABLE3)
def test_astra_sim_table3_cli(capsys, dims, sizes_mib, paper_us):
    """ASTRA-sim 2.0 Table III: 1 GiB all-reduce on Ring_FC_Ring_Switch at 1000_200_100_50
    (ASTRA-sim GB/s = 2^30 B/s; ~20 ns latencies, ASTRA-sim 2.0, Won et al. 2023): per-dimension
    message sizes exactly, time within 2% (we get within 0.2%)."""
    a, b, c, d = dims
    code, out, _ = run(capsys, "collective", "--topology", f"Ring({a})_FC({b})_Ring({c})_Switch({d})",
                       "--bandwidths", "1000,200,100,50", "--bandwidth-unit", "GiB/s",
                       "--latencies", "0.02", "--op", "allreduce", "--size", "1GiB", "--json")
    assert code == 0
    res = json.loads(out)
    assert [row["bytes"] / MiB for row in res["per_dimension"]] == list(sizes_mib)
    assert res["time_us"] == pytest.approx(paper_us, rel=0.02)
    assert res["time_us"] == pytest.approx(paper_us, rel=0.002)


def test_table3_wafer_scale_speedup(capsys):
    """'up to 2.51x speedup over the corresponding scale-out' (8_8_8_4 vs 2_8_8_16)."""
    def t(shape):
        _, out, _ = run(capsys, "collective", "-t", shape, "-b", "1000,200,100,50",
                        "--bandwidth-unit", "GiB/s", "--latencies", "0.02", "--json")
        return json.loads(out)["time_us"]
    assert t("Ring(2)_FC(8)_Ring(8)_Switch(16)") / t("Ring(8)_FC(8)_Ring(8)_Switch(4)") == \
        pytest.approx(2.51, rel=0.01)


def test_collective_cli_table_and_ops(capsys):
    code, out, _ = run(capsys, "collective", "--topology", "Ring(2)_FC(8)_Ring(8)_Switch(4)",
                       "--bandwidths", "1000,200,100,50", "--op", "allreduce", "--size", "1GiB")
    assert code == 0 and "fc2" in out and "time" in out
    for op in ("reducescatter", "allgather", "alltoall", "p2p", "all-reduce", "reduce_scatter"):
        code, out, _ = run(capsys, "collective", "-t", "FC(8)_Switch(4)", "-b", "450,50",
                           "--op", op, "--size", "512MB", "--json")
        assert code == 0, op
        res = json.loads(out)
        assert res["time_us"] > 0 and len(res["per_dimension"]) == 2
        assert set(res["per_dimension"][0]) >= {"bytes", "time_us"}


def test_collective_cli_cluster_and_spans(capsys):
    """A TP group of 8 inside one NVSwitch domain never touches InfiniBand."""
    code, out, _ = run(capsys, "collective", "--cluster", "dgx-h100-superpod", "--spans", "8,1",
                       "--size", "256MiB", "--json")
    assert code == 0
    res = json.loads(out)
    assert res["group_size"] == 8 and res["per_dimension"][1]["bytes"] == 0


@pytest.mark.parametrize("args,needle", [
    (["-t", "Ring(2)_Foo(8)", "-b", "1,2"], "unknown dimension kind 'Foo'"),
    (["-t", "Ring(2)_FC(8)"], "--topology needs --bandwidths"),
    (["-t", "Ring(2)_FC(8)", "-b", "1,2,3"], "3 values for the 2 dimensions"),
    (["-t", "Ring(2)_FC(8)", "-b", "1,fast"], "cannot read 'fast'"),
    (["-t", "Ring(2)", "-b", "1", "--op", "broadcast-ish"], "unknown collective"),
    (["-t", "Ring(2)", "-b", "1", "--size", "1 GiBB"], "unknown unit 'GiBB'"),
    (["-t", "Ring(2)", "-b", "1", "--spans", "4"], "not in 1..2"),
    (["-t", "Ring(2)", "-b", "1", "--inr", "1"], "needs a switch"),
    (["-t", "Switch(2)", "-b", "1", "-c", "superpod"], "either --topology"),
    (["-c", "no-such-cluster"], "unknown cluster"),
])
def test_collective_cli_bad_input(capsys, args, needle):
    code, _, err = run(capsys, "collective", *args)
    assert code == 2
    assert needle in " ".join(err.split())


# ---- in-network reduction ----------------------------------------------------------------
def test_in_network_reduction_halves_allreduce_traffic():
    """SHARP/NVLS: the switch reduces, so each GPU sends its data once and receives the
    result once, against 2(k-1)/k for ring or halving-doubling."""
    plain = levels_of("Switch(8)", [100])
    sharp = levels_of("Switch(8,inr)", [100])
    assert level_traffic("allreduce", 1.0, (8,), plain)[0][0] == pytest.approx(2 * 7 / 8)
    assert level_traffic("allreduce", 1.0, (8,), sharp)[0] == (1.0, 2)
    t_plain = collective_time_s("allreduce", 1e9, (8,), plain)
    t_sharp = collective_time_s("allreduce", 1e9, (8,), sharp)
    assert t_plain / t_sharp == pytest.approx(1.75)
    # below the top level the reduce-scatter sends D and the all-gather D/k
    two = levels_of("Switch(8,inr)_Switch(4)", [400, 50])
    assert level_traffic("allreduce", 1.0, (8, 4), two)[0][0] == pytest.approx(1 + 1 / 8)
    # other collectives are unchanged
    assert (level_traffic("reduce_scatter", 1.0, (8,), sharp)
            == level_traffic("reduce_scatter", 1.0, (8,), plain))


def test_in_network_reduction_from_cli(capsys):
    base = ["collective", "-t", "Switch(72)_Switch(8)", "-b", "900,50", "--size", "1GiB",
            "--spans", "72,1", "--json"]
    _, out, _ = run(capsys, *base)
    _, out_inr, _ = run(capsys, *base, "--inr", "1")
    assert json.loads(out_inr)["time_us"] < 0.6 * json.loads(out)["time_us"]


def test_breakdown_matches_time_with_one_chunk():
    lv = levels_of("Ring(4)_Switch(4)", [200, 50], 1.0)
    rows = collective_breakdown("allreduce", 1e9, (4, 4), lv)
    assert collective_time_s("allreduce", 1e9, (4, 4), lv, chunks=1) == \
        pytest.approx(sum(r.time_s for r in rows))
    assert math.isclose(rows[0].bytes, 2 * 3 / 4 * 1e9)


# ---- placement on the seeds' topologies --------------------------------------------------
@pytest.mark.parametrize("cluster,gpus,domain", [("gb200-nvl72", 576, 72),
                                                  ("dgx-h100-superpod", 576, 8)])
def test_solver_keeps_tensor_parallelism_inside_the_fast_domain(cluster, gpus, domain):
    """Llama 3 405B: every TP group lives inside one NVLink domain (NVL72 rack or DGX node),
    and on NVL72 the rack also holds CP and PP, leaving only DP on InfiniBand
    (examples/networks.md)."""
    from planner.api import solve

    plan = solve("llama3-405b", cluster, gpus=gpus, time_limit_s=60).best.plan
    dom = plan.placement.domain
    assert dom["tp"] == plan.tp
    assert math.prod(dom.values()) == domain
    if domain == 72:
        assert dom["dp"] == 1 and plan.tp * plan.cp * plan.pp == 72


# ---- ASTRA-sim 2.0 Sec. IV-A: conventional vs wafer-scale, baseline vs Themis ---------------
GiB = 2**30
WAFER = {  # Table I (ASTRA-sim GB/s = 2^30 B/s), 512 NPUs
    "W-1D-350": ("Switch(512)", [350]), "W-1D-500": ("Switch(512)", [500]),
    "W-1D-600": ("Switch(512)", [600]), "W-2D": ("Switch(32)_Switch(16)", [250, 250]),
    "Conv-3D": ("Ring(16)_FC(8)_Switch(4)", [200, 100, 50]),
    "Conv-4D": ("Ring(2)_FC(8)_Ring(8)_Switch(4)", [250, 200, 100, 50]),
}
#: each multi-dimensional system and the wafer-scale one with the same bandwidth per NPU
SAME_BW = {"W-2D": "W-1D-500", "Conv-3D": "W-1D-350", "Conv-4D": "W-1D-600"}


def astra_cluster(name: str, scheduling: str, gpu: str = "a100-sxm-80gb"):
    topo, bws = WAFER[name]
    return cluster_from_dict({"name": name, "gpu": gpu, "topology": topo,
                              "bandwidths_GBps": [b * GiB / 1e9 for b in bws],
                              "latencies_us": 0.02, "collective_scheduling": scheduling}, "t")


def allreduce_ms(name: str, scheduling: str) -> float:
    lv = list(astra_cluster(name, scheduling).topology)
    return collective_time_s("allreduce", GiB, [x.size for x in lv], lv) * 1e3


def test_themis_balances_multi_dimensional_allreduce_like_wafer_scale():
    """ASTRA-sim 2.0 Sec. IV-A, 1 GiB all-reduce: one-dimensional wafer-scale gains nothing
    from Themis; W-2D, Conv-3D and Conv-4D 'heavily benefit', and with Themis a
    conventional system matches the wafer-scale one of equal bandwidth per NPU ('identical';
    ours within 7 %: greedy over 64 chunks plus one chunk's fill and drain); without it
    Conv-4D (600 GB/s per NPU) still beats W-1D-350."""
    for w in ("W-1D-350", "W-1D-500", "W-1D-600"):
        assert allreduce_ms(w, "themis") == pytest.approx(allreduce_ms(w, "baseline"))
    for multi, wafer in SAME_BW.items():
        base, themis = allreduce_ms(multi, "baseline"), allreduce_ms(multi, "themis")
        assert base / themis > 1.2
        assert themis == pytest.approx(allreduce_ms(wafer, "baseline"), rel=0.07)
    assert allreduce_ms("Conv-4D", "baseline") < allreduce_ms("W-1D-350", "baseline")


def test_themis_never_slower_and_leaves_all_to_all_alone():
    """The greedy schedule includes the baseline's order, so it is never slower; an
    all-to-all moves (p-1)/p of its buffer on every dimension in any order: unchanged."""
    for name in WAFER:
        for op in ("allreduce", "reduce_scatter", "all_gather", "all_to_all"):
            lv_b = list(astra_cluster(name, "baseline").topology)
            lv_t = list(astra_cluster(name, "themis").topology)
            spans = [x.size for x in lv_b]
            tb = collective_time_s(op, GiB, spans, lv_b)
            tt = collective_time_s(op, GiB, spans, lv_t)
            assert tt <= tb * (1 + 1e-12)
            if op == "all_to_all":
                assert tt == pytest.approx(tb)


def test_astra_sim_dlrm_conventional_with_themis_near_wafer_scale():
    """ASTRA-sim 2.0 Sec. IV-A, DLRM (model-parallel tables, data-parallel MLPs, 100 MB-1 GB
    collectives): with Themis, conventional systems match wafer-scale ones of equal
    bandwidth per NPU. MAD-Max's DLRM-A (1.3 GB of dense gradients) table-wise on 512 A100
    of each system: Themis speeds up every multi-dimensional system and no wafer-scale one;
    W-2D then matches W-1D-500 within 2 %; Conv-3D and Conv-4D come within 15 % of theirs,
    the rest being the pooled-embedding all-to-all, which no dimension order balances."""
    from planner.costmodel.dlrm.evaluate import evaluate_dlrm
    from planner.specs.dlrm import DLRMPlan
    from planner.specs.loaders import load_model

    m = load_model("dlrm-a")
    entry = m.tables[0]
    per_rank = entry.count // 512
    plan = DLRMPlan(tables=[dict(table=entry.name, sharding_type="table_wise",
                                 copies=entry.count, ranks={r: per_rank for r in range(512)})])

    def ms(name: str, scheduling: str) -> float:
        return evaluate_dlrm(m, astra_cluster(name, scheduling), plan).iteration_time_s * 1e3

    for w in ("W-1D-350", "W-1D-500", "W-1D-600"):
        assert ms(w, "themis") == pytest.approx(ms(w, "baseline"))
    for multi, wafer in SAME_BW.items():
        themis = ms(multi, "themis")
        assert themis < ms(multi, "baseline") * 0.95
        assert 1.0 - 1e-9 <= themis / ms(wafer, "baseline") < (1.02 if multi == "W-2D" else 1.15)


def test_cli_scheduling_themis_and_bad_values(capsys):
    """`planner collective --scheduling themis` balances the bytes per dimension (their sum
    stays 2(1-1/P) of the buffer) and times it as the library does; bad values name the
    option or the cluster field."""
    args = ("collective", "--topology", "Ring(16)_FC(8)_Switch(4)", "--bandwidths",
            "200,100,50", "--bandwidth-unit", "GiB/s", "--latencies", "0.02", "--op",
            "allreduce", "--size", "1GiB", "--json")
    code, out, _ = run(capsys, *args, "--scheduling", "themis")
    assert code == 0
    res = json.loads(out)
    sent = [row["bytes"] / MiB for row in res["per_dimension"]]
    assert sum(sent) == pytest.approx(2 * (1 - 1 / 512) * 1024)
    assert sent[0] < 1920  # the baseline puts 1,920 MiB on the 16-ring
    assert res["time_us"] == pytest.approx(allreduce_ms("Conv-3D", "themis") * 1e3)
    code, _, err = run(capsys, *args, "--scheduling", "fair")
    assert code == 2 and "--scheduling 'fair'" in err
    with pytest.raises(InputError, match="collective_scheduling"):
        from planner.specs.validate import validate
        from planner.specs.cluster import ClusterSpec

        validate(ClusterSpec, {"name": "x", "gpu": "h100", "topology": "Ring(2)_FC(8)",
                               "bandwidths_GBps": [1, 2], "collective_scheduling": "fair"}, "c.yaml")
