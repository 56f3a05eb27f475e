"""A point of the search space: the decisions the cost tables are indexed by.

``Outer`` holds the parallel degrees, microbatch size, interleaving, the context-parallel
exchange and the MoE degrees; ``Inner`` the per-point choices (recomputation per layer
type, sequence parallelism, and the state option: ZeRO stage and offloads). The search
space (:mod:`formulations.train.space`) enumerates them; the cost tables
(:mod:`planner.costmodel.train.tables`) and the vectorized evaluator index by them.

One decision, four spellings, one mapping (:data:`PLAN_FIELD`): a plan field
(``Plan.microbatch_size``) is an attribute of ``Outer``/``Inner`` (``mbs``); the tables'
``Key`` is ``(point q, recompute index per layer type, sp, state option z)`` with ``q``
an index into the space's ``(Outer, domain)`` points and ``z`` an index into
:data:`STATES`; the formulations' variables are named by those same indices
(``formulations.train.build.VarMap``: ``y[q]``, ``x[q, u]``, ``w[q, z]``).
"""

from __future__ import annotations

from dataclasses import dataclass

RECOMPUTE = ("none", "selective", "full", "half")
CP_COMMS = ("ring", "all_to_all", "all_gather")
#: Plan fields that are decisions of the search; everything else is a base setting.
DECISIONS = ("tp", "cp", "pp", "dp", "microbatch_size", "virtual_stages", "sequence_parallel",
             "recompute", "zero_stage", "placement", "uneven_pipeline", "tp_comm", "ep",
             "expert_tp", "cp_comm", "offload_optimizer", "offload_params")

#: State options ``(zero_stage, offload_optimizer, offload_params)``; the formulations index
#: them by position (``z``). The first four are the ZeRO stages alone, the only options on
#: a cluster without an offload tier; parameter offload needs ZeRO stage 3.
STATES: tuple[tuple[int, bool, bool], ...] = (
    (0, False, False), (1, False, False), (2, False, False), (3, False, False),
    (0, True, False), (1, True, False), (2, True, False), (3, True, False),
    (3, False, True), (3, True, True))


@dataclass(frozen=True)
class Outer:
    tp: int
    cp: int
    pp: int
    dp: int
    mbs: int
    v: int
    uneven: bool
    ep: int = 1  # MoE layers: expert-parallel degree
    etp: int = 1  # MoE layers: expert tensor-parallel degree
    cpc: str = "ring"  # context-parallel exchange

    @property
    def world(self) -> int:
        return self.tp * self.cp * self.pp * self.dp


@dataclass(frozen=True)
class Inner:
    recompute: tuple[str, ...]  # per layer type, in model.layer_types order
    sp: bool
    zero: int
    offload_optimizer: bool = False
    offload_params: bool = False

    @property
    def state(self) -> int:
        """Index of the state option in :data:`STATES`."""
        return STATES.index((self.zero, self.offload_optimizer, self.offload_params))

    @classmethod
    def of(cls, recompute: tuple[str, ...], sp: bool, state: int) -> "Inner":
        z, oo, op = STATES[state]
        return cls(recompute, sp, z, oo, op)


#: Outer/Inner attribute -> the plan field it decides (the space writes plans through it).
PLAN_FIELD = {
    "tp": "tp", "cp": "cp", "pp": "pp", "dp": "dp", "mbs": "microbatch_size",
    "v": "virtual_stages", "uneven": "uneven_pipeline", "ep": "ep", "etp": "expert_tp",
    "cpc": "cp_comm", "recompute": "recompute", "sp": "sequence_parallel",
    "zero": "zero_stage", "offload_optimizer": "offload_optimizer",
    "offload_params": "offload_params",
}
