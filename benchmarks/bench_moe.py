"""Solve time of MoE models on 2048 GPUs (the README's MoE table).

    python benchmarks/bench_moe.py                   # all cases, CP-SAT and MILP
    python benchmarks/bench_moe.py --case mixtral-8x22b --backend cpsat
    python benchmarks/bench_moe.py --repeats 3      # min / median / max of 3 solves each

For each case: the size of the search space (with ep, expert TP and, for long
sequences, the context-parallel exchange), the wall time of the whole solve (tabulating
the cost model, bound presolve, model build, solve and optimality proof) and the plan.
Each solve is repeated ``--repeats`` times and its wall time given as median, min and max
(the process's first solve also pays for importing the solvers), after a line naming the
machine. Run on an otherwise idle machine; the figures in the README come from this script.
"""

from __future__ import annotations

import argparse
import json

from _timing import add_repeats, machine, machine_line, spread, spread_text, timed
from planner.orchestration.train import solve
from planner.specs.loaders import load_cluster, load_model

CASES = {
    "mixtral-8x22b": dict(model="mixtral-8x22b", cluster="dgx-h100-superpod", gpus=2048,
                          base={}),
    "deepseek-v3": dict(model="deepseek-v3", cluster="dgx-h100-superpod", gpus=2048,
                        base={"global_batch_size": 4096}),
    "qwen2-57b-32k": dict(model="qwen2-57b-a14b", cluster="dgx-h100-superpod", gpus=2048,
                          base={"seq_len": 32768, "global_batch_size": 256}),
}


def plan_text(p) -> str:
    rc = p.recompute if isinstance(p.recompute, str) else ",".join(
        f"{k}:{v}" for k, v in p.recompute.items())
    return (f"TP{p.tp} CP{p.cp}({p.cp_comm}) PP{p.pp} DP{p.dp} EP{p.ep} ETP{p.etp} "
            f"v{p.virtual_stages} mb{p.microbatch_size} ZeRO-{p.zero_stage} recompute={rc} "
            f"sp={p.sequence_parallel}")


def run_case(name: str, backends: list[str], time_limit_s: float, repeats: int) -> dict:
    spec = CASES[name]
    model = load_model(spec["model"])
    cluster = load_cluster(spec["cluster"], spec["gpus"])
    row: dict = {"case": name, "model": model.name, "gpus": cluster.num_gpus}
    for backend in backends:
        kw = dict(base=spec["base"], backend=backend, time_limit_s=time_limit_s)
        results, walls = timed(lambda kw=kw: solve(model, cluster, **kw), repeats)
        res = results[-1]
        row[f"{backend}_s"] = spread(walls)
        row[f"{backend}_status"] = sorted({r.status for r in results})
        row[f"{backend}_iteration_s"] = sorted({r.best.estimate.iteration_time_s
                                                for r in results})
        row["space_size"] = res.space_size
        row["plan"] = plan_text(res.best.plan)
        row["mfu"] = res.best.estimate.mfu
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=sorted(CASES), action="append")
    ap.add_argument("--backend", choices=["cpsat", "milp"], action="append")
    ap.add_argument("--time-limit", type=float, default=600.0)
    add_repeats(ap)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = [run_case(c, args.backend or ["cpsat", "milp"], args.time_limit, args.repeats)
            for c in (args.case or list(CASES))]
    if args.json:
        print(json.dumps({"machine": machine(), "rows": rows}, indent=2))
        return
    print(machine_line())
    for r in rows:
        times = ", ".join(f"{b} {spread_text(r[b + '_s'])} ({'/'.join(r[b + '_status'])})"
                          for b in ("cpsat", "milp") if b + "_s" in r)
        print(f"{r['case']} on {r['gpus']} GPUs: {r['space_size']:,} plans; {times}")
        print(f"  {r['plan']}  MFU {r['mfu']:.1%}")


if __name__ == "__main__":
    main()
