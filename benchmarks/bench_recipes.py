"""The solver's free optimum against NVIDIA's tuned NeMo recipes (issue: trust at the optimum).

For every row of ``hardware_catalog/calibration/nvidia_nemo_2407_2502.yaml``, solve with only
the model, cluster, GPU count, global batch, sequence length and dtype given (plus the
recipe's numeric settings: FP8 parameters and bf16 gradient reduction, precision choices
rather than parallelization), and print the predicted throughput of the optimum against the
published throughput of the recipe and against the model's prediction of the recipe itself.
The comparable optimum searches the features of the recipes' framework (NeMo/Megatron-LM:
sharding by the distributed optimizer, ZeRO-1); the last column searches every ZeRO stage
(FSDP/DeepSpeed), which the recipes could not use.

    python benchmarks/bench_recipes.py            # about a minute
    python benchmarks/bench_recipes.py --repeats 3   # each row's two solves 3 times

The time at the end of a row is the wall time of its two solves, median, min and max over
``--repeats`` runs; the first line names the machine.

A real optimum may beat a tuned recipe by a few percent; a large margin means the model is
optimistic where the solver lands (README, "Trust at the optimum").
"""

from __future__ import annotations

import argparse
import statistics

from _timing import add_repeats, machine_line, spread_text, timed
from formulations.train.space import SpaceOptions
from planner.api import solve
from planner.costmodel.train.evaluator import evaluate
from planner.validation.nemo import (
    nemo_data,
    recipe_base,
    recipe_cluster,
    recipe_model,
    recipe_plan,
    tokens_per_s_per_gpu,
)


def _plan_text(p) -> str:
    extra = f" ep{p.ep}" if p.ep > 1 else ""
    return (f"tp{p.tp} pp{p.pp} v{p.virtual_stages} cp{p.cp} dp{p.dp}{extra} mbs{p.microbatch_size}"
            f" z{p.zero_stage} rc={p.recompute if isinstance(p.recompute, str) else 'mixed'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_repeats(ap)
    args = ap.parse_args()
    data = nemo_data()
    print(machine_line())
    ratios, free_ratios = [], []
    print(f"{'run':38s} {'published':>9s} {'recipe*':>8s} {'optimum*':>8s} {'opt/pub':>8s}"
          f" {'opt/recipe*':>11s} {'GiB rec/opt':>11s}  optimum plan   (* = predicted, "
          "tokens/s/GPU; GiB: the model's memory per GPU, headroom included)")
    for row in data["rows"]:
        model, cluster = recipe_model(data, row["model"]), recipe_cluster(row)
        rec_est = evaluate(model, cluster, recipe_plan(row))
        recipe = tokens_per_s_per_gpu(row, rec_est)
        base = recipe_base(row)
        kw = dict(global_batch_size=base["global_batch_size"], seq_len=base["seq_len"],
                  dtype=base["dtype"], time_limit_s=120,
                  fix={"fp8_params": base["fp8_params"],
                       "grad_reduce_dtype": base["grad_reduce_dtype"]})
        # the recipes' framework shards with the distributed optimizer (ZeRO-1) only
        runs, walls = timed(lambda kw=kw: (
            solve(model, cluster, options=SpaceOptions(max_zero_stage=1), **kw).best,
            solve(model, cluster, **kw).best), args.repeats)
        same, free = runs[-1]
        opt, any_fw = (tokens_per_s_per_gpu(row, b.estimate) for b in (same, free))
        ratios.append(opt / row["measured"])
        free_ratios.append(any_fw / row["measured"])
        gib = f"{rec_est.memory_per_gpu_bytes / 2**30:.0f}/{same.estimate.memory_per_gpu_bytes / 2**30:.0f}"
        print(f"{row['name']:38s} {row['measured']:9,.0f} {recipe:8,.0f} {opt:8,.0f} "
              f"{opt / row['measured'] - 1:+8.1%} {opt / recipe - 1:+11.1%} {gib:>11s}  "
              f"{_plan_text(same.plan)}  | any framework {any_fw / row['measured'] - 1:+.1%}"
              f" {_plan_text(free.plan)}  {spread_text(walls, fmt='.1f')}")
    for name, r in (("Megatron features (ZeRO <= 1)", ratios), ("any framework", free_ratios)):
        print(f"optimum vs published, {name}: mean {statistics.mean(r) - 1:+.1%}, "
              f"max {max(r) - 1:+.1%}, min {min(r) - 1:+.1%}")


if __name__ == "__main__":
    main()
