"""torchtitan: a plan as a TOML job config.

Names follow torchtitan ``v0.2.2`` (commit 73a0e6979dd10b6b1904098eb3c8f62c18ab87ce),
``torchtitan/config/job_config.py`` (``[parallelism]``, ``[training]``,
``[activation_checkpoint]``, ``[compile]``, ``[quantize.linear.float8]``);
``torchtitan/distributed/parallel_dims.py`` (mesh ``pp, dp_replicate, fsdp = dp_shard x cp,
tp``, outermost first, i.e. tp-cp-dp-pp innermost first);
``torchtitan/distributed/pipeline_parallel.py`` (``module_fqns_per_model_part``:
``tok_embeddings``, ``layers.N``, ``norm``, ``output``; stage ``i`` on rank ``i % pp`` in
looped schedules); ``components/quantization/float8.py`` (converter
``quantize.linear.float8``).

Mapping: ZeRO 3 is FSDP2 over dp_shard x cp (``fsdp_reshard_after_forward = "always"``),
ZeRO 0 is DDP (``data_parallel_replicate_degree``); torchtitan has no ZeRO-1/2. TP always
runs with sequence parallelism. Refusals: the torchtitan framework profile
(hardware_catalog/frameworks/torchtitan.yaml, planner/costmodel/frameworks.py); docs/export.md.
"""

from __future__ import annotations

from planner.costmodel.pipeline import chunk_sizes
from planner.export.common import (
    Target,
    as_run,
    check_rank_order,
    comment_line,
    header,
    launch_shape,
    refuse_violations,
    uniform_recompute,
)
from planner.specs.plan import Plan

FMT = "torchtitan"
VERSION = "torchtitan v0.2.2 (commit 73a0e6979dd10b6b1904098eb3c8f62c18ab87ce)"
SOURCE = "torchtitan/config/job_config.py (pytorch/torchtitan, tag v0.2.2)"
#: planner model -> torchtitan (model.name, model.flavor) (torchtitan/models/llama3/__init__.py)
FLAVORS = {"llama3-8b": ("llama3", "8B"), "llama3-70b": ("llama3", "70B"),
           "llama3-405b": ("llama3", "405B")}
#: the KV exchange of PyTorch's ring attention: "alltoall" passes shards around the ring,
#: "allgather" gathers them all (job_config.py, context_parallel_rotate_method)
ROTATE = {"ring": "alltoall", "all_gather": "allgather"}


def refusals(p: Plan, target: Target) -> None:
    """Raise for the first plan field torchtitan cannot run as planned (the rules of the
    ``torchtitan`` framework profile, hardware_catalog/frameworks/torchtitan.yaml)."""
    refuse_violations(FMT, p, target.model)


def normalized(plan: Plan, target: Target) -> Plan:
    """The plan torchtitan runs (inert fields at their defaults), or a refusal."""
    check_rank_order(plan, target.cluster, FMT)
    p = as_run(plan, target, FMT)
    refusals(p, target)
    return p


