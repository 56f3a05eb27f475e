"""A sweep file: a base point and axes, expanded into a grid of points.

Each point is one ``solve`` or one ``procure`` with hardware scalings applied to the
cluster (planner/sweep/scaling.py). The grid is the product of the axes, in the order the
file lists them; an axis is a list of values of one point field, or a mapping of labels to
sets of fields (a "composite" axis: ``compute: {peak_flops: factor}``), where the string
``factor`` stands for the point's ``factor`` axis value (MAD-Max scales one resource at a
time by a common factor, Hsia et al., ISCA 2024, Fig. 19).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, PositiveFloat, PositiveInt, field_validator

from planner.errors import InputError
from planner.specs.base import Spec, notes_field
from planner.specs.names import Name
from planner.specs.validate import _short, validate
from planner.specs.loaders import read_structured

Command = Literal["solve", "procure"]
#: the string a composite axis uses for the point's ``factor`` value
FACTOR_REF = "factor"
#: axis names with a part: ``bandwidth.<level>`` and ``latency.<level>`` (level name or
#: index, innermost 0) scale one network level, ``price.<gpu>`` one GPU type's prices
LEVEL_AXES = {"bandwidth": "level_bandwidth", "latency": "level_latency",
              "price": "gpu_price"}  # price.<gpu>: one GPU type's prices


#: The most points one sweep file may expand to. Each point is a whole solve or procure
#: (0.05 s to its time limit, 60 s by default), so 100,000 points are days of CPU even at
#: a second each, and the expanded grid holds ~2.5 KB per point (~250 MB); MAD-Max's
#: what-if studies are hundreds to thousands of points (Hsia et al., ISCA 2024).
MAX_POINTS = 100_000

#: A what-if factor: a million-fold change either way is already beyond any hardware
#: roadmap; more is a unit mistake (and 1e308 x a bandwidth overflows to inf).
Factor = Annotated[float, Field(ge=1e-6, le=1e6)]
LatencyFactor = Annotated[float, Field(ge=0, le=1e6)]


class PointSpec(Spec):
    """One point of a sweep: what to solve or procure, and how the hardware is scaled.
    Scalings are factors on the catalog value (1 = unchanged); ``nvs_domain`` is the number
    of GPUs in the innermost (NVSwitch) domain."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    command: Command = "solve"
    model: str
    cluster: str | None = Field(None, description="solve: catalog name or file")
    gpus: PositiveInt | None = Field(None, description="solve: GPU count (resizes the cluster)")
    global_batch_size: PositiveInt | None = None
    seq_len: PositiveInt | None = None
    dtype: str | None = None
    objective: str | None = None
    tokens: PositiveFloat | None = Field(None, description="token budget: days, cost, energy")
    days: PositiveFloat | None = Field(None, description="deadline in days (needs tokens)")
    budget_usd: PositiveFloat | None = Field(None, description="procure: budget")
    gpu_types: str | None = Field(None, description="procure: GPU names, comma-separated")
    clusters: str | None = Field(None, description="procure: cluster templates, comma-separated")
    max_gpus: PositiveInt | None = Field(None, description="procure: largest GPU count")
    pricing: Literal["rent", "own"] | None = None
    max_power_mw: PositiveFloat | None = Field(
        None, le=1e5, description="procure: the site's facility power, MW (peak draw with "
        "PUE; planner/procurement/site.py)")
    owned: dict[Name, PositiveInt] | str | None = Field(
        None, description="procure: GPUs already owned, {cluster: count}, or an inventory "
        "file (docs/procure.md Sec. 9); their capital is sunk")
    fix: dict[str, Any] = Field(default_factory=dict, description="solve: pinned plan fields")
    framework: str | None = Field(None, description="the training framework whose plans are "
                                  "searched (planner catalog frameworks); none: any plan")
    time_limit_s: PositiveFloat = Field(60.0, le=86400.0)
    max_microbatch: PositiveInt | None = Field(None, description="solve: search bound")
    max_virtual_stages: PositiveInt | None = Field(None, description="solve: search bound")
    even_pipeline: bool | None = Field(None, description="solve: equal layers per stage")
    peak_flops: Factor = 1.0
    hbm_capacity: Factor = 1.0
    hbm_bandwidth: Factor = 1.0
    network_bandwidth: Factor = 1.0
    network_latency: LatencyFactor = 1.0
    level_bandwidth: dict[str, Factor] = Field(default_factory=dict)
    level_latency: dict[str, LatencyFactor] = Field(default_factory=dict)
    nvs_domain: PositiveInt | None = None
    price: Factor = Field(1.0, description="factor on GPU-hour and purchase prices")
    gpu_price: dict[str, Factor] = Field(
        default_factory=dict, description="price factor per GPU type (catalog name or alias)")
    factor: float | None = Field(None, description="a common factor composite axes refer to")

    @field_validator("level_bandwidth", "level_latency", "gpu_price")
    @classmethod
    def _drop_unit_factors(cls, v: dict[str, float]) -> dict[str, float]:
        """A level at factor 1 is unchanged: the same point (and key) as without it."""
        return {k: f for k, f in v.items() if f != 1}

    def key(self) -> str:
        """A stable hash of the point's settings: the row's identity when resuming."""
        data = self.model_dump(mode="json")
        for f in ("framework", "max_power_mw", "owned"):
            if data.get(f) is None:  # the keys of sweeps written before the field
                data.pop(f, None)
        text = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


