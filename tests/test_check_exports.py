"""tools/check_exports.py without the frameworks installed: every golden file and a space
sample are read, a format whose package is absent is skipped by name, and a checker's
refusals are counted (a stand-in DeepSpeed with its batch arithmetic shows it)."""

from __future__ import annotations

import importlib.util
import sys
import types

import pytest

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("check_exports", ROOT / "tools" / "check_exports.py")
assert _spec is not None and _spec.loader is not None
ce = importlib.util.module_from_spec(_spec)
sys.modules["check_exports"] = ce  # its dataclasses look their module up
_spec.loader.exec_module(ce)


def test_golden_files_and_a_space_sample_are_read():
    golden = list(ce.golden_items())
    assert len(golden) == len([p for p in (ROOT / "examples" / "launch").iterdir()
                               # the plans, and their Slurm/Kubernetes files (test_launch.py)
                               if not p.name.endswith((".plan.yaml", ".sbatch",
                                                       ".k8s.yaml"))]) == 8
    worlds = {i.label: i.world for i in golden}
    assert worlds["golden llama3-70b.megatron.sh"] == 1024
    assert worlds["golden llama3-70b.ds_config.json"] == 512
    assert worlds["golden llama3-405b.torchtitan.toml"] == 16384
    sample = list(ce.space_items(2))
    assert sorted({i.fmt for i in sample}) == ["deepspeed", "megatron", "megatron-bridge",
                                               "torchtitan"]
    assert all(i.world == 16 for i in sample if i.fmt != "megatron-bridge")
    serve = list(ce.serving_items())
    assert {i.fmt for i in serve} == {"vllm", "sglang"}
    assert all("meta-llama/Meta-Llama-3-8B" in i.payload for i in serve)


def _fake_deepspeed(monkeypatch) -> None:
    """DeepSpeedConfig's batch check (deepspeed/runtime/config.py _batch_assertion, v0.18.0):
    train_batch_size = micro x accumulation x the world it reads from deepspeed.comm."""
    comm = types.SimpleNamespace(get_rank=lambda: 0, get_world_size=lambda: 1)

    class DeepSpeedConfig:
        def __init__(self, cfg: dict) -> None:
            world = comm.get_world_size()
            if cfg["train_batch_size"] != (cfg["train_micro_batch_size_per_gpu"]
                                           * cfg["gradient_accumulation_steps"] * world):
                raise AssertionError("Check batch related parameters")

    top, runtime = types.ModuleType("deepspeed"), types.ModuleType("deepspeed.runtime")
    config = types.ModuleType("deepspeed.runtime.config")
    config.dist = comm  # type: ignore[attr-defined]
    config.DeepSpeedConfig = DeepSpeedConfig  # type: ignore[attr-defined]
    top.runtime, runtime.config = runtime, config  # type: ignore[attr-defined]
    for mod in (top, runtime, config):
        monkeypatch.setitem(sys.modules, mod.__name__, mod)


def test_checkers_count_accepted_and_refused_and_skip_absent_packages(monkeypatch, capsys):
    golden = [i for i in ce.golden_items() if i.fmt == "deepspeed"]
    bad = ce.Item("deepspeed", "wrong world", golden[0].payload, golden[0].world + 1)
    monkeypatch.setitem(sys.modules, "torchtitan", None)  # absent, whatever is installed
    _fake_deepspeed(monkeypatch)
    tallies = ce.run([*golden, bad, *[i for i in ce.golden_items() if i.fmt == "torchtitan"]])
    ds = tallies["deepspeed"]
    assert (ds.accepted, ds.refused, ds.skipped) == (2, 1, None)
    assert ds.first == ["wrong world: AssertionError: Check batch related parameters"]
    assert tallies["torchtitan"].skipped == "package torchtitan not installed"
    assert tallies["torchtitan"].accepted == tallies["torchtitan"].refused == 0


def test_the_tool_reports_each_format(monkeypatch, capsys):
    for name in ("deepspeed", "torchtitan", "megatron.training"):
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delenv("MEGATRON_LM", raising=False)
    assert ce.main(["--no-sample"]) == 0
    out = capsys.readouterr().out
    assert "deepspeed: skipped: package deepspeed not installed" in out
    assert "megatron: skipped: package megatron.training not installed (set MEGATRON_LM" in out
    assert "megatron-bridge: skipped: no automated check" in out
    with pytest.raises(SystemExit):
        ce.main(["--sample", "0"])
