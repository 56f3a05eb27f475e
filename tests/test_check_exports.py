"""tools/check_exports.py without the frameworks installed: launches run under real bash
with the tool's stand-in launchers, and stand-in frameworks that carry the checks the real
ones make (each cited) show what reaches them. The negative controls (a launch line whose
world disagrees with the file, a script without its ``export`` line, every format skipped)
must be refused or fail the run; each test fails if the tool accepts them. Only the last
test needs a real package (TorchRec); the guard at the end counts it."""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import sys
import types
from pathlib import Path

import pytest

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("check_exports", ROOT / "tools" / "check_exports.py")
assert _spec is not None and _spec.loader is not None
ce = importlib.util.module_from_spec(_spec)
sys.modules["check_exports"] = ce  # its dataclasses look their module up
_spec.loader.exec_module(ce)

GOLDEN = ROOT / "examples" / "launch"
FRAMEWORKS = ("deepspeed", "torchtitan", "megatron", "megatron.training", "vllm", "sglang",
              "torchrec", "megatron.bridge")


def _golden(name: str) -> str:
    return (GOLDEN / name).read_text()


def _modules(monkeypatch, *mods: types.ModuleType) -> None:
    for mod in mods:
        monkeypatch.setitem(sys.modules, mod.__name__, mod)


def _fake_deepspeed(monkeypatch, built=None) -> None:
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
    _fake_initialize(monkeypatch, top, built or _ds_builds)
    _modules(monkeypatch, top, runtime, config)
    monkeypatch.setitem(sys.modules, "deepspeed.launcher", None)


def _ds_builds(cfg: dict) -> str:
    """What DeepSpeed v0.18.0 wraps a client torch.optim.AdamW in, by hand from
    deepspeed/runtime/engine.py _do_optimizer_sanity_check / _configure_optimizer: ZeRO 3
    -> DeepSpeedZeroOptimizer_Stage3; ZeRO 1-2 -> DeepSpeedZeroOptimizer except bf16 with
    fp32 accumulation at stage 1 without offload; otherwise (a "bf16" wrapper answer, which
    equals DDP_BFLOAT16) FP16_UnfusedOptimizer."""
    zero = cfg["zero_optimization"]
    bf16_fp32 = cfg["bf16"]["enabled"] and cfg["data_types"]["grad_accum_dtype"] == "fp32"
    if zero["stage"] == 3:
        return "DeepSpeedZeroOptimizer_Stage3"
    if zero["stage"] == 2 or (zero["stage"] == 1 and (
            not bf16_fp32 or "offload_optimizer" in zero)):
        return "DeepSpeedZeroOptimizer"
    return "FP16_UnfusedOptimizer"


def _fake_initialize(monkeypatch, top: types.ModuleType, built) -> None:
    """deepspeed.init_distributed / initialize at world 1: the engine's optimizer is an
    instance of a class named ``built(config)``; the config must be scaled to one rank
    (DeepSpeedConfig's batch assertion at world 1)."""
    state = {"init": False, "seen": []}

    def init_distributed(dist_backend=None, **_):
        assert dist_backend == "gloo" and os.environ["WORLD_SIZE"] == "1"
        state["init"] = True

    def initialize(model=None, optimizer=None, config=None, **_):
        assert state["init"] and optimizer == "client optimizer"
        assert config["train_batch_size"] == (config["train_micro_batch_size_per_gpu"]
                                              * config["gradient_accumulation_steps"])
        state["seen"].append(built(config))
        engine = types.SimpleNamespace(optimizer=type(built(config), (), {})())
        return engine, engine.optimizer, None, None

    top.comm = types.SimpleNamespace(is_initialized=lambda: state["init"])  # type: ignore[attr-defined]
    top.init_distributed, top.initialize = init_distributed, initialize  # type: ignore[attr-defined]
    top.seen = state["seen"]  # type: ignore[attr-defined]
    monkeypatch.setattr(ce, "ds_client", lambda cfg: ("model", "client optimizer"))
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)


