"""Held-out-by-source figures of the validation corpus, as ``planner validate`` prints them.

Every figure here is read from ``heldout_residuals.yaml`` (written by ``tools/calibrate.py
--write``); :func:`stale_runs` checks that the residuals recorded as shipped are still what
the cost model gives, so a change to the model that moves them fails a test until the fit is
re-run.
"""

from __future__ import annotations

import statistics
from typing import Any, Callable, Iterable

from planner.validation import scaling
from planner.validation.band import heldout_records
from planner.validation.corpus import corpus_runs, gpu_bucket, seq_bucket
from planner.validation.band import heldout_file

#: How validate slices the held-out runs: label -> key of a record.
REGIMES: dict[str, Callable[[dict[str, Any]], str]] = {
    "framework x generation": lambda r: f"{r['generation']} {r['family']}",
    "GPU count": lambda r: gpu_bucket(r["gpus"]),
    "sequence length": lambda r: seq_bucket(r["seq_len"]),
    "precision": lambda r: r["dtype"].upper(),
    "dense / MoE": lambda r: "MoE" if r["moe"] else "dense",
}


def summarize(records: Iterable[dict[str, Any]], key: Callable[[dict[str, Any]], str]
              ) -> list[dict[str, Any]]:
    """Per value of ``key``: runs, sources, MAPE and mean signed error (fractions); in the
    order of the smallest GPU count and sequence length of each value, then its name."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault(key(r), []).append(r)
    out = []
    for k in sorted(groups, key=lambda k: (min(r["gpus"] for r in groups[k]),
                                           min(r["seq_len"] for r in groups[k]), k)
                    if key in (REGIMES["GPU count"], REGIMES["sequence length"]) else (0, 0, k)):
        res = [r["heldout_residual"] for r in groups[k]]
        out.append({"key": k, "runs": len(res), "sources": len({r["source"] for r in groups[k]}),
                    "mape": statistics.mean(abs(x) for x in res),
                    "bias": statistics.mean(res), "max": max(res, key=abs)})
    return out


def residual_slope(records: Iterable[dict[str, Any]]) -> float | None:
    """The held-out residual's slope per tenfold GPUs (planner.validation.scaling), None
    with fewer than two distinct GPU counts."""
    pairs = [(r["gpus"], r["heldout_residual"]) for r in records]
    if len({g for g, _ in pairs}) < 2:
        return None
    return scaling.residual_slope(pairs).slope_per_decade


def heldout_report() -> dict[str, Any]:
    """Everything validate prints about the held-out runs (fractions)."""
    recs = heldout_records()
    return {"runs": len(recs), "sources": len({r["source"] for r in recs}),
            "infeasible": infeasible_runs(),
            "mape": statistics.mean(abs(r["heldout_residual"]) for r in recs),
            "bias": statistics.mean(r["heldout_residual"] for r in recs),
            "slope_per_decade_of_gpus": residual_slope(recs),
            "by": {label: summarize(recs, key) for label, key in REGIMES.items()}}


def stale_runs(tolerance: float = 5e-4) -> list[str]:
    """Corpus runs whose recorded shipped residual differs from the live one (or that the
    file does not list): the fit needs ``python tools/calibrate.py --write`` again."""
    recorded = {r["run"]: r["residual"] for r in heldout_file()}
    out = []
    for run in corpus_runs():
        live = run.residual(run.estimate())
        was = recorded.get(run.name, "missing")
        if was == "missing" or (was is None) != (live is None) or (
                live is not None and abs(was - live) > tolerance):
            out.append(run.name)
    return out


def infeasible_runs() -> list[dict[str, Any]]:
    """Published configurations the model says do not fit (each ran: a finding)."""
    return [{"run": r["run"], "source": r["source"], "why": r["held_out"]}
            for r in heldout_file() if not r.get("feasible", True)]
