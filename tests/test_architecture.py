"""The tree reads specs -> cost model -> formulations -> solve/procure -> report -> CLI:
no import cycles (every import counts, inside functions too), and no layer imports one
above it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("planner", "formulations", "hardware_catalog")


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _resolve(name: str, known: set[str]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(strict: bool = False) -> dict[str, set[str]]:
    """Module -> the project modules it imports (``from a.b import c`` goes to ``a.b.c``
    when that is a module, else to ``a.b``; implicit parent-package imports are not
    counted). ``strict``: ``from a.b import c`` always goes to ``a.b`` too, since it runs
    ``a/b/__init__.py`` (``from planner import catalog`` imports ``planner.api``)."""
    mods = modules()
    known = set(mods)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = mod if is_pkg else mod.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        pkg = pkg.rpartition(".")[0]
                    base = f"{pkg}.{base}" if base else pkg
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                           for a in node.names] + ([base] if strict else [])
            for t in targets:
                r = _resolve(t, known)
                if r and r != mod:
                    graph[mod].add(r)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_cycle():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(g) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    graph = import_graph()
    assert len(graph) > 40
    assert cycles(graph) == []


def test_no_import_cycles_through_package_inits():
    """``from planner import catalog`` runs planner/__init__.py, which imports the API and
    everything below it: counted as an edge to ``planner``, it closed a cycle through the
    loaders, procurement and the serving formulation."""
    assert cycles(import_graph(strict=True)) == []


LAYERS = {  # a module of the key's layer imports none of these
    "planner.specs": ("planner.costmodel", "formulations", "planner.orchestration",
                      "planner.procurement", "planner.cli", "planner.report", "planner.api"),
    "planner.costmodel": ("formulations", "planner.orchestration", "planner.procurement",
                          "planner.cli", "planner.report", "planner.api"),
    "formulations": ("planner.orchestration", "planner.procurement", "planner.cli",
                     "planner.report", "planner.api"),
    "planner.orchestration": ("planner.procurement", "planner.cli", "planner.report"),
    # sweeps run solves and procurements; plots (report) and the CLI sit above them
    "planner.sweep": ("planner.cli", "planner.report"),
    # exporters turn a plan into a framework's own files: they read specs and the cost
    # model's rules, never a search, a report or the CLI
    "planner.export": ("formulations", "planner.orchestration", "planner.procurement",
                       "planner.cli", "planner.report", "planner.api", "planner.sweep"),
}


def test_formulations_sit_between_the_cost_model_and_orchestration():
    """formulations/ is a top-level package (the product's layout) but one layer of
    planner's: it imports specs and the cost model, and orchestration imports it."""
    graph = import_graph()
    deps = {d.split(".")[0] + "." + d.split(".")[1] if d.startswith("planner.") else
            d.split(".")[0] for m, ds in graph.items() if m.startswith("formulations")
            for d in ds}
    assert deps <= {"formulations", "planner.specs", "planner.costmodel", "planner.errors",
                    "planner.catalog", "planner.workers"}, deps
    assert any(d.startswith("formulations") for m, ds in graph.items()
               if m.startswith("planner.orchestration") for d in ds)


def test_every_exporter_lives_in_export():
    """The files a framework or engine reads (Megatron-LM, Megatron-Bridge, torchtitan,
    DeepSpeed, the serving engines' launch commands, TorchRec's sharding plan) are written
    by planner.export, one room; report/ only prints and plots."""
    mods = set(modules())
    for name in ("megatron", "bridge", "torchtitan", "deepspeed", "serve_launch", "torchrec"):
        assert f"planner.export.{name}" in mods, name
        assert f"planner.report.{name}" not in mods, name


def test_layers_import_downward_only():
    bad = []
    for mod, deps in import_graph().items():
        for layer, above in LAYERS.items():
            if mod == layer or mod.startswith(layer + "."):
                bad += [f"{mod} -> {d}" for d in deps
                        if any(d == a or d.startswith(a + ".") for a in above)]
    assert bad == []


ROOMS = ("train", "serve", "dlrm")


def _room(mod: str) -> tuple[str, str | None] | None:
    """(layer, workload room or None for the layer's shared modules) of a cost-model or
    formulation module; None for modules of other layers."""
    for layer in ("planner.costmodel", "formulations"):
        if mod == layer or mod.startswith(layer + "."):
            rest = mod[len(layer) + 1:].split(".")[0] if mod != layer else ""
            return layer, rest if rest in ROOMS else None
    return None


def test_each_workload_is_its_own_room():
    """Inside the cost model and the formulations, training, serving and DLRM each live in
    their own package and import only the layer's shared modules, never another
    workload's; the shared modules import no workload."""
    graph = import_graph()
    assert {r for m in graph if (r := _room(m)) and r[1]} == {
        (layer, room) for layer in ("planner.costmodel", "formulations") for room in ROOMS}
    bad = []
    for mod, deps in graph.items():
        here = _room(mod)
        if here is None:
            continue
        for d in deps:
            there = _room(d)
            if there and there[0] == here[0] and there[1] and there[1] != here[1]:
                bad.append(f"{mod} -> {d}")
    assert bad == []


def test_rooms_are_read_from_module_names():
    assert _room("formulations.dlrm.build") == ("formulations", "dlrm")
    assert _room("formulations.linear") == ("formulations", None)
    assert _room("planner.costmodel.train.tables") == ("planner.costmodel", "train")
    assert _room("planner.specs.plan") is None


@pytest.mark.parametrize("module", ["formulations.train.space", "formulations.serve.space",
                                    "planner.specs.requests", "planner.costmodel.train.evaluator"])
def test_each_layer_imports_first_in_a_fresh_interpreter(module):
    """No package-level cycle: a lower layer imported before anything else does not pull
    in a higher one half-initialized (planner/__init__ loads planner.api on first use)."""
    out = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
