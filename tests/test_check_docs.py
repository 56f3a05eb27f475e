"""tools/check_docs.py: the figures the README and docs quote (calibration, held-out
benchmarks, the framework and launch examples) are what their commands give now, and a
stale one is caught."""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("check_docs", ROOT / "tools" / "check_docs.py")
check_docs = importlib.util.module_from_spec(spec)
sys.modules["check_docs"] = check_docs  # dataclasses look their module up by name
spec.loader.exec_module(check_docs)


@pytest.mark.slow(reason="runs planner validate over the whole corpus")
def test_quoted_calibration_figures_match_planner_validate():
    assert check_docs.stale() == []


def test_a_stale_figure_fails_naming_the_document_and_the_text(tmp_path):
    for doc in {f.doc for f in check_docs.FIGURES}:
        (tmp_path / doc).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / doc, tmp_path / doc)
    row = check_docs.FIGURES[1]  # README, H100
    want = row.text()
    readme = tmp_path / "README.md"
    readme.write_text(readme.read_text().replace(want, want.replace(" %", "0 %", 1)))
    # the figure and one beside it in the same document (the whole registry is the slow tier's)
    other = next(f for f in check_docs.FIGURES if f.doc == "README.md" and f is not row
                 and not f.block)
    bad = check_docs.stale(tmp_path, (row, other))
    assert len(bad) == 1 and bad[0].startswith("README.md: expected") and want in bad[0]


@pytest.mark.slow(reason="renders every registered figure (planner validate, solves, benchmarks)")
def test_every_figure_fails_when_its_document_is_stale(tmp_path):
    """Each registered figure, made stale in a copy of its document (the first digit of
    its text there changed), is reported, naming that document, and no other figure is."""
    docs = {f.doc for f in check_docs.FIGURES}
    for doc in docs:
        (tmp_path / doc).parent.mkdir(parents=True, exist_ok=True)
    fresh = set(check_docs.stale())  # figures stale in the tree already are not this test's
    for i, fig in enumerate(check_docs.FIGURES):
        for doc in docs:
            shutil.copy(ROOT / doc, tmp_path / doc)
        path = tmp_path / fig.doc
        text = path.read_text()
        # the figure as the document holds it, prose line breaks included
        # (a quote marker inside it blanked: markup, not its text)
        found = re.search(r"\s+".join(map(re.escape, fig.text().split())),
                          check_docs.QUOTE.sub(lambda m: " " * len(m[0]), text))
        if found is None:
            continue  # stale in the tree already (in `fresh`)
        at = found.start() + next(j for j, ch in enumerate(found[0]) if ch.isdigit())
        path.write_text(text[:at] + str((int(text[at]) + 1) % 10) + text[at + 1:])
        bad = set(check_docs.stale(tmp_path)) - fresh
        assert len(bad) == 1 and next(iter(bad)).startswith(f"{fig.doc}: expected"), (i, bad)


#: README sections whose every measured figure (a decimal number, versions aside) comes
#: from a command the registry re-runs: the launch example and the framework examples
CHECKED_SECTIONS = ("## From plan to launch", "## Frameworks")


@pytest.mark.slow(reason="renders every registered figure")
def test_every_figure_of_the_launch_and_framework_sections_is_registered(tmp_path):
    """Each decimal figure of those README sections, changed in a copy, is reported stale:
    none of them is quoted without a registered command behind it."""
    docs = {f.doc for f in check_docs.FIGURES}
    for doc in docs:
        (tmp_path / doc).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / doc, tmp_path / doc)
    fresh = set(check_docs.stale())
    readme = (ROOT / "README.md").read_text()
    spans = []
    for heading in CHECKED_SECTIONS:
        start = readme.index(f"\n{heading}\n")
        end = readme.index("\n## ", start + 1)
        spans += [(start + m.start(), start + m.end())
                  for m in re.finditer(r"(?<![\w.])\d+\.\d+(?![\w.])", readme[start:end])]
    assert spans  # the sections still quote figures
    for a, b in spans:
        (tmp_path / "README.md").write_text(
            readme[:a] + str((int(readme[a]) + 1) % 10) + readme[a + 1:])
        bad = set(check_docs.stale(tmp_path)) - fresh
        assert bad and all(x.startswith("README.md: expected") for x in bad), readme[a:b]


# Every figure accounted for (issue 37, item 6): tools/check_docs.py --unregistered


def _doc(tmp_path, text, figures=()):
    """The loose figures, counts and stale markers of a one-document tree holding ``text``."""
    (tmp_path / "README.md").write_text(text)
    return check_docs.unregistered(tmp_path, tuple(figures))


