"""Feed the planner's exports to the frameworks' own parsers and validators and report,
per format, how many each accepts, refuses and could not check (and the first of each).

    python tools/check_exports.py [--sample N] [--seed S] [--only FMT ...]
        [--python FMT=/venv/bin/python ...] [--file EXPORT ...]

Each framework lives in its own virtual environment (megatron-core pins numpy<2, the
planner needs numpy>=2; docs/export.md "Checking exports" has the recipe): ``--python
deepspeed=/work/venvs/ds/bin/python`` checks that format's files in a worker run by that
interpreter (``--worker``), which imports neither the planner nor anything but the
standard library and the framework. Without ``--python`` a format is checked in this
process, if its package imports here.

Inputs: every golden file of examples/launch/; a sample of N plans per framework profile,
drawn with a fixed seed from the whole search space of Llama 3 8B on 16 H100s; the serving
launch commands of a grid of serving plans; the TorchRec plan of a small DLRM solve.

How a file reaches its framework, as a user's launch would:
- every launch (the Megatron script; the launch line in a DeepSpeed config's or torchtitan
  TOML's header; a serving command) runs under real ``bash`` in an empty environment with
  stand-in launchers first on PATH (``torchrun``, ``deepspeed``, ``python``, ``python3``,
  ``vllm``: each records its argv and environment and exits). The framework is handed
  what the stand-in recorded: the launcher's argv, the environment the script exported
  (this tool sets no variable of its own, e.g. not ``CUDA_DEVICE_MAX_CONNECTIONS``), and
  the world the launch line asks for (torchrun ``--nnodes`` x ``--nproc-per-node``,
  DeepSpeed ``--num_nodes`` x ``--num_gpus``; the launchers' own parsers, torch's
  get_args_parser and DeepSpeed's runner.parse_args, must read the same), never one
  recomputed from the file. A
  script bash rejects, one that launches nothing or more than one process, or a launch
  whose world cannot be read, is refused before any framework is asked;
- megatron: megatron.training.arguments parse_args and validate_args, the micro-batch
  calculator over the data-parallel size they derive from the launch's WORLD_SIZE (as
  initialize_megatron does), and core_transformer_config_from_args, on the script's
  arguments with the data, tokenizer and optimizer arguments the script leaves to the user
  (USER_ARGS), as on an H100 node with Transformer Engine TE_VERSION
  (get_device_arch_version answers 9 and the TE version and fused RoPE are stood in:
  there is no GPU here);
- torchtitan: ConfigManager().parse_args on the launch's own arguments (its
  ``--job.config_file``), then ParallelDims over the launch's world;
- deepspeed: deepspeed.launcher.runner.parse_args on the launch line, then
  DeepSpeedConfig with deepspeed.comm's world size answering the launch's world; then
  deepspeed.initialize on DeepSpeed's CPU accelerator (DS_ACCELERATOR=cpu unless set) with
  gloo and one rank, on a two-layer model, with the client optimizer train.py passes
  (torch.optim.AdamW; DeepSpeedCPUAdam when the optimizer is offloaded, as ZeRO-Offload
  demands), the file's config scaled to world 1 (train_batch_size = micro x accumulation,
  every other key as written): the class of engine.optimizer must be the one the planner
  says DeepSpeed builds and charges (planner.export.deepspeed.built_optimizer), else the
  file is refused;
- vllm / sglang: vLLM's EngineArgs and SGLang's ServerArgs argument parsers on the argv
  the stand-in recorded (parsing only: an engine config downloads the model's config);
- torchrec: the whole ShardingPlan: an EmbeddingBagCollection of the model's tables on the
  meta device, each table's ParameterSharding (ShardingType and EmbeddingComputeKernel
  values, ranks inside the world, shards checked by torch's own ShardedTensor validators
  to cover the table without overlap, FBGEMM's construct_split_state for sharded
  kernels), ParameterConstraints, and ShardingPlan over the module, naming exactly its
  tables.

A failure is an environment failure, not a refusal, when the check could not run here
(ENVIRONMENT below: a missing module, torch's CUDA layer or extension builder on a machine
without a GPU, a missing shared library); a format whose package is absent is skipped;
Megatron-Bridge's override path needs one of its recipes and a model provider and is not
automated (skipped, said so). Exit status: 1 when anything was refused, 2 when nothing was
refused but some check did not run (an environment failure, a format named by --only that
was skipped) or nothing at all was checked, else 0.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import random
import re
import shlex
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "examples" / "launch"
#: what a Megatron-LM script leaves to its user (the exported header says so)
USER_ARGS = ["--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "128256",
             "--train-iters", "10", "--lr", "1e-4"]
#: format -> the package whose absence skips it
PACKAGES = {"megatron": "megatron.training", "megatron-bridge": "megatron.bridge",
            "torchtitan": "torchtitan", "deepspeed": "deepspeed", "vllm": "vllm",
            "sglang": "sglang", "torchrec": "torchrec"}
FORMATS = tuple(PACKAGES)
#: catalog framework profile -> its export format
PROFILES = {"megatron-core": "megatron", "nemo": "megatron-bridge", "torchtitan": "torchtitan",
            "deepspeed": "deepspeed"}
#: the sample's seed: the same plans every run, drawn from the whole space
SEED = 40
#: H100 is compute capability 9.0 (NVIDIA CUDA C++ Programming Guide, "Compute
#: Capabilities" table); Megatron's get_device_arch_version returns the major number
H100_ARCH_MAJOR = 9
#: the Transformer Engine Megatron-LM core_v0.15.3 is built with (its pyproject.toml "dev"
#: extra: transformer-engine[pytorch]>=2.9.0a0,<2.10.0); Megatron asks for its version and
#: its fused RoPE, which do not install without CUDA
TE_VERSION = "2.9.0"


class Refused(Exception):
    """The file is refused before any framework is asked (bash, the launch line)."""


@dataclass(frozen=True)
class Item:
    """One file to check: its format, a label, the payload a checker reads, the world the
    launch asks for, the environment the launch exported, and a refusal found while
    launching it (then no framework is asked)."""

    fmt: str
    label: str
    payload: Any
    world: int
    env: dict[str, str] = field(default_factory=dict)
    refusal: str | None = None


@dataclass
class Tally:
    accepted: int = 0
    refused: int = 0
    env_failed: int = 0
    skipped: str | None = None
    first: list[str] = field(default_factory=list)
    #: what the accepted files were seen to build (DeepSpeed: engine.optimizer's class)
    built: dict[str, int] = field(default_factory=dict)

    @property
    def checked(self) -> int:
        return self.accepted + self.refused


# ---- launching under bash with stand-in launchers -----------------------------------------
#: commands a launch may start; each stand-in records its argv and environment
STAND_INS = ("torchrun", "deepspeed", "python", "python3", "vllm")
_STAND_IN = """#!/bin/bash
f="$CHECK_EXPORTS_RECORD/$$.$RANDOM"
printf '%s\\0' "${0##*/}" "$@" > "$f.argv"
env -0 > "$f.env"
"""
#: what the tool itself puts in the launch's environment (not the script's)
_OWN_VARS = {"PATH", "HOME", "PWD", "OLDPWD", "SHLVL", "_", "CHECK_EXPORTS_RECORD", "LC_ALL"}


@dataclass(frozen=True)
class Launch:
    """What one stand-in recorded: argv (argv[0] the command's name) and the environment
    the script gave it, less the tool's own variables."""

    argv: list[str]
    env: dict[str, str]


def run_launch(script: str, files: dict[str, str] | None = None,
               timeout_s: float = 60) -> list[Launch]:
    """Run ``script`` under bash in an empty directory holding ``files``, the stand-ins
    first on PATH; the launches it made, in order. :class:`Refused` when bash fails."""
    with tempfile.TemporaryDirectory(prefix="check_exports.") as tmp:
        bin_dir, rec, work = Path(tmp, "bin"), Path(tmp, "rec"), Path(tmp, "work")
        for d in (bin_dir, rec, work):
            d.mkdir()
        for name in STAND_INS:
            (bin_dir / name).write_text(_STAND_IN)
            (bin_dir / name).chmod(0o755)
        for name, text in (files or {}).items():
            (work / name).write_text(text)
        (work / "launch.sh").write_text(script)
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(work),
               "CHECK_EXPORTS_RECORD": str(rec), "LC_ALL": "C"}
        try:
            p = subprocess.run(["bash", "launch.sh"], cwd=work, env=env, timeout=timeout_s,
                               stdin=subprocess.DEVNULL, capture_output=True, text=True)
        except subprocess.TimeoutExpired:
            raise Refused(f"bash did not finish the launch in {timeout_s:g} s") from None
        if p.returncode:
            raise Refused(f"bash exited {p.returncode}: {p.stderr.strip()[-300:]}")
        out = []
        for argv_file in sorted(rec.glob("*.argv"), key=lambda f: f.stat().st_mtime_ns):
            argv = argv_file.read_bytes().decode().split("\0")[:-1]
            pairs = Path(str(argv_file)[:-5] + ".env").read_bytes().decode().split("\0")
            env_out = dict(kv.split("=", 1) for kv in pairs if "=" in kv)
            out.append(Launch(argv, {k: v for k, v in env_out.items() if k not in _OWN_VARS}))
        return out


