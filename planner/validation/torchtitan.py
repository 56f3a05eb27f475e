"""torchtitan's own published H100 training runs (Llama 3.1 8B/70B/405B, 8 to 512 GPUs),
predicted against the published tokens per second per GPU with the torchtitan profile.

Source data: ``hardware_catalog/calibration/torchtitan_h100.yaml`` (its header names the
files, tables and commits). Each run becomes the plan torchtitan ran
(``hardware_catalog/frameworks/torchtitan.yaml`` states what it can run):

- FSDP2 over ``data_parallel_shard_degree`` (``zero_stage=3``, ``dp`` = the FSDP degree),
  the gradient reduced in fp32 (``training.mixed_precision_reduce``), FSDP2's prefetch and
  overlapped reduce-scatter (always on);
- DTensor TP with sequence parallelism whenever tp > 1; async TP is the one TP overlap
  switch (``overlap_tp_comm``);
- torch.compile is ``fused_elementwise``; Float8 (tensorwise) is ``dtype=fp8`` and FSDP's
  float8 all-gather is ``fp8_params``;
- the pipeline schedule's stages per rank are ``virtual_stages`` and its microbatch is the
  local batch over the microbatch count; torchtitan splits layers unevenly where they do not
  divide;
- context parallelism's ``allgather`` rotation is ``cp_comm=all_gather`` (``alltoall``
  rotates K/V blocks around the ring: ``ring``).

Recomputation: ``full`` is ``full``. torchtitan's per-op selective checkpointing
(``selective_ac_option = 'op'``) saves the matmul and SDPA outputs except every second
matmul and recomputes the rest: about half of each layer's forward matmul FLOPs again, with
about half the matmul outputs kept. The plan's ``half`` (every second layer recomputed in
full) costs the same half of the forward and keeps the mean of ``none`` and ``full``; the
plan's ``selective`` is the opposite policy (recompute the attention core only, which op SAC
saves) and torchtitan's profile does not list it. Op SAC runs are therefore planned as
``half``.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml

from planner.costmodel.train.evaluator import Estimate, evaluate
from planner.costmodel.runtime import apply_profile
from planner.errors import InputError
from planner.specs.cluster import ClusterSpec
from planner.specs.framework import FrameworkProfile, load_framework
from planner.specs.loaders import load_cluster, load_model
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan
from planner.validation.nemo import RecipeReport, RecipeRow

FILE = "torchtitan_h100.yaml"
FRAMEWORK = "torchtitan"
CLUSTER = "dgx-h100-superpod"
GENERATION = "H100"
#: torchtitan activation_checkpoint modes -> plan ``recompute`` (module docstring).
AC_TO_RECOMPUTE: dict[str, str] = {"none": "none", "full": "full", "selective-op": "half"}
#: context_parallel_rotate_method -> plan ``cp_comm``.
CP_ROTATE_TO_COMM: dict[str, str] = {"allgather": "all_gather", "alltoall": "ring"}


def torchtitan_data() -> dict:
    path = resources.files("hardware_catalog") / "calibration" / FILE
    return yaml.safe_load(path.read_text())


def plannable_runs(data: dict | None = None) -> list[dict]:
    """The runs that have a plan (those without ``skip``)."""
    return [r for r in (data or torchtitan_data())["runs"] if not r.get("skip")]


def run_model(run: dict) -> ModelSpec:
    return load_model(run["model"])


#: HBM bandwidth of the HBM2e H100 SXM in Meta's Grand Teton hosts, TB/s (the 2024-12 and
#: 2025-06 torchtitan benchmark files: "96 GB HBM2e", 2.4 TB/s; see the data file's header)
HBM2E_TBps = 2.4


def run_cluster(run: dict) -> ClusterSpec:
    """The DGX H100 SuperPOD at the run's size; where the run's ``hbm_gib`` differs
    (torchtitan's HBM2e H100s), the GPU's capacity and its HBM2e bandwidth (the kernel
    table's copy speed scales with it). The GPU keeps its name (the profile's fit is looked
    up by it); its 500 W power limit is not modelled: the fitted kernel_fraction absorbs it."""
    cluster = load_cluster(CLUSTER, run["gpus"])
    hbm = run.get("hbm_gib")
    if hbm is not None and hbm != cluster.gpu.hbm_gib:
        gpu = cluster.gpu.model_copy(update={"hbm_gib": float(hbm), "hbm_TBps": HBM2E_TBps})
        cluster = cluster.model_copy(update={"gpu": gpu})
    return cluster


def _mapped(table: dict[str, str], run: dict, field: str, default: str) -> str:
    value = run.get(field) or default
    if value not in table:
        raise InputError(f"torchtitan run '{run['name']}': {field} {value!r}: expected one of "
                         f"{sorted(table)}")
    return table[value]


def run_plan(run: dict, model: ModelSpec | None = None) -> Plan:
    """The plan torchtitan ran for ``run`` (module docstring)."""
    if run.get("skip"):
        raise InputError(f"torchtitan run '{run['name']}' has no plan: {run['skip']}")
    model = model or run_model(run)
    tp, pp, cp, fsdp = run["tp"], run["pp"], run["cp"], run["fsdp"]
    local = run["local_batch"]
    micro = run.get("pp_microbatches") or pp
    if pp > 1 and local % micro:
        raise InputError(f"torchtitan run '{run['name']}': local_batch {local} is not a "
                         f"multiple of pp_microbatches {micro}")
    vs = run.get("stages_per_rank", 1) if pp > 1 else 1
    fp8 = run["float8"] != "none"
    if fp8 and run["float8"] != "tensorwise":
        raise InputError(f"torchtitan run '{run['name']}': float8 {run['float8']!r}: the "
                         "torchtitan profile costs tensorwise scaling only")
    fields: dict[str, Any] = dict(
        tp=tp, pp=pp, cp=cp, dp=fsdp, zero_stage=3,
        microbatch_size=local // micro if pp > 1 else local,
        global_batch_size=local * fsdp, seq_len=run["seq"],
        virtual_stages=vs, uneven_pipeline=model.num_layers % (pp * vs) != 0,
        recompute=_mapped(AC_TO_RECOMPUTE, run, "ac", "none"),
        fused_elementwise=bool(run["compile"]),
        dtype="fp8" if fp8 else "bf16", fp8_params=fp8 and bool(run.get("fp8_all_gather")),
        grad_reduce_dtype="fp32", attention="flash",
        cp_comm=_mapped(CP_ROTATE_TO_COMM, run, "cp_rotate", "allgather") if cp > 1 else "ring",
        sequence_parallel=tp > 1, overlap_tp_comm=bool(run["async_tp"]) and tp > 1,
        overlap_dp_grad_reduce=True, overlap_param_gather=True, overlap_p2p_comm=True)
    return Plan.model_validate(fields)


def tokens_per_s_per_gpu(run: dict, est: Estimate) -> float:
    """torchtitan's logged throughput: global tokens per step over step time over GPUs."""
    if not est.iteration_time_s:
        raise InputError(f"torchtitan run '{run['name']}': the estimate has no iteration time "
                         f"({'; '.join(est.reasons) or 'infeasible'})")
    return run["local_batch"] * run["fsdp"] * run["seq"] / est.iteration_time_s / run["gpus"]


def run_estimate(run: dict, cluster: ClusterSpec | None = None,
                 profile: FrameworkProfile | str = FRAMEWORK) -> Estimate:
    """``run`` costed as torchtitan runs it (the profile's kernels and, where fitted, its
    framework-level parameters)."""
    model = run_model(run)
    c = apply_profile(cluster or run_cluster(run), load_framework(profile))
    return evaluate(model, c, run_plan(run, model))


def run_torchtitan(cluster_for=run_cluster) -> RecipeReport:
    """Every plannable run evaluated with its published plan (``cluster_for(run)`` lets the
    calibration tool swap efficiency parameters)."""
    data = torchtitan_data()
    rows = []
    for run in plannable_runs(data):
        est = run_estimate(run, cluster_for(run))
        pred = tokens_per_s_per_gpu(run, est) if est.feasible else 0.0
        mem = est.memory_per_gpu_bytes / 2**30 if est.memory_per_gpu_bytes else None
        rows.append(RecipeRow(run["name"], GENERATION, run["model"], run["gpus"], pred,
                              float(run["measured_tps_per_gpu"]), est.feasible, mem))
    return RecipeReport("; ".join(data["sources"].values()), rows)
