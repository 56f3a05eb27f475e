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
        shown = "" if isinstance(got, dict) or got is None else f" (got {got!r})"
        lines.append(f"  {loc}: {msg}{shown}")
    return "\n".join(lines)


def validate(cls: type[T], data: Any, source: str) -> T:
    if not isinstance(data, dict):
        raise InputError(f"{source}: expected a mapping of fields, got {type(data).__name__}")
    try:
        return cls.model_validate(data)
    except ValidationError as err:
        raise InputError(format_validation_error(err, source)) from None
