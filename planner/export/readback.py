"""Files back to plans: a torchtitan job config, a ds_config with its launch line, and a
``vllm serve`` command, each to the plan it runs and the settings ignored as having no
effect on the plan's cost (``plan_from_megatron`` reads Megatron-LM arguments).

Defaults are the framework's when the file leaves a key out (torchtitan v0.2.2
``torchtitan/config/job_config.py``; DeepSpeed v0.18.0 ``deepspeed/runtime/constants.py``,
``runtime/zero/config.py``, ``runtime/config.py``); what a file cannot state (DeepSpeed's
sequence length and recomputation live in the model code) takes the planner's export
header when the file has one, else the model's and the framework profile's defaults.
Keys that change what runs in a way the planner does not cost are refused by name.
"""

from __future__ import annotations

import json
import shlex
import tomllib
from typing import Any

from planner.costmodel.frameworks import unstated_defaults
from planner.costmodel.pipeline import chunk_sizes
from planner.errors import InputError
from planner.export.common import (
    MEGATRON_ORDER,
    Target,
    canonical_placement,
    format_profile,
    recompute_field,
)
from planner.specs.plan import Plan
from planner.export.shell import ShellError, command_words
from planner.specs.serve import ServePlan


def _plan(fmt: str, data: dict[str, Any], target: Target) -> Plan:
    """The plan of ``data`` with the framework's defaults for what it leaves unstated,
    placed in the framework's rank order."""
    full = unstated_defaults(format_profile(fmt), data)
    full.setdefault("placement", {"order": list(MEGATRON_ORDER)})
    try:
        plan = Plan.model_validate(full)
    except ValueError as e:
        raise InputError(f"--from {fmt}: {e}") from None
    placement = canonical_placement(plan, target.cluster, MEGATRON_ORDER)
    return Plan.model_validate({**plan.to_dict(), "placement": placement})


# ---- torchtitan -------------------------------------------------------------------------

#: torchtitan v0.2.2 job_config.py: the sections and keys that decide the plan
_TT_KEYS = {
    "training": {"local_batch_size", "global_batch_size", "seq_len", "mixed_precision_param",
                 "mixed_precision_reduce", "enable_cpu_offload"},
    "parallelism": {"data_parallel_replicate_degree", "data_parallel_shard_degree",
                    "tensor_parallel_degree", "pipeline_parallel_degree",
                    "context_parallel_degree", "enable_async_tensor_parallel",
                    "fsdp_reshard_after_forward", "context_parallel_rotate_method",
                    "expert_parallel_degree", "expert_tensor_parallel_degree",
                    "pipeline_parallel_schedule", "pipeline_parallel_microbatch_size",
                    "module_fqns_per_model_part"},
    "activation_checkpoint": {"mode", "selective_ac_option"},
    "compile": {"enable", "components"},
}
_TT_ROTATE = {"alltoall": "ring", "allgather": "all_gather"}


def _tt(cfg: dict, section: str, key: str, default: Any) -> Any:
    return cfg.get(section, {}).get(key, default)


