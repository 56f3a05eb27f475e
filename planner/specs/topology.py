"""Topology shorthands: ASTRA-sim-style dimension strings and the RAMP optical network.

``Ring(2)_FC(8)_Ring(8)_Switch(4)`` is the notation of ASTRA-sim 2.0 (Won et al. 2023,
Sec. II-B, Fig. 3(c) and Table I): building blocks Ring, FullyConnected (FC) and Switch
(SW), innermost dimension first, one bandwidth and latency per dimension. ``Switch(4,inr)``
marks a switch that reduces in the network (NVLink SHARP / InfiniBand SHARP).

A RAMP network (Ottino et al., "RAMP") is flat and single-hop; its RAMP-x
collectives run in at most four algorithmic steps whose subgroups have sizes
``(x, x, J, Lambda/x)`` (Table 5, #NS). We expand it into four logical levels of kind
``ramp`` that share the node's ``x b B`` transceivers, so the hierarchical collective
machinery (``costmodel/network.py``) runs the RAMP-x step sequence on them.
"""

from __future__ import annotations

import math
import re
from typing import Any, Sequence

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from planner.errors import InputError
from planner.specs.validate import _short
from planner.specs.base import Spec
from planner.specs.units import parse_bandwidth_GBps

_KINDS = {
    "ring": "ring", "ri": "ring", "r": "ring",
    "fc": "fully_connected", "fullyconnected": "fully_connected",
    "fully_connected": "fully_connected",
    "switch": "switch", "sw": "switch",
}
_SHORT = {"ring": "ring", "fully_connected": "fc", "switch": "switch"}
_TOKEN = re.compile(r"\s*([A-Za-z_]+)\s*\(\s*([0-9]+)\s*(?:,\s*([A-Za-z_]+)\s*)?\)\s*")


def parse_shorthand(text: str) -> list[tuple[str, int, bool]]:
    """``"Ring(2)_FC(8)_Switch(4,inr)"`` -> ``[("ring", 2, False), ("fully_connected", 8,
    False), ("switch", 4, True)]``. Raises :class:`InputError` with the bad token."""
    if not isinstance(text, str) or not text.strip():
        raise InputError("topology: empty shorthand; expected e.g. Ring(2)_FC(8)_Switch(4)")
    dims = []
    for i, token in enumerate(re.split(r"_(?=[A-Za-z])", text.strip()), start=1):
        m = _TOKEN.fullmatch(token)
        if not m:
            raise InputError(
                f"topology: cannot read dimension {i} '{token}' of '{text}'; expected "
                "KIND(SIZE) with KIND one of Ring, FC, Switch, e.g. Ring(2)_FC(8)_Switch(4)")
        kind = _KINDS.get(m.group(1).lower())
        if kind is None:
            raise InputError(f"topology: unknown dimension kind '{m.group(1)}' in '{text}'; "
                             "use Ring, FC (FullyConnected) or Switch")
        size = int(m.group(2))
        if size < 1:
            raise InputError(f"topology: dimension {i} '{token}' has size {size}; sizes must "
                             "be at least 1")
        flag = (m.group(3) or "").lower()
        if flag and flag not in ("inr", "sharp"):
            raise InputError(f"topology: unknown option '{m.group(3)}' in '{token}'; the only "
                             "option is inr (in-network reduction), e.g. Switch(72,inr)")
        if flag and kind != "switch":
            raise InputError(f"topology: in-network reduction needs a Switch dimension, not "
                             f"'{token}'")
        dims.append((kind, size, bool(flag)))
    return dims


def _per_dim(values: Any, n: int, what: str, text: str) -> list[Any]:
    if values is None:
        return [None] * n
    if isinstance(values, (int, float, str)):
        values = [values]
    values = list(values)
    if len(values) == 1:
        return values * n
    if len(values) != n:
        raise InputError(f"{what}: {len(values)} values for the {n} dimensions of '{text}'; "
                         f"give one value per dimension (or a single value for all)")
    return values


