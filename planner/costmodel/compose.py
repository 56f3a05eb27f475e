"""How the cost terms combine: stage time, iteration time, memory and busy time, once.

The evaluator (:mod:`planner.costmodel.train.evaluator`), the vectorized evaluator
(:mod:`planner.costmodel.train.batch`), the presolve bounds (:mod:`formulations.train.search`) and
the linear rows (:mod:`formulations.train.build`) all combine the same per-layer and per-stage
terms; they do it through these functions, which work on Python floats and on numpy
arrays alike (a leading axis per plan, the stage groups on ``axis``)::

    stage  S = compute + p2p + E(p2p_ovl, W_f + W_b) + E(dp_fwd, W_f) + E(dp_bwd, W_b) + E0(fetch, W_f) + E0(fetch, W_b)
    tail   R = optimizer + tied + E(grad, W_b) + E(param, W_f) + E0(down, W_b) + cpu_step
    T      = (m max_g S_g + bubble_factor(pp, v) sum_g count_g S_g / pp + max_g R_g) (1 + straggler)
    memory = states + buffers + inflight / v x activations + workspace + head_act + reserve
    busy   = (m sum_g count_g work_g + sum_g count_g optimizer_g) / pp

``E`` is the exposed part of a bucketed collective behind a compute window
(:func:`overlapped_s`; in the tail its last share is the last gradient bucket,
``stage.dp_overlap_units``), ``E0`` the same for DMA copies, which take no SMs (slowdown 0).
docs/cost-model.md states the terms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from planner.costmodel.compute import exposed_s
from planner.costmodel.constants import ALLOCATOR_FRAGMENTATION
from planner.costmodel.pipeline import bubble_factor


#: Whether the per-microbatch traffic of ZeRO-2/3 (FSDP's parameter gathers and gradient
#: reduce-scatters, every microbatch) hides behind compute like the once-per-iteration
#: buckets of Megatron's distributed optimizer do. It does not, measured: MosaicML's FSDP
#: runs (llm-foundry benchmarking tables, 16 runs on A100 and H100) come out 13-24 % faster
#: in the model than measured when it overlaps and far closer when it is charged in full
#: (benchmarks/bench_heldout_mosaicml.py gives the figure); MAD-Max (Hsia et al. 2024, Sec. VI) measures DDP 1.68x faster than FSDP on 2048
#: A100 for the same reason. The plan's overlap switches act on the once-per-iteration part.
#: A framework whose sharding prefetches (FSDP2, a profile's ``kernels.fsdp_prefetch``)
#: overrides it through ``GPUEfficiency.sharded_overlap``.
SHARDED_MICROBATCH_OVERLAP = False


@dataclass(frozen=True)
class Overlap:
    """The plan's overlap switches, the compute slowdown while NCCL runs beside it, and
    whether the per-microbatch ZeRO-2/3 traffic overlaps too (the framework's)."""

    param_gather: bool
    grad_reduce: bool
    slowdown: float
    sharded: bool = SHARDED_MICROBATCH_OVERLAP


def overlapped_s(comm, window, layers, overlap: bool, slowdown: float):
    """Exposed part of a bucketed collective overlapped with ``window`` of compute. The
    last bucket (one layer's share) cannot overlap. Works on numpy arrays.

    Equal to ``max(c - (1 - k) w, c (1/l + k (1 - 1/l)))`` for ``c, w >= 0``: the two
    linear pieces :func:`exposure_pieces` gives the formulations."""
    if not overlap:
        return comm
    if isinstance(comm, np.ndarray) and not comm.any():  # nothing to hide (no tier, ZeRO 0)
        return np.zeros(np.broadcast_shapes(comm.shape, np.shape(window), np.shape(layers)))
    tail = comm / (max(layers, 1) if isinstance(layers, int) else np.maximum(layers, 1))
    if not isinstance(tail, np.ndarray):
        return tail + exposed_s(comm - tail, window, slowdown)
    # exposed_s on arrays, in place: max(0, x - w) + k min(x, w) with x = comm - tail >= 0
    x = np.maximum(comm - tail, 0.0)
    out = x - window
    np.maximum(out, 0.0, out=out)
    if x.shape != out.shape:  # a per-point comm against per-state windows
        x = np.broadcast_to(x, out.shape).copy()
    np.minimum(x, window, out=x)
    x *= slowdown
    out += x
    out += tail
    return out


def exposure_pieces(layers: int, slowdown: float) -> tuple[tuple[float, float], ...]:
    """``overlapped_s(c, w, layers, True, slowdown)`` as the maximum of linear pieces
    ``a c + b w``: the pairs ``(a, b)``."""
    last = 1.0 / max(layers, 1)
    return (1.0, -(1.0 - slowdown)), (last + slowdown * (1.0 - last), 0.0)


@dataclass(frozen=True)
class StageTime:
    """One stage (group) per microbatch; fields are floats or arrays."""

    total_s: object
    dp_exposed_s: object  # ZeRO-2/3 traffic per microbatch that compute does not hide
    offload_exposed_s: object  # parameter fetches from the offload tier not hidden
    p2p_exposed_s: object  # pipeline sends on the critical path


def split_p2p(p2p_s, v, overlap_p2p: bool):
    """(exposed outright, overlappable) pipeline-send time. Megatron-LM's interleaved 1F1B
    schedule (v > 1) overlaps each send with the other chunks' compute
    (``--overlap-p2p-communication``, on by default); the non-interleaved schedule waits for
    its sends (Megatron-Core ``schedules.py``). Works on arrays."""
    on = (np.asarray(v) > 1) & overlap_p2p
    out = np.where(on, 0.0, p2p_s), np.where(on, p2p_s, 0.0)
    return tuple(float(x) if np.ndim(x) == 0 else x for x in out)


def stage_time(compute_s, window_fwd_s, window_bwd_s, p2p_s, p2p_overlap_s, dp_fwd_s,
               dp_bwd_s, fetch_s, layers, ov: Overlap) -> StageTime:
    """Per-microbatch time of a stage: its kernels and TP/CP/EP exchanges (``compute_s``),
    the pipeline sends (``p2p_s`` exposed, ``p2p_overlap_s`` hidden behind the stage's
    compute but for one layer's share, :func:`split_p2p`), and the exposed per-microbatch
    data-parallel and offload traffic."""
    k = ov.slowdown
    pp = p2p_s + overlapped_s(p2p_overlap_s, window_fwd_s + window_bwd_s, layers, True, k)
    on = ov.sharded
    dp = (overlapped_s(dp_fwd_s, window_fwd_s, layers, ov.param_gather and on, k)
          + overlapped_s(dp_bwd_s, window_bwd_s, layers, ov.grad_reduce and on, k))
    off = (overlapped_s(fetch_s, window_fwd_s, layers, ov.param_gather, 0.0)
           + overlapped_s(fetch_s, window_bwd_s, layers, ov.param_gather, 0.0))
    return StageTime(compute_s + pp + dp + off, dp, off, pp)


@dataclass(frozen=True)
class TailTime:
    """What a stage does once per iteration, after its last backward."""

    dp_s: object  # gradient reduction / parameter gather not hidden, tied-embedding sync
    optimizer_s: object  # the optimizer step on the GPU
    offload_s: object  # gradients down to the tier (exposed part), CPU step, upload

    @property
    def total_s(self):
        return self.dp_s + self.optimizer_s + self.offload_s


def dp_window_microbatches(pp, v, m):
    """Microbatches of a stage's compute the once-per-iteration gradient reduce-scatter (and
    the next iteration's parameter all-gather) can overlap. Without interleaving a stage's
    gradients are final only in its last backward: one microbatch. With ``v`` chunks the
    chunks finish one after another through the cool-down of Megatron-Core's interleaved
    1F1B schedule, ``2 (pp - 1) + (v - 1) pp`` chunk steps on the first rank
    (``get_pipeline_parallel_schedule``; its warm-up mirrors it for the all-gather), and
    each chunk's buckets are reduced as soon as it finishes: that many chunk steps, at most
    the ``m`` microbatches there are. Works on arrays."""
    v = np.asarray(v, dtype=float)
    steps = (2.0 * (np.asarray(pp) - 1) + (v - 1) * np.asarray(pp)) / v
    out = np.where(v > 1, np.clip(steps, 1.0, np.maximum(m, 1.0)), 1.0)
    return float(out) if np.ndim(out) == 0 else out


def tail_time(optimizer_s, cpu_step_s, tied_s, grad_s, param_s, down_s, window_fwd_s,
              window_bwd_s, layers, ov: Overlap, window_microbatches=1.0,
              dp_units=None) -> TailTime:
    """Once per iteration: the optimizer step, the tied-embedding sync, the gradient
    reduction and parameter gather behind ``window_microbatches``
    (:func:`dp_window_microbatches`) of the stage's per-microbatch compute windows.
    ``dp_units``: the shares the gradient reduction and parameter gather are cut in, whose
    last cannot overlap (the last bucket, ``stage.dp_overlap_units``; default ``layers``)."""
    k = ov.slowdown
    units = layers if dp_units is None else dp_units
    window_fwd_s = window_fwd_s * window_microbatches
    window_bwd_s = window_bwd_s * window_microbatches
    dp = (overlapped_s(grad_s, window_bwd_s, units, ov.grad_reduce, k)
          + overlapped_s(param_s, window_fwd_s, units, ov.param_gather, k) + tied_s)
    off = overlapped_s(down_s, window_bwd_s, layers, ov.grad_reduce, 0.0) + cpu_step_s
    return TailTime(dp, optimizer_s, off)


def bubble_coefficient(pp, v):
    """Bubble time per unit of the summed stage time ``sum_g count_g S_g``:
    ``bubble_factor(pp, v) / pp`` (the fill and drain pass through every stage at the
    mean stage time)."""
    return bubble_factor(pp, v) / pp


#: The straggler share is rounded up to a multiple of 1/STRAGGLER_DEN, so that the linear
#: rows (formulations/train/build.py) carry the evaluator's factor exactly as a fraction.
STRAGGLER_DEN = 1000


def expected_max_normal(n: int) -> float:
    """Expected maximum of ``n`` independent standard normals, Blom's (1958) approximation
    ``Phi^-1((n - 0.375) / (n + 0.25))`` (within 1 % of the exact value; David & Nagaraja,
    Order Statistics, 3rd ed., Sec. 4.5); it grows as ``sqrt(2 ln n)`` (Cramer 1946)."""
    if n <= 1:
        return 0.0
    return NormalDist().inv_cdf((n - 0.375) / (n + 0.25))


def straggler_share(step_time_cv: float, num_gpus: int) -> float:
    """How much longer a synchronous step of ``num_gpus`` GPUs takes than one GPU's
    mean step: each GPU's step time is ``T (1 + cv X_i)`` with ``X_i`` standard normal, and
    the step ends with the slowest, ``E[max] = T (1 + cv E[max_i X_i])``. Rounded up to a
    multiple of ``1 / STRAGGLER_DEN``."""
    if step_time_cv <= 0 or num_gpus <= 1:
        return 0.0
    return math.ceil(step_time_cv * expected_max_normal(num_gpus) * STRAGGLER_DEN
                     - 1e-9) / STRAGGLER_DEN


def iteration_time_s(m, pp, v, stage_s, counts, tail_s, axis: int = -1, straggler=0.0):
    """Iteration time from the stage groups' per-microbatch times ``stage_s``, how many
    pipeline ranks share each (``counts``; 0 for padding groups) and their tails, times
    ``1 + straggler`` (:func:`straggler_share`: the slowest GPU sets every step)."""
    steady = m * np.max(stage_s, axis=axis)
    bubble = bubble_coefficient(pp, v) * np.sum(counts * stage_s, axis=axis)
    out = (steady + bubble + np.max(tail_s, axis=axis)) * (1.0 + np.asarray(straggler))
    return float(out) if np.ndim(out) == 0 else out


def bubble_s(pp, v, stage_s, counts, axis: int = -1):
    """The bubble part of :func:`iteration_time_s` (for the breakdown)."""
    out = bubble_coefficient(pp, v) * np.sum(counts * stage_s, axis=axis)
    return float(out) if np.ndim(out) == 0 else out


def headroom_bytes(cluster) -> float:
    """HBM per GPU a plan may not fill: the cluster's fixed reserve plus allocator
    fragmentation (:data:`planner.costmodel.constants.ALLOCATOR_FRAGMENTATION` of HBM)."""
    return (cluster.memory_reserve_gib * 2**30
            + ALLOCATOR_FRAGMENTATION * cluster.gpu.hbm_bytes)


@dataclass(frozen=True)
class StageMemory:
    """Bytes per GPU of one stage; fields are floats or arrays."""

    states: object  # weights + gradients + optimizer on the GPU
    activations: object
    workspace: object
    comm_buffers: object
    reserve: object

    @property
    def total(self):
        return self.states + self.activations + self.workspace + self.comm_buffers + self.reserve


def stage_memory(states_bytes, buffers_bytes, layer_act_bytes, inflight, v, workspace_bytes,
                 head_act_bytes, reserve_bytes) -> StageMemory:
    """``layer_act_bytes``: one microbatch's activations of all the stage's layers over its
    ``v`` chunks; ``inflight`` chunk-microbatches are alive at the peak; the LM head's
    inputs (``head_act_bytes``) live once."""
    act = inflight / v * layer_act_bytes + head_act_bytes
    return StageMemory(states_bytes, act, workspace_bytes, buffers_bytes, reserve_bytes)


def busy_s(m, pp, counts, work_s, optimizer_s, axis: int = -1):
    """Mean kernel time per GPU per iteration: every rank's forward, backward and
    recomputation for ``m`` microbatches and its optimizer step, over the ``pp`` ranks."""
    out = (m * np.sum(counts * work_s, axis=axis) + np.sum(counts * optimizer_s, axis=axis)) / pp
    return float(out) if np.ndim(out) == 0 else out