def plan_from_torchtitan(toml_text: str, model: Any, cluster: Any) -> tuple[Plan, list[str]]:
    """The plan a torchtitan TOML job config runs on ``cluster`` (a
    ``data_parallel_shard_degree`` of -1, torchtitan's default, takes the GPUs the other
    degrees leave of the cluster's), and the keys ignored."""
    t = Target(model, cluster)
    try:
        cfg = tomllib.loads(toml_text)
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"--from torchtitan: not a TOML file: {e}") from None
    ignored = []
    for section, table in cfg.items():
        if section in _TT_KEYS and isinstance(table, dict):
            ignored += [f"{section}.{k}" for k in table if k not in _TT_KEYS[section]]
        elif section not in ("model", "quantize"):
            ignored.append(section)
    rep = int(_tt(cfg, "parallelism", "data_parallel_replicate_degree", 1))
    shard = int(_tt(cfg, "parallelism", "data_parallel_shard_degree", -1))
    tp = int(_tt(cfg, "parallelism", "tensor_parallel_degree", 1))
    pp = int(_tt(cfg, "parallelism", "pipeline_parallel_degree", 1))
    cp = int(_tt(cfg, "parallelism", "context_parallel_degree", 1))
    if shard == -1:  # "leftover ranks" (job_config.py)
        shard = cluster.num_gpus // (rep * tp * pp * cp)
    if rep > 1 and shard > 1:
        raise InputError(f"--from torchtitan: parallelism.data_parallel_replicate_degree={rep} "
                         f"with data_parallel_shard_degree={shard} is HSDP, which the planner "
                         "does not cost (ZeRO-3 over all data-parallel ranks, or DDP)")
    reshard = _tt(cfg, "parallelism", "fsdp_reshard_after_forward", "default")
    fsdp = shard > 1 or cp > 1  # parallel_dims.py fsdp_enabled
    # parallelize.py: "default" reshards after forward unless pipelining
    if fsdp and not (reshard == "always" or (reshard == "default" and pp == 1)):
        raise InputError(f"--from torchtitan: parallelism.fsdp_reshard_after_forward={reshard!r}"
                         f" with pp={pp} keeps the gathered parameters through backward "
                         "(ZeRO-2-like), which the torchtitan profile does not cost; set "
                         "\"always\"")
    dp = rep * shard
    data: dict[str, Any] = {"tp": tp, "pp": pp, "cp": cp, "dp": dp,
                            "zero_stage": 3 if fsdp or reshard == "always" else 0}
    if model.moe is not None:
        data["ep"] = int(_tt(cfg, "parallelism", "expert_parallel_degree", 1))
        data["expert_tp"] = int(_tt(cfg, "parallelism", "expert_tensor_parallel_degree", 1))
    if cp > 1:
        rot = _tt(cfg, "parallelism", "context_parallel_rotate_method", "allgather")
        data["cp_comm"] = _TT_ROTATE.get(rot, rot)
    local = int(_tt(cfg, "training", "local_batch_size", 8))
    data["microbatch_size"] = (int(_tt(cfg, "parallelism", "pipeline_parallel_microbatch_size", 1))
                               if pp > 1 else local)
    gbs = int(_tt(cfg, "training", "global_batch_size", -1))
    data["global_batch_size"] = gbs if gbs > 0 else local * dp
    data["seq_len"] = int(_tt(cfg, "training", "seq_len", 2048))
    if _tt(cfg, "training", "mixed_precision_param", "bfloat16") != "bfloat16":
        raise InputError("--from torchtitan: training.mixed_precision_param: the planner "
                         "costs bfloat16 parameters")
    data["offload_params"] = bool(_tt(cfg, "training", "enable_cpu_offload", False))
    data["offload_optimizer"] = data["offload_params"]
    data["overlap_tp_comm"] = bool(_tt(cfg, "parallelism", "enable_async_tensor_parallel",
                                       False))
    if tp > 1:
        data.update(sequence_parallel=True, tp_comm="rs_ag")  # torchtitan TP is always SP
    converters = cfg.get("model", {}).get("converters", [])
    fp8 = "quantize.linear.float8" in converters or "float8" in converters
    data["dtype"] = "fp8" if fp8 else "bf16"
    f8 = cfg.get("quantize", {}).get("linear", {}).get("float8", {})
    data["fp8_params"] = bool(fp8 and f8.get("enable_fsdp_float8_all_gather", False))
    data["fused_elementwise"] = bool(_tt(cfg, "compile", "enable", False))
    data.update(_tt_pipeline(cfg, pp, t))
    data["recompute"] = recompute_field(_tt_recompute(cfg), model)
    data["grad_reduce_dtype"] = "fp32"  # mixed_precision_reduce: float32 only (job_config.py)
    return _plan("torchtitan", data, t), ignored


def _tt_recompute(cfg: dict) -> str:
    mode = _tt(cfg, "activation_checkpoint", "mode", "selective")  # job_config.py default
    if mode in ("none", "full"):
        return mode
    if mode == "selective":
        opt = str(_tt(cfg, "activation_checkpoint", "selective_ac_option", "2"))
        if opt == "2":  # every second transformer block: half the layers
            return "half"
        raise InputError(f"--from torchtitan: activation_checkpoint.selective_ac_option={opt!r}"
                         ": the planner costs none, full, or every second block (\"2\")")
    raise InputError(f"--from torchtitan: activation_checkpoint.mode={mode!r}: the planner "
                     "costs none, full or selective with selective_ac_option \"2\"")


def _tt_pipeline(cfg: dict, pp: int, t: Target) -> dict[str, Any]:
    if pp == 1:
        return {"virtual_stages": 1, "uneven_pipeline": False}
    parts = _tt(cfg, "parallelism", "module_fqns_per_model_part", None)
    n = t.model.num_layers
    if not parts:
        raise InputError("--from torchtitan: parallelism.module_fqns_per_model_part is absent; "
                         "the planner reads the pipeline split from it")
    if len(parts) % pp:
        raise InputError(f"--from torchtitan: {len(parts)} model parts over pp={pp} stages")
    sizes = [sum(1 for x in part if str(x).startswith("layers.")) for part in parts]
    v = len(parts) // pp
    for uneven in (False, True):
        if (chunk_sizes(n, pp * v, uneven) or [n]) == sizes:
            layers = [x for part in parts for x in part if str(x).startswith("layers.")]
            if layers != [f"layers.{i}" for i in range(n)]:
                break
            return {"virtual_stages": v, "uneven_pipeline": uneven}
    raise InputError(f"--from torchtitan: parallelism.module_fqns_per_model_part splits "
                     f"{n} layers as {sizes}, not a split the planner costs")


