"""``planner solve`` for a DLRM model (kind: dlrm): the sharding plan as a table
(table -> type -> ranks), per-rank memory and time, samples/s."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from planner.cli.console import _emit_json, out, say_overrun
from planner.errors import InfeasibleError
from planner.orchestration.dlrm import STATUS_TEXT


def solve_dlrm_cli(m: Any, c: Any, *, backend: str, time_limit: float,
                   global_batch: int | None, json_: bool, transformer_only: dict,
                   out_path: str | None = None, force: bool = False) -> None:
    from planner.api import solve as run_solve

    try:
        res = run_solve(m, c, backend=backend, time_limit_s=time_limit,
                        global_batch_size=global_batch, **transformer_only)
    except InfeasibleError as e:
        if json_:
            _emit_json({"plan": None, "estimate": None, "feasible": False,
                        "solver": {"backend": backend, "status": e.status},
                        "message": str(e), "reasons": e.reasons, "hints": e.hints})
        raise
    say_overrun(res.overrun_fields(), time_limit)
    if out_path:
        _write(res, out_path, force)
    if json_:
        _emit_json(res.to_json())
        return
    _print(res)
    if out_path:
        out.print(f"wrote {out_path} (plan and TorchRec ParameterConstraints / sharding plan)")


def _write(res: Any, path: str, force: bool) -> None:
    """``--out``: the plan and its TorchRec form (planner/report/torchrec.py); JSON when
    the path ends in .json, else YAML."""
    import json

    import yaml

    from planner.report.torchrec import torchrec_plan

    data = {"model": res.model.name, "cluster": res.cluster.name,
            "plan": res.solution.plan.to_dict(),
            "torchrec": torchrec_plan(res.model, res.cluster, res.solution.plan)}
    from planner.fileio import write_output_atomic

    text = (json.dumps(data, indent=1) if path.endswith(".json")
            else yaml.safe_dump(data, sort_keys=False))
    write_output_atomic(path, text, "--out", force=force)


def _ranks_text(p: Any, node: int) -> str:
    """``0-127 (32 each)``, ``3, 5`` or ``node 2 (ranks 16-23)``: where the shards sit."""
    if p.nodes:
        return ", ".join(f"node {g} (ranks {g * node}-{g * node + node - 1})"
                         + (f" x{k}" if k > 1 else "") for g, k in sorted(p.nodes.items()))
    if not p.ranks:
        return "all ranks"
    ranks = sorted(p.ranks)
    counts = {p.ranks[r] for r in ranks}
    if len(ranks) > 6 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        each = f" ({counts.pop()} each)" if len(counts) == 1 else " (uneven)"
        return f"{ranks[0]}-{ranks[-1]}{each}"
    return ", ".join(f"{r}" + (f" x{p.ranks[r]}" if p.ranks[r] > 1 else "") for r in ranks)


def _print(res: Any) -> None:
    s, est, c = res.solution, res.solution.estimate, res.cluster
    out.print(f"[bold]best sharding: {escape(res.model.name)} on {escape(c.name)} "
              f"({c.num_gpus}x {escape(c.gpu.name)})[/]")
    t = Table(title="sharding plan", header_style="bold")
    for col in ("table", "copies", "type", "shards", "kernel", "ranks"):
        t.add_column(col)
    node = c.topology[0].size
    for p in s.plan.tables:
        t.add_row(escape(p.table), str(p.copies), p.sharding_type, str(p.shards),
                  p.torchrec_kernel,
                  _ranks_text(p, node))
    out.print(t)
    _print_ranks(est)
    ph = ", ".join(f"{k} {v * 1e3:.2f}" for k, v in est.phases_s.items())
    out.print(f"phases (ms): {ph}")
    status = STATUS_TEXT[s.status] + ("" if s.status == "heuristic" else f" by {s.backend}")
    gap = s.optimality_gap
    out.print(f"iteration {est.iteration_time_s * 1e3:.2f} ms, "
              f"[bold]{est.samples_per_s:,.0f} samples/s[/], memory "
              f"{est.memory_per_gpu_gib:.2f} GiB per GPU (max; {est.usable_memory_bytes / 2**30:.2f}"
              f" usable); {status} in {s.solve_time_s:.2f} s"
              + (f", gap to bound {gap:.1e}" if gap is not None else ""))


def _print_ranks(est: Any) -> None:
    """Per-rank time and memory: every rank on small jobs, the extremes on large ones."""
    pr = est.per_rank
    n = len(pr["memory_gib"])
    shown = list(range(n)) if n <= 16 else sorted({0, 1, n - 1} | {
        max(range(n), key=lambda r: pr["lookup_bwd_s"][r]),
        max(range(n), key=lambda r: pr["comm_fwd_s"][r]),
        max(range(n), key=lambda r: pr["memory_gib"][r])})
    t = Table(title="per rank" + ("" if n <= 16 else f" (slowest, fullest; of {n})"),
              header_style="bold")
    host = any(pr["host_memory_gib"])
    for col in ("rank", "lookup fwd ms", "lookup bwd ms", "dist fwd ms", "dist bwd ms", "GiB",
                *(("host GiB",) if host else ())):
        t.add_column(col, justify="right")
    for r in shown:
        t.add_row(str(r), *(f"{pr[k][r] * 1e3:.2f}" for k in
                            ("lookup_fwd_s", "lookup_bwd_s", "comm_fwd_s", "comm_bwd_s")),
                  f"{pr['memory_gib'][r]:.2f}",
                  *((f"{pr['host_memory_gib'][r]:.2f}",) if host else ()))
    out.print(t)


def show_procure_dlrm(res: Any, json_: bool) -> None:
    """``planner procure -m <dlrm> --tokens SAMPLES``: the options and the choice."""
    if json_:
        _emit_json(res.to_json())
        return
    t = Table(title=f"{escape(res.model.name)}: {res.samples:.3g} samples", header_style="bold")
    for col in ("option", "samples/s", "days", "USD", "MWh", "GPU-hours"):
        t.add_column(col, justify="right")
    for o in sorted(res.options, key=lambda o: o.values[res.objective]):
        mark = "* " if o is res.choice else ""
        t.add_row(escape(f"{mark}{o.cluster.num_gpus}x {o.cluster.gpu.name} ({o.template})"),
                  f"{o.samples_per_s:,.0f}", f"{o.values['days']:.2f}",
                  f"{o.values['cost_usd']:,.0f}", f"{o.values['energy_mwh']:.1f}",
                  f"{o.values['gpu_hours']:,.0f}")
    out.print(t)
    if res.choice is not None:
        c = res.choice
        out.print(f"[bold]choice:[/] {c.cluster.num_gpus}x {escape(c.cluster.gpu.name)} "
                  f"({c.template}): "
                  f"{c.values['days']:.2f} days, ${c.values['cost_usd']:,.0f} "
                  f"(minimizing {res.objective})")