def test_a_figure_in_prose_is_listed_and_code_blocks_and_comments_are_not(tmp_path):
    loose, counts, bad = _doc(tmp_path, "A step takes 7.39 s and 54.0 % MFU.\n\n"
                              "```\nplanner solve  # 9.99 s\n```\n\n"
                              "Run `--time-limit 30 s`. <!-- 12 % -->\n"
                              "<!-- check_docs: t -->\n| a | 3.3 % |\n<!-- /check_docs -->\n"
                              "[a link](https://x.org/5%)\n")
    assert [(x.line, x.figure) for x in loose] == [(1, "7.39 s"), (1, "54.0 %")]
    assert counts["README.md"]["other"] == 4 and bad == []  # the link's 5% is no figure


def test_non_figures_are_not_listed(tmp_path):
    """A version, a year, a section, a count, a product's capacity: not figures."""
    loose, _, _ = _doc(tmp_path, "NeMo 24.12 (2024, Sec. 3.3) on 8x H100 and A100 80GB, "
                                 "v0.6.1, 512 GPUs, a 4,608 x 12,288 GEMM, 10^6 x faster.\n")
    assert loose == []


def test_a_quote_marker_covers_its_block_only(tmp_path):
    loose, counts, bad = _doc(tmp_path, "MAD-Max measures 1.68x. <!-- quote: Hsia et al. 2024, "
                              "Sec. VI -->\nStill the same paragraph: 2.5 %.\n\nNext one: 3 %.\n"
                              "<!-- quote: vendor sheet -->\n| GPU | 80 GB |\n| B200 | 192 GB |\n"
                              "- item 4 %\n- item 5 % <!-- quote: a paper -->\n")
    assert [x.figure for x in loose] == ["3 %", "4 %"]
    assert counts["README.md"]["quoted"] == 5 and bad == []


def test_a_listing_quote_marker_covers_the_figures_it_names_and_a_stale_one_is_reported(
        tmp_path):
    loose, _, bad = _doc(tmp_path, "Paper: 38-43 % MFU; the model: 40.0 %. "
                         "<!-- quote 38-43 % | 12 s: Llama 3 paper, Sec. 3.3 -->\n")
    assert [x.figure for x in loose] == ["40.0 %"]
    assert len(bad) == 1 and "'12 s'" in bad[0] and bad[0].startswith("README.md:1:")
    _, _, bad = _doc(tmp_path, "A 2 % figure. <!-- quote:  -->\n")
    assert bad and "no source" in bad[0]


def test_a_column_quote_marker_covers_that_column_of_its_table(tmp_path):
    loose, counts, _ = _doc(tmp_path, "<!-- quote column paper: RAMP, arXiv 2211.15226 -->\n"
                            "| claim | paper (measured) | ours |\n|---|---|---|\n"
                            "| speed-up | 171x | 17.3x |\n| time | 2.5 s | 3.1 s |\n\n"
                            "| claim | paper | ours |\n|---|---|---|\n| x | 7 % | 8 % |\n")
    assert [x.figure for x in loose] == ["17.3x", "3.1 s", "7 %", "8 %"]
    assert counts["README.md"]["quoted"] == 2


def test_a_registered_figure_accounts_for_its_numbers(tmp_path):
    fig = check_docs.Figure("README.md", "echo", lambda: "7.39 s/iteration, MFU 54.0 %")
    loose, counts, _ = _doc(tmp_path, "The plan: 7.39 s/iteration,\nMFU 54.0 %; and 3 s.\n",
                            [fig])
    assert [x.figure for x in loose] == ["3 s"] and counts["README.md"]["registered"] == 2
    # the same text, stale (the command now gives another number): its figures are loose
    moved = check_docs.Figure("README.md", "echo", lambda: "7.40 s/iteration, MFU 54.0 %")
    loose, _, _ = _doc(tmp_path, "The plan: 7.39 s/iteration,\nMFU 54.0 %; and 3 s.\n", [moved])
    assert [x.figure for x in loose] == ["7.39 s", "54.0 %", "3 s"]