# ---- DeepSpeed --------------------------------------------------------------------------

#: ds_config keys that change what runs in ways the planner does not cost (v0.18.0)
_DS_REFUSED = {"amp": "apex AMP", "torch_autocast": "torch autocast",
               "fp8": "FP8", "pipeline": "pipeline parallelism",
               "sequence_parallel_size": "Ulysses sequence parallelism",
               "tensor_parallel": "AutoTP tensor parallelism",
               "compression_training": "compression", "zenflow": "ZenFlow"}
_DS_PLAN_KEYS = {"train_batch_size", "train_micro_batch_size_per_gpu",
                 "gradient_accumulation_steps", "bf16", "bfloat16", "fp16",
                 "communication_data_type", "data_types", "zero_optimization",
                 "planner_export"}
_DTYPE = {"fp32": "fp32", "float32": "fp32", "bf16": "bf16", "bfloat16": "bf16",
          "fp16": "fp16", "float16": "fp16"}


def _enabled(cfg: dict, key: str) -> bool:
    v = cfg.get(key)
    return bool(v.get("enabled", False)) if isinstance(v, dict) else False


def launch_world(line: str) -> tuple[int, int, list[str]]:
    """(nodes, processes per node, the training script's arguments) of a ``deepspeed`` or
    ``torchrun`` launch line (a script's last such command)."""
    try:
        before, after = command_words(line)
    except ShellError as e:
        raise InputError(f"--from deepspeed: the launch line: {e}") from None
    words = before
    if not words:
        raise InputError("--from deepspeed: the launch line runs no *.py training script")
    flags = {"--num_nodes": "nodes", "--num-nodes": "nodes", "--nnodes": "nodes",
             "--num_gpus": "gpus", "--num-gpus": "gpus", "--nproc-per-node": "gpus",
             "--nproc_per_node": "gpus"}
    got: dict[str, int] = {}
    i = 0
    while i < len(words):
        w, val = words[i], None
        if "=" in w and w.split("=", 1)[0] in flags:
            w, val = w.split("=", 1)
        elif w in flags and i + 1 < len(words):
            val = words[i + 1]
            i += 1
        if w in flags:
            try:
                got[flags[w]] = int(val)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                raise InputError(f"--from deepspeed: the launch line: {w} {val!r}: expected "
                                 "a whole number of nodes or GPUs (not a range)") from None
        i += 1
    missing = [k for k in ("nodes", "gpus") if k not in got]
    if missing:
        raise InputError(f"--from deepspeed: the launch line gives no "
                         f"{' and no '.join({'nodes': '--num_nodes/--nnodes', 'gpus': '--num_gpus/--nproc-per-node'}[k] for k in missing)}"
                         "; without them DeepSpeed uses every host and GPU it finds, which "
                         "the planner cannot know")
    return got["nodes"], got["gpus"], after