def one_launch(launches: list[Launch], expect: tuple[str, ...]) -> Launch:
    """The single launch of a script, by one of the ``expect`` commands."""
    if len(launches) != 1:
        raise Refused(f"the script launched {len(launches)} processes, expected one "
                      f"({' or '.join(expect)})")
    if launches[0].argv[0] not in expect:
        raise Refused(f"the script launched {launches[0].argv[0]!r}, expected "
                      f"{' or '.join(expect)}")
    return launches[0]


#: torchrun's options that take no value (torch/distributed/run.py get_args_parser)
_TORCHRUN_FLAGS = {"--standalone", "-m", "--module", "--no-python", "--no_python",
                   "--run-path", "--run_path"}
#: DeepSpeed launcher's options that take no value (deepspeed/launcher/runner.py parse_args,
#: v0.18.0)
_DS_FLAGS = {"--no_python", "--module", "--no_local_rank", "--no_ssh_check", "--force_multi",
             "--save_pid", "--enable_each_rank_log", "--autotuning", "--elastic_training",
             "--bind_cores_to_rank", "--no_ssh", "--venv_script"}


def launcher_options(argv: list[str], flags: set[str]) -> tuple[dict[str, str], list[str]]:
    """A launcher's ``--opt value`` / ``--opt=value`` options up to its program, and the
    program with its arguments."""
    opts: dict[str, str] = {}
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        word = argv[i]
        if "=" in word:
            key, value = word.split("=", 1)
            opts[key] = value
            i += 1
        elif word in flags:
            opts[word] = ""
            i += 1
        elif i + 1 < len(argv):
            opts[word] = argv[i + 1]
            i += 2
        else:
            raise Refused(f"launcher option {word} has no value")
    return opts, argv[i:]


