"""The vectorized evaluator equals the scalar one plan by plan, and the composition is the
one the linear rows and the bounds use."""

from __future__ import annotations

import dataclasses
import gc
import inspect
import math
import random
import types

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import planner
import planner.costmodel.train.batch as batch_module
from formulations.train.space import SearchSpace, SpaceOptions
from planner.costmodel.frameworks import framework_defaults
from planner.costmodel.train.batch import Estimates, evaluate_columns, evaluate_many, inner_columns
from planner.costmodel.train.tables import build_tables
from planner.costmodel.compose import exposure_pieces, iteration_time_s, overlapped_s
from planner.costmodel.train.evaluator import check_structure, evaluate
from planner.costmodel.pipeline import bubble_factor
from planner.specs.framework import load_framework
from planner.specs.loaders import load_cluster, load_model
from planner.specs.plan import Plan
from planner.specs.plan_base import model_defaults

from instances import instances, moe_instances, offload_instances

FIELDS = ("iteration_time_s", "memory_per_gpu_bytes", "gpu_busy_s", "energy_j", "mfu", "hfu",
          "tokens_per_s")


def _sample(model: str, cluster: str, gpus: int, n: int, seed: int, **base):
    m = load_model(model)
    c = load_cluster(cluster, gpus)
    space = SearchSpace(m, c, {**model_defaults(m), **base}, {},
                        SpaceOptions(max_microbatch=4, max_virtual_stages=2))
    plans = [space.plan(o, d, i) for o, d, i in space]
    rng = random.Random(seed)
    return m, c, rng.sample(plans, min(n, len(plans)))


def _check(m, c, plans, allow_idle=False):
    batch = evaluate_many(m, c, plans, allow_idle)
    assert len(batch) == len(plans)
    for i, p in enumerate(plans):
        est = evaluate(m, c, p, allow_idle)
        assert bool(batch.feasible[i]) == est.feasible, p
        assert bool(batch.costable[i]) == (est.iteration_time_s is not None)
        if est.iteration_time_s is None:
            continue
        for f in FIELDS:
            got = getattr(batch, f)[i]
            want = est.memory_per_gpu_bytes if f == "memory_per_gpu_bytes" else getattr(est, f)
            assert got == pytest.approx(want, rel=1e-9), (f, p)
    return batch


@pytest.mark.slow(reason="evaluates four catalog search spaces plan by plan")
@pytest.mark.parametrize("model,cluster,gpus,base", [
    ("llama3-8b", "dgx-h100-superpod", 16, {}),  # offload tier: every state option
    ("gpt3-175b", "dgx-a100-superpod", 64, {}),
    ("mixtral-8x7b", "dgx-h100-superpod", 32, {}),  # MoE: expert groups
    ("llama3-8b", "dgx-h100-superpod", 32, {"seq_len": 32768, "global_batch_size": 32}),
])
def test_evaluate_many_equals_evaluate(model, cluster, gpus, base):
    m, c, plans = _sample(model, cluster, gpus, 150, seed=gpus, **base)
    batch = _check(m, c, plans)
    assert batch.feasible.any() and not batch.feasible.all()  # both kinds were compared


def test_evaluate_many_outside_the_tables():
    """Plans the tables cannot hold (broken rules, more GPUs than the cluster) take the
    scalar path and still answer in order; no entry leaks NaN into a feasible one."""
    m, c, plans = _sample("llama3-8b", "dgx-h100-superpod", 16, 20, seed=1)
    odd = [plans[0].model_copy(update={"dp": plans[0].dp * 4}),  # too many GPUs
           plans[1].model_copy(update={"global_batch_size": 7}),  # batch rule broken
           plans[2].model_copy(update={"tp": 3})]
    batch = _check(m, c, odd + plans)
    assert not batch.costable[0] and math.isnan(batch.iteration_time_s[0])
    assert batch.costable[1] and not batch.feasible[1]
    assert np.all(np.isfinite(batch.iteration_time_s[batch.feasible]))


