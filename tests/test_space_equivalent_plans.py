"""The search space holds each plan once: sequence parallelism shards the norms' activations
over the TP group, so at tp 1 it is the same plan as without it (formulations/train/space.py)
and the space offers it only where tp > 1; the list path's space does the same."""

from __future__ import annotations

from planner import api
from planner.costmodel.train.batch import evaluate_many
from planner.orchestration.train import build_space
from planner.specs.loaders import load_cluster, load_model
from planner.specs.plan import Plan


def test_sequence_parallelism_only_where_tp_shards():
    space = build_space(load_model("llama3-8b"), load_cluster("dgx-h100-superpod", 16))
    ones = [o for o in space.outers if o.tp == 1]
    many = [o for o in space.outers if o.tp > 1]
    assert ones and many
    assert all(space.sp_options(o) == [False] for o in ones)
    assert all(space.sp_options(o) == [False, True] for o in many)


def test_sequence_parallelism_at_tp1_costs_as_without_it():
    model, cluster = load_model("llama3-8b"), load_cluster("dgx-h100-superpod", 8)
    base = dict(dp=8, global_batch_size=64, microbatch_size=1, seq_len=8192, recompute="full")
    on, off = Plan(**base, sequence_parallel=True), Plan(**base, sequence_parallel=False)
    one = [api.evaluate(model, cluster, p) for p in (on, off)]
    assert one[0].iteration_time_s == one[1].iteration_time_s
    assert one[0].memory_per_gpu_bytes == one[1].memory_per_gpu_bytes
    many = evaluate_many(model, cluster, [on, off])
    assert list(many.iteration_time_s) == [e.iteration_time_s for e in one]