def _number(value: Any, what: str) -> float:
    """A number from a shorthand list entry (numeric strings allowed, as pydantic allows)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InputError(f"{what}: expected a number, got {type(value).__name__} "
                         f"{_short(value)}")
    try:
        return float(value)
    except ValueError:
        raise InputError(f"{what}: expected a number, got {_short(value)}") from None


def shorthand_levels(text: str, bandwidths_GBps: Any, latencies_us: Any = None,
                     efficiencies: Any = None) -> list[dict[str, Any]]:
    """Topology level mappings (``TopologyLevel`` fields) of a shorthand string."""
    dims = parse_shorthand(text)
    if bandwidths_GBps is None:
        raise InputError(f"topology '{text}': bandwidths_GBps is required, one per dimension "
                         "(GB/s per GPU per direction), e.g. [1000, 200, 100, 50]")
    bws = _per_dim(bandwidths_GBps, len(dims), "bandwidths_GBps", text)
    lats = _per_dim(latencies_us, len(dims), "latencies_us", text)
    effs = _per_dim(efficiencies, len(dims), "efficiencies", text)
    levels = []
    for i, ((kind, size, inr), bw, lat, eff) in enumerate(zip(dims, bws, lats, effs), start=1):
        level: dict[str, Any] = dict(
            name=f"{_SHORT[kind]}{i}", kind=kind, size=size,
            bandwidth_GBps=parse_bandwidth_GBps(bw, f"bandwidth of dimension {i}"),
            in_network_reduction=inr)
        if lat is not None:
            level["latency_us"] = _number(lat, f"latencies_us of dimension {i}")
        if eff is not None:
            level["efficiency"] = _number(eff, f"efficiencies of dimension {i}")
        levels.append(level)
    return levels


# ---- RAMP ------------------------------------------------------------------------------
class RampSpec(Spec):
    """RAMP all-optical flat network (RAMP, Ottino et al.).

    Defaults are the paper's maximum-scale design point: x = J = 32, Lambda = 64, b = 1,
    B = 400 Gb/s, i.e. 65,536 nodes at 12.8 Tb/s each.
    """

    x: PositiveInt = Field(32, description="communication groups = transceiver groups per node")
    J: PositiveInt = Field(32, description="racks per communication group (J <= x)")
    wavelengths: PositiveInt = Field(64, alias="Lambda",
                                     description="nodes per rack = wavelength channels (Lambda)")
    b: PositiveInt = Field(1, description="transceivers per transceiver group")
    line_rate_Gbps: PositiveFloat = Field(400.0, description="per transceiver, gigabits/s (Sec. 1.2)")
    slot_ns: PositiveFloat = Field(20.0, description="time slot (Sec. 4.1: 20 ns minimum)")
    reconfig_ns: float = Field(1.0, ge=0, description="reconfiguration per slot (5% of 20 ns)")
    propagation_us: float = Field(1.3, ge=0, description="single hop, any pair (Sec. 7.5)")
    io_latency_us: float = Field(0.1, ge=0, description="node in/out latency (Sec. 7.5)")
    #: Table 4: 3.39 W per 400 Gb/s transceiver = 8.5 pJ/bit/path.
    energy_pj_per_bit: float = Field(8.5, ge=0)
    #: Table 3: OCS transceiver $1.50-6.00 plus coupler $0.12 per Gbit; low end by default.
    cost_usd_per_Gbps: float = Field(1.62, ge=0)
    #: Eq. (3) as printed leaves transceiver groups idle for mid-size subgroups; the
    #: default ``balanced`` gives each of the d-1 peers floor(x/(d-1)) groups (RAMP, Ottino et al.,
    #: Sec. 2.1 caveat). ``eq3`` is the printed rule, kept for reproduction.
    trx_rule: str = Field("balanced", pattern="^(balanced|eq3)$")

    @model_validator(mode="after")
    def _check(self) -> "RampSpec":
        if self.J > self.x:
            raise ValueError(f"ramp: J={self.J} racks per group exceeds x={self.x} (J <= x)")
        if self.wavelengths % self.x:
            raise ValueError(f"ramp: Lambda={self.wavelengths} must be a multiple of x={self.x} "
                             "(a rack holds Lambda/x device groups of x devices, Table 5)")
        return self

    @property
    def num_nodes(self) -> int:
        return self.wavelengths * self.J * self.x

    @property
    def node_capacity_GBps(self) -> float:
        """x b B per node, per direction (12.8 Tb/s = 1600 GB/s at max scale)."""
        return self.x * self.b * self.line_rate_Gbps / 8

    @property
    def step_sizes(self) -> tuple[int, int, int, int]:
        """Subgroup sizes of the four RAMP-x steps (Table 5, #NS)."""
        return (self.x, self.x, self.J, self.wavelengths // self.x)

    def levels(self) -> list[dict[str, Any]]:
        lat = self.propagation_us + self.io_latency_us + self.reconfig_ns * 1e-3
        out = []
        for i, size in enumerate(self.step_sizes, start=1):
            out.append(dict(
                name=f"ramp_step{i}", kind="ramp", size=size,
                bandwidth_GBps=self.node_capacity_GBps, latency_us=lat,
                # Only the payload of a slot carries data (Sec. 4.1: 950 B in 20 ns at 400 G).
                efficiency=max(1e-6, 1 - self.reconfig_ns / self.slot_ns),
                transceiver_groups=self.x, trx_rule=self.trx_rule,
                # The four steps share one physical network: its energy and cost sit on step 1.
                energy_pj_per_bit=self.energy_pj_per_bit if i == 1 else 0.0,
                cost_usd_per_Gbps=self.cost_usd_per_Gbps if i == 1 else 0.0,
            ))
        return out


#: the keys a shorthand ``topology`` string reads its dimensions' figures from
SHORTHAND_KEYS = ("bandwidths_GBps", "bandwidths", "latencies_us", "efficiencies")


def expand_cluster_topology(data: dict[str, Any]) -> dict[str, Any]:
    """Expand a shorthand ``topology`` string or a ``ramp`` block of a cluster mapping into
    the level list; fill ``num_gpus`` from the topology when it is omitted."""
    if not isinstance(data, dict):
        return data
    topo = data.get("topology")
    ramp = data.get("ramp")
    if ramp is not None and topo is None:
        spec = ramp if isinstance(ramp, RampSpec) else RampSpec.model_validate(ramp)
        data = {**data, "ramp": spec, "topology": spec.levels()}
    elif isinstance(topo, str):
        bws = data.get("bandwidths_GBps", data.get("bandwidths"))
        levels = shorthand_levels(topo, bws, data.get("latencies_us"), data.get("efficiencies"))
        # the per-dimension keys are the shorthand's: read here, so not unknown keys (with
        # a level list they are, and are refused)
        data = {k: v for k, v in data.items() if k not in SHORTHAND_KEYS}
        data["topology"] = levels
    topo = data.get("topology")
    if data.get("num_gpus") is None and isinstance(topo, list) and topo:
        try:
            data = {**data, "num_gpus": math.prod(int(_size(lv)) for lv in topo)}
        except (TypeError, ValueError, OverflowError):
            pass  # the field validation reports the bad size (inf, nan, text)
    return data


SCHEDULERS = ("baseline", "themis")


def with_scheduling(data: Any) -> Any:
    """A cluster mapping's ``collective_scheduling`` (``baseline`` or ``themis``) becomes
    every level's ``scheduler``; a level that states its own keeps it."""
    if not isinstance(data, dict) or "collective_scheduling" not in data:
        return data
    data = dict(data)
    value = data.pop("collective_scheduling")
    if value not in SCHEDULERS:
        raise ValueError(f"collective_scheduling={value!r}: expected one of {list(SCHEDULERS)}")
    topo = data.get("topology")
    if isinstance(topo, list):
        data["topology"] = [
            {"scheduler": value, **lv} if isinstance(lv, dict)
            else lv.model_copy(update={"scheduler": value}) if hasattr(lv, "model_copy") else lv
            for lv in topo]
    return data


def _size(level: Any) -> Any:
    return level.get("size") if isinstance(level, dict) else getattr(level, "size", None)


def shorthand_of(levels: Sequence[Any]) -> str:
    """The ASTRA-sim string of a level list (``Ring(2)_FC(8)_Switch(4)``)."""
    names = {"ring": "Ring", "fully_connected": "FC", "switch": "Switch", "ramp": "RAMP"}
    return "_".join(f"{names.get(lv.kind, lv.kind)}({lv.size}"
                    f"{',inr' if getattr(lv, 'in_network_reduction', False) else ''})"
                    for lv in levels)