def _count(opts: dict[str, str], names: tuple[str, ...], what: str) -> int:
    for name in names:
        if name in opts:
            if not re.fullmatch(r"[1-9][0-9]*", opts[name]):
                raise Refused(f"{name} {opts[name]!r}: expected a fixed number of {what}")
            return int(opts[name])
    raise Refused(f"the launch line names no {' / '.join(names)}: its world is unknown")


def torchrun_launch(launch: Launch) -> tuple[int, list[str]]:
    """(world, program argv) of a torchrun launch (also ``python -m torch.distributed.run``)."""
    argv = launch.argv[1:]
    if launch.argv[0] in ("python", "python3"):
        if argv[:2] != ["-m", "torch.distributed.run"]:
            raise Refused(f"the script runs python {' '.join(argv[:2])}, not torchrun")
        argv = argv[2:]
    opts, program = launcher_options(argv, _TORCHRUN_FLAGS)
    nodes = _count(opts, ("--nnodes",), "nodes")
    per_node = _count(opts, ("--nproc-per-node", "--nproc_per_node"), "processes per node")
    if "-m" in opts or "--module" in opts:
        program = ["-m", *program]
    return nodes * per_node, program


def deepspeed_launch(launch: Launch) -> tuple[int, list[str]]:
    """(world, program argv) of a ``deepspeed`` launcher line."""
    opts, program = launcher_options(launch.argv[1:], _DS_FLAGS)
    nodes = _count(opts, ("--num_nodes",), "nodes")
    return nodes * _count(opts, ("--num_gpus",), "GPUs per node"), program


def _header_launch(lines: list[str], prefix: str) -> str:
    found = [ln[len(prefix):] for ln in lines if ln.startswith(prefix)]
    if len(found) != 1:
        raise Refused(f"expected one '{prefix}...' line in the header, found {len(found)}")
    return found[0]


def _launched(fmt: str, label: str, make: Callable[[], tuple[Any, int, dict[str, str]]]
              ) -> Item:
    try:
        payload, world, env = make()
    except Refused as e:
        return Item(fmt, label, None, 0, {}, f"launch: {e}")
    return Item(fmt, label, payload, world, env)


# ---- what is checked ----------------------------------------------------------------------
def megatron_item(label: str, text: str) -> Item:
    def make() -> tuple[Any, int, dict[str, str]]:
        launch = one_launch(run_launch(text), ("torchrun", "python", "python3"))
        world, program = torchrun_launch(launch)
        if not program or not program[0].endswith(".py"):
            raise Refused(f"torchrun runs {program[:1]}, expected Megatron's pretrain_*.py")
        return {"args": program[1:], "launch": launch.argv}, world, launch.env
    return _launched("megatron", label, make)


def deepspeed_item(label: str, text: str) -> Item:
    def make() -> tuple[Any, int, dict[str, str]]:
        try:
            header = json.loads(text).get("planner_export", [])
        except json.JSONDecodeError as e:
            raise Refused(f"not JSON: {e}") from None
        line = _header_launch(header, "launch: ").replace("THIS_FILE", "ds_config.json")
        launch = one_launch(run_launch(line, {"ds_config.json": text}), ("deepspeed",))
        world, program = deepspeed_launch(launch)
        if program[-2:] != ["--deepspeed_config", "ds_config.json"]:
            raise Refused("the launch line does not pass this file as --deepspeed_config")
        config = json.loads(text)
        return ({"config": config, "launch": launch.argv[1:],
                 "optimizer": planned_optimizer(config)}, world, launch.env)
    return _launched("deepspeed", label, make)


