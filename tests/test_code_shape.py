"""Code shape the project holds itself to: short functions in the cost model, the
formulations and the orchestration (a longer one must say why, with a comment containing
"long because" in its first lines)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 80


def long_functions(paths: list[Path], limit: int = MAX_LINES) -> list[str]:
    out = []
    for path in paths:
        src = path.read_text()
        lines = src.splitlines()
        for node in ast.walk(ast.parse(src)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            length = node.end_lineno - node.lineno + 1
            head = "\n".join(lines[node.lineno - 1:node.lineno + 5]).lower()
            if length > limit and "long because" not in head:
                out.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines)")
    return out


def test_no_function_over_80_lines():
    files = sorted(p for d in ("planner", "formulations") for p in (ROOT / d).rglob("*.py"))
    assert files
    assert long_functions(files) == []


def test_the_length_check_can_fail(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(90))
    f = tmp_path / "m.py"
    f.write_text(f"def big():\n{body}\n\n\ndef ok():\n    return 1\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert long_functions([f]) == ["m.py:1 big (91 lines)"]
    finally:
        ROOT = saved
