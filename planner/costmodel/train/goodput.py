"""Goodput: the share of wall-clock time that trains, once failures, checkpoints and
restarts are counted (docs/cost-model.md, "Goodput").

A job of ``N`` GPUs is interrupted ``N x failures_per_gpu_hour`` times per hour (Poisson;
mean time between interruptions ``M``). It checkpoints every ``tau`` seconds of training,
blocking for ``delta`` seconds each time; an interruption costs the restart ``R`` and the
work since the last durable checkpoint. Daly's complete model of the wall time for ``T_s``
seconds of work (Daly, "A higher order estimate of the optimum checkpoint interval for
restart dumps", Future Generation Computer Systems 22, 2006):

    T_w = M e^{R/M} (e^{(tau + delta)/M} - 1) T_s / tau

so the effective training-time fraction is ``T_s / T_w``; its first-order form is
``1 - delta/tau - ((tau + delta)/2 + R)/M``: the checkpoint overhead plus, per failure,
half an interval of lost work and the restart. ``tau`` is Daly's higher-order optimum
(Daly 2006), which for ``delta << M`` is Young's ``sqrt(2 delta M)`` (Young, CACM 17, 1974).

Asynchronous checkpointing (Megatron-Core ``--async-save`` with the ``torch_dist``
dist-checkpointing format; torchtitan ``checkpoint.async_mode``) blocks training only
while each GPU copies its share to host memory; the write to storage runs behind the
next interval, which must not be shorter than it, and an interruption during the write
also loses the interval before it (the checkpoint was not yet durable).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

from planner.costmodel.layer import total_params
from planner.costmodel.numerics import Numerics
from planner.costmodel.pipeline import stage_layout
from planner.costmodel.train.stage import expert_dp_size, stage_params_split, state_bytes
from planner.errors import InputError
from planner.specs.cluster import ClusterSpec
from planner.specs.model import ModelSpec

CheckpointMode = Literal["sync", "async"]
#: ``--goodput`` values: synchronous or asynchronous checkpoints, or the ideal figure.
GOODPUT_MODES = ("on", "async", "off")
SECONDS_PER_HOUR = 3600.0
#: Host link for the asynchronous snapshot where the cluster states no offload tier:
#: PCIe Gen4 x16, 32 GB/s per direction at the catalog's 0.8 achieved share (the DGX A100
#: offload tier, hardware_catalog/clusters/dgx-a100-superpod.yaml).
DEFAULT_HOST_COPY_BPS = 32e9 * 0.8
#: math.exp overflows beyond ~709.78; exponents past this take the logarithmic form
_EXP_MAX = 700.0
#: Below this effective fraction a job does not train: its wall time is over a million
#: times its training time (a day of training takes 2,700 years). Not a fitted figure:
#: it keeps the totals (days, dollars: the ideal ones over the fraction) finite and says
#: why an option is refused, where the fraction would otherwise underflow to 0.
MIN_GOODPUT_FRACTION = 1e-6


def checkpoint_numerics(numerics: Numerics | str) -> Numerics:
    """The numerics of what a checkpoint saves: the model copy in the compute dtype (bf16)
    or FP8 parameters, never the FP8 cast cache of an fp8 compute dtype."""
    nm = Numerics.of(numerics)
    return Numerics("bf16", nm.fp8_params, nm.grad_reduce_dtype, nm.optimizer_dtype)


def checkpoint_bytes(params: float, zero: int, dp_cp: int, numerics: Numerics | str) -> float:
    """Bytes of checkpointed state (model weights and optimizer states; gradients are not
    saved) that one GPU holding ``params`` parameters keeps under ZeRO stage ``zero`` over
    ``dp_cp`` data-parallel ranks, offloaded or not (:func:`stage.state_bytes`)."""
    s = state_bytes(params, zero, dp_cp, checkpoint_numerics(numerics))
    return s.weights + s.optimizer


def model_checkpoint_bytes(model: ModelSpec, numerics: Numerics | str = "bf16") -> float:
    """Bytes of one checkpoint of the whole model: every parameter's weight and optimizer
    state once (the replicas of ZeRO < 3 hold copies, which are written once)."""
    return checkpoint_bytes(total_params(model), 0, 1, numerics)


def plan_checkpoint_bytes_per_gpu(model: ModelSpec, plan: Any) -> float:
    """Checkpointed state the fullest GPU of ``plan`` holds (its pipeline stage's
    parameters, routed experts over their expert-data-parallel group)."""
    m = max(1, math.ceil(plan.num_microbatches))
    stages = stage_layout(model, plan.pp, plan.virtual_stages, m, uneven=True)
    if stages is None:
        raise InputError(f"pp x virtual_stages = {plan.pp * plan.virtual_stages} does not "
                         f"split num_layers={model.num_layers}")
    dp_cp = plan.dp * plan.cp
    edp = expert_dp_size(plan.tp, plan.cp, plan.dp, plan.ep, plan.etp)
    nm, z = Numerics.of(plan), plan.zero_stage
    worst = 0.0
    for st in stages:
        own, experts = stage_params_split(model, plan.tp, plan.pp, st.layers, st.embedding,
                                          st.head, plan.ep, plan.etp)
        worst = max(worst, checkpoint_bytes(own, z, dp_cp, nm)
                    + (checkpoint_bytes(experts, z, edp, nm) if experts else 0.0))
    return worst


# ---- the interval and the fraction ------------------------------------------------------
def young_interval_s(delta_s: float, mtbf_s: float) -> float:
    """Young (1974): ``sqrt(2 delta M)``."""
    return math.sqrt(2.0 * delta_s * mtbf_s)


def daly_interval_s(delta_s: float, mtbf_s: float) -> float:
    """Daly (2006), higher order: ``sqrt(2 delta M) [1 + sqrt(delta/2M)/3 + (delta/2M)/9] - delta``
    for ``delta < 2M``, else ``M``."""
    if delta_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = delta_s / (2.0 * mtbf_s)
    return young_interval_s(delta_s, mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - delta_s


def lost_per_failure_s(interval_s: float, blocking_s: float, restart_s: float,
                       rollback_s: float = 0.0) -> float:
    """Wall time one interruption costs to first order: half an interval (with its
    checkpoint) of lost work, the restart, and any extra rollback (async: the write that
    had not finished)."""
    return (interval_s + blocking_s) / 2.0 + restart_s + rollback_s


def effective_fraction(interval_s: float, blocking_s: float, restart_s: float,
                       mtbf_s: float, rollback_s: float = 0.0) -> float:
    """Training time over wall time, Daly's complete model (1 without interruptions)."""
    if math.isinf(mtbf_s):
        return 1.0  # nothing to recover from: no checkpoints needed
    a, b = (restart_s + rollback_s) / mtbf_s, (interval_s + blocking_s) / mtbf_s
    if a < _EXP_MAX and b < _EXP_MAX:
        # tau / (M e^{R/M} (e^{(tau+delta)/M} - 1)), with expm1 for small exponents
        f = interval_s / (mtbf_s * math.exp(a) * math.expm1(b))
        if f > 0:
            return f
    # restarts or checkpoints many times the MTBF: the same in logarithms, where e^{R/M}
    # would overflow (OverflowError) or the product reach inf (a fraction of 0);
    # log(e^b - 1) = b + log(1 - e^{-b})
    log_f = math.log(interval_s / mtbf_s) - a - (b + math.log1p(-math.exp(-b)))
    return math.exp(log_f)  # underflows to 0.0, never raises


