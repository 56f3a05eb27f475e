"""``planner solve`` for a DLRM model (kind: dlrm): the sharding plan as a table
(table -> type -> ranks), per-rank memory and time, samples/s; ``planner evaluate --plan``
costs a sharding a user already runs, printed the same way."""

from __future__ import annotations

import time
from typing import Any

from pydantic import Field
from rich.markup import escape
from rich.table import Table

from planner.cli.console import _emit_json, err, out, say_failed_overrun, say_overrun
from planner.errors import InfeasibleError, InputError
from planner.orchestration.dlrm import status_text
from planner.api import solve as run_solve
from planner.specs.base import Spec
from planner.specs.requests import SolveRequest
from planner.specs.dlrm import DLRMPlan
from planner.costmodel.dlrm.evaluate import evaluate_dlrm
from planner.export.torchrec import torchrec_plan
from planner.fileio import write_output_atomic
from planner.specs.loaders import load_plan_dict
from planner.specs.validate import _short, validate


def solve_dlrm_cli(request: SolveRequest, json_: bool, out_path: str | None = None,
                   force: bool = False) -> None:
    """``planner solve`` of a DLRM model (``request.model``, loaded)."""
    backend, time_limit = request.backend, request.time_limit_s
    start = time.monotonic()
    try:
        res = run_solve(request)
    except InfeasibleError as e:
        over = say_failed_overrun(start, time_limit, "no plan found; listing the tables' "
                                  "options and building the model take a minimum whatever "
                                  "the limit")
        if json_:
            _emit_json({"plan": None, "estimate": None, "feasible": False,
                        "solver": {"backend": backend, "status": e.status, **over},
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
    """``--out``: the plan and its TorchRec form (planner/export/torchrec.py); JSON when
    the path ends in .json, else YAML."""
    import json

    import yaml

    data = {"model": res.model.name, "cluster": res.cluster.name,
            "plan": res.solution.plan.to_dict(),
            "torchrec": torchrec_plan(res.model, res.cluster, res.solution.plan)}

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
    _print_plan(s.plan, c)
    _print_ranks(est)
    _print_phases(est)
    status = status_text(s) + ("" if s.found_by != "solver" else f" by {s.backend}")
    gap = s.optimality_gap
    out.print(_totals(est) + f"; {status} in {s.solve_time_s:.2f} s"
              + (f", gap to bound {gap:.1e}" if gap is not None else ""))


def _print_plan(plan: Any, c: Any) -> None:
    t = Table(title="sharding plan", header_style="bold")
    for col in ("table", "copies", "type", "shards", "kernel", "ranks"):
        t.add_column(col)
    node = c.topology[0].size
    for p in plan.tables:
        t.add_row(escape(p.table), str(p.copies), p.sharding_type, str(p.shards),
                  p.torchrec_kernel,
                  _ranks_text(p, node))
    out.print(t)


def _print_phases(est: Any) -> None:
    ph = ", ".join(f"{k} {v * 1e3:.2f}" for k, v in est.phases_s.items())
    out.print(f"phases (ms): {ph}")


def _totals(est: Any) -> str:
    return (f"iteration {est.iteration_time_s * 1e3:.2f} ms, "
            f"[bold]{est.samples_per_s:,.0f} samples/s[/], memory "
            f"{est.memory_per_gpu_gib:.2f} GiB per GPU (max; {est.usable_memory_bytes / 2**30:.2f}"
            f" usable)")


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
    pruned = getattr(res, "pruned", [])
    if pruned:
        out.print(f"{len(pruned)} options bounded out unsolved (their lower bounds miss the "
                  "limits or the best answer; --json lists them)", highlight=False)
    if res.choice is not None:
        c = res.choice
        out.print(f"[bold]choice:[/] {c.cluster.num_gpus}x {escape(c.cluster.gpu.name)} "
                  f"({c.template}): "
                  f"{c.values['days']:.2f} days, ${c.values['cost_usd']:,.0f} "
                  f"(minimizing {res.objective})")


# ---- planner evaluate -m <dlrm> --plan FILE ----------------------------------------------
class SolveOutFile(Spec):
    """The file ``planner solve -m <dlrm> --out`` writes (:func:`_write`), as evaluate
    reads it back: the sharding, and the names it was solved for."""

    model: str | None = Field(None, description="name of the model the plan was solved for")
    cluster: str | None = Field(None, description="name of the cluster it was solved on")
    plan: DLRMPlan = Field(..., description="the sharding: plan.tables")
    torchrec: Any = Field(None, description="the sharding in TorchRec's terms, written "
                          "for the reader (planner/export/torchrec.py); not read back")


def read_dlrm_plan(path: str, model: Any, cluster: Any) -> tuple[DLRMPlan, list[str]]:
    """The sharding in ``path`` (a ``planner solve --out`` file or a bare ``tables:``
    DLRMPlan) and warnings: a cluster other than ``cluster`` (an unknown key is refused:
    a typo would leave a field at its default). A file solved for another model than
    ``model`` is refused: its tables are not this model's."""
    data = load_plan_dict(path)
    if "plan" in data:
        f = validate(SolveOutFile, data, path)
        if f.model is not None and f.model not in (model.name, *model.aliases):
            raise InputError(f"{path}: model {_short(f.model)}: this plan shards another "
                             f"model than -m {model.name!r} (its tables are that model's); "
                             f"expected model: {model.name}, or the other model with -m")
        plan = f.plan
    elif "tables" in data:
        plan = validate(DLRMPlan, data, path)
    else:
        raise InputError(f"{path}: not a DLRM sharding plan: expected tables: (a list of "
                         "table placements) or a `planner solve --out` file (plan.tables); "
                         f"found keys {', '.join(map(str, data)) or 'none'}")
    warnings = []
    if "plan" in data and f.cluster is not None and f.cluster != cluster.name:
        warnings.append(f"{path}: solved on cluster {f.cluster!r}; costed on -c "
                        f"{cluster.name!r}")
    return plan, warnings


def evaluate_dlrm_cli(m: Any, c: Any, plan_path: str | None, *, json_: bool,
                      global_batch: int | None, transformer_only: dict[str, Any]) -> None:
    """``planner evaluate -m <dlrm> -c CLUSTER --plan FILE``: what a given sharding costs,
    printed as ``planner solve`` prints its best one; exit 1 (the JSON object still
    printed) when it does not fit in memory."""
    given = [k for k, v in transformer_only.items() if v not in (None, False, [], ())]
    if given:
        raise InputError(f"{', '.join(given)}: {'options' if len(given) > 1 else 'an option'} "
                         "of transformer plans; a DLRM model "
                         f"({m.name}) is costed by its embedding-table sharding (--plan FILE)")
    if plan_path is None:
        raise InputError(f"model {m.name!r} is a DLRM (kind: dlrm): evaluate needs --plan "
                         "FILE, its sharding (the --out file of `planner solve`, or tables:); "
                         "`planner solve` finds the best one")
    if global_batch is not None:
        m = validate(type(m), {**m.model_dump(), "global_batch_size": global_batch},
                     "--global-batch")
    plan, warnings = read_dlrm_plan(plan_path, m, c)
    for w in warnings:
        err.print(f"[yellow]warning:[/] {escape(w)}", soft_wrap=True)
    try:
        est = evaluate_dlrm(m, c, plan)
    except InputError as e:  # the evaluator names the placement; say which file
        raise InputError(f"{plan_path}: {e}") from None
    if json_:
        _emit_json({"model": m.name, "kind": "dlrm", "cluster": c.name,
                    "num_gpus": c.num_gpus, "plan": plan.to_dict(),
                    "estimate": {**est.to_json(), "global_batch_size": m.global_batch_size},
                    "feasible": est.feasible})
    else:
        out.print(f"[bold]sharding {escape(plan_path)}: {escape(m.name)} on {escape(c.name)} "
                  f"({c.num_gpus}x {escape(c.gpu.name)})[/]")
        _print_plan(plan, c)
        _print_ranks(est)
        _print_phases(est)
        out.print(_totals(est))
    if not est.feasible:
        raise InfeasibleError("this sharding does not fit in memory", est.reasons,
                              ["`planner solve` finds the best sharding that fits"])
