"""Errors the CLI turns into clear messages (never tracebacks)."""

from __future__ import annotations


class PlannerError(Exception):
    """Base class for errors shown to users."""

    exit_code = 2


class InputError(PlannerError):
    """Bad input: unknown name, malformed file, wrong field type or value."""

    exit_code = 2


class InfeasibleError(PlannerError):
    """The request has no feasible plan; ``reasons`` explains why, ``hints`` what would help."""

    exit_code = 1

    def __init__(self, message: str, reasons: list[str] | None = None, hints: list[str] | None = None):
        super().__init__(message)
        self.reasons = reasons or []
        self.hints = hints or []
