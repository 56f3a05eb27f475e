"""Time to answer ``planner serve`` at 200 requests/s across the catalog's GPU types (the
README's serving table), against the brute force over the same tables.

    python benchmarks/bench_serve.py                    # both models
    python benchmarks/bench_serve.py --case llama3-70b
    python benchmarks/bench_serve.py --repeats 3        # each backend's solve 3 times

For each case: one cluster per GPU type of the catalog (mixed SKUs allowed across the
prefill and decode pools), ISL 2048, OSL 256, P99 TTFT 500 ms and TPOT 30 ms, minimum
$ per hour. Reported: the layouts tabulated and the time to tabulate them (the cost
model), then per backend the solve time and the optimum: CP-SAT and the MILP on the
tables after the exact dominance presolve (formulations.serve.search.presolve), the brute force
on every row of the same tables, every option of every pool. The answer's time is one run
by nature (the cost model's caches are cold only once per process); each backend's solve
time is min / median / max over ``--repeats`` runs. The first line names the machine. Run
on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import time

from _timing import add_repeats, machine_line, spread, timed
from formulations.serve.search import ServeProblem, presolve, solve
from formulations.serve.space import SCALE, ServeSpace, tables
from planner import catalog
from planner.orchestration.serve import _candidates, plan_serve
from planner.specs.loaders import load_cluster, load_model
from planner.specs.requests import engine_profile
from planner.specs.serve import ServeWorkload

CASES = {"llama3-70b": "llama3-70b", "mixtral-8x22b": "mixtral-8x22b"}
WORKLOAD = ServeWorkload(isl=2048, osl=256, rate_rps=200, ttft_ms=500, tpot_ms=30)


def catalog_clusters() -> list:
    """One cluster per GPU type: the first catalog cluster (by name) that has it."""
    seen = {}
    for name in catalog.names("clusters"):
        c = load_cluster(name)
        seen.setdefault(c.gpu.name, c)
    return list(seen.values())


def run_case(name: str, backends: list[str], repeats: int) -> dict:
    """``planner serve``'s answer first (a cold cost model: its time is the time to
    answer), then each backend on the same tables (tabulated again, from the warm cache)."""
    model, clusters = load_model(CASES[name]), catalog_clusters()
    engine = engine_profile(None)  # planner serve's default engine profile
    t0 = time.perf_counter()
    res = plan_serve(model, clusters, WORKLOAD, objective="cost", engine=engine)
    est = res.estimate
    out = {"case": name, "gpus": [c.gpu.name for c in clusters], "rows": res.solver["rows"],
           "answer_s": round(time.perf_counter() - t0, 2),
           "tables_s": round(res.solver["tables_s"], 2),
           "answer": {"gpus": est.num_gpus, "usd_per_hour": est.usd_per_hour,
                      "usd_per_million_tokens": est.usd_per_million_tokens,
                      "ttft_p99_ms": est.ttft_p99_ms, "tpot_p99_ms": est.tpot_p99_ms,
                      "feasible": est.feasible, "plan": res.plan.to_dict()},
           "backends": {}}
    tabs = tables(model, clusters, WORKLOAD, ServeSpace(), engine)
    for backend in backends:
        bests, walls = timed(lambda b=backend: _best(tabs, b), repeats)
        usd = sorted({b[1].objective / 1e6 if b else None for b in bests}, key=str)
        out["backends"][backend] = {  # a list only where the repeats disagree
            "solve_s": spread([round(w, 3) for w in walls]),
            "usd_per_hour": usd[0] if len(usd) == 1 else usd}
    return out


def _best(tabs, backend: str):
    """The cheapest optimal (problem, solution) over the answer's candidate pool sets."""
    best = None
    for mode, pools in _candidates(tabs):
        problem = ServeProblem(pools, "cost", round(WORKLOAD.rate_rps * SCALE))
        if backend != "exhaustive":  # the brute force sees every row
            problem = presolve(problem)
        sol = solve(problem, backend)
        if sol.status == "optimal" and (best is None or sol.objective < best[1].objective):
            best = (problem, sol)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=sorted(CASES), action="append")
    ap.add_argument("--backend", action="append", choices=["cpsat", "milp", "exhaustive"])
    add_repeats(ap)
    args = ap.parse_args()
    print(machine_line())
    for name in args.case or list(CASES):
        print(json.dumps(run_case(name, args.backend or ["cpsat", "milp", "exhaustive"],
                                  args.repeats), indent=1))


if __name__ == "__main__":
    main()
