"""Parsing of sizes and bandwidths written with units (``1GiB``, ``512MB``, ``400Gbps``).

Decimal prefixes (kB, MB, GB, TB) are powers of 10 and binary ones (KiB, MiB, GiB, TiB)
powers of 2, as in IEC 80000-13. Bandwidths are returned in GB/s (10^9 bytes per
second), the unit of every ``*_GBps`` field.
"""

from __future__ import annotations

import math
import re

from planner.errors import InputError

_SIZE_UNITS = {
    "": 1, "b": 1, "byte": 1, "bytes": 1,
    "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}

#: Bandwidth units in GB/s (10^9 B/s). ``GiB/s`` is the unit ASTRA-sim writes as "GB/s"
#: (its analytical backend converts 1 GB/s = 2^30 B / 10^9 ns; ASTRA-sim 2.0, Won et al. 2023).
_BW_UNITS = {
    "gbyte/s": 1.0, "gib/s": 2**30 / 1e9, "gibps": 2**30 / 1e9, "mb/s": 1e-3, "tb/s": 1e3,
    "gbit/s": 1 / 8, "tbit/s": 1e3 / 8,
}
#: Case decides bits or bytes in these: ``Gbps``/``Gb/s`` are gigabits (the network
#: convention), ``GBps``/``GB/s`` gigabytes (the ``*_GBps`` fields).
_BW_CASED = {"GBps": 1.0, "GB/s": 1.0, "Gbps": 1 / 8, "Gb/s": 1 / 8, "Tbps": 1e3 / 8,
             "TBps": 1e3, "TB/s": 1e3}

_NUM = r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*"


def parse_size_bytes(text: str | float | int, what: str = "size") -> float:
    """``1GiB`` -> 1073741824.0, ``512MB`` -> 5.12e8, ``4096`` -> 4096.0."""
    if isinstance(text, (int, float)):
        value, unit = float(text), ""
    else:
        m = re.fullmatch(_NUM + r"([A-Za-z]*)\s*", str(text))
        if not m:
            raise InputError(f"{what}: cannot read '{text}'; expected a number with an optional "
                             "unit, e.g. 1GiB, 512MB, 64KiB or 4096 (bytes)")
        value, unit = float(m.group(1)), m.group(2)
    factor = _SIZE_UNITS.get(unit.lower())
    if factor is None:
        raise InputError(f"{what}: unknown unit '{unit}' in '{text}'; use B, kB, MB, GB, TB "
                         "(powers of 10) or KiB, MiB, GiB, TiB (powers of 2)")
    if not math.isfinite(value * factor) or value <= 0:
        raise InputError(f"{what}: must be a positive finite number, got '{text}'")
    return value * factor


def parse_bandwidth_GBps(text: str | float | int, what: str = "bandwidth",
                         default_unit: str = "GB/s") -> float:
    """``400`` -> 400 GB/s (in ``default_unit``), ``1000GiB/s`` -> 1073.74, ``400Gbit/s`` -> 50."""
    if isinstance(text, (int, float)):
        value, unit = float(text), ""
    else:
        m = re.fullmatch(_NUM + r"([A-Za-z/\-]*)\s*", str(text))
        if not m:
            raise InputError(f"{what}: cannot read '{text}'; expected a number with an optional "
                             "unit, e.g. 50, 50GB/s, 1000GiB/s or 400Gbit/s")
        value, unit = float(m.group(1)), m.group(2)
    unit = unit or default_unit
    factor = _BW_CASED.get(unit, _BW_UNITS.get(unit.lower()))
    if factor is None:
        raise InputError(f"{what}: unknown unit '{unit}' in '{text}'; use GB/s, GiB/s, "
                         "TB/s, Gbit/s or Gbps (bits)")
    if not math.isfinite(value * factor) or value <= 0:
        raise InputError(f"{what}: must be a positive finite number, got '{text}'")
    return value * factor
