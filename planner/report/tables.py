"""Tables that fit the terminal: names whole, other columns wrapped at spaces, and the
least needed columns left out (and named) only when even wrapped they do not fit.

Rich shrinks an over-wide table by cutting cells to ``llam…``; a catalog name cut so is of
no use to copy. :func:`fit_table` gives every column a width of its own before rich lays
it out, so rich never has to cut.
"""

from __future__ import annotations

import copy
from typing import Sequence

from rich.cells import cell_len
from rich.table import Table


#: A folded column keeps at least this many characters a line.
MIN_FOLD_WIDTH = 4


def _cells(column) -> list[str]:
    return [str(column.header), *(str(c) for c in column._cells)]


def _widths(column, whole: bool) -> tuple[int, int]:
    """(narrowest, natural) width of a column: a whole column never wraps; another wraps
    at spaces, so its narrowest is its longest word."""
    lines = [line for text in _cells(column) for line in text.splitlines() or [""]]
    natural = max(cell_len(line) for line in lines)
    if whole:
        return natural, natural
    return max(cell_len(w) for line in lines for w in (line.split() or [""])), natural


def _extra_width(table: Table, n: int) -> int:
    """Borders, separators and padding of ``n`` columns."""
    _, right, _, left = table.padding
    edges = 2 if table.box and table.show_edge else 0
    seps = n - 1 if table.box else 0
    pad = (left + right) * n - ((left + right) if not table.pad_edge else 0)
    return edges + seps + pad


def fit_table(table: Table, width: int, *, whole: Sequence[str] = (),
              words: Sequence[str] = (), drop: Sequence[str] = ()) -> tuple[Table, list[str]]:
    """``table`` laid out within ``width`` terminal columns, and the headers of the columns
    left out. Columns whose header is in ``whole`` (names) and right-justified columns
    (numbers) are never wrapped nor cut;
    the others wrap at spaces. When even their longest words do not fit, the columns in
    ``drop`` go, in that order, until they do; then the widest columns fold inside words,
    except those in ``words`` (lists of names). A table that fits comes back as it is."""
    # right-justified columns hold numbers: a number folded in two reads as two numbers
    wanted = set(whole) | {str(c.header) for c in table.columns if c.justify == "right"}
    cols = list(table.columns)
    ranges = [_widths(c, str(c.header) in wanted or c.no_wrap) for c in cols]
    if sum(hi for _, hi in ranges) + _extra_width(table, len(cols)) <= width:
        return table, []
    dropped: list[str] = []
    for name in drop:
        if sum(lo for lo, _ in ranges) + _extra_width(table, len(cols)) <= width:
            break
        i = next((k for k, c in enumerate(cols) if str(c.header) == name), None)
        if i is not None:
            dropped.append(name)
            del cols[i], ranges[i]
    widths = [lo for lo, _ in ranges]
    slack = width - _extra_width(table, len(cols)) - sum(widths)
    # still too wide: the widest wrapping columns fold inside words; names stay whole
    # (lists of names last)
    for spare in (set(words), set()):
        folding = [k for k, c in enumerate(cols)
                   if not (str(c.header) in wanted or str(c.header) in spare or c.no_wrap)]
        while slack < 0 and folding:
            k = max(folding, key=lambda j: widths[j])
            if widths[k] <= MIN_FOLD_WIDTH:
                break
            widths[k] -= 1
            slack += 1
    # the spare room goes to the columns that wrap most, one character at a time
    while slack > 0:
        need = [hi - w for w, (_, hi) in zip(widths, ranges)]
        k = max(range(len(cols)), key=lambda j: need[j])
        if need[k] <= 0:
            break
        widths[k] += 1
        slack -= 1
    out = copy.copy(table)
    out.columns = []
    for c, w in zip(cols, widths):
        c = copy.copy(c)
        c.width, c.min_width, c.max_width = w, None, None
        if str(c.header) in wanted or c.no_wrap:
            c.no_wrap = True
        else:
            c.overflow = "fold"  # a word longer than the room folds, never loses letters
        out.columns.append(c)
    return out, dropped


def left_out_note(dropped: Sequence[str], width: int) -> str | None:
    """The line under a table that says which columns did not fit, or None."""
    if not dropped:
        return None
    return (f"left out at {width} columns: {', '.join(dropped)} (a wider terminal or --json "
            "shows them)")