@dataclass(frozen=True)
class Goodput:
    """What failures and checkpoints cost one job (times in seconds)."""

    mode: str  # sync | async
    num_gpus: int
    checkpoint_bytes: float  # one whole checkpoint
    write_s: float  # to storage, at the job's aggregate write bandwidth
    blocking_s: float  # training stops this long per checkpoint
    mtbf_s: float  # mean time between interruptions of the job (inf: none)
    restart_s: float
    interval_s: float  # training between checkpoints
    lost_per_failure_s: float
    fraction: float  # effective training time over wall time

    @property
    def trains(self) -> bool:
        """Whether the job trains at all (:data:`MIN_GOODPUT_FRACTION`)."""
        return self.fraction >= MIN_GOODPUT_FRACTION

    def why_not(self, cluster: ClusterSpec) -> str:
        """Why the job does not train, naming the cluster fields and their values."""
        return (f"cluster '{cluster.name}' at {self.num_gpus} GPUs: goodput "
                f"{self.fraction:.3g}: an interruption every {self.mtbf_s:.3g} s "
                f"(failures_per_gpu_hour {cluster.failures_per_gpu_hour:g} x {self.num_gpus} "
                f"GPUs) against restart_s {cluster.restart_s:g} and a checkpoint blocking "
                f"{self.blocking_s:.3g} s (checkpoint_write_GBps_per_gpu "
                f"{cluster.checkpoint_write_GBps_per_gpu:g}): the job would train less than "
                f"{MIN_GOODPUT_FRACTION:g} of its wall time; expected restarts and checkpoints "
                "shorter than the time between interruptions (or --goodput off)")

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["checkpoint_gib"] = d.pop("checkpoint_bytes") / 2**30
        for k in ("mtbf_s", "interval_s"):  # no interruptions: neither exists
            if math.isinf(d[k]):
                d[k] = None
        return d


