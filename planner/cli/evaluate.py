"""``planner evaluate``: what one training plan costs (a DLRM sharding: planner/cli/dlrm.py)."""

from __future__ import annotations

from typing import Any, Optional

import typer
from rich.markup import escape

from planner.api import with_headroom
# the help of the options evaluate shares with the requests' (declared there)
from planner.specs.requests import CLUSTER_HELP, FORCE_HELP, GPUS_HELP, HEADROOM_HELP, MODEL_HELP
from planner.cli.console import (
    _emit_json,
    check_files,
    err,
    out,
    warn_calibration,
    warn_context_length,
)
from planner.api import evaluate as run_evaluate
from planner.cli.dlrm import evaluate_dlrm_cli
from planner.costmodel.frameworks import show, unstated_defaults, violations
from planner.costmodel.network import PlacementError, domain_factors
from planner.costmodel.runtime import apply_profile
from planner.errors import InputError
from planner.export import plan_from_megatron
from planner.export.megatron import command_words, tokenize
from planner.export.readback import (
    deepspeed_launch_from_header,
    plan_from_deepspeed,
    plan_from_torchtitan,
)
from planner.fileio import read_user_file
from planner.report.plots import plot_breakdown
from planner.report.text import print_estimate
from planner.specs.framework import load_framework
from planner.specs.loaders import load_cluster, load_model, parse_override
from planner.specs.plan_base import build_plan


def _overrides(sets: list[str], shortcuts: dict[str, Any]) -> list[tuple[str, Any]]:
    pairs = [parse_override(s) for s in sets]
    pairs += [(k, v) for k, v in shortcuts.items() if v is not None]
    return pairs


#: words that stand for elided arguments when pasted from documentation
ELISIONS = ("...", "\u2026")


def _refuse_elisions(text: str) -> None:
    """A pasted ``...`` is no argument: the arguments it stands for would be read as
    absent and their defaults costed instead, silently."""
    try:
        launcher, words = command_words(text)
    except ValueError:
        return  # the parser names the unreadable script
    at = [i + 1 for i, w in enumerate([*launcher, *words]) if w in ELISIONS]
    if at:
        raise InputError(f"--from megatron: a literal '...' (word {', '.join(map(str, at))}) "
                         "stands for arguments left out; the planner would cost their "
                         "defaults instead; give the whole argument string (or @FILE)")


def batch_default_note(text: str, plan: Any) -> str | None:
    """What decided the global batch when the arguments give no ``--global-batch-size``
    (Megatron-LM's default: one microbatch per data-parallel rank)."""
    if "--global-batch-size" in tokenize(text)[0]:
        return None
    return (f"global batch {plan.global_batch_size:,} = micro {plan.microbatch_size} x dp "
            f"{plan.dp} (no --global-batch-size given)")


#: what ``--from`` reads
FROM_FORMATS = ("megatron", "torchtitan", "deepspeed")


def _plan_from(fmt: Optional[str], args: Optional[str], plan: Optional[str], m: Any, c: Any,
               warnings: list[str], notes: list[str], launch: Optional[str] = None) -> Any:
    """The plan a framework's arguments or file run (``--from megatron "ARGS"``,
    ``--from torchtitan FILE.toml``, ``--from deepspeed FILE.json``); what was ignored goes
    to ``warnings``, the defaults that decided the plan to ``notes``."""
    if fmt not in FROM_FORMATS:
        raise InputError(f"--from {fmt!r}: expected {', '.join(FROM_FORMATS)}" if fmt else
                         f"no such option or argument: {args!r} (framework arguments need "
                         "--from megatron, torchtitan or deepspeed)")
    what = "the argument string (ARGS or @FILE)" if fmt == "megatron" else "the file (FILE)"
    if not args or plan:
        raise InputError(f"--from {fmt} needs {what} and no --plan")
    if launch is not None and fmt != "deepspeed":
        raise InputError(f"--launch-line is for --from deepspeed, not --from {fmt}")

    if fmt != "megatron":
        path = args[1:] if args.startswith("@") else args
        text = read_user_file(path, f"--from {fmt} FILE")
        if fmt == "torchtitan":
            p, ignored = plan_from_torchtitan(text, m, c)
        else:
            line, source = _launch_line(path, text, launch)
            notes.append(f"world from the launch line ({source})")
            p, ignored = plan_from_deepspeed(text, line, m, c)
        if ignored:
            warnings.append("ignored (no effect on the plan's cost): " + " ".join(ignored))
        return p
    text = args
    if args.startswith("@"):
        text = read_user_file(args[1:], "--from megatron @FILE")
    _refuse_elisions(text)
    p, ignored = plan_from_megatron(text, m, c)
    if ignored:
        warnings.append("ignored (no effect on the plan's cost): " + " ".join(ignored))
    if (note := batch_default_note(text, p)) is not None:
        notes.append(note)
    return p


