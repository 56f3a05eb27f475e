"""The planner's prefill and decode step times beside aiconfigurator's, composed from its
measured TensorRT-LLM per-operation database, for Llama 3 8B/70B at TP 1/2/4/8 on H100 SXM
and H200 (issue 29 acceptance).

    python benchmarks/bench_aiconfigurator.py
    python benchmarks/bench_aiconfigurator.py --dtype fp8 --engine trtllm

aiconfigurator's rows are in hardware_catalog/calibration/aiconfigurator_steps.yaml
(tools/extract_aiconfigurator.py). The step is composed the way aiconfigurator's Llama
model lists its operations (aic-core/src/aiconfigurator_core/sdk/models/llama.py at the
commit the yaml names), summed with no overlap as its static runner does:

- per layer: QKV, output projection, gate+up and down GEMMs (weight dtype); attention
  from the context (prefill) or generation (decode) table; two TP all-reduces of
  tokens x hidden elements (custom all-reduce table); two add+norm kernels (8 x hidden
  bytes per token) and the SwiGLU (3 x FFN/tp x 2 bytes per token) through its memory-op
  formula; prefill attention adds the fused RoPE and KV-write kernels x 1.1;
- once: the embedding (tokens x hidden x 2 bytes, memory op), one more all-reduce after
  it, the bf16 LM head on the last token of each sequence (m = batch).

GEMM shapes off the table's grid are interpolated linearly in n and k between the
bracketing rows (latency is near-linear in either at fixed m), and scaled in proportion
past the grid's largest n (the LM head's 128,256 columns at TP 1). Prefill: batch 1, the
whole prompt in one step; decode: every sequence holding 2,047 cached tokens. The
planner's side: planner.costmodel.serve.step (prefill(...).latency_s with the prompt in
one chunk, decode_step_s at the same batch and context) with the engine profile named.
"""

from __future__ import annotations

import argparse
import math
import platform
from functools import lru_cache
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "hardware_catalog" / "calibration" / "aiconfigurator_steps.yaml"
MODELS = ("llama3-8b", "llama3-70b")
GPUS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200"}  # aiconfigurator -> catalog GPU
TP = (1, 2, 4, 8)
PREFILL_ISL = (512, 2048, 8192)
DECODE_BATCH = (1, 8, 32, 128)
DECODE_KV = 2047
DTYPES = {"bf16": "bfloat16", "fp8": "fp8"}
#: The acceptance bound of issue 29 on every row.
BOUND = 0.15


@lru_cache(maxsize=1)
def database() -> dict:
    return yaml.safe_load(DATA.read_text())


class AicGPU:
    """One GPU's extracted rows, queried as aiconfigurator's operations are."""

    def __init__(self, gpu: str, dtype: str):
        d = database()["gpus"][gpu]
        self.bw, self.scale, self.const_s = d["mem_bw_Bps"], d["mem_bw_scaling"], d["mem_constant_s"]
        self.gemm = {(m, n, k): t for m, n, k, t in d["gemm"][DTYPES[dtype]]}
        self.gemm_bf16 = {(m, n, k): t for m, n, k, t in d["gemm"]["bfloat16"]}
        self.ctx = {tuple(r[:5]): r[5] for r in d["context_attention"]}
        self.gen = {tuple(r[:5]): r[5] for r in d["generation_attention"]}
        self.ar = {(g, s): t for g, s, t in d["allreduce"]}

    def mem_s(self, nbytes: float) -> float:
        """aiconfigurator's analytic memory-bound kernel: bytes at a derated HBM rate plus
        a constant launch latency (its systems/<gpu>.yaml)."""
        return nbytes / (self.bw * self.scale) + self.const_s

    def gemm_s(self, m: int, n: int, k: int, bf16: bool = False) -> float:
        rows = self.gemm_bf16 if bf16 else self.gemm
        ns = sorted({nn for mm, nn, _ in rows if mm == m})
        ks = sorted({kk for mm, _, kk in rows if mm == m})

        def axis(grid, v):  # [(grid point, weight)]
            if v in grid:
                return [(v, 1.0)]
            lo, hi = [g for g in grid if g < v], [g for g in grid if g > v]
            if not hi:  # past the grid: in proportion to the largest point
                return [(lo[-1], v / lo[-1])]
            if not lo:
                raise KeyError(f"GEMM dimension {v} below the extracted grid")
            w = (v - lo[-1]) / (hi[0] - lo[-1])
            return [(lo[-1], 1 - w), (hi[0], w)]

        return sum(wn * wk * rows[m, nn, kk] for nn, wn in axis(ns, n)
                   for kk, wk in axis(ks, k)) * 1e-3

    def allreduce_s(self, gpus: int, elements: int) -> float:
        return 0.0 if gpus == 1 else self.ar[gpus, elements] * 1e-3


