"""Megatron-LM: a plan as ``pretrain_gpt.py`` arguments with a ``torchrun`` line, and back.

Argument names follow Megatron-LM ``core_v0.15.3`` (commit
309ffca6a40553362d44fd17efc56b772fa1aa44), ``megatron/training/arguments.py`` (the last
release whose parser lists every argument by name; later releases generate them from
dataclasses with the same names). Layer splits follow
``megatron/core/transformer/transformer_block.py`` (``get_num_layers_to_build``: the first
and last stage sizes apply to every virtual chunk of that rank) and
``megatron/core/transformer/pipeline_parallel_layer_layout.py`` (the layout string, chunks
in the order ``vp_rank * pp + pp_rank``).

What Megatron-LM cannot run as planned is refused (:func:`refusals`): ZeRO 2/3 and offload
(its sharding is the distributed optimizer, ZeRO-1), a per-layer-type recomputation mix,
reduce-scatter TP without sequence parallelism, a placement its rank order cannot produce;
docs/export.md has the table for every field and framework.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from planner.costmodel.pipeline import END_ONLY_CHUNKS, block_recompute_runs_half, chunk_sizes
from planner.errors import InputError
from planner.export.common import (
    MEGATRON_ORDER,
    MEGATRON_TP_PP_DP_ORDER,
    Target,
    as_run,
    canonical_placement,
    check_rank_order,
    half_block_layers,
    half_block_or_refuse,
    header,
    launch_shape,
    recompute_field,
    refuse,
    refuse_violations,
)
from planner.export.shell import command_words, unresolved_names
from planner.specs.plan import Plan
from planner.specs.validate import _short

FMT = "megatron"
VERSION = "Megatron-LM core_v0.15.3 (commit 309ffca6a40553362d44fd17efc56b772fa1aa44)"
SOURCE = "megatron/training/arguments.py (NVIDIA/Megatron-LM, tag core_v0.15.3)"
#: planner cp_comm -> --cp-comm-type; passed to TransformerConfig.cp_comm_type, whose values are
#: "p2p", "all_gather", "a2a", "a2a+p2p" (transformer_config.py; the arguments.py help says "allgather")
CP_COMM = {"ring": "p2p", "all_to_all": "a2a", "all_gather": "all_gather"}
#: --moe-token-dispatcher-type the cost model costs (planner/costmodel/moe.py: all-to-all
#: over the EP group); Megatron's default is "allgather" (arguments.py, core_v0.15.3)
DISPATCHER = "alltoall"


def refusals(plan: Plan, target: Target, fmt: str = FMT) -> None:
    """Raise for the first plan field Megatron-LM cannot run as planned: the rules of
    ``fmt``'s framework profile (megatron-core; nemo for Megatron-Bridge), stated in
    hardware_catalog/frameworks/ and checked by planner/costmodel/frameworks.py."""
    refuse_violations(fmt, plan, target.model)


def normalized(plan: Plan, target: Target, fmt: str = FMT) -> Plan:
    """The plan Megatron-LM runs: :func:`planner.export.common.as_run` in Megatron's rank
    order (refusing a placement it cannot produce); what :func:`parse_args` returns.
    ``fmt`` names the export in refusals and picks its profile (Megatron-Bridge runs
    Megatron-Core under its own recipes' rules)."""
    order = check_rank_order(plan, target.cluster, fmt)
    refusals(plan, target, fmt)
    return as_run(plan, target, fmt, order)


def to_args(plan: Plan, target: Target) -> list[str]:
    """``pretrain_gpt.py`` arguments for the plan (model shape, parallelism, batch,
    precision, overlaps). Data, tokenizer, optimizer and checkpoint arguments are the user's."""
    p = normalized(plan, target)
    args = _model_args(p, target) + _parallel_args(p) + _pipeline_args(p, target)
    args += _recompute_args(p, target) + _precision_args(p) + _overlap_args(p)
    return args


def _model_args(p: Plan, target: Target) -> list[str]:
    """The model's shape and architecture (Megatron's defaults are GPT's: LayerNorm, learned
    positions, GELU, biases, tied embeddings, dropout 0.1), sequence and batch."""
    m = target.model
    out = ["--num-layers", str(m.num_layers), "--hidden-size", str(m.hidden_size),
           "--ffn-hidden-size", str(m.ffn_hidden_size),
           "--num-attention-heads", str(m.num_attention_heads)]
    if m.kv_heads != m.num_attention_heads:
        out += ["--group-query-attention", "--num-query-groups", str(m.kv_heads)]
    out += _arch_args(target)
    out += ["--seq-length", str(p.seq_len),
            "--max-position-embeddings", str(max(p.seq_len, m.seq_len))]
    return out + ["--micro-batch-size", str(p.microbatch_size),
                  "--global-batch-size", str(p.global_batch_size)]


#: planner position_embedding -> --position-embedding-type
POSITION = {"rope": "rope", "learned": "learned_absolute", "none": "none"}


def _arch_args(target: Target) -> list[str]:
    m = target.model
    out = ["--normalization", "RMSNorm" if m.norm_type == "rmsnorm" else "LayerNorm",
           "--position-embedding-type", POSITION[m.position_embedding]]
    if m.position_embedding == "rope":
        out += ["--rotary-base", _rotary_base(m.rope_theta)]
    out += [flag for flag, on in (("--swiglu", m.ffn_type == "swiglu"),
                                  ("--disable-bias-linear", not m.bias),
                                  ("--untie-embeddings-and-output-weights", not m.tied_embeddings))
            if on]
    if not m.dropout:
        out += ["--attention-dropout", "0.0", "--hidden-dropout", "0.0"]
    if m.mla is not None:
        rope = m.mla.qk_rope_head_dim
        out += ["--multi-latent-attention"]
        if m.mla.q_lora_rank:
            out += ["--q-lora-rank", str(m.mla.q_lora_rank)]
        out += ["--kv-lora-rank", str(m.mla.kv_lora_rank), "--qk-head-dim", str(m.dim_head - rope),
                "--qk-pos-emb-head-dim", str(rope), "--v-head-dim", str(m.mla.v_head_dim)]
    elif m.head_dim is not None:
        out += ["--kv-channels", str(m.head_dim)]
    return out + _moe_args(target)


def _rotary_base(theta: float) -> str:
    """``--rotary-base`` is an integer argument (arguments.py, default 10000)."""
    if theta != int(theta):
        raise InputError(f"cannot export to {FMT}: rope_theta={theta!r}: Megatron-LM's "
                         "--rotary-base takes an integer")
    return str(int(theta))


def _moe_args(target: Target) -> list[str]:
    """Experts, their FFN, shared experts, capacity and which layers are MoE
    (``--moe-layer-freq`` as a pattern such as ``([0]*3+[1]*58)``, 1 = MoE)."""
    m, moe = target.model, target.model.moe
    if moe is None:
        return []
    # the cost model costs all-to-all token dispatch; Megatron's default is allgather
    out = ["--num-experts", str(moe.num_experts), "--moe-router-topk", str(moe.top_k),
           "--moe-ffn-hidden-size", str(moe.expert_ffn_hidden_size),
           "--moe-token-dispatcher-type", DISPATCHER]
    if moe.num_shared_experts:
        size = moe.shared_expert_ffn_hidden_size or moe.expert_ffn_hidden_size
        out += ["--moe-shared-expert-intermediate-size", str(moe.num_shared_experts * size)]
    if moe.capacity_factor is not None:
        out += ["--moe-expert-capacity-factor", repr(moe.capacity_factor)]
    kinds = [1 if k == "moe" else 0 for k in m.layer_kinds()]
    if 0 in kinds:
        runs: list[list[int]] = []
        for k in kinds:
            if runs and runs[-1][0] == k:
                runs[-1][1] += 1
            else:
                runs.append([k, 1])
        out += ["--moe-layer-freq", "(" + "+".join(f"[{k}]*{n}" for k, n in runs) + ")"]
    return out


def _parallel_args(p: Plan) -> list[str]:
    out = ["--tensor-model-parallel-size", str(p.tp),
           "--pipeline-model-parallel-size", str(p.pp),
           "--context-parallel-size", str(p.cp)]
    if p.cp > 1:
        out += ["--cp-comm-type", CP_COMM[p.cp_comm]]
    if p.sequence_parallel:
        out.append("--sequence-parallel")
    if p.ep > 1:
        out += ["--expert-model-parallel-size", str(p.ep)]
    if p.expert_tp is not None:
        out += ["--expert-tensor-parallel-size", str(p.expert_tp)]
    if tuple(p.placement.order) == MEGATRON_TP_PP_DP_ORDER:
        out.append("--use-tp-pp-dp-mapping")
    if p.zero_stage == 1:
        out.append("--use-distributed-optimizer")
    return out


def _pipeline_args(p: Plan, target: Target) -> list[str]:
    """Even splits: ``--num-layers-per-virtual-pipeline-stage``. Uneven ones: first/last
    stage sizes when only the two end stages are lighter (no interleaving), else the layout
    string, which states every chunk."""
    layers, n = target.model.num_layers, p.pp * p.virtual_stages
    sizes = chunk_sizes(layers, n, p.uneven_pipeline) or []
    if not p.uneven_pipeline:
        if p.virtual_stages > 1:
            return ["--num-layers-per-virtual-pipeline-stage", str(sizes[0])]
        return []
    if p.virtual_stages == 1 and len(set(sizes[1:-1])) <= 1 and min(sizes) > 0:
        return ["--decoder-first-pipeline-num-layers", str(sizes[0]),
                "--decoder-last-pipeline-num-layers", str(sizes[-1])]
    return ["--pipeline-model-parallel-layout", layout_string(sizes)]


def layout_string(sizes: list[int]) -> str:
    """Megatron's layout: embedding ``E`` first, loss ``L`` last, chunks split by ``|``;
    runs of equal middle chunks written ``(t*k|)*n``; an end chunk without a layer is the
    embedding or the loss alone (``E|``, ``|L``: Llama 3's layout, :func:`chunk_sizes`)."""
    stages = [f"t*{s}" if s else "" for s in sizes]
    out, i = f"E{stages[0]}|", 1
    while i < len(stages) - 1:
        j = i
        while j + 1 < len(stages) - 1 and stages[j + 1] == stages[i]:
            j += 1
        out += f"({stages[i]}|)*{j - i + 1}" if j > i else f"{stages[i]}|"
        i = j + 1
    return out + f"{stages[-1]}L"


def _recompute_args(p: Plan, target: Target) -> list[str]:
    value = p.recompute_for(target.model.layer_types[0])
    if value == "selective":
        return ["--recompute-granularity", "selective"]
    if value == "full":  # every layer's input kept, the layer recomputed: uniform, 1 layer
        return ["--recompute-granularity", "full", "--recompute-method", "uniform",
                "--recompute-num-layers", "1"]
    if value == "half":  # block: the first n layers of every chunk, n = half the largest
        return ["--recompute-granularity", "full", "--recompute-method", "block",
                "--recompute-num-layers", str(half_block_or_refuse(
                    target.model.num_layers, p.pp * p.virtual_stages, p.uneven_pipeline, FMT))]
    return []


def _precision_args(p: Plan) -> list[str]:
    out = ["--fp16"] if p.dtype == "fp16" else ["--bf16"]
    if p.dtype == "fp8":
        out += ["--fp8-format", "hybrid"]
    if p.fp8_params:
        out.append("--fp8-param-gather")
    if p.grad_reduce_dtype == "bf16":
        out.append("--grad-reduce-in-bf16")
    elif p.dtype == "fp16":
        out.append("--accumulate-allreduce-grads-in-fp32")  # bf16 runs do it by default
    out += ["--attention-backend", "flash" if p.attention == "flash" else "unfused"]
    return out


def _overlap_args(p: Plan) -> list[str]:
    out = []
    if p.overlap_dp_grad_reduce:
        out.append("--overlap-grad-reduce")
    if p.zero_stage == 1 and p.overlap_param_gather:
        out.append("--overlap-param-gather")
    if p.overlap_tp_comm is True:
        out.append("--tp-comm-overlap")
    if p.virtual_stages > 1 and not p.overlap_p2p_comm:
        out.append("--no-overlap-p2p-communication")
    if p.overlap_moe_ep_comm:
        out.append("--overlap-moe-expert-parallel-comm")
    return out


def render(plan: Plan, target: Target) -> str:
    """A launch script: header comments, then one ``torchrun`` command whose arguments
    ``planner evaluate --from megatron @FILE`` reads back."""
    args = to_args(plan, target)
    nodes, per_node = launch_shape(plan, target.cluster, FMT)
    lines = ["#!/usr/bin/env bash"] + header(FMT, VERSION, SOURCE, target, plan)
    lines += ["# Add data, tokenizer, optimizer and checkpoint arguments (or pass them to this",
              "# script: \"$@\"). Run once per node with NODE_RANK and MASTER_ADDR set.",
              "# validate_args asserts this for tp > 1 or cp > 1 before Blackwell (arguments.py);",
              "# Megatron-LM's examples export it for every run.",
              "export CUDA_DEVICE_MAX_CONNECTIONS=1"]
    launch = (f"torchrun --nnodes {nodes} --nproc-per-node {per_node} "
              '--node-rank "${NODE_RANK:-0}" --master-addr "${MASTER_ADDR:-localhost}" '
              "--master-port 6000 pretrain_gpt.py")
    body, i = [], 0
    while i < len(args):
        j = i + 1
        while j < len(args) and not args[j].startswith("--"):
            j += 1
        body.append("  " + " ".join(shlex.quote(a) for a in args[i:j]))
        i = j
    lines.append(launch + " \\")
    lines += [b + " \\" for b in body] + ['  "$@"']
    return "\n".join(lines) + "\n"


# ---- the reverse: Megatron-LM arguments -> plan ------------------------------------------

_INT = {"--tensor-model-parallel-size": "tp", "--pipeline-model-parallel-size": "pp",
        "--context-parallel-size": "cp", "--expert-model-parallel-size": "ep",
        "--expert-tensor-parallel-size": "expert_tp", "--micro-batch-size": "microbatch_size",
        "--global-batch-size": "global_batch_size", "--seq-length": "seq_len",
        "--num-layers": "num_layers", "--hidden-size": "hidden_size",
        "--num-attention-heads": "num_attention_heads", "--ffn-hidden-size": "ffn_hidden_size",
        "--num-query-groups": "kv_heads", "--num-experts": "num_experts",
        "--moe-router-topk": "top_k", "--max-position-embeddings": "max_positions",
        "--num-layers-per-virtual-pipeline-stage": "layers_per_vstage",
        "--num-virtual-stages-per-pipeline-rank": "vstages",
        "--decoder-first-pipeline-num-layers": "first", "--decoder-last-pipeline-num-layers": "last",
        "--recompute-num-layers": "recompute_num_layers", "--nnodes": "nnodes",
        "--nproc-per-node": "nproc", "--nproc_per_node": "nproc"}
_STR = {"--recompute-granularity": "granularity", "--recompute-method": "method",
        "--fp8-format": "fp8", "--attention-backend": "attention",
        "--pipeline-model-parallel-layout": "layout",
        "--moe-token-dispatcher-type": "dispatcher"}
_LIST = {"--cp-comm-type": "cp_comm_type", "--recompute-modules": "recompute_modules"}
_FLAGS = {"--sequence-parallel", "--use-distributed-optimizer", "--overlap-grad-reduce",
          "--overlap-param-gather", "--tp-comm-overlap", "--no-overlap-p2p-communication",
          "--bf16", "--fp16", "--fp8-param-gather", "--grad-reduce-in-bf16",
          "--accumulate-allreduce-grads-in-fp32", "--use-tp-pp-dp-mapping", "--use-flash-attn",
          "--recompute-activations", "--group-query-attention",
          "--overlap-moe-expert-parallel-comm"}
#: architecture arguments: the model is -m's (shape arguments above are checked against it)
_ARCH = {"--normalization", "--position-embedding-type", "--swiglu", "--disable-bias-linear",
         "--untie-embeddings-and-output-weights", "--attention-dropout", "--hidden-dropout",
         "--kv-channels", "--multi-latent-attention", "--q-lora-rank", "--kv-lora-rank",
         "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim", "--moe-ffn-hidden-size",
         "--moe-layer-freq", "--moe-shared-expert-intermediate-size",
         "--moe-expert-capacity-factor", "--rotary-base"}
#: arguments that change what runs in ways the planner does not model: refused by name
UNSUPPORTED = {
    "--optimizer-cpu-offload": "CPU offload of Megatron's optimizer is not modelled",
    "--use-megatron-fsdp": "Megatron-FSDP: export/evaluate the plan with zero_stage 2/3",
    "--use-torch-fsdp2": "torch FSDP2: evaluate the plan with zero_stage 3",
    "--data-parallel-sharding-strategy": "Megatron-FSDP sharding: use zero_stage instead",
    "--distribute-saved-activations": "distributed saved activations are not modelled",
    "--account-for-embedding-in-pipeline-split": "the planner's splits count layers only",
    "--account-for-loss-in-pipeline-split": "the planner's splits count layers only",
    "--hierarchical-context-parallel-sizes": "hierarchical CP (a2a+p2p) is not modelled",
    "--microbatch-group-size-per-virtual-pipeline-stage": "the planner models Megatron's "
    "default interleaved schedule",
    "--model-parallel-size": "use --tensor-model-parallel-size",
    "--fp4-format": "FP4 is not modelled",
    "--num-layers-per-stage": "not a Megatron-LM argument; use the layout",
}


def tokenize(text: str) -> tuple[dict[str, Any], list[str]]:
    """Arguments (flag -> value, True for switches, a list for ``nargs='+'``) and the
    arguments ignored; a launcher before ``*.py`` contributes only its node shape."""
    try:
        launcher, toks = command_words(text)
    except ValueError as e:  # an unclosed quote, shell syntax beyond assignments
        raise InputError(f"--from megatron: cannot read the script: {e}") from None
    got: dict[str, Any] = {}
    ignored: list[str] = []
    for flag, vals in _groups(launcher):
        if flag in ("--nnodes", "--nproc-per-node", "--nproc_per_node"):
            got[flag] = _one(flag, _resolved(flag, vals))
    for flag, vals in _groups(toks):
        if unresolved_names(flag):
            raise InputError(f"--from megatron: {_unresolved_message(flag)} where an argument "
                             "name is expected; define it in the script")
        if flag in UNSUPPORTED:
            raise InputError(f"--from megatron: {flag}: {UNSUPPORTED[flag]}")
        if flag in _FLAGS:
            got[flag] = True
        elif flag in _LIST:
            got[flag] = _resolved(flag, vals)
        elif flag in _INT or flag in _STR:
            got[flag] = _one(flag, _resolved(flag, vals))
        elif flag in _ARCH:
            got[flag] = _resolved(flag, vals)
        else:
            ignored.append(flag)
    return got, ignored


def _unresolved_message(word: str) -> str:
    names = unresolved_names(word)
    return (f"{', '.join(_short(n) for n in names)}: not defined in the script (the planner "
            "expands the script's own assignments and arrays, not the environment, "
            "positional arguments, arithmetic or command output)")


def _resolved(flag: str, vals: list[str]) -> list[str]:
    """The values of an argument the planner reads, refused when one holds a variable the
    script does not define."""
    for v in vals:
        if unresolved_names(v):
            raise InputError(f"--from megatron: {flag}: {_unresolved_message(v)}")
    return vals


def _groups(toks: list[str]) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for t in toks:
        if t.startswith("--"):
            flag, eq, val = t.partition("=")
            out.append((flag, [val] if eq else []))
        elif out and t != "$@":
            out[-1][1].append(t)
    return out


def _one(flag: str, vals: list[str]) -> str:
    if len(vals) != 1:
        raise InputError(f"--from megatron: {flag}: expected one value, got {vals or 'none'}")
    return vals[0]


def _int(got: dict[str, Any], flag: str, default: int | None = None) -> int | None:
    if flag not in got:
        return default
    try:
        v = int(got[flag])
    except ValueError:
        raise InputError(f"--from megatron: {flag}: expected an integer, got {got[flag]!r}") from None
    if v < 0 or (v == 0 and flag not in ("--decoder-first-pipeline-num-layers",
                                         "--decoder-last-pipeline-num-layers")):
        raise InputError(f"--from megatron: {flag}: expected a positive integer, got {v}")
    return v


def parse_args(text: str, target: Target) -> tuple[Plan, list[str]]:
    """The plan a Megatron-LM argument string runs on ``target``'s cluster, and the
    arguments that were ignored (data, optimizer, logging: no effect on the plan's cost).
    Arguments the planner cannot model raise :class:`InputError` naming them."""
    got, ignored = tokenize(text)
    _check_model(got, target)
    data: dict[str, Any] = {d: _int(got, f, 1) for f, d in (
        ("--tensor-model-parallel-size", "tp"), ("--pipeline-model-parallel-size", "pp"),
        ("--context-parallel-size", "cp"), ("--expert-model-parallel-size", "ep"))}
    data["expert_tp"] = _int(got, "--expert-tensor-parallel-size")
    data["dp"] = _dp(got, data, target)
    data["microbatch_size"] = _int(got, "--micro-batch-size", 1)
    data["global_batch_size"] = _int(got, "--global-batch-size",
                                     data["microbatch_size"] * data["dp"])
    data["seq_len"] = _int(got, "--seq-length", target.model.seq_len)
    data.update(_pipeline_from(got, data["pp"], target))
    data.update(_precision_from(got))
    data.update(_switches_from(got, data, target))
    data["recompute"] = recompute_field(_recompute_from(got, data, target.model), target.model)
    order = MEGATRON_TP_PP_DP_ORDER if got.get("--use-tp-pp-dp-mapping") else MEGATRON_ORDER
    try:
        plan = Plan.model_validate(data)
    except ValueError as e:
        raise InputError(f"--from megatron: {e}") from None
    plan = plan.model_copy(update={"placement": plan.placement.model_validate(
        canonical_placement(plan, target.cluster, order))})
    _check_defaults(got, target)
    return Plan.model_validate(plan.to_dict()), ignored


def _check_defaults(got: dict[str, Any], target: Target) -> None:
    """Architecture arguments with Megatron-LM's defaults for the absent ones
    (arguments.py, core_v0.15.3: LayerNorm, learned absolute positions, GELU, biases, tied
    embeddings, dropout 0.1, RoPE base 10000; allgather token dispatch) must be the model's
    and what the cost model costs."""
    m = target.model
    said = {f: " ".join(got[f]) if f in got else d for f, d in (
        ("--normalization", "LayerNorm"), ("--position-embedding-type", "learned_absolute"))}
    want = {"--normalization": "RMSNorm" if m.norm_type == "rmsnorm" else "LayerNorm",
            "--position-embedding-type": POSITION[m.position_embedding]}
    for flag, value in said.items():
        if value != want[flag]:
            raise InputError(f"--from megatron: {flag} {value} (Megatron-LM's default when "
                             f"absent) describes a different model than '{m.name}' "
                             f"({want[flag]}); add {flag} {want[flag]} or pass the matching -m")
    for flag, on, what in (("--swiglu", m.ffn_type == "swiglu", f"ffn_type {m.ffn_type}"),
                           ("--disable-bias-linear", not m.bias, f"bias {str(m.bias).lower()}"),
                           ("--untie-embeddings-and-output-weights", not m.tied_embeddings,
                            f"tied_embeddings {str(m.tied_embeddings).lower()}")):
        if (flag in got) != on:
            raise InputError(f"--from megatron: {'with' if flag in got else 'without'} {flag} "
                             f"the model differs from '{m.name}' ({what}); "
                             f"{'drop' if flag in got else 'add'} {flag} or pass the matching -m")
    rates = [_float(got, f, 0.1) for f in ("--attention-dropout", "--hidden-dropout")]
    if any(r > 0 for r in rates) != m.dropout:
        raise InputError(f"--from megatron: --attention-dropout {rates[0]:g} --hidden-dropout "
                         f"{rates[1]:g} (Megatron-LM's default 0.1 when absent): '{m.name}' has "
                         f"dropout {str(m.dropout).lower()}; "
                         + ("add --attention-dropout 0.0 --hidden-dropout 0.0" if not m.dropout
                            else "set a dropout above 0") + " or pass the matching -m")
    if m.position_embedding == "rope":
        base = _float(got, "--rotary-base", 10000.0)
        if base != m.rope_theta:
            raise InputError(f"--from megatron: --rotary-base {base:g} (Megatron-LM's default "
                             f"10000 when absent) describes a different model than '{m.name}' "
                             f"(rope_theta {m.rope_theta:g}); add --rotary-base "
                             f"{m.rope_theta:g} or pass the matching -m")
    if m.moe is not None:
        d = got.get("--moe-token-dispatcher-type", "allgather")
        if d != DISPATCHER:
            raise InputError(f"--from megatron: --moe-token-dispatcher-type {d}"
                             f"{' (Megatron-LM default when absent)' if d == 'allgather' else ''}"
                             f": not costed; the cost model costs {DISPATCHER} token dispatch "
                             f"over the EP group (add --moe-token-dispatcher-type {DISPATCHER})")


def _float(got: dict[str, Any], flag: str, default: float) -> float:
    if flag not in got:
        return default
    try:
        v = float(_one(flag, got[flag]))
    except ValueError:
        raise InputError(f"--from megatron: {flag}: expected a number, got "
                         f"{_short(' '.join(got[flag]))}") from None
    if not 0 <= v < float("inf"):
        raise InputError(f"--from megatron: {flag}: expected a finite number >= 0, got {v}")
    return v


def _check_model(got: dict[str, Any], target: Target) -> None:
    """Model-shape arguments must describe ``target.model`` (a plan is for one model)."""
    m = target.model
    moe = m.moe
    shape = {"--num-layers": m.num_layers, "--hidden-size": m.hidden_size,
             "--num-attention-heads": m.num_attention_heads,
             "--ffn-hidden-size": m.ffn_hidden_size,
             "--num-query-groups": m.kv_heads if got.get("--group-query-attention") else None,
             "--num-experts": moe.num_experts if moe else None,
             "--moe-router-topk": moe.top_k if moe else None}
    for flag, want in shape.items():
        v = _int(got, flag)
        if v is not None and want is not None and v != want:
            raise InputError(f"--from megatron: {flag} {v} describes a different model than "
                             f"'{m.name}' ({want}); pass the matching -m")
    kinds = {"--normalization": "RMSNorm" if m.norm_type == "rmsnorm" else "LayerNorm",
             "--position-embedding-type": POSITION[m.position_embedding]}
    for flag, want in kinds.items():
        if got.get(flag) not in (None, [want]):
            raise InputError(f"--from megatron: {flag} {' '.join(got[flag])} describes a "
                             f"different model than '{m.name}' ({want}); pass the matching -m")


def _dp(got: dict[str, Any], d: dict[str, Any], target: Target) -> int:
    n = target.cluster.num_gpus
    nodes, per = _int(got, "--nnodes"), _int(got, "--nproc-per-node") or _int(got, "--nproc_per_node")
    if nodes and per and nodes * per != n:
        raise InputError(f"--from megatron: torchrun --nnodes {nodes} --nproc-per-node {per} "
                         f"is {nodes * per} GPUs, the cluster has {n}; pass --gpus {nodes * per}")
    used = d["tp"] * d["cp"] * d["pp"]
    if n % used:
        raise InputError(f"--from megatron: tp x cp x pp = {used} does not divide the {n} GPUs; "
                         "pass --gpus with the job's GPU count")
    return n // used


def _pipeline_from(got: dict[str, Any], pp: int, target: Target) -> dict[str, Any]:
    """Virtual stages and whether the split is the planner's uneven one, from whichever of
    Megatron's three ways of stating a split the arguments use."""
    layers = target.model.num_layers
    sizes = megatron_chunks(got, pp, layers)
    n = len(sizes)
    if sizes == chunk_sizes(layers, n, False):
        return {"virtual_stages": n // pp, "uneven_pipeline": False}
    if sizes == chunk_sizes(layers, n, True):
        return {"virtual_stages": n // pp, "uneven_pipeline": True}
    raise InputError(f"--from megatron: the layer split {sizes} (chunks in schedule order) is "
                     f"not one the planner models: it gives the lighter chunks to both ends, "
                     f"{chunk_sizes(layers, n, True)}")


def megatron_chunks(got: dict[str, Any], pp: int, layers: int) -> list[int]:
    """Layers per model chunk, in the order ``vp_rank * pp + pp_rank`` (Megatron-Core
    ``get_num_layers_to_build`` and ``PipelineParallelLayerLayout``)."""
    if "--pipeline-model-parallel-layout" in got:
        return _layout_chunks(got["--pipeline-model-parallel-layout"], pp, layers)
    first, last = _int(got, "--decoder-first-pipeline-num-layers"), _int(got, "--decoder-last-pipeline-num-layers")
    per_v, v = _int(got, "--num-layers-per-virtual-pipeline-stage"), _int(got, "--num-virtual-stages-per-pipeline-rank")
    if per_v is not None and (first is not None or last is not None):
        raise InputError("--from megatron: --num-layers-per-virtual-pipeline-stage cannot be "
                         "combined with first/last stage sizes (Megatron-LM asserts)")
    if per_v is not None:
        if layers % (pp * per_v):
            raise InputError(f"--from megatron: --num-layers-per-virtual-pipeline-stage "
                             f"{per_v}: {layers} layers / pp {pp} is not a multiple of it")
        v = layers // (pp * per_v)
    v = v or 1
    rank = _rank_layers(layers, pp, first, last)
    if any(r % v for r in rank):
        raise InputError(f"--from megatron: per-rank layers {rank} are not divisible by "
                         f"{v} virtual stages")
    return [rank[r] // v for _ in range(v) for r in range(pp)]


def _rank_layers(layers: int, pp: int, first: int | None, last: int | None) -> list[int]:
    rest, left = layers - (first or 0) - (last or 0), pp - (first is not None) - (last is not None)
    if (left > 0 and (rest < 0 or rest % left)) or (left <= 0 and rest != 0):
        raise InputError(f"--from megatron: {layers} layers do not split over pp {pp} with "
                         f"first={first} and last={last}")
    mid = rest // left if left > 0 else 0
    out = [mid] * pp
    if first is not None:
        out[0] = first
    if last is not None:
        out[-1] = last
    return out


#: Megatron-LM's expansion of a layout (PipelineParallelLayerLayout.parse_str_to_list):
#: parenthesised groups first, then single characters.
_LAYOUT_GROUP = re.compile(r"\(([^()]*)\)\*(\d+)")
_LAYOUT_REPEAT = re.compile(r"(.)\*(\d+)")


def _expand(pattern: re.Pattern[str], text: str, limit: int) -> str | None:
    """``pattern.sub`` writing group 1 group-2 times, or None when the result would be
    longer than ``limit`` characters: the length is summed before anything is built, and
    no count is converted beyond what the decision needs (a 5,000-digit count is simply
    too large)."""
    matches = list(pattern.finditer(text))
    # later matches shrink the text by at most len(text) in all, so any count above
    # limit + len(text) decides the same way as its true value
    cap = limit + len(text) + 1
    counts = []
    for m in matches:
        digits = m.group(2).lstrip("0") or "0"
        counts.append(min(int(digits), cap) if len(digits) <= len(str(cap)) else cap)
    size = len(text) + sum(len(m.group(1)) * k - len(m.group(0)) for m, k in zip(matches, counts))
    if size > limit:
        return None
    out, at = [], 0
    for m, k in zip(matches, counts):
        out += [text[at:m.start()], m.group(1) * k]
        at = m.end()
    out.append(text[at:])
    return "".join(out)


def _layout_chunks(text: str, pp: int, layers: int) -> list[int]:
    # the planner's splits have one to ``layers`` chunks of at least one layer, and up to
    # two empty end chunks ('E|', '|L'): 'E', 'L', a 't' per layer and a '|' between
    # chunks, 2 x layers + 3 characters at most; the intermediate text (groups expanded,
    # 't*k' not yet) is allowed a few times that
    most = 2 * layers + 1 + END_ONLY_CHUNKS
    flat = _expand(_LAYOUT_GROUP, text.replace(",", ""), len(text) + 8 * most)
    flat = None if flat is None else _expand(_LAYOUT_REPEAT, flat, most)
    if flat is None:
        raise InputError(f"--from megatron: --pipeline-model-parallel-layout {_short(text)}: "
                         f"expands to more than {most:,} characters, the most a layout the "
                         f"planner models can have ('E', 'L', one 't' per layer of the "
                         f"{layers}, '|' between chunks of at least one layer or the two "
                         "empty end chunks)")
    stages = flat.split("|")
    bad = set(flat) - set("tEL|")
    if bad or len(stages) % pp or not stages[0].startswith("E") or not stages[-1].endswith("L"):
        raise InputError(f"--from megatron: --pipeline-model-parallel-layout {_short(text)}: "
                         f"expected 'E' first, 'L' last, 't' layers and a multiple of pp={pp} "
                         "stages" + (f" (unsupported layer kinds {sorted(bad)[:10]})" if bad else ""))
    sizes = [s.count("t") for s in stages]
    if sum(sizes) != layers:
        raise InputError(f"--from megatron: the layout has {sum(sizes)} layers, the model {layers}")
    return sizes


def _precision_from(got: dict[str, Any]) -> dict[str, Any]:
    if got.get("--bf16") and got.get("--fp16"):
        raise InputError("--from megatron: --bf16 and --fp16 together (Megatron-LM asserts)")
    if not (got.get("--bf16") or got.get("--fp16")):
        raise InputError("--from megatron: neither --bf16 nor --fp16: fp32 training is not "
                         "modelled")
    fp8 = got.get("--fp8-format")
    if fp8 not in (None, "hybrid", "e4m3"):
        raise InputError(f"--from megatron: --fp8-format {fp8}: expected hybrid or e4m3")
    dtype = "fp8" if fp8 else ("bf16" if got.get("--bf16") else "fp16")
    grad = "bf16" if got.get("--grad-reduce-in-bf16") else "fp32"
    if got.get("--fp16") and grad == "fp32" and not got.get("--accumulate-allreduce-grads-in-fp32"):
        raise InputError("--from megatron: --fp16 without --accumulate-allreduce-grads-in-fp32 "
                         "reduces gradients in fp16, which the planner does not model")
    attn = got.get("--attention-backend", "flash" if got.get("--use-flash-attn") else "auto")
    if attn not in ("flash", "fused", "unfused", "auto", "local"):
        raise InputError(f"--from megatron: --attention-backend {attn}: expected flash, fused, "
                         "unfused, local or auto")
    return {"dtype": dtype, "grad_reduce_dtype": grad, "fp8_params": bool(got.get("--fp8-param-gather")),
            "attention": "standard" if attn in ("unfused", "local") else "flash"}


def _switches_from(got: dict[str, Any], d: dict[str, Any], target: Target) -> dict[str, Any]:
    zero = 1 if got.get("--use-distributed-optimizer") else 0
    sp = bool(got.get("--sequence-parallel")) and d["tp"] > 1
    types = got.get("--cp-comm-type", ["p2p"])
    inverse = {v: k for k, v in CP_COMM.items()}
    if len(set(types)) != 1 or types[0] not in inverse:
        raise InputError(f"--from megatron: --cp-comm-type {' '.join(types)}: expected one of "
                         f"{sorted(inverse)} for every layer")
    dpcp = d["dp"] * d["cp"]
    return {
        "zero_stage": zero, "sequence_parallel": sp, "tp_comm": "rs_ag" if sp else "allreduce",
        "cp_comm": inverse[types[0]] if d["cp"] > 1 else "ring",
        "overlap_dp_grad_reduce": bool(got.get("--overlap-grad-reduce")) or dpcp == 1,
        "overlap_param_gather": bool(got.get("--overlap-param-gather")) or zero == 0 or dpcp == 1,
        "overlap_tp_comm": bool(got.get("--tp-comm-overlap")) and sp,
        "overlap_p2p_comm": not got.get("--no-overlap-p2p-communication") or d["virtual_stages"] == 1,
        "expert_tp": d["expert_tp"] if target.model.moe is not None else None,
        "overlap_moe_ep_comm": bool(got.get("--overlap-moe-expert-parallel-comm")),
    }


def _recompute_from(got: dict[str, Any], data: dict[str, Any], model: ModelSpec) -> str:
    gran = got.get("--recompute-granularity") or ("selective" if got.get("--recompute-activations") else None)
    if gran is None:
        return "none"
    if gran == "selective":
        mods = got.get("--recompute-modules")
        if mods not in (None, ["core_attn"]):
            raise InputError(f"--from megatron: --recompute-modules {' '.join(mods)}: the "
                             "planner's selective recomputation is core_attn only")
        return "selective"
    if gran != "full":
        raise InputError(f"--from megatron: --recompute-granularity {gran}: expected full or selective")
    method, n = got.get("--recompute-method"), _int(got, "--recompute-num-layers", 1)
    if method == "uniform" and n == 1:
        return "full"
    half = half_block_layers(model.num_layers, data["pp"] * data["virtual_stages"],
                             data["uneven_pipeline"]) if method == "block" else None
    if n == half:
        sizes = chunk_sizes(model.num_layers, data["pp"] * data["virtual_stages"],
                            data["uneven_pipeline"]) or [model.num_layers]
        if not block_recompute_runs_half(sizes):
            raise InputError(f"--from megatron: --recompute-method block --recompute-num-layers "
                             f"{n} on chunks of {min(sizes)} and {max(sizes)} layers recomputes "
                             f"{sum(min(n, c) for c in sizes)} of {model.num_layers} layers, "
                             "not half of each chunk: the planner does not model it")
        return "half"
    raise InputError(f"--from megatron: --recompute-method {method} --recompute-num-layers "
                     f"{n}: the planner's full recomputation is uniform over 1 layer, its half "
                     f"recomputation block over {half or 'half of a chunk'}")
