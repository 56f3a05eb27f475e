"""Bounding before tabulating (issue 38 item 2): the network-free tables bound every
placement of an outer configuration, and a solve that drops outers by that bound returns
what the whole space returns."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import planner.orchestration.train as train
from formulations.train.search import state_lower_bounds
from planner.costmodel.train.tables import build_tables
from planner.specs.loaders import load_cluster, load_model

CASES = [("llama3-8b", 64, None), ("mixtral-8x7b", 64, None)]


@pytest.mark.parametrize("name,gpus,batch", CASES)
def test_network_free_bound_is_below_every_placement(name, gpus, batch):
    model, cluster = load_model(name), load_cluster("dgx-h100-superpod", gpus)
    space = train.build_space(model, cluster)
    full = build_tables(space)
    free = copy.copy(space)
    free.placements = lambda o: space.placements(o)[:1]  # the network does not matter
    free.outers = [o for o in space.outers if space.placements(o)]
    nf = build_tables(free, network=False)
    assert not np.any(nf.terms.p2p_s) and not np.any(nf.terms.dp_grad_s)
    row = {o: i for i, (o, _) in enumerate(nf.points)}
    lb, lbf = state_lower_bounds(full), state_lower_bounds(nf)
    below = lbf[[row[o] for o, _ in full.points]]
    finite = np.isfinite(lb)
    assert finite.any() and np.all(below[finite] <= lb[finite])
    # with its network, a point of several GPUs per group costs more than without
    assert np.any(below[finite] < lb[finite])


@pytest.mark.parametrize("name,gpus,batch", CASES)
def test_pruned_solve_returns_the_whole_space_answer(monkeypatch, name, gpus, batch):
    model, cluster = load_model(name), load_cluster("dgx-h100-superpod", gpus)
    monkeypatch.setattr(train, "PRUNE_MIN_POINTS", 10**12)
    whole = train.solve(model, cluster, top_k=3)
    assert whole.stats["points_pruned_before_tabulating"] == 0
    monkeypatch.setattr(train, "PRUNE_MIN_POINTS", 0)
    cut = train.solve(model, cluster, top_k=3)
    assert cut.stats["points_pruned_before_tabulating"] > 0  # the mechanism ran
    assert cut.stats["points"] == whole.stats["points"]
    assert cut.status == whole.status == "optimal"
    assert [p.plan for p in cut.plans] == [p.plan for p in whole.plans]
    assert [p.objective for p in cut.plans] == [p.objective for p in whole.plans]


def test_no_pruning_where_a_host_stall_falls_with_communication(monkeypatch):
    """Megatron-Core's MoE layers wait on the host for less when their exchanges take
    longer (moe_expert_host_us > 0): the network-free terms are not a bound there, and
    the space is tabulated whole."""
    from formulations.train.space import SpaceOptions
    from planner.specs.framework import load_framework

    fw = load_framework("megatron-core")
    model, cluster = load_model("mixtral-8x7b"), load_cluster("dgx-h100-superpod", 64)
    space = train.build_space(model, cluster, options=SpaceOptions(framework=fw))
    assert space.cluster.gpu.efficiency.moe_expert_host_us > 0
    monkeypatch.setattr(train, "PRUNE_MIN_POINTS", 0)
    kept, pruned = train.prune_before_tabulating(space, train.Objective.of("time"), 1, None)
    assert pruned == 0 and kept is space
    # the same space without the stall is pruned
    dense = train.build_space(load_model("llama3-8b"), cluster,
                              options=SpaceOptions(framework=fw))
    assert train.prune_before_tabulating(dense, train.Objective.of("time"), 1, None)[1] > 0