def test_evaluate_many_state_no_table_holds():
    """A plan copied without validation into a state no option holds (parameter offload
    at ZeRO stage 0) takes the scalar evaluator, in its place in the list, while the
    other plans still go through the tables."""
    m, c, plans = _sample("llama3-8b", "dgx-h100-superpod", 16, 20, seed=3)
    odd = plans[0].model_copy(update={"offload_params": True, "zero_stage": 0})
    batch = _check(m, c, plans[1:4] + [odd] + plans[4:])
    want = batch_module._scalar(m, c, odd, False)
    for f in dataclasses.fields(Estimates):
        assert _bits(getattr(batch, f.name)[3:4]) == _bits(getattr(want, f.name)), f.name


def test_points_in_another_order_than_the_tables(monkeypatch):
    """Points handed over in an order other than the tables' (which _points matches, so
    the plans index the tables directly) are looked up in the tables: same answers."""
    m, c, plans = _sample("llama3-8b", "dgx-h100-superpod", 16, 60, seed=6)
    direct = evaluate_many(m, c, plans)
    real = batch_module._points

    def shuffled_points(*args):
        q, points = real(*args)
        perm = list(range(len(points)))
        random.Random(1).shuffle(perm)  # outers interleaved: not an order the tables give
        where = np.argsort(perm)
        assert len({points[perm[0]][0], points[perm[1]][0], points[perm[2]][0]}) > 1
        return np.where(q >= 0, where[q], -1), [points[i] for i in perm]

    monkeypatch.setattr(batch_module, "_points", shuffled_points)
    looked_up = evaluate_many(m, c, plans)
    for f in dataclasses.fields(Estimates):
        assert _bits(getattr(looked_up, f.name)) == _bits(getattr(direct, f.name)), f.name


def test_evaluate_many_mixed_list_equals_evaluate():
    """One shuffled list mixing settings (dtype, attention), TP exchanges (rs_ag without
    sp: its own table), per-type recomputation, sp at tp=1, placements with and without a
    domain and plans outside the tables: every entry equals planner.evaluate on its plan."""
    m, c, plans = _sample("mixtral-8x7b", "dgx-h100-superpod", 32, 60, seed=5)
    rng = random.Random(7)
    mixed = []
    for i, p in enumerate(plans):
        update: dict = {}
        if i % 5 == 1:
            update["dtype"] = "fp8"
        if i % 7 == 2:
            update["attention"] = "standard"
        if i % 4 == 3 and not p.sequence_parallel:
            update["tp_comm"] = "rs_ag"
        if i % 6 == 4:
            update["recompute"] = {"dense": "full", "moe": "selective"}
        if i % 9 == 5:
            update["placement"] = {"order": list(p.placement.order)}  # no domain given
        if i % 11 == 6:
            update["dp"] = p.dp * 2  # more GPUs than the cluster has
        mixed.append(p.model_validate({**p.to_dict(), **update}) if update else p)
    mixed.append(mixed[0].model_copy(update={"tp": 1, "sequence_parallel": True,
                                             "tp_comm": "rs_ag", "dp": mixed[0].dp * mixed[0].tp}))
    rng.shuffle(mixed)
    batch = _check(m, c, mixed)
    many = planner.evaluate_many(m, c, mixed)  # the public entry point, the same arrays
    assert np.array_equal(many.feasible, batch.feasible)
    assert np.array_equal(many.iteration_time_s, batch.iteration_time_s, equal_nan=True)
    assert batch.feasible.any() and not batch.costable.all()