def plan_from_deepspeed(ds_config_json: str, launch_line: str, model: Any, cluster: Any
                        ) -> tuple[Plan, list[str]]:
    """The plan a ds_config runs under ``launch_line`` (its world: nodes x GPUs per node,
    all data parallel), and the keys and script arguments ignored."""
    t = Target(model, cluster)
    try:
        cfg = json.loads(ds_config_json)
    except json.JSONDecodeError as e:
        raise InputError(f"--from deepspeed: not a JSON file: {e}") from None
    if not isinstance(cfg, dict):
        raise InputError("--from deepspeed: the ds_config is not a JSON object")
    for key, what in _DS_REFUSED.items():
        v = cfg.get(key)
        on = (v.get("enabled", True) if isinstance(v, dict) else bool(v) and v != 1)
        if key == "tensor_parallel" and isinstance(v, dict):
            on = int(v.get("autotp_size", v.get("tp_size", 1)) or 1) > 1
        if v is not None and on:
            raise InputError(f"--from deepspeed: {key}: {what}, which the ds_config exporter "
                             "and the deepspeed profile do not cost")
    nodes, per_node, script_args = launch_world(launch_line)
    dp = nodes * per_node
    if "--deepspeed_config" in script_args:  # the file read here
        k = script_args.index("--deepspeed_config")
        script_args = script_args[:k] + script_args[k + 2:]
    ignored = [k for k in cfg if k not in _DS_PLAN_KEYS] + script_args
    micro, gas = _ds_batch(cfg, dp)
    bf16 = _enabled(cfg, "bf16") or _enabled(cfg, "bfloat16")
    fp16 = _enabled(cfg, "fp16")
    if bf16 == fp16:
        raise InputError("--from deepspeed: " + ("bf16 and fp16 are both enabled" if bf16 else
                         "neither bf16.enabled nor fp16.enabled: fp32 training, which the "
                         "planner does not cost"))
    dtype = "bf16" if bf16 else "fp16"
    accum = cfg.get("data_types", {}).get("grad_accum_dtype")
    comm = cfg.get("communication_data_type")
    # engine.py get_data_types: grad_accum_dtype defaults to the model's dtype
    reduce_ = _DTYPE.get(str(accum or comm or dtype).lower())
    if accum and comm and _DTYPE.get(str(comm).lower()) != reduce_:
        raise InputError(f"--from deepspeed: communication_data_type={comm} differs from "
                         f"data_types.grad_accum_dtype={accum}; the planner has one gradient "
                         "reduction dtype")
    zero = cfg.get("zero_optimization", {}) or {}
    stage = int(zero.get("stage", 0))
    # zero/config.py: overlap_comm defaults to True at stage 3, False below
    overlap = bool(zero.get("overlap_comm", stage == 3))
    offload = {}
    for key, field in (("offload_optimizer", "offload_optimizer"),
                       ("offload_param", "offload_params")):
        device = (zero.get(key) or {}).get("device", "none")
        if device not in ("cpu", "none"):
            raise InputError(f"--from deepspeed: zero_optimization.{key}.device={device!r}: "
                             "the planner costs CPU offload only")
        offload[field] = device == "cpu"
    seq_len, recompute = _ds_header(cfg, model)
    data: dict[str, Any] = {
        "tp": 1, "pp": 1, "cp": 1, "dp": dp, "microbatch_size": micro,
        "global_batch_size": micro * gas * dp, "seq_len": seq_len, "dtype": dtype,
        "grad_reduce_dtype": reduce_, "zero_stage": stage,
        # an overlap switch that has nothing to overlap reads as its default (as_run)
        "overlap_dp_grad_reduce": overlap if dp > 1 else True,
        "overlap_param_gather": overlap if dp > 1 and stage > 0 else True, "recompute": recompute_field(recompute, model),
        **offload}
    return _plan("deepspeed", data, t), ignored


def _ds_batch(cfg: dict, dp: int) -> tuple[int, int]:
    """(micro-batch per GPU, accumulation steps) over world ``dp``: DeepSpeed's
    runtime/config.py _set_batch_related_parameters derives the third of train_batch_size,
    train_micro_batch_size_per_gpu and gradient_accumulation_steps from any two, and
    refuses three that disagree."""
    micro = cfg.get("train_micro_batch_size_per_gpu")
    gas = cfg.get("gradient_accumulation_steps")
    tbs = cfg.get("train_batch_size")
    # runtime/config.py _set_batch_related_parameters: any two give the third
    if tbs is not None and micro is not None and gas is not None:
        if tbs != micro * gas * dp:
            raise InputError(f"--from deepspeed: train_batch_size={tbs} is not "
                             f"train_micro_batch_size_per_gpu={micro} x "
                             f"gradient_accumulation_steps={gas} x world {dp} (DeepSpeed "
                             "refuses it too)")
    elif tbs is not None and micro is not None:
        gas = tbs // (micro * dp)
    elif tbs is not None:
        gas = gas or 1
        micro = tbs // (gas * dp)
    elif micro is not None:
        gas = gas or 1
        tbs = micro * gas * dp
    else:
        raise InputError("--from deepspeed: neither train_batch_size nor "
                         "train_micro_batch_size_per_gpu is set (DeepSpeed needs one)")
    if not micro or micro * gas * dp != (tbs or micro * gas * dp):
        raise InputError(f"--from deepspeed: train_batch_size={tbs} does not divide into "
                         f"micro-batches over world {dp}")
    return micro, gas


def _ds_header(cfg: dict, model: Any) -> tuple[int, str]:
    """The sequence length and recomputation the planner's export header states (the model
    code sets them; a ds_config has no key for either), else the model's length and none."""
    import re

    for line in cfg.get("planner_export", []) or []:
        m = re.match(r"seq_len (\d+) and recompute=(\w+)", str(line))
        if m:
            return int(m.group(1)), m.group(2)
    return model.seq_len, "none"


