"""Network realism (issue 13): MI300X's Infinity Fabric is a mesh of point-to-point links,
not a switch, and job sizes need not fill whole nodes or NVL72 racks."""

from __future__ import annotations

import json

import pytest

from planner.costmodel.network import collective_time_s, level_bandwidth_Bps
from planner.errors import InputError
from planner.procurement.templates import catalog_templates
from planner.specs.cluster import ClusterSpec, TopologyLevel
from planner.specs.loaders import cluster_from_dict, load_cluster
from test_cli import run

GiB = 2**30


# ---- A. the MI300X mesh --------------------------------------------------------------------
def _fabric() -> TopologyLevel:
    return load_cluster("mi300x-cluster").topology[0]


def test_a_mesh_group_uses_only_the_links_among_its_members():
    fabric = _fabric()
    assert fabric.kind == "fully_connected" and fabric.size == 8
    link_Bps = fabric.link_GBps * 1e9 * fabric.efficiency
    assert level_bandwidth_Bps(fabric, 2) == pytest.approx(link_Bps)  # TP2: one link
    assert level_bandwidth_Bps(fabric, 4) == pytest.approx(3 * link_Bps)
    assert level_bandwidth_Bps(fabric, 8) == pytest.approx(7 * link_Bps)  # the whole node
    assert level_bandwidth_Bps(fabric, 8) == pytest.approx(fabric.effective_Bps)


def test_tp2_all_reduce_is_several_times_slower_than_on_a_switch():
    """The old model: the same node as a 448 GB/s switch (procurement's DGX H100 SuperPOD
    with MI300X GPUs). TP2 now moves over one 64 GB/s link: 7x the bandwidth time."""
    fabric = _fabric()
    switch = fabric.model_copy(update={"kind": "switch", "link_GBps": None})
    tp2 = collective_time_s("allreduce", GiB, (2,), (fabric,))
    assert tp2 > 5 * collective_time_s("allreduce", GiB, (2,), (switch,))
    # the whole node has all 7 links: the same bandwidth (direct vs halving-doubling
    # steps differ in latency only)
    assert collective_time_s("allreduce", GiB, (8,), (fabric,)) == pytest.approx(
        collective_time_s("allreduce", GiB, (8,), (switch,)), rel=0.02)
    # point to point (pipeline stages in one node): one link
    assert level_bandwidth_Bps(fabric, 2) * 7 == pytest.approx(switch.effective_Bps)


def test_fc_levels_without_links_keep_the_astra_sim_semantics():
    """ASTRA-sim's FC dimension gives each of its p-1 links B/(p-1): a group spanning the
    whole dimension gets B, as before. Without link_GBps a level is shared by any group
    (the seeds' numbers do not move); with link_GBps = B/(p-1) a whole-dimension group
    gets the same time."""
    fc = TopologyLevel(name="fc", kind="fully_connected", size=8, bandwidth_GBps=200,
                       latency_us=0.02)
    assert {level_bandwidth_Bps(fc, k) for k in (2, 4, 8)} == {fc.effective_Bps}
    mesh = fc.model_copy(update={"link_GBps": 200 / 7})
    for op in ("allreduce", "reduce_scatter", "all_gather", "all_to_all"):
        assert collective_time_s(op, GiB, (8,), (mesh,)) == pytest.approx(
            collective_time_s(op, GiB, (8,), (fc,)))


def test_link_bandwidth_only_on_a_fully_connected_level():
    with pytest.raises(ValueError, match="link_GBps is for kind fully_connected"):
        TopologyLevel(name="x", kind="switch", size=8, bandwidth_GBps=448, link_GBps=64)
    bad = {"name": "x", "gpu": "mi300x", "topology": [
        {"name": "xgmi", "kind": "ring", "size": 8, "bandwidth_GBps": 448, "link_GBps": 64}]}
    with pytest.raises(InputError, match="link_GBps.*got kind 'ring'"):
        cluster_from_dict(bad, "bad.yaml")


def test_a_partial_mi300x_node_keeps_its_links():
    """4 GPUs of a node: a TP4 group has 3 links, not the node's 448 GB/s."""
    c = load_cluster("mi300x-cluster", 4)
    fabric = c.topology[0]
    assert [lv.size for lv in c.topology] == [4] and fabric.link_GBps == 64
    assert level_bandwidth_Bps(fabric, 4) == pytest.approx(3 * 64e9 * fabric.efficiency)


