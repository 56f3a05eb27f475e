"""Measure the kernel table of one GPU with PyTorch: GEMM throughput by shape and dtype,
fused attention by backend, sequence length and head dimension, memory bandwidth by size
and operator, and the small-M GEMMs and KV-cache attention of a serving decode step.

The output is the catalog's kernel table (``hardware_catalog/kernels/<gpu>.yaml``): kernel
facts, so that the cost model's kernel speeds come from measurements rather than from fits
to end-to-end training runs. Run it on the GPU to be described (PyTorch with CUDA needed;
the planner itself never needs a GPU):

    python tools/microbench.py --gpu h200 --out hardware_catalog/kernels/h200.yaml
    python tools/microbench.py --gpu h100-sxm --out k.yaml --families gemm,attention --budget-s 120

What is timed and how (the same conventions as the shared Hopper measurements):

- gemm: ``torch.matmul`` for bf16 (cuBLASLt) and ``torch._scaled_mm`` for fp8 (e4m3 x e4m3
  -> bf16, per-tensor scales) of an (m x k) by (k x n) product; TFLOP/s = 2mnk / time.
- attention: ``scaled_dot_product_attention`` with one backend forced by ``sdpa_kernel``
  (FLASH_ATTENTION: PyTorch's FlashAttention-2; CUDNN_ATTENTION: cuDNN's fused attention, the
  kernel Transformer Engine uses on Hopper); causal FLOPs = 2 * 2 * b * h * s^2 * d / 2, the
  backward counted as 2.5x the forward's; backward time = (forward + backward) - forward.
- memory: a device-to-device copy (bytes read plus written per second) by size, and the
  eager element-wise operators a transformer layer runs (RMSNorm, SwiGLU, residual add) with
  the bytes each moves.
- decode_gemm / decode_attention: the GEMMs of one decode step (M = tokens in the batch) with
  the weight bytes streamed per second, and one query token per sequence against a bf16 KV
  cache with the KV bytes read per second.

Each figure is the mean over timed repetitions (CUDA events, at least ``MIN_TIMED_S`` of GPU
time or ``MAX_REPS`` repetitions) after warm-ups, random inputs, default clocks. The table is
rewritten after every family, so a run stopped by ``--budget-s`` or a time limit keeps what it
measured; a shape a backend cannot run is recorded under ``skipped`` with the reason.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import sys
import tempfile
import time
from typing import Any, Callable

try:
    import yaml
except ImportError:  # the GPU machine may lack PyYAML: JSON is YAML too
    yaml = None

#: Timed repetitions: enough GPU time that event resolution (~0.5 us) and launch jitter
#: are below 1 % of the figure, bounded for the largest shapes.
MIN_TIMED_S = 0.05
MIN_REPS, MAX_REPS = 3, 200
WARMUPS = 3

# GEMM grid: m = tokens per microbatch on a GPU, n and k = hidden / FFN / head dimensions
# after tensor parallelism (Llama 3 8B-405B, Mixtral, GPT-3 shards span these).
GEMM_M = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
GEMM_NK = (512, 1024, 2048, 4096, 8192, 16384, 28672)
#: Shapes of the shared Hopper file, for a direct comparison with an independent run.
GEMM_LLM = ((4096, 128256, 2048), (8192, 1280, 8192), (8192, 4096, 4096), (8192, 4096, 14336),
            (8192, 6144, 4096), (8192, 7168, 8192), (8192, 8192, 1024), (8192, 8192, 3584),
            (8192, 16032, 8192), (8192, 28672, 4096), (16384, 128256, 4096))

ATTN_BACKENDS = ("FLASH_ATTENTION", "CUDNN_ATTENTION")
ATTN_SEQ = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
#: Tokens per attention call: batch = max(1, tokens / seq), as a training microbatch.
ATTN_TOKENS = 32768
#: (heads, kv_heads, head_dim, causal): MHA at the common head dims, GQA 4:1, and
#: non-causal (encoders, ViT) at head dim 128.
ATTN_CASES = ((16, 16, 128, True), (32, 32, 64, True), (32, 8, 128, True),
              (16, 16, 128, False))

MEM_COPY_BYTES = (1 << 20, 8 << 20, 64 << 20, 512 << 20, 2 << 30)
MEM_TOKENS = (4096, 16384, 65536)
MEM_HIDDEN = 8192

DECODE_M = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
#: (n, k) of Llama 3 8B's qkv, o, gate-up, down, and a Llama 3 70B TP4 shard's.
DECODE_NK = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336),
             (2560, 8192), (8192, 2048), (14336, 8192), (8192, 7168))
DECODE_BATCH = (1, 8, 32, 64, 128, 256)
DECODE_KV_LEN = (512, 2048, 8192, 32768)

FAMILIES = ("gemm", "attention", "memory", "decode_gemm", "decode_attention")


def _timer(torch: Any) -> Callable[[Callable[[], Any]], float]:
    """Mean seconds per call of ``fn`` on the current stream."""

    def run(fn: Callable[[], Any]) -> float:
        for _ in range(WARMUPS):
            fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        once_s = max(start.elapsed_time(end) / 1e3, 1e-7)
        reps = int(min(MAX_REPS, max(MIN_REPS, MIN_TIMED_S / once_s)))
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / reps

    return run


class Bench:
    """One GPU's measurements, written to ``out`` after every family."""

    def __init__(self, torch: Any, gpu: str, out: str, budget_s: float):
        self.torch, self.gpu, self.out = torch, gpu, out
        self.deadline = time.monotonic() + budget_s
        self.time = _timer(torch)
        self.table: dict[str, Any] = {"gpu": gpu, "source": _source(torch), "skipped": []}

    def left(self) -> bool:
        return time.monotonic() < self.deadline

    def skip(self, family: str, case: dict[str, Any], why: str) -> None:
        self.table["skipped"].append({"family": family, **case, "why": why[:200]})

    def save(self) -> None:
        folder = os.path.dirname(os.path.abspath(self.out))
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".microbench.", suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            fh.write(HEADER)
            if yaml is None:
                import json

                json.dump(self.table, fh, indent=1)
            else:
                yaml.safe_dump(self.table, fh, sort_keys=False, width=100)
        os.replace(tmp, self.out)

    # ---- families ----------------------------------------------------------------
    def gemm(self) -> None:
        torch = self.torch
        rows = self.table.setdefault("gemm", [])
        shapes = sorted({(m, n, k) for m in GEMM_M for n in GEMM_NK for k in GEMM_NK}
                        | set(GEMM_LLM))
        for dtype in ("bf16", "fp8"):
            for m, n, k in shapes:
                if not self.left():
                    return
                case = {"m": m, "n": n, "k": k, "dtype": dtype}
                try:
                    s = self.time(_gemm_fn(torch, m, n, k, dtype))
                except Exception as exc:  # a shape the library refuses is a fact, not a crash
                    self.skip("gemm", case, f"{type(exc).__name__}: {exc}")
                    continue
                rows.append({**case, "us": round(s * 1e6, 2),
                             "tflops": round(2 * m * n * k / s / 1e12, 1)})
                torch.cuda.empty_cache()

    def attention(self) -> None:
        torch = self.torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.functional import scaled_dot_product_attention as sdpa

        rows = self.table.setdefault("attention", [])
        for backend in ATTN_BACKENDS:
            for heads, kv_heads, d, causal in ATTN_CASES:
                for seq in ATTN_SEQ:
                    if not self.left():
                        return
                    if not causal and seq > 16384:
                        continue
                    batch = max(1, ATTN_TOKENS // seq)
                    case = {"backend": backend, "seq": seq, "heads": heads,
                            "kv_heads": kv_heads, "batch": batch, "head_dim": d,
                            "causal": causal}
                    try:
                        q = torch.randn(batch, heads, seq, d, device="cuda",
                                        dtype=torch.bfloat16, requires_grad=True)
                        k = torch.randn(batch, kv_heads, seq, d, device="cuda",
                                        dtype=torch.bfloat16, requires_grad=True)
                        v = torch.randn_like(k, requires_grad=True)
                        gqa = {"enable_gqa": True} if kv_heads != heads else {}
                        grad = torch.randn(batch, heads, seq, d, device="cuda",
                                           dtype=torch.bfloat16)
                        with sdpa_kernel(getattr(SDPBackend, backend)):
                            def fwd() -> Any:
                                with torch.no_grad():
                                    return sdpa(q, k, v, is_causal=causal, **gqa)

                            def fwd_bwd() -> None:
                                o = sdpa(q, k, v, is_causal=causal, **gqa)
                                o.backward(grad)

                            fwd_s = self.time(fwd)
                            both_s = self.time(fwd_bwd)
                    except Exception as exc:
                        self.skip("attention", case, f"{type(exc).__name__}: {exc}")
                        continue
                    finally:
                        q = k = v = grad = None
                        torch.cuda.empty_cache()
                    flops = 2 * 2 * batch * heads * seq * seq * d / (2 if causal else 1)
                    bwd_s = max(both_s - fwd_s, 1e-9)
                    rows.append({**case, "fwd_us": round(fwd_s * 1e6, 1),
                                 "bwd_us": round(bwd_s * 1e6, 1),
                                 "fwd_tflops": round(flops / fwd_s / 1e12, 1),
                                 "bwd_tflops": round(2.5 * flops / bwd_s / 1e12, 1)})

    def memory(self) -> None:
        torch = self.torch
        rows = self.table.setdefault("memory", [])
        for nbytes in MEM_COPY_BYTES:
            if not self.left():
                return
            src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
            dst = torch.empty_like(src)
            s = self.time(lambda: dst.copy_(src))
            rows.append({"op": "copy", "bytes": nbytes, "us": round(s * 1e6, 2),
                         "GBps": round(2 * nbytes / s / 1e9, 1)})
            src = dst = None
        bf = torch.bfloat16
        for tokens in MEM_TOKENS:
            if not self.left():
                return
            x = torch.randn(tokens, MEM_HIDDEN, device="cuda", dtype=bf)
            y = torch.randn_like(x)
            w = torch.randn(MEM_HIDDEN, device="cuda", dtype=bf)
            elems = x.numel()
            # bytes each eager operator moves at the tensor level (reads + writes), 2 B each
            ops: dict[str, tuple[Callable[[], Any], float]] = {
                "add": (lambda: x + y, 3 * 2 * elems),
                "silu_mul": (lambda: torch.nn.functional.silu(x) * y, 5 * 2 * elems),
                "cast_fp32": (lambda: x.float(), (2 + 4) * elems),
            }
            if hasattr(torch.nn.functional, "rms_norm"):
                ops["rms_norm"] = (lambda: torch.nn.functional.rms_norm(x, (MEM_HIDDEN,), w),
                                   2 * 2 * elems)
            for op, (fn, nbytes) in ops.items():
                try:
                    s = self.time(fn)
                except Exception as exc:
                    self.skip("memory", {"op": op, "tokens": tokens}, str(exc))
                    continue
                rows.append({"op": op, "tokens": tokens, "hidden": MEM_HIDDEN,
                             "bytes": int(nbytes), "us": round(s * 1e6, 2),
                             "GBps": round(nbytes / s / 1e9, 1)})
            x = y = w = None
            torch.cuda.empty_cache()

    def decode_gemm(self) -> None:
        torch = self.torch
        rows = self.table.setdefault("decode_gemm", [])
        for dtype in ("bf16", "fp8"):
            for n, k in DECODE_NK:
                for m in DECODE_M:
                    if not self.left():
                        return
                    if dtype == "fp8" and m < 16:  # _scaled_mm needs M a multiple of 16
                        continue
                    case = {"m": m, "n": n, "k": k, "dtype": dtype}
                    try:
                        s = self.time(_gemm_fn(torch, m, n, k, dtype))
                    except Exception as exc:
                        self.skip("decode_gemm", case, f"{type(exc).__name__}: {exc}")
                        continue
                    weight_bytes = n * k * (1 if dtype == "fp8" else 2)
                    rows.append({**case, "us": round(s * 1e6, 2),
                                 "weight_GBps": round(weight_bytes / s / 1e9, 1),
                                 "tflops": round(2 * m * n * k / s / 1e12, 2)})

    def decode_attention(self) -> None:
        torch = self.torch
        from torch.nn.functional import scaled_dot_product_attention as sdpa

        rows = self.table.setdefault("decode_attention", [])
        heads, kv_heads, d = 32, 8, 128
        for batch in DECODE_BATCH:
            for kv_len in DECODE_KV_LEN:
                if not self.left():
                    return
                case = {"batch": batch, "kv_len": kv_len, "heads": heads,
                        "kv_heads": kv_heads, "head_dim": d}
                kv_bytes = 2 * batch * kv_heads * kv_len * d * 2
                if kv_bytes > 16 << 30:
                    continue
                try:
                    q = torch.randn(batch, heads, 1, d, device="cuda", dtype=torch.bfloat16)
                    k = torch.randn(batch, kv_heads, kv_len, d, device="cuda",
                                    dtype=torch.bfloat16)
                    v = torch.randn_like(k)
                    with torch.no_grad():
                        s = self.time(lambda: sdpa(q, k, v, enable_gqa=True))
                except Exception as exc:
                    self.skip("decode_attention", case, f"{type(exc).__name__}: {exc}")
                    continue
                finally:
                    q = k = v = None
                    torch.cuda.empty_cache()
                rows.append({**case, "us": round(s * 1e6, 2),
                             "kv_GBps": round(kv_bytes / s / 1e9, 1)})


def _gemm_fn(torch: Any, m: int, n: int, k: int, dtype: str) -> Callable[[], Any]:
    if dtype == "bf16":
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        return lambda: torch.matmul(a, b)
    f8 = torch.float8_e4m3fn
    a = torch.randn(m, k, device="cuda").to(f8)
    b = torch.randn(n, k, device="cuda").to(f8).t()  # column-major, as _scaled_mm requires
    one = torch.tensor(1.0, device="cuda")
    return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def _source(torch: Any) -> str:
    props = torch.cuda.get_device_properties(0)
    driver = ""
    try:
        import subprocess

        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,power.limit",
                                 "--format=csv,noheader"], capture_output=True, text=True,
                                timeout=10).stdout.strip()
    except Exception:
        pass
    return (f"tools/microbench.py on one {props.name} ({props.total_memory / 2**30:.0f} GiB, "
            f"{props.multi_processor_count} SMs; driver, power limit: {driver or 'unknown'}), "
            f"{_dt.date.today().isoformat()}, PyTorch {torch.__version__}, CUDA "
            f"{torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, "
            f"Python {platform.python_version()}")


