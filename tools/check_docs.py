"""Check that the figures the README and docs quote are what their commands give now.

Each :class:`Figure` names a document, the command its numbers come from, and the exact
text the document must contain, rendered from that command's output. A figure the code
moved and the document did not is reported with the text expected, so the fix is to re-run
the command and copy the figure (or to update this registry when the text itself moved).

    python tools/check_docs.py          # every figure; exit 1 on a stale one
    python tools/check_docs.py --list   # the registry

Every figure here comes from a command of a few seconds (``planner validate``, the held-out
benchmarks), so ``tests/test_check_docs.py`` checks them all on every test run.
"""

from __future__ import annotations

import re
import subprocess
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


SUMMARY = re.compile(r"^(?P<label>[^:\n]+): MAPE (?P<mape>[-+\d.]+)%, mean (?P<mean>[-+\d.]+)%, "
                     r"max (?P<max>[-+\d.]+)%, (?P<runs>\d+) runs$", re.M)


@lru_cache(maxsize=None)
def bench(name: str) -> dict[str, dict[str, float]]:
    """The per-set summary lines (``LABEL: MAPE x%, mean y%, max z%, n runs``) that
    ``python benchmarks/NAME.py`` prints, as fractions."""
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / f"{name}.py")], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return {m["label"]: {k: float(m[k]) / 100 for k in ("mape", "mean", "max")}
            for m in SUMMARY.finditer(out)}


def signed(x: float) -> str:
    return f"{100 * x:+.1f} %".replace("+-", "-")


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


def _heldout_readme() -> str:
    n = bench("bench_heldout_nemo")
    return (f"NeMo 24.12 on H100 (11 runs) {pct(n['H100']['mape'])} MAPE, the NeMo 25.02 B200 "
            f"rows outside the fit {pct(n['B200']['mape'])}, NeMo 25.04 on GB200 (no GB200 "
            f"fit) {pct(n['GB200']['mape'])}")


def _heldout_row(gen: str, label: str, runs: int) -> Callable[[], str]:
    def text() -> str:
        r = bench("bench_heldout_nemo")[gen]
        return f"| {label} | {runs} | {pct(r['mape'])} | {signed(r['mean'])} | {signed(r['max'])}"
    return text


def _titan(doc: str) -> Callable[[], str]:
    def text() -> str:
        m = pct(bench("bench_heldout_torchtitan")["A100 FSDP2, eager elementwise"]["mape"])
        return (f"torchtitan's FSDP2 A100 runs {m}" if doc == "README.md" else
                f"| torchtitan FSDP2, 64 A100, bf16 (eager kernels) | 5 | {m} |")
    return text


#: bench_heldout_mosaicml's sets: its label, docs/validation.md's row label.
MOSAICML = (("A100 no recompute", "A100, 4 runs without recomputation (1B-13B, 2K context)"),
            ("A100 full recompute", "A100, 4 runs with full recomputation (7B 8K, 13B 4K, "
             "30B, 70B on 64 GPUs)"),
            ("H100 no recompute", "H100 BF16, 3 runs without recomputation (7B, 13B on 8 "
             "and 64 GPUs)"),
            ("H100 full recompute", "H100 BF16, 5 runs with full recomputation (7B 4K, 13B "
             "4K, 30B on 8 and 32, 70B on 64)"))


def _mosaicml_row(label: str, row: str) -> Callable[[], str]:
    def text() -> str:
        r = bench("bench_heldout_mosaicml")[label]
        return f"| {row} | {pct(r['mape'])} | {signed(r['mean'])} | {signed(r['max'])} |"
    return text


def _mosaicml(doc: str) -> Callable[[], str]:
    def text() -> str:
        b = bench("bench_heldout_mosaicml")
        a, n = b["A100 no recompute"], pct(b["all"]["mape"])
        if doc == "README.md":
            return (f"the 16 runs come out within {n} MAPE (A100 without recomputation "
                    f"{signed(a['mean'])}, max {signed(a['max'])}")
        return (f"| MosaicML llm-foundry FSDP, 8-64 A100/H100, bf16 (used for one binary "
                f"choice) | 16 | {n} |")
    return text


GENERATIONS = ("A100", "H100", "B200", "H100 torchtitan")
FIGURES: tuple[Figure, ...] = (
    *(Figure("README.md", "planner validate", _readme_row(g)) for g in GENERATIONS),
    *(Figure("docs/validation.md", "planner validate", _validation_row(g))
      for g in GENERATIONS),
    Figure("README.md", "planner validate", _serving),
    Figure("README.md", "python benchmarks/bench_heldout_nemo.py", _heldout_readme),
    Figure("docs/validation.md", "python benchmarks/bench_heldout_nemo.py",
           _heldout_row("H100", "H100, NeMo 24.12", 11)),
    Figure("docs/validation.md", "python benchmarks/bench_heldout_nemo.py",
           _heldout_row("B200", "B200, NeMo 25.02 (rows not in the fit)", 2)),
    Figure("docs/validation.md", "python benchmarks/bench_heldout_nemo.py",
           _heldout_row("GB200", "GB200, NeMo 25.04", 8)),
    *(Figure(doc, "python benchmarks/bench_heldout_torchtitan.py", _titan(doc))
      for doc in ("README.md", "docs/validation.md")),
    *(Figure("docs/validation.md", "python benchmarks/bench_heldout_mosaicml.py",
             _mosaicml_row(label, row)) for label, row in MOSAICML),
    Figure("docs/validation.md", "python benchmarks/bench_heldout_mosaicml.py",
           lambda: f"All 16 runs: {pct(bench('bench_heldout_mosaicml')['all']['mape'])} MAPE."),
    *(Figure(doc, "python benchmarks/bench_heldout_mosaicml.py", _mosaicml(doc))
      for doc in ("README.md", "docs/validation.md")),
)


def stale(root: Path = ROOT, figures: tuple[Figure, ...] = FIGURES) -> list[str]:
    """One line per figure whose text the document under ``root`` does not hold."""
    out = []
    for f in figures:
        want = f.text()
        # line breaks and indentation in prose are the document's, not the figure's
        if " ".join(want.split()) not in " ".join((root / f.doc).read_text(
                encoding="utf-8").split()):
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
