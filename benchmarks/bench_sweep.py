"""Points per second of a what-if sweep, local process pool against Ray (the README's
sweep benchmark).

    python benchmarks/bench_sweep.py                       # 1,000 points, both backends
    python benchmarks/bench_sweep.py --every 7             # 143 points across the grid
    python benchmarks/bench_sweep.py --every 7 --repeats 3 # each backend's sweep 3 times

The grid: Llama 3 70B on 64 to 4096 H100 (the catalog's DGX H100 SuperPOD, 8 counts) x HBM
capacity x HBM bandwidth x network bandwidth (5 factors each) = 1,000 points, each a full
CP-SAT solve (proven optimal unless the time limit, --time-limit, stops it; the statuses
are printed). Both backends get the same number of worker processes (--workers, default
one per CPU); Ray's start-up is timed apart (once per backend). Each backend's sweep runs
``--repeats`` times; its wall time and rate are given as min / median / max, and the output
starts with the machine. Every table, across repeats and backends, must be identical.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter

from _timing import add_repeats, machine, machine_line, spread, timed
from planner.sweep import expand, run_sweep, sweep_from_dict

GPUS = [64, 128, 256, 512, 768, 1024, 2048, 4096]
FACTORS = {"hbm_capacity": [0.5, 0.75, 1.0, 1.5, 2.0],
           "hbm_bandwidth": [0.5, 0.75, 1.0, 1.5, 2.0],
           "network_bandwidth": [0.25, 0.5, 1.0, 2.0, 4.0]}


def grid(time_limit_s: float) -> dict:
    return {"name": "bench", "base": {"model": "llama3-70b", "cluster": "dgx-h100-superpod",
                                      "time_limit_s": time_limit_s},
            "axes": {"gpus": GPUS, **FACTORS}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=None, help="only the first N points")
    ap.add_argument("--every", type=int, default=1, help="every k-th point of the grid (a "
                    "reduced run that still spans every GPU count and factor)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--time-limit", type=float, default=60.0, help="per solve, seconds")
    ap.add_argument("--backends", default="local,ray")
    add_repeats(ap)
    args = ap.parse_args()
    points = expand(sweep_from_dict(grid(args.time_limit), "bench"))[:: args.every][: args.points]
    print(machine_line(), flush=True)
    out: dict = {"machine": machine(), "points": len(points), "workers": args.workers,
                 "cpus": os.cpu_count()}
    tables = {}
    for backend in args.backends.split(","):
        if backend == "ray":
            import ray

            t0 = time.perf_counter()
            ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
            out["ray_init_s"] = time.perf_counter() - t0
        try:
            runs, walls = timed(lambda b=backend: run_sweep(points, backend=b,
                                                            workers=args.workers), args.repeats)
        finally:
            if backend == "ray":
                ray.shutdown()
        tables[backend] = runs
        rows = runs[-1]
        out[backend] = {"wall_s": spread([round(w, 2) for w in walls]),
                        "points_per_s": spread([round(len(points) / w, 3) for w in walls]),
                        "status": dict(Counter(r["status"] for r in rows))}
        print(json.dumps({backend: out[backend]}), flush=True)
    every = [t for runs in tables.values() for t in runs]
    out["identical_tables"] = all(t == every[0] for t in every)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
