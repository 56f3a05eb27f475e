"""Pydantic validation with the project's error: the file, the field, the value and what
was expected, as one :class:`planner.errors.InputError`."""

from __future__ import annotations

import difflib
import typing
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from planner.errors import InputError

T = TypeVar("T", bound=BaseModel)


def format_validation_error(err: ValidationError, source: str,
                            cls: type[BaseModel] | None = None) -> str:
    """One line per error: the key's path, what was wrong, the value. An unknown key
    names the closest valid keys of the mapping it is in (``cls``: the validated class)."""
    lines = [f"{source}: invalid input"]
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"]
        if e["type"] == "bool_as_number":  # raised by the model: the key is in ctx
            loc = ".".join([*(str(p) for p in e["loc"]), e["ctx"]["key"]])
        if e["type"] == "extra_forbidden":
            msg = unknown_key_message(str(e["loc"][-1]), _model_at(cls, e["loc"][:-1]))
        got = e.get("input")
        shown = "" if isinstance(got, dict) or got is None else f" (got {_short(got)})"
        lines.append(f"  {loc}: {msg}{shown}")
    return "\n".join(lines)


def unknown_key_message(key: str, model: type[BaseModel] | None) -> str:
    """``unknown key``, and the keys ``model`` declares that are closest to ``key`` by
    spelling (difflib), else all of them."""
    if model is None:
        return "unknown key"
    known = list(model.model_fields)
    known += [f.alias for f in model.model_fields.values() if f.alias and f.alias not in known]
    near = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
    if near:
        return f"unknown key; did you mean {' or '.join(near)}?"
    return f"unknown key; expected one of {', '.join(known)}"


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds (``X | None``, ``list[X]``,
    ``dict[str, X]``, Annotated ...)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _model_at(cls: type[BaseModel] | None, loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model whose mapping ``loc`` (an error's path, less the key) points into:
    field names step into a field's model; list indices and dict keys are skipped."""
    model = cls
    for part in loc:
        if model is None:
            return None
        field = model.model_fields.get(str(part)) if isinstance(part, str) else None
        if field is None:
            field = next((f for f in model.model_fields.values() if f.alias == part), None)
        if field is None:
            continue  # an index or a dict key: the same model's elements
        models = _models_in(field.annotation)
        model = models[0] if models else None
    return model


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
        raise InputError(format_validation_error(err, source, cls)) from None
