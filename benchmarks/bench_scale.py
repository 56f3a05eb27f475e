"""Does the error depend on the GPU count? Published runs of one model at several scales,
the model's error on each, and the error's slope per tenfold more GPUs
(:func:`planner.validation.scaling.residual_slope`). Nothing here is fitted.

Sources:
  * MegaScale (Jiang et al., NSDI 2024), Table 2, Megatron-LM rows: a 175B model (Table 1:
    96 layers, hidden 12,288, 128 heads, TP 8, PP 8; Sec. 6.1: interleaved schedule with 6
    chunks per stage, sequence 2,048, vocabulary 64,000) at batch 768 on 256, 512, 768 and
    1,024 Ampere GPUs (eight 200 Gb/s NICs per 8-GPU server, Sec. 3.6): 40.0, 21.2, 15.2 and
    11.9 s per iteration. The baseline is Megatron-LM commit 285068c8 (Sec. 6.1), which has no
    overlap option: bf16 forces fp32 gradient accumulation and all-reduce, the distributed
    optimizer is off unless asked for, and the gradients are all-reduced after the
    forward-backward (megatron/arguments.py and megatron/training.py ``train_step`` at that
    commit); MegaScale's Table 3 lists TP, PP and DP overlap as its own additions. Sequence
    parallelism and no recomputation are assumed (not stated).
  * Nemotron-4 15B (Parmar et al. 2024), Table 2: TP 8, DP 96/192/288, batch 384/768/1,152,
    sequence 4,096 on DGX H100: 0.57, 0.58 and 0.64 s per iteration.
  * Llama 3 8B at TP2 and 4 sequences of 8,192 tokens per replica, 64 to 2,048 replicas on
    DGX H100: the model only (no published run), its weak-scaling slowdown.

    python benchmarks/bench_scale.py      # about 10 s
"""

from __future__ import annotations

from planner.costmodel.train.evaluator import evaluate
from planner.specs.loaders import load_cluster, load_model
from planner.specs.plan import Plan
from planner.validation.scaling import residual_slope

#: MegaScale Table 2, Megatron-LM, batch 768: GPUs -> seconds per iteration
MEGASCALE_175B = {256: 40.0, 512: 21.2, 768: 15.2, 1024: 11.9}
#: Parmar et al. 2024 (Nemotron-4 15B), Table 2: data-parallel size -> seconds per iteration
NEMOTRON_15B = {96: 0.57, 192: 0.58, 288: 0.64}


def megascale_rows(baseline: bool = True) -> list[tuple[int, float, float]]:
    """(GPUs, predicted s, measured s). ``baseline``: Megatron-LM 285068c8 as run (no
    overlap, fp32 all-reduce of the whole gradient); otherwise today's defaults (distributed
    optimizer, every overlap on)."""
    model = load_model("gpt3-175b").model_copy(
        update={"num_attention_heads": 128, "num_kv_heads": 128, "vocab_size": 64000,
                "tied_embeddings": True})
    cluster = load_cluster("dgx-a100-superpod")
    out = []
    for gpus, measured in MEGASCALE_175B.items():
        knobs = (dict(zero_stage=0, overlap_dp_grad_reduce=False, overlap_param_gather=False,
                      overlap_p2p_comm=False, overlap_tp_comm=False)
                 if baseline else dict(zero_stage=1))
        plan = Plan(tp=8, pp=8, dp=gpus // 64, microbatch_size=1, global_batch_size=768, seq_len=2048,
                    virtual_stages=6, sequence_parallel=True, dtype="bf16", **knobs)
        est = evaluate(model, cluster.resized(gpus), plan)
        assert est.feasible, est.reasons
        out.append((gpus, est.iteration_time_s, measured))
    return out


def nemotron_rows() -> list[tuple[int, float, float]]:
    model, cluster = load_model("nemotron-4-15b"), load_cluster("dgx-h100-superpod")
    out = []
    for dp, measured in NEMOTRON_15B.items():
        plan = Plan(tp=8, pp=1, dp=dp, microbatch_size=1, global_batch_size=4 * dp, seq_len=4096,
                    zero_stage=1, sequence_parallel=True)
        est = evaluate(model, cluster.resized(8 * dp), plan)
        assert est.feasible, est.reasons
        out.append((8 * dp, est.iteration_time_s, measured))
    return out


def llama_weak_scaling() -> list[tuple[int, float]]:
    model, cluster = load_model("llama3-8b"), load_cluster("dgx-h100-superpod")
    out = []
    for dp in (64, 256, 1024, 2048):
        plan = Plan(tp=2, pp=1, dp=dp, microbatch_size=1, global_batch_size=4 * dp, seq_len=8192,
                    zero_stage=1, sequence_parallel=True)
        est = evaluate(model, cluster.resized(2 * dp), plan)
        assert est.feasible, est.reasons
        out.append((dp, est.iteration_time_s))
    return out


def _report(title: str, rows: list[tuple[int, float, float]], weak: bool) -> None:
    """Errors, their slope, and the GPU-seconds per sequence of the largest run over the
    smallest's (the batch is fixed in strong scaling, grows with the GPUs in weak)."""
    print(title)
    errs = []
    for gpus, pred, meas in rows:
        err = 100 * (pred / meas - 1)
        errs.append((gpus, err))
        print(f"  {gpus:6,d} GPUs  predicted {pred:8.3f} s  measured {meas:7.2f} s  {err:+6.1f} %")
    fit = residual_slope(errs)
    scale = 1.0 if weak else rows[-1][0] / rows[0][0]
    print(f"  error slope {fit.slope_per_decade:+.1f} points per tenfold GPUs "
          f"(R^2 {fit.r2:.2f}); GPU-seconds per sequence, largest over smallest: measured "
          f"{rows[-1][2] / rows[0][2] * scale - 1:+.1%}, predicted "
          f"{rows[-1][1] / rows[0][1] * scale - 1:+.1%}")


def main() -> None:
    _report("MegaScale Table 2, Megatron-LM 175B on A100 (baseline as run: no overlap, ZeRO 0)",
            megascale_rows(True), weak=False)
    _report("MegaScale Table 2 with today's defaults (ZeRO 1, every overlap on)",
            megascale_rows(False), weak=False)
    _report("Nemotron-4 15B weak scaling (Parmar et al. 2024, Table 2)", nemotron_rows(), weak=True)
    rows = llama_weak_scaling()
    print("Llama 3 8B TP2, 4 x 8,192 tokens per replica (model only)")
    for dp, t in rows:
        print(f"  dp {dp:5,d}  {t:.4f} s  {t / rows[0][1] - 1:+.1%}")


if __name__ == "__main__":
    main()