def _fake_torchtitan(monkeypatch) -> None:
    """ConfigManager reads --job.config_file (torchtitan/config/manager.py, v0.2.2);
    ParallelDims asserts dp_replicate x dp_shard x cp x tp x pp == world_size
    (torchtitan/distributed/parallel_dims.py _validate, v0.2.2)."""
    import tomllib

    class ConfigManager:
        def parse_args(self, args: list[str]):
            path = args[args.index("--job.config_file") + 1]
            par = tomllib.loads(Path(path).read_text())["parallelism"]
            return types.SimpleNamespace(parallelism=types.SimpleNamespace(
                **{k: par.get(k, 1) for k in (
                    "data_parallel_replicate_degree", "data_parallel_shard_degree",
                    "context_parallel_degree", "tensor_parallel_degree",
                    "pipeline_parallel_degree", "expert_parallel_degree",
                    "expert_tensor_parallel_degree")}))

    def ParallelDims(*, dp_replicate, dp_shard, cp, tp, pp, ep, etp, world_size):  # noqa: N802
        if dp_replicate * dp_shard * cp * tp * pp != world_size:
            raise AssertionError("Invalid parallel dims")

    top = types.ModuleType("torchtitan")
    config = types.ModuleType("torchtitan.config")
    dist = types.ModuleType("torchtitan.distributed")
    config.ConfigManager = ConfigManager  # type: ignore[attr-defined]
    dist.ParallelDims = ParallelDims  # type: ignore[attr-defined]
    _modules(monkeypatch, top, config, dist)


def _fake_megatron(monkeypatch, raise_in_validate: BaseException | None = None) -> list[dict]:
    """megatron.training.arguments (core_v0.15.3): validate_args takes the world from
    WORLD_SIZE, asserts it divides by tp x pp x cp and derives the data-parallel size,
    and, for tp > 1 or cp > 1 before Blackwell (get_device_arch_version() < 10), asserts
    CUDA_DEVICE_MAX_CONNECTIONS == "1" (arguments.py lines 933-961);
    megatron.core.num_microbatches_calculator asserts the global batch divides by micro
    batch x data-parallel size (ConstantNumMicroBatchesCalculator). Returns what each
    validate_args call saw."""
    import argparse
    import os

    seen: list[dict] = []
    args_mod = types.ModuleType("megatron.training.arguments")

    def parse_args():
        ap = argparse.ArgumentParser()
        for name in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size",
                     "--context-parallel-size", "--micro-batch-size", "--global-batch-size"):
            ap.add_argument(name, type=int, default=1)
        a, _ = ap.parse_known_args(sys.argv[1:])
        a.rank, a.rampup_batch_size, a.decrease_batch_size_if_needed = 0, None, False
        return a

    def validate_args(a, defaults):
        seen.append({"env": dict(os.environ), "arch": args_mod.get_device_arch_version()})
        if raise_in_validate is not None:
            raise raise_in_validate
        world = int(os.environ["WORLD_SIZE"])
        model = a.tensor_model_parallel_size * a.pipeline_model_parallel_size \
            * a.context_parallel_size
        assert world % model == 0, "world size is not divisible by tp x pp x cp"
        a.data_parallel_size = world // model
        if (a.tensor_model_parallel_size > 1 or a.context_parallel_size > 1) \
                and args_mod.get_device_arch_version() < 10:
            assert os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1", (
                "Using tensor model parallelism or context parallelism require setting the "
                "environment variable CUDA_DEVICE_MAX_CONNECTIONS to 1")

    def get_device_arch_version():  # the real one asks the GPU: none here
        raise RuntimeError("Found no NVIDIA driver on your system.")

    args_mod.parse_args = parse_args  # type: ignore[attr-defined]
    args_mod.validate_args = validate_args  # type: ignore[attr-defined]
    args_mod.get_device_arch_version = get_device_arch_version  # type: ignore[attr-defined]
    args_mod.core_transformer_config_from_args = lambda a: None  # type: ignore[attr-defined]
    calc = types.ModuleType("megatron.core.num_microbatches_calculator")

    def init_num_microbatches_calculator(rank, rampup, gbs, mbs, dp, decrease):
        assert gbs % (mbs * dp) == 0, "global batch size is not divisible by micro batch size"

    calc.init_num_microbatches_calculator = (  # type: ignore[attr-defined]
        init_num_microbatches_calculator)
    calc.unset_num_microbatches_calculator = lambda: None  # type: ignore[attr-defined]
    top, training = types.ModuleType("megatron"), types.ModuleType("megatron.training")
    core = types.ModuleType("megatron.core")
    top.training, training.arguments = training, args_mod  # type: ignore[attr-defined]
    top.core, core.num_microbatches_calculator = core, calc  # type: ignore[attr-defined]
    _modules(monkeypatch, top, training, args_mod, core, calc)
    return seen


