"""From plan to launch (planner/export): plan -> Megatron-LM arguments -> plan is the plan as
Megatron runs it, with the same estimate; DeepSpeed's batch identity; torchtitan's TOML
parses and its degrees multiply to the GPUs; every refusal names the field; golden files
for the README's plans cannot go stale."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import shlex
import math
import shutil
import sys
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, currently_in_test_context, event, given, settings
from hypothesis import strategies as st

from conftest import small_cluster, tiny_model
from formulations.train.space import SearchSpace, SpaceOptions
from instances import instances, moe_instances
from planner.costmodel.train.evaluator import evaluate
from planner.errors import InputError
from planner.export import FORMATS, SUFFIX, Target, export_plan, plan_from_megatron
from planner.export import bridge, deepspeed, megatron, torchtitan
from planner.export.common import launch_shape
from planner.specs.loaders import load_cluster, load_model
from planner.specs.plan import Plan
from planner.specs.plan_base import model_defaults
from test_cli import run

ROOT = Path(__file__).resolve().parents[1]
LAUNCH = ROOT / "examples" / "launch"
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _same_estimate(model, cluster, a: Plan, b: Plan) -> None:
    ea, eb = evaluate(model, cluster, a), evaluate(model, cluster, b)
    assert math.isclose(ea.iteration_time_s, eb.iteration_time_s, rel_tol=1e-12)
    assert math.isclose(ea.memory_per_gpu_bytes, eb.memory_per_gpu_bytes, rel_tol=1e-12)
    assert ea.feasible == eb.feasible


#: fields pinned so that a framework's features are searched (its plans are mostly accepted)
FEATURES = {
    "deepspeed": lambda draw: {"tp": 1, "pp": 1, "cp": 1,
                               "zero_stage": draw(st.sampled_from([1, 2, 3])),
                               "recompute": draw(st.sampled_from(["none", "full"]))},
    "torchtitan": lambda draw: {"zero_stage": 3, "cp_comm": "ring",
                                "recompute": draw(st.sampled_from(["none", "full"]))},
}


@st.composite
def space_plans(draw, moe: bool = False, fmt: str | None = None):
    """A plan of a random small search space, with the fields the space does not search
    (precision, overlaps, attention, rank order) varied too; ``fmt`` pins the fields that
    framework needs, so that most of its plans are exportable."""
    space, _, _ = draw(moe_instances() if moe else instances())
    if fmt in FEATURES:
        space = SearchSpace(space.model, space.cluster, space.base,
                            {**FEATURES[fmt](draw)}, space.options)
    assume(space.outers)
    o = draw(st.sampled_from(space.outers))
    doms = space.placements(o)
    assume(doms)
    dom = draw(st.sampled_from(doms))
    inner = draw(st.sampled_from(list(space.inners(o))))
    data = space.plan(o, dom, inner).to_dict()
    data.update(_flags(draw, fmt))
    if data["tp"] > 1 and fmt == "torchtitan":
        data.update(sequence_parallel=True, tp_comm="rs_ag")
    if fmt or draw(st.booleans()):  # the domain the rank order fills
        data["placement"] = {"order": data["placement"]["order"]}
    if not fmt:
        order = draw(st.sampled_from([None, None, ["tp", "cp", "ep", "pp", "dp"],
                                      ["tp", "dp", "cp", "pp"]]))
        if order:
            data["placement"] = {**data["placement"], "order": order}
    return space.model, space.cluster, Plan.model_validate(data)


def _flags(draw, fmt: str | None) -> dict:
    """Precision, overlaps and attention: any value, or one the framework takes."""
    if fmt == "deepspeed":
        dtype = draw(st.sampled_from(["bf16", "fp16"]))
        ov = draw(st.booleans())
        return dict(dtype=dtype, grad_reduce_dtype=draw(st.sampled_from(["fp32", "bf16"])),
                    overlap_dp_grad_reduce=ov, overlap_param_gather=ov)
    if fmt == "torchtitan":
        dtype = draw(st.sampled_from(["bf16", "fp8"]))
        return dict(dtype=dtype, fp8_params=dtype == "fp8" and draw(st.booleans()),
                    overlap_tp_comm=draw(st.sampled_from([True, False])))
    dtype = draw(st.sampled_from(["bf16", "bf16", "fp16", "fp8"]))
    return dict(
        dtype=dtype, fp8_params=dtype == "fp8" and draw(st.booleans()),
        grad_reduce_dtype=draw(st.sampled_from(["fp32", "fp32", "bf16"])),
        attention=draw(st.sampled_from(["flash", "flash", "standard"])),
        overlap_tp_comm=draw(st.sampled_from(["auto", True, False])),
        overlap_dp_grad_reduce=draw(st.sampled_from([True, True, False])),
        overlap_param_gather=draw(st.sampled_from([True, True, False])),
        overlap_p2p_comm=draw(st.sampled_from([True, True, False])))


def _refused(e: InputError, fmt: str) -> None:
    """A refusal names the format and a plan field with its value."""
    msg = str(e)
    assert msg.startswith(f"cannot export to {fmt}: "), msg
    field = msg.split(": ")[1].split("=")[0].split(".")[0]
    assert field in Plan.model_fields or "placement" in msg or "does not" in msg, msg


def _note(what: str) -> None:
    """Count outcomes in hypothesis' statistics (--hypothesis-show-statistics)."""
    if currently_in_test_context():
        event(what)