def test_structural_rules_run_once_per_structure(monkeypatch):
    """A list of plans that differ only in ZeRO stage, sp and recomputation runs the
    structural rules once per degrees (not per plan); the answers still equal evaluate."""
    m = load_model("llama3-8b")
    c = load_cluster("dgx-h100-superpod", 16)
    space = SearchSpace(m, c, model_defaults(m), {}, SpaceOptions(max_microbatch=2))
    outers = space.outers[:6]
    plans = [space.plan(o, d, i) for o, d, i in space if o in outers]
    random.Random(4).shuffle(plans)
    calls = []

    def counted(*args, **kwargs):
        calls.append(args[2])
        return check_structure(*args, **kwargs)

    monkeypatch.setattr(batch_module, "check_structure", counted)
    _check(m, c, plans)
    structures = {tuple(getattr(p, f) for f in batch_module.STRUCTURE) for p in plans}
    assert len(calls) == len(structures) < len(plans) / 4


class _Reads:
    """A plan that records which of its fields are read."""

    def __init__(self, plan, seen: set):
        object.__setattr__(self, "_plan", plan)
        object.__setattr__(self, "_seen", seen)

    def __getattr__(self, name):
        plan = self.__dict__["_plan"]
        if name in type(plan).model_fields:
            self.__dict__["_seen"].add(name)
            return getattr(plan, name)
        attr = getattr(type(plan), name)  # derived: read through the recorder too
        if isinstance(attr, property):
            return attr.fget(self)
        return types.MethodType(attr, self) if inspect.isfunction(attr) else getattr(plan, name)


@pytest.mark.parametrize("model,gpus", [("llama3-8b", 16), ("mixtral-8x7b", 32)])
def test_structural_rules_read_only_the_structural_key(model, gpus):
    """check_structure reads the settings, the STRUCTURE fields and (for combined 1F1B
    only) the recomputation: the key evaluate_many checks it once per."""
    m, c, plans = _sample(model, "dgx-h100-superpod", gpus, 80, seed=2)
    allowed = set(batch_module.STRUCTURE) | set(batch_module.SETTINGS)
    for overlap in (False, True):
        seen: set = set()
        for p in plans:
            p = p.model_copy(update={"overlap_moe_ep_comm": overlap})
            check_structure(m, c, _Reads(p, seen))
        assert seen - allowed <= ({"recompute"} if overlap else set()), seen - allowed


def test_evaluate_many_pauses_the_collector(monkeypatch):
    """The garbage collector is off while the plans are read (and on again after)."""
    m, c, plans = _sample("llama3-8b", "dgx-h100-superpod", 16, 20, seed=1)
    states = []
    real = batch_module._groups

    def spy(*args):
        states.append(gc.isenabled())
        return real(*args)

    monkeypatch.setattr(batch_module, "_groups", spy)
    assert gc.isenabled()
    evaluate_many(m, c, plans)
    assert states == [False] and gc.isenabled()


def test_exposure_pieces_reproduce_overlapped_s():
    rng = random.Random(3)
    for _ in range(500):
        c, w, k = rng.uniform(0, 2), rng.uniform(0, 2), rng.uniform(0, 0.5)
        layers = rng.randint(1, 40)
        pieces = max(a * c + b * w for a, b in exposure_pieces(layers, k))
        assert pieces == pytest.approx(overlapped_s(c, w, layers, True, k), abs=1e-12)


def test_iteration_time_uses_the_schedule_bubble():
    stage = np.array([2.0, 3.0, 2.5])
    counts = np.array([1, 6, 1])
    for pp, v in ((8, 1), (8, 2), (8, 4)):
        t = iteration_time_s(16, pp, v, stage, counts, np.array([0.1, 0.2, 0.3]))
        mean = float(counts @ stage) / pp
        assert t == pytest.approx(16 * 3.0 + bubble_factor(pp, v) * mean + 0.3)
    # arrays of plans at once: one row per plan
    many = iteration_time_s(np.array([16, 4]), np.array([8, 8]), np.array([1, 2]),
                            np.stack([stage, stage]), np.stack([counts, counts]),
                            np.zeros((2, 3)), axis=1)
    assert many[1] == pytest.approx(4 * 3.0 + 3.5 * float(counts @ stage) / 8)


