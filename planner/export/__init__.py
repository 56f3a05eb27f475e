"""From plan to launch: a plan as Megatron-LM arguments, Megatron-Bridge recipe overrides,
a torchtitan job config or a DeepSpeed ds_config, and Megatron-LM arguments back to a plan.

Each exporter names the framework version whose argument names it follows and refuses, with
an InputError naming the field, the value and why, a plan the framework cannot run as
planned (docs/export.md has the decision for every plan field and framework).
"""

from __future__ import annotations

from planner.errors import InputError
from planner.export.common import FORMATS, Target
from planner.specs.cluster import ClusterSpec
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan
from planner.costmodel.train.evaluator import check_structure
from planner.export import bridge, deepspeed, megatron, torchtitan
from planner.export.megatron import parse_args

#: default file name suffix of each format
SUFFIX = {"megatron": "megatron.sh", "megatron-bridge": "bridge.txt",
          "torchtitan": "torchtitan.toml", "deepspeed": "ds_config.json"}


def export_plan(fmt: str, plan: Plan, model: ModelSpec, cluster: ClusterSpec) -> str:
    """The launch file of ``plan`` for ``fmt`` (one of :data:`FORMATS`), as text."""
    renderers = {"megatron": megatron.render, "megatron-bridge": bridge.render,
                 "torchtitan": torchtitan.render, "deepspeed": deepspeed.render}
    if fmt not in renderers:
        raise InputError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    check_exportable(plan, model, cluster)
    return renderers[fmt](plan, Target(model, cluster))


def check_exportable(plan: Plan, model: ModelSpec, cluster: ClusterSpec) -> None:
    """A transformer model and a plan that can run on the cluster (fewer GPUs than the
    cluster has are fine: the launch uses the plan's), else an InputError saying why."""
    if not isinstance(model, ModelSpec):
        raise InputError(f"model '{getattr(model, 'name', model)}': only transformer models "
                         "(model YAML or Hugging Face config) can be exported")
    problems = check_structure(model, cluster, plan, allow_idle_gpus=True)
    if problems:
        raise InputError(f"the plan cannot run on {cluster.name} ({cluster.num_gpus} GPUs): "
                         + "; ".join(problems))


def plan_from_megatron(text: str, model: ModelSpec, cluster: ClusterSpec
                       ) -> tuple[Plan, list[str]]:
    """The plan a Megatron-LM argument string (or exported launch script) runs, and the
    arguments ignored as having no effect on the plan's cost."""
    if not isinstance(model, ModelSpec):
        raise InputError(f"model '{getattr(model, 'name', model)}': --from megatron reads "
                         "transformer models only")
    return parse_args(text, Target(model, cluster))


__all__ = ["FORMATS", "SUFFIX", "Target", "check_exportable", "export_plan",
           "plan_from_megatron"]
