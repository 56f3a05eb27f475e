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

    @classmethod
    def of(cls, plan: Any) -> "Numerics":
        """From a Plan, a plan dict or a dtype string."""
        if isinstance(plan, Numerics):
            return plan
        if isinstance(plan, str):
            return cls(dtype=plan)
        get = plan.get if isinstance(plan, dict) else lambda k, d=None: getattr(plan, k, d)
        return cls(get("dtype", "bf16") or "bf16", bool(get("fp8_params", False)),
                   get("grad_reduce_dtype", "fp32") or "fp32")

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
    def grad_comm_bytes(self) -> float:
        return C.GRAD_COMM_BYTES if self.grad_reduce_dtype == "fp32" else C.BF16_GRAD_BYTES

    @property
    def param_comm_bytes(self) -> float:
        return C.FP8_WEIGHT_CACHE_BYTES if self.fp8_params else C.PARAM_COMM_BYTES
