"""Held-out check on newer NVIDIA recipes: NeMo 24.12 (H100), the NeMo 25.02 B200 rows the
calibration file leaves out, and NeMo 25.04 on GB200 (a GPU with no calibration run: its
efficiencies are the B200 fit). Nothing here is fitted; the rows are not read by
``tools/calibrate.py`` or ``planner validate``.

Sources (FP8, per-tensor scaling, tokens/s/GPU as published; the rows are
``hardware_catalog/calibration/corpus/nemo2412.yaml``, ``nemo2502.yaml`` and ``nemo2504.yaml``):
  * NeMo 24.12 performance summary, DGX-H100:
    docs.nvidia.com/nemo-framework/user-guide/24.12/nemotoolkit/performance/performance_summary.html
  * NeMo 25.02 performance summary, DGX-B200 (rows LLAMA3-8B and LLAMA3-405B):
    docs.nvidia.com/nemo-framework/user-guide/latest/performance/performance_summary.html
  * NeMo 25.04 performance summary, DGX-GB200:
    docs.nvidia.com/nemo-framework/user-guide/latest/performance/archive/25.04-performance-summary.html

Each row's published parallel sizes are evaluated with the recipe settings of
``planner.validation.nemo`` (distributed optimizer, FP8 parameters, bf16 gradient
reduction, no recomputation, TP communication overlap). Two rows need a setting the tables
do not give: Llama 3 405B (126 layers on pp 8 x vp 8) runs with Megatron's uneven first and
last stages, and the GB200 Llama 3 70B row uses Megatron-FSDP (ZeRO-3 here) at tp 1 with
a microbatch that does not fit without recomputation or activation offload; its
recomputation is assumed ``half``, the solver's choice with everything else pinned. Rows whose model is not in the
catalog are built from NeMo's own configs (GPT-3 5B and 20B: ``GPTConfig5B``/``GPTConfig20B`` in
NVIDIA/NeMo ``nemo/collections/llm/gpt/model/base.py``, Megatron-Core's default dropout 0.1,
the GPT-2 vocabulary of 50,257 padded to a multiple of 128); Nemotron 8B, whose NeMo config
this project has not read, is left out rather than guessed.

    python benchmarks/bench_heldout_nemo.py          # about 10 s
"""

from __future__ import annotations

from planner.validation.corpus import corpus_runs
from planner.validation.errors import summary

#: under hardware_catalog/calibration/
FILES = ("corpus/nemo2412.yaml", "corpus/nemo2502.yaml", "corpus/nemo2504.yaml")


def main() -> None:
    errors: dict[str, list[float]] = {}
    print(f"{'run':34s} {'published':>9s} {'predicted':>9s} {'error':>7s}  memory   note")
    runs = [r for r in corpus_runs() if r.origin in FILES]
    for run in runs:
        est = run.estimate()
        err = run.residual(est)
        if err is None:
            print(f"{run.name:34s} {run.measured:9,.0f} {'-':>9s} {'':>7s}  infeasible: "
                  f"{est.reasons[0]}")
            continue
        errors.setdefault(run.generation, []).append(err)
        note = []
        if run.plan.uneven_pipeline:
            note.append("uneven pipeline")
        if run.plan.zero_stage == 3:
            note.append(f"FSDP, recompute assumed: {run.plan.recompute}")
        print(f"{run.name:34s} {run.measured:9,.0f} {run.measured * (1 + err):9,.0f} "
              f"{err:+7.1%}  {est.memory_per_gpu_bytes / 2**30:5.0f} GiB  {', '.join(note)}")
    for gen, errs in errors.items():
        print(f"{gen}: {summary(errs)}")


if __name__ == "__main__":
    main()