def _round_trip(model, cluster, plan: Plan) -> bool:
    t = Target(model, cluster)
    try:
        text = megatron.render(plan, t)
    except InputError as e:
        _refused(e, "megatron")
        _note("megatron refused: " + str(e).split(": ")[1].split("=")[0])
        return False
    _note("megatron accepted")
    back, ignored = megatron.parse_args(text, t)
    assert ignored == []
    assert back == megatron.normalized(plan, t)
    _same_estimate(model, cluster, plan, back)
    return True


@SETTINGS
@given(space_plans())
def test_megatron_round_trip_dense(case):
    _round_trip(*case)


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(space_plans(moe=True))
def test_megatron_round_trip_moe(case):
    _round_trip(*case)


def test_round_trip_over_a_whole_space():
    """Every 7th plan of a 16-GPU space on two 8-GPU domains: each accepted plan comes back
    as the plan Megatron runs, with the same estimate; the refusals are the three things
    Megatron-LM cannot run: ZeRO 2/3, a domain its rank order does not produce, and TP
    overlap that is on for some GEMMs only (auto)."""
    model = tiny_model(num_layers=6, global_batch_size=16, seq_len=1024)
    cluster = small_cluster(16, domain=8)
    space = SearchSpace(model, cluster, model_defaults(model), {},
                        SpaceOptions(max_microbatch=2, max_virtual_stages=2, min_cp_tokens=256))
    from planner.costmodel.frameworks import violations
    from planner.specs.framework import load_framework

    profile = load_framework("megatron-core")
    plans = [space.plan(*pt) for k, pt in enumerate(space) if k % 7 == 0]
    accepted, reasons = 0, set()
    for p in plans:
        ok = _round_trip(model, cluster, p)  # an accepted plan comes back as costed
        accepted += ok
        broken = violations(profile, p, model, cluster)
        if ok:  # the exporter never runs what Megatron-Core's profile says it cannot
            assert not broken, (p, broken)
        else:
            reason = _reason(p, model, cluster)
            reasons.add(reason)
            # every refusal is a profile rule, except auto TP overlap (no framework setting)
            assert broken or reason == "overlap_tp_comm", p
    assert 0 < accepted < len(plans)
    assert reasons == {"zero_stage", "placement.domain", "overlap_tp_comm"}


def _accepts(plan: Plan, model, cluster) -> bool:
    try:
        megatron.to_args(plan, Target(model, cluster))
        return True
    except InputError:
        return False


def _reason(plan: Plan, model, cluster) -> str:
    try:
        megatron.to_args(plan, Target(model, cluster))
    except InputError as e:
        return str(e).split(": ")[1].split("=")[0]
    return ""


def test_megatron_args_for_a_70b_cp_plan():
    m, c = load_model("llama3-70b"), load_cluster("examples/superpod.yaml")
    plan = Plan.model_validate(dict(tp=4, cp=2, pp=2, dp=64, virtual_stages=8,
                                    global_batch_size=512, seq_len=8192,
                                    sequence_parallel=True, zero_stage=1))
    args = megatron.to_args(plan, Target(m, c))
    joined = " ".join(args)
    for part in ("--tensor-model-parallel-size 4", "--pipeline-model-parallel-size 2",
                 "--context-parallel-size 2", "--cp-comm-type p2p", "--sequence-parallel",
                 "--num-layers-per-virtual-pipeline-stage 5",  # 80 layers / (pp 2 x v 8)
                 "--use-distributed-optimizer", "--overlap-grad-reduce",
                 "--overlap-param-gather", "--micro-batch-size 1", "--global-batch-size 512",
                 "--seq-length 8192", "--bf16", "--num-query-groups 8"):
        assert part in joined
    assert launch_shape(plan, c, "megatron") == (128, 8)


def test_uneven_splits_first_last_and_layout():
    """Llama 3 405B (126 layers): pp 16 without interleaving is 7 + 14 x 8 + 7 (first/last
    stage arguments); with v 7 (112 chunks) 49 one-layer chunks, 14 of two, 49 of one."""
    m, c = load_model("llama3-405b"), load_cluster("dgx-h100-superpod", 16384)
    base = dict(tp=8, pp=16, dp=128, global_batch_size=2048, seq_len=8192,
                sequence_parallel=True, zero_stage=1, uneven_pipeline=True)
    args = megatron.to_args(Plan.model_validate(base), Target(m, c))
    i = args.index("--decoder-first-pipeline-num-layers")
    assert args[i:i + 4] == ["--decoder-first-pipeline-num-layers", "7",
                             "--decoder-last-pipeline-num-layers", "7"]
    plan = Plan.model_validate({**base, "dp": 64, "cp": 2, "virtual_stages": 7})
    args = megatron.to_args(plan, Target(m, c))
    layout = args[args.index("--pipeline-model-parallel-layout") + 1]
    assert layout == "Et*1|(t*1|)*48(t*2|)*14(t*1|)*48t*1L"
    assert megatron.megatron_chunks({"--pipeline-model-parallel-layout": layout}, 16, 126) == (
        [1] * 49 + [2] * 14 + [1] * 49)



