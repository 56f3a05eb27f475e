"""UVM caching: how few GPUs train DLRM-A when tables may live in host memory.

    python benchmarks/bench_dlrm_uvm.py            # 16, 24, 32 A100-80GB, 30 s each
    python benchmarks/bench_dlrm_uvm.py --gpus 16 --json
    python benchmarks/bench_dlrm_uvm.py --gpus 16 --repeats 3   # the solve time's spread

DLRM-A (MAD-Max Table II: 4,096 tables of 2.08M x 94 fp16 rows, 1.6 TB with the Adagrad
state) on the catalog's DGX A100 SuperPOD, whose nodes have 256 GiB of host DDR4 per GPU
over PCIe Gen4 (hardware_catalog/clusters/dgx-a100-superpod.yaml). For each GPU count:
the best plan with every table in HBM, and with table-wise tables allowed in host memory
behind an HBM cache (TorchRec ``fused_uvm_caching``, 20 % of the rows cached, hit rate =
load factor), each from ``solve_sharding`` (CP-SAT, proven optimal unless ``status`` says
time_limit, then ``bound_gap`` to the best bound). ``solve_time_s`` is min / median / max
over ``--repeats`` solves (a result that differs between them is listed per run), after a
line naming the machine. Run on an idle machine.
"""

from __future__ import annotations

import argparse
import json

from _timing import add_repeats, machine, machine_line, merge_runs, spread_text
from formulations.dlrm.search import solve_sharding
from planner.errors import InfeasibleError
from planner.specs.loaders import load_cluster, load_model


def run(gpus: int, time_limit: float) -> list[dict]:
    m, c = load_model("dlrm-a"), load_cluster("dgx-a100-superpod", gpus)
    rows = []
    for host in (False, True):
        cc = c if host else c.model_copy(update={"offload": None})
        row: dict = {"gpus": gpus, "host_tier": host}
        try:
            s = solve_sharding(m, cc, "cpsat", time_limit)
        except InfeasibleError as e:
            rows.append({**row, "feasible": False, "why": e.reasons[0]})
            continue
        uvm = sum(p.copies for p in s.plan.tables if p.compute_kernel == "fused_uvm_caching")
        est = s.estimate
        rows.append({**row, "feasible": True, "samples_per_s": round(est.samples_per_s),
                     "iteration_ms": round(est.iteration_time_s * 1e3, 2),
                     "tables_in_host_memory": uvm,
                     "hbm_gib": round(est.memory_per_gpu_gib, 1),
                     "host_gib": round(max(est.per_rank["host_memory_gib"]), 1),
                     "status": s.status, "bound_gap": s.optimality_gap,
                     "solve_time_s": round(s.solve_time_s, 2)})
    return rows


TIMED = ("solve_time_s",)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, nargs="*", default=[16, 24, 32])
    ap.add_argument("--time-limit", type=float, default=30.0)
    add_repeats(ap)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = []
    for g in a.gpus:
        runs = [run(g, a.time_limit) for _ in range(a.repeats)]
        rows += [merge_runs(same, TIMED) for same in zip(*runs)]
    if a.json:
        print(json.dumps({"machine": machine(), "rows": rows}, indent=1))
        return
    print(machine_line())
    for r in rows:
        print("  ".join(f"{k} {spread_text(v) if k in TIMED else v}" for k, v in r.items()))


if __name__ == "__main__":
    main()