def deepspeed_launch_from_header(ds_config_json: str) -> str | None:
    """The launch line the planner's export header records, if the file has one."""
    try:
        cfg = json.loads(ds_config_json)
    except json.JSONDecodeError:
        return None
    for line in (cfg.get("planner_export", []) if isinstance(cfg, dict) else []) or []:
        if str(line).startswith("launch: "):
            return str(line)[len("launch: "):]
    return None


# ---- vLLM -------------------------------------------------------------------------------

#: vllm serve flags that decide the serving plan (vllm/engine/arg_utils.py)
_VLLM = {"--tensor-parallel-size": "tp", "-tp": "tp", "--pipeline-parallel-size": "pp",
         "-pp": "pp", "--max-num-seqs": "concurrency",
         "--max-num-batched-tokens": "prefill_chunk", "--kv-cache-dtype": "kv",
         "--quantization": "quant", "-q": "quant", "--data-parallel-size": "dp",
         "-dp": "dp"}
_VLLM_FLAGS = {"--enable-expert-parallel", "-ep"}
_VLLM_REFUSED = {"--kv-transfer-config": "a disaggregated pool (read each pool's command "
                 "on its own)", "--cpu-offload-gb": "CPU weight offload",
                 "--speculative-config": "speculative decoding"}


def serve_plan_from_vllm(args: str, model: Any, cluster: Any) -> tuple[Any, list[str]]:
    """The serving plan (one aggregated pool, one replica: the command starts one engine)
    a ``vllm serve`` command runs, and the arguments ignored. ``--max-num-seqs`` and
    ``--max-num-batched-tokens`` must be given: vLLM's defaults depend on the GPU and the
    usage context, which a command does not state."""
    try:
        words = shlex.split(args)
    except ValueError as e:
        raise InputError(f"--from vllm: {e}") from None
    if words[:2] == ["vllm", "serve"]:
        words = words[3:] if len(words) > 2 and not words[2].startswith("-") else words[2:]
    got: dict[str, Any] = {}
    ignored: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        flag, val = (w.split("=", 1) + [None])[:2] if w.startswith("--") and "=" in w else (w, None)
        if flag in _VLLM_REFUSED:
            raise InputError(f"--from vllm: {flag}: {_VLLM_REFUSED[flag]}, which the "
                             "planner does not cost")
        if flag in _VLLM_FLAGS:
            got["ep"] = True
        elif flag in _VLLM:
            if val is None:
                if i + 1 >= len(words):
                    raise InputError(f"--from vllm: {flag} needs a value")
                val = words[i + 1]
                i += 1
            got[_VLLM[flag]] = val
        elif w.startswith("-"):
            ignored.append(w)
            if val is None and i + 1 < len(words) and not words[i + 1].startswith("-"):
                ignored.append(words[i + 1])
                i += 1
        else:
            ignored.append(w)
        i += 1

    def num(key: str, flag: str, default: int | None) -> int:
        v = got.get(key, default)
        if v is None:
            raise InputError(f"--from vllm: give {flag}: vLLM's default depends on the GPU "
                             "and the usage context, which the command does not state")
        try:
            return int(v)
        except ValueError:
            raise InputError(f"--from vllm: {flag} {v!r}: expected a whole number") from None

    if num("dp", "--data-parallel-size", 1) != 1:
        raise InputError("--from vllm: --data-parallel-size > 1 (data-parallel attention in "
                         "one engine) is not costed; give replicas instead")
    tp, pp = num("tp", "--tensor-parallel-size", 1), num("pp", "--pipeline-parallel-size", 1)
    kv = got.get("kv", "auto")
    if kv not in ("auto", "fp8", "fp8_e4m3"):
        raise InputError(f"--from vllm: --kv-cache-dtype {kv}: the planner costs auto "
                         "(the model's bf16) or fp8")
    quant = got.get("quant")
    weights = {None: "bf16", "fp8": "fp8", "awq": "int4", "modelopt_fp4": "fp4"}.get(quant)
    if weights is None:
        raise InputError(f"--from vllm: --quantization {quant}: the planner costs fp8, awq "
                         "(int4) and modelopt_fp4")
    data = {"tp": tp, "pp": pp, "ep": tp if got.get("ep") else 1,
            "concurrency": num("concurrency", "--max-num-seqs", None),
            "prefill_chunk": num("prefill_chunk", "--max-num-batched-tokens", None),
            "kv_dtype": "fp8" if kv.startswith("fp8") else "bf16", "weight_dtype": weights,
            "replicas": 1}
    try:
        return ServePlan.model_validate(data), ignored
    except ValueError as e:
        raise InputError(f"--from vllm: {e}") from None
