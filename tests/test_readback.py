"""Every format read back (issue 40 item 2): a torchtitan TOML, a ds_config with its launch
line and a ``vllm serve`` command come back as the plan they run. Round trips over every
third plan of whole search spaces (fixed stride, three cluster sizes, dense and MoE), with
the framework's defaults for what the space does not search: the plan read back equals the
plan the framework runs (``normalized``), field by field, and costs the same."""

from __future__ import annotations

import json
import math
from functools import lru_cache

import pytest

from conftest import small_cluster, tiny_model
from formulations.train.space import SearchSpace, SpaceOptions
from planner.costmodel.frameworks import unstated_defaults
from planner.costmodel.train.evaluator import evaluate
from planner.errors import InputError
from planner.export import deepspeed, export_plan, torchtitan
from planner.export.common import Target, format_profile
from planner.export.readback import (
    deepspeed_launch_from_header,
    plan_from_deepspeed,
    plan_from_torchtitan,
    serve_plan_from_vllm,
)
from planner.export.serve_launch import launch_commands
from planner.specs.model import MoESpec
from planner.specs.plan import Plan
from planner.specs.plan_base import model_defaults
from planner.specs.serve import ServePlan

#: plan fields a file of the format does not state (the model code decides): read back at
#: the framework profile's default, so not compared
UNSTATED = {"torchtitan": set(), "deepspeed": {"fused_elementwise"}}
KEEP = ("tp", "pp", "dp", "cp", "ep", "expert_tp", "microbatch_size", "global_batch_size",
        "seq_len", "virtual_stages", "recompute", "placement", "zero_stage", "offload_params",
        "offload_optimizer", "cp_comm")