def planned_optimizer(config: dict) -> str:
    """The optimizer class the planner says DeepSpeed builds from ``config`` around the
    client optimizer this tool passes (not FusedAdam); :class:`Refused` when that class
    does not run what the cost model charges for the config (``uncosted``)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from planner.export.deepspeed import built_optimizer, uncosted

    try:
        built, why = built_optimizer(config), uncosted(config)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise Refused(f"the planner says DeepSpeed builds no optimizer from it: {e}") from None
    if why:
        raise Refused(why)
    return built


def torchtitan_item(label: str, text: str) -> Item:
    def make() -> tuple[Any, int, dict[str, str]]:
        line = _header_launch(text.splitlines(), "# launch: ")
        line = line.replace("THIS_FILE", "job.toml")
        launch = one_launch(run_launch(line, {"job.toml": text}), ("torchrun", "python",
                                                                   "python3"))
        world, program = torchrun_launch(launch)
        if program[:2] != ["-m", "torchtitan.train"]:
            raise Refused(f"torchrun runs {' '.join(program[:2])}, expected -m torchtitan.train")
        return ({"args": program[2:], "files": {"job.toml": text}, "launch": launch.argv},
                world, launch.env)
    return _launched("torchtitan", label, make)


READERS: dict[str, Callable[[str, str], Item]] = {
    "megatron": megatron_item, "deepspeed": deepspeed_item, "torchtitan": torchtitan_item,
    "megatron-bridge": lambda label, text: Item("megatron-bridge", label, text.splitlines(), 0)}
SUFFIXES = {".megatron.sh": "megatron", ".ds_config.json": "deepspeed",
            ".torchtitan.toml": "torchtitan", ".bridge.txt": "megatron-bridge"}


def file_item(path: Path) -> Item:
    """The item of one exported file, its format named by its suffix."""
    for suffix, fmt in SUFFIXES.items():
        if path.name.endswith(suffix):
            return READERS[fmt](str(path), path.read_text())
    raise SystemExit(f"--file {path}: expected a name ending in {', '.join(SUFFIXES)}")


def golden_items() -> Iterator[Item]:
    for path in sorted(GOLDEN.iterdir()):
        for suffix, fmt in SUFFIXES.items():
            if path.name.endswith(suffix):
                yield READERS[fmt](f"golden {path.name}", path.read_text())


def space_items(n: int, seed: int = SEED, profiles: dict[str, str] | None = None
                ) -> Iterator[Item]:
    """``n`` plans per profile drawn with ``seed`` from its whole space (Llama 3 8B, 16
    H100s), in the drawn order; plans the exporter itself refuses are not the frameworks'
    to judge and are passed over (the next drawn plan takes their place)."""
    sys.path.insert(0, str(ROOT))
    from dataclasses import replace

    from formulations.train.space import SearchSpace, SpaceOptions
    from planner.costmodel.frameworks import framework_defaults
    from planner.errors import InputError
    from planner.export import export_plan
    from planner.specs.framework import load_framework
    from planner.specs.loaders import load_cluster, load_model
    from planner.specs.plan_base import model_defaults

    model = load_model("llama3-8b")
    cluster = load_cluster("dgx-h100-superpod").resized(16)
    base = {**model_defaults(model), "seq_len": 4096, "global_batch_size": 64}
    for name, fmt in (PROFILES if profiles is None else profiles).items():
        profile = load_framework(name)
        opts = replace(SpaceOptions(max_microbatch=2, max_virtual_stages=2), framework=profile)
        space = SearchSpace(model, cluster, framework_defaults(profile, base, set(base)), {},
                            opts)
        plans = list(space)
        order = random.Random(seed).sample(range(len(plans)), len(plans))
        taken = 0
        for k in order:
            if taken == n:
                break
            try:
                text = export_plan(fmt, space.plan(*plans[k]), model, cluster)
            except InputError:
                continue
            taken += 1
            yield READERS[fmt](f"space {name} #{k} of {len(plans)}", text)


def serving_item(engine: str, label: str, command: str) -> Item:
    def make() -> tuple[Any, int, dict[str, str]]:
        expect = ("vllm",) if engine == "vllm" else ("python", "python3")
        launch = one_launch(run_launch(command), expect)
        return launch.argv, 0, launch.env
    return _launched(engine, label, make)


def serving_items() -> Iterator[Item]:
    sys.path.insert(0, str(ROOT))
    from planner.export.serve_launch import launch_commands
    from planner.specs.serve import ServePlan

    for tp in (1, 2, 8):
        for kv, wd in (("bf16", "bf16"), ("fp8", "fp8"), ("fp8", "int4")):
            decode = ServePlan(tp=tp, kv_dtype=kv, weight_dtype=wd, concurrency=128)
            for plan in (decode, decode.model_copy(update={"prefill": ServePlan(tp=tp)})):
                cmds = launch_commands("meta-llama/Meta-Llama-3-8B", plan)
                for engine in ("vllm", "sglang"):
                    for pool in cmds[engine]:
                        yield serving_item(engine, f"serve tp{tp} {kv}/{wd} {pool['pool']}",
                                           pool["command"])


def torchrec_items() -> Iterator[Item]:
    """The whole TorchRec plan of a small DLRM solve, one item."""
    sys.path.insert(0, str(ROOT))
    from formulations.dlrm.search import solve_sharding
    from planner.export.torchrec import torchrec_plan
    from planner.specs.loaders import load_cluster, load_model

    model, cluster = load_model("criteo-dlrm"), load_cluster("zionex-128").resized(8)
    sol = solve_sharding(model, cluster, "cpsat", 5)
    tables = {}
    for t in model.tables:
        for name in [t.name] if t.count == 1 else [f"{t.name}_{i}" for i in range(t.count)]:
            tables[name] = [t.rows, t.dim]
    plan = torchrec_plan(model, cluster, sol.plan)
    yield Item("torchrec", f"criteo-dlrm on {cluster.num_gpus} GPUs "
               f"({len(plan['sharding_plan'])} tables)", {"plan": plan, "tables": tables},
               cluster.num_gpus)


# ---- the frameworks' own code (imported only when installed) ------------------------------
def _script_env(env: dict[str, str], world: int) -> dict[str, str]:
    """This process's environment less what a launch script may set, plus what the script
    exported and what torchrun gives rank 0 of ``world``."""
    ours = {k: v for k, v in os.environ.items()
            if k != "CUDA_DEVICE_MAX_CONNECTIONS" and not k.startswith(("NCCL_", "NVTE_"))}
    return {**ours, **env, "WORLD_SIZE": str(world), "RANK": "0", "LOCAL_RANK": "0"}


def _same_world_as_torchrun(item: Item) -> None:
    """torch's own torchrun parser (torch/distributed/run.py get_args_parser) reads the
    launch's world as this tool did; skipped only where torch is absent (the tests'
    stand-in frameworks; every framework's environment has torch)."""
    try:
        from torch.distributed.run import get_args_parser
    except ImportError:
        return
    argv = item.payload["launch"][1:]
    if argv[:2] == ["-m", "torch.distributed.run"]:
        argv = argv[2:]
    a = get_args_parser().parse_args(argv)
    world = int(a.nnodes) * int(a.nproc_per_node)
    if world != item.world:
        raise AssertionError(f"torchrun reads a world of {world}, this tool {item.world}")


