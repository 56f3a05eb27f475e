"""``planner solve``: the best plan over the search space, through :func:`planner.api.solve`."""

from __future__ import annotations

from typing import Any, Optional

from rich.markup import escape

from planner.api import solve as run_solve
from planner.api import with_headroom
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
from planner.cli.options import command
from planner.errors import InfeasibleError
from planner.specs.dlrm import DLRMSpec
from planner.specs.loaders import load_cluster, load_model
from planner.specs.requests import SolveOutput, SolveRequest


@command(SolveRequest, SolveOutput)
def solve(request: SolveRequest, output: SolveOutput) -> None:
    """Find the best parallelization plan, proven optimal over the search space."""
    profile, export = _check_export(output.export_format, output.export_path, output.as_json,
                                    request.framework)
    check_files([("--out", output.out_path), ("--export-out", output.export_path)],
                [("the model", request.model), ("the cluster", request.cluster),
                 ("the plan", request.plan)], output.force)
    # loaded here, once: the warnings and the report read them too
    m = load_model(request.model)
    c = with_headroom(load_cluster(request.cluster, request.gpus), request.memory_headroom_gib)
    request = request.model_copy(update={"model": m, "cluster": c, "gpus": None,
                                         "memory_headroom_gib": None, "framework": profile})
    if isinstance(m, DLRMSpec):  # a recommendation model: planner/cli/dlrm.py
        from planner.cli.dlrm import solve_dlrm_cli

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
    if export:
        from planner.cli.export import write_export

        write_export(export, res.best.plan, m, c, output.export_path, output.force,
                     "--export-out")


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