#: the files next to a ds_config that hold its launch line, in the order tried
LAUNCH_SIBLINGS = ("{stem}.launch.sh", "launch.sh")


def _launch_line(path: str, text: str, launch: Optional[str]) -> tuple[str, str]:
    """(the DeepSpeed launch line, where it came from): ``--launch-line`` (text or @FILE),
    else a sibling file (``NAME.launch.sh`` for ``NAME.json``, or ``launch.sh``), else the
    ``launch:`` line the planner's export header records."""
    import os

    if launch is not None:
        if launch.startswith("@"):
            return read_user_file(launch[1:], "--launch-line @FILE"), launch[1:]
        return launch, "--launch-line"
    folder, name = os.path.split(path)
    stem = name[:-5] if name.endswith(".json") else name
    for pattern in LAUNCH_SIBLINGS:
        sib = os.path.join(folder, pattern.format(stem=stem))
        if os.path.isfile(sib):
            return read_user_file(sib, "the launch line file"), sib
    line = deepspeed_launch_from_header(text)
    if line is not None:
        return line, "the file's planner_export header"
    raise InputError(f"--from deepspeed {path}: no launch line: give --launch-line "
                     "\"deepspeed --num_nodes N --num_gpus G train.py ...\" (or @FILE), or put "
                     f"it in {' or '.join(p.format(stem=stem) for p in LAUNCH_SIBLINGS)} next "
                     "to the file; the ds_config alone does not say how many GPUs run it")


def _framework_kernels(name: Optional[str], cluster: Any) -> Any:
    """The cluster costed with framework ``name``'s kernels (itself without a framework)."""
    if name is None:
        return cluster

    return apply_profile(cluster, load_framework(name))


def _framework_fill(name: Optional[str], notes: list[str]) -> Any:
    """What a plan leaves unstated, at framework ``name``'s defaults (None without one);
    each field it decides is named in ``notes``."""
    if name is None:
        return None

    profile = load_framework(name)

    def fill(data: dict) -> dict:
        out = unstated_defaults(profile, data)
        for k, v in out.items():
            if k not in data or data[k] is None:
                notes.append(f"{k}={show(v)} (unstated: framework {profile.name}'s default)")
        return out

    return fill


def _framework_violations(name: Optional[str], plan: Any, m: Any, c: Any) -> list[str]:
    """Every rule of framework ``name`` the plan breaks, each printed as a warning on
    stderr ("framework F cannot run this plan: field=value: why")."""
    if name is None:
        return []

    profile = load_framework(name)
    found = [str(v) for v in violations(profile, plan, m, c)]
    for v in found:
        err.print(f"[yellow]warning:[/] framework {escape(profile.name)} cannot run this "
                  f"plan: {escape(v)}")
    return found