def test_procurement_offers_mi300x_on_its_mesh():
    (tpl,) = catalog_templates(["mi300x"])
    assert tpl.name == "mi300x-cluster"
    assert tpl.topology[0].kind == "fully_connected" and tpl.topology[0].link_GBps == 64


@pytest.mark.slow(reason="an end-to-end solve of a catalog model")
def test_solve_llama3_70b_on_the_mi300x_cluster(capsys):
    code, out, _ = run(capsys, "solve", "-m", "llama3-70b", "-c", "mi300x-cluster",
                       "--gpus", "64", "--json", "--time-limit", "60")
    assert code == 0
    data = json.loads(out)
    assert data["estimate"]["feasible"] and data["estimate"]["num_gpus"] == 64


# ---- B. job sizes that do not fill whole units ---------------------------------------------
@pytest.mark.parametrize("cluster, gpus, sizes", [
    ("gb200-nvl72", 64, [64]),
    ("gb200-nvl72", 128, [64, 2]),  # two racks of 64, as NVIDIA runs them
    ("gb200-nvl72", 256, [64, 4]),
    ("gb200-nvl72", 144, [72, 2]),
    ("gb200-nvl72", 100, [50, 2]),
    ("dgx-h100-superpod", 12, [6, 2]),
    ("dgx-h100-superpod", 20, [5, 4]),  # 3 nodes cannot split 20 evenly
    # counts that already worked: the same levels as before
    ("dgx-h100-superpod", 1, [1]),
    ("dgx-h100-superpod", 2, [2]),
    ("dgx-h100-superpod", 4, [4]),
    ("dgx-h100-superpod", 8, [8]),
    ("dgx-h100-superpod", 1024, [8, 128]),
    ("dgx-h100-superpod", 16384, [8, 2048]),
    ("gb200-nvl72", 576, [72, 8]),
])
def test_job_sizes_fill_as_few_units_as_divide_them(cluster, gpus, sizes):
    c = load_cluster(cluster, gpus)
    assert [lv.size for lv in c.topology] == sizes and c.num_gpus == gpus


def _three_levels() -> ClusterSpec:
    return ClusterSpec(name="pods", gpu=load_cluster("dgx-h100-superpod").gpu, num_gpus=1024,
                       topology=[TopologyLevel(name="node", size=8, bandwidth_GBps=450),
                                 TopologyLevel(name="leaf", size=32, bandwidth_GBps=50),
                                 TopologyLevel(name="spine", size=4, bandwidth_GBps=50)])


@pytest.mark.parametrize("gpus, sizes", [
    (384, [8, 24, 2]),  # 1.5 leaves: 2 leaves of 24 full nodes
    (260, [5, 26, 2]),  # 2 leaves of 130 GPUs, each 26 nodes of 5: the rule at every level
    (512, [8, 32, 2]),  # whole leaves: as before
    (100, [5, 20]),  # inside one leaf: the top level dropped, as before
])
def test_the_rule_applies_at_every_level(gpus, sizes):
    assert [lv.size for lv in _three_levels().resized(gpus).topology] == sizes


@pytest.mark.parametrize("cluster, gpus, needle", [
    ("dgx-h100-superpod", 13, r"--gpus 13 .*'nvswitch' \(8 GPUs each\).* 12 \(2 x 6 GPUs\) "
                              r"or 14 \(2 x 7 GPUs\)"),
    ("dgx-h100-superpod", 22, r"--gpus 22 .* 21 \(3 x 7 GPUs\) or 24 \(3 x 8 GPUs\)"),
    ("gb200-nvl72", 73, r"--gpus 73 .*'nvlink72' \(72 GPUs each\).* 72 \(72 GPUs\) or "
                        r"74 \(2 x 37 GPUs\)"),
])
def test_a_count_that_cannot_split_evenly_names_counts_that_can(cluster, gpus, needle):
    with pytest.raises(InputError, match=needle):
        load_cluster(cluster, gpus)


def test_solve_on_partial_racks(capsys):
    code, out, _ = run(capsys, "solve", "-m", "llama3-8b", "-c", "gb200-nvl72", "--gpus", "128",
                       "--json", "--time-limit", "60")
    assert code == 0
    data = json.loads(out)
    assert data["estimate"]["feasible"] and data["estimate"]["num_gpus"] == 128


def test_an_unplaceable_count_is_a_clear_cli_error(capsys):
    code, out, err = run(capsys, "solve", "-m", "llama3-8b", "-c", "gb200-nvl72",
                         "--gpus", "73")
    assert code != 0 and "--gpus 73" in out + err and "74" in out + err
