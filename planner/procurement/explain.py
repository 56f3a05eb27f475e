"""Why no option meets the limits, and what to relax."""

from __future__ import annotations

import math
from typing import Sequence

from planner.errors import InfeasibleError
from planner.procurement.metrics import Option, fmt
from planner.procurement.option import Answer, Inputs, answer_option


#: Options ruled out by their bounds that an explanation may solve, to report exact values.
EXPLAIN_SOLVES = 8


def explain(opts: Sequence[Option], answers: dict[Option, Answer], limits: dict[str, float],
            max_gpus: int, inner: Inputs) -> InfeasibleError:
    """Why no option meets the limits: for each limit, the least value any option reaches,
    and what to relax. Without an incumbent, branch and bound prunes nothing, so every
    option the bounds let through has been solved, with the least value of each limit; the
    options ruled out by a bound below the best exact value are solved here (up to
    ``EXPLAIN_SOLVES`` of them), so that the figure is exact where it can be."""
    names = {"days": "--days", "cost_usd": "--budget"}
    asked = " and ".join(f"{names[m]} {fmt(m, v)}" for m, v in limits.items())
    reasons: list[str] = []
    hints: list[str] = []
    for m, limit in limits.items():
        known = {o: a.minima[m] for o, a in answers.items() if m in a.minima}
        rest = sorted((o for o in opts if o not in answers), key=lambda o: o.bound(m))
        for o in rest[:EXPLAIN_SOLVES]:
            if known and o.bound(m) >= min(known.values()):
                break
            top = answer_option(inner, o, m, {}, top_only=True).top
            if top is not None:
                known[o] = top.value(m)
        unsolved = [o for o in rest if o not in known]
        best = min(known.items(), key=lambda kv: kv[1], default=None)
        floor = min(unsolved, key=lambda o: o.bound(m), default=None)
        if floor is not None and (best is None or floor.bound(m) < best[1]):
            o, v, exact = floor, floor.bound(m), False
        elif best is not None:
            (o, v), exact = best, True
        else:
            continue
        if v <= limit:
            continue
        word = {"days": "fastest", "cost_usd": "cheapest"}[m]
        reasons.append(f"the {word} option, {o.label()}, needs "
                       f"{'' if exact else 'at least '}{fmt(m, v)} > {fmt(m, limit)}"
                       + ("" if exact else " (a lower bound: the kernels' time with no "
                                       "communication; planner/procurement/bounds.py)"))
        hints.append(f"{names[m]} {math.ceil(v) if m == 'days' else _round_up(v)} or more")
        if m == "days" and 2 * o.num_gpus > max_gpus:
            hints.append(f"a larger cluster: --max-gpus {4 * max_gpus}")
    if not reasons:
        nofit = [a.reason for a in answers.values() if a.top is None]
        if nofit and all(a.top is None for a in answers.values()):
            reasons.append(nofit[-1])
            hints.append("more GPUs (--max-gpus), or GPUs with more memory (--gpus)")
        else:
            reasons.append(f"each limit is met by some option, but no option meets {asked} "
                           "at once")
            hints.append("relax one of the limits")
    return InfeasibleError(f"no option in the catalog meets {asked or 'the request'}",
                           reasons, hints)


def _round_up(usd: float) -> str:
    """Dollars rounded up to three significant digits, e.g. 53,800,000."""
    step = 10 ** max(math.floor(math.log10(usd)) - 2, 0) if usd > 0 else 1
    return f"{math.ceil(usd / step) * step:,.0f}"
