"""Plans per second: the scalar evaluator against the vectorized one, on one search space.

    python benchmarks/bench_evaluator.py                  # Llama 3 70B on 1024 H100
    python benchmarks/bench_evaluator.py --sample 5000 --json

Three ways to cost plans of the same space, all through the same terms and composition
(planner/costmodel/compose.py):

- ``evaluate``: the scalar evaluator, one Plan at a time (a random sample of the space);
- ``evaluate_many(plans)``: a list of Plan objects (the same sample and a larger one);
- columnar: the whole space as index columns into its coefficient tables
  (``build_tables`` + ``inner_columns`` + ``evaluate_columns``), what the exhaustive
  backend runs; timed with and without tabulating.

The sample's answers are compared entry by entry (relative 1e-9). Run on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import random
import time

import numpy as np

from planner.costmodel.train.batch import evaluate_columns, evaluate_many, inner_columns
from planner.costmodel.train.evaluator import evaluate
from planner.costmodel.train.tables import build_tables
from planner.orchestration.train import build_space
from planner.specs.loaders import load_cluster, load_model


def run(model_name: str, cluster_name: str, gpus: int, sample: int, seed: int) -> dict:
    model, cluster = load_model(model_name), load_cluster(cluster_name, gpus)
    space = build_space(model, cluster)
    row: dict = {"model": model.name, "cluster": cluster.name, "gpus": gpus,
                 "space_size": space.size()}
    t0 = time.perf_counter()
    tb = build_tables(space)
    row["tabulate_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    q, rc, sp, z = inner_columns(tb)
    est = evaluate_columns(tb, q, rc, sp, z)
    cols_s = time.perf_counter() - t0
    row["columnar_s"] = cols_s
    row["columnar_plans_per_s"] = len(q) / cols_s
    row["columnar_with_tables_plans_per_s"] = len(q) / (cols_s + row["tabulate_s"])
    row["feasible"] = int(est.feasible.sum())

    rng = random.Random(seed)
    idx = rng.sample(range(len(q)), min(sample, len(q)))
    plans = [tb.plan(int(q[i]), tuple(int(x) for x in rc[i]), int(sp[i]), int(z[i]))
             for i in idx]
    t0 = time.perf_counter()
    scalar = [evaluate(model, cluster, p) for p in plans]
    row["evaluate_plans_per_s"] = len(plans) / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    many = evaluate_many(model, cluster, plans)
    row["evaluate_many_list_plans_per_s"] = len(plans) / (time.perf_counter() - t0)
    times = np.array([e.iteration_time_s for e in scalar])
    row["max_rel_diff"] = float(np.max(np.abs(many.iteration_time_s - times) / times))
    assert row["max_rel_diff"] < 1e-9
    assert all(bool(a) == b.feasible for a, b in zip(many.feasible, scalar))
    assert np.allclose(est.iteration_time_s[idx], times, rtol=1e-9, atol=0)
    row["speedup_columnar"] = row["columnar_plans_per_s"] / row["evaluate_plans_per_s"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama3-70b")
    ap.add_argument("--cluster", default="dgx-h100-superpod")
    ap.add_argument("--gpus", type=int, default=1024)
    ap.add_argument("--sample", type=int, default=3000,
                    help="plans evaluated one by one (and as a list)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    row = run(args.model, args.cluster, args.gpus, args.sample, args.seed)
    if args.json:
        print(json.dumps(row, indent=2))
        return
    print(f"{row['model']} on {row['gpus']} x {row['cluster']}: {row['space_size']:,} plans "
          f"({row['feasible']:,} fit)")
    print(f"  evaluate, one plan at a time     {row['evaluate_plans_per_s']:>12,.0f} plans/s")
    print(f"  evaluate_many, list of Plans     {row['evaluate_many_list_plans_per_s']:>12,.0f} "
          "plans/s")
    print(f"  columnar, whole space            {row['columnar_plans_per_s']:>12,.0f} plans/s "
          f"({row['columnar_s']:.2f} s; {row['columnar_with_tables_plans_per_s']:,.0f} plans/s "
          f"with the {row['tabulate_s']:.2f} s of tabulating)")
    print(f"  speed-up (columnar / scalar)     {row['speedup_columnar']:>12,.0f}x; "
          f"max relative difference {row['max_rel_diff']:.1e}")


if __name__ == "__main__":
    main()
