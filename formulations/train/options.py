"""The bounds of the training search space. The four a user sets (``planner solve
--max-microbatch`` ...) are declared once, as fields of
:class:`planner.specs.requests.SolveRequest` (default, description, flag), and read from
there; the others are declared here.

Kept apart from :mod:`formulations.train.space` so that reading a default does not import
the cost model (the CLI builds its options at start-up)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from planner.costmodel.train.points import CP_COMMS
from planner.specs.framework import FrameworkProfile
from planner.specs.requests import SEARCH_BOUNDS, SolveRequest, cli


def _knob(default: Any, help: str, flag: str | None = None, inverted: bool = False) -> Any:
    """A bound with its help text; ``flag``: the CLI option exposing it (``inverted``: the
    flag sets the opposite of the field, e.g. ``--even-pipeline`` for ``allow_uneven``)."""
    return field(default=default, metadata={"help": help, "flag": flag, "inverted": inverted})


def _bound(name: str) -> Any:
    """The bound ``name`` as :class:`SolveRequest` declares it (``allow_uneven`` is the
    request's ``even_pipeline``, inverted)."""
    f = SolveRequest.model_fields[SEARCH_BOUNDS[name]]
    inverted = SEARCH_BOUNDS[name] != name
    return _knob(not f.default if inverted else f.default, f.description or "",
                 cli(f)["flag"], inverted)


@dataclass(frozen=True)
class SpaceOptions:
    """Bounds of the search space."""

    max_microbatch: int = _bound("max_microbatch")
    max_virtual_stages: int = _bound("max_virtual_stages")
    min_cp_tokens: int = _knob(
        4096, "Context parallelism only while each rank keeps at least this many tokens.")
    cp_comms: tuple[str, ...] = _knob(
        CP_COMMS, "Context-parallel exchanges to choose from when cp > 1 (--fix cp_comm=... "
        "pins one).")
    allow_idle_gpus: bool = _bound("allow_idle_gpus")
    allow_uneven: bool = _bound("allow_uneven")
    search_placement: bool = _knob(True, "Search the NVSwitch-domain placement.")
    max_zero_stage: int = _knob(
        3, "Highest ZeRO stage to consider: 1 for frameworks whose sharding is Megatron-LM's "
        "distributed optimizer (NeMo, Megatron-LM without its FSDP), 3 for FSDP/DeepSpeed.")
    framework: FrameworkProfile | None = _knob(
        None, "The framework whose rules the space obeys (None: every plan the cost model "
        "accepts); its single-field rules restrict the domains, its conditional rules filter "
        "the points.")


def knob(name: str) -> tuple[Any, str, str]:
    """``(CLI default, help, flag)`` of the field ``name`` that a CLI flag exposes; the
    default is the flag's value that leaves the field at its own default."""
    f = next((f for f in fields(SpaceOptions) if f.name == name), None)
    if f is None or not f.metadata.get("flag"):
        raise KeyError(f"SpaceOptions has no CLI knob {name!r}")
    default = (not f.default) if f.metadata["inverted"] else f.default
    return default, f.metadata["help"], f.metadata["flag"]