def _with_transformer_engine(stack: contextlib.ExitStack) -> None:
    """Megatron as on a node with Transformer Engine TE_VERSION: megatron.core.utils'
    cached TE version, and rope_utils' fused RoPE functions present (never called: no
    model is built). Nothing to do for a Megatron without megatron.core (a stand-in)."""
    try:
        import megatron.core.models.common.embeddings.rope_utils as rope
        import megatron.core.utils as mcu
    except ModuleNotFoundError as e:  # the tests' stand-in has no megatron.core models
        if e.name not in ("megatron.core.models", "megatron.core.utils"):
            raise
        return
    from packaging.version import Version

    def fused_rope_stand_in(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("Transformer Engine's fused RoPE is not here: only checked for")

    stack.enter_context(mock.patch.object(mcu, "_te_version", Version(TE_VERSION)))
    for name in ("fused_apply_rotary_pos_emb", "fused_apply_rotary_pos_emb_thd"):
        stack.enter_context(mock.patch.object(rope, name, fused_rope_stand_in))


def check_megatron(item: Item) -> None:
    import megatron.training.arguments as margs
    from megatron.core.num_microbatches_calculator import (init_num_microbatches_calculator,
                                                           unset_num_microbatches_calculator)

    _same_world_as_torchrun(item)
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.dict(os.environ, _script_env(item.env, item.world),
                                            clear=True))
        stack.enter_context(mock.patch.object(
            sys, "argv", ["pretrain_gpt.py", *item.payload["args"], *USER_ARGS]))
        stack.enter_context(mock.patch.object(margs, "get_device_arch_version",
                                              lambda: H100_ARCH_MAJOR, create=True))
        _with_transformer_engine(stack)
        args = margs.parse_args()
        margs.validate_args(args, {})
        # what initialize_megatron's set_global_variables does next with the data-parallel
        # size validate_args derived from WORLD_SIZE (megatron/training/global_vars.py)
        init_num_microbatches_calculator(
            args.rank, args.rampup_batch_size, args.global_batch_size,
            args.micro_batch_size, args.data_parallel_size,
            args.decrease_batch_size_if_needed)
        unset_num_microbatches_calculator()
        margs.core_transformer_config_from_args(args)


def check_torchtitan(item: Item) -> None:
    from torchtitan.config import ConfigManager
    from torchtitan.distributed import ParallelDims

    _same_world_as_torchrun(item)
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in item.payload["files"].items():
            Path(tmp, name).write_text(text)
        os.chdir(tmp)
        try:
            par = ConfigManager().parse_args(item.payload["args"]).parallelism
        finally:
            os.chdir(cwd)
    ParallelDims(dp_replicate=par.data_parallel_replicate_degree,
                 dp_shard=par.data_parallel_shard_degree, cp=par.context_parallel_degree,
                 tp=par.tensor_parallel_degree, pp=par.pipeline_parallel_degree,
                 ep=par.expert_parallel_degree, etp=par.expert_tensor_parallel_degree,
                 world_size=item.world)


def check_deepspeed(item: Item) -> str:
    import deepspeed.runtime.config as ds_config

    try:
        from deepspeed.launcher.runner import parse_args as ds_launcher_args
    except ImportError:  # a stand-in DeepSpeed without its launcher (the tests)
        ds_launcher_args = None
    if ds_launcher_args is not None:
        a = ds_launcher_args(item.payload["launch"])
        if a.num_nodes * a.num_gpus != item.world:
            raise AssertionError(f"DeepSpeed's launcher reads a world of "
                                 f"{a.num_nodes * a.num_gpus}, this tool {item.world}")
    with mock.patch.object(ds_config.dist, "get_rank", lambda *a, **k: 0), \
            mock.patch.object(ds_config.dist, "get_world_size", lambda *a, **k: item.world):
        ds_config.DeepSpeedConfig(item.payload["config"])
    built = ds_built_optimizer(item.payload["config"])
    if built != item.payload["optimizer"]:
        raise AssertionError(f"deepspeed.initialize built {built}; the planner charges "
                             f"{item.payload['optimizer']}")
    return built


