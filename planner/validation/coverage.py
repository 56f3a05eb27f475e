"""Where a plan leaves the measurements its GPU was calibrated on.

A solver lands where the model is most optimistic; the answer is only as good as the
calibration near it. For each GPU generation this module knows what its shared set covers
(``docs/validation.md``) and names what a plan uses beyond it, so that the output can say
so instead of presenting an extrapolation as a measurement-backed figure.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.specs.cluster import ClusterSpec
from planner.specs.plan import Plan
from planner.validation.band import heldout_file


@dataclass(frozen=True)
class CalibrationSet:
    """What one generation's calibration runs cover."""

    name: str
    dtypes: tuple[str, ...]
    max_gpus: int
    flash_attention: bool  # the runs used fused (flash) attention
    tp_overlap: bool  # the runs overlapped TP communication with GEMMs


KORTHIKANTI = CalibrationSet("Korthikanti et al. 2022 on Selene (A100)", ("fp16", "bf16"),
                             512, flash_attention=False, tp_overlap=False)
NEMO = CalibrationSet("NVIDIA NeMo 24.07/25.02 FP8 recipes", ("fp8",), 512,
                      flash_attention=True, tp_overlap=True)
#: The deepest sharding either set calibrates: the distributed optimizer's once-per-iteration
#: reduce-scatter and all-gather (NeMo); ZeRO-2/3 traffic every microbatch is beyond both.
CALIBRATED_ZERO_STAGE = 1
#: GPU catalog name -> the set its efficiencies were fitted on (None: no measurements).
SETS: dict[str, CalibrationSet | None] = {
    "a100-sxm-80gb": KORTHIKANTI, "a100-sxm-40gb": KORTHIKANTI,
    "h100-sxm": NEMO, "h200": NEMO, "b200": NEMO, "gb200": NEMO,
}


#: The held-out runs the notes quote, as ``tools/calibrate.py --write`` recorded them
#: (hardware_catalog/calibration/heldout_residuals.yaml): MosaicML llm-foundry's 80 GB tables
#: (A100 and H100; benchmarks/bench_heldout_mosaicml.py), its A100 rows, torchtitan's A100 runs
#: (benchmarks/bench_heldout_torchtitan.py). Read, not typed in, so a refit moves the note
#: with the docs (tests/test_check_docs.py holds them to the benchmarks' output).
MOSAICML = ("corpus/mosaicml-llm-foundry.yaml", None)
MOSAICML_A100 = ("corpus/mosaicml-llm-foundry.yaml", "A100")
TORCHTITAN_A100 = ("corpus/torchtitan-a100.yaml", "A100")


def recorded(runs: tuple[str, str | None]) -> str:
    """``N runs: MAPE x %, mean +y %`` of the recorded residuals (as shipped) of the corpus
    file ``runs[0]`` (only generation ``runs[1]`` when given); + is optimistic."""
    res = [r["residual"] for r in heldout_file() if r["origin"] == runs[0]
           and runs[1] in (None, r["generation"]) and r["residual"] is not None]
    if not res:
        return "no recorded runs"
    mape, mean = sum(abs(x) for x in res) / len(res), sum(res) / len(res)
    return (f"{len(res)} runs at MAPE {100 * mape:.1f} %, mean "
            f"{100 * mean:+.1f} % (+: optimistic)").replace("+-", "-")


def _scale_caveat(cluster: ClusterSpec | str) -> str:
    """What the model holds about scale beyond the calibration runs, and what it lacks."""
    cv = "" if isinstance(cluster, str) else f" {cluster.step_time_cv:g}"
    return (f"the wait for the slowest GPU comes from an assumed spread (step_time_cv{cv}, "
            "not fitted); slow nodes that stay slow, congestion from other jobs and "
            "heavy-tailed jitter are not modelled")


def calibration_notes(cluster: ClusterSpec | str, plan: Plan) -> list[str]:
    """What ``plan`` on ``cluster`` (or on a GPU named by its catalog name) uses beyond its
    GPU's calibration runs (empty when the plan stays inside them)."""
    gpu = cluster if isinstance(cluster, str) else cluster.gpu.name
    if gpu not in SETS:
        return [f"{gpu} has no published measurements in the calibration sets: its "
                "efficiencies are public-benchmark estimates, not fitted"]
    cal = SETS[gpu]
    assert cal is not None
    beyond = []
    if plan.dtype not in cal.dtypes:
        beyond.append(f"dtype {plan.dtype} (the set is {'/'.join(cal.dtypes)})")
    if plan.attention == "flash" and not cal.flash_attention:
        beyond.append("FlashAttention (the set uses unfused attention; MosaicML's A100 runs "
                      f"with it: {recorded(MOSAICML_A100)}, "
                      "benchmarks/bench_heldout_mosaicml.py; torchtitan's: "
                      f"{recorded(TORCHTITAN_A100)}, benchmarks/bench_heldout_torchtitan.py)")
    if (plan.overlap_tp_comm is not False and plan.tp > 1 and plan.sequence_parallel
            and not cal.tp_overlap):
        beyond.append("TP communication overlap (the set has none)")
    if plan.zero_stage > CALIBRATED_ZERO_STAGE:
        beyond.append(f"ZeRO-{plan.zero_stage} (the set shards at most the optimizer; "
                      "MosaicML's FSDP runs, which chose how its per-microbatch traffic is "
                      f"charged: {recorded(MOSAICML)}, benchmarks/bench_heldout_mosaicml.py)")
    if plan.world_size > cal.max_gpus:
        beyond.append(f"{plan.world_size:,} GPUs (the set has at most {cal.max_gpus}; "
                      + _scale_caveat(cluster) + ")")
    if not beyond:
        return []
    return [f"{gpu} is calibrated on {cal.name}; this plan goes beyond it: "
            + "; ".join(beyond) + ". Expect the prediction to be optimistic there "
            "(docs/validation.md)"]