FIELDS = tuple(PointSpec.model_fields)


class SweepSpec(Spec):
    """A sweep file (docs in README "What-if sweeps")."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: Name = "sweep"
    notes: str | None = notes_field()
    command: Command = "solve"
    base: dict[str, Any] = Field(default_factory=dict)
    axes: dict[str, list[Any] | dict[str, dict[str, Any]]] = Field(..., min_length=1)


@dataclass(frozen=True)
class Point:
    """An expanded point: its axis values (as the table shows them) and its settings."""

    axes: dict[str, Any]
    spec: PointSpec

    @cached_property
    def key(self) -> str:
        """The settings' hash, computed once: the table is rebuilt from the keys at every
        rewrite of the output."""
        return self.spec.key()


def field_of(name: str, where: str) -> tuple[str, str | None]:
    """The point field an axis or base key sets, and the level for ``bandwidth.<level>``."""
    head, dot, level = name.partition(".")
    if dot and head in LEVEL_AXES and level:
        return LEVEL_AXES[head], level
    if name in FIELDS and name not in LEVEL_AXES.values():
        return name, None
    raise InputError(f"{where} {name!r}: unknown field; expected one of "
                     f"{', '.join(f for f in FIELDS if f not in LEVEL_AXES.values())}, "
                     "bandwidth.<level> or latency.<level>")


def _set(settings: dict[str, Any], name: str, value: Any, where: str) -> None:
    field, level = field_of(name, where)
    if level is None:
        settings[field] = value
    else:
        settings[field] = {**settings.get(field, {}), level: value}


def load_sweep(path: str | Path) -> SweepSpec:
    """A sweep file (YAML or JSON), checked: unknown keys and fields are errors."""
    p = Path(path)
    if not (p.exists() or p.is_symlink()):  # read_structured names a FIFO, a link loop ...
        raise InputError(f"sweep file {str(path)!r}: no such file")
    return relative_to(sweep_from_dict(read_structured(p), str(path)), p.parent)


#: the fields that name files (or catalog entries); ``clusters`` lists several
PATH_FIELDS = ("model", "cluster", "clusters", "owned")


def _is_path(ref: str) -> bool:
    """A reference written as a file (the loaders' test, less the look in the working
    directory): a catalog name has no folder and no file suffix."""
    return ref.endswith((".yaml", ".yml", ".json")) or "/" in ref


def _against(folder: Path, field: str, value: Any) -> Any:
    if not isinstance(value, str):
        return value  # the point's validation names the bad type
    parts = value.split(",") if field == "clusters" else [value]
    # normpath: from the repository root, examples/sweeps/x.yaml names x.yaml as it did
    # when the file's paths were the root's (the points' keys are unchanged)
    return ",".join(os.path.normpath(os.path.join(folder, q.strip())) if _is_path(q.strip())
                    else q for q in parts)


def relative_to(spec: SweepSpec, folder: Path) -> SweepSpec:
    """``spec`` with its relative file paths (models, clusters, cluster templates) taken
    against ``folder``, the sweep file's: the same file runs from any working directory.
    Catalog names are left as they are."""
    if folder == Path("."):
        return spec
    base = {k: _against(folder, k, v) if k in PATH_FIELDS else v for k, v in spec.base.items()}
    axes: dict[str, Any] = {}
    for name, values in spec.axes.items():
        if isinstance(values, dict):
            axes[name] = {label: {k: _against(folder, k, v) if k in PATH_FIELDS else v
                                  for k, v in sets.items()} for label, sets in values.items()}
        elif name in PATH_FIELDS:
            axes[name] = [_against(folder, name, v) for v in values]
        else:
            axes[name] = values
    return spec.model_copy(update={"base": base, "axes": axes})


def sweep_from_dict(data: Any, source: str) -> SweepSpec:
    spec = validate(SweepSpec, data, source)
    check_grid_size(spec, source)
    for name in spec.base:
        field_of(name, f"{source}: base:")
        if name in spec.axes:
            raise InputError(f"{source}: base.{name} is also an axis; give it in one place")
    for name, values in spec.axes.items():
        if isinstance(values, list) and not values:
            raise InputError(f"{source}: axes.{name}: empty list; give at least one value")
        if isinstance(values, dict):
            if not values:
                raise InputError(f"{source}: axes.{name}: empty mapping; give label: {{field: "
                                 "value}} entries")
            for label, sets in values.items():
                for key in sets:
                    field_of(key, f"{source}: axes.{name}.{label}:")
        else:
            field_of(name, f"{source}: axes:")
    return spec


def grid_size(spec: SweepSpec) -> int:
    """The number of points: the product of the axes' lengths (nothing is expanded)."""
    return math.prod(len(v) for v in spec.axes.values())


