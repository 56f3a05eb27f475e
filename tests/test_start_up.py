"""Start-up (issue 38 item 1): ``import planner`` and every ``--help`` load no solver,
plotting, Arrow or Ray module; a catalog file is parsed and validated once per process.

No wall-clock assertion: ``benchmarks/bench_entry_points.py`` times these.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import planner.specs.loaders as loaders
from planner.specs.loaders import load_cluster, load_gpu, load_model

ROOT = Path(__file__).resolve().parents[1]
#: the heavy optional dependencies (issue 37: the only modules loaded lazily)
HEAVY = ("ortools", "pulp", "highspy", "matplotlib", "pyarrow", "ray")
COMMANDS = ("solve", "evaluate", "procure", "serve", "sweep", "export", "validate", "catalog",
            "collective")


def _loaded_after(code: str) -> list[str]:
    """The heavy top-level packages in ``sys.modules`` after running ``code`` in a fresh
    interpreter on this checkout."""
    probe = (f"{code}\nimport json, sys\n"
             f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r})))")
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_planner_loads_no_heavy_module():
    assert _loaded_after("import planner; assert planner.__file__.startswith("
                         f"{str(ROOT)!r})") == []


def test_help_loads_no_heavy_module():
    """``planner --help`` and each command's ``--help``, in one interpreter."""
    runs = [[]] + [[c] for c in COMMANDS]
    code = ("import contextlib, io, sys\nfrom planner.cli import app\n"
            f"for args in {runs!r}:\n"
            "    with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            "        try:\n"
            "            app(args + ['--help'], prog_name='planner')\n"
            "        except SystemExit as e:\n"
            "            assert e.code == 0, (args, e.code)\n"
            "    assert 'Usage' in out.getvalue(), args\n")
    assert _loaded_after(code) == []


def test_specs_build_their_validators_on_first_use():
    """The spec classes are declared with pydantic's defer_build: ``import planner`` and
    ``--help`` build none of their validators (about a tenth of start-up); the first spec
    validated builds its own."""
    code = ("import contextlib, io, json\nfrom planner.cli import app\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n        app(['solve', '--help'], prog_name='planner')\n"
            "    except SystemExit:\n        pass\n"
            "from planner.specs.base import Spec\n"
            "def subs(c):\n    for s in c.__subclasses__():\n        yield s\n"
            "        yield from subs(s)\n"
            "built = sorted(c.__name__ for c in set(subs(Spec)) if c.__pydantic_complete__)\n"
            "from planner.specs import Plan\nPlan(global_batch_size=8, seq_len=128)\n"
            "print(json.dumps([built, Plan.__pydantic_complete__]))\n")
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True, timeout=120)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [[], True]


def test_the_probe_sees_a_heavy_import():
    """The check above would see a heavy module loaded at import (the probe works)."""
    assert _loaded_after("import planner, matplotlib") == ["matplotlib"]


def test_a_catalog_file_is_read_once_per_process(monkeypatch):
    """The same catalog GPU, cluster and model looked up again (by name or alias) come from
    the process's cache: each file is read once, and the same frozen spec returned."""
    reads: list[str] = []
    real = loaders.read_structured

    def counted(path):
        reads.append(Path(path).name)
        return real(path)

    monkeypatch.setattr(loaders, "read_structured", counted)
    monkeypatch.setattr(loaders, "_CATALOG_SPECS", {})
    first = (load_gpu("h100-sxm"), load_cluster("dgx-h100-superpod"), load_model("llama3-8b"))
    again = (load_gpu("h100-sxm"), load_cluster("dgx-h100-superpod"), load_model("llama3-8b"))
    assert all(a is b for a, b in zip(first, again))
    assert sorted(reads) == ["dgx-h100-superpod.yaml", "h100-sxm.yaml", "llama3-8b.yaml"]
    # a resized cluster is a new spec of the cached one
    assert load_cluster("dgx-h100-superpod", 64).num_gpus == 64
    assert load_cluster("dgx-h100-superpod").num_gpus == first[1].num_gpus


def test_a_changed_catalog_file_is_read_again(monkeypatch, tmp_path):
    """The cache is keyed on the file's state: a file rewritten in the process is re-read."""
    src = loaders.catalog.find("gpus", "h100-sxm")
    copy = tmp_path / "h100-sxm.yaml"
    text = src.read_text()
    copy.write_text(text)
    monkeypatch.setattr(loaders, "_CATALOG_SPECS", {})
    build = lambda data, label: loaders.validate(loaders.GPUSpec, data, label)  # noqa: E731
    a = loaders._from_catalog("gpus", copy, "test", build)
    copy.write_text(text.replace(f"name: {a.name}", f"name: {a.name}-edited", 1))
    b = loaders._from_catalog("gpus", copy, "test", build)
    assert b.name == f"{a.name}-edited"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