def job_goodput(cluster: ClusterSpec, num_gpus: int, checkpoint_total_bytes: float,
                mode: CheckpointMode = "sync") -> Goodput:
    """Goodput of a ``num_gpus`` job on ``cluster`` writing checkpoints of
    ``checkpoint_total_bytes``, at the Daly-optimal interval."""
    if mode not in ("sync", "async"):
        raise InputError(f"checkpoint mode {mode!r}: expected sync or async")
    write_s = checkpoint_total_bytes / (cluster.checkpoint_write_GBps_per_gpu * 1e9 * num_gpus)
    rate_per_s = cluster.failures_per_gpu_hour * num_gpus / SECONDS_PER_HOUR
    mtbf_s = math.inf if rate_per_s == 0 else 1.0 / rate_per_s
    rollback_s = 0.0
    if mode == "async":
        host_bps = (cluster.offload.effective_Bps if cluster.offload is not None
                    else DEFAULT_HOST_COPY_BPS)
        blocking_s = checkpoint_total_bytes / num_gpus / host_bps  # each GPU copies its share
        rollback_s = write_s
    else:
        blocking_s = write_s
    if math.isinf(mtbf_s):
        interval_s = math.inf
        lost = 0.0
        fraction = 1.0
    else:
        interval_s = daly_interval_s(blocking_s, mtbf_s)
        if mode == "async":
            interval_s = max(interval_s, write_s)
        lost = lost_per_failure_s(interval_s, blocking_s, cluster.restart_s, rollback_s)
        fraction = effective_fraction(interval_s, blocking_s, cluster.restart_s, mtbf_s,
                                      rollback_s)
    return Goodput(mode, num_gpus, checkpoint_total_bytes, write_s, blocking_s, mtbf_s,
                   cluster.restart_s, interval_s, lost, fraction)


def training_goodput(model: ModelSpec, cluster: ClusterSpec, num_gpus: int,
                     numerics: Numerics | str | Any = "bf16", setting: str = "on"
                     ) -> Goodput | None:
    """Goodput of training ``model`` on ``num_gpus`` of ``cluster`` under ``--goodput
    setting`` (on: synchronous checkpoints, async, off: None, the ideal figure)."""
    if setting not in GOODPUT_MODES:
        raise InputError(f"--goodput {setting!r}: expected one of {', '.join(GOODPUT_MODES)}")
    if setting == "off":
        return None
    return job_goodput(cluster, num_gpus, model_checkpoint_bytes(model, Numerics.of(numerics)),
                       "async" if setting == "async" else "sync")
