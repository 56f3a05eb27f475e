"""Exact embedding-table sharding at scale: a 500-table DLRM on 128 GPUs (zionex-128).

    python benchmarks/bench_dlrm.py                 # 500 tables, 128 GPUs, CP-SAT
    python benchmarks/bench_dlrm.py --tables 200 --backend milp --json
    python benchmarks/bench_dlrm.py --tables 5000 --gpus 1024 --time-limit 60   # no exact model
    python benchmarks/bench_dlrm.py --time-limit 10 --repeats 3   # the spread over 3 runs

The tables are drawn with a fixed seed (rows log-uniform from 1e3 to 5e7, dim 32/64/128,
pooling 1 to 60, some skew), as production models mix a few huge tables with many small
ones. Reported: set-up (building the integer model) and solve time, the proven optimum's
iteration time and samples/s, and beside it a TorchRec-style greedy partitioner (tables
sorted by size, largest first, each table-wise onto the least-loaded rank that still has
memory; torchrec/distributed/planner/partitioners.py, GreedyPerfPartitioner) evaluated by
the same evaluator. ``optimum_*`` is the plan returned: the proven optimum when
``status`` is ``optimal``, else the best plan found (``heuristic``: the model was too
large to build and the local search answered alone), with ``lower_bound_ms`` (the best of
CP-SAT's bound, the work bound and the rank-aggregated LP, formulations/dlrm/bound.py)
and ``bound_gap`` = (plan - bound) / plan. With ``--repeats N`` the whole run is repeated:
the times are given as min / median / max over the runs, and a result that differs between
runs (a time-limited solve may stop at another incumbent) as the list of its values. The
machine (CPU, cores, load average, Python, OR-Tools) is printed first. Run on an idle
machine.
"""

from __future__ import annotations

import argparse
import json
import random
import time

from _timing import add_repeats, machine, machine_line, merge_runs, spread_text
from formulations.dlrm.search import solve_sharding, torchrec_greedy
from planner.costmodel.dlrm.model import dense_cost, table_options, usable_hbm_bytes
from planner.costmodel.dlrm.evaluate import evaluate_dlrm
from planner.specs.dlrm import DLRMPlan, DLRMSpec
from planner.specs.loaders import load_cluster


def model(n: int, seed: int) -> DLRMSpec:
    rng = random.Random(seed)
    tables = [dict(name=f"t{i}", rows=int(10 ** rng.uniform(3, 7.7)),
                   dim=rng.choice([32, 64, 64, 128]), pooling=rng.choice([1, 2, 5, 10, 20, 60]),
                   skew=rng.choice([0.0, 0.0, 0.2])) for i in range(n)]
    return DLRMSpec(name=f"synthetic-{n}", tables=tables, dense_features=256,
                    bottom_mlp=[512, 256, 128], top_mlp=[1024, 512, 256, 1],
                    interaction={"kind": "none"}, top_input_dim=1024,
                    global_batch_size=65536, emb_dtype="fp16")


def greedy(m: DLRMSpec, c) -> DLRMPlan:
    """TorchRec's greedy partitioner (formulations/dlrm/greedy.py), the one baseline the
    tests and the README use too."""
    plan = torchrec_greedy(m, c)
    if plan is None:
        raise SystemExit(f"{m.name}: TorchRec's greedy partitioner places no plan on {c.name}")
    return plan


def sparse_s(est) -> float:
    ph = est.phases_s
    return ph["lookup_fwd"] + ph["dist_fwd"] + ph["dist_bwd"] + ph["lookup_bwd"]


def run(n: int, gpus: int, backend: str, seed: int, time_limit: float) -> dict:
    m, c = model(n, seed), load_cluster("zionex-128", gpus)
    t0 = time.perf_counter()
    g = evaluate_dlrm(m, c, greedy(m, c))
    t_greedy = time.perf_counter() - t0
    s = solve_sharding(m, c, backend, time_limit)
    kinds: dict[str, int] = {}
    for p in s.plan.tables:
        kinds[p.sharding_type] = kinds.get(p.sharding_type, 0) + p.copies
    return {"tables": n, "gpus": gpus, "backend": backend, "status": s.status,
            "solve_time_s": round(s.solve_time_s, 2),
            "optimum_iteration_ms": round(s.estimate.iteration_time_s * 1e3, 3),
            "optimum_sparse_ms": round(sparse_s(s.estimate) * 1e3, 3),
            "optimum_samples_per_s": round(s.estimate.samples_per_s),
            "lower_bound_ms": round(s.bound_s * 1e3, 3) if s.bound_s else None,
            "bound_gap": s.optimality_gap, "sharding_types": kinds,
            "greedy_iteration_ms": round(g.iteration_time_s * 1e3, 3),
            "greedy_sparse_ms": round(sparse_s(g) * 1e3, 3), "greedy_feasible": g.feasible,
            "greedy_time_s": round(t_greedy, 3),
            "greedy_vs_optimum": round(g.iteration_time_s / s.estimate.iteration_time_s, 3)}


TIMED = ("solve_time_s", "greedy_time_s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", type=int, default=500)
    ap.add_argument("--gpus", type=int, default=128)
    ap.add_argument("--backend", default="cpsat", choices=["cpsat", "milp"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-limit", type=float, default=60.0)
    add_repeats(ap)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    row = merge_runs([run(a.tables, a.gpus, a.backend, a.seed, a.time_limit)
                      for _ in range(a.repeats)], TIMED)
    if a.json:
        print(json.dumps({"machine": machine(), **row}, indent=2))
        return
    print(machine_line())
    print("\n".join(f"{k:>24}: {spread_text(v, fmt='.3f') if k in TIMED else v}"
                    for k, v in row.items()))


if __name__ == "__main__":
    main()
