"""A command's options from its request's fields (planner/specs/requests.py): one typer
option per field that names a flag, with the field's description as help and its default
(:func:`command`). The command function then receives the validated requests, so a bad
value is refused once, by the request, naming the field and the flag."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable
from enum import Enum
from typing import Any, Literal, Optional, Union

import typer
import yaml
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from planner.errors import InputError
from planner.specs.requests import Request, cli

_OMIT: Any = object()


def _alternatives(annotation: Any) -> list[Any]:
    """The alternatives of a union (``X | None``), else ``[annotation]``."""
    if typing.get_origin(annotation) in (Union, types.UnionType):
        return [a for arg in typing.get_args(annotation) for a in _alternatives(arg)]
    return [annotation]


def _choices(name: str, f: FieldInfo) -> type[Enum] | None:
    """The field's names (a Literal, or ``choices``) as the CLI's choice enum: members
    named as the field spells them, valued as the flag does (``gpu_hours``:
    ``gpu-hours``)."""
    names = cli(f).get("choices")
    if names is None:
        lits = [a for a in _alternatives(f.annotation) if typing.get_origin(a) is Literal]
        if not lits:
            return None
        names = typing.get_args(lits[0])
    return Enum(name, {n: n.replace("_", "-") for n in names}, type=str)  # type: ignore[return-value]


def _cli_type(name: str, f: FieldInfo, default: Any) -> Any:
    """The type typer reads the flag as: a choice, a flag, a number, text, or a repeated
    text option (``multiple``); a list or mapping given on one flag is text the request
    parses (``--counts 8,16``)."""
    extra = cli(f)
    if extra.get("multiple"):
        return list[str]
    alts = _alternatives(f.annotation)
    kind = _choices(name, f)
    if kind is None:
        kind = next((t for t in (bool, int, float, str) if t in alts), str)
    return kind if default is not None or kind is bool else Optional[kind]


def _default(f: FieldInfo) -> Any:
    """The flag's default: the field's (required: ``...``), or the CLI's own, inverted or
    scaled as the flag is."""
    extra = cli(f)
    if extra.get("multiple"):
        return []
    if "cli_default" in extra:
        return extra["cli_default"]
    if f.default is PydanticUndefined:
        return ...
    value = f.default
    if extra.get("inverted"):
        return not value
    if extra.get("cli_scale") and value is not None:
        return round(value * extra["cli_scale"], 12)
    if isinstance(value, str) and _choices("_", f) is not None:
        return value.replace("_", "-")
    return value


def _option(f: FieldInfo, default: Any) -> Any:
    extra = cli(f)
    decls = [extra["flag"], *([extra["short"]] if "short" in extra else [])]
    return typer.Option(default, *decls, help=f.description, metavar=extra.get("metavar"))


def field_pairs(text_items: list[str], flag: str) -> dict[str, Any]:
    """``--fix FIELD=VALUE`` (repeated; YAML values) as a mapping."""
    out: dict[str, Any] = {}
    for text in text_items:
        if "=" not in text:
            raise InputError(f"{flag}: expected FIELD=VALUE, got {text!r}")
        key, raw = text.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            value = raw
        if value is None:
            raise InputError(f"{flag} {key.strip()}: no value given")
        out[key.strip()] = value
    return out


def _value(f: FieldInfo, value: Any) -> Any:
    """The field's value from the flag's (``_OMIT``: leave the field at its default)."""
    extra = cli(f)
    if isinstance(value, Enum):
        return value.name
    if extra.get("multiple"):
        if not value:
            return _OMIT
        if dict in [typing.get_origin(a) or a for a in _alternatives(f.annotation)]:
            return field_pairs(list(value), extra["flag"])
        return list(value)
    if extra.get("inverted"):
        return not value
    if extra.get("cli_scale") and value is not None:
        return value / extra["cli_scale"]
    return value


def command(*specs: type[Request]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``fn(request, output, ...)`` as a typer command whose options are the flagged
    fields of ``specs`` (in order); it is called with one validated instance of each."""
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        params, owner = [], {}
        for spec in specs:
            for name, f in spec.model_fields.items():
                if "flag" not in cli(f):
                    continue
                if name in owner:
                    raise TypeError(f"{fn.__name__}: field {name} declared twice")
                owner[name] = spec
                default = _default(f)
                params.append(inspect.Parameter(
                    name, inspect.Parameter.KEYWORD_ONLY, default=_option(f, default),
                    annotation=_cli_type(name, f, default)))

        def run(**values: Any) -> Any:
            built = []
            for spec in specs:
                fields = {n: _value(f, values[n]) for n, f in spec.model_fields.items()
                          if n in values}
                built.append(spec.of(**{k: v for k, v in fields.items() if v is not _OMIT}))
            return fn(*built)

        run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params}
        run.__name__, run.__qualname__, run.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
        run.__module__ = fn.__module__
        run.specs = specs  # type: ignore[attr-defined]
        return run
    return wrap