def test_half_recomputation_is_block_recomputation_of_half_a_chunk():
    """recompute=half is Megatron's block method over half of each chunk (rounded up: 7
    layers per stage of Llama 3 405B at pp 16 uneven recompute 4), torchtitan's every second
    block, and is refused by DeepSpeed; a block count other than half is refused on the way
    back, naming the value it expected."""
    m, c = load_model("llama3-405b"), load_cluster("dgx-h100-superpod", 16384)
    plan = Plan.model_validate(dict(tp=8, pp=16, dp=128, global_batch_size=2048, seq_len=8192,
                                    sequence_parallel=True, zero_stage=1, uneven_pipeline=True,
                                    recompute="half"))
    t = Target(m, c)
    args = megatron.to_args(plan, t)
    i = args.index("--recompute-method")
    assert args[i:i + 4] == ["--recompute-method", "block", "--recompute-num-layers", "4"]
    back, _ = megatron.parse_args(megatron.render(plan, t), t)
    assert back.recompute == "half"
    text = megatron.render(plan, t).replace("--recompute-num-layers 4", "--recompute-num-layers 3")
    with pytest.raises(InputError, match="block over 4"):
        megatron.parse_args(text, t)
    assert torchtitan.config(plan.model_copy(update={"zero_stage": 3}), t)["activation_checkpoint"] == {
        "mode": "selective", "selective_ac_option": "2"}
    with pytest.raises(InputError, match="recompute"):
        deepspeed.render(plan.model_copy(update={"tp": 1, "pp": 1, "dp": 16384,
                                                 "zero_stage": 2, "sequence_parallel": False,
                                                 "uneven_pipeline": False}), t)

def _yaml(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text())


# ---- the reverse direction -------------------------------------------------------------------

def _t70():
    return Target(load_model("llama3-70b"), load_cluster("examples/superpod.yaml"))


#: Llama 3's architecture in Megatron-LM arguments (absent ones take Megatron's GPT defaults)
LLAMA3_ARCH = ("--normalization RMSNorm --position-embedding-type rope --rotary-base 500000 "
               "--swiglu --disable-bias-linear --untie-embeddings-and-output-weights "
               "--attention-dropout 0.0 --hidden-dropout 0.0 ")


def test_parse_hand_written_args_and_ignored():
    t = _t70()
    p, ignored = megatron.parse_args(
        "torchrun --nnodes 128 --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size 8 "
        "--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 4 "
        "--sequence-parallel --use-distributed-optimizer --bf16 --micro-batch-size 1 "
        "--global-batch-size 512 --seq-length 8192 --lr 3e-4 --data-path /x "
        "--recompute-activations --overlap-grad-reduce --overlap-param-gather " + LLAMA3_ARCH, t)
    assert (p.tp, p.pp, p.dp, p.virtual_stages, p.zero_stage) == (8, 4, 32, 5, 1)
    assert p.recompute == "selective" and p.sequence_parallel and p.tp_comm == "rs_ag"
    assert ignored == ["--lr", "--data-path"]
    assert p.overlap_tp_comm is False  # no --tp-comm-overlap


@pytest.mark.parametrize("args, names", [
    ("--bf16 --optimizer-cpu-offload", "--optimizer-cpu-offload"),
    ("--bf16 --use-torch-fsdp2", "--use-torch-fsdp2"),
    ("--tensor-model-parallel-size 8", "neither --bf16 nor --fp16"),
    ("--bf16 --num-layers 32", "--num-layers 32 describes a different model"),
    ("--bf16 --tensor-model-parallel-size x", "--tensor-model-parallel-size: expected an integer"),
    ("--bf16 --tensor-model-parallel-size 3", "does not divide the 1024 GPUs"),
    ("--bf16 --recompute-granularity full --recompute-method block --recompute-num-layers 2",
     "--recompute-method block"),
    ("--bf16 --pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 30",
     "the layer split [30, 50]"),
    ("torchrun --nnodes 2 --nproc-per-node 8 pretrain_gpt.py --bf16", "is 16 GPUs"),
    ("--bf16 --cp-comm-type p2p a2a --context-parallel-size 2", "--cp-comm-type p2p a2a"),
    ("--bf16 --recompute-granularity selective --recompute-modules mlp", "--recompute-modules mlp"),
])
def test_parse_refuses_what_it_cannot_model(args, names):
    with pytest.raises(InputError, match="--from megatron") as e:
        megatron.parse_args(args, _t70())
    assert names in str(e.value)


# ---- refusals, per framework -----------------------------------------------------------------

_BASE = dict(tp=4, pp=2, cp=2, dp=64, global_batch_size=512, seq_len=8192, virtual_stages=8,
             sequence_parallel=True, zero_stage=1)


