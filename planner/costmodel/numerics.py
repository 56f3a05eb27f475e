"""Bytes per parameter of each training state and of each exchange, as the plan's numeric
settings decide them (compute dtype, FP8 parameters, gradient-reduction precision)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.costmodel import constants as C


@dataclass(frozen=True)
class Numerics:
    """The numeric settings of a plan that change bytes, not FLOPs."""

    dtype: str = "bf16"
    #: Transformer Engine ``fp8_params`` / Megatron ``--fp8-param-gather``: the model
    #: weights are kept only as FP8 tensors (1 B) beside the fp32 master copy, and the
    #: distributed optimizer all-gathers them in FP8 (NeMo ``bf16_with_fp8_mixed``).
    fp8_params: bool = False
    #: Megatron ``--accumulate-allreduce-grads-in-fp32`` (fp32) or a bf16 main-gradient
    #: buffer (NeMo FP8 recipes set ``grad_reduce_in_fp32=False``).
    grad_reduce_dtype: str = "fp32"
    #: Precision of the Adam moments: fp32, or bf16 as Apex ``DistributedFusedAdam`` keeps
    #: them when NeMo's ``optim.dtype`` is bf16 (its ``dtype`` argument is "datatype for
    #: optimizer state").
    optimizer_dtype: str = "fp32"

    @classmethod
    def of(cls, plan: Any) -> "Numerics":
        """From a Plan, a plan dict or a dtype string."""
        if isinstance(plan, Numerics):
            return plan
        if isinstance(plan, str):
            return cls(dtype=plan)
        get = plan.get if isinstance(plan, dict) else lambda k, d=None: getattr(plan, k, d)
        return cls(get("dtype", "bf16") or "bf16", bool(get("fp8_params", False)),
                   get("grad_reduce_dtype", "fp32") or "fp32",
                   get("optimizer_dtype", "fp32") or "fp32")

    @property
    def weight_bytes(self) -> float:
        """HBM bytes of the model copy of one parameter (the fp32 master is optimizer state)."""
        if self.fp8_params:
            return C.FP8_WEIGHT_CACHE_BYTES
        return C.WEIGHT_BYTES + (C.FP8_WEIGHT_CACHE_BYTES if self.dtype == "fp8" else 0.0)

    @property
    def grad_bytes(self) -> float:
        """Main-gradient buffer bytes per parameter (the buffer is reduced in place)."""
        return C.GRAD_BYTES if self.grad_reduce_dtype == "fp32" else C.BF16_GRAD_BYTES

    @property
    def optimizer_bytes(self) -> float:
        """Optimizer-state bytes per parameter before ZeRO sharding. fp32: master weights,
        momentum and variance (12 B). bf16 (Apex ``DistributedFusedAdam`` with
        ``dtype=bf16``): two bf16 moments, and a bf16 master copy only where the model
        weights are not themselves bf16. NeMo keeps no separate copy
        (``store_params=False``) when the optimizer dtype equals the model's, and stores one
        (``store_params=True``) with FP8 parameters or another model dtype
        (``MegatronBaseModel.setup_optimization``, nemo/collections/nlp/models/
        language_modeling/megatron_base_model.py, NVIDIA/NeMo v2.0.0, the NeMo 24.09
        container; ``StateBucket`` in apex/contrib/optimizers/distributed_fused_adam.py,
        NVIDIA/apex 7d5ecf18: ``params_shard`` only with ``store_params``, ``exp_avg_shard``
        and ``exp_avg_sq_shard`` in the optimizer dtype)."""
        if self.optimizer_dtype == "fp32":
            return C.OPTIMIZER_BYTES
        bf16_weights = self.dtype in ("bf16", "fp8") and not self.fp8_params
        master = 0.0 if bf16_weights else C.BF16_OPTIMIZER_STATE_BYTES
        return 2 * C.BF16_OPTIMIZER_STATE_BYTES + master

    @property
    def grad_comm_bytes(self) -> float:
        return C.GRAD_COMM_BYTES if self.grad_reduce_dtype == "fp32" else C.BF16_GRAD_BYTES

    @property
    def param_comm_bytes(self) -> float:
        return C.FP8_WEIGHT_CACHE_BYTES if self.fp8_params else C.PARAM_COMM_BYTES
