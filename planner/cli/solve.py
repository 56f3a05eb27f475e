"""``planner solve``: the best plan over the search space, through :func:`planner.api.solve`."""

from __future__ import annotations

from enum import Enum
from typing import Any, Optional

import typer
from rich.markup import escape

from planner.cli.console import (
    FORCE_HELP,
    say_overrun,
    check_files,
    warn_calibration,
    warn_context_length,
    with_headroom,
    CLUSTER_HELP,
    HEADROOM_HELP,
    DTYPE_HELP,
    GPUS_HELP,
    MODEL_HELP,
    SEQ_LEN_HELP,
    BackendName,
    LazyStatus,
    ObjectiveName,
    _emit_json,
    err,
    out,
)
from formulations.train.options import knob
from planner.errors import InfeasibleError


class GoodputSetting(str, Enum):
    on = "on"
    async_ = "async"
    off = "off"


GOODPUT_HELP = ("With --tokens: count failures, checkpoints and restarts (the cluster's "
                "failures_per_gpu_hour, checkpoint_write_GBps_per_gpu, restart_s) in days, "
                "GPU-hours, energy and cost, with the ideal figures beside them: on "
                "(synchronous checkpoints), async (asynchronous checkpoints: Megatron-Core "
                "--async-save, torchtitan checkpoint.async_mode), off (the ideal figures only).")

FRAMEWORK_HELP = ("The training framework the plan is for (planner catalog frameworks): "
                  "only plans it can run are searched. Default: the framework of --export "
                  "FORMAT, else none: every plan the cost model accepts, and the output "
                  "names the frameworks that run the best one.")


def _knob(name: str) -> Any:
    """The CLI option of a search-space bound, from its one declaration (SpaceOptions)."""
    default, help_text, flag = knob(name)
    return typer.Option(default, flag, help=help_text)


def solve(
    model: str = typer.Option(..., "--model", "-m", help=MODEL_HELP),
    cluster: str = typer.Option(..., "--cluster", "-c", help=CLUSTER_HELP),
    gpus: Optional[int] = typer.Option(None, "--gpus", help=GPUS_HELP),
    objective: ObjectiveName = typer.Option(ObjectiveName.time, "--objective", help="What to minimize."),
    backend: BackendName = typer.Option(BackendName.cpsat, "--backend",
                                        help="cpsat (default), milp, or exhaustive (brute force)."),
    time_limit: float = typer.Option(60.0, "--time-limit", help="Seconds for the whole solve, set-up included; when they run out, the best plan found so far (not proven optimal)."),
    top: int = typer.Option(1, "--top", help="Return the K best distinct plans."),
    fix: list[str] = typer.Option([], "--fix", metavar="FIELD=VALUE", help="Fix a plan field: FIELD=VALUE (repeatable), "
                                  "e.g. --fix tp=8 --fix recompute=full --fix placement.domain.tp=8."),
    plan: Optional[str] = typer.Option(None, "--plan", "-p", help="Partial plan YAML: its fields are fixed."),
    global_batch: Optional[int] = typer.Option(None, "--global-batch", help="Global batch (sequences); default from the model."),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help=SEQ_LEN_HELP),
    dtype: Optional[str] = typer.Option(None, "--dtype", help=DTYPE_HELP),
    tokens: Optional[float] = typer.Option(None, "--tokens", help="Token budget: report totals (days, GPU-hours, MWh, USD)."),
    out_path: Optional[str] = typer.Option(None, "--out", help="Write the best plan as a plan YAML."),
    export: Optional[str] = typer.Option(None, "--export", metavar="FORMAT", help="Also write the "
                                         "best plan as a launch file: megatron, megatron-bridge, "
                                         "torchtitan or deepspeed (planner export), or "
                                         "'framework': the --framework's format."),
    export_out: Optional[str] = typer.Option(None, "--export-out", metavar="FILE", help="Where "
                                             "--export writes (default: standard output after "
                                             "the tables)."),
    json_: bool = typer.Option(False, "--json", help="Print one JSON object."),
    verbose: bool = typer.Option(False, "--verbose", help="Show the solver log."),
    no_presolve: bool = typer.Option(False, "--no-presolve", help="Skip the bound presolve (slower)."),
    allow_idle_gpus: bool = _knob("allow_idle_gpus"),
    even_pipeline: bool = _knob("allow_uneven"),
    max_microbatch: int = _knob("max_microbatch"),
    max_virtual_stages: int = _knob("max_virtual_stages"),
    memory_headroom: Optional[float] = typer.Option(None, "--memory-headroom", help=HEADROOM_HELP),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
    framework: Optional[str] = typer.Option(None, "--framework", help=FRAMEWORK_HELP),
    goodput: GoodputSetting = typer.Option(GoodputSetting.on, "--goodput", help=GOODPUT_HELP),
) -> None:
    """Find the best parallelization plan, proven optimal over the search space."""
    from planner.api import solve as run_solve
    from planner.specs.loaders import load_cluster, load_model

    profile, export = _check_export(export, export_out, json_, framework)
    check_files([("--out", out_path), ("--export-out", export_out)],
                [("the model", model), ("the cluster", cluster), ("the plan", plan)], force)
    m = load_model(model)
    c = with_headroom(load_cluster(cluster, gpus), memory_headroom)
    if getattr(m, "kind", None) == "dlrm":  # a recommendation model: planner/cli/dlrm.py
        return _solve_dlrm(m, c, backend.value, time_limit, global_batch, json_, out_path,
                           force, dict(plan=plan, fix=fix, seq_len=seq_len, dtype=dtype,
                                       top_k=top, objective=objective.value))
    warn_context_length(m, seq_len, bool(plan))
    obj = objective.value.replace("-", "_")
    status = LazyStatus(err, not json_)
    log = (lambda line: err.print(escape(line), highlight=False)) if verbose else None
    try:
        res = run_solve(m, c, plan=plan, fix=fix, global_batch_size=global_batch,
                        seq_len=seq_len, dtype=dtype, objective=obj, backend=backend.value,
                        top_k=top, time_limit_s=time_limit, tokens=tokens,
                        presolve=not no_presolve, max_microbatch=max_microbatch,
                        max_virtual_stages=max_virtual_stages, allow_idle_gpus=allow_idle_gpus,
                        even_pipeline=even_pipeline, progress=status, log=log,
                        framework=profile, goodput=goodput.value)
    except InfeasibleError as e:
        if json_:  # scripts still get one object, then the reasons on stderr and exit 1
            _emit_infeasible(e, backend.value, obj)
        raise
    finally:
        status.stop()
    say_overrun(res.overrun_fields(), time_limit)
    if out_path:
        _write_plan(res.best.plan, out_path, force)
    _report(res, m, c, out_path, json_)
    if export:
        from planner.cli.export import write_export

        write_export(export, res.best.plan, m, c, export_out, force, "--export-out")


