"""Tests in two tiers: ``python -m pytest -m "not slow"`` is the development tier (the
README gives its time on two cores) and ``python -m pytest`` runs everything (what
``.ci/run`` runs). A test leaves the development tier only by saying why:
``@pytest.mark.slow(reason="...")``, or a module's ``pytestmark`` with a reason."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _is_slow(node: ast.AST) -> bool:
    """``pytest.mark.slow`` or ``mark.slow`` (``from pytest import mark``)."""
    if not (isinstance(node, ast.Attribute) and node.attr == "slow"):
        return False
    mark = node.value
    return (isinstance(mark, ast.Attribute) and mark.attr == "mark"
            and isinstance(mark.value, ast.Name) and mark.value.id == "pytest"
            ) or (isinstance(mark, ast.Name) and mark.id == "mark")


def _has_reason(call: ast.Call) -> bool:
    return any(k.arg == "reason" and isinstance(k.value, ast.Constant)
               and isinstance(k.value.value, str) and k.value.value.strip()
               for k in call.keywords)


def unexplained_slow_marks(source: str) -> list[int]:
    """Lines of ``source`` that mark something slow without a reason."""
    tree = ast.parse(source)
    explained = {id(n.func) for n in ast.walk(tree)
                 if isinstance(n, ast.Call) and _is_slow(n.func) and _has_reason(n)}
    return sorted(n.lineno for n in ast.walk(tree) if _is_slow(n) and id(n) not in explained)


def test_every_slow_test_says_why():
    files = sorted((ROOT / "tests").glob("test_*.py"))
    assert len(files) > 50
    bad = {f.name: lines for f in files if (lines := unexplained_slow_marks(f.read_text()))}
    assert bad == {}, "mark slow tests with @pytest.mark.slow(reason=...)"


def test_a_slow_mark_without_a_reason_is_caught():
    bare = ("import pytest\n\n@pytest.mark.slow\ndef test_a():\n    pass\n\n"
            "@pytest.mark.slow(reason='')\ndef test_b():\n    pass\n")
    assert unexplained_slow_marks(bare) == [3, 7]
    module = ("import pytest\n"
              "pytestmark = [pytest.mark.skipif(True, reason='x'), pytest.mark.slow]\n")
    assert unexplained_slow_marks(module) == [2]
    imported = "from pytest import mark\n\n@mark.slow()\ndef test_c():\n    pass\n"
    assert unexplained_slow_marks(imported) == [3]
    said = ("import pytest\npytestmark = pytest.mark.slow(reason='a 400-point sweep')\n\n"
            "@pytest.mark.slow(reason='solves at 16K GPUs')\ndef test_d():\n    pass\n")
    assert unexplained_slow_marks(said) == []


def test_ci_runs_both_tiers():
    """``.ci/run`` runs the README's full command: no marker or keyword selection, so the
    slow tier is tested on every change; a misspelt marker is an error, not a test
    silently moved to the development tier."""
    ci = (ROOT / ".ci" / "run").read_text()
    command = re.search(r"python -m pytest([^\n&|;]*)", ci)
    assert command and not re.search(r"(^|\s)-[mk]", command.group(1)), ci
    assert "python -m pytest -m \"not slow\"" in (ROOT / "README.md").read_text()
    assert "--strict-markers" in (ROOT / "pyproject.toml").read_text()