def world_one(config: dict) -> dict:
    """``config`` as one rank runs it: ``train_batch_size`` = micro x accumulation x 1
    (DeepSpeedConfig asserts that product over deepspeed.comm's world, _batch_assertion in
    deepspeed/runtime/config.py, v0.18.0); every other key as written."""
    return {**config, "train_batch_size": config["train_micro_batch_size_per_gpu"]
            * config["gradient_accumulation_steps"]}


def ds_client(config: dict) -> tuple[Any, Any]:
    """A two-layer model and the client optimizer a train.py passes: torch.optim.AdamW, or
    DeepSpeedCPUAdam with the optimizer offloaded (engine._configure_optimizer raises for
    any other client optimizer under ZeRO-Offload, zero_force_ds_cpu_optimizer, v0.18.0)."""
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 16))
    offload = ((config.get("zero_optimization") or {}).get("offload_optimizer")
               or {}).get("device") == "cpu"
    if offload:
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        return model, DeepSpeedCPUAdam(model.parameters())
    return model, torch.optim.AdamW(model.parameters())


_DS_RANK = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}


def ds_built_optimizer(config: dict) -> str:
    """The class of ``engine.optimizer`` deepspeed.initialize builds from ``config`` at
    world 1, on gloo (one process group for the whole run)."""
    import deepspeed

    if not deepspeed.comm.is_initialized():
        import socket

        with socket.socket() as s:  # a free port for the one-rank rendezvous
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(_DS_RANK, MASTER_PORT=str(port))
        deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
    model, optimizer = ds_client(config)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer,
                                      config=world_one(config))
    return type(engine.optimizer).__name__


def _vllm_parser() -> Any:
    from vllm.engine.arg_utils import EngineArgs

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser  # type: ignore[no-redef]
    return EngineArgs.add_cli_args(FlexibleArgumentParser())


def check_vllm(item: Item) -> None:
    words = item.payload
    assert words[:2] == ["vllm", "serve"], words[:2]
    _vllm_parser().parse_args(["--model", words[2], *words[3:]])


def check_sglang(item: Item) -> None:
    from sglang.srt.server_args import ServerArgs

    words = item.payload
    assert words[1:3] == ["-m", "sglang.launch_server"], words[:3]
    parser = argparse.ArgumentParser(exit_on_error=False)
    ServerArgs.add_cli_args(parser)
    parser.parse_args(words[3:])


def check_torchrec(item: Item) -> None:
    import torch
    from torch.distributed._shard.sharding_spec import EnumerableShardingSpec, ShardMetadata
    from torch.distributed._shard.sharding_spec._internals import check_tensor
    from torchrec.distributed.embedding_types import EmbeddingComputeKernel
    from torchrec.distributed.planner.types import ParameterConstraints
    from torchrec.distributed.types import (EmbeddingModuleShardingPlan, ParameterSharding,
                                            ShardingPlan, ShardingType)
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    plan, tables = item.payload["plan"], item.payload["tables"]
    ebc = EmbeddingBagCollection(
        [EmbeddingBagConfig(name=n, embedding_dim=d, num_embeddings=r, feature_names=[n])
         for n, (r, d) in tables.items()], device=torch.device("meta"))
    weights = {n: tuple(m.weight.shape) for n, m in ebc.embedding_bags.items()}
    if set(plan["sharding_plan"]) != set(weights):
        raise AssertionError(f"the plan names {sorted(plan['sharding_plan'])}, the module "
                             f"{sorted(weights)}")
    module_plan = EmbeddingModuleShardingPlan()
    for name, sharding in plan["sharding_plan"].items():
        kind = ShardingType(sharding["sharding_type"])
        kernel = EmbeddingComputeKernel(sharding["compute_kernel"])
        if not all(0 <= r < item.world for r in sharding["ranks"]):
            raise AssertionError(f"{name}: ranks {sharding['ranks']} outside a world of "
                                 f"{item.world}")
        spec = sharding["sharding_spec"]
        if spec is not None:
            spec = EnumerableShardingSpec([ShardMetadata(**s) for s in spec])  # no overlap
            check_tensor(spec.shards, torch.Size(weights[name]))  # covers the table
            if kernel != EmbeddingComputeKernel.DENSE:
                from fbgemm_gpu.split_table_batched_embeddings_ops_common import (
                    EmbeddingLocation)
                from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
                    ComputeDevice, construct_split_state)

                construct_split_state([(s.shard_sizes[0], s.shard_sizes[1],
                                        EmbeddingLocation.DEVICE, ComputeDevice.CUDA)
                                       for s in spec.shards], rowwise=True, cacheable=False)
        elif kind != ShardingType.DATA_PARALLEL:
            raise AssertionError(f"{name}: {kind.value} with no shards")
        module_plan[name] = ParameterSharding(**{**sharding, "sharding_spec": spec})
        constraints = plan["parameter_constraints"][name]
        ParameterConstraints(**{k: v for k, v in constraints.items() if k != "cache_params"})
    full = ShardingPlan({"embedding_bags": module_plan})
    if full.get_plan_for_module("embedding_bags") is not module_plan:
        raise AssertionError("ShardingPlan does not hold the module's plan")
    str(full)  # ShardingPlan.__str__ tabulates every shard of every table