def check_grid_size(spec: SweepSpec, source: str) -> None:
    """Refuse a grid over :data:`MAX_POINTS` from its dimensions alone."""
    n = grid_size(spec)
    if n <= MAX_POINTS:
        return
    dims = " x ".join(f"{len(v)} {name}" for name, v in spec.axes.items())
    first, values = next(iter(spec.axes.items()))
    raise InputError(f"sweep file {source!r}: the grid has {n:,} points ({dims}); the limit "
                     f"is {MAX_POINTS:,}; split it into several sweep files (e.g. one per "
                     f"value of axis {first!r}, {len(values)} files of {n // len(values):,} "
                     "points) or drop axis values")


def expand(spec: SweepSpec, source: str = "sweep") -> list[Point]:
    """Every point of the grid, in the file's axis order (the last axis varies fastest).
    Points with the same settings (MAD-Max's baseline: every resource at factor 1) share a
    key; they are run once and their rows differ only in the axes."""
    check_grid_size(spec, source)
    names = list(spec.axes)
    choices = [list(v.items()) if isinstance(v, dict) else list(v) for v in spec.axes.values()]
    points = []
    for combo in itertools.product(*choices):
        settings: dict[str, Any] = {"command": spec.command}
        for key, value in spec.base.items():
            _set(settings, key, value, f"{source}: base:")
        shown: dict[str, Any] = {}
        composite: list[dict[str, Any]] = []
        for name, value in zip(names, combo):
            if isinstance(spec.axes[name], dict):
                shown[name] = value[0]
                composite.append(value[1])
            else:
                shown[name] = value
                _set(settings, name, value, f"{source}: axes:")
        for sets in composite:
            for key, value in sets.items():
                _set(settings, key, _resolve(value, settings, shown), f"{source}: axes:")
        points.append(Point(shown, validate(PointSpec, settings, f"{source}: point {shown}")))
    return points


def _resolve(value: Any, settings: dict[str, Any], shown: dict[str, Any]) -> Any:
    if value != FACTOR_REF:
        return value
    if settings.get("factor") is None:
        raise InputError(f"point {shown}: a composite axis refers to 'factor' but no axis or "
                         "base sets factor; add e.g. axes: {factor: [1, 2, 4, 10]}")
    return settings["factor"]


def check_point(spec: PointSpec, where: str) -> None:
    """What a point needs beyond its fields' types: a cluster to solve on, tokens for a
    deadline or a procurement."""
    if spec.command == "solve" and spec.cluster is None:
        raise InputError(f"{where}: cluster: required for solve (a catalog name or file)")
    if spec.command == "procure" and spec.tokens is None:
        raise InputError(f"{where}: tokens: required for procure (the training budget)")
    if spec.days is not None and spec.tokens is None:
        raise InputError(f"{where}: days {_short(spec.days)}: a deadline needs tokens (the "
                         "budget it is a deadline for)")
    if spec.command == "solve":
        bad = [f for f in ("budget_usd", "gpu_types", "clusters", "max_gpus", "pricing",
                           "max_power_mw", "owned") if getattr(spec, f) is not None]
        if bad:
            raise InputError(f"{where}: {', '.join(bad)}: procure fields; set command: procure")
    else:
        bad = [f for f in ("cluster", "gpus", "max_microbatch", "max_virtual_stages",
                           "even_pipeline", "nvs_domain") if getattr(spec, f) is not None]
        if bad or spec.fix:
            raise InputError(f"{where}: {', '.join(bad or ['fix'])}: solve fields; procure "
                             "takes clusters, gpu_types and max_gpus")
