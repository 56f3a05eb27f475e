"""What a search minimizes, as one typed value.

Every objective is linear in one iteration's time ``T`` and mean GPU busy time ``B``:
``a(world) x T + b(world) x B`` per iteration, with weights that depend on the cluster and
on the GPUs a plan uses. The named objectives are the ones ``planner solve --objective``
offers; :meth:`Objective.weighted` is any other linear ranking (procurement's owned cost:
capital accrues with the wall clock, electricity with busy time). The same value is passed
through the solve, the coefficient tables, the exhaustive search and procurement, so the
weights are computed here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.costmodel.energy import energy_coefficients, price_per_gpu_hour
from planner.errors import InputError
from planner.specs.cluster import ClusterSpec

#: The named objectives, in the order the CLI lists them.
NAMES = ("time", "tokens", "gpu_hours", "energy", "cost")
#: Units of a named objective's reported value (over the token budget when one is given;
#: per iteration otherwise, except ``tokens`` which is always in days).
UNITS = {"time": "s/iteration", "tokens": "days", "gpu_hours": "GPU-hours", "energy": "MWh",
         "cost": "USD", "weighted": "weighted units"}
SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86400.0
J_PER_MWH = 3.6e9


@dataclass(frozen=True)
class Objective:
    """``time_weight x T + busy_weight x B`` per iteration.

    ``name`` is one of :data:`NAMES` (weights derived from the cluster and the plan's GPU
    count) or ``"weighted"`` (the fixed weights given)."""

    name: str
    time_weight_per_s: float = 0.0  # only for "weighted"
    busy_weight_per_s: float = 0.0  # only for "weighted"

    # ---- construction ----------------------------------------------------------------
    @classmethod
    def of(cls, value: "Objective | str") -> "Objective":
        """An objective from its name (``gpu-hours`` and ``gpu_hours`` alike) or itself."""
        if isinstance(value, Objective):
            return value
        name = str(value).replace("-", "_")
        if name not in NAMES:
            raise InputError(f"--objective '{value}': expected one of {', '.join(NAMES)}")
        return cls(name)

    @classmethod
    def weighted(cls, time_weight_per_s: float, busy_weight_per_s: float = 0.0) -> "Objective":
        """A fixed linear ranking; a busy-only or time-only ranking is fine, a negative or
        all-zero one is not."""
        if not (time_weight_per_s >= 0 and busy_weight_per_s >= 0
                and time_weight_per_s + busy_weight_per_s > 0):
            raise InputError(f"objective weights ({time_weight_per_s!r}, "
                             f"{busy_weight_per_s!r}): expected non-negative numbers, not "
                             "both zero")
        return cls("weighted", float(time_weight_per_s), float(busy_weight_per_s))

    # ---- weights and values ----------------------------------------------------------
    @property
    def units(self) -> str:
        return UNITS[self.name]

    def units_for(self, tokens: float | None) -> str:
        """Units of the reported value: over a token budget, time is total seconds."""
        if tokens and self.name == "time":
            return "s in total"
        if not tokens and self.name in ("gpu_hours", "energy", "cost"):
            return f"{UNITS[self.name]} per iteration"
        return UNITS[self.name]

    @property
    def uses_busy_time(self) -> bool:
        return self.name == "energy" or (self.name == "weighted" and self.busy_weight_per_s > 0)

    def check(self, cluster: ClusterSpec) -> None:
        """Raise :class:`InputError` when the cluster lacks what the objective needs."""
        if self.name == "cost" and price_per_gpu_hour(cluster) is None:
            raise InputError(f"--objective cost: neither cluster '{cluster.name}' nor GPU "
                             f"'{cluster.gpu.name}' has a price_per_gpu_hour")

    def weights(self, cluster: ClusterSpec, world: int) -> tuple[float, float]:
        """``(a, b)``: the objective of one iteration is ``a x T + b x B`` for a plan on
        ``world`` GPUs (GPU-seconds for gpu_hours before the hour, joules for energy,
        dollars per GPU-second x GPUs for cost)."""
        if self.name in ("time", "tokens"):
            return 1.0, 0.0
        if self.name == "gpu_hours":
            return world / SECONDS_PER_HOUR, 0.0
        if self.name == "cost":
            price = price_per_gpu_hour(cluster)
            return world * (1.0 if price is None else price) / SECONDS_PER_HOUR, 0.0
        if self.name == "energy":
            return energy_coefficients(cluster, world)
        return self.time_weight_per_s, self.busy_weight_per_s

    def value(self, cluster: ClusterSpec, world: int, iteration_time_s, busy_s):
        """The per-iteration objective; works on numpy arrays of times."""
        a, b = self.weights(cluster, world)
        return a * iteration_time_s + b * busy_s

    def report_scale(self, tokens_per_iteration: float, tokens: float | None) -> float:
        """Factor from the per-iteration value to :attr:`units`: over the token budget
        ``tokens`` when given (``tokens`` objective: days)."""
        iters = tokens / tokens_per_iteration if tokens else 1.0
        if self.name == "tokens":
            return iters / SECONDS_PER_DAY
        if self.name == "energy":
            return iters / J_PER_MWH
        return iters  # seconds, GPU-hours and USD already in their units

    def __str__(self) -> str:
        return self.name


TIME = Objective("time")
