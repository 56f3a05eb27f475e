"""tools/check_docs.py: the calibration figures the README and docs quote are what
`planner validate` gives now, and a stale one is caught."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("check_docs", ROOT / "tools" / "check_docs.py")
check_docs = importlib.util.module_from_spec(spec)
sys.modules["check_docs"] = check_docs  # dataclasses look their module up by name
spec.loader.exec_module(check_docs)


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