def _bits(a: np.ndarray) -> bytes:
    """The bytes of an array of floats or flags: equal only if bit for bit equal."""
    return np.ascontiguousarray(a).tobytes()


#: Changes after which no table holds a plan (the scalar evaluator answers): more GPUs than
#: the cluster has; tp=3, which divides none of the instances' head counts (4, 8, 16); a
#: one-GPU domain, which fills no domain level of two GPUs or more.
_BREAKS = ("dp", "tp", "domain")


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(inst=st.one_of(instances(max_gpus=8), moe_instances(max_gpus=4),
                      offload_instances(max_gpus=8)), data=st.data())
def test_list_path_equals_the_columnar_path_bit_for_bit(inst, data):
    """evaluate_many on a shuffled list of random plans mixing settings (the space's own,
    fp8, standard attention, the defaults of three frameworks), plans feasible and not,
    and plans no table holds: each entry is, bit for bit, the columnar path's answer on the
    whole space of its settings (evaluate_columns over inner_columns) or, outside every
    table, the scalar evaluator's (batch._scalar)."""
    space = inst[0]
    m, c = space.model, space.cluster
    bases = [space.base, {**space.base, "dtype": "fp8"},
             {**space.base, "attention": "standard"}]
    bases += [framework_defaults(load_framework(f), space.base, set())
              for f in ("megatron-core", "torchtitan", "deepspeed")]
    chosen = data.draw(st.lists(st.sampled_from(range(len(bases))), min_size=2, max_size=3,
                                unique=True), label="settings")
    plans: list[Plan] = []
    want: list[Estimates] = []
    for b in chosen:
        tb = build_tables(SearchSpace(m, c, bases[b], space.fixed, space.options))
        q, rc, sp, z = inner_columns(tb)
        if not len(q):
            continue
        whole = evaluate_columns(tb, q, rc, sp, z)
        rng = random.Random(data.draw(st.integers(0, 2**32 - 1), label="seed"))
        for i in rng.choices(range(len(q)), k=data.draw(st.integers(1, 300), label="count")):
            plans.append(tb.plan(int(q[i]), tuple(int(x) for x in rc[i]), int(sp[i]),
                                 int(z[i])))
            want.append(whole.take(np.array([i])))
    if plans:
        for p in data.draw(st.lists(st.sampled_from(plans), max_size=6), label="broken"):
            how = data.draw(st.sampled_from(_BREAKS))
            update = ({"dp": p.dp * 2} if how == "dp" else {"tp": 3} if how == "tp" else
                      {"placement": {"order": list(p.placement.order),
                                     "domain": dict.fromkeys(("tp", "cp", "dp", "pp"), 1)}})
            bad = Plan.model_validate({**p.to_dict(), **update})
            plans.append(bad)
            want.append(batch_module._scalar(m, c, bad, False))
    order = data.draw(st.permutations(range(len(plans))), label="order")
    got = evaluate_many(m, c, [plans[i] for i in order])
    for f in dataclasses.fields(Estimates):
        expected = np.concatenate([getattr(want[i], f.name) for i in order]) if order \
            else np.zeros(0)
        assert _bits(getattr(got, f.name).astype(expected.dtype)) == _bits(expected), f.name


@given(st.lists(st.integers(0, 40), max_size=60) | st.lists(st.integers(0, 10**12), max_size=60))
def test_dense_codes_number_keys_by_first_appearance(keys):
    """_dense (a scatter-min on a small range, a sort on a large one) and _codes number
    keys as a dict numbers them as they first appear."""
    seen: dict[int, int] = {}
    want = [seen.setdefault(k, len(seen)) for k in keys]
    firsts = [keys.index(k) for k in seen]
    codes, at = batch_module._dense(np.array(keys, np.int64))
    assert codes.tolist() == want and at.tolist() == firsts
    codes, values, at = batch_module._codes(keys)
    assert codes.tolist() == want and values == list(seen) and at.tolist() == firsts
