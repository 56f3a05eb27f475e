"""Names that reach generated files and terminals: model, cluster, GPU, network level and
DLRM table names, aliases, Hugging Face ``_name_or_path``, model paths.

A name is written into launch scripts (a header comment), TOML and JSON configs, YAML and
terminal output. A line break in it ends a shell comment early (what follows runs as a
command), adds TOML sections or override lines; NUL, ESC and the other control characters
corrupt files and terminals; bidirectional overrides make a terminal show other text than
the file holds (CVE-2021-42574). :data:`Name` refuses them all at load, once, for every
spec; the exporters escape what they write anyway (:func:`comment_text` here, quoting
per format there).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Annotated

from pydantic import AfterValidator

from planner.errors import InputError

#: A name is a label: 512 characters hold any Hugging Face repo id (96 at most on the Hub)
#: and a local checkpoint path of ordinary depth; more is not a name.
MAX_NAME_CHARS = 512

#: C0 controls (line feed, carriage return, tab, NUL, ESC ...), DEL, C1 controls (NEL
#: U+0085 among them), the line and paragraph separators, the bidirectional embeddings,
#: overrides and isolates, and lone surrogates (not encodable as UTF-8).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def unsafe_char(text: str) -> tuple[int, str] | None:
    """The first character of ``text`` no name may hold, with its index, or None."""
    m = _UNSAFE.search(text)
    return None if m is None else (m.start(), m.group())


def describe_char(ch: str) -> str:
    """``U+000A (LINE FEED)``: a character as a message can show it."""
    label = unicodedata.name(ch, "") or {"\n": "LINE FEED", "\r": "CARRIAGE RETURN",
                                           "\t": "TAB", "\x00": "NUL", "\x1b": "ESCAPE",
                                           "\x7f": "DELETE", "\x85": "NEXT LINE"}.get(ch, "")
    if not label:
        cat = unicodedata.category(ch)
        label = {"Cc": "a control character", "Cs": "a lone surrogate"}.get(cat, cat)
    return f"U+{ord(ch):04X} ({label})"


def name_problem(text: str, max_chars: int | None = MAX_NAME_CHARS) -> str | None:
    """Why ``text`` is not a valid name (no value shown), or None; ``max_chars`` None: any
    length (a file path)."""
    if max_chars is not None and len(text) > max_chars:
        return f"{len(text):,} characters; expected a name of at most {max_chars}"
    bad = unsafe_char(text)
    if bad is not None:
        i, ch = bad
        return (f"character {i + 1} is {describe_char(ch)}; expected a name without control "
                "characters, line breaks or bidirectional overrides")
    return None


def _check_name(value: str) -> str:
    problem = name_problem(value)
    if problem is not None:
        raise ValueError(problem)  # pydantic adds the field's name and the value, escaped
    return value


#: Every spec field that holds a name: no control characters, at most MAX_NAME_CHARS (a
#: field's own Field(max_length=...) still applies).
Name = Annotated[str, AfterValidator(_check_name)]


def shown(text: str, limit: int = 80) -> str:
    """``text`` quoted and escaped as a message shows it (repr: a line break is ``\\n``)."""
    out = repr(text)
    return out if len(out) <= limit else out[:limit] + f"... ({len(text):,} characters)"


def check_name(value: str, what: str, max_chars: int | None = MAX_NAME_CHARS) -> str:
    """``value`` if it is a valid name, else an :class:`InputError` naming ``what`` (an
    option or a field), showing the value escaped and saying what is expected."""
    problem = name_problem(value, max_chars) if isinstance(value, str) else None
    if problem is not None:
        raise InputError(f"{what} {shown(value)}: {problem}")
    return value


def comment_text(text: str) -> str:
    """``text`` safe inside a one-line ``#`` comment of any format: every character that
    could end the line (or hide text on a terminal) written as an escape, ``\\`` doubled so
    that the escapes are unambiguous."""
    return "".join(_escape_char(ch) for ch in text.replace("\\", "\\\\"))


def _escape_char(ch: str) -> str:
    if not _UNSAFE.match(ch) and ch.isprintable() or ch == " ":
        return ch
    return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"
