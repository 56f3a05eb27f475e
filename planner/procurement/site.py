"""Site limits: facility power, racks and network ports of an option, which options a site
can hold, and, when none that the site holds meets the limits, which site limit binds and
what it would take (docs/procure.md, "Site limits").

All three figures depend on the cluster and its GPU count, never on the plan: an option over a
site limit is left out before any solve, and the least value an answer needs is the least
figure among the options left out that meet every other limit.
"""

from __future__ import annotations

import math
from typing import Sequence

from planner.costmodel.energy import facility_power_w
from planner.errors import InfeasibleError, InputError
from planner.procurement.metrics import Option, meets
from planner.procurement.option import Inputs, answer_option
from planner.specs.cluster import ClusterSpec
from planner.procurement.metrics import fmt

#: A site limit's option flag.
FLAGS = {"facility_power_mw": "--max-power-mw", "racks": "--max-racks",
         "ports": "--max-ports"}
#: The cluster field a count limit needs, and what its absence means.
FIELDS = {"racks": ("gpus_per_rack", "no published rack layout"),
          "ports": ("scale_out_ports_per_gpu", "no stated NICs per GPU")}


def racks(cluster: ClusterSpec) -> int | None:
    """Racks that hold the cluster's GPUs at its ``gpus_per_rack`` (whole nodes per rack),
    or None where it gives no rack figure."""
    if cluster.gpus_per_rack is None:
        return None
    return math.ceil(cluster.num_gpus / cluster.gpus_per_rack)


def ports(cluster: ClusterSpec) -> int | None:
    """Compute-fabric switch ports the cluster's GPUs take: one per scale-out NIC port
    (``scale_out_ports_per_gpu`` per GPU), or None where the cluster does not say."""
    if cluster.scale_out_ports_per_gpu is None:
        return None
    return cluster.num_gpus * cluster.scale_out_ports_per_gpu


def site_figures(cluster: ClusterSpec) -> dict[str, float | None]:
    """``facility_power_mw`` (peak, PUE included), ``racks`` and ``ports`` (None: the
    cluster gives no figure)."""
    return {"facility_power_mw": facility_power_w(cluster, cluster.num_gpus) / 1e6,
            "racks": racks(cluster), "ports": ports(cluster)}


def fmt_site(metric: str, v: float) -> str:
    """``23.4 MW`` (three significant digits below 100 MW), ``12 racks``, ``512 ports``."""
    if metric != "facility_power_mw":
        return f"{v:,.0f} {metric}"
    return f"{v:,.0f} MW" if v >= 100 else f"{v:.3g} MW"


def check_figures(opts: Sequence[Option], site: dict[str, float]) -> None:
    """A rack or port limit needs every option's figure: an InputError naming the first
    cluster without one."""
    for m, (field, why) in FIELDS.items():
        if m not in site:
            continue
        for o in opts:
            if o.site is None or o.site[m] is None:
                raise InputError(f"{FLAGS[m]} {site[m]:.0f}: cluster '{o.template}' has no "
                                 f"{field} ({why} in the catalog); leave it out (--gpus, "
                                 f"--cluster) or give a cluster file with {field}")


def within(o: Option, site: dict[str, float], skip: str | None = None) -> bool:
    """Whether the site holds ``o`` (every limit but ``skip``)."""
    assert o.site is not None
    return all(o.site[m] is not None and o.site[m] <= v  # type: ignore[operator]
               for m, v in site.items() if m != skip)


def binding(opts: Sequence[Option], site: dict[str, float], limits: dict[str, float],
            metric: str, inner: Inputs, max_solves: int = 16) -> InfeasibleError | None:
    """Why nothing the site holds meets ``limits``, when a site limit is what binds: for
    each site limit, the least figure of an option left out by that limit alone that meets
    every other limit (options in increasing order of the figure, each answered by the
    inner solve; at most ``max_solves`` solves per limit). None when no such option is
    found (then a limit of the query binds, not the site)."""
    reasons: list[str] = []
    hints: list[str] = []
    for m, cap in site.items():
        out = sorted((o for o in opts if not within(o, {m: cap}) and within(o, site, skip=m)),
                     key=lambda o: (o.site[m], o.bound(metric)))  # type: ignore[index]
        solves = 0
        for o in out:
            if not meets({k: o.bound(k) for k in limits}, limits):
                continue  # its bounds break a limit: it cannot answer
            if solves == max_solves:
                break
            solves += 1
            ans = answer_option(inner, o, metric, limits)
            if ans.best is None:
                continue
            need = o.site[m]
            assert need is not None
            asked = _asked(limits)
            reasons.append(f"the option with the least {_noun(m)} that {asked}, {o.label()}, "
                           f"needs {fmt_site(m, need)}; the site has {cap:g}"
                           f"{' MW' if m == 'facility_power_mw' else ''} ({FLAGS[m]})")
            hints.append(f"{FLAGS[m]} {round_up(need, m)} or more")
            break
    if not reasons:
        return None
    return InfeasibleError("no option the site holds meets the request", reasons, hints)


def _noun(metric: str) -> str:
    return "facility power" if metric == "facility_power_mw" else metric


def _asked(limits: dict[str, float]) -> str:
    if not limits:
        return "trains the model"
    return "meets " + " and ".join(fmt(m, v) for m, v in limits.items())


def round_up(v: float, metric: str) -> str:
    """A limit that admits ``v``: counts whole, megawatts up to three significant digits."""
    if metric != "facility_power_mw":
        return f"{math.ceil(v):.0f}"
    step = 10.0 ** (math.floor(math.log10(v)) - 2)  # three significant digits, up
    return f"{math.ceil(v / step - 1e-9) * step:.6g}"
