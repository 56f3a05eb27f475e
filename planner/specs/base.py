"""Common base for the typed, frozen specifications."""

from __future__ import annotations

import types
import typing
from typing import Any, Union

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator
from pydantic_core import PydanticCustomError


class Spec(BaseModel):
    """Frozen pydantic model that refuses a key it does not declare.

    A misspelt key (``tie_embeddings`` for ``tied_embeddings``) would otherwise change
    the answer unseen; documentation keys (``source``, ``sources``, ``notes``) are
    declared fields of the file formats that carry them. No boolean is taken as a number
    (pydantic's lax mode reads ``true`` as 1.0).
    """

    # allow_inf_nan=False: an infinite or NaN number is never physics (latency, bandwidth,
    # peak FLOP/s, capacity); pydantic rejects it with the field's name
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True,
                              allow_inf_nan=False, defer_build=True)
    _hash: int | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data: Any) -> Any:
        # one pass over the numeric fields given (a validator per field made every spec
        # three times slower to build); containers are walked only when given as such
        if isinstance(data, dict):
            for key, annotation in _numeric_keys(cls):
                value = data.get(key, _MISSING)
                if value.__class__ is bool or isinstance(value, (list, tuple, dict)):
                    where = bool_as_number(value, annotation)
                    if where is not None:
                        raise PydanticCustomError(
                            "bool_as_number", "expected a number, not a boolean",
                            {"key": f"{key}{where}"})
        return data

    def __hash__(self) -> int:
        # Frozen but holding lists/dicts: hash the canonical JSON once, so that pure
        # cost-model functions can be memoized on specs.
        if self._hash is None:
            object.__setattr__(self, "_hash", hash((type(self).__name__, self.model_dump_json())))
        return self._hash  # type: ignore[return-value]

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False):  # type: ignore[override]
        out = super().model_copy(update=update, deep=deep)
        object.__setattr__(out, "_hash", None)  # a copy with updates hashes anew
        return out

    @classmethod
    def unknown_keys(cls, data: dict[str, Any]) -> list[str]:
        return sorted(k for k in data if k not in cls.known_keys())

    @classmethod
    def known_keys(cls) -> list[str]:
        """The keys a file may give: field names and their aliases."""
        out = list(cls.model_fields)
        out += [f.alias for f in cls.model_fields.values() if f.alias and f.alias not in out]
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form, as written to YAML/JSON."""
        return self.model_dump(mode="json", exclude_none=True)


#: the longest ``notes`` a file may carry (a page of text; more is not documentation)
MAX_NOTES_CHARS = 10_000


def notes_field() -> Any:
    """The ``notes:`` key of a file format: free text for the reader, declared so that
    every other unknown key is refused."""
    return Field(None, max_length=MAX_NOTES_CHARS,
                 description="free text for the reader; the planner does not read it")


_NUMBERS = (int, float)
_MISSING = object()
_NUMERIC_KEYS: dict[type, list[tuple[str, Any]]] = {}


def _numeric_keys(cls: type[BaseModel]) -> list[tuple[str, Any]]:
    """The keys (names and aliases) of ``cls``'s fields that hold numbers, alone or in
    containers, and not booleans, strings or anything: once per class."""
    out = _NUMERIC_KEYS.get(cls)
    if out is None:
        out = [(key, f.annotation) for name, f in cls.model_fields.items()
               if _holds_numbers(f.annotation) for key in {name, f.alias} if key]
        _NUMERIC_KEYS[cls] = out
    return out


def _holds_numbers(annotation: Any) -> bool:
    alts = _args(annotation)
    if any(a is bool or a is Any or a is str for a in alts):
        return False
    return any(a in _NUMBERS or any(_holds_numbers(x) for x in typing.get_args(a)
                                    if x is not Ellipsis) for a in alts)


def _args(annotation: Any) -> tuple[Any, ...]:
    """The alternatives of a union (``X | None``), else ``(annotation,)``; Annotated
    unwrapped."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _args(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return tuple(a for arg in typing.get_args(annotation) for a in _args(arg))
    return (annotation,)


def bool_as_number(value: Any, annotation: Any) -> str | None:
    """Where in ``value`` a boolean stands for a number ``annotation`` declares (``""``:
    the value itself; ``"[2]"``, ``".key"``: an element), or None. A field that admits a
    boolean (``bool | int``), a string or anything is never flagged."""
    alts = _args(annotation)
    if any(a is bool or a is Any or a is str for a in alts):
        return None
    if isinstance(value, bool):
        return "" if any(a in _NUMBERS for a in alts) else None
    for alt in alts:
        origin, args = typing.get_origin(alt), typing.get_args(alt)
        if origin in (list, tuple, set, frozenset) and isinstance(value, (list, tuple)) and args:
            for i, v in enumerate(value):
                inner = args[0] if origin is not tuple or len(args) != len(value) else args[i]
                if inner is Ellipsis:
                    inner = args[0]
                where = bool_as_number(v, inner)
                if where is not None:
                    return f"[{i}]{where}"
        elif origin is dict and isinstance(value, dict) and len(args) == 2:
            for k, v in value.items():
                where = bool_as_number(v, args[1])
                if where is not None:
                    return f".{k}{where}"
    return None
