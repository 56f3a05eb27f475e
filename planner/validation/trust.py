"""Trust at the optimum: the solver's answer against the best published run like it.

Where the optimum beats the best published configuration for the same model, GPU generation,
precision, sequence length and scale by more than its error band, either the source missed
a better plan or the model is optimistic in that corner; a user cannot tell which from the
figure alone. :func:`published_comparison` says so and names what makes the difference: each
plan field where the optimum and the published plan differ is set back to the published
value alone (one at a time, everything else the optimum's), and the slowdown each causes is
its share of the gain.
"""

from __future__ import annotations

from typing import Any

from planner.costmodel.train.evaluator import Estimate, evaluate
from planner.errors import InputError
from planner.specs.cluster import ClusterSpec
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan
from planner.validation.band import generation, heldout_file
from planner.validation.corpus import Run, runs_from

#: A published run counts as the same scale within this factor of GPUs.
SCALE_FACTOR = 2.0
#: Without a band, a gain beyond this is worth saying.
NO_BAND_PCT = 10.0
#: What the attribution sets back one at a time: a label and the plan fields it moves
#: together (the parallel degrees move as one, so the GPU count stays; TP's communication
#: form goes with its degree).
SETTINGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("parallel degrees", ("tp", "pp", "cp", "dp", "sequence_parallel", "tp_comm")),
    *((f, (f,)) for f in ("ep", "expert_tp", "microbatch_size", "virtual_stages", "recompute",
                          "zero_stage", "overlap_tp_comm", "fp8_params", "grad_reduce_dtype",
                          "cp_comm", "offload_optimizer", "offload_params",
                          "fused_elementwise", "attention", "uneven_pipeline")))


def _show(plan: Plan, fields: tuple[str, ...]) -> str:
    if fields[0] == "tp":
        return " ".join(f"{d}{getattr(plan, d)}" for d in ("tp", "cp", "pp", "dp"))
    return str(getattr(plan, fields[0]))


def tokens_per_s_per_gpu(run: Run) -> float:
    """The run's published throughput, whatever its source's metric."""
    if run.metric == "iteration_time_s":
        return run.plan.global_batch_size * run.plan.seq_len / run.measured / run.gpus
    return run.measured


def similar_runs(model: ModelSpec, cluster: ClusterSpec, plan: Plan) -> list[Run]:
    """Published runs of the same model, generation, precision and sequence length within
    SCALE_FACTOR of the GPU count. Matched on the recorded index first (the held-out file),
    so that a solve builds only the files of the runs that match, not the corpus (0.8 s)."""
    gen, gpus = generation(cluster.gpu.name), plan.world_size
    hits = [r for r in heldout_file()
            if r["model"] == model.name and r["generation"] == gen and r["dtype"] == plan.dtype
            and r["seq_len"] == plan.seq_len
            and 1 / SCALE_FACTOR <= r["gpus"] / gpus <= SCALE_FACTOR]
    names = {r["run"] for r in hits}
    return [r for origin in sorted({r["origin"] for r in hits}) for r in runs_from(origin)
            if r.name in names]


def _attribution(model: ModelSpec, cluster: ClusterSpec, plan: Plan, est: Estimate,
                 ref: Plan) -> list[tuple[str, float]]:
    """Per differing field: how much slower the optimum runs with that field set back to
    the published value (fraction; fields whose setting back is not a valid or fitting plan
    are left out)."""
    out = []
    base = est.iteration_time_s or 0.0
    for label, fields in SETTINGS:
        if all(getattr(plan, f) == getattr(ref, f) for f in fields):
            continue
        if fields[0] == "tp" and ref.world_size != plan.world_size:
            continue
        update = {f: getattr(ref, f) for f in fields}
        try:
            alt = evaluate(model, cluster, Plan.model_validate(dict(plan.model_dump(), **update)))
        except (ValueError, InputError):
            continue
        if alt.feasible and alt.iteration_time_s and base:
            out.append((f"{label} {_show(plan, fields)} -> {_show(ref, fields)}",
                        alt.iteration_time_s / base - 1))
    return sorted(out, key=lambda x: -x[1])


def published_comparison(model: ModelSpec, cluster: ClusterSpec, plan: Plan, est: Estimate,
                         band_pct: float | None) -> dict[str, Any] | None:
    """The best similar published run, the optimum's predicted gain over it, and, where the
    gain exceeds the band, a note naming what makes the difference; None when no published
    run is similar or the plan does not fit."""
    if not est.feasible or not est.iteration_time_s:
        return None
    runs = similar_runs(model, cluster, plan)
    if not runs:
        return None
    best = max(runs, key=tokens_per_s_per_gpu)
    published = tokens_per_s_per_gpu(best)
    predicted = plan.global_batch_size * plan.seq_len / est.iteration_time_s / plan.world_size
    gain = predicted / published - 1
    limit = band_pct if band_pct is not None else NO_BAND_PCT
    out: dict[str, Any] = {"run": best.name, "source": best.source, "gpus": best.gpus,
                           "published_tokens_per_s_per_gpu": published,
                           "predicted_tokens_per_s_per_gpu": predicted,
                           "gain_pct": 100 * gain, "beyond_band": 100 * gain > limit,
                           "differences": [], "note": None}
    if out["beyond_band"]:
        diffs = _attribution(model, cluster, plan, est, best.plan)
        out["differences"] = [{"setting": s, "slowdown_pct": 100 * d} for s, d in diffs]
        named = ", ".join(f"{s} ({100 * d:+.0f} %)" for s, d in diffs[:3] if d > 0)
        out["note"] = (
            f"this plan is predicted {100 * gain:.0f} % faster per GPU than the best "
            f"published run like it ({best.source}: {best.name}, {published:,.0f} "
            f"tokens/s/GPU on {best.gpus:,} GPUs), beyond its "
            f"{'±%.0f %% band' % band_pct if band_pct is not None else 'no-band threshold'}"
            f"; either the source did not try it or the model is optimistic here. "
            + (f"What makes the difference, each set back alone: {named}" if named else
               "No single setting set back accounts for it"))
    return out
