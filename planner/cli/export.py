"""``planner export``: a plan as a launch file for Megatron-LM, Megatron-Bridge, torchtitan
or DeepSpeed (planner/export)."""

from __future__ import annotations

from enum import Enum
from typing import Optional

import typer
from rich.markup import escape

from planner.cli.console import check_files, err
from planner.specs.requests import CLUSTER_HELP, FORCE_HELP, GPUS_HELP, MODEL_HELP
from planner.errors import InputError
from planner.export import export_plan
from planner.export.launch import launch_files
from planner.fileio import write_output_atomic
from planner.specs.loaders import load_cluster, load_model
from planner.specs.model import ModelSpec
from planner.specs.plan_base import build_plan


class ExportFormat(str, Enum):
    megatron = "megatron"
    megatron_bridge = "megatron-bridge"
    torchtitan = "torchtitan"
    deepspeed = "deepspeed"


class Launcher(str, Enum):
    slurm = "slurm"
    kubernetes = "kubernetes"


LAUNCHER_HELP = ("Also write how to launch it: slurm (an sbatch script running torchrun on "
                 "every node) or kubernetes (a ConfigMap and a Kubeflow PyTorchJob); --out "
                 "then names a folder for the files.")

FORMAT_HELP = ("megatron (pretrain_gpt.py arguments and a torchrun line), megatron-bridge "
               "(recipe overrides), torchtitan (TOML job config) or deepspeed (ds_config.json).")


def export(
    plan: str = typer.Argument(..., metavar="PLAN.yaml", help="Plan YAML (planner solve --out)."),
    model: str = typer.Option(..., "--model", "-m", help=MODEL_HELP),
    cluster: str = typer.Option(..., "--cluster", "-c", help=CLUSTER_HELP),
    fmt: ExportFormat = typer.Option(..., "--format", "-f", help=FORMAT_HELP),
    out_path: Optional[str] = typer.Option(None, "--out", "-o", help="Write to this file "
                                           "instead of standard output."),
    gpus: Optional[int] = typer.Option(None, "--gpus", help=GPUS_HELP),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
    launcher: Optional[Launcher] = typer.Option(None, "--launcher", help=LAUNCHER_HELP),
) -> None:
    """Write a plan as a launch file for a training framework; refuse what it cannot run."""
    if launcher is not None and not out_path:
        raise InputError(f"--launcher {launcher.value} writes several files: give --out FOLDER")
    check_files([] if launcher else [("--out", out_path)],
                [("the plan", plan), ("the model", model), ("the cluster", cluster)], force)

    m = load_model(model)
    if not isinstance(m, ModelSpec):
        raise InputError(f"--model {model}: only transformer models can be exported "
                         f"({m.name} is a {type(m).__name__})")
    c = load_cluster(cluster, gpus)
    warnings: list[str] = []
    p = build_plan(m, c, plan, [], warnings)
    for w in warnings:
        err.print(f"[yellow]warning:[/] {escape(w)}", highlight=False)
    if launcher is not None:
        assert out_path is not None
        write_launch(launcher.value, fmt.value, p, m, c, out_path, force, "--out")
        return
    write_export(fmt.value, p, m, c, out_path, force, "--out")


def write_launch(launcher: str, fmt: str, plan, model, cluster, folder: str,  # type: ignore[no-untyped-def]
                 force: bool = False, option: str = "--out") -> list[str]:
    """Write the files of :func:`planner.export.launch.launch_files` into ``folder``
    (created; an existing file is replaced only with ``force``) and name each on stderr;
    the paths written. For ``planner solve --launcher`` as well (``option`` names the
    folder in errors)."""
    files = launch_files(launcher, fmt, plan, model, cluster)  # refusals before any write
    return write_folder(files, folder, force, option, f" ({fmt}, {launcher})")


def write_folder(files: list[tuple[str, str]], folder: str, force: bool, option: str,
                 label: str = "") -> list[str]:
    """``files`` ((name, text) pairs) into ``folder`` (created; an existing file is replaced
    only with ``force``), each named on stderr; the paths written. ``option`` names the
    folder in errors."""
    import os

    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise InputError(f"{option} {folder}: cannot create the folder ({e.strerror})") from None
    if not os.path.isdir(folder):
        raise InputError(f"{option} {folder}: not a folder (it takes several files)")
    written = []
    for name, text in files:
        path = os.path.join(folder, name)
        write_output_atomic(path, text, option, force=force)
        err.print(escape(f"wrote {path}{label}"), highlight=False)
        written.append(path)
    return written


def write_export(fmt: str, plan, model, cluster, out_path: Optional[str],  # type: ignore[no-untyped-def]
                 force: bool = False, option: str = "--out") -> None:
    """Render ``plan`` for ``fmt`` and print it or write it to ``out_path`` (shared with
    ``planner solve --export``; ``option`` names the path in errors)."""
    text = export_plan(fmt, plan, model, cluster)
    if out_path:
        write_output_atomic(out_path, text, option, force=force)
        err.print(escape(f"wrote {out_path} ({fmt})"), highlight=False)
    else:
        typer.echo(text, nl=False)  # verbatim: no console wrapping or markup
