"""Held-out check on a third framework: torchtitan's published FSDP2 runs of Llama 2 and
Llama 3 on 64 A100 80GB (bf16, FlashAttention through SDPA). Nothing here is fitted.

Measurements: pytorch/torchtitan ``docs/performance.md`` at commit
041336434916bdc0f88c1f89fda176fd3c2092e4, tables "Llama 3 performance numbers" and
"Llama 2 performance numbers": FSDP2 (ZeRO-3) over all 64 GPUs, local batch 1 (Llama 3,
8,192 tokens) or 2 (Llama 2, 4,096), tokens/s per GPU ("WPS"). torchtitan's activation
checkpointing maps onto the plan's ``recompute``: "no" is ``none``, "full" is ``full``,
"selective layer" (every second block, ``selective_ac_option = 2``) is ``half``. Its
"selective op" rows (per-operator saving policy) have no counterpart and are left out.
These runs predate torch.compile in torchtitan: its norms, SwiGLU and RoPE ran as PyTorch
eager operators (``fused_elementwise: false``); the last column shows what the model
would say with fused kernels.

    python benchmarks/bench_heldout_torchtitan.py        # about 1 s
"""

from __future__ import annotations

from planner.costmodel.train.evaluator import evaluate
from planner.specs.loaders import load_cluster, load_model
from planner.specs.plan import Plan
from planner.validation.errors import summary

#: model, sequence, local batch, recompute, published tokens/s/GPU, published MFU %
ROWS = [
    ("llama3-8b", 8192, 1, "half", 2904, 56.8),
    ("llama3-70b", 8192, 1, "full", 331, 51.7),
    ("llama2-13b", 4096, 2, "none", 2162, 61.1),
    ("llama2-13b", 4096, 2, "half", 1914, 54.1),
    ("llama2-70b", 4096, 2, "full", 353, 50.5),
]
GPUS = 64


def main() -> None:
    cluster = load_cluster("dgx-a100-superpod", GPUS)
    print(f"{'run':28s} {'published':>9s} {'predicted':>9s} {'error':>7s}  MFU pub/pred"
          "    fused kernels")
    errors: dict[bool, list[float]] = {True: [], False: []}
    for name, seq, mbs, recompute, measured, mfu in ROWS:
        out = {}
        for fused in (False, True):
            plan = Plan(dp=GPUS, microbatch_size=mbs, global_batch_size=GPUS * mbs, seq_len=seq,
                        zero_stage=3, recompute=recompute, attention="flash", dtype="bf16",
                        fused_elementwise=fused)
            est = evaluate(load_model(name), cluster, plan)
            predicted = GPUS * mbs * seq / est.iteration_time_s / GPUS
            errors[fused].append(predicted / measured - 1)
            out[fused] = (predicted, est.mfu)
        print(f"{name + ' ' + recompute:28s} {measured:9,.0f} {out[False][0]:9,.0f} "
              f"{errors[False][-1]:+7.1%}  {mfu:.1f} / {out[False][1]:.1%}    "
              f"{errors[True][-1]:+.1%}")
    for fused, errs in errors.items():
        print(f"A100 FSDP2, {'fused' if fused else 'eager'} elementwise: {summary(errs)}")


if __name__ == "__main__":
    main()
