"""Launch commands of a serving plan for vLLM, SGLang and TensorRT-LLM, one per pool
(run it on each replica's GPUs). Argument names as each engine's source spells them:

- vLLM ``vllm serve``: vllm-project/vllm ``vllm/engine/arg_utils.py`` @001999d
  (``--tensor-parallel-size``, ``--pipeline-parallel-size``, ``--max-num-seqs``,
  ``--max-num-batched-tokens``, ``--kv-cache-dtype`` {auto, fp8, ...}, ``--quantization``);
  ``EngineArgs.enable_expert_parallel`` (``--enable-expert-parallel``) in later versions.
- SGLang ``python -m sglang.launch_server``: sgl-project/sglang
  ``python/sglang/srt/server_args.py`` @001067f (flags derived from the ServerArgs fields:
  ``--tp-size``, ``--pp-size``, ``--ep-size``, ``--max-running-requests``,
  ``--chunked-prefill-size``, ``--kv-cache-dtype`` fp8_e4m3, ``--quantization`` (fp8,
  awq, modelopt_fp4), ``--disaggregation-mode`` prefill|decode).
- TensorRT-LLM ``trtllm-serve``: NVIDIA/TensorRT-LLM ``tensorrt_llm/commands/serve.py``
  @00209af (``--tp_size``, ``--pp_size``, ``--ep_size``, ``--max_batch_size``,
  ``--max_num_tokens``, ``--enable_chunked_prefill``, ``--extra_llm_api_options``,
  ``--server_role`` with ``ServerRole`` CONTEXT/GENERATION of
  ``tensorrt_llm/llmapi/disagg_utils.py``); the KV-cache dtype is ``kv_cache_config.dtype``
  of ``tensorrt_llm/llmapi/llm_args.py`` (PyTorch backend), given in the options YAML.

Weight quantization other than vLLM/SGLang's online fp8 comes from the checkpoint (an
AWQ int4 or NVFP4 checkpoint): the commands say so instead of inventing a flag.
"""

from __future__ import annotations

import shlex

from planner.specs.names import check_name
from planner.specs.serve import ServePlan

ENGINES = ("vllm", "sglang", "trtllm")


def _pools(plan: ServePlan) -> list[tuple[str, ServePlan]]:
    if plan.prefill is None:
        return [("aggregated", plan)]
    return [("prefill", plan.prefill), ("decode", plan)]


def _common(role: str, p: ServePlan, seqs: str, chunk: str) -> list[str]:
    """The batch cap (not on a prefill pool) and the prefill token budget (not on a
    decode pool)."""
    out = [] if role == "prefill" else [f"{seqs} {p.concurrency}"]
    return out + ([] if role == "decode" else [f"{chunk} {p.prefill_chunk}"])


def _vllm(model: str, role: str, p: ServePlan) -> tuple[list[str], list[str]]:
    args = [f"vllm serve {model}", f"--tensor-parallel-size {p.tp}",
            f"--pipeline-parallel-size {p.pp}",
            *_common(role, p, "--max-num-seqs", "--max-num-batched-tokens")]
    notes = []
    if p.ep > 1:
        args.append("--enable-expert-parallel")
        if p.ep != p.tp:
            notes.append(f"vLLM shards experts over all tp ranks; the plan's ep={p.ep} < tp={p.tp}")
    if p.kv_dtype == "fp8":
        args.append("--kv-cache-dtype fp8")
    if p.weight_dtype == "fp8":
        args.append("--quantization fp8")
    elif p.weight_dtype == "int4":
        args.append("--quantization awq")
        notes.append("an AWQ int4 checkpoint of the model")
    elif p.weight_dtype == "fp4":
        notes.append("an NVFP4 checkpoint (its config names the quantization method)")
    if role != "aggregated":
        notes.append(f"{role} instance: join the pools with --kv-transfer-config (a KV connector)")
    return args, notes


def _sglang(model: str, role: str, p: ServePlan) -> tuple[list[str], list[str]]:
    args = [f"python -m sglang.launch_server --model-path {model}", f"--tp-size {p.tp}",
            f"--pp-size {p.pp}",
            *_common(role, p, "--max-running-requests", "--chunked-prefill-size")]
    if p.ep > 1:
        args.append(f"--ep-size {p.ep}")
    if p.kv_dtype == "fp8":
        args.append("--kv-cache-dtype fp8_e4m3")
    quant = {"fp8": "fp8", "int4": "awq", "fp4": "modelopt_fp4"}.get(p.weight_dtype)
    if quant:
        args.append(f"--quantization {quant}")
    if role != "aggregated":
        args.append(f"--disaggregation-mode {role}")
    notes = ["an AWQ int4 checkpoint of the model"] if p.weight_dtype == "int4" else []
    return args, notes


def _trtllm(model: str, role: str, p: ServePlan) -> tuple[list[str], list[str]]:
    args = [f"trtllm-serve {model}", f"--tp_size {p.tp}", f"--pp_size {p.pp}",
            *_common(role, p, "--max_batch_size", "--max_num_tokens")]
    notes = []
    if p.ep > 1:
        args.append(f"--ep_size {p.ep}")
    if role == "aggregated":
        args.append("--enable_chunked_prefill")
    if p.kv_dtype == "fp8":
        args.append("--extra_llm_api_options kv.yaml")
        notes.append("kv.yaml: 'kv_cache_config: {dtype: fp8}'")
    if role != "aggregated":
        args.append(f"--server_role {'context' if role == 'prefill' else 'generation'}")
    if p.weight_dtype != "bf16":
        notes.append(f"a {p.weight_dtype} checkpoint (TensorRT Model Optimizer)")
    return args, notes


def launch_commands(model: str, plan: ServePlan) -> dict[str, list[dict]]:
    """engine -> one entry per pool: its role, replicas, GPU type, the command (plain
    arguments, safe to paste) and notes on what the command cannot say. ``model`` (a
    path or a Hugging Face id) is one shell word, quoted when it needs to be; a control
    character (NUL has no shell quoting at all) is refused."""
    make = {"vllm": _vllm, "sglang": _sglang, "trtllm": _trtllm}
    model = shlex.quote(check_name(model, "--model", max_chars=None))
    out: dict[str, list[dict]] = {}
    for e in ENGINES:
        out[e] = []
        for role, p in _pools(plan):
            args, notes = make[e](model, role, p)
            out[e].append({"pool": role, "replicas": p.replicas, "gpu": p.gpu,
                           "gpus_per_replica": p.gpus_per_replica, "command": " ".join(args),
                           "notes": notes})
    return out