@pytest.mark.parametrize("fmt, change, field", [
    ("megatron", dict(zero_stage=3), "zero_stage=3"),
    ("megatron", dict(zero_stage=3, offload_params=True), "zero_stage=3"),
    ("megatron", dict(zero_stage=1, offload_optimizer=True), "offload_optimizer=true"),
    ("megatron", dict(sequence_parallel=False, tp_comm="rs_ag"), "tp_comm=rs_ag"),
    ("megatron", dict(placement={"order": ["tp", "dp", "cp", "pp"]}), "placement.order"),
    ("megatron", dict(placement={"domain": {"tp": 4, "dp": 2}}), "placement.domain"),
    ("megatron", dict(overlap_tp_comm="auto", tp=8, cp=1, dp=64, pp=2, virtual_stages=1,
                      placement={"domain": {"tp": 4, "dp": 2}}), "placement.domain"),
    ("megatron-bridge", dict(dtype="fp16"), "dtype=fp16"),
    ("megatron-bridge", dict(dtype="fp8"), "fp8_params=false"),
    ("torchtitan", dict(), "zero_stage=1"),
    ("torchtitan", dict(zero_stage=3, sequence_parallel=False), "sequence_parallel=false"),
    ("torchtitan", dict(zero_stage=3, recompute="selective"), "recompute=selective"),
    ("torchtitan", dict(zero_stage=3, cp_comm="all_to_all"), "cp_comm=all_to_all"),
    ("torchtitan", dict(zero_stage=0), "zero_stage=0"),
    ("deepspeed", dict(), "tp=4"),
    ("deepspeed", dict(tp=1, pp=1, cp=1, dp=1024, global_batch_size=1024, virtual_stages=1,
                       sequence_parallel=False, dtype="fp8"), "dtype=fp8"),
    ("deepspeed", dict(tp=1, pp=1, cp=1, dp=1024, global_batch_size=1024, virtual_stages=1,
                       sequence_parallel=False, zero_stage=0, grad_reduce_dtype="bf16"),
     "overlap_dp_grad_reduce=true"),
    ("deepspeed", dict(tp=1, pp=1, cp=1, dp=1024, global_batch_size=1024, virtual_stages=1,
                       sequence_parallel=False), "grad_reduce_dtype=fp32"),
])
def test_refusals_name_field_and_value(fmt, change, field):
    m, c = load_model("llama3-70b"), load_cluster("examples/superpod.yaml")
    plan = Plan.model_validate({**_BASE, **change})
    with pytest.raises(InputError, match=f"cannot export to {fmt}: ") as e:
        export_plan(fmt, plan, m, c)
    assert field in str(e.value)


def test_bf16_optimizer_states_are_refused_everywhere():
    """Apex DistributedFusedAdam's bf16 states (no fp32 master) run in no exported framework."""
    m, c = load_model("llama3-70b"), load_cluster("examples/superpod.yaml")
    plan = Plan.model_validate({**_BASE, "optimizer_dtype": "bf16"})
    for fmt in FORMATS:
        with pytest.raises(InputError, match="optimizer_dtype=bf16"):
            export_plan(fmt, plan, m, c)


def test_a_per_layer_type_recompute_mix_is_refused_everywhere():
    m = tiny_model(moe=dict(num_experts=4, top_k=2, expert_ffn_hidden_size=1024,
                            first_k_dense=1))
    c = small_cluster(8, domain=8)
    assert m.layer_types == ("dense", "moe")
    plan = Plan.model_validate(dict(dp=8, ep=4, expert_tp=1, global_batch_size=64,
                                    seq_len=2048, zero_stage=1,
                                    recompute={"dense": "none", "moe": "full"}))
    for fmt in FORMATS:
        with pytest.raises(InputError, match="recompute"):
            export_plan(fmt, plan, m, c)


def test_a_plan_that_cannot_run_is_refused_before_any_format():
    m, c = load_model("llama3-70b"), load_cluster("examples/superpod.yaml")
    plan = Plan.model_validate({**_BASE, "tp": 3})
    with pytest.raises(InputError, match="cannot run on"):
        export_plan("megatron", plan, m, c)


# ---- DeepSpeed and torchtitan invariants ------------------------------------------------------

@SETTINGS
@given(st.sampled_from(["deepspeed", "torchtitan"]).flatmap(
    lambda f: st.tuples(st.just(f), space_plans(fmt=f))))
def test_deepspeed_batch_and_torchtitan_degrees(fmt_case):
    fmt, (model, cluster, plan) = fmt_case
    t = Target(model, cluster)
    try:
        text = export_plan(fmt, plan, model, cluster)
    except InputError as e:
        _refused(e, fmt)
        event(f"{fmt} refused")
        return
    event(f"{fmt} accepted")
    if fmt == "deepspeed":
        cfg = json.loads(text)
        assert cfg["train_batch_size"] == (cfg["train_micro_batch_size_per_gpu"]
                                           * cfg["gradient_accumulation_steps"] * plan.dp)
        assert cfg["train_batch_size"] == plan.global_batch_size
        assert cfg["zero_optimization"]["stage"] == plan.zero_stage
        return
    cfg = tomllib.loads(text)
    par = cfg["parallelism"]
    world = (par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"]
             * par["tensor_parallel_degree"] * par["pipeline_parallel_degree"]
             * par["context_parallel_degree"])
    nodes, per_node = launch_shape(plan, cluster, fmt)
    assert world == plan.world_size == nodes * per_node
    parts = par.get("module_fqns_per_model_part", [])
    if plan.pp > 1:  # every layer once, in order, over pp x v parts
        layers = [x for part in parts for x in part if x.startswith("layers.")]
        assert layers == [f"layers.{i}" for i in range(model.num_layers)]
        assert len(parts) == plan.pp * plan.virtual_stages
    assert torchtitan.normalized(plan, t).zero_stage in (0, 3)