def _report(res: Any, m: Any, c: Any, out_path: Optional[str], json_: bool) -> None:
    """The answer as JSON or tables, with its calibration notes and the frameworks that
    run it."""
    notes = warn_calibration(c, res.best.plan)
    runs_on, closest = _runs_on(res, m, c)
    if json_:
        _emit_json({**res.to_json(), "calibration_notes": notes,
                    "frameworks_that_run_it": runs_on})
        return
    _print_result(res, m, c, out_path)
    if res.published and res.published["note"]:
        out.print(f"[yellow]trust:[/] {escape(res.published['note'])}", soft_wrap=True)
    if res.framework is None:
        out.print("frameworks that run this plan: " + (", ".join(runs_on) or (
            f"none of the catalog's as it stands (closest: {closest}); "
            "--framework NAME searches only the plans NAME runs")), highlight=False)


def _runs_on(res: Any, m: Any, c: Any) -> tuple[list[str], str]:
    """The catalog frameworks whose rules the best plan breaks none of, and the closest
    one with the first rule it breaks (for when none runs it)."""
    from planner.costmodel.frameworks import catalog_violations

    broken = catalog_violations(res.best.plan, m, c)
    name = min(broken, key=lambda n: len(broken[n]))
    closest = f"{name}: {broken[name][0]}" if broken[name] else name
    return [n for n, v in broken.items() if not v], escape(closest)


def _solve_dlrm(m: Any, c: Any, backend: str, time_limit: float, global_batch: Optional[int],
                json_: bool, out_path: Optional[str], force: bool,
                transformer_only: dict[str, Any]) -> None:
    from planner.cli.dlrm import solve_dlrm_cli

    return solve_dlrm_cli(m, c, backend=backend, time_limit=time_limit,
                          global_batch=global_batch, json_=json_, out_path=out_path,
                          force=force, transformer_only=transformer_only)


def _check_export(fmt: Optional[str], path: Optional[str], json_: bool,
                  framework: Optional[str]) -> tuple[Any, Optional[str]]:
    """The --framework profile (default: that of the --export format, else None: no
    restriction) and the --export format (``framework``: the profile's); with --json the
    file must go to --export-out."""
    from planner.errors import InputError
    from planner.export import FORMATS
    from planner.export.common import FORMAT_FRAMEWORK
    from planner.specs.framework import load_framework

    # `is None`, not `or`: --framework '' is an empty name (refused), not "no framework"
    name = framework if framework is not None else FORMAT_FRAMEWORK.get(fmt or "")
    profile = None if name is None else load_framework(name)
    if fmt == "framework":  # the format of the framework's exporter
        if profile is None:
            raise InputError("--export framework: needs --framework NAME")
        fmt = profile.export_format
        if fmt is None:
            raise InputError(f"--export framework: framework {profile.name} has no exporter")
    if fmt is None:
        if path:
            raise InputError("--export-out needs --export FORMAT")
        return profile, None
    if fmt not in FORMATS:
        raise InputError(f"--export {fmt!r}: expected one of {', '.join(FORMATS)}")
    if json_ and not path:
        raise InputError("--export with --json needs --export-out FILE (standard output "
                         "carries the JSON)")
    return profile, fmt


def _emit_infeasible(e: InfeasibleError, backend: str, objective: str) -> None:
    _emit_json({"plan": None, "estimate": None,
                "solver": {"backend": backend, "status": e.status, "objective": objective},
                "alternatives": [], "message": str(e), "reasons": e.reasons, "hints": e.hints})


def _write_plan(plan: Any, path: str, force: bool) -> None:
    import yaml

    from planner.fileio import write_output_atomic

    write_output_atomic(path, yaml.safe_dump(plan.to_dict(), sort_keys=False), "--out",
                        force=force)


def _print_result(res: Any, m: Any, c: Any, out_path: Optional[str]) -> None:
    from planner.costmodel.network import PlacementError, domain_factors
    from planner.report.text import print_estimate, solve_status, solve_tables

    best = res.best
    try:
        domain = domain_factors(best.plan, c.domain_size)
    except PlacementError:
        domain = None
    print_estimate(out, f"best plan: {m.name} on {c.name} ({c.num_gpus}x {c.gpu.name})",
                   best.plan, best.estimate, domain, solve_status(res))
    solve_tables(out, res)
    if out_path:
        out.print(f"wrote {out_path}")
