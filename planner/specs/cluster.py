"""System inputs, part 2: the cluster (GPU type, count, hierarchical network)."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from planner.specs.base import Spec, notes_field
from planner.errors import InputError
from planner.specs.gpu import GPUSpec
from planner.specs.names import Name
from planner.specs.topology import RampSpec, expand_cluster_topology, with_scheduling

LevelKind = Literal["switch", "ring", "fully_connected", "ramp"]
#: Per-dimension collective algorithm (ASTRA-sim 2.0 ``*-implementation`` options); ``auto``
#: takes the kind's topology-aware one: ring on Ring, direct on FC and RAMP,
#: halving-doubling on Switch. ``nccl`` takes what NCCL picks per message size and group
#: (ring, tree across nodes, in-network reduction where the level has it;
#: planner/costmodel/network.py ``nccl_algorithm``).
Algorithm = Literal["auto", "ring", "direct", "halving_doubling", "nccl"]

#: Goodput defaults (docs/cost-model.md, "Goodput"): Llama 3 405B's 54-day pre-training
#: snapshot on 16,384 H100 had 466 job interruptions (Dubey et al. 2024, Sec. 3.3.4), and its
#: Tectonic storage sustains 2 TB/s (Sec. 3.3.1). No restart time is published: 10 minutes
#: assumed (detect, reschedule, re-initialize NCCL, load the checkpoint).
LLAMA3_INTERRUPTIONS_PER_GPU_HOUR = 466 / (54 * 24 * 16384)
LLAMA3_CHECKPOINT_GBPS_PER_GPU = 2000 / 16384
DEFAULT_RESTART_S = 600.0


class TopologyLevel(Spec):
    """One dimension of the network, joining ``size`` units of the level below.

    ``bandwidth_GBps`` is per GPU per direction (the GPU's share of this level),
    as in ASTRA-sim 2.0 (Sec. II-B) and the LBNL model (Sec. 2.10).
    """

    name: Name
    kind: LevelKind = "switch"
    size: PositiveInt
    bandwidth_GBps: PositiveFloat
    #: At most one second: network latencies are microseconds (NVLink ~1, IB ~2-5, a
    #: cross-datacenter hop ~1000); beyond that the number is a unit mistake.
    latency_us: float = Field(1.0, ge=0, le=1e6)
    efficiency: float = Field(1.0, gt=0, le=1, description="achieved share of bandwidth")
    oversubscription: float = Field(1.0, ge=1, description="taper above this level's units")
    in_network_reduction: bool = Field(False, description="switch reduces (NVLS/SHARP)")
    power_w_per_gpu: float = Field(0.0, ge=0, description="network power attributed per GPU")
    algorithm: Algorithm = "auto"
    scheduler: Literal["baseline", "themis"] = Field(
        "baseline", description="how a collective's chunks cross the dimensions: baseline "
        "(every chunk innermost first, ASTRA-sim 2.0's default) or themis (each chunk in the "
        "dimension order that least loads the busiest dimension, Rashidi et al. ISCA 2022); "
        "a collective is balanced only when every dimension it spans says themis. A cluster "
        "file sets it for all levels with collective_scheduling")
    energy_pj_per_bit: float = Field(
        0.0, ge=0, description="network energy per bit of this level's capacity (RAMP Table 4)")
    cost_usd_per_Gbps: float = Field(
        0.0, ge=0, description="network capital cost per Gb/s of capacity (RAMP Table 3)")
    transceiver_groups: PositiveInt | None = Field(
        None, description="RAMP x: transceiver groups per node (kind ramp)")
    trx_rule: Literal["balanced", "eq3"] = Field(
        "balanced", description="RAMP groups per peer: floor(x/(d-1)), or Eq. (3) as printed")
    link_GBps: PositiveFloat | None = Field(
        None, description="fully_connected only: bandwidth of the one link to each peer, per "
        "direction; a group of k members of this level uses k-1 links per GPU (AMD Infinity "
        "Fabric: 7 x 64 GB/s). Without it the level's bandwidth is shared by any group.")

    @model_validator(mode="after")
    def _check_links(self) -> "TopologyLevel":
        if self.link_GBps is not None and self.kind != "fully_connected":
            raise ValueError(f"link_GBps is for kind fully_connected (a mesh of point-to-point "
                             f"links), got kind {self.kind!r}")
        return self

    @property
    def effective_Bps(self) -> float:
        return self.bandwidth_GBps * 1e9 * self.efficiency / self.oversubscription

    @property
    def capacity_Gbps(self) -> float:
        """This level's capacity per GPU per direction, in gigabits per second."""
        return self.bandwidth_GBps * 8

    @property
    def network_power_w(self) -> float:
        """Power per GPU: the fixed ``power_w_per_gpu`` plus energy per bit x capacity
        (RAMP Table 4 computes total power as pJ/bit x total capacity)."""
        return self.power_w_per_gpu + self.energy_pj_per_bit * 1e-12 * self.capacity_Gbps * 1e9

    @property
    def capex_usd_per_gpu(self) -> float:
        return self.cost_usd_per_Gbps * self.capacity_Gbps


class OffloadTier(Spec):
    """An optional memory tier beside the GPUs: host DRAM (or pooled/disaggregated memory)
    that can hold optimizer states and weights, as ZeRO-Offload (Ren et al., USENIX ATC
    2021) and ZeRO-Infinity (Rajbhandari et al., SC21) use it. Every figure is per GPU:
    a node's memory, link and CPUs are shared by its GPUs."""

    name: Name = "host memory"
    capacity_gib_per_gpu: PositiveFloat = Field(
        ..., description="tier capacity available to each GPU's offloaded states, GiB")
    bandwidth_GBps: PositiveFloat = Field(
        ..., description="GPU <-> tier link per GPU per direction (PCIe, NVLink-C2C), GB/s")
    efficiency: float = Field(0.8, gt=0, le=1, description="achieved share of the link")
    cpu_adam_params_per_s: PositiveFloat = Field(
        ..., description="CPU Adam throughput per GPU (parameters updated per second)")
    source: str | None = Field(None, description="where the tier's figures come from")

    @property
    def effective_Bps(self) -> float:
        return self.bandwidth_GBps * 1e9 * self.efficiency

    @property
    def capacity_bytes(self) -> float:
        return self.capacity_gib_per_gpu * 2**30


class ClusterSpec(Spec):
    """A cluster: GPUs joined by an ordered list of network levels, innermost first."""

    name: Name
    gpu: GPUSpec
    num_gpus: PositiveInt
    topology: list[TopologyLevel] = Field(..., min_length=1)
    gpus_per_node: PositiveInt | None = Field(None, description="default: first level size")
    pue: float = Field(1.2, ge=1.0, description="datacenter power usage effectiveness")
    node_power_w: float = Field(0.0, ge=0, description="non-GPU power per node (CPU, NIC, fans)")
    price_per_gpu_hour: float | None = Field(None, ge=0, description="all-in rental, USD")
    gpus_per_rack: PositiveInt | None = Field(
        None, description="GPUs one rack holds in the vendor's reference layout (whole nodes); "
        "what a site's rack limit counts (planner procure --max-racks). None: no published "
        "rack layout")
    scale_out_ports_per_gpu: PositiveInt | None = Field(
        None, description="compute-fabric (scale-out) NIC ports per GPU, each taking one leaf "
        "switch port; what a site's port limit counts (planner procure --max-ports). None: "
        "not stated")
    memory_reserve_gib: float = Field(
        2.0, ge=0, description="CUDA context, NCCL and allocator reserve per GPU"
    )
    collective_chunks: PositiveInt = Field(
        64, description="chunks a collective is pipelined in across levels"
    )
    step_time_cv: float = Field(
        0.01, ge=0, le=0.5, allow_inf_nan=False,
        description="spread of one GPU's step time across the cluster's GPUs (coefficient of "
        "variation, same SKU); a synchronous step waits for the slowest of its N GPUs, "
        "E[max] = mean (1 + cv E[max of N standard normals]). Default 0.01, assumed from "
        "Sinha et al. SC'22 ('Not All GPUs Are Created Equal'): ~8 % average performance "
        "variation between same-SKU GPUs of five clusters, read as a range of ~6-8 sigma over "
        "hundreds to thousands of GPUs. 0 switches stragglers off")
    ramp: RampSpec | None = Field(None, description="RAMP optical network; expands to its levels")
    offload: OffloadTier | None = Field(
        None, description="optional host/pooled memory tier for optimizer and weight offload")
    failures_per_gpu_hour: float = Field(
        LLAMA3_INTERRUPTIONS_PER_GPU_HOUR, ge=0, le=1, description="job interruptions per "
        "GPU-hour: a job on N GPUs stops N times this per hour (goodput, docs/cost-model.md). "
        "Default: Llama 3 405B pre-training, 466 interruptions (419 unexpected, 47 planned) in "
        "54 days on 16,384 H100 (Dubey et al. 2024, Sec. 3.3.4), 2.19e-5; assumed for other "
        "GPUs where no rate is published")
    checkpoint_write_GBps_per_gpu: PositiveFloat = Field(
        LLAMA3_CHECKPOINT_GBPS_PER_GPU, le=1e3, description="checkpoint storage write "
        "bandwidth per GPU of the job, GB/s (aggregate = this x GPUs, so that it scales as "
        "the cluster is resized). Default: Llama 3's Tectonic storage, 2 TB/s sustained for "
        "16,384 H100 (Dubey et al. 2024, Sec. 3.3.1), 0.122")
    restart_s: float = Field(
        DEFAULT_RESTART_S, ge=0, le=1e6, description="seconds from an interruption to "
        "training again (detection, rescheduling, initialization, checkpoint load). Default "
        "600: an assumption, no figure is published for Llama 3")
    aliases: list[Name] = Field(default_factory=list)
    source: str | None = Field(None, description="where the figures come from (paper and "
                               "table, or repository, file and tag)")
    notes: str | None = notes_field()

    @model_validator(mode="before")
    @classmethod
    def _expand(cls, data: Any) -> Any:
        """``topology: "Ring(2)_FC(8)_Switch(4)"`` with ``bandwidths_GBps``, or a ``ramp``
        block, becomes the level list (planner/specs/topology.py)."""
        try:
            data = expand_cluster_topology(data)
        except InputError as e:
            raise ValueError(str(e)) from None
        return with_scheduling(data)

    @model_validator(mode="after")
    def _check(self) -> "ClusterSpec":
        total = math.prod(level.size for level in self.topology)
        if total != self.num_gpus:
            sizes = " x ".join(str(level.size) for level in self.topology)
            raise ValueError(
                f"num_gpus={self.num_gpus} but topology sizes {sizes} = {total}; the product of "
                "the level sizes must equal num_gpus"
            )
        if self.gpus_per_rack is not None and self.gpus_per_rack % self.node_size:
            raise ValueError(f"gpus_per_rack={self.gpus_per_rack} is not a whole number of "
                             f"{self.node_size}-GPU nodes; a rack holds whole nodes")
        names = [level.name for level in self.topology]
        if len(set(names)) != len(names):
            raise ValueError(f"topology level names must be unique, got {names}")
        return self

    @property
    def domain_size(self) -> int:
        """GPUs in one innermost (NVSwitch/NVLink) domain."""
        return self.topology[0].size

    @property
    def node_size(self) -> int:
        return self.gpus_per_node or self.topology[0].size

    def resized(self, num_gpus: int) -> "ClusterSpec":
        """The same cluster resized to ``num_gpus``.

        The outermost level grows or shrinks; a count that fits below an inner level
        drops the levels above it (8 GPUs of a SuperPOD is one NVSwitch domain). A count
        that does not fill whole units of the level below is placed in as few units as
        split it evenly (:func:`place_gpus`): 128 GPUs of GB200 NVL72 racks are 2 racks
        of 64, 12 GPUs of 8-GPU nodes are 2 nodes of 6 (NVIDIA publishes GB200 runs on
        64, 128 and 256 GPUs). Counts that already filled whole units keep their levels.
        """
        if num_gpus < 1:
            raise ValueError(f"--gpus must be positive, got {num_gpus}")
        levels = place_gpus(list(self.topology), num_gpus)
        if levels is None:
            raise ValueError(_unplaceable(list(self.topology), num_gpus))
        return self.model_copy(update={"num_gpus": num_gpus, "topology": levels})


def _top_level(levels: list[TopologyLevel], n: int) -> int:
    """Index of the outermost level ``n`` GPUs need: the first whose units hold them all,
    or the outermost level, which grows."""
    k = 0
    while k < len(levels) - 1 and n > math.prod(lv.size for lv in levels[: k + 1]):
        k += 1
    return k


def place_gpus(levels: list[TopologyLevel], n: int) -> list[TopologyLevel] | None:
    """The levels of a job of ``n`` GPUs on a cluster with ``levels`` (innermost first),
    or None when no even placement exists.

    With ``k`` the outermost level needed and ``U`` the GPUs in one unit below it (a node,
    an NVL72 rack), a count that is a multiple of ``U`` fills ``n / U`` whole units.
    Otherwise the job takes the fewest units ``m >= ceil(n / U)`` that divide ``n``, each
    holding ``n / m`` GPUs, placed the same way inside the unit (every level below). A
    unit must be at least half used: ``n / m >= U / 2`` (a prime count above ``U`` would
    otherwise run one GPU per node); the search over ``n / m`` is then O(U)."""
    k = _top_level(levels, n)
    unit = math.prod(lv.size for lv in levels[:k])
    if n % unit == 0:
        return levels[:k] + [levels[k].model_copy(update={"size": n // unit})]
    for per_unit in range(min(unit, n), (unit + 1) // 2 - 1, -1):  # largest share first
        if n % per_unit:
            continue
        inner = place_gpus(levels[:k], per_unit)
        if inner is None:
            continue
        # a share that fits below level k-1 leaves the levels between with one unit each
        inner += [lv.model_copy(update={"size": 1}) for lv in levels[len(inner):k]]
        return inner + [levels[k].model_copy(update={"size": n // per_unit})]
    return None


def _unplaceable(levels: list[TopologyLevel], n: int) -> str:
    """Why ``n`` GPUs cannot be placed, and the nearest counts that can."""
    k = _top_level(levels, n)
    unit = math.prod(lv.size for lv in levels[:k])
    below = next((c for c in range(n - 1, 0, -1) if place_gpus(levels, c)), None)
    above = next(c for c in range(n + 1, n + unit + 1) if place_gpus(levels, c))
    near = " or ".join(f"{c} ({_layout(place_gpus(levels, c) or [])})"
                       for c in (below, above) if c is not None)
    return (f"--gpus {n} cannot be placed evenly: it does not fill whole units of level "
            f"'{levels[k - 1].name}' ({unit} GPUs each), and no number of units from "
            f"{-(-n // unit)} on divides it into equal shares of at least half a unit "
            f"({(unit + 1) // 2} to {unit} GPUs each); the nearest counts that can be "
            f"placed are {near}")


def _layout(levels: list[TopologyLevel]) -> str:
    """``2 x 6 GPUs``: the level sizes, outermost first."""
    return " x ".join(str(lv.size) for lv in reversed(levels)) + " GPUs"
