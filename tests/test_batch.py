"""The vectorized evaluator equals the scalar one plan by plan, and the composition is the
one the linear rows and the bounds use."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from formulations.train.space import SearchSpace, SpaceOptions
from planner.costmodel.train.batch import evaluate_many
from planner.costmodel.compose import exposure_pieces, iteration_time_s, overlapped_s
from planner.costmodel.train.evaluator import evaluate
from planner.costmodel.pipeline import bubble_factor
from planner.specs.loaders import load_cluster, load_model
from planner.specs.plan_base import model_defaults

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