# ---- golden files and the CLI ------------------------------------------------------------------

def _load_tool(name: str):
    """A script of tools/ as a module (registered first: its dataclasses look it up)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


golden_plans = _load_tool("golden_plans")
#: (plan file, model, cluster, GPUs, formats): the README's plans (Megatron-Core) and the
#: best plans of the same runs that torchtitan and DeepSpeed run; the solves that produce
#: them are tools/golden_plans.py's table (docs/export.md)
GOLDEN = [(g.plan_file, g.model, g.cluster, g.gpus, g.formats) for g in golden_plans.GOLDEN]


def golden_files():
    for plan_file, m, c, gpus, fmts in GOLDEN:
        for fmt in fmts:
            stem = plan_file.removesuffix(".plan.yaml").split(".")[0]
            yield plan_file, m, c, gpus, fmt, f"{stem}.{SUFFIX[fmt]}"


@pytest.mark.parametrize("plan_file, m, c, gpus, fmt, out", list(golden_files()))
def test_golden_files_are_current(plan_file, m, c, gpus, fmt, out):
    """Regenerate each golden file from its plan; it must match what is checked in."""
    plan = Plan.model_validate(_yaml(LAUNCH / plan_file))
    text = export_plan(fmt, plan, load_model(m), load_cluster(c, gpus))
    assert (LAUNCH / out).read_text() == text, f"regenerate {out}: planner export ..."
    version = {"megatron": megatron.VERSION, "megatron-bridge": bridge.VERSION,
               "torchtitan": torchtitan.VERSION, "deepspeed": deepspeed.VERSION}[fmt]
    assert version in text


@pytest.mark.slow(reason="solves every golden plan's catalog model")
@pytest.mark.parametrize("golden", golden_plans.GOLDEN, ids=lambda g: g.plan_file)
def test_golden_plans_are_what_their_solves_return(golden):
    """Each plan file, its launch files and its docs/export.md row are what the solve in
    tools/golden_plans.py gives now (python tools/golden_plans.py --write regenerates)."""
    assert golden_plans.stale(goldens=(golden,)) == []


@pytest.mark.slow(reason="solves a golden plan's catalog model (cached by the golden-plan test)")
def test_a_stale_golden_plan_is_reported_and_rewritten(tmp_path):
    """A plan file that is not its solve's answer, and a docs row with an old figure, are
    each named; --write restores the plan file and the launch files made from it."""
    g = golden_plans.GOLDEN[0]
    (tmp_path / "docs").mkdir()
    shutil.copytree(LAUNCH, tmp_path / "examples" / "launch")
    row = golden_plans.row(g)
    old_row = row.replace(f"{golden_plans.solved(g).best.estimate.iteration_time_s:.2f} s",
                          "9.99 s")
    assert old_row != row
    (tmp_path / "docs" / "export.md").write_text(old_row + "\n")
    plan_path = tmp_path / "examples" / "launch" / g.plan_file
    plan = _yaml(plan_path)
    plan["tp"], plan["dp"] = plan["tp"] // 2, plan["dp"] * 2
    plan_path.write_text(json.dumps(plan))
    bad = golden_plans.stale(tmp_path, (g,))
    assert any(line.startswith(f"examples/launch/{g.plan_file}: not what") for line in bad)
    assert any(line.startswith("docs/export.md: expected the row") and row in line
               for line in bad)
    assert golden_plans.write(tmp_path, (g,)) == [f"examples/launch/{g.plan_file}"]
    assert plan_path.read_text() == (LAUNCH / g.plan_file).read_text()
    (tmp_path / "examples" / "launch" / g.launch_files()[0][1]).write_text("stale\n")
    assert golden_plans.write(tmp_path, (g,)) == [f"examples/launch/{g.launch_files()[0][1]}"]
    (tmp_path / "docs" / "export.md").write_text(row + "\n")
    assert golden_plans.stale(tmp_path, (g,)) == []
    # a solve whose answer moved (here: half the GPUs) makes the file stale
    moved = dataclasses.replace(g, gpus=512)
    assert any(line.startswith(f"examples/launch/{g.plan_file}: not what `{moved.command()}`")
               for line in golden_plans.stale(tmp_path, (moved,)))


def test_cli_export_and_evaluate_from_megatron(capsys, tmp_path):
    plan = str(LAUNCH / "llama3-70b.plan.yaml")
    code, out, _ = run(capsys, "export", plan, "-m", "llama3-70b", "-c",
                       "examples/superpod.yaml", "--format", "megatron")
    assert code == 0 and out == (LAUNCH / "llama3-70b.megatron.sh").read_text()
    dest = tmp_path / "launch.sh"
    code, _, err = run(capsys, "export", plan, "-m", "llama3-70b", "-c",
                       "examples/superpod.yaml", "--format", "megatron", "--out", str(dest))
    assert code == 0 and "wrote" in err and dest.read_text() == out
    code, out2, _ = run(capsys, "evaluate", "-m", "llama3-70b", "-c", "examples/superpod.yaml",
                        "--json", "--from", "megatron", f"@{dest}")
    assert code == 0
    direct = run(capsys, "evaluate", "-m", "llama3-70b", "-c", "examples/superpod.yaml",
                 "--json", "-p", plan)[1]
    assert json.loads(out2)["iteration_time_s"] == json.loads(direct)["iteration_time_s"]
    code, out3, err = run(capsys, "evaluate", "-m", "llama3-70b", "-c", "examples/superpod.yaml",
                          "--from", "megatron", "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 "
                          "--sequence-parallel --use-distributed-optimizer --recompute-activations "
                          "--global-batch-size 512 --bf16 --lr 1 " + LLAMA3_ARCH)
    assert code == 0 and "ignored" in err and "--lr" in err and "TP8" in out3


@pytest.mark.parametrize("args, needle", [
    (["export", "PLAN", "-m", "llama3-70b", "-c", "examples/superpod.yaml", "--format", "x"],
     "x"),
    (["export", "PLAN", "-m", "llama3-70b", "-c", "examples/superpod.yaml", "--format",
      "deepspeed"], "cannot export to deepspeed: tp="),
    (["evaluate", "-m", "llama3-70b", "-c", "examples/superpod.yaml", "--from", "nemo", "--bf16"],
     "--from 'nemo'"),
    (["evaluate", "-m", "llama3-70b", "-c", "examples/superpod.yaml", "--tpp", "3"], "3"),
    (["evaluate", "-m", "llama3-70b", "-c", "examples/superpod.yaml", "--from", "megatron",
      "@/nonexistent/x.sh"], "cannot read"),
    (["solve", "-m", "llama3-70b", "-c", "examples/superpod.yaml", "--export", "nemo"],
     "--export 'nemo'"),
    (["solve", "-m", "llama3-70b", "-c", "examples/superpod.yaml", "--export", "megatron",
      "--json"], "--export-out"),
])
def test_cli_bad_input_exits_2(capsys, args, needle):
    args = [str(LAUNCH / "llama3-70b.plan.yaml") if a == "PLAN" else a for a in args]
    code, out, err = run(capsys, *args)
    assert code == 2 and needle in out + err


def test_solve_export(capsys, tmp_path):
    dest = tmp_path / "run.toml"
    code, _, err = run(capsys, "solve", "-m", "llama3-8b", "-c", "dgx-h100-superpod", "--gpus",
                       "8", "--global-batch", "64", "--fix", "zero_stage=3", "--fix",
                       "recompute=none", "--fix", "tp=1", "--export", "torchtitan",
                       "--export-out", str(dest))
    assert code == 0, err
    cfg = tomllib.loads(dest.read_text())
    assert cfg["parallelism"]["data_parallel_shard_degree"] * cfg["parallelism"][
        "pipeline_parallel_degree"] * cfg["parallelism"]["context_parallel_degree"] == 8


def test_export_sits_above_the_cost_model():
    from test_architecture import import_graph

    graph = import_graph()
    below = [m for m in graph if m.startswith(("planner.specs", "planner.costmodel",
                                               "formulations"))]
    assert not [m for m in below if any(d.startswith("planner.export") for d in graph[m])]
    allowed = ("planner.specs", "planner.costmodel", "planner.errors", "planner.export")
    bad = [f"{m} -> {d}" for m in graph if m.startswith("planner.export")
           for d in graph[m] if not d.startswith(allowed)]
    assert bad == []


# ---- fuzzed bad input -------------------------------------------------------------------------

_FLAGS = sorted(set(megatron._INT) | set(megatron._STR) | set(megatron._LIST)
                | megatron._FLAGS | set(megatron.UNSUPPORTED) | {"--lr", "--data-path"})
_VALUES = ["0", "1", "2", "4", "8", "-1", "1e9", "nan", "x", "", "p2p", "a2a", "all_gather",
           "full", "selective", "uniform", "block", "hybrid", "flash", "unfused", "Et*40|t*40L",
           "E|L", "(t|)*80", "'quoted", "$@", "--", "pretrain_gpt.py", "80", "8192", "512"]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.sampled_from(_FLAGS), st.lists(st.sampled_from(_VALUES), max_size=2)),
                max_size=10), st.booleans())
def test_fuzzed_megatron_arguments_end_in_a_plan_or_an_input_error(pairs, bf16):
    text = " ".join(f + " " + " ".join(v) for f, v in pairs) + (" --bf16" if bf16 else "")
    try:
        plan, ignored = plan_from_megatron(text, *_T70_SPECS)
    except InputError as e:
        assert str(e)
        return
    assert isinstance(plan, Plan) and all(x.startswith("--") for x in ignored)


_T70_SPECS = (load_model("llama3-70b"), load_cluster("examples/superpod.yaml"))


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # run() drains capsys
@given(st.lists(st.sampled_from(["--format", "megatron", "torchtitan", "deepspeed", "x", "-m",
                                 "llama3-70b", "nope", "-c", "examples/superpod.yaml", "--gpus",
                                 "0", "8", "nan", "--out", "/nonexistent/x", "PLAN",
                                 "/nonexistent.yaml", "--from", "megatron-bridge"]),
                max_size=8))
def test_fuzzed_export_command_lines(capsys, argv):
    argv = [str(LAUNCH / "llama3-70b.plan.yaml") if a == "PLAN" else a for a in argv]
    code, _, _ = run(capsys, "export", *argv)  # run() asserts no traceback
    assert code in (0, 2)


def test_moe_and_mla_architecture_arguments_round_trip():
    """DeepSeek-V3: 3 dense then 58 MoE layers (``--moe-layer-freq``), MLA ranks, a shared
    expert; 61 layers on pp 16 are uneven with three lighter stages (the layout string)."""
    m, c = load_model("deepseek-v3"), load_cluster("dgx-h100-superpod", 1024)
    t = Target(m, c)
    plan = Plan.model_validate(dict(pp=16, dp=64, ep=8, expert_tp=1, global_batch_size=4096,
                                    seq_len=4096, zero_stage=1, uneven_pipeline=True,
                                    recompute="full"))
    args = megatron.to_args(plan, t)
    assert args[args.index("--moe-layer-freq") + 1] == "([0]*3+[1]*58)"
    assert "--multi-latent-attention" in args and "--kv-lora-rank" in args
    assert args[args.index("--moe-shared-expert-intermediate-size") + 1] == str(
        m.moe.num_shared_experts * (m.moe.shared_expert_ffn_hidden_size
                                    or m.moe.expert_ffn_hidden_size))
    back, ignored = megatron.parse_args(" ".join(args), t)
    assert ignored == [] and back == megatron.normalized(plan, t)
    assert back.recompute == {"dense": "full", "moe": "full"}
    assert args[args.index("--pipeline-model-parallel-layout") + 1] == (
        "Et*3|t*3|(t*4|)*13t*3L")
    with pytest.raises(InputError, match="--normalization LayerNorm describes a different"):
        megatron.parse_args(" ".join(args) + " --normalization LayerNorm", t)


def test_python_api():
    import planner

    golden = _yaml(LAUNCH / "llama3-70b.plan.yaml")
    text = planner.export_plan("megatron", "llama3-70b", "examples/superpod.yaml", golden)
    assert text == (LAUNCH / "llama3-70b.megatron.sh").read_text()
    plan, ignored = planner.plan_from_megatron(text + " --lr 1", "llama3-70b",
                                               "examples/superpod.yaml")
    assert (plan.tp, plan.pp, plan.dp) == (golden["tp"], golden["pp"], golden["dp"])
    assert ignored == ["--lr"]
    for bad in (3, None):
        with pytest.raises(InputError):
            planner.export_plan(bad, "llama3-70b", "examples/superpod.yaml", {})
        with pytest.raises(InputError):
            planner.plan_from_megatron(bad, "llama3-70b", "examples/superpod.yaml")
    import planner.export as pkg  # the subpackage is not shadowed by the API function
    assert pkg.FORMATS == FORMATS


@SETTINGS
@given(space_plans())
def test_bridge_overrides_state_what_megatron_args_state(case):
    """Megatron-Bridge runs Megatron-Core: it accepts what Megatron-LM accepts, short of the
    precisions its registered recipes cannot state, and its overrides carry the same degrees,
    batch and sequence."""
    model, cluster, plan = case
    t = Target(model, cluster)
    try:
        args = megatron.to_args(plan, t)
    except InputError:
        with pytest.raises(InputError):
            bridge.overrides(plan, t)
        return
    try:
        lines = bridge.overrides(plan, t)
    except InputError as e:
        _refused(e, "megatron-bridge")
        assert any(f in str(e) for f in ("dtype=", "grad_reduce_dtype=", "fp8_params=",
                                         "attention="))
        return
    kv = dict(line.split("=", 1) for line in lines)
    value = {a: args[i + 1] for i, a in enumerate(args[:-1]) if a.startswith("--")}
    for key, flag in (("model.tensor_model_parallel_size", "--tensor-model-parallel-size"),
                      ("model.pipeline_model_parallel_size", "--pipeline-model-parallel-size"),
                      ("model.context_parallel_size", "--context-parallel-size"),
                      ("train.micro_batch_size", "--micro-batch-size"),
                      ("train.global_batch_size", "--global-batch-size"),
                      ("dataset.seq_length", "--seq-length")):
        assert kv[key] == value[flag]
    assert kv["ddp.use_distributed_optimizer"] == str("--use-distributed-optimizer" in args).lower()
    assert kv["model.sequence_parallel"] == str("--sequence-parallel" in args).lower()


def test_from_megatron_with_plan_overrides_or_a_dlrm_is_refused(capsys):
    code, out, err = run(capsys, "evaluate", "-m", "llama3-70b", "-c", "examples/superpod.yaml",
                         "--tp", "4", "--from", "megatron", "--bf16")
    assert code == 2 and "drop tp" in out + err
    code, out, err = run(capsys, "export", str(LAUNCH / "llama3-70b.plan.yaml"), "-m", "dlrm-a",
                         "-c", "examples/superpod.yaml", "--format", "megatron")
    assert code == 2 and "transformer" in out + err


# ---- every name written exists in the pinned framework source ---------------------------------

NAMES = json.loads((ROOT / "tests" / "data" / "export_names.json").read_text())


def check_megatron_args(args: list[str]) -> None:
    """Each option is one of arguments.py's (core_v0.15.3), switches take no value, the
    others as many as their nargs, and a value with choices is one of them."""
    known = NAMES["megatron"]
    i = 0
    while i < len(args):
        opt = args[i]
        assert opt in known, f"{opt} is not a Megatron-LM core_v0.15.3 argument"
        j = i + 1
        while j < len(args) and not args[j].startswith("--"):
            j += 1
        values, spec = args[i + 1:j], known[opt]
        if spec["flag"]:
            assert values == [], opt
        elif spec["nargs"] in ("+", "*"):
            assert values or spec["nargs"] == "*", opt
        else:
            assert len(values) == 1, (opt, values)
        if spec["choices"]:
            assert all(v in spec["choices"] for v in values), (opt, values, spec["choices"])
        i = j


def check_bridge(lines: list[str]) -> None:
    names = NAMES["megatron-bridge"]
    for line in lines:
        key, value = line.split("=", 1)
        section, _, field = key.partition(".")
        if not field:
            assert section == "mixed_precision" and value in names["mixed_precision"], line
        else:
            assert field in names[section], f"{key} is not a Megatron-Bridge v0.6.0 field"


def check_torchtitan(cfg: dict) -> None:
    classes = NAMES["torchtitan"]
    for section, table in cfg.items():
        cls = "JobConfig"
        for part in section.split("."):
            assert part in classes[cls], f"[{section}] is not a torchtitan v0.2.2 section"
            cls = classes[cls][part]
        for key in table:
            assert key in classes[cls], f"{section}.{key} is not a torchtitan v0.2.2 field"


def check_deepspeed(cfg: dict) -> None:
    ds = NAMES["deepspeed"]
    for key, value in cfg.items():
        if key == "planner_export":
            continue
        assert key in ds["constants"], f"{key} is not a DeepSpeed v0.18.0 key"
        if isinstance(value, dict) and key != "zero_optimization":
            assert all(k in ds["constants"] for k in value), key
    for key, value in cfg["zero_optimization"].items():
        assert key in ds["zero"], key
        if isinstance(value, dict):
            assert all(k in ds["offload"] for k in value), key


def test_every_written_name_exists_in_the_pinned_sources():
    for plan_file, m, c, gpus, fmt, out in golden_files():
        text = (LAUNCH / out).read_text()
        if fmt == "megatron":
            args = shlex.split(text.replace("\\\n", " "), comments=True)
            check_megatron_args([a for a in args[args.index("pretrain_gpt.py") + 1:]
                                 if a != "$@"])
        elif fmt == "megatron-bridge":
            check_bridge([x for x in text.splitlines() if x and not x.startswith("#")])
        elif fmt == "torchtitan":
            check_torchtitan(tomllib.loads(text))
        else:
            check_deepspeed(json.loads(text))


@SETTINGS
@given(space_plans(), st.sampled_from(["megatron", "megatron-bridge"]))
def test_every_megatron_and_bridge_name_exists(case, fmt):
    model, cluster, plan = case
    t = Target(model, cluster)
    try:
        if fmt == "megatron":
            check_megatron_args(megatron.to_args(plan, t))
        else:
            check_bridge(bridge.overrides(plan, t))
    except InputError:
        return


@SETTINGS
@given(st.sampled_from(["deepspeed", "torchtitan"]).flatmap(
    lambda f: st.tuples(st.just(f), space_plans(fmt=f))))
def test_every_torchtitan_and_deepspeed_name_exists(fmt_case):
    fmt, (model, cluster, plan) = fmt_case
    t = Target(model, cluster)
    try:
        if fmt == "deepspeed":
            check_deepspeed(deepspeed.config(plan, t))
        else:
            check_torchtitan(torchtitan.config(plan, t))
    except InputError:
        return


def test_the_name_checks_can_fail():
    with pytest.raises(AssertionError):
        check_megatron_args(["--tensor-parallel-size", "4"])
    with pytest.raises(AssertionError):
        check_megatron_args(["--recompute-granularity", "partial"])
    with pytest.raises(AssertionError):
        check_megatron_args(["--bf16", "1"])
    with pytest.raises(AssertionError):
        check_bridge(["model.tensor_parallel_size=4"])
    with pytest.raises(AssertionError):
        check_torchtitan({"parallelism": {"fsdp_degree": 2}})
    with pytest.raises(AssertionError):
        check_deepspeed({"zero_optimization": {"stage": 3, "offload_params": {}}})