def evaluate(
    model: str = typer.Option(..., "--model", "-m", help=MODEL_HELP),
    cluster: str = typer.Option(..., "--cluster", "-c", help=CLUSTER_HELP),
    plan: Optional[str] = typer.Option(None, "--plan", "-p", help="Plan YAML (see docs/formats.md); for a DLRM model, its sharding: the --out file of planner solve, or tables: (docs/dlrm.md)."),
    gpus: Optional[int] = typer.Option(None, "--gpus", help=GPUS_HELP),
    set_: list[str] = typer.Option([], "--set", metavar="FIELD=VALUE", help="Override a plan field: FIELD=VALUE (repeatable)."),
    tp: Optional[int] = typer.Option(None, "--tp", help="Tensor-parallel degree."),
    pp: Optional[int] = typer.Option(None, "--pp", help="Pipeline-parallel degree."),
    dp: Optional[int] = typer.Option(None, "--dp", help="Data-parallel degree (default: GPUs / (tp cp pp))."),
    cp: Optional[int] = typer.Option(None, "--cp", help="Context-parallel degree."),
    mbs: Optional[int] = typer.Option(None, "--mbs", help="Microbatch size (sequences)."),
    global_batch: Optional[int] = typer.Option(None, "--global-batch", help="Global batch (sequences)."),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help="Sequence length (tokens)."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="bf16, fp16 or fp8."),
    json_: bool = typer.Option(False, "--json", help="Print the stable JSON object instead of tables."),
    plot: Optional[str] = typer.Option(None, "--plot", help="Write a stacked-bar PNG of the time breakdown."),
    memory_headroom: Optional[float] = typer.Option(None, "--memory-headroom", help=HEADROOM_HELP),
    from_: Optional[str] = typer.Option(None, "--from", metavar="FORMAT", help="Read the plan "
                                        "from a framework's arguments: megatron (ARGS is a "
                                        "Megatron-LM argument string, or @FILE), torchtitan "
                                        "(ARGS is a TOML job config file) or deepspeed (ARGS "
                                        "is a ds_config.json; see --launch-line)."),
    launch_line: Optional[str] = typer.Option(None, "--launch-line", metavar="LINE", help=(
        "With --from deepspeed: the launch line (deepspeed --num_nodes N --num_gpus G ... or "
        "torchrun --nnodes N --nproc-per-node G ...), or @FILE; default: NAME.launch.sh or "
        "launch.sh next to the ds_config, else the planner export header's launch line.")),
    args: Optional[str] = typer.Argument(None, metavar="[ARGS]", help="With --from: the "
                                         "framework's arguments (or @FILE)."),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
    framework: Optional[str] = typer.Option(None, "--framework", help="Cost the plan as a "
                                            "framework runs it (planner catalog frameworks): "
                                            "settings the plan leaves unstated take the "
                                            "framework's defaults (named in the output), and "
                                            "each rule it breaks is reported."),
) -> None:
    """Predict what one training plan costs: iteration time, memory, MFU and breakdowns
    (a DLRM model: what a sharding plan costs, per rank)."""
    argfile = (args[1:] if args and args.startswith("@") else
               args if args and from_ in ("torchtitan", "deepspeed") else None)
    check_files([("--plot", plot)], [("the model", model), ("the cluster", cluster),
                                     ("the plan", plan), ("the argument file", argfile)], force)
    m = load_model(model)
    c = with_headroom(load_cluster(cluster, gpus), memory_headroom)
    if getattr(m, "kind", None) == "dlrm":  # a sharding plan: planner/cli/dlrm.py

        return evaluate_dlrm_cli(m, c, plan, json_=json_, global_batch=global_batch,
                                 transformer_only={
                                     "--set": set_, "--tp": tp, "--pp": pp, "--dp": dp,
                                     "--cp": cp, "--mbs": mbs, "--seq-len": seq_len,
                                     "--dtype": dtype, "--plot": plot, "--from": from_,
                                     "ARGS": args, "--framework": framework,
                                     "--launch-line": launch_line})
    warn_context_length(m, seq_len, bool(plan) or any(x.startswith("seq_len=") for x in set_))
    warnings: list[str] = []
    defaults: list[str] = []  # defaults that decided the plan, named in the output
    shortcuts = dict(tp=tp, pp=pp, dp=dp, cp=cp, microbatch_size=mbs,
                     global_batch_size=global_batch, seq_len=seq_len, dtype=dtype)
    overrides = _overrides(set_, shortcuts)
    if (from_ or args) and overrides:
        raise InputError(f"--from {from_ or 'megatron'} takes the whole plan from ARGS; drop "
                         f"{', '.join(k for k, _ in overrides)} (or put them in ARGS)")
    if launch_line is not None and not from_:
        raise InputError("--launch-line needs --from deepspeed")
    p = (_plan_from(from_, args, plan, m, c, warnings, defaults, launch_line) if from_ or args
         else build_plan(m, c, plan, overrides, warnings, _framework_fill(framework, defaults)))
    broken = _framework_violations(framework, p, m, c)
    c = _framework_kernels(framework, c)
    for w in warnings:
        err.print(f"[yellow]warning:[/] {escape(w)}")
    est = run_evaluate(m, c, p, framework=framework or None)
    _show(m, c, p, est, warn_calibration(c, p), defaults, (framework, broken), plot, force,
          json_)
    if not est.feasible:
        raise typer.Exit(1)


def _show(m: Any, c: Any, p: Any, est: Any, notes: list[str], defaults: list[str],
          checked: tuple[Optional[str], Any], plot: Optional[str], force: bool,
          json_: bool) -> None:
    """The estimate as JSON or tables (and the plot), with the defaults that decided it."""
    framework, broken = checked
    if plot:
        plot_breakdown([(f"{m.name} on {c.num_gpus}x {c.gpu.name}", est)], plot, force=force)
    if json_:
        fw = {} if framework is None else {"framework": {"name": framework,
                                                         "violations": broken}}
        _emit_json({"plan": p.to_dict(), **est.to_json(), "calibration_notes": notes,
                    "defaults": defaults, **fw})
    else:
        try:
            domain = domain_factors(p, c.domain_size)
        except PlacementError:
            domain = None
        print_estimate(out, f"{m.name} on {c.name} ({c.num_gpus}x {c.gpu.name})", p, est, domain)
        for d in defaults:
            out.print(f"default: {escape(d)}", highlight=False, soft_wrap=True)
        if plot:
            out.print(f"wrote {plot}")
