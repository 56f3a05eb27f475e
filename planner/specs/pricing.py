"""Procurement pricing: rent per GPU-hour, or own (capital over a depreciation period plus
electricity). Defaults in ``hardware_catalog/pricing/default.yaml``; see docs/procure.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from planner.errors import InputError
from planner.specs.base import Spec, notes_field
from planner.specs.names import Name, check_name
import planner.catalog as catalog
from planner.catalog import catalog_root
from planner.specs.loaders import read_structured, validate

PricingMode = Literal["rent", "own"]
HOURS_PER_YEAR = 8760.0
J_PER_KWH = 3.6e6


class GPUPrice(Spec):
    """Per-GPU price overrides; unset fields fall back to the catalog."""

    price_per_gpu_hour: float | None = Field(None, ge=0, description="rent, USD per GPU-hour")
    capex_usd: float | None = Field(None, ge=0, description="purchase price per GPU, USD")


class ClusterPrice(Spec):
    """Per-cluster-template overrides, before the GPU's: two clusters with the same GPU (a
    RAMP and a fat tree of A100s) can be priced apart."""

    price_per_gpu_hour: float | None = Field(
        None, ge=0, description="rent, USD per GPU-hour, all-in; before every other price")
    cost_usd_per_Gbps: float | None = Field(
        None, ge=0, description="network capital, USD per Gb/s of capacity per GPU; replaces "
        "the cluster's on every level that prices its network (RAMP Table 3)")


class RentalTerm(Spec):
    """A reservation term of a cloud offer: a discount off the on-demand price in exchange
    for paying at least ``commitment_days`` (AWS Savings Plans and Reserved Instances, Google
    committed use discounts: 1 or 3 years). Renting D days on it costs
    ``price x (1 - discount) x max(D, commitment_days)`` per GPU-day x 24."""

    discount: float = Field(..., ge=0, lt=1, description="fraction off the on-demand price")
    commitment_days: float = Field(..., ge=0, le=3650,
                                   description="days paid for at least, used or not")
    source: str | None = Field(None, description="the quote or price list, with its date")


class PricingSpec(Spec):
    mode: PricingMode = "rent"
    electricity_usd_per_kwh: float = Field(..., ge=0)
    depreciation_years: float = Field(..., gt=0)
    operating_usd_per_gpu_hour: float = Field(
        0.0, ge=0, description="owned hardware's operating cost per GPU-hour besides "
        "electricity (staff, maintenance, colocation), charged for owned GPUs and with "
        "--pricing own; default 0: no public figure, so it is left out")
    rental_terms: dict[Name, RentalTerm] = Field(
        default_factory=dict, description="reservation terms beside on-demand, by name (e.g. "
        "'1y': {discount: 0.3, commitment_days: 365}); the rent-or-buy comparison takes the "
        "cheapest term for each duration")
    gpus: dict[Name, GPUPrice] = Field(default_factory=dict, description="keyed by GPU name")
    clusters: dict[Name, ClusterPrice] = Field(
        default_factory=dict, description="keyed by cluster template name (or alias)")
    date: str | None = None
    sources: dict[str, str] = Field(default_factory=dict, description="field -> citation "
                                    "(price list, paper and table, date)")
    notes: str | None = notes_field()

    def for_gpu(self, name: str) -> GPUPrice:
        return self.gpus.get(name.lower(), GPUPrice())

    def for_cluster(self, name: str) -> ClusterPrice:
        return self.clusters.get(name, ClusterPrice())


def default_pricing_path() -> Path:
    return catalog_root() / "pricing" / "default.yaml"


def _closest(keys: list[str], cls: type[Spec]) -> str:
    """``(did you mean ...?)`` for the first of ``keys`` that is close to a field."""
    import difflib

    for key in keys:
        near = difflib.get_close_matches(key, cls.known_keys(), n=1)
        if near:
            return f" ({key}: did you mean {near[0]}?)"
    return ""


def check_entry(cls: type[Spec], entry: Any, where: str) -> None:
    """A ``gpus.<name>`` or ``clusters.<name>`` entry is a mapping of ``cls``'s keys."""
    keys = ", ".join(cls.model_fields)
    if not isinstance(entry, dict):
        raise InputError(f"{where}: expected a mapping with some of {keys}, got {entry!r}")
    bad = cls.unknown_keys(entry)
    if bad:
        raise InputError(f"{where}: unknown keys {bad}{_closest(bad, cls)}; expected {keys}")


def load_pricing(path: str | None = None, mode: PricingMode | None = None,
                 overrides: dict[str, Any] | None = None) -> PricingSpec:
    """The shipped defaults, updated key by key from ``path`` (a pricing YAML), then from
    ``overrides``; ``mode`` last. GPU keys may be catalog names or aliases."""
    data = read_structured(default_pricing_path())
    layers = []
    if path is not None:
        layers.append((read_structured(Path(path)), path))
    if overrides:
        layers.append((overrides, "pricing overrides"))
    for layer, source in layers:
        unknown = PricingSpec.unknown_keys(layer)
        if unknown:
            raise InputError(f"{source}: unknown pricing keys {unknown}"
                             f"{_closest(unknown, PricingSpec)}; expected some of "
                             f"{sorted(PricingSpec.model_fields)}")
        gpus = dict(data.get("gpus") or {})
        for name, entry in (layer.get("gpus") or {}).items():
            check_name(str(name), f"{source}: gpus key")
            path_ = catalog.find("gpus", str(name))
            if path_ is None:
                near = catalog.closest("gpus", str(name))
                hint = f"; closest: {', '.join(near)}" if near else ""
                raise InputError(f"{source}: gpus.{name}: unknown GPU{hint}")
            check_entry(GPUPrice, entry, f"{source}: gpus.{name}")
            canonical = read_structured(path_).get("name", path_.stem).lower()
            gpus[canonical] = {**gpus.get(canonical, {}), **entry}
        # Cluster keys are checked against the templates of a query (planner.procure): a
        # template may be a file, not in the catalog.
        clusters = dict(data.get("clusters") or {})
        for name, entry in (layer.get("clusters") or {}).items():
            check_name(str(name), f"{source}: clusters key")  # printed in procure's tables
            check_entry(ClusterPrice, entry, f"{source}: clusters.{name}")
            clusters[str(name)] = {**clusters.get(str(name), {}), **entry}
        data = {**data, **{k: v for k, v in layer.items() if k not in ("gpus", "clusters")},
                "gpus": gpus, "clusters": clusters}
    if mode is not None:
        data["mode"] = mode
    return validate(PricingSpec, data, path or "pricing")