@lru_cache(maxsize=None)
def space_sample(fmt: str, gpus: int, moe: bool, every: int = 3) -> tuple:
    """Every ``every``-th plan of a whole space, its unsearched fields at ``fmt``'s
    defaults, and whether each varies a precision or overlap too (fixed by position)."""
    kw = dict(num_layers=6, global_batch_size=32, seq_len=1024)
    if moe:
        kw["moe"] = MoESpec(num_experts=8, top_k=2, expert_ffn_hidden_size=1024)
    model = tiny_model(**kw)
    cluster = small_cluster(gpus, domain=8)
    pinned = {"tp": 1, "pp": 1, "cp": 1} if fmt == "deepspeed" else {}
    space = SearchSpace(model, cluster, model_defaults(model), pinned,
                        SpaceOptions(max_microbatch=2, max_virtual_stages=2, min_cp_tokens=256))
    profile = format_profile(fmt)
    plans = []
    for k, pt in enumerate(space):
        if k % every:
            continue
        data = {f: v for f, v in space.plan(*pt).to_dict().items() if f in KEEP}
        # vary what the space does not search, deterministically
        if fmt == "deepspeed":
            data["dtype"] = ("bf16", "fp16")[k // every % 2]
            data["grad_reduce_dtype"] = ("bf16", "fp32")[k // (2 * every) % 2]
            data["overlap_dp_grad_reduce"] = data["overlap_param_gather"] = (
                data.get("zero_stage", 0) > 0)
        else:
            data["dtype"] = ("bf16", "fp8")[k // every % 2]
            data["fp8_params"] = data["dtype"] == "fp8" and k % 4 == 0
            data["fused_elementwise"] = True
            data["overlap_tp_comm"] = data.get("tp", 1) > 1 and k % 5 == 0
        try:
            p = Plan.model_validate(unstated_defaults(profile, data))
            export_plan(fmt, p, model, cluster)
        except (InputError, ValueError):
            continue
        plans.append(p)
    return model, cluster, tuple(plans)


def _same_estimate(model, cluster, a: Plan, b: Plan) -> None:
    ea, eb = evaluate(model, cluster, a), evaluate(model, cluster, b)
    assert math.isclose(ea.iteration_time_s, eb.iteration_time_s, rel_tol=1e-12)
    assert math.isclose(ea.memory_per_gpu_bytes, eb.memory_per_gpu_bytes, rel_tol=1e-12)


def _round_trip(fmt: str, gpus: int, moe: bool) -> int:
    model, cluster, plans = space_sample(fmt, gpus, moe)
    t = Target(model, cluster)
    mod = torchtitan if fmt == "torchtitan" else deepspeed
    for p in plans:
        text = export_plan(fmt, p, model, cluster)
        if fmt == "torchtitan":
            back, ignored = plan_from_torchtitan(text, model, cluster)
        else:
            back, ignored = plan_from_deepspeed(text, deepspeed_launch_from_header(text),
                                                model, cluster)
        assert ignored == []
        want = mod.normalized(p, t).to_dict()
        got = back.to_dict()
        diff = {f: (want[f], got[f]) for f in want
                if want[f] != got[f] and f not in UNSTATED[fmt]}
        assert not diff, (p, diff)
        assert export_plan(fmt, back, model, cluster).split("\n", 4)[4] == \
            text.split("\n", 4)[4] or fmt == "deepspeed"
        if not UNSTATED[fmt]:
            _same_estimate(model, cluster, p, back)
    return len(plans)


@pytest.mark.parametrize("gpus", [4, 16, 32])
def test_torchtitan_round_trip_over_whole_spaces(gpus):
    assert _round_trip("torchtitan", gpus, moe=False) > 0


def test_torchtitan_round_trip_moe():
    assert _round_trip("torchtitan", 16, moe=True) > 0


@pytest.mark.parametrize("gpus", [4, 16, 32])
def test_deepspeed_round_trip_over_whole_spaces(gpus):
    assert _round_trip("deepspeed", gpus, moe=False) > 0


def test_deepspeed_world_comes_from_the_launch_line():
    """The world is the launch line's (nodes x GPUs), never the file's own numbers: a launch
    line whose world disagrees with the batch arithmetic is refused, as DeepSpeed refuses
    it; with the batch given per GPU only, the world decides dp and the global batch."""
    model, cluster, plans = space_sample("deepspeed", 16, False)
    p = next(x for x in plans if x.dp == 16)
    text = export_plan("deepspeed", p, model, cluster)
    for wrong in ("deepspeed --num_nodes 1 --num_gpus 8 train.py",
                  "deepspeed --num_nodes 32 --num_gpus 8 train.py",
                  "torchrun --nnodes 1024 --nproc-per-node 8 train.py"):
        with pytest.raises(InputError, match="train_batch_size"):
            plan_from_deepspeed(text, wrong, model, cluster)
    with pytest.raises(InputError, match="--num_nodes"):
        plan_from_deepspeed(text, "deepspeed train.py", model, cluster)
    back, _ = plan_from_deepspeed(text, "torchrun --nnodes 2 --nproc-per-node 8 train.py",
                                  model, cluster)
    assert back.dp == 16
    cfg = json.loads(text)
    del cfg["train_batch_size"], cfg["gradient_accumulation_steps"]
    back, _ = plan_from_deepspeed(json.dumps(cfg), "deepspeed --num_nodes 1 --num_gpus 8 "
                                  "train.py", model, cluster)
    assert (back.dp, back.global_batch_size) == (8, 8 * p.microbatch_size)


def test_deepspeed_defaults_and_refusals():
    model, cluster = tiny_model(), small_cluster(8)
    line = "deepspeed --num_nodes 1 --num_gpus 8 train.py"
    cfg = {"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
           "optimizer": {"type": "AdamW"}}
    back, ignored = plan_from_deepspeed(json.dumps(cfg), line, model, cluster)
    # zero_optimization.stage defaults to 0; grad_accum_dtype to the model's (bf16);
    # one accumulation step: train_batch_size = 2 x 8
    assert (back.zero_stage, back.grad_reduce_dtype, back.global_batch_size) == (0, "bf16", 16)
    assert ignored == ["optimizer"]
    for bad, needle in (({"fp16": {"enabled": False}}, "fp32 training"),
                        ({"zero_optimization": {"stage": 3, "offload_param":
                                                {"device": "nvme"}}}, "nvme"),
                        ({"sequence_parallel_size": 2}, "Ulysses"),
                        ({"train_batch_size": 100}, "train_batch_size")):
        c = {**cfg, **bad}
        if "fp16" in bad:
            c.pop("bf16")
        with pytest.raises(InputError, match=needle):
            plan_from_deepspeed(json.dumps(c), line, model, cluster)


def test_torchtitan_defaults_and_refusals():
    model, cluster = tiny_model(), small_cluster(8)
    # job_config.py defaults: dp_shard -1 (the rest: 8), selective AC option "2" (half),
    # local batch 8, seq 2048, FSDP resharding ("default" without pp)
    back, _ = plan_from_torchtitan("[training]\nlocal_batch_size = 1\n", model, cluster)
    assert (back.dp, back.zero_stage, back.microbatch_size, back.global_batch_size,
            back.seq_len) == (8, 3, 1, 8, 2048)
    assert back.recompute == "half"
    for toml, needle in (("[parallelism]\ndata_parallel_replicate_degree = 2\n"
                          "data_parallel_shard_degree = 4\n", "HSDP"),
                         ("[parallelism]\nfsdp_reshard_after_forward = \"never\"\n", "ZeRO-2"),
                         ("[activation_checkpoint]\nmode = \"selective\"\n"
                          "selective_ac_option = \"op\"\n", "selective_ac_option"),
                         ("[parallelism]\npipeline_parallel_degree = 2\n", "ZeRO-2"),
                         ("[parallelism]\npipeline_parallel_degree = 2\n"
                          "fsdp_reshard_after_forward = \"always\"\n",
                          "module_fqns_per_model_part")):
        with pytest.raises(InputError, match=needle):
            plan_from_torchtitan(toml, model, cluster)


@pytest.mark.parametrize("plan", [
    ServePlan(tp=4, concurrency=96, prefill_chunk=4096),
    ServePlan(tp=8, pp=2, ep=8, concurrency=32, kv_dtype="fp8", weight_dtype="fp8"),
    ServePlan(tp=2, weight_dtype="int4", concurrency=7, prefill_chunk=512),
])
def test_vllm_round_trip(plan):
    for ref in ("meta-llama/Llama-3.1-8B", "x $(id) 'y'"):
        (pool,) = launch_commands(ref, plan)["vllm"]
        back, ignored = serve_plan_from_vllm(pool["command"], tiny_model(), small_cluster(8))
        assert back == plan.model_copy(update={"replicas": 1}), pool["command"]
        assert ignored == []


def test_vllm_refusals_and_ignored():
    m, c = tiny_model(), small_cluster(8)
    with pytest.raises(InputError, match="--max-num-seqs"):
        serve_plan_from_vllm("vllm serve m --tensor-parallel-size 2", m, c)
    with pytest.raises(InputError, match="disaggregated"):
        serve_plan_from_vllm("vllm serve m --max-num-seqs 8 --max-num-batched-tokens 64 "
                             "--kv-transfer-config {}", m, c)
    back, ignored = serve_plan_from_vllm("vllm serve m --max-num-seqs=8 "
                                         "--max-num-batched-tokens 64 --port 8000 "
                                         "--trust-remote-code", m, c)
    assert (back.concurrency, back.prefill_chunk) == (8, 64)
    assert ignored == ["--port", "8000", "--trust-remote-code"]


# ---- the CLI ----------------------------------------------------------------------------

from pathlib import Path  # noqa: E402

from conftest import ROOT  # noqa: E402
from test_cli import run  # noqa: E402

LAUNCH = ROOT / "examples" / "launch"
SUPERPOD = str(ROOT / "examples" / "superpod.yaml")


def _time(capsys, *args):
    code, out, err = run(capsys, "evaluate", "-m", "llama3-70b", "-c", SUPERPOD, "--json",
                         *args)
    assert code == 0, err
    return json.loads(out)["iteration_time_s"], err


def test_cli_evaluate_from_torchtitan_and_deepspeed(capsys, tmp_path):
    """The golden files read back cost what their plans cost; the DeepSpeed launch line
    comes from --launch-line, a sibling file, or the export header, in that order."""
    t_plan, _ = _time(capsys, "-p", str(LAUNCH / "llama3-70b.torchtitan.plan.yaml"))
    t_back, _ = _time(capsys, "--from", "torchtitan", str(LAUNCH / "llama3-70b.torchtitan.toml"))
    assert t_back == t_plan
    t_plan, _ = _time(capsys, "--gpus", "512", "-p",
                      str(LAUNCH / "llama3-70b.deepspeed.plan.yaml"))
    ds = LAUNCH / "llama3-70b.ds_config.json"
    t_back, _ = _time(capsys, "--gpus", "512", "--from", "deepspeed", str(ds))
    assert t_back == t_plan
    # a sibling launch line with the wrong world is read (and refused by the batch check)
    copy = tmp_path / "run.json"
    copy.write_text(ds.read_text())
    (tmp_path / "run.launch.sh").write_text("deepspeed --num_nodes 3 --num_gpus 8 train.py\n")
    code, _, err = run(capsys, "evaluate", "-m", "llama3-70b", "-c", SUPERPOD, "--gpus", "512",
                       "--from", "deepspeed", str(copy))
    assert code == 2 and "world 24" in err
    # --launch-line wins over the sibling
    t_opt, err = _time(capsys, "--gpus", "512", "--from", "deepspeed", str(copy),
                       "--launch-line", "deepspeed --num_nodes 64 --num_gpus 8 train.py")
    assert t_opt == t_plan
    cfg = json.loads(ds.read_text())
    del cfg["planner_export"]
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(cfg))
    code, _, err = run(capsys, "evaluate", "-m", "llama3-70b", "-c", SUPERPOD, "--from",
                       "deepspeed", str(bare))
    assert code == 2 and "--launch-line" in err


@pytest.mark.parametrize("args, needle", [
    (["--from", "torchtitan"], "needs the file"),
    (["--from", "torchtitan", "nowhere.toml"], "no such file"),
    (["--from", "megatron", "--tp 1", "--launch-line", "x"], "--launch-line is for"),
    (["--launch-line", "x"], "needs --from deepspeed"),
    (["--from", "tensorflow", "x"], "expected megatron, torchtitan, deepspeed"),
])
def test_cli_from_errors(capsys, args, needle):
    code, _, err = run(capsys, "evaluate", "-m", "llama3-70b", "-c", SUPERPOD, *args)
    assert code == 2 and needle in err, err


def test_deepspeed_refusal_names_the_optimizer_deepspeed_builds():
    """DeepSpeed v0.18.0 (engine.py _configure_optimizer; BFLOAT16 == DDP_BFLOAT16 == "bf16")
    wraps a configured optimizer for bf16 with fp32 accumulation at stage 0/1 (no offload) in
    FP16_Optimizer / FP16_UnfusedOptimizer, not BF16_Optimizer (built only without an
    optimizer); the refusal says so and still names the fixes."""
    model, cluster = tiny_model(), small_cluster(8)
    for stage in (0, 1):
        p = Plan.model_validate(dict(dp=8, global_batch_size=64, seq_len=2048,
                                     zero_stage=stage, grad_reduce_dtype="fp32",
                                     overlap_dp_grad_reduce=stage > 0,
                                     overlap_param_gather=stage > 0, fused_elementwise=False,
                                     placement={"order": ["tp", "cp", "ep", "dp", "pp"]}))
        with pytest.raises(InputError) as e:
            export_plan("deepspeed", p, model, cluster)
        msg, source = str(e.value).split(" (deepspeed/runtime/engine.py", 1)
        assert "grad_reduce_dtype=fp32" in msg and "FP16_UnfusedOptimizer" in msg
        assert "BF16_Optimizer" not in msg and "zero_stage>=2" in msg
        # the cited source says where BF16_Optimizer does come from
        assert "BF16_Optimizer is built only without a configured optimizer" in source
