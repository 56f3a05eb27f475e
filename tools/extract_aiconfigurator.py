"""Extract the rows of aiconfigurator's measured TensorRT-LLM per-operation database that
a Llama 3 8B/70B prefill and decode step at TP 1/2/4/8 on H100 SXM and H200 need, into
hardware_catalog/calibration/aiconfigurator_steps.yaml (benchmarks/bench_aiconfigurator.py
composes the steps from them).

    python tools/extract_aiconfigurator.py --git-dir /path/to/aiconfigurator/.git

Reads the parquet tables straight from the git objects of a clone of
github.com/ai-dynamo/aiconfigurator (``git show COMMIT:path``); they are plain parquet
files in the repository, not Git LFS pointers. Per GEMM shape it keeps the grid points
that bracket n and k (the benchmark interpolates between them); attention and all-reduce
shapes are on the tables' grids.
"""

from __future__ import annotations

import argparse
import io
import math
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "hardware_catalog" / "calibration" / "aiconfigurator_steps.yaml"
DATA = "aic-core/src/aiconfigurator_core/systems"
VERSION = "1.3.0rc20"
GPUS = ("h100_sxm", "h200_sxm")
TP = (1, 2, 4, 8)
PREFILL_ISL = (512, 2048, 8192)
DECODE_BATCH = (1, 8, 32, 128)
DECODE_KV = 2047  # the generation table's ``step`` (cached tokens) nearest 2K
GEMM_DTYPES = ("bfloat16", "fp8")
#: hidden, heads, kv heads, head dim, FFN, vocab (meta-llama config.json, as
#: hardware_catalog/models/llama3-{8b,70b}.yaml)
MODELS = {"llama3-8b": (4096, 32, 8, 128, 14336, 128256),
          "llama3-70b": (8192, 64, 8, 128, 28672, 128256)}


def git_bytes(git_dir: str, commit: str, path: str) -> bytes:
    return subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:{path}"],
                          check=True, capture_output=True).stdout


def table(git_dir: str, commit: str, path: str) -> list[dict]:
    raw = git_bytes(git_dir, commit, path)
    if raw.startswith(b"version https://git-lfs"):
        raise SystemExit(f"{path} is a Git LFS pointer, not data")
    return pq.read_table(io.BytesIO(raw)).to_pylist()


