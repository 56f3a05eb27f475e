"""Held-out check on a third framework: torchtitan's published FSDP2 runs of Llama 2 and
Llama 3 on 64 A100 80GB (bf16, FlashAttention through SDPA). Nothing here is fitted.

Measurements (``hardware_catalog/calibration/corpus/torchtitan-a100.yaml``): pytorch/torchtitan ``docs/performance.md`` at commit
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

from planner.validation.corpus import corpus_runs
from planner.validation.errors import summary

#: hardware_catalog/calibration/corpus/torchtitan-a100.yaml
SOURCE = "torchtitan-a100"


def main() -> None:
    print(f"{'run':34s} {'published':>9s} {'predicted':>9s} {'error':>7s}  MFU pred"
          "    fused kernels")
    errors: dict[bool, list[float]] = {True: [], False: []}
    for run in (r for r in corpus_runs() if r.source == SOURCE):
        for fused in (False, True):
            plan = run.plan.model_copy(update={"fused_elementwise": fused})
            est = run.estimate(plan=plan)
            errors[fused].append(run.residual(est, plan))
            if not fused:
                mfu = est.mfu
        print(f"{run.name:34s} {run.measured:9,.0f} {run.measured * (1 + errors[False][-1]):9,.0f} "
              f"{errors[False][-1]:+7.1%}  {mfu:.1%}    {errors[True][-1]:+.1%}")
    for fused, errs in errors.items():
        print(f"A100 FSDP2, {'fused' if fused else 'eager'} elementwise: {summary(errs)}")


if __name__ == "__main__":
    main()