HEADER = """\
# Kernel table measured by tools/microbench.py (its docstring says what is timed and how).
# Kernel facts: the cost model reads kernel speeds from here; framework effects are fitted
# separately, per framework, on published end-to-end runs.
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", required=True, help="catalog GPU name the table describes")
    ap.add_argument("--out", required=True, help="YAML file to write")
    ap.add_argument("--families", default=",".join(FAMILIES),
                    help=f"comma-separated subset of {', '.join(FAMILIES)}")
    ap.add_argument("--budget-s", type=float, default=1e9,
                    help="stop starting new measurements after this many seconds")
    args = ap.parse_args(argv)
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    bad = [f for f in families if f not in FAMILIES]
    if bad:
        ap.error(f"--families: unknown {', '.join(bad)}; expected some of {', '.join(FAMILIES)}")
    try:
        import torch
    except ImportError:
        print("error: PyTorch is needed on the GPU being measured", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("error: no CUDA device visible", file=sys.stderr)
        return 2
    bench = Bench(torch, args.gpu, args.out, args.budget_s)
    for family in families:
        t0 = time.monotonic()
        getattr(bench, family)()
        bench.save()
        n = len(bench.table.get(family, []))
        print(f"{family}: {n} rows in {time.monotonic() - t0:.1f} s", flush=True)
    if not bench.left():
        print("budget reached: the table is partial", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
