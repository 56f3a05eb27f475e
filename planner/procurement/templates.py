"""Cluster templates a procurement chooses from: the catalog's clusters, a derived
template for each catalog GPU no catalog cluster has, or clusters named by the caller;
and the GPU counts considered for each."""

from __future__ import annotations

from typing import Sequence

import planner.catalog as catalog
from planner.errors import InputError
from planner.specs.cluster import ClusterSpec
from planner.specs.gpu import GPUSpec
from planner.specs.loaders import load_cluster, load_gpu


#: Catalog cluster whose network, node and host figures a GPU without its own cluster
#: borrows, by GPU; others borrow ``DERIVE_FROM``. The A100 40GB ships in the DGX A100
#: (DGX A100 user guide: PCIe Gen4 host, HDR InfiniBand), not in a DGX H100. A derived
#: template's scale-up level is a switch; a GPU whose node is a mesh of point-to-point
#: links needs its own catalog cluster (MI300X: ``mi300x-cluster``, Infinity Fabric with
#: ``link_GBps``), which then replaces the derived template.
DERIVE_FROM = "dgx-h100-superpod"


DERIVE_FROM_BY_GPU = {"a100-sxm-40gb": "dgx-a100-superpod"}


#: Catalog clusters that are one operator's in-house systems, not products to buy: Meta's
#: ZionEX (MAD-Max Table III), kept for reproducing its measurements.
IN_HOUSE = frozenset({"zionex-128"})


#: Largest cluster considered unless --max-gpus says otherwise: twice the 16,384 H100 of
#: Llama 3 405B's pre-training (Dubey et al. 2024, Sec. 3.3.1).
DEFAULT_MAX_GPUS = 32768


def derived_template(base: ClusterSpec, gpu: GPUSpec) -> ClusterSpec:
    """``base``'s network, nodes and PUE with ``gpu``; the innermost (NVLink) level runs at
    the GPU's own NVLink bandwidth. The base's all-in price belongs to its GPU: dropped."""
    levels = list(base.topology)
    if gpu.nvlink_GBps > 0:
        levels[0] = levels[0].model_copy(update={"bandwidth_GBps": gpu.nvlink_GBps})
    return base.model_copy(update={
        "name": f"{base.name}:{gpu.name}", "gpu": gpu, "topology": levels,
        "price_per_gpu_hour": None, "aliases": [],
        "source": f"{base.name} with {gpu.name} GPUs (NVLink {gpu.nvlink_GBps:g} GB/s)"})


def catalog_templates(gpus: Sequence[str] | None = None) -> list[ClusterSpec]:
    """Every catalog cluster, plus a :func:`derived_template` for each catalog GPU that no
    catalog cluster has; only those with the ``gpus`` named (catalog names or aliases)."""
    templates = [load_cluster(name) for name in catalog.names("clusters")
                 if name not in IN_HOUSE]
    have = {c.gpu.name for c in templates}
    for name in catalog.names("gpus"):
        gpu = load_gpu(name)
        if gpu.name not in have:
            base = load_cluster(DERIVE_FROM_BY_GPU.get(gpu.name, DERIVE_FROM))
            templates.append(derived_template(base, gpu))
    if gpus:
        wanted = {load_gpu(g.strip()).name for g in gpus if g.strip()}
        templates = [t for t in templates if t.gpu.name in wanted]
    return templates


def _cluster_of_gpu(gpu_ref: str) -> ClusterSpec | None:
    """The catalog template (not in-house) of the catalog GPU ``gpu_ref`` names, when a
    catalog cluster has that GPU; None otherwise (unknown GPU, or only derived)."""
    if catalog.find("gpus", gpu_ref.strip()) is None:
        return None

    gpu = load_gpu(gpu_ref.strip()).name
    return next((t for t in catalog_templates([gpu]) if ":" not in t.name), None)


def candidate_counts(cluster: ClusterSpec, max_gpus: int) -> list[int]:
    """GPU counts to consider: the powers of two up to ``max_gpus`` below the NVLink domain,
    then the domain times powers of two; counts the template cannot be resized to are left
    out. (Other counts: ``counts=`` / ``--counts``.)"""
    domain = cluster.domain_size
    counts = [2 ** i for i in range(domain.bit_length()) if 2 ** i < domain]
    counts += [domain * 2 ** i for i in range(max_gpus.bit_length()) if domain * 2 ** i <= max_gpus]
    out = []
    for n in sorted(c for c in set(counts) if c <= max_gpus):
        try:
            cluster.resized(n)
        except ValueError:
            continue
        out.append(n)
    return out


def named_templates(refs: Sequence[ClusterSpec | str],
                    gpus: Sequence[str] | None = None) -> list[ClusterSpec]:
    """The cluster templates ``refs`` name: catalog cluster names or aliases, cluster files,
    the derived templates of :func:`catalog_templates`
    (``dgx-a100-superpod:a100-sxm-40gb``), or specs. A string may list several,
    comma-separated (``ramp-a100,my-fat-tree.yaml``). Only those with the ``gpus`` named,
    when given. Unknown names are errors naming the closest catalog names, or the catalog
    cluster that replaces a derived template (``dgx-h100-superpod:h200``)."""
    import difflib
    from pathlib import Path

    derived: dict[str, ClusterSpec] | None = None
    out: list[ClusterSpec] = []
    for ref in refs:
        if isinstance(ref, ClusterSpec):
            out.append(ref)
            continue
        parts = [ref] if Path(ref).is_file() else [p.strip() for p in ref.split(",")]
        for part in (p for p in parts if p):
            if ":" in part and not Path(part).exists():
                if derived is None:
                    derived = {t.name: t for t in catalog_templates() if ":" in t.name}
                if part.lower() not in derived:
                    owner = _cluster_of_gpu(part.split(":", 1)[1])
                    if owner is not None:
                        raise InputError(f"unknown cluster template '{part}': GPU "
                                         f"{owner.gpu.name} has its own catalog cluster, "
                                         f"{owner.name}")
                    near = difflib.get_close_matches(part.lower(), list(derived), n=3,
                                                     cutoff=0.4)
                    raise InputError(f"unknown cluster template '{part}'"
                                     + (f"; closest: {', '.join(near)}" if near else "")
                                     + ". Derived templates are <catalog cluster>:<GPU> for "
                                     "a catalog GPU no catalog cluster has")
                out.append(derived[part.lower()])
            else:
                out.append(load_cluster(part))
    if gpus:
        wanted = {load_gpu(g.strip()).name for g in gpus if g.strip()}
        out = [t for t in out if t.gpu.name in wanted]
    return out
