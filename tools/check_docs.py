"""Check that the figures the README and docs quote are what their commands give now.

Each :class:`Figure` names a document, the command its numbers come from, and the exact
text the document must contain, rendered from that command's output. A figure the code
moved and the document did not is reported with the text expected, so the fix is to re-run
the command and copy the figure (or to update this registry when the text itself moved).

    python tools/check_docs.py          # every figure; exit 1 on a stale one
    python tools/check_docs.py --list   # the registry

The calibration figures (``planner validate``, a few seconds) are checked by
``tests/test_check_docs.py`` on every test run.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]


def pct(x: float) -> str:
    """A fraction as the docs print it: one decimal, a space before the sign."""
    return f"{100 * x:.1f} %"


@lru_cache(maxsize=1)
def validate() -> dict:
    """What ``planner validate --json`` prints, as values."""
    from planner.validation import run_recipes, run_validation
    from planner.validation.fit import fit_summary
    from planner.validation.serving import run_serving
    from planner.validation.torchtitan import run_torchtitan

    rep, nemo, titan = run_validation(), run_recipes(), run_torchtitan()
    serving = run_serving().to_json()
    live = {"A100": (rep.mape, rep.max_error),
            **{g: (nemo.mape(g), nemo.max_error(g)) for g in nemo.by_generation()},
            **{f"{g} torchtitan": (titan.mape(g), titan.max_error(g))
               for g in titan.by_generation()}}
    return {"live": live, "fit": fit_summary(), "memory_max": rep.memory_max_error,
            "serving": serving["mape"]}


@dataclass(frozen=True)
class Figure:
    doc: str  # path under the repository
    command: str  # what produces the numbers
    text: Callable[[], str]  # the exact text the document must hold


def _readme_row(gen: str) -> Callable[[], str]:
    def text() -> str:
        v = validate()
        mape, worst = v["live"][gen]
        memory = f"; memory within {pct(v['memory_max'])}" if gen == "A100" else ""
        return (f"| {pct(mape)} ({pct(worst)}){memory} | "
                f"{pct(v['fit'][gen]['leave_one_out_mape'])} |")
    return text


def _validation_row(gen: str) -> Callable[[], str]:
    def text() -> str:
        v = validate()
        mape, worst = v["live"][gen]
        f = v["fit"][gen]
        return (f"| {pct(mape)} | {pct(worst)} | {pct(f['leave_one_out_mape'])} "
                f"({pct(f['leave_one_out_max'])}) |")
    return text


def _serving() -> str:
    m = validate()["serving"]
    return (f"MAPE {pct(m['output_tokens_per_s_per_gpu'])} on output\n"
            f"tokens/s/GPU and {pct(m['first_token_latency_ms'])} on TTFT")


GENERATIONS = ("A100", "H100", "B200", "H100 torchtitan")
FIGURES: tuple[Figure, ...] = (
    *(Figure("README.md", "planner validate", _readme_row(g)) for g in GENERATIONS),
    *(Figure("docs/validation.md", "planner validate", _validation_row(g))
      for g in GENERATIONS),
    Figure("README.md", "planner validate", _serving),
)


def stale(root: Path = ROOT, figures: tuple[Figure, ...] = FIGURES) -> list[str]:
    """One line per figure whose text the document under ``root`` does not hold."""
    out = []
    for f in figures:
        want = f.text()
        if want not in (root / f.doc).read_text(encoding="utf-8"):
            out.append(f"{f.doc}: expected {want!r} (from `{f.command}`); re-run it and copy "
                       "the figure")
    return out


def main(argv: list[str]) -> int:
    if "--list" in argv:
        for f in FIGURES:
            print(f"{f.doc}: `{f.command}`: {f.text()!r}")
        return 0
    bad = stale()
    print("\n".join(bad) or f"{len(FIGURES)} figures match their commands")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
