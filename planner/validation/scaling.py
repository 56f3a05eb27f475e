"""Does the model's error depend on the GPU count?

A prediction that holds beyond its calibration has a residual with no trend in the job
size. :func:`residual_slope` fits ``error = a + b log10(GPUs)`` by ordinary least squares
over ``(gpus, error)`` pairs: ``b`` is the change of the error per tenfold more GPUs (in
the error's own units: a fraction, or percentage points). A model that grows more
optimistic with scale has ``b < 0`` when the error is ``predicted / measured - 1``.

    python -m planner.validation.scaling 256:-0.22 512:-0.26 768:-0.32 1024:-0.35
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Iterable, Sequence

from planner.errors import InputError


@dataclass(frozen=True)
class ResidualSlope:
    """Least-squares line of the error over log10(GPUs)."""

    slope_per_decade: float  # change of the error per tenfold more GPUs
    intercept: float  # the error the line gives at one GPU (log10 = 0)
    points: int
    r2: float  # share of the error's variance the line explains (1.0 when it has none)

    def at(self, gpus: float) -> float:
        """The line's error at ``gpus``."""
        return self.intercept + self.slope_per_decade * math.log10(gpus)


def residual_slope(pairs: Iterable[Sequence[float]]) -> ResidualSlope:
    """Slope of the error against log10(GPUs) over ``(gpus, error)`` pairs (ordinary least
    squares). Needs at least two distinct GPU counts, each positive, and finite errors."""
    pts = []
    for i, pair in enumerate(pairs):
        if len(pair) != 2:
            raise InputError(f"pair {i}: expected (gpus, error), got {pair!r}")
        gpus, err = float(pair[0]), float(pair[1])
        if not (math.isfinite(gpus) and gpus > 0):
            raise InputError(f"pair {i}: gpus must be a positive number, got {pair[0]!r}")
        if not math.isfinite(err):
            raise InputError(f"pair {i}: error must be a finite number, got {pair[1]!r}")
        pts.append((math.log10(gpus), err))
    if len({x for x, _ in pts}) < 2:
        raise InputError(f"residual_slope needs at least two distinct GPU counts, got "
                         f"{len(pts)} pair(s) with {len({x for x, _ in pts})} count(s)")
    n = len(pts)
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    sxy = sum((x - mx) * (y - my) for x, y in pts)
    syy = sum((y - my) ** 2 for _, y in pts)
    b = sxy / sxx
    r2 = 1.0 if syy == 0 else (sxy * sxy) / (sxx * syy)
    return ResidualSlope(b, my - b * mx, n, r2)


def _parse(args: list[str]) -> list[tuple[float, float]]:
    out = []
    for a in args:
        gpus, sep, err = a.partition(":")
        if not sep:
            raise InputError(f"'{a}': expected GPUS:ERROR, e.g. 256:-0.22")
        try:
            out.append((float(gpus), float(err)))
        except ValueError:
            raise InputError(f"'{a}': GPUS and ERROR must be numbers, e.g. 256:-0.22") from None
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print(__doc__.strip().splitlines()[-1].strip())
        return 2
    try:
        fit = residual_slope(_parse(args))
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{fit.points} points: error = {fit.intercept:+.4g} {fit.slope_per_decade:+.4g} "
          f"x log10(GPUs) (R^2 {fit.r2:.2f})")
    return 0


if __name__ == "__main__":  # pragma: no cover - exercised through main()
    raise SystemExit(main())