def _check(items) -> dict:
    return ce.run(list(items))


# ---- what reaches the framework -------------------------------------------------------------
def test_golden_files_are_launched_under_bash_and_read_from_what_the_launcher_got():
    golden = list(ce.golden_items())
    assert len(golden) == len([p for p in GOLDEN.iterdir()
                               # the plans, and their Slurm/Kubernetes files (test_launch.py)
                               if not p.name.endswith((".plan.yaml", ".sbatch",
                                                       ".k8s.yaml"))]) == 8
    assert all(i.refusal is None for i in golden)
    by = {i.label: i for i in golden}
    assert by["golden llama3-70b.megatron.sh"].world == 128 * 8
    assert by["golden llama3-70b.ds_config.json"].world == 64 * 8
    assert by["golden llama3-405b.torchtitan.toml"].world == 2048 * 8
    # the script's own export, recorded by the stand-in torchrun
    assert by["golden llama3-70b.megatron.sh"].env == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    assert by["golden llama3-70b.megatron.sh"].payload["args"][:2] == ["--num-layers", "80"]
    assert by["golden llama3-70b.torchtitan.toml"].payload["args"] == [
        "--job.config_file", "job.toml"]
    assert by["golden llama3-70b.torchtitan.toml"].payload["launch"][:3] == [
        "torchrun", "--nnodes", "128"]


def test_the_world_is_the_launch_lines_not_the_files():
    """The stand-in launcher's argv sets the world: changing only the launch line changes
    it (recomputed from the file's batch or parallel degrees it would not)."""
    ds = _golden("llama3-70b.ds_config.json").replace("--num_nodes 64", "--num_nodes 32")
    tt = _golden("llama3-70b.torchtitan.toml").replace("--nnodes 128", "--nnodes 1024")
    mg = _golden("llama3-70b.megatron.sh").replace("--nnodes 128", "--nnodes 96")
    assert ce.deepspeed_item("x", ds).world == 256
    assert ce.torchtitan_item("x", tt).world == 8192
    assert ce.megatron_item("x", mg).world == 768
    # torchrun's other spellings, and python -m torch.distributed.run
    assert ce.megatron_item("x", mg.replace("--nproc-per-node 8", "--nproc_per_node=4")
                            ).world == 96 * 4
    assert ce.megatron_item("x", mg.replace("torchrun ", "python -m torch.distributed.run ")
                            ).world == 768


def test_negative_control_a_launch_world_that_disagrees_is_refused(monkeypatch):
    _fake_deepspeed(monkeypatch)
    _fake_torchtitan(monkeypatch)
    _fake_megatron(monkeypatch)
    good = [ce.deepspeed_item("ds", _golden("llama3-70b.ds_config.json")),
            ce.torchtitan_item("tt", _golden("llama3-70b.torchtitan.toml")),
            ce.megatron_item("mg", _golden("llama3-70b.megatron.sh"))]
    bad = [ce.deepspeed_item("ds", _golden("llama3-70b.ds_config.json")
                             .replace("--num_nodes 64", "--num_nodes 32")),
           ce.torchtitan_item("tt", _golden("llama3-70b.torchtitan.toml")
                              .replace("--nnodes 128", "--nnodes 1024")),
           ce.megatron_item("mg", _golden("llama3-70b.megatron.sh")
                            .replace("--nnodes 128", "--nnodes 96"))]
    for fmt, t in _check(good).items():
        assert (t.accepted, t.refused, t.env_failed) == (1, 0, 0), (fmt, t)
    tallies = _check(bad)
    for fmt, t in tallies.items():
        assert (t.accepted, t.refused, t.env_failed) == (0, 1, 0), (fmt, t)
    assert "Check batch related parameters" in tallies["deepspeed"].first[0]
    assert "Invalid parallel dims" in tallies["torchtitan"].first[0]


