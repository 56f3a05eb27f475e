"""The search space shared by every backend (CP-SAT, MILP, exhaustive).

A point of the space is ``(outer, domain, inner)``:

- ``Outer``: the parallel degrees, microbatch size and interleaving (tp, cp, pp, dp, mbs, v),
  the context-parallel exchange (ring, all-to-all, all-gather) and, for MoE models, the
  expert-parallel and expert tensor-parallel degrees of the MoE layers (ep, etp);
- ``domain``: GPUs of each group inside one NVSwitch domain (a_tp, a_cp, a_dp, a_pp);
- ``Inner``: recomputation per layer type, sequence parallelism and the *state option*:
  the ZeRO stage and, on clusters with an offload tier, whether the optimizer states
  (ZeRO-Offload) and the ZeRO-3 parameter shards (ZeRO-Infinity) live in that tier.

Structural validity (divisibility, GPU count) is decided by the evaluator's own
``check_structure``, so the space holds exactly the plans the evaluator accepts short of
memory. Equivalent plans appear once: sequence parallelism only with tp > 1, ZeRO only
with dp x cp > 1, a single placement when the job fits in one domain, interleaving only
with pp > 1. Fixed knobs (``--fix``) restrict the corresponding domains.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, fields
from typing import Any, Iterator

from planner.costmodel.train.evaluator import check_structure
from planner.costmodel.frameworks import (
    SETTINGS,
    plan_violations,
    recompute_ok,
    setting_problems,
)
from formulations.train.options import SpaceOptions
from planner.costmodel.train.points import (
    CP_COMMS,
    DECISIONS,
    PLAN_FIELD,
    RECOMPUTE,
    STATES,
    Inner,
    Outer,
)
from planner.costmodel.network import PlacementError, fill_level, spans_for
from planner.errors import InputError
from planner.specs.cluster import ClusterSpec
from planner.specs.model import ModelSpec
from planner.specs.plan import DEFAULT_ORDER, WORLD_DIMS, Plan


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


@dataclass
class SearchSpace:
    model: ModelSpec
    cluster: ClusterSpec
    base: dict[str, Any]
    fixed: dict[str, Any] = field(default_factory=dict)
    options: SpaceOptions = field(default_factory=SpaceOptions)

    def __post_init__(self) -> None:
        unknown = [k for k in self.fixed if k not in Plan.model_fields]
        if unknown:
            raise InputError(f"--fix: {unknown} are not plan fields")
        given = (self.fixed.get("placement") or {}).get("order") or self.base.get(
            "placement", {}).get("order")
        fw = self.options.framework
        if fw is not None:
            given = fw.order(tuple(given) if given else None)
            # ``base`` comes with the framework's defaults filled, once, by
            # planner.orchestration.train.build_space; here they are only checked
            unfilled = [k for k in SETTINGS if k not in self.base and k not in self.fixed]
            if unfilled:
                raise ValueError(f"SearchSpace: base lacks {fw.name}'s {', '.join(unfilled)}: "
                                 "build it with build_space (or framework_defaults)")
            problems = setting_problems(fw, {**self.base, **self.fixed})
            if problems:
                raise InputError(f"--framework {fw.name}: {problems[0]}; `planner catalog "
                                 "frameworks` lists the others")
        self.order = tuple(given or DEFAULT_ORDER)
        self.layer_types = self.model.layer_types
        #: per outer (less its microbatch size): the (sp, state) options the framework runs
        self._framework_inner: dict[tuple, tuple[list[bool], list[int]]] = {}
        self.outers = self._outers()
        self._placements: dict[tuple[int, ...], list[tuple[int, ...] | None]] = {}

    # ---- the outer configurations -------------------------------------------------------
    def _allowed(self, key: str, values: list[int]) -> list[int]:
        if key in self.fixed:
            v = self.fixed[key]
            return [v] if v in values else []
        return values

    def _pinned(self, key: str) -> int:
        """A pinned integer degree (0 when not pinned): bounds widen to include it."""
        v = self.fixed.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) else 0

    def _outers(self) -> list[Outer]:
        n = self.cluster.num_gpus
        gb = self.base["global_batch_size"]
        seq = self.base["seq_len"]
        opt = self.options
        layers = self.model.num_layers
        out: list[Outer] = []
        tps = self._allowed("tp", divisors(n))
        for tp in tps:
            cps = [c for c in divisors(n // tp) if c == 1 or seq // c >= opt.min_cp_tokens]
            for cp in self._allowed("cp", cps):
                pps = [p for p in divisors(n // (tp * cp)) if p <= layers]
                for pp in self._allowed("pp", pps):
                    rest = n // (tp * cp * pp)
                    dps = [d for d in divisors(gb) if d <= rest] if opt.allow_idle_gpus else [rest]
                    for dp in self._allowed("dp", dps):
                        if gb % dp:
                            continue
                        # a pinned value widens the bound instead of falling outside it
                        mbs_cap = max(opt.max_microbatch, self._pinned("microbatch_size"))
                        mbss = [b for b in divisors(gb // dp) if b <= mbs_cap]
                        for mbs in self._allowed("microbatch_size", mbss):
                            m = gb // (dp * mbs)
                            v_cap = max(opt.max_virtual_stages, self._pinned("virtual_stages"))
                            vs = [1] if pp == 1 else [
                                v for v in range(1, v_cap + 1)
                                if pp * v <= layers and (v == 1 or m % pp == 0)]
                            for v in self._allowed("virtual_stages", vs):
                                uneven = layers % (pp * v) != 0
                                fixed_uneven = self.fixed.get("uneven_pipeline")
                                if uneven and not (opt.allow_uneven if fixed_uneven is None
                                                   else fixed_uneven):
                                    continue
                                for ep, etp, cpc in self._layer_choices(tp, cp, dp):
                                    o = Outer(tp, cp, pp, dp, mbs, v, uneven, ep, etp, cpc)
                                    if self.sp_options(o) and self._structurally_valid(o) \
                                            and (opt.framework is None or (
                                                self.state_options(o) and self._recompute_at(o))):
                                        out.append(o)
        return out

    def _layer_choices(self, tp: int, cp: int, dp: int) -> list[tuple[int, int, str]]:
        """(ep, etp, cp exchange) options: ep divides the experts and, with etp, the
        ``tp x cp x dp`` ranks of a stage (Megatron-Core MoE parallel folding: the EP group
        may span TP, CP and DP ranks); etp is 1 or tp (Megatron-Core's two common
        settings; any divisor of the stage when fixed); the exchange only matters with
        cp > 1."""
        if "cp_comm" in self.fixed:
            cpcs = [self.fixed["cp_comm"]]
        elif cp > 1:
            cpcs = list(self.options.cp_comms)
        else:
            cpcs = [self.base.get("cp_comm", "ring")]
        moe = self.model.moe
        if moe is None:
            return [(1, 1, c) for c in cpcs for _ in self._allowed("ep", [1])]
        stage = tp * cp * dp
        eps = self._allowed("ep", divisors(math.gcd(moe.num_experts, stage)))
        etps = self._allowed("expert_tp", divisors(stage) if "expert_tp" in self.fixed
                             else sorted({1, tp}))
        return [(e, t, c) for e in eps for t in etps for c in cpcs if stage % (e * t) == 0]

    def _structurally_valid(self, o: Outer) -> bool:
        # the fields come from validated inputs and enumerated degrees: the structural
        # rules need no second validation of each candidate (model_construct, ~50x faster)
        data = self._plan_data(o, None, Inner(("none",) * len(self.layer_types), False, 0))
        # every candidate sets the same fields: the first one's defaults serve the others
        # (a copy with the fields replaced, ~4x faster than model_construct again)
        template = self.__dict__.get("_structure_template")
        if template is None:
            plan = self.__dict__["_structure_template"] = Plan.model_construct(**data)
        else:
            plan = template.model_copy(update=data)
        return not check_structure(self.model, self.cluster, plan, self.options.allow_idle_gpus)

    # ---- placements and inner options -------------------------------------------------
    def placements(self, o: Outer) -> list[tuple[int, ...] | None]:
        """Domain factors (a_tp, a_cp, a_dp, a_pp) to search; ``None`` = follow the order."""
        degrees = (o.tp, o.cp, o.dp, o.pp)
        if degrees in self._placements:
            return self._placements[degrees]
        levels = tuple(self.cluster.topology)
        fixed = (self.fixed.get("placement") or {}).get("domain")
        fw = self.options.framework
        if fixed is not None:
            cands: list[tuple[int, ...] | None] = [tuple(int(fixed.get(d, 1)) for d in WORLD_DIMS)]
            filled = fill_level(dict(zip(WORLD_DIMS, degrees)),
                                min(self.cluster.domain_size, o.world), self.order)
            if fw is not None and fw.rank_orders is not None \
                    and cands[0] != tuple(filled[d] for d in WORLD_DIMS):
                cands = []  # a domain the framework's rank order does not fill
        elif not self.options.search_placement or o.world <= self.cluster.domain_size \
                or (fw is not None and fw.rank_orders is not None):
            cands = [None]  # the domain the (framework's) rank order fills
        else:
            target = self.cluster.domain_size
            cands = []
            for a in itertools.product(*[divisors(math.gcd(g, target)) for g in degrees]):
                if math.prod(a) == target:
                    cands.append(tuple(a))
        ok = []
        for c in cands:
            try:
                spans_for(degrees, c, self.order, levels)
            except PlacementError:
                continue
            ok.append(c)
        self._placements[degrees] = ok
        return ok

    def recompute_options(self) -> list[tuple[str, ...]]:
        fixed = self.fixed.get("recompute")
        per_type: list[list[str]] = []
        for t in self.layer_types:
            if isinstance(fixed, str):
                per_type.append([fixed])
            elif isinstance(fixed, dict) and t in fixed:
                per_type.append([fixed[t]])
            else:
                per_type.append(list(RECOMPUTE))
        out = list(itertools.product(*per_type))
        fw = self.options.framework
        return out if fw is None else [rc for rc in out if recompute_ok(fw, rc)]

    def sp_options(self, o: Outer) -> list[bool]:
        if self.options.framework is not None:
            return self._framework_options(o)[0]
        return self._sp_options(o)

    def _sp_options(self, o: Outer) -> list[bool]:
        if "sequence_parallel" in self.fixed:
            sp = bool(self.fixed["sequence_parallel"])
            return [sp] if (o.tp > 1 or not sp) else []
        if self.fixed.get("tp_comm") == "allreduce":
            return [False]
        return [False, True] if o.tp > 1 else [False]

    def zero_options(self, o: Outer) -> list[int]:
        if "zero_stage" in self.fixed:
            return [int(self.fixed["zero_stage"])]
        return [z for z in range(self.options.max_zero_stage + 1)] if o.dp * o.cp > 1 else [0]

    @property
    def num_states(self) -> int:
        """State options the formulation indexes: the ZeRO stages, and the offload options
        when the cluster has an offload tier."""
        return len(STATES) if self.cluster.offload is not None else 4

    def state_options(self, o: Outer) -> list[int]:
        if self.options.framework is not None:
            return self._framework_options(o)[1]
        return self._state_options(o)

    def _framework_options(self, o: Outer) -> tuple[list[bool], list[int]]:
        """Sequence parallelism and state options of ``o`` that the framework runs: every
        (sp, state) pair is checked against its rules (with the first recomputation the
        space allows: recomputation rules hold for every point alike); a state is kept when
        it runs with every kept sp value, so that the options stay a product (the tables
        index sp and state separately)."""
        key = (o.tp, o.cp, o.pp, o.dp, o.v, o.uneven, o.ep, o.etp, o.cpc)
        if key in self._framework_inner:
            return self._framework_inner[key]
        fw = self.options.framework
        assert fw is not None
        rcs = self.recompute_options()
        sps, ks = self._sp_options(o), self._state_options(o)
        ok = set()
        for sp in sps if rcs else []:
            for k in ks:
                plan = Plan.model_construct(**self._plan_data(o, None, Inner.of(rcs[0], sp, k)))
                # recomputation rules are applied per point by recompute_modes
                if all(v.field == "recompute" for v in plan_violations(fw, plan, self.model)):
                    ok.add((sp, k))
        sps = [sp for sp in sps if any((sp, k) in ok for k in ks)]
        ks = [k for k in ks if sps and all((sp, k) in ok for sp in sps)]
        out = (sps if ks else [], ks)
        self._framework_inner[key] = out
        return out

    def _state_options(self, o: Outer) -> list[int]:
        """Indices into :data:`STATES`: every ZeRO stage, each with the optimizer in HBM or
        in the offload tier, and ZeRO 3 with its parameter shards offloaded (ZeRO 3 also
        when dp x cp = 1: on one GPU, ZeRO-Infinity offloads the whole model). Offload
        options exist only on clusters with a tier; ``--fix`` pins any of the three."""
        zeros = self.zero_options(o)
        if self.cluster.offload is None:
            if self.fixed.get("offload_optimizer") or self.fixed.get("offload_params"):
                return []  # nowhere to offload to; the solver explains it
            return zeros
        oos = ([bool(self.fixed["offload_optimizer"])] if "offload_optimizer" in self.fixed
               else [False, True])
        ops = ([bool(self.fixed["offload_params"])] if "offload_params" in self.fixed
               else [False, True])
        op_zeros = [3] if (3 in zeros or ("zero_stage" not in self.fixed
                                          and self.options.max_zero_stage >= 3)) else []
        return [k for k, (z, oo, op) in enumerate(STATES)
                if oo in oos and op in ops and z in (op_zeros if op else zeros)]

    def recompute_modes(self, o: Outer) -> set[str]:
        """Recomputation modes allowed at ``o``: all, or those a framework's rules allow
        there (Megatron's block recomputation runs ``half`` only on some chunk splits)."""
        fw = self.options.framework
        if fw is None:
            return set(RECOMPUTE)
        key = (o.pp, o.v, o.uneven, "rc")
        if key not in self._framework_inner:
            rcs = self.recompute_options()
            inner0 = (self.sp_options(o) or [False])[0], (self.state_options(o) or [0])[0]
            ok = []
            for m in RECOMPUTE:
                plan = Plan.model_construct(**self._plan_data(o, None, Inner.of(
                    (m,) * len(self.layer_types), *inner0)))
                if not any(v.field == "recompute" for v in plan_violations(fw, plan, self.model)):
                    ok.append(m)
            self._framework_inner[key] = ({m for m in ok if any(m in rc for rc in rcs)}, [])
        return self._framework_inner[key][0]  # type: ignore[return-value]

    def _recompute_at(self, o: Outer) -> list[tuple[str, ...]]:
        modes = self.recompute_modes(o)
        return [rc for rc in self.recompute_options() if all(m in modes for m in rc)]

    def inners(self, o: Outer) -> Iterator[Inner]:
        for rc in self._recompute_at(o):
            for sp in self.sp_options(o):
                for k in self.state_options(o):
                    yield Inner.of(rc, sp, k)

    # ---- points and plans ----------------------------------------------------------------
    def __iter__(self) -> Iterator[tuple[Outer, tuple[int, ...] | None, Inner]]:
        for o in self.outers:
            for dom in self.placements(o):
                for inner in self.inners(o):
                    yield o, dom, inner

    def size(self) -> int:
        return sum(len(self.placements(o)) * len(self._recompute_at(o))
                   * len(self.sp_options(o)) * len(self.state_options(o)) for o in self.outers)

    def plan(self, o: Outer, domain: tuple[int, ...] | None, inner: Inner) -> Plan:
        return Plan.model_validate(self._plan_data(o, domain, inner))

    def _plan_data(self, o: Outer, domain: tuple[int, ...] | None, inner: Inner
                   ) -> dict[str, Any]:
        data = dict(self.base)
        data.update({k: v for k, v in self.fixed.items() if k not in DECISIONS})
        rc: Any = inner.recompute[0] if len(inner.recompute) == 1 else dict(
            zip(self.layer_types, inner.recompute))
        placement: dict[str, Any] = {"order": list(self.order)}
        if domain is not None:
            placement["domain"] = dict(zip(WORLD_DIMS, domain))
        data.update({PLAN_FIELD[f.name]: getattr(o, f.name) for f in fields(o)})
        data.update({PLAN_FIELD[f.name]: getattr(inner, f.name) for f in fields(inner)})
        data.update(
            recompute=rc, placement=placement,
            tp_comm=self.fixed.get("tp_comm") or ("rs_ag" if inner.sp else "allreduce"),
            expert_tp=o.etp if self.model.moe is not None else None,
        )
        return data