CHECKERS: dict[str, Callable[[Item], Any] | None] = {
    "megatron": check_megatron, "megatron-bridge": None, "torchtitan": check_torchtitan,
    "deepspeed": check_deepspeed, "vllm": check_vllm, "sglang": check_sglang,
    "torchrec": check_torchrec}


# ---- refusal or environment ---------------------------------------------------------------
#: a message that says the machine, not the file, is at fault: torch's CUDA layer without a
#: driver or GPU (torch/cuda/__init__.py _lazy_init: "Found no NVIDIA driver on your
#: system", "Torch not compiled with CUDA enabled", "No CUDA GPUs are available"), a shared
#: library that does not load, a framework asking for a package (Megatron's "Please install
#: TE >= 1.4", megatron/core/transformer/transformer_config.py, core_v0.15.3), vLLM finding
#: no platform ("Failed to infer device type", vllm/config/device.py DeviceConfig, v0.33.0),
#: DeepSpeed's accelerator without the precision ("Type fp16 is not supported on your
#: device": the CPU accelerator has no fp16, engine.py _do_sanity_check, v0.18.0)
ENV_MESSAGE = re.compile(r"no NVIDIA driver|not compiled with CUDA|No CUDA GPUs|CUDA driver"
                         r"|libcuda|libnccl|cannot open shared object|Please install"
                         r"|Failed to infer device type|is not supported on your device",
                         re.IGNORECASE)
#: code whose failure is the machine's: torch's CUDA layer, its extension builder (which
#: indexes an empty CUDA arch list on a machine without a GPU unless TORCH_CUDA_ARCH_LIST is
#: set: torch/utils/cpp_extension.py _get_cuda_arch_flags)
ENV_FRAMES = re.compile(r"[/\\]torch[/\\](cuda[/\\]|utils[/\\]cpp_extension\.py)")


def environment_failure(exc: BaseException) -> str | None:
    """Why ``exc`` is the environment's failure (a missing module, no GPU, the CUDA arch
    list, a shared library), or None when it is the framework refusing the file."""
    if isinstance(exc, ImportError):
        return f"missing module: {exc}"
    if isinstance(exc, OSError) and not isinstance(exc, FileNotFoundError):
        return f"{type(exc).__name__}: {exc}"
    if ENV_MESSAGE.search(str(exc)):
        return f"no GPU: {type(exc).__name__}: {exc}"
    frames = traceback.extract_tb(exc.__traceback__)
    for frame in frames:
        if ENV_FRAMES.search(frame.filename):
            return (f"torch's CUDA layer ({Path(frame.filename).name}:{frame.lineno}): "
                    f"{type(exc).__name__}: {exc}")
    return None


def missing(fmt: str) -> tuple[str | None, str | None]:
    """(why ``fmt`` is skipped, why its package failed to import), both None when it can
    be checked: a package that is not there skips its format; one that is there but whose
    own imports fail (a missing dependency) is an environment failure."""
    if CHECKERS[fmt] is None:
        return ("no automated check: Megatron-Bridge's override path needs one of its "
                "recipes and a model provider", None)
    if fmt == "megatron" and os.environ.get("MEGATRON_LM"):
        sys.path.insert(0, os.environ["MEGATRON_LM"])
    if fmt == "deepspeed":  # no GPU here: DeepSpeed's CPU accelerator (real_accelerator.py)
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    package = PACKAGES[fmt]
    try:
        importlib.import_module(package)
    except ImportError as e:
        parts = package.split(".")
        own = {".".join(parts[:k]) for k in range(1, len(parts) + 1)}
        if e.name in own:
            hint = " (set MEGATRON_LM to a Megatron-LM clone)" if fmt == "megatron" else ""
            return f"package {package} not installed{hint}", None
        return None, f"importing {package}: {type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001 - any failure while importing is the machine's
        return None, f"importing {package}: {type(e).__name__}: {str(e)[:300]}"
    return None, None


def _note(t: Tally, kind: str, label: str, why: str) -> None:
    if len(t.first) < 6:
        t.first.append(f"{kind}: {label}: {why[:400]}")