def config(plan: Plan, target: Target) -> dict[str, dict[str, object]]:
    """The job config as TOML tables (section -> key -> value)."""
    p = normalized(plan, target)
    fsdp = p.zero_stage == 3
    par: dict[str, object] = {
        "data_parallel_replicate_degree": 1 if fsdp else p.dp,
        "data_parallel_shard_degree": p.dp if fsdp else 1,
        "tensor_parallel_degree": p.tp, "pipeline_parallel_degree": p.pp,
        "context_parallel_degree": p.cp,
        "enable_async_tensor_parallel": p.overlap_tp_comm is True}
    if fsdp:
        par["fsdp_reshard_after_forward"] = "always"  # ZeRO-3: gather again for backward
    if p.cp > 1:
        par["context_parallel_rotate_method"] = ROTATE[p.cp_comm]
    if target.model.moe is not None:
        par["expert_parallel_degree"] = p.ep
        par["expert_tensor_parallel_degree"] = p.etp
    par.update(_pipeline(p, target))
    train: dict[str, object] = {
        "local_batch_size": p.global_batch_size // p.dp if p.pp > 1 else p.microbatch_size,
        "global_batch_size": p.global_batch_size, "seq_len": p.seq_len,
        "mixed_precision_param": "bfloat16", "mixed_precision_reduce": "float32",
        "enable_cpu_offload": p.offload_params}
    out: dict[str, dict[str, object]] = {}
    if target.model.name in FLAVORS:
        name, flavor = FLAVORS[target.model.name]
        out["model"] = {"name": name, "flavor": flavor}
    if p.dtype == "fp8":
        out.setdefault("model", {})["converters"] = ["quantize.linear.float8"]
    out["training"] = train
    out["parallelism"] = par
    mode = uniform_recompute(p, target.model, FMT)
    # half: torchtitan's layer-level selective checkpointing of every second block
    out["activation_checkpoint"] = ({"mode": "selective", "selective_ac_option": "2"}
                                    if mode == "half" else {"mode": mode})
    # torch.compile fuses the norms, activations and RoPE (the plan's fused_elementwise)
    # and applies async TP
    if p.fused_elementwise or p.overlap_tp_comm is True:
        out["compile"] = {"enable": True, "components": ["model", "loss"]}
    if p.fp8_params:
        out["quantize.linear.float8"] = {"enable_fsdp_float8_all_gather": True,
                                         "precompute_float8_dynamic_scale_for_fsdp": True}
    return out


def _pipeline(p: Plan, target: Target) -> dict[str, object]:
    """Model parts by module name, in schedule order (stage i on rank i % pp), so that every
    split, uneven ones included, is stated exactly."""
    if p.pp == 1:
        return {}
    sizes = chunk_sizes(target.model.num_layers, p.pp * p.virtual_stages, p.uneven_pipeline)
    parts, start = [], 0
    for i, s in enumerate(sizes or []):
        part = ["tok_embeddings"] if i == 0 else []
        part += [f"layers.{k}" for k in range(start, start + s)]
        if i == len(sizes or []) - 1:
            part += ["norm", "output"]
        parts.append(part)
        start += s
    schedule = "Interleaved1F1B" if p.virtual_stages > 1 else "1F1B"
    return {"pipeline_parallel_schedule": schedule,
            "pipeline_parallel_microbatch_size": p.microbatch_size,
            "module_fqns_per_model_part": parts}


def _toml(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return toml_string(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    raise TypeError(f"no TOML form for {v!r}")


def toml_string(text: str) -> str:
    """A TOML basic string: quote and backslash escaped, and every character TOML forbids
    raw (controls) or a reader could take for a line end written as ``\\uXXXX``; a lone
    surrogate (no Unicode scalar value, so no TOML escape) becomes U+FFFD."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif "\ud800" <= ch <= "\udfff":
            out.append("\\ufffd")
        elif ch.isprintable() or ch == " ":
            out.append(ch)
        else:
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
    return '"' + "".join(out) + '"'


def render(plan: Plan, target: Target) -> str:
    """The TOML file: header comments (version, launch line), then the tables."""
    cfg = config(plan, target)
    nodes, per_node = launch_shape(plan, target.cluster, FMT)
    lines = header(FMT, VERSION, SOURCE, target, plan)
    lines += [f"# launch: torchrun --nnodes {nodes} --nproc-per-node {per_node} "
              "-m torchtitan.train --job.config_file THIS_FILE",
              "# add [job], [optimizer], [lr_scheduler], dataset and checkpoint settings"]
    if "model" not in cfg or "name" not in cfg["model"]:
        lines.append(comment_line(f"[model] name/flavor: '{target.model.name}' has no "
                                  "torchtitan flavor known to this exporter; set them"))
    for section, table in cfg.items():
        lines += ["", f"[{section}]"] + [f"{k} = {_toml(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"
