"""Pydantic validation with the project's error: the file, the field, the value and what
was expected, as one :class:`planner.errors.InputError`."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from planner.errors import InputError

T = TypeVar("T", bound=BaseModel)


def format_validation_error(err: ValidationError, source: str) -> str:
    lines = [f"{source}: invalid input"]
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"]
        got = e.get("input")
        shown = "" if isinstance(got, dict) or got is None else f" (got {_short(got)})"
        lines.append(f"  {loc}: {msg}{shown}")
    return "\n".join(lines)


def _short(value: Any, limit: int = 80) -> str:
    """A value as the message quotes it: never the whole of a large input."""
    text = repr(value) if not isinstance(value, int) or value.bit_length() < 256 else \
        f"an integer of {value.bit_length()} bits"
    return text if len(text) <= limit else text[:limit] + f"... ({len(text):,} characters)"


def validate(cls: type[T], data: Any, source: str) -> T:
    if not isinstance(data, dict):
        raise InputError(f"{source}: expected a mapping of fields, got {type(data).__name__}")
    try:
        return cls.model_validate(data)
    except ValidationError as err:
        raise InputError(format_validation_error(err, source)) from None
