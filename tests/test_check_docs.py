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
    bad = check_docs.stale(tmp_path)
    assert len(bad) == 1 and bad[0].startswith("README.md: expected") and want in bad[0]


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
        found = re.search(r"\s+".join(map(re.escape, fig.text().split())), text)
        if found is None:
            continue  # stale in the tree already (in `fresh`)
        at = found.start() + next(j for j, ch in enumerate(found[0]) if ch.isdigit())
        path.write_text(text[:at] + str((int(text[at]) + 1) % 10) + text[at + 1:])
        bad = set(check_docs.stale(tmp_path)) - fresh
        assert len(bad) == 1 and next(iter(bad)).startswith(f"{fig.doc}: expected"), (i, bad)


#: README sections whose every measured figure (a decimal number, versions aside) comes
#: from a command the registry re-runs: the launch example and the framework examples
CHECKED_SECTIONS = ("## From plan to launch", "## Frameworks")


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