def test_the_ratchet_reports_a_new_figure_and_a_gone_entry_not_a_moved_number(tmp_path):
    loose, _, _ = _doc(tmp_path, "A step of 7.39 s.\n\nA cap of 20 MW.\n")
    base = [x.key for x in loose]
    moved, _, _ = _doc(tmp_path, "A step of 7.41 s.\n\nA cap of 20 MW.\n")
    assert check_docs.ratchet(moved, base) == ([], [])
    grown, _, _ = _doc(tmp_path, "A step of 7.39 s, then 3 %.\n\nA cap of 20 MW.\n")
    new, gone = check_docs.ratchet(grown, base)
    assert [x.figure for x in new] == ["7.39 s", "3 %"] and gone == [base[0]]
    path = tmp_path / "baseline.txt"
    check_docs.write_baseline(loose, path)
    assert check_docs.read_baseline(path) == base


@pytest.mark.slow(reason="renders every registered figure (planner validate, solves)")
def test_no_figure_is_left_unaccounted_beyond_the_baseline():
    """The ratchet: every figure with a unit in README.md and docs/ is registered, quoted or
    in tools/docs_unregistered.txt, and every entry there is still in the documents (remove
    one with ``python tools/check_docs.py --unregistered --write-baseline`` once its figure
    is registered or quoted)."""
    loose, counts, bad = check_docs.unregistered()
    new, gone = check_docs.ratchet(loose, check_docs.read_baseline())
    assert bad == []
    assert new == [], "\n".join(f"{x.doc}:{x.line}: {x.figure}: {x.context}" for x in new)
    assert gone == [], gone
    assert counts["README.md"]["loose"] == sum(x.doc == "README.md" for x in loose)


def _bench_sets(script: str, labels: tuple[str, ...]) -> tuple[int, float, float]:
    """Runs, MAPE and mean (fractions) of the summary lines ``labels`` of a benchmark."""
    out = check_docs.bench(script)
    runs = {"A100 no recompute": 4, "A100 full recompute": 4, "all": 16,
            "A100 FSDP2, eager elementwise": 5}
    n = sum(runs[lb] for lb in labels)
    return (n, sum(out[lb]["mape"] * runs[lb] for lb in labels) / n,
            sum(out[lb]["mean"] * runs[lb] for lb in labels) / n)


@pytest.mark.parametrize("which, script, labels", [
    ("MOSAICML", "bench_heldout_mosaicml", ("all",)),
    ("MOSAICML_A100", "bench_heldout_mosaicml", ("A100 no recompute", "A100 full recompute")),
    ("TORCHTITAN_A100", "bench_heldout_torchtitan", ("A100 FSDP2, eager elementwise",))])
def test_the_printed_calibration_notes_quote_what_the_benchmarks_print(which, script, labels):
    """The notes printed with a ZeRO-2/3 or FlashAttention plan off its GPU's calibration set
    quote the recorded residuals, which are what the held-out benchmarks print now (a typed-in
    figure, such as the "4.9 % MAPE" the ZeRO note once gave, fails here)."""
    from planner.specs.loaders import load_cluster
    from planner.specs.plan import Plan
    from planner.validation import coverage

    n, mape, mean = _bench_sets(script, labels)
    want = (f"{n} runs at MAPE {100 * mape:.1f} %, mean {100 * mean:+.1f} %").replace("+-", "-")
    assert coverage.recorded(getattr(coverage, which)).startswith(want)
    a100 = load_cluster("dgx-a100-superpod", gpus=64)
    (note,) = coverage.calibration_notes(a100, Plan(dp=64, global_batch_size=64, seq_len=2048,
                                                    attention="flash", zero_stage=3))
    assert coverage.recorded(getattr(coverage, which)) in note


def test_fix_copies_the_numbers_of_a_stale_sentence_and_keeps_its_line_breaks(tmp_path):
    doc = tmp_path / "d.md"
    doc.write_text("Before. The step takes 3.91 s at\n  52.0 % MFU on 512 GPUs. After.\n")
    fig = check_docs.Figure("d.md", "cmd", lambda: "takes 3.82 s at 52.2 % MFU on 512 GPUs")
    assert check_docs.stale(tmp_path, (fig,))
    assert check_docs.fix_inline(tmp_path, (fig,)) == []
    assert doc.read_text() == "Before. The step takes 3.82 s at\n  52.2 % MFU on 512 GPUs. After.\n"
    assert check_docs.stale(tmp_path, (fig,)) == []


def test_fix_leaves_a_reworded_sentence_for_a_hand_edit(tmp_path):
    doc = tmp_path / "d.md"
    doc.write_text("The step takes 3.91 s, slower than before.\n")
    fig = check_docs.Figure("d.md", "cmd", lambda: "takes 3.82 s, faster than before")
    left = check_docs.fix_inline(tmp_path, (fig,))
    assert len(left) == 1 and "0 places" in left[0]
    assert doc.read_text() == "The step takes 3.91 s, slower than before.\n"
