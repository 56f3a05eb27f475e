"""``planner solve``: the best plan over the search space, through :func:`planner.api.solve`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from rich.markup import escape

from planner.api import solve as run_solve
from planner.api import solve_mixed, with_headroom
from planner.cli.console import (
    LazyStatus,
    _emit_json,
    check_files,
    err,
    out,
    say_overrun,
    warn_calibration,
    warn_context_length,
)
from planner.cli.export import write_export, write_launch
from planner.cli.options import command
from planner.errors import InfeasibleError, InputError
from planner.report.text import print_mixed
from planner.specs.dlrm import DLRMSpec
from planner.specs.loaders import load_cluster, load_model, read_structured
from planner.specs.mixed import is_mixed
from planner.specs.requests import SolveOutput, SolveRequest
from planner.cli.dlrm import solve_dlrm_cli
from planner.costmodel.network import PlacementError, domain_factors
from planner.export import FORMATS
from planner.export.common import FORMAT_FRAMEWORK
from planner.fileio import write_output_atomic
from planner.report.text import print_estimate, solve_status, solve_tables
from planner.specs.requests import framework_profile


@command(SolveRequest, SolveOutput)
def solve(request: SolveRequest, output: SolveOutput) -> None:
    """Find the best parallelization plan, proven optimal over the search space."""
    if _mixed_file(request.cluster):  # several GPU pools: docs/mixed.md
        return _solve_mixed(request, output)
    profile, export = _check_export(output.export_format, output.export_path, output.as_json,
                                    request.framework)
    if output.launcher and not (export and output.export_path):
        raise InputError(f"--launcher {output.launcher}: needs --export FORMAT and "
                         "--export-out FOLDER (the job's files)")
    check_files([("--out", output.out_path)]
                + ([] if output.launcher else [("--export-out", output.export_path)]),
                [("the model", request.model), ("the cluster", request.cluster),
                 ("the plan", request.plan)], output.force)
    # loaded here, once: the warnings and the report read them too
    m = load_model(request.model)
    c = with_headroom(load_cluster(request.cluster, request.gpus), request.memory_headroom_gib)
    request = request.model_copy(update={"model": m, "cluster": c, "gpus": None,
                                         "memory_headroom_gib": None, "framework": profile})
    if isinstance(m, DLRMSpec):  # a recommendation model: planner/cli/dlrm.py

        return solve_dlrm_cli(request, output.as_json, output.out_path, output.force)
    warn_context_length(m, request.seq_len, bool(request.plan))
    status = LazyStatus(err, not output.as_json)
    log = (lambda line: err.print(escape(line), highlight=False)) if output.verbose else None
    try:
        res = run_solve(request, progress=status, log=log)
    except InfeasibleError as e:
        if output.as_json:  # scripts still get one object, then the reasons on stderr and exit 1
            _emit_infeasible(e, request.backend, request.objective)
        raise
    finally:
        status.stop()
    say_overrun(res.overrun_fields(), request.time_limit_s)
    if output.out_path:
        _write_plan(res.best.plan, output.out_path, output.force)
    _report(res, m, c, output.out_path, output.as_json)
    if export and output.launcher:
        write_launch(output.launcher, export, res.best.plan, m, c, output.export_path or "",
                     output.force, "--export-out")
    elif export:
        write_export(export, res.best.plan, m, c, output.export_path, output.force,
                     "--export-out")


def _mixed_file(cluster: Any) -> bool:
    """Whether ``cluster`` names a file of several GPU pools (a ``pools`` key)."""
    if not isinstance(cluster, str) or not cluster.endswith((".yaml", ".yml", ".json")) \
            or not Path(cluster).is_file():
        return False
    try:
        return is_mixed(read_structured(Path(cluster)))
    except InputError:
        return False  # the single-cluster loader says what is wrong with it


#: what a mixed-cluster solve does not take (its space: docs/mixed.md)
_NOT_MIXED = {"gpus": "--gpus", "plan": "--plan", "tokens": "--tokens", "top_k": "--top",
              "objective": "--objective", "max_virtual_stages": "--max-virtual-stages",
              "allow_idle_gpus": "--allow-idle-gpus", "even_pipeline": "--even-pipeline",
              "memory_headroom_gib": "--memory-headroom", "max_iteration_time_s": "",
              "presolve": "--no-presolve"}


def _solve_mixed(request: SolveRequest, output: SolveOutput) -> None:
    """The fastest plan on a mixed cluster (each pool alone, and stages across pools)."""
    given = [flag or name for name, flag in _NOT_MIXED.items()
             if getattr(request, name) != SolveRequest.model_fields[name].default]
    given += [flag for name, flag in (("out_path", "--out"), ("export_format", "--export"),
                                      ("export_path", "--export-out"),
                                      ("launcher", "--launcher")) if getattr(output, name)]
    if given:
        raise InputError(f"{', '.join(given)}: not taken on a mixed cluster "
                         f"({request.cluster}): the mixed search minimizes iteration time "
                         "over its own space (docs/mixed.md); planner.export.mixed writes "
                         "Megatron-LM's arguments")
    status = LazyStatus(err, not output.as_json)
    try:
        res = solve_mixed(request.model, request.cluster, fix=request.fix,
                          global_batch_size=request.global_batch_size, seq_len=request.seq_len,
                          dtype=request.dtype, backend=request.backend,
                          time_limit_s=request.time_limit_s,
                          max_microbatch=request.max_microbatch,
                          framework=request.framework, progress=status)
    finally:
        status.stop()
    if output.as_json:
        return _emit_json(res.to_json())
    print_mixed(out, res)


def _report(res: Any, m: Any, c: Any, out_path: Optional[str], json_: bool) -> None:
    """The answer as JSON or tables, with its calibration notes and the frameworks that
    run it."""
    notes = warn_calibration(c, res.best.plan)
    if json_:
        _emit_json({**res.to_json(), "calibration_notes": notes})
        return
    _print_result(res, m, c, out_path)
    if res.published and res.published["note"]:
        out.print(f"[yellow]trust:[/] {escape(res.published['note'])}", soft_wrap=True)
    if res.framework is None:
        out.print("frameworks that run this plan: " + (", ".join(res.frameworks_that_run_it or []) or (
            f"none of the catalog's as it stands (closest: {escape(res.closest_framework)}); "
            "--framework NAME searches only the plans NAME runs")), highlight=False)


def _check_export(fmt: Optional[str], path: Optional[str], json_: bool,
                  framework: Optional[str]) -> tuple[Any, Optional[str]]:
    """The --framework profile (default: that of the --export format, else None: no
    restriction) and the --export format (``framework``: the profile's); with --json the
    file must go to --export-out."""
    # `is None`, not `or`: --framework '' is an empty name (refused), not "no framework"
    profile = framework_profile(framework if framework is not None
                                else FORMAT_FRAMEWORK.get(fmt or ""))
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

    write_output_atomic(path, yaml.safe_dump(plan.to_dict(), sort_keys=False), "--out",
                        force=force)


def _print_result(res: Any, m: Any, c: Any, out_path: Optional[str]) -> None:
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
