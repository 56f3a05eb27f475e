"""Solve time against brute force over the same search space (three README cases).

    python benchmarks/bench_solve.py                 # all cases, exhaustive time-boxed
    python benchmarks/bench_solve.py --case 70b --exhaustive-limit 0   # full brute force
    python benchmarks/bench_solve.py --exhaustive-limit 0 --repeats 3   # spread over 3 runs

For each case: the size of the search space, the CP-SAT and MILP wall times (tabulating
the cost model, presolve, model build, solve and proof; CP-SAT twice: the first solve of
the process pays for importing OR-Tools and filling the cost model's caches, the second is
what a sweep or a service sees), and the brute-force time: every
plan of the space through the vectorized evaluator (``formulations/train/exhaustive.py``,
``planner.costmodel.train.batch``), the best re-evaluated exactly, and the speed ratio. Brute
force runs for at most ``--exhaustive-limit`` seconds; beyond that its time is
extrapolated from the measured rate (marked ``~``), and the best plan it saw so far is not
a proof. ``benchmarks/bench_evaluator.py`` gives the scalar evaluator's rate, for
comparison. The first CP-SAT solve is one run by nature; the second CP-SAT solve, MILP and
brute force are each repeated ``--repeats`` times and given as median, min and max, after a
line naming the machine. Run on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import time

from _timing import add_repeats, machine, machine_line, spread
from formulations.train.exhaustive import run_exhaustive
from planner.orchestration.train import build_space, solve
from planner.specs.loaders import load_cluster, load_model

CASES = {
    "70b": dict(model="llama3-70b", cluster="dgx-h100-superpod", gpus=1024, base={}),
    "175b": dict(model="gpt3-175b", cluster="dgx-a100-superpod", gpus=1024, base={}),
    # 16M tokens per iteration: 2048 sequences of 8192 tokens
    "405b": dict(model="llama3-405b", cluster="dgx-h100-superpod", gpus=16384,
                 base={"global_batch_size": 2048, "seq_len": 8192}),
}


def plan_text(p) -> str:
    return (f"TP{p.tp} CP{p.cp} PP{p.pp} DP{p.dp} v{p.virtual_stages} mb{p.microbatch_size} "
            f"ZeRO-{p.zero_stage} recompute={p.recompute} sp={p.sequence_parallel}")


def run_case(name: str, exhaustive_limit_s: float, repeats: int) -> dict:
    spec = CASES[name]
    model = load_model(spec["model"])
    cluster = load_cluster(spec["cluster"], spec["gpus"])
    row: dict = {"case": name, "model": model.name, "cluster": cluster.name,
                 "gpus": cluster.num_gpus}
    for backend in ("cpsat", "cpsat_warm", "milp"):
        walls, statuses, times = [], set(), set()
        for _ in range(1 if backend == "cpsat" else repeats):
            t0 = time.perf_counter()
            res = solve(model, cluster, base=spec["base"],
                        backend=backend.removesuffix("_warm"))
            walls.append(time.perf_counter() - t0)
            statuses.add(res.status)
            times.add(res.best.estimate.iteration_time_s)
        row[f"{backend}_s"] = spread(walls)
        row[f"{backend}_status"] = "/".join(sorted(statuses))
        row[f"{backend}_time_s"] = min(times)
        row[f"{backend}_times_agree"] = len(times) == 1
        row["space_size"] = res.space_size
        if backend == "cpsat":
            row["plan"] = plan_text(res.best.plan)
            row["mfu"] = res.best.estimate.mfu
            row["domain"] = res.best.plan.placement.domain if res.best.plan.placement else None
    space = build_space(model, cluster, None, spec["base"])
    limit = exhaustive_limit_s if exhaustive_limit_s > 0 else 1e9
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        ex = run_exhaustive(space, "time", 1, time_limit_s=limit)
        wall = time.perf_counter() - t0
        done = ex.stats.evaluations
        complete = ex.status != "time_limit"
        walls.append(wall if complete else wall * row["space_size"] / done)
    row["exhaustive_evaluated"] = done
    row["exhaustive_complete"] = complete
    row["exhaustive_s"] = spread(walls)
    if row["exhaustive_complete"] and ex.candidates:
        row["exhaustive_time_s"] = ex.candidates[0].estimate.iteration_time_s
    row["speedup_vs_cpsat"] = row["exhaustive_s"]["median"] / row["cpsat_warm_s"]["median"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=sorted(CASES), action="append")
    ap.add_argument("--exhaustive-limit", type=float, default=120.0,
                    help="seconds of brute force per case before extrapolating (0: no limit)")
    add_repeats(ap)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = [run_case(c, args.exhaustive_limit, args.repeats) for c in (args.case or list(CASES))]
    if args.json:
        print(json.dumps({"machine": machine(), "rows": rows}, indent=2))
        return
    print(machine_line())
    print(f"Times: one run for the first CP-SAT solve; median (min-max) of {args.repeats} "
          "for the others.")
    print("| case | GPUs | plans in space | CP-SAT s (first, again) | MILP s | exhaustive s | "
          "speed-up | best plan | iteration s | MFU |")
    print("|---|---|---|---|---|---|---|---|---|---|")

    def cell(sp: dict, fmt: str = ".2f") -> str:
        if sp["repeats"] == 1:
            return f"{sp['median']:{fmt}}"
        return f"{sp['median']:{fmt}} ({sp['min']:{fmt}}-{sp['max']:{fmt}})"

    for r in rows:
        ex = cell(r["exhaustive_s"], ".1f") if r["exhaustive_complete"] else \
            f"~{cell(r['exhaustive_s'], '.0f')} ({r['exhaustive_evaluated']:,} evaluated)"
        print(f"| {r['model']} | {r['gpus']} | {r['space_size']:,} | "
              f"{cell(r['cpsat_s'])}, {cell(r['cpsat_warm_s'])} | "
              f"{cell(r['milp_s'])} | {ex} | {r['speedup_vs_cpsat']:.0f}x | {r['plan']} | "
              f"{r['cpsat_time_s']:.3f} | {r['mfu']:.1%} |")
        if r["exhaustive_complete"]:
            assert abs(r["exhaustive_time_s"] - r["cpsat_time_s"]) <= 1e-9 * r["cpsat_time_s"]


if __name__ == "__main__":
    main()
