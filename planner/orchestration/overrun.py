"""Time limits, said honestly: when a command runs more than 10 % past its ``--time-limit``
the answer says by how much and why (the same JSON fields and stderr line for every command:
``time_limit_overrun_s``, ``overrun_note``, ``planner: ran X s past --time-limit L (why)``).

Work that has started (building a model, evaluating the answer) runs to its end; what can be
bounded is bounded by the limit where it runs, and this reports the rest."""

from __future__ import annotations

from typing import Any

#: Share past the limit that is not reported (the solvers stop at their own limits to within
#: a few tenths of a second; the answer then needs decoding and evaluating).
TOLERANCE = 0.10


def overrun_s(elapsed_s: float, time_limit_s: float | None) -> float | None:
    """Seconds past ``time_limit_s`` when more than :data:`TOLERANCE` past it, else None."""
    if time_limit_s is None or elapsed_s <= (1 + TOLERANCE) * time_limit_s:
        return None
    return elapsed_s - time_limit_s


def overrun_fields(elapsed_s: float, time_limit_s: float | None, why: str) -> dict[str, Any]:
    """``time_limit_overrun_s`` and ``overrun_note`` for a JSON answer, or nothing."""
    over = overrun_s(elapsed_s, time_limit_s)
    return {} if over is None else {"time_limit_overrun_s": over, "overrun_note": why}


def overrun_line(fields: dict[str, Any], time_limit_s: float, option: str = "--time-limit"
                 ) -> str | None:
    """The stderr line for :func:`overrun_fields`' answer, or None."""
    if "time_limit_overrun_s" not in fields:
        return None
    return (f"planner: ran {fields['time_limit_overrun_s']:.2f} s past {option} "
            f"{time_limit_s:g} ({fields['overrun_note']})")
