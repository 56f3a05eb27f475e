"""Queueing of requests at a replica: M/D/1 waiting time, its mean and its tail.

Requests arrive as a Poisson stream (rate ``lam``); a server takes a deterministic
``service_s`` per request (a prompt's prefill is a fixed amount of work for a fixed prompt
length). The mean wait is the Pollaczek-Khinchine formula with zero service variance,
``W = rho s / (2 (1 - rho))`` (Kleinrock 1975, Queueing Systems Vol. 1, Sec. 5.6). The tail
is the Cramer-Lundberg exponential: ``P(W > t) ~ rho exp(-theta t)`` with ``theta`` the
positive root of ``lam (exp(theta s) - 1) = theta`` (Asmussen 2003, Applied Probability and
Queues, Ch. XIII.5; the constant is taken as ``P(W > 0) = rho``). docs/serving.md says where
it stops holding (bursty arrivals, load balancing across replicas, rho near 1).
"""

from __future__ import annotations

import math
from functools import lru_cache


def _decay(rho: float) -> float:
    """``x = theta s``: the positive root of ``f(x) = rho (e^x - 1) - x`` for 0 < rho < 1,
    by Newton's method from the right of the root, where the convex ``f`` is positive
    and increasing, so that the iterates fall monotonically onto it. The start: at
    ``2 (1 - rho) / rho`` the Taylor terms alone make ``f`` non-negative; at
    ``2 ln(2 / rho) + 1`` ``f`` is positive too (kept finite for small rho)."""
    x = min(2.0 * (1.0 - rho) / rho, 2.0 * math.log(2.0 / rho) + 1.0)
    for _ in range(200):
        e = math.exp(x)
        slope = rho * e - 1.0
        if slope <= 0:  # rho within rounding of 1: x is already the (tiny) root
            break
        step = (rho * (e - 1.0) - x) / slope
        if step <= 1e-15 * x:
            break
        x -= step
    return x


def md1_wait_s(rho: float, service_s: float, quantile: float | None = None) -> float:
    """Waiting time before service at utilization ``rho`` and service ``service_s``: the
    mean (``quantile`` None) or the ``quantile`` (e.g. 0.99). Infinite at rho >= 1."""
    if rho <= 0 or service_s <= 0:
        return 0.0
    if rho >= 1:
        return math.inf
    if quantile is None:
        return rho * service_s / (2.0 * (1.0 - rho))
    tail = 1.0 - quantile
    if rho <= tail:
        return 0.0
    return math.log(rho / tail) / (_decay(rho) / service_s)


@lru_cache(maxsize=64)
def normal_quantile(quantile: float) -> float:
    """z with Phi(z) = quantile, by bisection on the error function (to 1e-12)."""
    lo, hi = -10.0, 10.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < quantile:
            lo = mid
        else:
            hi = mid
    return hi


def busy_arrivals_quantile(lam: float, work_s: float, service_s: float,
                           quantile: float) -> float:
    """The ``quantile`` of the number of arrivals that land in a window of ``work_s``
    seconds of other work when each one lengthens the window by its own ``service_s``
    (Poisson arrivals at ``lam``): the customers served in an M/D/1 busy period started
    by ``work_s`` of work. Each of the ``a = lam work_s`` (Poisson) arrivals in the bare
    window brings the arrivals in its own service, and theirs: a Borel(``rho``) cluster
    (``rho = lam service_s``; Takacs 1962, Introduction to the Theory of Queues, Ch. 2),
    so the count is compound Poisson with cumulants ``a E[T^k]``: mean ``a / (1 - rho)``,
    variance ``a / (1 - rho)^3``, third ``a (1 + 2 rho) / (1 - rho)^5``. The quantile is
    their Cornish-Fisher expansion ``m + (z + (z^2 - 1) g / 6) sd`` (``g`` the skewness):
    within 4 % of the exact count at the P99 for ``a >= 10`` and ``rho <= 0.8``, and
    above it where it is off (+9 % at ``a = 5``, more with fewer; docs/serving.md). A
    Poisson quantile at the mean leaves the lengthening out: its spread is short by a
    factor ``(1 - rho)``."""
    rho = lam * service_s
    a = lam * work_s
    if a <= 0:
        return 0.0
    if rho >= 1:
        return math.inf
    free = 1.0 - rho
    mean, var = a / free, a / free**3
    skew = a * (1.0 + 2.0 * rho) / free**5 / var**1.5
    z = normal_quantile(quantile)
    return max(0.0, mean + (z + (z * z - 1.0) * skew / 6.0) * math.sqrt(var))


def mdc_wait_s(lam: float, service_s: float, servers: int,
               quantile: float | None = None) -> float:
    """Wait for one of ``servers`` slots held ``service_s`` each (M/D/c), the mean or the
    ``quantile``. The chance of waiting is the Halfin-Whitt approximation of Erlang C,
    ``[1 + beta Phi(beta) / phi(beta)]^-1`` with ``beta = (c - a) / sqrt(a)``, ``a = lam s``
    (Halfin and Whitt 1981; M/M/c, an upper bound for deterministic service); the wait,
    once waiting, is exponential at rate ``2 (c - a) / s``: the M/M/c rate ``c mu - lam``
    doubled for zero service variance (Kingman's heavy-traffic factor ``2 / (1 + c_s^2)``).
    Infinite at ``a >= c``."""
    a = lam * service_s
    if a <= 0 or service_s <= 0:
        return 0.0
    if a >= servers:
        return math.inf
    beta = float((servers - a) / math.sqrt(a))
    cdf = 0.5 * (1 + math.erf(beta / math.sqrt(2)))
    # beta Phi / phi in logs: phi(beta) underflows long before the ratio is out of range
    log_ratio = math.log(beta * cdf) + 0.5 * beta * beta + 0.5 * math.log(2 * math.pi)
    wait_p = 0.0 if log_ratio > 700.0 else 1.0 / (1.0 + math.exp(log_ratio))
    rate = 2.0 * (servers - a) / service_s
    if quantile is None:
        return wait_p / rate
    tail = 1.0 - quantile
    return 0.0 if wait_p <= tail else math.log(wait_p / tail) / rate