def run(items: list[Item]) -> dict[str, Tally]:
    """Each item through its format's checker. An item refused at its launch is counted
    refused whatever is installed; a format whose package is absent is skipped, its other
    items not counted; an item whose check could not run here is environment-failed."""
    out: dict[str, Tally] = {}
    broken: dict[str, str | None] = {}
    for item in items:
        if item.fmt not in out:
            skipped, broken[item.fmt] = missing(item.fmt)
            out[item.fmt] = Tally(skipped=skipped)
        t = out[item.fmt]
        if item.refusal is not None:
            t.refused += 1
            _note(t, "refused", item.label, item.refusal)
            continue
        if t.skipped:
            continue
        if broken[item.fmt]:
            t.env_failed += 1
            _note(t, "environment", item.label, broken[item.fmt] or "")
            continue
        said = io.StringIO()  # argparse says why on stderr, then exits
        try:
            with contextlib.redirect_stderr(said):
                seen = CHECKERS[item.fmt](item)  # type: ignore[misc]
        except (Exception, SystemExit) as e:
            why = environment_failure(e)
            if why is not None:
                t.env_failed += 1
                _note(t, "environment", item.label, why)
            else:
                t.refused += 1
                last = said.getvalue().strip().splitlines()[-1:] if isinstance(
                    e, SystemExit) else []
                _note(t, "refused", item.label, " ".join([f"{type(e).__name__}: {e}", *last]))
        else:
            t.accepted += 1
            if isinstance(seen, str):
                t.built[seen] = t.built.get(seen, 0) + 1
    return out


def run_in(python: str, items: list[Item], timeout_s: float = 3600) -> dict[str, Tally]:
    """:func:`run` in a worker run by another interpreter (a framework's environment); a
    worker that dies leaves every item environment-failed."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "items.json")
        src.write_text(json.dumps([asdict(i) for i in items]))
        try:
            p = subprocess.run([python, str(Path(__file__).resolve()), "--worker", str(src)],
                               capture_output=True, text=True, timeout=timeout_s)
            result = json.loads(p.stdout.splitlines()[-1]) if p.returncode == 0 else None
            why = f"worker {python} exited {p.returncode}: {p.stderr.strip()[-400:]}"
        except (OSError, subprocess.TimeoutExpired, IndexError, json.JSONDecodeError) as e:
            result, why = None, f"worker {python}: {type(e).__name__}: {e}"
    if result is None:
        out: dict[str, Tally] = {}
        for item in items:
            t = out.setdefault(item.fmt, Tally())
            t.env_failed += 1
            _note(t, "environment", item.label, why)
        return out
    return {fmt: Tally(**t) for fmt, t in result.items()}


def report(tallies: dict[str, Tally], only: list[str]) -> int:
    """Print per format; the exit status (see the module's docstring)."""
    refused = incomplete = checked = 0
    for fmt, t in tallies.items():
        refused += t.refused
        checked += t.checked
        incomplete += t.env_failed + (fmt in only and (t.skipped is not None or not t.checked))
        counts = (f"{t.accepted} accepted, {t.refused} refused, "
                  f"{t.env_failed} environment-failed")
        print(f"{fmt}: skipped: {t.skipped} ({counts})" if t.skipped else f"{fmt}: {counts}")
        for line in t.first:
            print(f"  {line}")
        if t.built:
            print("  built: " + ", ".join(f"{k} x{n}" for k, n in sorted(t.built.items())))
    if refused:
        return 1
    if not checked:
        print("nothing was checked: every format was skipped or failed to run here")
        return 2
    return 2 if incomplete else 0


def _python_option(text: str) -> tuple[str, str]:
    fmt, sep, path = text.partition("=")
    if not sep or fmt not in FORMATS or not path:
        raise argparse.ArgumentTypeError(
            f"--python {text!r}: expected FORMAT=/path/to/python with FORMAT one of "
            f"{', '.join(FORMATS)}")
    return fmt, path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=int, default=100,
                    help="plans per framework space (default 100)")
    ap.add_argument("--seed", type=int, default=SEED, help=f"the sample's seed ({SEED})")
    ap.add_argument("--no-sample", action="store_true", help="golden files only")
    ap.add_argument("--file", action="append", type=Path, default=[],
                    help="check this exported file instead of the golden files and samples "
                         f"(repeatable; its name ends in {', '.join(SUFFIXES)})")
    ap.add_argument("--only", action="append", choices=FORMATS, default=[],
                    help="check only this format (repeatable); its skip is a failure")
    ap.add_argument("--python", action="append", type=_python_option, default=[],
                    metavar="FORMAT=PYTHON", help="check FORMAT with this interpreter")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        items = [Item(**d) for d in json.loads(Path(a.worker).read_text())]
        print(json.dumps({f: asdict(t) for f, t in run(items).items()}))
        return 0
    if a.sample < 1:
        ap.error(f"--sample: expected a positive number of plans, got {a.sample}")
    wanted = set(a.only or FORMATS)
    if a.file:
        items = [i for i in map(file_item, a.file) if i.fmt in wanted]
    else:
        items = [i for i in golden_items() if i.fmt in wanted]
    if not a.no_sample and not a.file:
        profiles = {p: f for p, f in PROFILES.items() if f in wanted}
        items += list(space_items(a.sample, a.seed, profiles))
        if wanted & {"vllm", "sglang"}:
            items += [i for i in serving_items() if i.fmt in wanted]
        if "torchrec" in wanted:
            items += list(torchrec_items())
    pythons = dict(a.python)
    tallies = run([i for i in items if i.fmt not in pythons])
    for fmt, python in pythons.items():
        tallies.update(run_in(python, [i for i in items if i.fmt == fmt]))
    return report(tallies, a.only)


if __name__ == "__main__":
    sys.exit(main())