def shapes(model, tp: int) -> dict:
    h, heads, kv, d = model.hidden_size, model.num_attention_heads, model.kv_heads, model.dim_head
    kv_loc = max(1, kv // tp)
    f = model.ffn_hidden_size
    return {"h": h, "heads": heads // tp, "kv": kv_loc, "d": d, "ffn": f // tp,
            "gemms": [((heads // tp + 2 * kv_loc) * d, h), (h, heads * d // tp),
                      (2 * f // tp, h), (h, f // tp)],
            "head": (model.vocab_size // tp, h)}


def aic_step_s(model, gpu: str, dtype: str, tp: int, phase: str, size: int) -> float:
    """aiconfigurator's step: ``phase`` "prefill" (``size`` = prompt tokens, batch 1) or
    "decode" (``size`` = batch, each sequence at DECODE_KV cached tokens)."""
    db, s = AicGPU(gpu, dtype), shapes(model, tp)
    h, layers = s["h"], model.num_layers
    tokens, batch = (size, 1) if phase == "prefill" else (size, size)
    per_layer = sum(db.gemm_s(tokens, n, k) for n, k in s["gemms"])
    per_layer += 2 * db.mem_s(tokens * 8 * h) + db.mem_s(tokens * 3 * s["ffn"] * 2)
    per_layer += 2 * db.allreduce_s(tp, tokens * h)
    if phase == "prefill":
        attn = db.ctx[1, size, s["heads"], s["kv"], s["d"]] * 1e-3
        q_bytes, k_bytes = s["heads"] * s["d"] * 2, s["kv"] * s["d"] * 2
        attn += 1.1 * (2 * db.mem_s(q_bytes + k_bytes) + 2 * db.mem_s(k_bytes))
    else:
        attn = db.gen[size, DECODE_KV, s["heads"], s["kv"], s["d"]] * 1e-3
    once = (db.mem_s(tokens * h * 2) + db.allreduce_s(tp, tokens * h)
            + db.gemm_s(batch, *s["head"], bf16=True))
    return layers * (per_layer + attn) + once


def planner_step_s(model, cluster, engine, dtype: str, tp: int, phase: str,
                   size: int) -> float:
    from planner.costmodel.serve.step import decode_step_s, prefill
    from planner.specs.serve import ServePlan

    plan = ServePlan(tp=tp, weight_dtype=dtype, kv_dtype="bf16",
                     prefill_chunk=max(PREFILL_ISL), concurrency=max(DECODE_BATCH))
    if phase == "prefill":
        return prefill(model, cluster, plan, size, engine).latency_s
    return decode_step_s(model, cluster, plan, DECODE_KV, engine, batch=size)


def clusters() -> dict:
    """The catalog's DGX H100 and the same pod with H200s (procure's derived template)."""
    from planner.procurement.templates import derived_template
    from planner.specs.loaders import load_cluster, load_gpu

    base = load_cluster("dgx-h100-superpod")
    return {"h100_sxm": base, "h200_sxm": derived_template(base, load_gpu("h200"))}


def rows(dtype: str = "bf16", engine_name="trtllm") -> list[dict]:
    """One row per (model, GPU, TP, phase, size): both step times and their ratio
    (``engine_name``: a catalog engine profile or a ServeEngine)."""
    from planner.specs.loaders import load_model
    from planner.specs.serve import load_engine

    engine, pods, out = load_engine(engine_name), clusters(), []
    for name in MODELS:
        model = load_model(name)
        for gpu in GPUS:
            for tp in TP:
                for phase, sizes in (("prefill", PREFILL_ISL), ("decode", DECODE_BATCH)):
                    for size in sizes:
                        aic = aic_step_s(model, gpu, dtype, tp, phase, size)
                        ours = planner_step_s(model, pods[gpu], engine, dtype, tp, phase, size)
                        out.append({"model": name, "gpu": gpu, "tp": tp, "phase": phase,
                                    "size": size, "aic_ms": aic * 1e3, "planner_ms": ours * 1e3,
                                    "ratio": ours / aic})
    return out


def summary(table: list[dict]) -> list[dict]:
    """Per (model, GPU, phase): the geometric mean ratio and the worst row."""
    groups: dict = {}
    for r in table:
        groups.setdefault((r["model"], r["gpu"], r["phase"]), []).append(r)
    out = []
    for (model, gpu, phase), rs in groups.items():
        gm = math.exp(sum(math.log(r["ratio"]) for r in rs) / len(rs))
        worst = max(rs, key=lambda r: abs(math.log(r["ratio"])))
        out.append({"model": model, "gpu": gpu, "phase": phase, "geomean": gm, "worst": worst})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16", help="weight dtype")
    ap.add_argument("--engine", default="trtllm", help="the planner's engine profile")
    args = ap.parse_args()
    src = database()["source"]
    print(f"machine: {platform.machine()} {platform.system()} {platform.release()}, "
          f"Python {platform.python_version()} (the comparison is arithmetic; no GPU runs)")
    print(f"aiconfigurator {src['repo']}@{src['commit'][:12]}, {src['engine']}; "
          f"planner engine {args.engine}; weights {args.dtype}, KV bf16")
    table = rows(args.dtype, args.engine)
    print(f"{'model':<11} {'gpu':<9} {'tp':>2} {'phase':<7} {'size':>5} "
          f"{'aic ms':>9} {'planner ms':>10} {'ratio':>6}")
    for r in table:
        flag = "" if abs(r["ratio"] - 1) <= BOUND else "  *"
        print(f"{r['model']:<11} {r['gpu']:<9} {r['tp']:>2} {r['phase']:<7} {r['size']:>5} "
              f"{r['aic_ms']:>9.3f} {r['planner_ms']:>10.3f} {r['ratio']:>6.2f}{flag}")
    print("\n(size: prompt tokens for prefill, batch for decode; * beyond +-15 %)")
    print(f"{'model':<11} {'gpu':<9} {'phase':<7} {'geomean':>7}  worst row")
    for s in summary(table):
        w = s["worst"]
        print(f"{s['model']:<11} {s['gpu']:<9} {s['phase']:<7} {s['geomean']:>7.2f}  "
              f"{w['ratio']:.2f} (tp {w['tp']}, size {w['size']})")
    within = sum(abs(r["ratio"] - 1) <= BOUND for r in table)
    print(f"within 15 %: {within} of {len(table)} rows")


if __name__ == "__main__":
    main()
