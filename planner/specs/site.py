"""Procurement inputs beyond the catalog: the site's limits and the fleet already owned.

``SiteSpec``: what the site can hold (facility megawatts, racks). ``InventorySpec``: the GPUs
already owned, per cluster (``inventory.yaml``, docs/procure.md "Owned inventory"): a mapping
from a catalog cluster name (or alias, or a cluster file) to the GPU count owned::

    dgx-a100-superpod: 1024
    examples/my-cluster.yaml: 256
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from pydantic import Field, PositiveFloat, PositiveInt

from planner.errors import InputError
from planner.specs.base import Spec
from planner.specs.names import Name, check_name
from planner.specs.loaders import read_structured


class SiteSpec(Spec):
    """What the site can hold; an option (cluster x GPU count) over a limit is left out."""

    max_power_mw: PositiveFloat | None = Field(
        None, le=1e5, description="facility power, MW: the cluster's peak draw (GPUs at TDP, "
        "nodes, network) times its PUE may not exceed it")
    max_racks: PositiveInt | None = Field(
        None, description="racks: ceil(GPUs / the cluster's gpus_per_rack) may not exceed it")
    max_ports: PositiveInt | None = Field(
        None, description="compute-fabric switch ports: GPUs x the cluster's "
        "scale_out_ports_per_gpu may not exceed it")

    def limits(self) -> dict[str, float]:
        """The limits given, keyed by the option figure they bound."""
        return {k: float(v) for k, v in (("facility_power_mw", self.max_power_mw),
                                         ("racks", self.max_racks),
                                         ("ports", self.max_ports)) if v is not None}


class InventorySpec(Spec):
    """GPUs already owned, per cluster template. Their capital is sunk: an option on them is
    charged its electricity and operating cost only."""

    owned: dict[Name, PositiveInt] = Field(
        ..., min_length=1, description="cluster name, alias or cluster file -> GPUs owned")


def inventory_from(data: Any, source: str = "inventory") -> InventorySpec:
    """An :class:`InventorySpec` from a mapping ``{cluster: count}`` (or an InventorySpec);
    raises InputError naming the entry that is not a cluster name with a positive count."""
    if isinstance(data, InventorySpec):
        return data
    if not isinstance(data, Mapping) or not data:
        raise InputError(f"{source}: expected a mapping of cluster name -> GPUs owned, e.g. "
                         f"'dgx-a100-superpod: 1024'; got {data!r}"[:300])
    owned: dict[str, int] = {}
    for key, count in data.items():
        if not isinstance(key, str) or not key.strip():
            raise InputError(f"{source}: key {key!r}: expected a cluster name or file")
        check_name(key, f"{source}: key")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise InputError(f"{source}: {key}: {count!r}: expected a positive whole number "
                             "of GPUs owned")
        owned[key] = count
    return InventorySpec(owned=owned)


def load_inventory(path: str | Path) -> InventorySpec:
    """``inventory.yaml`` (or JSON): ``{cluster: GPUs owned}``."""
    return inventory_from(read_structured(Path(path)), str(path))
