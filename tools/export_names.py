"""Extract the argument and config names the exporters may write from the frameworks'
sources, into tests/data/export_names.json (tests/test_export.py checks every name an
exporter writes against it). Names only, with each argument's kind and choices: no code.

    python tools/export_names.py --megatron MEGATRON_LM_CHECKOUT --bridge BRIDGE_CHECKOUT \
        --torchtitan TORCHTITAN_CHECKOUT --deepspeed DEEPSPEED_CHECKOUT

Each checkout is a git clone; the script reads the pinned revisions with ``git show``:
Megatron-LM core_v0.15.3 (arguments.py) and cd4afffa (the Megatron-Core that
Megatron-Bridge v0.6.0 pins as 3rdparty/Megatron-LM), Megatron-Bridge v0.6.0, torchtitan
v0.2.2, DeepSpeed v0.18.0.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "export_names.json"
MEGATRON_TAG = "core_v0.15.3"
BRIDGE_CORE = "cd4afffa648426a959dc7cb1e24b5ce7d0c3ff54"


def show(repo: str, rev: str, path: str) -> ast.Module:
    text = subprocess.run(["git", "-C", repo, "show", f"{rev}:{path}"], check=True,
                          capture_output=True, text=True).stdout
    return ast.parse(text)


def megatron_arguments(tree: ast.Module) -> dict[str, dict]:
    """--option -> {"flag": takes no value, "nargs": str|None, "choices": [...]|None}."""
    out: dict[str, dict] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant)
                 and isinstance(a.value, str) and a.value.startswith("--")]
        kw = {k.arg: k.value for k in node.keywords}
        action = kw.get("action")
        flag = isinstance(action, ast.Constant) and action.value in ("store_true", "store_false")
        choices = None
        if isinstance(kw.get("choices"), (ast.List, ast.Tuple)):
            choices = [e.value for e in kw["choices"].elts if isinstance(e, ast.Constant)]
        nargs = kw["nargs"].value if isinstance(kw.get("nargs"), ast.Constant) else None
        for n in names:
            out[n] = {"flag": flag, "nargs": nargs, "choices": choices}
    return out


def dataclass_fields(tree: ast.Module) -> dict[str, dict[str, str]]:
    """class -> {field: annotation source} for every class with annotated fields."""
    out: dict[str, dict[str, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = {s.target.id: ast.unparse(s.annotation) for s in node.body
                              if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
    return out


def function_names(tree: ast.Module) -> list[str]:
    return [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]


def string_constants(*trees: ast.Module) -> list[str]:
    """Module-level string constants that look like config keys (not the format help texts)."""
    return sorted({n.value.value for t in trees for n in t.body if isinstance(n, ast.Assign)
                   and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
                   and n.value.value.replace("_", "").isalnum()})


def bridge_keys(mlm: str, bridge: str) -> dict[str, list[str]]:
    core = BRIDGE_CORE

    def fields(repo: str, rev: str, path: str, *classes: str) -> list[str]:
        f = dataclass_fields(show(repo, rev, path))
        return sorted({k for c in classes for k in f[c]})

    model = (fields(mlm, core, "megatron/core/model_parallel_config.py", "ModelParallelConfig")
             + fields(mlm, core, "megatron/core/transformer/transformer_config.py",
                      "TransformerConfig"))
    cfg = "src/megatron/bridge/training/config.py"
    return {
        "model": sorted(set(model)),
        "ddp": fields(mlm, core, "megatron/core/distributed/distributed_data_parallel_config.py",
                      "DistributedDataParallelConfig"),
        "optimizer": fields(mlm, core, "megatron/core/optimizer/optimizer_config.py",
                            "OptimizerConfig"),
        "train": fields(mlm, core, "megatron/training/config/training_config.py", "TrainingConfig"),
        "dataset": fields(bridge, "v0.6.0", cfg, "GPTDatasetConfig"),
        "comm_overlap": fields(bridge, "v0.6.0", "src/megatron/bridge/training/comm_overlap.py",
                               "CommOverlapConfig"),
        "mixed_precision": function_names(show(bridge, "v0.6.0",
                                               "src/megatron/bridge/training/mixed_precision.py")),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("megatron", "bridge", "torchtitan", "deepspeed"):
        ap.add_argument(f"--{name}", required=True, help="path of a git clone")
    a = ap.parse_args()
    data = {
        "megatron": megatron_arguments(show(a.megatron, MEGATRON_TAG,
                                            "megatron/training/arguments.py")),
        "megatron-bridge": bridge_keys(a.megatron, a.bridge),
        "torchtitan": dataclass_fields(show(a.torchtitan, "v0.2.2",
                                            "torchtitan/config/job_config.py")),
        "deepspeed": {
            "constants": string_constants(
                show(a.deepspeed, "v0.18.0", "deepspeed/runtime/constants.py"),
                show(a.deepspeed, "v0.18.0", "deepspeed/runtime/zero/config.py")),
            "zero": sorted(dataclass_fields(show(a.deepspeed, "v0.18.0",
                                                 "deepspeed/runtime/zero/config.py"))
                           ["DeepSpeedZeroConfig"]),
            "offload": sorted(dataclass_fields(show(
                a.deepspeed, "v0.18.0", "deepspeed/runtime/zero/offload_config.py"))
                ["DeepSpeedZeroOffloadOptimizerConfig"]),
        },
    }
    OUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
