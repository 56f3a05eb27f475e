"""Every entry point of issue 38, as wall time and as a ratio against a baseline measured in
the same run.

    python benchmarks/bench_entry_points.py                   # the whole table (many minutes)
    python benchmarks/bench_entry_points.py --only import,help,list
    python benchmarks/bench_entry_points.py --load 6          # six busy loops beside it
    python benchmarks/bench_entry_points.py --repeats 3 --json

Each command runs as a fresh ``python -m planner ...`` from this checkout (its folder first
on ``PYTHONPATH``), output discarded, and is timed from start to exit. Baselines, measured
in the same run so that the machine's speed and load cancel out of the ratio:

- ``import planner`` and ``--help``: plain Python start-up (``python -c pass``);
- each solve: the same command with ``--backend exhaustive`` (the project's vectorized brute
  force over the same space), time-boxed by ``--exhaustive-limit``; a brute force cut short
  makes the ratio a lower bound (``>``). Both commands pay the same start-up (interpreter,
  CLI, catalog) and report, which bound the ratio of their wall times on a small space;
  the search itself is compared apart: each backend's own ``solve_time_s`` (``--json``:
  the whole search, enumerating and tabulating the space included, from the same kind of
  fresh process), beside the start-up of ``planner solve --help`` measured in the run;
- procurement and serving, which have no brute force of their own: the brute force of the
  first solve row (Llama 3 70B on 512 H100), the same yardstick of machine speed;
- ``evaluate_many`` on a list of ``Plan`` objects: the columnar path on the same plans
  (``build_tables`` for the points they use + ``evaluate_columns``), in this process; wall
  and CPU time (the process's, which other load moves less).

The last column: for a solve, its speed-up (the brute force's best time over the solve's)
by wall time, then by search time (``solve_time_s``); for every other row, its best time
over the baseline's. Start-up rows run
``max(5, --repeats)`` times, every other row ``--repeats`` times; the
table gives the best and the median. ``--load N`` starts N busy loops (``while True:
pass``) before the first row and stops them after the last. Run it under ``nice`` on an
otherwise idle machine; the machine line names the load average at the start.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(1, str(ROOT))  # this checkout's planner in-process too, as in the commands

import planner  # noqa: E402
from _timing import add_repeats, machine, machine_line, spread  # noqa: E402
from planner.costmodel.objective import TIME  # noqa: E402
from planner.costmodel.train.batch import PlanSet, evaluate_columns, inner_columns  # noqa: E402
from planner.costmodel.train.tables import build_tables  # noqa: E402
from planner.orchestration.train import build_space  # noqa: E402
from planner.specs.loaders import load_cluster, load_model  # noqa: E402

START_UP_REPEATS = 5
LLAMA70_512 = ["solve", "-m", "llama3-70b", "-c", "dgx-h100-superpod", "--gpus", "512"]
SERVE_SLO = ["--isl", "2048", "--osl", "256", "--ttft-ms", "500", "--tpot-ms", "30"]

#: (key, label, argv after ``python``, baseline): "python" (start-up), "exhaustive" (the
#: same solve by brute force) or "yardstick" (the first solve's brute force)
ROWS: list[tuple[str, str, list[str], str]] = [
    ("import", "import planner", ["-c", "import planner"], "python"),
    ("help", "planner --help", ["-m", "planner", "--help"], "python"),
    ("help-solve", "planner solve --help", ["-m", "planner", "solve", "--help"], "python"),
    ("solve-70b-512", "solve llama3-70b, 512 H100 (issue 38)", ["-m", "planner", *LLAMA70_512],
     "exhaustive"),
    # the README's solves ("Using it")
    ("solve-readme-superpod", "solve llama70b, examples/superpod.yaml",
     ["-m", "planner", "solve", "-m", "llama70b", "-c", "examples/superpod.yaml"],
     "exhaustive"),
    ("solve-readme-2048-top5", "solve llama70b, 2048 H100, --top 5 --json",
     ["-m", "planner", "solve", "-m", "llama70b", "-c", "dgx-h100-superpod", "--gpus", "2048",
      "--top", "5", "--json"], "exhaustive"),
    ("solve-readme-405b", "solve llama3-405b, 16384 H100, tp8 pp16",
     ["-m", "planner", "solve", "-m", "llama3-405b", "-c", "dgx-h100-superpod", "--gpus",
      "16384", "--global-batch", "2048", "--fix", "tp=8", "--fix", "pp=16"], "exhaustive"),
    ("solve-readme-energy", "solve llama70b, superpod.yaml, energy, 15T tokens",
     ["-m", "planner", "solve", "-m", "llama70b", "-c", "examples/superpod.yaml",
      "--objective", "energy", "--tokens", "15e12"], "exhaustive"),
    ("solve-readme-8", "solve llama70b, 8 H100, batch 64 (offload)",
     ["-m", "planner", "solve", "-m", "llama70b", "-c", "dgx-h100-superpod", "--gpus", "8",
      "--global-batch", "64"], "exhaustive"),
    ("solve-deepseek", "solve deepseek-v3, 2048 H100, batch 4096",
     ["-m", "planner", "solve", "-m", "deepseek-v3", "-c", "dgx-h100-superpod", "--gpus",
      "2048", "--global-batch", "4096"], "exhaustive"),
    ("procure-405b", "procure llama3-405b, 15T tokens, 90 days",
     ["-m", "planner", "procure", "--model", "llama3-405b", "--tokens", "15e12", "--days",
      "90"], "yardstick"),
    ("procure-dlrm", "procure dlrm-b, 1e11 samples, 5 days",
     ["-m", "planner", "procure", "-m", "dlrm-b", "--tokens", "1e11", "--days", "5"],
     "yardstick"),
    ("serve", "serve llama3-70b, 20 req/s (README)",
     ["-m", "planner", "serve", "-m", "llama3-70b", "-c", "dgx-h100-superpod", *SERVE_SLO,
      "--rate", "20"], "yardstick"),
    ("procure-serve", "procure --serve llama3-70b, 200 req/s",
     ["-m", "planner", "procure", "-m", "llama3-70b", "--serve", "--rate", "200", *SERVE_SLO],
     "yardstick"),
]


#: where the commands keep their compiled bytecode (None: as the environment says)
_PYCACHE: list[str | None] = [None]


def _env() -> dict[str, str]:
    env = {**os.environ,
           "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    if _PYCACHE[0] is not None:  # as an installed copy runs: bytecode compiled once, kept
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = _PYCACHE[0]
    return env


def run_command(args: list[str], timeout_s: float, capture: bool = False
                ) -> tuple[float, int, str]:
    """Wall seconds, exit status (-1: killed at ``timeout_s``) and, with ``capture``, the
    standard output of ``python ARGS``."""
    t0 = time.perf_counter()
    out = subprocess.PIPE if capture else subprocess.DEVNULL
    try:
        done = subprocess.run([sys.executable, *args], cwd=ROOT, env=_env(), timeout=timeout_s,
                              stdout=out, stderr=subprocess.DEVNULL, text=True)
        rc, text = done.returncode, done.stdout or ""
    except subprocess.TimeoutExpired:
        rc, text = -1, ""
    return time.perf_counter() - t0, rc, text


def _solve_time(text: str) -> float | None:
    """``solver.solve_time_s`` of a ``planner solve --json`` output (None: no answer)."""
    try:
        return float(json.loads(text)["solver"]["solve_time_s"])
    except (ValueError, KeyError, TypeError):
        return None


def timed_command(args: list[str], repeats: int, timeout_s: float) -> dict:
    """Wall time and exit status of ``repeats`` runs; for a ``--json`` solve, also its own
    ``solve_time_s`` (``search_s``)."""
    walls, codes, search = [], [], []
    capture = "--json" in args and "solve" in args
    for _ in range(repeats):
        wall, rc, text = run_command(args, timeout_s, capture)
        walls.append(wall)
        codes.append(rc)
        t = _solve_time(text) if capture else None
        if t is not None:
            search.append(t)
    row = {"wall_s": spread(walls), "exit": sorted(set(codes))}
    if search:
        row["search_s"] = spread(search)
    return row


def _json(args: list[str]) -> list[str]:
    return args if "--json" in args else [*args, "--json"]


def exhaustive(args: list[str], limit_s: float, repeats: int, timeout_s: float) -> dict:
    """The same solve by brute force (``--json``, for its ``solve_time_s``); ``cut`` when it
    reached its time limit (or was killed) before covering the space: its time is then a
    lower bound."""
    row = timed_command(_json([*args, "--backend", "exhaustive", "--time-limit", str(limit_s)]),
                        repeats, timeout_s)
    row["cut"] = row["wall_s"]["min"] >= 0.95 * limit_s or -1 in row["exit"]
    return row


def evaluate_many_rates(n: int, seed: int, repeats: int) -> dict:
    """``planner.evaluate_many`` on a list of ``n`` Plans drawn from the Llama 3 70B / 1024
    H100 space, against the columnar path on the same plans (tables for the points they
    use, then ``evaluate_columns``); both answers compared entry by entry."""
    model, cluster = load_model("llama3-70b"), load_cluster("dgx-h100-superpod", 1024)
    space = build_space(model, cluster)
    tb = build_tables(space)
    q, rc, sp, z = inner_columns(tb)
    t0 = time.perf_counter()
    whole = evaluate_columns(tb, q, rc, sp, z)
    whole_s = time.perf_counter() - t0
    idx = np.array(random.Random(seed).sample(range(len(q)), min(n, len(q))))
    plans = [tb.plan(int(q[i]), tuple(int(x) for x in rc[i]), int(sp[i]), int(z[i]))
             for i in idx]
    used = np.unique(q[idx])
    list_s, col_s, list_cpu_s, col_cpu_s = [], [], [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        many = planner.evaluate_many(model, cluster, plans)
        list_s.append(time.perf_counter() - t0)
        list_cpu_s.append(time.process_time() - c0)
        t0, c0 = time.perf_counter(), time.process_time()
        tb2 = build_tables(PlanSet(model, cluster, plans[0], [tb.points[k] for k in used]),
                           TIME)
        where = {pt: k for k, pt in enumerate(tb2.points)}
        remap = np.full(tb.num_points, -1, np.int64)
        remap[used] = [where[tb.points[k]] for k in used]
        cols = evaluate_columns(tb2, remap[q[idx]], rc[idx], sp[idx], z[idx])
        col_s.append(time.perf_counter() - t0)
        col_cpu_s.append(time.process_time() - c0)
    ref = whole.iteration_time_s[idx]
    diff = float(np.max(np.abs(many.iteration_time_s - ref) / ref))
    assert diff < 1e-9 and np.array_equal(many.feasible, whole.feasible[idx])
    assert np.allclose(cols.iteration_time_s, ref, rtol=1e-9, atol=0)
    return {"plans": len(plans), "points": len(used), "list_s": spread(list_s),
            "columnar_s": spread(col_s), "list_cpu_s": spread(list_cpu_s),
            "columnar_cpu_s": spread(col_cpu_s), "max_rel_diff": diff,
            "list_plans_per_s": len(plans) / min(list_s),
            "columnar_plans_per_s": len(plans) / min(col_s),
            "whole_space_plans": len(q), "whole_space_columnar_plans_per_s": len(q) / whole_s}


def busy_loops(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def stop(loops: list[subprocess.Popen]) -> None:
    for p in loops:  # only the loops this run started, each by its own handle
        p.terminate()
    for p in loops:
        p.wait()


def _best(row: dict) -> float:
    return row["wall_s"]["min"]


def run(args: argparse.Namespace) -> dict:
    keys = [r[0] for r in ROWS] + ["list"]
    only = [k for k in args.only.split(",") if k] if args.only else keys
    unknown = [k for k in only if not any(k2.startswith(k) for k2 in keys)]
    if unknown:
        raise SystemExit(f"--only {','.join(unknown)}: unknown; expected prefixes of "
                         f"{', '.join(keys)}")
    wanted = [r for r in ROWS if any(r[0].startswith(k) for k in only)]
    out: dict = {"machine": machine(), "load_loops": args.load, "rows": []}
    loops = busy_loops(args.load)
    try:
        su = max(START_UP_REPEATS, args.repeats)
        base: dict[str, dict] = {}
        if any(r[3] == "python" for r in wanted):
            base["python"] = timed_command(["-c", "pass"], su, args.timeout)
        if any(r[3] == "exhaustive" for r in wanted):  # what every solve command starts with
            out["solve_start_up"] = timed_command(["-m", "planner", "solve", "--help"], su,
                                                  args.timeout)
            print(f"{'start-up: planner solve --help':48s} "
                  f"{out['solve_start_up']['wall_s']['min']:7.2f} "
                  f"{out['solve_start_up']['wall_s']['median']:7.2f}", file=_OUT[0], flush=True)
        if any(r[3] == "yardstick" for r in wanted):
            base["yardstick"] = exhaustive(["-m", "planner", *LLAMA70_512],
                                           args.exhaustive_limit, args.repeats, args.timeout)
        for key, label, argv, kind in wanted:
            row = {"key": key, "label": label, "command": "python " + " ".join(argv),
                   **timed_command(argv, su if kind == "python" else args.repeats,
                                   args.timeout)}
            ref = (exhaustive(argv, args.exhaustive_limit, args.repeats, args.timeout)
                   if kind == "exhaustive" else base[kind])
            row["baseline"] = {"kind": kind, **ref}
            row["ratio"] = _best(row) / _best(ref)
            if kind == "exhaustive":  # the search alone, from the same command with --json
                search = row if "search_s" in row else timed_command(
                    _json(argv), args.repeats, args.timeout)
                if "search_s" in search and "search_s" in ref:
                    row["search_s"] = search["search_s"]
                    row["search_ratio"] = (search["search_s"]["min"]
                                           / ref["search_s"]["min"])
            out["rows"].append(row)
            print(_line(row), file=_OUT[0], flush=True)
        if any("list".startswith(k) for k in only):
            out["evaluate_many"] = evaluate_many_rates(args.plans, args.seed, args.repeats)
    finally:
        stop(loops)
    out["load_average_1min_end"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return out


_OUT = [sys.stdout]


def _line(row: dict) -> str:
    w, ref = row["wall_s"], row["baseline"]
    bw = ref["wall_s"]
    kind = {"python": "python -c pass", "exhaustive": "exhaustive",
            "yardstick": "exhaustive 70B/512"}[ref["kind"]]
    lower = ">" if ref.get("cut") else ""
    # a solve: how many times faster than brute force; otherwise: times the baseline
    speed = (f"speed-up {lower}{1 / row['ratio']:.1f}" if ref["kind"] == "exhaustive"
             else f"{row['ratio']:.2f}x")
    exits = ",".join("timeout" if c == -1 else str(c) for c in row["exit"])
    search = ""
    if "search_ratio" in row:  # each backend's own solve_time_s
        search = (f"   search {row['search_s']['min']:.2f} s vs {lower}"
                  f"{ref['search_s']['min']:.2f} s: speed-up {lower}"
                  f"{1 / row['search_ratio']:.1f}")
    return (f"{row['label'][:48]:48s} {w['min']:7.2f} {w['median']:7.2f}   "
            f"{kind:19s} {lower}{bw['min']:6.2f}   {speed:>14s}   exit {exits}{search}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="",
                    help="comma-separated row keys or prefixes (import, help, solve, procure, "
                    "serve, list, ...); default every row")
    ap.add_argument("--load", type=int, default=0, metavar="N",
                    help="N busy loops beside the run (default 0)")
    ap.add_argument("--exhaustive-limit", type=float, default=300.0, metavar="S",
                    help="time limit of each brute-force baseline (default 300 s)")
    ap.add_argument("--timeout", type=float, default=900.0, metavar="S",
                    help="a command still running after S seconds is stopped (default 900)")
    ap.add_argument("--plans", type=int, default=100_000,
                    help="plans in the evaluate_many list (default 100,000)")
    ap.add_argument("--seed", type=int, default=0)
    add_repeats(ap)
    ap.add_argument("--no-bytecode-cache", action="store_true",
                    help="run the commands with the environment's bytecode setting (default: "
                    "a private bytecode cache, filled by one untimed run first, as an "
                    "installed copy has)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.load < 0:
        ap.error(f"--load must be 0 or more, got {args.load}")
    if not args.no_bytecode_cache:
        _PYCACHE[0] = tempfile.mkdtemp(prefix="planner-bench-pycache-")
        run_command(["-m", "planner", "solve", "--help"], args.timeout)  # fills the cache
    _OUT[0] = sys.stderr if args.json else sys.stdout  # --json: stdout holds the object alone
    cache = "no bytecode cache" if args.no_bytecode_cache else "bytecode cached"
    print(machine_line() + f"; {cache}" + (f"; {args.load} busy loops beside" if args.load
                                           else ""),
          file=_OUT[0], flush=True)
    print(f"{'entry point':48s} {'best s':>7s} {'median':>7s}   {'baseline':19s} {'best s':>6s}"
          f"   {'ratio':>14s}", file=_OUT[0], flush=True)
    try:
        out = run(args)
    finally:
        if _PYCACHE[0] is not None:
            shutil.rmtree(_PYCACHE[0], ignore_errors=True)
    e = out.get("evaluate_many")
    if e:
        print(f"evaluate_many, list of {e['plans']:,} Plans ({e['points']:,} points): "
              f"{e['list_plans_per_s']:,.0f} plans/s; columnar on the same plans with their "
              f"tables {e['columnar_plans_per_s']:,.0f} plans/s (list / columnar time "
              f"{statistics.median(e['list_s']['samples']) / statistics.median(e['columnar_s']['samples']):.2f}"
              f"; CPU {statistics.median(e['list_cpu_s']['samples']):.3f} s / "
              f"{statistics.median(e['columnar_cpu_s']['samples']):.3f} s = "
              f"{statistics.median(e['list_cpu_s']['samples']) / statistics.median(e['columnar_cpu_s']['samples']):.2f}"
              f"); whole space columnar without tabulating "
              f"{e['whole_space_columnar_plans_per_s']:,.0f} plans/s", file=_OUT[0])
    print(f"load average at the end {out['load_average_1min_end']:.1f}", file=_OUT[0])
    if args.json:
        print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
