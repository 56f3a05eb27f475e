"""Feed the planner's exports to the frameworks' own parsers and validators and report,
per format, how many each accepts and refuses (and the first refusals).

    pip install -e '.[check-exports]'    # DeepSpeed, torchtitan, TorchRec, vLLM, SGLang
    MEGATRON_LM=/path/to/Megatron-LM python tools/check_exports.py [--sample N]

Inputs: every golden file of examples/launch/ and a sample of N plans (every k-th) of the
whole search space of Llama 3 8B on 16 H100s under each framework's profile, the serving
launch commands of a grid of serving plans, and the TorchRec plan of a small DLRM solve.
A format whose package is not importable is reported as skipped, naming the package;
Megatron-LM is not a pip package with its training arguments, so it is read from the
clone that $MEGATRON_LM names (core_v0.15.3). Megatron-Bridge's override path needs one
of its recipes and a model provider: not automated here (skipped, said so).

What each check runs (the versions the exporters follow, docs/export.md):
- megatron: megatron.training.arguments parse_args, validate_args and
  core_transformer_config_from_args, with WORLD_SIZE the script's world and the data,
  tokenizer and optimizer arguments the script leaves to the user (USER_ARGS);
- torchtitan: torchtitan.config.ConfigManager().parse_args(--job.config_file) and
  torchtitan.distributed.ParallelDims over the launch's world;
- deepspeed: deepspeed.runtime.config.DeepSpeedConfig with the data-parallel world the
  config's batch arithmetic names (DeepSpeed reads it from torch.distributed, stubbed);
- vllm / sglang: vLLM's EngineArgs and SGLang's ServerArgs argument parsers (parsing only:
  building an engine config downloads the model's config);
- torchrec: TorchRec's ParameterSharding / ParameterConstraints and FBGEMM's
  construct_split_state for each sharded table.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shlex
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.export import export_plan  # noqa: E402
from planner.export.shell import command_words  # noqa: E402

GOLDEN = ROOT / "examples" / "launch"
#: what a Megatron-LM script leaves to its user (the exported header says so)
USER_ARGS = ["--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "128256",
             "--train-iters", "10", "--lr", "1e-4"]
#: format -> the package whose absence skips it
PACKAGES = {"megatron": "megatron.training", "megatron-bridge": "megatron.bridge",
            "torchtitan": "torchtitan", "deepspeed": "deepspeed", "vllm": "vllm",
            "sglang": "sglang", "torchrec": "torchrec"}
#: catalog framework profile -> its export format
PROFILES = {"megatron-core": "megatron", "nemo": "megatron-bridge", "torchtitan": "torchtitan",
            "deepspeed": "deepspeed"}


@dataclass(frozen=True)
class Item:
    """One file to check: its format, a label, the payload a checker reads, the GPUs."""

    fmt: str
    label: str
    payload: Any
    world: int


@dataclass
class Tally:
    accepted: int = 0
    refused: int = 0
    skipped: str | None = None
    first: list[str] | None = None


# ---- what is checked ---------------------------------------------------------------------
def megatron_item(label: str, text: str) -> Item:
    before, args = command_words(text)
    nodes = int(before[before.index("--nnodes") + 1])
    per_node = int(before[before.index("--nproc-per-node") + 1])
    return Item("megatron", label, args, nodes * per_node)


def deepspeed_item(label: str, text: str) -> Item:
    cfg = json.loads(text)
    per_rank = cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"]
    return Item("deepspeed", label, cfg, cfg["train_batch_size"] // per_rank)


def torchtitan_item(label: str, text: str) -> Item:
    import tomllib

    par = tomllib.loads(text)["parallelism"]
    world = 1
    for key in ("data_parallel_replicate_degree", "data_parallel_shard_degree",
                "tensor_parallel_degree", "pipeline_parallel_degree", "context_parallel_degree"):
        world *= int(par.get(key, 1))
    return Item("torchtitan", label, text, world)


READERS: dict[str, Callable[[str, str], Item]] = {
    "megatron": megatron_item, "deepspeed": deepspeed_item, "torchtitan": torchtitan_item,
    "megatron-bridge": lambda label, text: Item("megatron-bridge", label, text.splitlines(), 0)}
SUFFIXES = {".megatron.sh": "megatron", ".ds_config.json": "deepspeed",
            ".torchtitan.toml": "torchtitan", ".bridge.txt": "megatron-bridge"}


def golden_items() -> Iterator[Item]:
    for path in sorted(GOLDEN.iterdir()):
        for suffix, fmt in SUFFIXES.items():
            if path.name.endswith(suffix):
                yield READERS[fmt](f"golden {path.name}", path.read_text())


def space_items(n: int) -> Iterator[Item]:
    """Every k-th plan of each profile's whole space (Llama 3 8B, 16 H100s), up to ``n``
    per format; plans the exporter itself refuses are not the frameworks' to judge."""
    from dataclasses import replace

    from formulations.train.space import SearchSpace, SpaceOptions
    from planner.specs.framework import load_framework
    from planner.specs.loaders import load_cluster, load_model
    from planner.specs.plan_base import model_defaults

    model = load_model("llama3-8b")
    cluster = load_cluster("dgx-h100-superpod").resized(16)
    base = {**model_defaults(model), "seq_len": 4096, "global_batch_size": 64}
    for name, fmt in PROFILES.items():
        opts = replace(SpaceOptions(max_microbatch=2, max_virtual_stages=2),
                       framework=load_framework(name))
        space = SearchSpace(model, cluster, base, {}, opts)
        plans = list(space)
        step = max(1, len(plans) // max(n, 1))
        for k, (o, d, i) in enumerate(plans[::step][:n]):
            plan = space.plan(o, d, i)
            text = export_plan(fmt, plan, model, cluster)
            yield READERS[fmt](f"space {name} #{k * step}", text)


def serving_items() -> Iterator[Item]:
    from planner.export.serve_launch import launch_commands
    from planner.specs.serve import ServePlan

    for tp in (1, 2, 8):
        for kv, wd in (("bf16", "bf16"), ("fp8", "fp8"), ("fp8", "int4")):
            decode = ServePlan(tp=tp, kv_dtype=kv, weight_dtype=wd, concurrency=128)
            for plan in (decode, decode.model_copy(update={"prefill": ServePlan(tp=tp)})):
                cmds = launch_commands("meta-llama/Meta-Llama-3-8B", plan)
                for engine in ("vllm", "sglang"):
                    for pool in cmds[engine]:
                        yield Item(engine, f"serve tp{tp} {kv}/{wd} {pool['pool']}",
                                   shlex.split(pool["command"]), tp)


def torchrec_items() -> Iterator[Item]:
    from formulations.dlrm.search import solve_sharding
    from planner.export.torchrec import torchrec_plan
    from planner.specs.loaders import load_cluster, load_model

    model, cluster = load_model("criteo-dlrm"), load_cluster("zionex-128").resized(8)
    sol = solve_sharding(model, cluster, "cpsat", 5)
    data = torchrec_plan(model, cluster, sol.plan)
    dims = {t.name: t.dim for t in model.tables}
    for name, sharding in data["sharding_plan"].items():
        base = name if name in dims else name.rsplit("_", 1)[0]
        yield Item("torchrec", f"criteo-dlrm {name}",
                   (sharding, data["parameter_constraints"][name], dims[base]), 8)


# ---- the frameworks' own code (imported only when installed) ----------------------------
def check_megatron(item: Item) -> None:
    from megatron.training.arguments import (core_transformer_config_from_args, parse_args,
                                             validate_args)

    env = {"WORLD_SIZE": str(item.world), "RANK": "0", "LOCAL_RANK": "0",
           "CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    with mock.patch.dict(os.environ, env), \
            mock.patch.object(sys, "argv", ["pretrain_gpt.py", *item.payload, *USER_ARGS]):
        args = parse_args()
        validate_args(args, {})
        core_transformer_config_from_args(args)


def check_torchtitan(item: Item) -> None:
    from torchtitan.config import ConfigManager
    from torchtitan.distributed import ParallelDims

    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(item.payload)
    try:
        par = ConfigManager().parse_args(["--job.config_file", f.name]).parallelism
    finally:
        os.unlink(f.name)
    ParallelDims(dp_replicate=par.data_parallel_replicate_degree,
                 dp_shard=par.data_parallel_shard_degree, cp=par.context_parallel_degree,
                 tp=par.tensor_parallel_degree, pp=par.pipeline_parallel_degree,
                 ep=par.expert_parallel_degree, etp=par.expert_tensor_parallel_degree,
                 world_size=item.world)


def check_deepspeed(item: Item) -> None:
    import deepspeed.runtime.config as ds_config

    with mock.patch.object(ds_config.dist, "get_rank", lambda *a, **k: 0), \
            mock.patch.object(ds_config.dist, "get_world_size", lambda *a, **k: item.world):
        ds_config.DeepSpeedConfig(item.payload)


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
    k = words.index("sglang.launch_server")
    parser = argparse.ArgumentParser(exit_on_error=False)
    ServerArgs.add_cli_args(parser)
    parser.parse_args(words[k + 1:])


def check_torchrec(item: Item) -> None:
    from torch.distributed._shard.sharding_spec import EnumerableShardingSpec, ShardMetadata
    from torchrec.distributed.planner.types import ParameterConstraints
    from torchrec.distributed.types import ParameterSharding

    sharding, constraints, dim = item.payload
    spec = sharding["sharding_spec"]
    if spec is not None:
        spec = EnumerableShardingSpec([ShardMetadata(**s) for s in spec])
        if sharding["compute_kernel"] != "dense":
            from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation
            from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
                ComputeDevice, construct_split_state)

            construct_split_state([(s.shard_sizes[0], s.shard_sizes[1], EmbeddingLocation.DEVICE,
                                    ComputeDevice.CUDA) for s in spec.shards],
                                  rowwise=True, cacheable=False)
    ParameterSharding(**{**sharding, "sharding_spec": spec})
    ParameterConstraints(**{k: v for k, v in constraints.items() if k != "cache_params"})


CHECKERS: dict[str, Callable[[Item], None] | None] = {
    "megatron": check_megatron, "megatron-bridge": None, "torchtitan": check_torchtitan,
    "deepspeed": check_deepspeed, "vllm": check_vllm, "sglang": check_sglang,
    "torchrec": check_torchrec}


def missing(fmt: str) -> str | None:
    """Why ``fmt`` cannot be checked here, or None."""
    if CHECKERS[fmt] is None:
        return ("no automated check: Megatron-Bridge's override path needs one of its "
                "recipes and a model provider")
    if fmt == "megatron" and os.environ.get("MEGATRON_LM"):
        sys.path.insert(0, os.environ["MEGATRON_LM"])
    try:
        importlib.import_module(PACKAGES[fmt])
    except ImportError:
        hint = " (set MEGATRON_LM to a Megatron-LM clone)" if fmt == "megatron" else ""
        return f"package {PACKAGES[fmt]} not installed{hint}"
    return None


def run(items: list[Item]) -> dict[str, Tally]:
    """Each item through its format's checker; a format whose package is absent is
    skipped once, its items not counted."""
    out: dict[str, Tally] = {}
    for item in items:
        if item.fmt not in out:
            out[item.fmt] = Tally(skipped=missing(item.fmt), first=[])
        t = out[item.fmt]
        if t.skipped:
            continue
        try:
            CHECKERS[item.fmt](item)  # type: ignore[misc]
        except (Exception, SystemExit) as e:  # argparse exits on a refusal
            t.refused += 1
            if t.first is not None and len(t.first) < 3:
                t.first.append(f"{item.label}: {type(e).__name__}: {str(e)[:300]}")
        else:
            t.accepted += 1
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=int, default=100,
                    help="plans per framework space (default 100)")
    ap.add_argument("--no-sample", action="store_true", help="golden files only")
    a = ap.parse_args(argv)
    if a.sample < 1:
        ap.error(f"--sample: expected a positive number of plans, got {a.sample}")
    items = list(golden_items())
    if not a.no_sample:
        items += [*space_items(a.sample), *serving_items(), *torchrec_items()]
    refused = 0
    for fmt, t in run(items).items():
        if t.skipped:
            print(f"{fmt}: skipped: {t.skipped}")
            continue
        refused += t.refused
        print(f"{fmt}: {t.accepted} accepted, {t.refused} refused")
        for line in t.first or []:
            print(f"  {line}")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
