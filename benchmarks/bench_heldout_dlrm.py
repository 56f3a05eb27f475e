"""Held-out check of the DLRM model on a second framework: NVIDIA's DeepLearningExamples
DLRM for PyTorch on one DGX A100 (8x A100 80GB), Criteo 1TB. Nothing here is fitted.

Measurements: NVIDIA/DeepLearningExamples ``PyTorch/Recommendation/DLRM/README.md`` at
commit 729963dd47e7c8bd462ad10bfac7a7b0b604e6dd, "Training performance: NVIDIA DGX A100
(8x A100 80GB)": records/s averaged over an epoch, global batch 65,536 (8K per GPU on 8
GPUs), TF32 and mixed precision (``--amp``, which runs ``model.half()``: fp16 tables and
MLPs), CUDA graphs; models "small" (frequency threshold 15, 15 GB) on 1 GPU and "large"
(FL=3, 82 GB) on 8. The README gives the model sizes, not the 26 cardinalities: the
catalog's ``criteo-dlrm`` cardinalities are scaled to the size (fp32, dim 128); bottom
MLP 512-256-128, top 1024-1024-512-256-1, dot interaction, as the README's defaults.

What differs from the TorchRec/FBGEMM training the cost model describes, and is not
modelled: NVIDIA places the bottom MLP on GPU 0 only and the tables on the others
(largest first onto the GPU with most free memory, at most ceil(26/7) per GPU); its
tables train with ``torch.optim.SGD`` on sparse gradients (coalesced by sorting the
indices), not FBGEMM's fused backward; the dense MLPs are apex's fused MLP. Each row shows
the cost model's optimum over its own space and NVIDIA's table placement evaluated by the
same evaluator (table-wise; the bottom MLP stays data parallel).

    python benchmarks/bench_heldout_dlrm.py        # about 5 s
"""

from __future__ import annotations

import math

from formulations.dlrm.search import solve_sharding
from planner.costmodel.dlrm.model import dense_cost, table_options, usable_hbm_bytes
from planner.costmodel.dlrm.evaluate import evaluate_dlrm
from planner.specs.dlrm import DLRMPlan, DLRMSpec
from planner.specs.loaders import load_cluster, load_model
from planner.validation.errors import summary

#: GPUs, model size (GB, fp32), precision, published records/s
ROWS = [
    (1, 15e9, "tf32", 2_880_000),
    (1, 15e9, "amp", 4_020_000),
    (8, 82e9, "tf32", 11_400_000),
    (8, 82e9, "amp", 16_500_000),
]
BATCH = 65_536


def model(size_bytes: float, precision: str) -> DLRMSpec:
    base = load_model("criteo-dlrm")
    scale = size_bytes / (sum(t.rows for t in base.tables) * 128 * 4)
    tables = [t.model_copy(update={"rows": max(1, round(t.rows * scale))}) for t in base.tables]
    dt = "fp32" if precision == "tf32" else "fp16"
    return base.model_copy(update={"tables": tables, "global_batch_size": BATCH,
                                   "emb_dtype": dt, "dense_dtype": dt})


def nvidia_placement(m: DLRMSpec, c) -> DLRMPlan:
    """README "Embedding table placement and load balancing": GPU 0 holds the bottom MLP
    and no table (when there are others); largest table first onto the GPU with the most
    free memory; at most ceil(tables / GPUs for tables) per GPU."""
    ranks = list(range(1, c.num_gpus)) or [0]
    most = math.ceil(len(m.tables) / len(ranks))
    free = {r: usable_hbm_bytes(c) - dense_cost(m, c).memory_bytes for r in ranks}
    held = {r: 0 for r in ranks}
    out = []
    for i in sorted(range(len(m.tables)), key=lambda i: -m.tables[i].rows):
        size = next(o for o in table_options(m, c, i) if o.kind == "table_wise").cost.memory_bytes
        r = max((r for r in ranks if held[r] < most), key=lambda r: free[r])
        free[r] -= size
        held[r] += 1
        out.append(dict(table=m.tables[i].name, sharding_type="table_wise", ranks={r: 1}))
    return DLRMPlan(tables=out)


def main() -> None:
    print(f"{'run':24s} {'published':>11s} {'optimum':>11s} {'error':>7s} "
          f"{'NVIDIA plan':>11s} {'error':>7s}")
    errs: dict[str, list[float]] = {"optimum": [], "nvidia": []}
    for gpus, size, prec, measured in ROWS:
        m, c = model(size, prec), load_cluster("dgx-a100-superpod", gpus)
        best = solve_sharding(m, c, "cpsat", 20).estimate.samples_per_s
        theirs = evaluate_dlrm(m, c, nvidia_placement(m, c))
        assert theirs.feasible, theirs.reasons
        errs["optimum"].append(best / measured - 1)
        errs["nvidia"].append(theirs.samples_per_s / measured - 1)
        print(f"{gpus} GPU, {size / 1e9:.0f} GB, {prec:5s}    {measured:11,.0f} {best:11,.0f} "
              f"{errs['optimum'][-1]:+7.1%} {theirs.samples_per_s:11,.0f} "
              f"{errs['nvidia'][-1]:+7.1%}")
    for k, e in errs.items():
        print(f"DLRM, DGX A100, {k}: {summary(e)}")


if __name__ == "__main__":
    main()
