"""Energy and cost of training, from the evaluator's iteration time and GPU busy time.

Per iteration (docs/cost-model.md, Sec. 7):

    E = PUE x [ N x (P_idle x T + (P_tdp - P_idle) x busy)       GPUs
              + nodes x P_node x T                                 CPUs, NICs, fans
              + N x P_net x T ]                                    network, per GPU

``busy`` is the mean time a GPU runs kernels in the iteration (forward, backward,
recomputation, optimizer step); a GPU draws its TDP while busy and its idle power
otherwise (a linear power model, as in the RAMP seed's energy accounting and NVIDIA's
DGX power guidance).
"""

from __future__ import annotations

import math

from planner.specs.cluster import ClusterSpec


def network_power_w_per_gpu(cluster: ClusterSpec) -> float:
    """Fixed power per GPU plus energy per bit x capacity of each level (RAMP Table 4)."""
    return sum(level.network_power_w for level in cluster.topology)


def network_capex_usd_per_gpu(cluster: ClusterSpec) -> float:
    """Network capital cost per GPU: $/Gb/s x capacity of each level (RAMP Table 3
    normalizes network cost per Gb/s of node capacity)."""
    return sum(level.capex_usd_per_gpu for level in cluster.topology)


def energy_coefficients(cluster: ClusterSpec, num_gpus: int) -> tuple[float, float]:
    """``(J per second of iteration time, J per second of GPU busy time)`` for ``num_gpus``:
    the energy of one iteration is ``a x T + b x busy``."""
    gpu = cluster.gpu
    nodes = math.ceil(num_gpus / cluster.node_size)
    static_w = (num_gpus * gpu.idle_power_w + nodes * cluster.node_power_w
                + num_gpus * network_power_w_per_gpu(cluster))
    dynamic_w = num_gpus * (gpu.tdp_w - gpu.idle_power_w)
    return cluster.pue * static_w, cluster.pue * dynamic_w


def facility_power_w(cluster: ClusterSpec, num_gpus: int) -> float:
    """Peak facility power of ``num_gpus`` GPUs of ``cluster``: every GPU at its TDP, every
    node at its non-GPU power, the network's power per GPU, times the PUE. What a site must
    provision (a GPU can draw its TDP), so it depends on the cluster and count, never on the
    plan; it is the energy model's ``a + b`` (every GPU busy for the whole iteration)."""
    a, b = energy_coefficients(cluster, num_gpus)
    return a + b


def iteration_energy_j(cluster: ClusterSpec, num_gpus: int, iteration_time_s: float,
                       busy_s: float) -> float:
    a, b = energy_coefficients(cluster, num_gpus)
    return a * iteration_time_s + b * busy_s


def price_per_gpu_hour(cluster: ClusterSpec) -> float | None:
    """All-in rental price: the cluster's own, else the GPU's."""
    if cluster.price_per_gpu_hour is not None:
        return cluster.price_per_gpu_hour
    return cluster.gpu.price_per_gpu_hour