def test_negative_control_a_script_without_its_export_line_is_refused(monkeypatch):
    """Megatron asserts CUDA_DEVICE_MAX_CONNECTIONS=1 for tp > 1 on an H100: the script's
    export must reach it, and the tool sets none of its own, even when the shell that runs
    the tool has it set."""
    seen = _fake_megatron(monkeypatch)
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    text = _golden("llama3-70b.megatron.sh")
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1\n" in text
    cut = text.replace("export CUDA_DEVICE_MAX_CONNECTIONS=1\n", "")
    unexported = text.replace("export CUDA_DEVICE_MAX_CONNECTIONS=1\n",
                              "CUDA_DEVICE_MAX_CONNECTIONS=1\n")  # a shell variable only
    ok = _check([ce.megatron_item("kept", text)])["megatron"]
    assert (ok.accepted, ok.refused) == (1, 0)
    assert seen[-1]["env"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    assert seen[-1]["arch"] == ce.H100_ARCH_MAJOR == 9
    t = _check([ce.megatron_item("cut", cut), ce.megatron_item("unexported", unexported)]
               )["megatron"]
    assert (t.accepted, t.refused, t.env_failed) == (0, 2, 0), t
    assert "CUDA_DEVICE_MAX_CONNECTIONS to 1" in t.first[0]
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in seen[-1]["env"]


def test_negative_control_every_format_skipped_fails_the_run(monkeypatch, capsys):
    for name in FRAMEWORKS:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delenv("MEGATRON_LM", raising=False)
    assert ce.main(["--no-sample"]) == 2
    out = capsys.readouterr().out
    assert "deepspeed: skipped: package deepspeed not installed" in out
    assert "megatron: skipped: package megatron.training not installed (set MEGATRON_LM" in out
    assert "megatron-bridge: skipped: no automated check" in out
    assert "nothing was checked" in out
    # a format asked for by name and skipped fails the run though another was checked
    _fake_deepspeed(monkeypatch)
    assert ce.main(["--no-sample", "--only", "deepspeed"]) == 0
    assert ce.main(["--no-sample", "--only", "deepspeed", "--only", "torchtitan"]) == 2
    with pytest.raises(SystemExit):
        ce.main(["--sample", "0"])


def test_files_named_on_the_command_line_are_checked_alone(monkeypatch, tmp_path, capsys):
    """--file: a user's export, here the DeepSpeed negative control, fails the run."""
    _fake_deepspeed(monkeypatch)
    bad = tmp_path / "x.ds_config.json"
    bad.write_text(_golden("llama3-70b.ds_config.json").replace("--num_nodes 64",
                                                                "--num_nodes 32"))
    assert ce.main(["--file", str(bad)]) == 1
    assert "deepspeed: 0 accepted, 1 refused" in capsys.readouterr().out
    assert ce.main(["--file", str(GOLDEN / "llama3-70b.ds_config.json")]) == 0


def test_bash_refuses_before_any_framework_is_asked(monkeypatch):
    """Nothing installed: a script bash rejects, one that launches nothing or two
    processes, a launch with no fixed world, are refused all the same."""
    for name in FRAMEWORKS:
        monkeypatch.setitem(sys.modules, name, None)
    text = _golden("llama3-70b.megatron.sh")
    items = [ce.megatron_item("syntax", text.replace("export ", "if then ")),
             ce.megatron_item("nothing", text.replace("torchrun ", "echo ")),
             ce.megatron_item("twice", text.replace("export CUDA_DEVICE_MAX_CONNECTIONS=1",
                                                    "torchrun --version")),
             ce.megatron_item("elastic", text.replace("--nnodes 128", "--nnodes 1:128")),
             ce.megatron_item("exit", text.replace("export CUDA", "false; export CUDA")
                              .replace("#!/usr/bin/env bash", "#!/usr/bin/env bash\nset -e")),
             ce.deepspeed_item("no launch", json.dumps({"planner_export": ["plan: x"]})),
             ce.deepspeed_item("other file", _golden("llama3-70b.ds_config.json")
                               .replace("THIS_FILE", "other.json"))]
    t = _check(items)
    assert (t["megatron"].refused, t["megatron"].accepted, t["megatron"].skipped) == (
        5, 0, "package megatron.training not installed (set MEGATRON_LM to a Megatron-LM clone)")
    assert t["deepspeed"].refused == 2
    assert ce.report(t, []) == 1


def test_serving_commands_are_launched_under_bash():
    serve = list(ce.serving_items())
    assert {i.fmt for i in serve} == {"vllm", "sglang"}
    assert all(i.refusal is None for i in serve)
    vllm = next(i for i in serve if i.fmt == "vllm")
    assert vllm.payload[:3] == ["vllm", "serve", "meta-llama/Meta-Llama-3-8B"]
    sglang = next(i for i in serve if i.fmt == "sglang")
    assert sglang.payload[:3] == ["python", "-m", "sglang.launch_server"]


def test_a_serving_flag_the_engine_does_not_know_is_refused_saying_so(monkeypatch):
    """SGLang's ServerArgs.add_cli_args (python/sglang/srt/server_args.py) declares the
    flags; argparse refuses another on stderr and exits: the note keeps its words."""
    class ServerArgs:
        @staticmethod
        def add_cli_args(parser) -> None:
            for name in ("--model-path", "--tp-size", "--pp-size", "--max-running-requests",
                         "--chunked-prefill-size", "--kv-cache-dtype", "--quantization",
                         "--disaggregation-mode"):
                parser.add_argument(name)

    mods = [types.ModuleType(n) for n in ("sglang", "sglang.srt", "sglang.srt.server_args")]
    mods[2].ServerArgs = ServerArgs  # type: ignore[attr-defined]
    _modules(monkeypatch, *mods)
    good = [i for i in ce.serving_items() if i.fmt == "sglang"]
    typo = ce.serving_item("sglang", "typo", "python -m sglang.launch_server --model-path m "
                           "--tp-sizes 2")
    t = _check([*good, typo])["sglang"]
    assert (t.accepted, t.refused, t.env_failed) == (len(good), 1, 0), t
    assert "unrecognized arguments: --tp-sizes 2" in t.first[0]


def test_the_sample_is_drawn_from_the_whole_space_with_a_fixed_seed():
    a = [i.label for i in ce.space_items(6, profiles={"torchtitan": "torchtitan"})]
    b = [i.label for i in ce.space_items(6, profiles={"torchtitan": "torchtitan"})]
    assert a == b and len(a) == 6
    drawn = [int(s.split("#")[1].split()[0]) for s in a]
    size = int(a[0].rsplit(" ", 1)[1])
    assert any(k >= size // 2 for k in drawn) and any(k < size // 2 for k in drawn), drawn
    other = [i.label for i in ce.space_items(6, seed=7, profiles={"torchtitan": "torchtitan"})]
    assert other != a


# ---- refusal or environment -----------------------------------------------------------------
def _raised_in(filename: str, exc: BaseException) -> BaseException:
    """``exc`` as raised by code in ``filename`` (its traceback names that file)."""
    code = compile("def f(e):\n    raise e\n", filename, "exec")
    ns: dict = {}
    exec(code, ns)  # noqa: S102 - a two-line function of the test's own
    try:
        ns["f"](exc)
    except BaseException as e:  # noqa: BLE001
        return e
    raise AssertionError("not raised")


@pytest.mark.parametrize("exc, env", [
    (RuntimeError("Found no NVIDIA driver on your system."), True),
    (AssertionError("Torch not compiled with CUDA enabled"), True),
    (ModuleNotFoundError("No module named 'six'", name="six"), True),
    (OSError("libcudart.so.13: cannot open shared object file"), True),
    (_raised_in("/v/lib/torch/utils/cpp_extension.py", IndexError("list index out of range")),
     True),
    (_raised_in("/v/lib/torch/cuda/__init__.py", AssertionError("x")), True),
    (AssertionError("Using tensor model parallelism or context parallelism require setting "
                    "the environment variable CUDA_DEVICE_MAX_CONNECTIONS to 1"), False),
    (_raised_in("/v/megatron/training/arguments.py", IndexError("list index out of range")),
     False),
    (ValueError("apply_rope_fusion is not available. Please install TE >= 1.4."), True),
    (RuntimeError("Failed to infer device type, please set the environment variable "
                  "`VLLM_LOGGING_LEVEL=DEBUG` to turn on verbose logging"), True),
    (SystemExit(2), False),
    (FileNotFoundError("job.toml"), False),
])
def test_environment_failures_are_told_from_refusals(exc, env):
    assert (ce.environment_failure(exc) is not None) == env


def test_environment_failures_are_counted_apart(monkeypatch, capsys):
    _fake_megatron(monkeypatch, raise_in_validate=RuntimeError("Found no NVIDIA driver"))
    item = ce.megatron_item("mg", _golden("llama3-70b.megatron.sh"))
    t = _check([item])["megatron"]
    assert (t.accepted, t.refused, t.env_failed) == (0, 0, 1)
    assert ce.report({"megatron": t}, []) == 2  # not a pass: nothing was checked
    assert "0 accepted, 0 refused, 1 environment-failed" in capsys.readouterr().out


def test_a_missing_dependency_is_not_a_missing_package(monkeypatch, tmp_path):
    """megatron.training is there but imports six, which is not: an environment failure
    for every item, not 'not installed'."""
    pkg = tmp_path / "megatron" / "training"
    pkg.mkdir(parents=True)
    (tmp_path / "megatron" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("import six_not_here_for_the_test\n")
    for name in ("megatron", "megatron.training"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("MEGATRON_LM", str(tmp_path))
    t = _check([ce.megatron_item("mg", _golden("llama3-70b.megatron.sh"))])["megatron"]
    for name in ("megatron", "megatron.training"):
        sys.modules.pop(name, None)
    assert (t.skipped, t.accepted, t.refused, t.env_failed) == (None, 0, 0, 1), t
    assert "six_not_here_for_the_test" in t.first[0]


def test_a_worker_that_dies_leaves_its_items_environment_failed():
    item = ce.deepspeed_item("ds", _golden("llama3-70b.ds_config.json"))
    t = ce.run_in("/bin/false", [item])["deepspeed"]
    assert (t.accepted, t.refused, t.env_failed) == (0, 0, 1)
    # a worker of this interpreter: the items travel and the tally comes back
    bad = ce.deepspeed_item("bad", "{not json")
    back = ce.run_in(sys.executable, [item, bad])["deepspeed"]
    assert back.refused == 1 and back.env_failed == 0
    assert back.skipped == "package deepspeed not installed" or back.accepted == 1


# ---- the real packages ----------------------------------------------------------------------
def test_torchrec_full_plan_with_the_real_packages():
    """TorchRec's whole ShardingPlan of the DLRM solve is accepted, and one with a shard
    cut short (the table no longer covered) refused; in this interpreter, or in the
    environment whose python TORCHREC_PYTHON names (docs/export.md)."""
    python = os.environ.get("TORCHREC_PYTHON")
    if python:
        def check(items):
            return ce.run_in(python, items)
    else:
        pytest.importorskip("torchrec")
        pytest.importorskip("fbgemm_gpu")
        check = ce.run
    (item,) = ce.torchrec_items()
    ok = check([item])["torchrec"]
    assert (ok.accepted, ok.refused, ok.env_failed) == (1, 0, 0), ok
    plan = json.loads(json.dumps(item.payload))
    name, sharding = next((n, s) for n, s in plan["plan"]["sharding_plan"].items()
                          if s["sharding_spec"])
    sharding["sharding_spec"][0]["shard_sizes"][0] -= 1
    cut = ce.Item("torchrec", "cut", plan, item.world)
    t = check([cut])["torchrec"]
    assert (t.accepted, t.refused, t.env_failed) == (0, 1, 0), t


def test_guard_only_the_real_package_test_may_skip():
    """Count guard: the negative controls above need no framework; a skip may only come
    from the one test that needs TorchRec."""
    mod = sys.modules[__name__]
    guard = inspect.getsource(test_guard_only_the_real_package_test_may_skip)
    src = inspect.getsource(mod).replace(guard, "")
    assert src.count("importorskip") == 2
    assert src.count("pytest.skip") == src.count("skipif") == 0
    tests = [n for n in dir(sys.modules[__name__]) if n.startswith("test_")]
    assert len(tests) >= 12


# ---- DeepSpeed's optimizer (issue 40 item 4) ------------------------------------------------
def test_deepspeed_initialize_builds_the_optimizer_the_planner_charges(monkeypatch):
    """The golden 70B config (ZeRO 3, bf16) goes through deepspeed.initialize at world 1
    (its train_batch_size 512 over dp 512 scaled to 1 x 1); a DeepSpeed that builds another
    class than the planner charges is a refusal, naming both."""
    _fake_deepspeed(monkeypatch)
    item = ce.deepspeed_item("ds", _golden("llama3-70b.ds_config.json"))
    assert item.payload["optimizer"] == "DeepSpeedZeroOptimizer_Stage3"
    t = _check([item])["deepspeed"]
    assert (t.accepted, t.refused, t.env_failed) == (1, 0, 0), t
    assert sys.modules["deepspeed"].seen == ["DeepSpeedZeroOptimizer_Stage3"]
    assert t.built == {"DeepSpeedZeroOptimizer_Stage3": 1}
    _fake_deepspeed(monkeypatch, built=lambda cfg: "BF16_Optimizer")
    t = _check([item])["deepspeed"]
    assert (t.accepted, t.refused, t.env_failed) == (0, 1, 0), t
    assert "built BF16_Optimizer" in t.first[0] and "DeepSpeedZeroOptimizer_Stage3" in t.first[0]


@pytest.mark.parametrize("stage,accum,offload,expect", [
    (0, "bf16", False, "FP16_UnfusedOptimizer"),   # DDP_BFLOAT16 -> _configure_fp16_optimizer
    (1, "bf16", False, "DeepSpeedZeroOptimizer"),
    (1, "fp32", True, "DeepSpeedZeroOptimizer"),   # offloaded: ZERO_OPTIMIZATION
    (2, "fp32", False, "DeepSpeedZeroOptimizer"),
    (3, "bf16", False, "DeepSpeedZeroOptimizer_Stage3"),
    (1, "fp32", False, None),   # BFLOAT16 == DDP_BFLOAT16: FP16_UnfusedOptimizer, not ZeRO-1
    (0, "fp32", False, None),   # FP16_UnfusedOptimizer accumulates in bf16, not fp32
])
def test_space_configs_expect_the_class_deepspeed_builds(monkeypatch, stage, accum, offload,
                                                         expect):
    """The planner's expectation per config, by hand from engine.py v0.18.0 (each row is
    what deepspeed.initialize built on CPU, gloo, one rank, with a client AdamW or
    DeepSpeedCPUAdam); a file where that class does not run the costing the file states
    (a non-ZeRO wrapper at stage 1, or fp32 accumulation in a bf16 .grad), which the
    exporter refuses to write, is refused before DeepSpeed is asked."""
    zero: dict = {"stage": stage, "overlap_comm": False}
    if offload:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    cfg = {"bf16": {"enabled": True}, "fp16": {"enabled": False},
           "data_types": {"grad_accum_dtype": accum}, "zero_optimization": zero}
    if expect is None:  # the file claims a costing DeepSpeed does not run: refused
        with pytest.raises(ce.Refused, match="DeepSpeed builds FP16_UnfusedOptimizer"):
            ce.planned_optimizer(cfg)
    else:
        assert ce.planned_optimizer(cfg) == expect
    assert ce.world_one({"train_batch_size": 512, "train_micro_batch_size_per_gpu": 2,
                         "gradient_accumulation_steps": 4})["train_batch_size"] == 8


def test_deepspeed_without_the_precision_on_this_device_is_the_machines_failure():
    """DeepSpeed's CPU accelerator has no fp16 (engine.py _do_sanity_check, v0.18.0): an
    fp16 config whose optimizer cannot be built here is environment-failed, not refused."""
    assert ce.environment_failure(ValueError("Type fp16 is not supported on your device."))
    assert ce.environment_failure(AssertionError("deepspeed.initialize built X")) is None
