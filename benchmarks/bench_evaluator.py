"""Plans per second: the scalar evaluator against the vectorized one, on one search space.

    python benchmarks/bench_evaluator.py                  # Llama 3 70B on 1024 H100
    python benchmarks/bench_evaluator.py --sample 5000 --json
    python benchmarks/bench_evaluator.py --repeats 3      # min / median / max of 3 runs

Three ways to cost plans of the same space, all through the same terms and composition
(planner/costmodel/compose.py):

- ``evaluate``: the scalar evaluator, one Plan at a time (a random sample of the space);
- ``evaluate_many(plans)``: a list of Plan objects (the same sample and a larger one);
- columnar: the whole space as index columns into its coefficient tables
  (``build_tables`` + ``inner_columns`` + ``evaluate_columns``), what the exhaustive
  backend runs; timed with and without tabulating.

The sample's answers are compared entry by entry (relative 1e-9). Each timing is taken
``--repeats`` times (the space is built once) and given as median, min and max, after a
line naming the machine. Run on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import random
import time

import numpy as np

from _timing import add_repeats, machine, machine_line, spread, spread_text
from planner.costmodel.train.batch import evaluate_columns, evaluate_many, inner_columns
from planner.costmodel.train.evaluator import evaluate
from planner.costmodel.train.tables import build_tables
from planner.orchestration.train import build_space
from planner.specs.loaders import load_cluster, load_model


def run(model_name: str, cluster_name: str, gpus: int, sample: int, seed: int,
        repeats: int) -> dict:
    model, cluster = load_model(model_name), load_cluster(cluster_name, gpus)
    space = build_space(model, cluster)
    row: dict = {"model": model.name, "cluster": cluster.name, "gpus": gpus,
                 "space_size": space.size()}
    walls: dict[str, list[float]] = {k: [] for k in TIMED}
    for _ in range(repeats):
        t0 = time.perf_counter()
        tb = build_tables(space)
        walls["tabulate_s"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        q, rc, sp, z = inner_columns(tb)
        est = evaluate_columns(tb, q, rc, sp, z)
        walls["columnar_s"].append(time.perf_counter() - t0)
    row["plans"] = len(q)
    row["feasible"] = int(est.feasible.sum())

    rng = random.Random(seed)
    idx = rng.sample(range(len(q)), min(sample, len(q)))
    plans = [tb.plan(int(q[i]), tuple(int(x) for x in rc[i]), int(sp[i]), int(z[i]))
             for i in idx]
    row["sample"] = len(plans)
    for _ in range(repeats):
        t0 = time.perf_counter()
        scalar = [evaluate(model, cluster, p) for p in plans]
        walls["evaluate_s"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        many = evaluate_many(model, cluster, plans)
        walls["evaluate_many_s"].append(time.perf_counter() - t0)
    times = np.array([e.iteration_time_s for e in scalar])
    row["max_rel_diff"] = float(np.max(np.abs(many.iteration_time_s - times) / times))
    assert row["max_rel_diff"] < 1e-9
    assert all(bool(a) == b.feasible for a, b in zip(many.feasible, scalar))
    assert np.allclose(est.iteration_time_s[idx], times, rtol=1e-9, atol=0)
    row.update({k: spread(v) for k, v in walls.items()})
    # rates per run, so that their spread is the runs' (not a ratio of medians)
    n = {"columnar_s": row["plans"], "evaluate_s": row["sample"],
         "evaluate_many_s": row["sample"]}
    for k, count in n.items():
        row[k.removesuffix("_s") + "_plans_per_s"] = spread([count / w for w in walls[k]])
    row["columnar_with_tables_plans_per_s"] = spread(
        [row["plans"] / (a + b) for a, b in zip(walls["columnar_s"], walls["tabulate_s"])])
    row["speedup_columnar"] = spread(
        [(row["plans"] / c) / (row["sample"] / e)
         for c, e in zip(walls["columnar_s"], walls["evaluate_s"])])
    return row


TIMED = ("tabulate_s", "columnar_s", "evaluate_s", "evaluate_many_s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama3-70b")
    ap.add_argument("--cluster", default="dgx-h100-superpod")
    ap.add_argument("--gpus", type=int, default=1024)
    ap.add_argument("--sample", type=int, default=3000,
                    help="plans evaluated one by one (and as a list)")
    ap.add_argument("--seed", type=int, default=0)
    add_repeats(ap)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    row = run(args.model, args.cluster, args.gpus, args.sample, args.seed, args.repeats)
    if args.json:
        print(json.dumps({"machine": machine(), **row}, indent=2))
        return

    def rate(key: str) -> str:
        return spread_text(row[key], "plans/s", ",.0f")

    print(machine_line())
    print(f"{row['model']} on {row['gpus']} x {row['cluster']}: {row['space_size']:,} plans "
          f"({row['feasible']:,} fit); {args.repeats} run(s) of each timing")
    print(f"  evaluate, one plan at a time     {rate('evaluate_plans_per_s')} "
          f"({row['sample']:,} plans)")
    print(f"  evaluate_many, list of Plans     {rate('evaluate_many_plans_per_s')}")
    print(f"  columnar, whole space            {rate('columnar_plans_per_s')}; "
          f"{spread_text(row['columnar_s'])}")
    print(f"  columnar with tabulating         {rate('columnar_with_tables_plans_per_s')}; "
          f"tabulating {spread_text(row['tabulate_s'])}")
    print(f"  speed-up (columnar / scalar)     {spread_text(row['speedup_columnar'], 'x', ',.0f')}"
          f"; max relative difference {row['max_rel_diff']:.1e}")


if __name__ == "__main__":
    main()