def gemm_shapes(model: str, tp: int) -> list[tuple[int, int]]:
    """(n, k) of the per-layer GEMMs and the LM head on one TP rank."""
    h, heads, kv, d, ffn, vocab = MODELS[model]
    kv_loc = max(1, kv // tp)
    return [((heads // tp + 2 * kv_loc) * d, h), (h, heads * d // tp),
            (2 * ffn // tp, h), (h, ffn // tp), (vocab // tp, h)]


def bracket(grid: list[int], v: int) -> list[int]:
    """The grid points around ``v``; the two largest when ``v`` lies past the grid."""
    if v in grid:
        return [v]
    lo, hi = [g for g in grid if g < v], [g for g in grid if g > v]
    if not hi:
        return lo[-2:]
    return ([lo[-1]] if lo else []) + [hi[0]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--git-dir", required=True, help="the .git of an aiconfigurator clone")
    ap.add_argument("--commit", default="HEAD")
    args = ap.parse_args()
    commit = subprocess.run(["git", "--git-dir", args.git_dir, "rev-parse", args.commit],
                            check=True, capture_output=True, text=True).stdout.strip()
    out: dict = {
        "source": {
            "repo": "ai-dynamo/aiconfigurator",
            "commit": commit,
            "engine": f"TensorRT-LLM {VERSION} (PyTorch flow kernels, as collected)",
            "tables": {f"{t}": f"{DATA}/data/<gpu>/{p}/trtllm/{VERSION}/{t}_perf.parquet"
                       for t, p in (("gemm", "gemm"), ("context_attention", "attention"),
                                    ("generation_attention", "attention"),
                                    ("custom_allreduce", "comm"))},
            "memory_op": f"{DATA}/<gpu>.yaml gpu.mem_bw, mem_bw_empirical_scaling_factor, "
                         "mem_empirical_constant_latency (aiconfigurator's analytic "
                         "elementwise/embedding/RoPE/KV-write time: bytes / (bw x scale) + "
                         "constant)",
            "extracted_by": "python tools/extract_aiconfigurator.py --git-dir <clone>/.git",
        },
        "units": {"latency": "ms", "allreduce_message": "bf16 elements",
                  "gemm": "[m, n, k, latency_ms]",
                  "context_attention": "[batch, isl, heads, kv_heads, head_dim, latency_ms]",
                  "generation_attention": "[batch, kv_tokens, heads, kv_heads, head_dim, "
                                          "latency_ms]",
                  "allreduce": "[gpus, message_elements, latency_ms]"},
        "gpus": {},
    }
    m_values = sorted(set(PREFILL_ISL) | set(DECODE_BATCH))
    for gpu in GPUS:
        spec = yaml.safe_load(git_bytes(args.git_dir, commit, f"{DATA}/{gpu}.yaml"))["gpu"]
        base = f"{DATA}/data/{gpu}"
        gemm = table(args.git_dir, commit, f"{base}/gemm/trtllm/{VERSION}/gemm_perf.parquet")
        ctx = table(args.git_dir, commit,
                    f"{base}/attention/trtllm/{VERSION}/context_attention_perf.parquet")
        gen = table(args.git_dir, commit,
                    f"{base}/attention/trtllm/{VERSION}/generation_attention_perf.parquet")
        ar = table(args.git_dir, commit,
                   f"{base}/comm/trtllm/{VERSION}/custom_allreduce_perf.parquet")
        entry: dict = {"device": gemm[0]["device"],
                       "mem_bw_Bps": float(spec["mem_bw"]),
                       "mem_bw_scaling": float(spec["mem_bw_empirical_scaling_factor"]),
                       "mem_constant_s": float(spec["mem_empirical_constant_latency"]),
                       "gemm": {}}
        for dt in GEMM_DTYPES:
            rows = {(r["m"], r["n"], r["k"]): r["latency"] for r in gemm if r["gemm_dtype"] == dt}
            ngrid = sorted({n for _, n, _ in rows})
            kgrid = sorted({k for _, _, k in rows})
            keep = set()
            for model in MODELS:
                for tp in TP:
                    for n, k in gemm_shapes(model, tp):
                        for m in m_values:
                            for nn in bracket(ngrid, n):
                                for kk in bracket(kgrid, k):
                                    if (m, nn, kk) not in rows:
                                        raise SystemExit(f"{gpu} {dt}: no GEMM row {m, nn, kk}")
                                    keep.add((m, nn, kk))
            entry["gemm"][dt] = [[m, n, k, round(rows[m, n, k], 6)] for m, n, k in sorted(keep)]
        heads = {(MODELS[m][1] // tp, max(1, MODELS[m][2] // tp)) for m in MODELS for tp in TP}
        entry["context_attention"] = sorted(
            [r["batch_size"], r["isl"], r["num_heads"], r["num_key_value_heads"], r["head_dim"],
             round(r["latency"], 6)] for r in ctx
            if r["batch_size"] == 1 and r["isl"] in PREFILL_ISL and r["head_dim"] == 128
            and (r["num_heads"], r["num_key_value_heads"]) in heads and r["window_size"] == 0
            and r["attn_dtype"] == "bfloat16" and r["kv_cache_dtype"] == "bfloat16")
        entry["generation_attention"] = sorted(
            [r["batch_size"], r["step"], r["num_heads"], r["num_key_value_heads"], r["head_dim"],
             round(r["latency"], 6)] for r in gen
            if r["batch_size"] in DECODE_BATCH and r["step"] == DECODE_KV and r["head_dim"] == 128
            and (r["num_heads"], r["num_key_value_heads"]) in heads and r["window_size"] == 0
            and r["kv_cache_dtype"] == "bfloat16")
        sizes = {t * MODELS[m][0] for m in MODELS for t in m_values}
        entry["allreduce"] = sorted([r["num_gpus"], r["message_size"], round(r["latency"], 6)]
                                    for r in ar if r["message_size"] in sizes
                                    and r["allreduce_dtype"] == "bfloat16")
        need = len(heads) * len(PREFILL_ISL)
        if len(entry["context_attention"]) != need:
            raise SystemExit(f"{gpu}: {len(entry['context_attention'])} context rows, want {need}")
        if len(entry["generation_attention"]) != len(heads) * len(DECODE_BATCH):
            raise SystemExit(f"{gpu}: generation rows missing")
        if not math.isclose(len(entry["allreduce"]), 3 * len(sizes)):
            raise SystemExit(f"{gpu}: all-reduce rows missing")
        out["gpus"][gpu] = entry

    class Flow(yaml.SafeDumper):
        pass

    def rows(dumper, data):  # one table row per line
        flow = all(not isinstance(x, (list, dict)) for x in data)
        return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)

    Flow.add_representer(list, rows)
    head = ("# aiconfigurator's measured TensorRT-LLM per-operation latencies: only the rows a\n"
            "# Llama 3 8B/70B prefill (batch 1) and decode step at TP 1/2/4/8 need.\n"
            "# Written by tools/extract_aiconfigurator.py; read by benchmarks/bench_aiconfigurator.py\n")
    OUT.write_text(head + yaml.dump(out, Dumper=Flow, sort_keys=False, width=100))
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
