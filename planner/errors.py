"""Errors the CLI turns into clear messages (never tracebacks)."""

from __future__ import annotations


class PlannerError(Exception):
    """Base class for errors shown to users."""

    exit_code = 2


class InputError(PlannerError):
    """Bad input: unknown name, malformed file, wrong field type or value."""

    exit_code = 2


class InfeasibleError(PlannerError):
    """The request has no feasible plan; ``reasons`` explains why, ``hints`` what would help.

    ``status`` is ``"infeasible"`` when nothing fits, ``"time_limit"`` when the time limit
    ran out before any plan was found (the request may still be feasible)."""

    exit_code = 1

    def __init__(self, message: str, reasons: list[str] | None = None,
                 hints: list[str] | None = None, status: str = "infeasible"):
        super().__init__(message)
        self.reasons = reasons or []
        self.hints = hints or []
        self.status = status


class ResourceError(PlannerError):
    """The machine ran out of a resource (memory) before an answer: not the input's fault,
    and no proof that no plan exists."""

    exit_code = 1
