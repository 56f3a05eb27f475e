"""Configurations frameworks published as run fit their GPUs in the cost model
(hardware_catalog/calibration/memory_recipes.yaml), and the memory terms they rely on."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from planner.costmodel.frameworks import plan_violations, unstated_defaults
from planner.costmodel.runtime import apply_profile
from planner.costmodel.train.evaluator import evaluate
from planner.costmodel.numerics import Numerics
from planner.costmodel.train.stage import state_bytes
from planner.specs.framework import load_framework
from planner.specs.loaders import load_cluster, load_model
from planner.specs.plan import Plan
from planner.validation.nemo import nemo_data, recipe_model

GiB = 2**30


def _recipes() -> list[dict]:
    path = resources.files("hardware_catalog") / "calibration" / "memory_recipes.yaml"
    return yaml.safe_load(path.read_text())["recipes"]


def _setup(row: dict):
    model = (recipe_model(nemo_data(), row["model"]) if row.get("model_from") == "nemo"
             else load_model(row["model"]))
    cluster = load_cluster(row["cluster"], row["gpus"])
    if "hbm_gib" in row:
        cluster = cluster.model_copy(
            update={"gpu": cluster.gpu.model_copy(update={"hbm_gib": row["hbm_gib"]})})
    # each recipe is costed as its framework runs it (its loss's buffers among the rest),
    # what its source leaves unstated at the framework's defaults, as `planner evaluate
    # --framework` costs it (the NVIDIA performance recipes' sequence parallelism and TP
    # overlap with tp > 1: the file's header)
    profile = load_framework(row["framework"])
    cluster = apply_profile(cluster, profile)
    fields = dict(row["plan"])
    tp = fields.get("tp", 1)
    if row["framework"] in ("nemo", "megatron-core"):
        fields.setdefault("sequence_parallel", tp > 1)
        fields.setdefault("overlap_tp_comm", tp > 1)
    return model, cluster, Plan(**unstated_defaults(profile, fields))


RECIPES = _recipes()


def test_every_recipe_is_sourced():
    for row in RECIPES:
        assert row["source"] and row["framework"] in ("nemo", "megatron-core", "torchtitan",
                                                      "pytorch")
        assert row["plan"]["tp"] * row["plan"]["cp"] * row["plan"]["dp"] * row["plan"]["pp"] \
            == row["gpus"], row["name"]


@pytest.mark.parametrize("row", RECIPES, ids=[r["name"] for r in RECIPES])
def test_published_recipe_fits(row):
    model, cluster, plan = _setup(row)
    est = evaluate(model, cluster, plan)
    assert est.memory_per_gpu_bytes is not None, est.reasons
    assert est.memory_per_gpu_bytes <= cluster.gpu.hbm_bytes, est.reasons
    if not row.get("memory_only"):
        assert est.feasible, est.reasons
        # and its framework runs it as costed (a row whose parallelism its profile cannot
        # state says which)
        broken = plan_violations(load_framework(row["framework"]), plan, model)
        if row.get("profile_gap"):
            assert broken and all(row["profile_gap"].startswith(f"{v.field} {v.value}")
                                  for v in broken), broken
        else:
            assert not broken, broken


def test_unstated_gradient_reduction_is_the_frameworks():
    """A NeMo/Megatron-Bridge BF16 performance recipe that states no gradient reduction runs
    bf16 main gradients (perf_recipes/_common.py, grad_reduce_in_fp32=False) and the
    distributed optimizer; Megatron-LM's bf16 default is fp32 (validate_args), DeepSpeed's
    the model dtype (get_data_types), torchtitan's float32 (mixed_precision_reduce)."""
    fields = dict(tp=8, pp=8, cp=2, dp=4, microbatch_size=1, global_batch_size=768,
                  seq_len=8192, dtype="bf16")
    got = {name: unstated_defaults(load_framework(name), fields)
           for name in ("nemo", "megatron-core", "deepspeed", "torchtitan", "pytorch")}
    assert {n: g["grad_reduce_dtype"] for n, g in got.items()} == {
        "nemo": "bf16", "megatron-core": "fp32", "deepspeed": "bf16", "torchtitan": "fp32",
        "pytorch": "fp32"}
    assert {n: g.get("zero_stage") for n, g in got.items()} == {
        "nemo": 1, "megatron-core": 0, "deepspeed": 0, "torchtitan": 3, "pytorch": None}
    # FP8 performance recipes reduce in bf16 too; what a plan states is kept
    assert unstated_defaults(load_framework("nemo"), dict(fields, dtype="fp8"))[
        "grad_reduce_dtype"] == "bf16"
    assert unstated_defaults(load_framework("nemo"), dict(fields, grad_reduce_dtype="fp32",
                                                          zero_stage=0)) == dict(
        fields, grad_reduce_dtype="fp32", zero_stage=0, attention="flash",
        fused_elementwise=True, overlap_tp_comm=True)
    # one rank of data parallelism: no ZeRO stage is chosen for it
    assert "zero_stage" not in unstated_defaults(load_framework("nemo"), dict(fields, dp=1, cp=1))


def test_opt_175b_fp16_fsdp_fits_under_the_pytorch_profile():
    """OPT-175B (992 A100 80GB, FSDP, FP16 with dynamic loss scaling) is costed in fp16:
    the pytorch profile runs fp16 (it refused it before) and the run fits."""
    row = next(r for r in RECIPES if r["name"].startswith("opt-175b"))
    model, cluster, plan = _setup(row)
    assert plan.dtype == "fp16" and plan.zero_stage == 3
    assert "fp16" in load_framework("pytorch").dtypes
    est = evaluate(model, cluster, plan)
    assert est.feasible, est.reasons


def test_the_plain_nemo_recipe_states_fp32_gradients():
    """NeMo's plain llama31_405b recipe (performance_mode=False) keeps bf16_mixed()'s
    grad_reduce_in_fp32=True: its row pins fp32, and unpinned it would cost half the
    gradient bytes."""
    row = next(r for r in RECIPES if r["name"] == "nemo-h100-llama31-405b-576-bf16")
    assert row["plan"]["grad_reduce_dtype"] == "fp32"
    assert all("grad_reduce_dtype" not in r["plan"] for r in RECIPES
               if r["framework"] == "nemo" and r is not row)


@pytest.mark.parametrize("name", ["mbridge-gb200-llama31-405b-128-bf16",
                                  "mbridge-h100-llama31-405b-512-bf16"])
def test_bf16_main_gradients_are_what_lets_the_405b_recipes_fit(name):
    """The Megatron-Bridge 405B performance recipes fit with the bf16 main-gradient buffer
    they set (grad_reduce_in_fp32=False), the nemo profile's default, and not with
    Megatron's fp32 default."""
    row = next(r for r in RECIPES if r["name"] == name)
    model, cluster, plan = _setup(row)
    assert plan.grad_reduce_dtype == "bf16" and plan.zero_stage == 1
    bf16 = evaluate(model, cluster, plan)
    fp32 = evaluate(model, cluster, plan.model_copy(update={"grad_reduce_dtype": "fp32"}))
    assert bf16.feasible and not fp32.feasible
    # the only difference is 2 bytes per local parameter of the gradient buffer
    grad = bf16.memory_breakdown_bytes["gradients"]
    assert fp32.memory_breakdown_bytes["gradients"] == pytest.approx(2 * grad)


def test_distributed_optimizer_bytes_by_hand():
    """Megatron-Core's distributed optimizer (docs: 'Distributed Optimizer', bytes per
    parameter): bf16 parameters 2 B and the main-gradient buffer (4 B fp32, 2 B bf16) on every
    rank, fp32 master + Adam m and v (12 B) split over the data-parallel group."""
    p, d = 1_000_000, 4
    fp32 = state_bytes(p, 1, d, Numerics("bf16", grad_reduce_dtype="fp32"))
    bf16 = state_bytes(p, 1, d, Numerics("bf16", grad_reduce_dtype="bf16"))
    assert (fp32.weights, fp32.gradients, fp32.optimizer) == (2e6, 4e6, 3e6)
    assert (bf16.weights, bf16.gradients, bf16.optimizer) == (2e6, 2e6, 3e6)
    # FSDP2 (zero_stage 3): everything sharded, no separate replicated gradient buffer
    z3 = state_bytes(p, 3, d, Numerics("bf16"))
    assert (z3.weights, z3.gradients, z3.optimizer) == (0.5e6, 1e6, 3e6)


def test_torchtitan_measured_peak_is_not_under_counted():
    """torchtitan's published peak (Llama 3.1 8B, 32K tokens, full AC, 83.9 GiB reserved)
    against the model, within 10 %: torchtitan computes the loss on an fp32 copy of the
    logits in eager PyTorch (the log-softmax output and two fp32 gradients live at the peak,
    the profile's ``kernels.cross_entropy``); with Megatron's one fp32 buffer it is
    under-counted."""
    row = next(r for r in RECIPES if "measured_peak_gib" in r)
    model, cluster, plan = _setup(row)
    est = evaluate(model, cluster, plan)
    assert est.memory_per_gpu_bytes / GiB >= 0.9 * row["measured_peak_gib"]
    assert est.memory_per_gpu_bytes <= cluster.gpu.hbm_bytes
    fused = load_framework("torchtitan")
    fused = fused.model_copy(update={"kernels": fused.kernels.model_copy(
        update={"cross_entropy": "fused"})})
    base = load_cluster(row["cluster"], row["gpus"])
    base = base.model_copy(update={"gpu": base.gpu.model_copy(update={"hbm_gib": row["hbm_gib"]})})
    one_buffer = evaluate(model, apply_profile(base, fused), plan)
    assert one_buffer.memory_per_gpu_bytes / GiB < 0.9 * row["measured_peak_gib"]
    # the difference is the loss's two extra fp32 buffers per local logit
    extra = 8.0 * plan.microbatch_size * plan.seq_len * model.vocab_size
    assert est.memory_breakdown_bytes["workspace"] - one_buffer.memory_breakdown_bytes[
        "workspace"] == pytest.approx(extra)


def test_bf16_optimizer_state_bytes_by_hand():
    """Apex DistributedFusedAdam with ``dtype=bf16`` (NeMo 1.x ``optim.dtype``): bf16 Adam
    moments (2 + 2 B) split over the data-parallel group, no master copy beside bf16 model
    weights (NeMo ``store_params=False`` when the optimizer and model dtypes match) and a
    bf16 one (2 B) beside FP8 parameters (``store_params=True``)."""
    p, d = 1_000_000, 4
    bf16 = state_bytes(p, 1, d, Numerics("bf16", grad_reduce_dtype="bf16", optimizer_dtype="bf16"))
    assert (bf16.weights, bf16.gradients, bf16.optimizer) == (2e6, 2e6, 1e6)
    fp8 = state_bytes(p, 1, d, Numerics("fp8", fp8_params=True, grad_reduce_dtype="bf16",
                                        optimizer_dtype="bf16"))
    assert (fp8.weights, fp8.gradients, fp8.optimizer) == (1e6, 2e6, 1.5e6)
    # FP8 compute on bf16 weights: the bf16 weights are still the master copy
    fp8_cast = state_bytes(p, 1, d, Numerics("fp8", optimizer_dtype="bf16"))
    assert fp8_cast.optimizer == 1e6
    # the default keeps fp32 master + moments
    assert state_bytes(p, 1, d, Numerics("bf16")).optimizer == 3e6
    assert Numerics.of(Plan(tp=1, pp=1, dp=4, microbatch_size=1, global_batch_size=4,
                            seq_len=128, optimizer_dtype="bf16")).optimizer_dtype == "bf16"


def test_nemotron4_340b_fits_with_its_recipes_optimizer():
    """dgxc-benchmarking's Nemotron-4 340B BF16 run on 128 H100 (TP8 PP8 VP12, dp 2) sets
    optim.dtype=bf16 and selective recomputation (nemotron4-340b-synth.yaml): it fits; with
    fp32 Adam states (12 B per parameter over dp 2) it would not."""
    from planner.validation.corpus import runs_from

    run = next(r for r in runs_from("corpus/dgxc-nemotron4.yaml")
               if r.name == "dgxc2411-h100-nemotron4-340b-bf16-128")
    assert run.plan.optimizer_dtype == "bf16" and run.plan.recompute == "selective"
    est = run.estimate()
    assert est.feasible, est.reasons
    fp32 = run.estimate(plan=run.plan.model_copy(update={"optimizer_dtype": "fp32"}))
    assert not fp32.feasible
    assert fp32.memory_breakdown_bytes["optimizer"] == pytest.approx(
        3 * est.memory_breakdown_bytes["optimizer"])


def test_llama3_405b_runs_on_its_papers_pipeline_layout():
    """The Llama 3 405B rows are costed on the layout the paper describes (Sec. 3.3.2): one
    layer per chunk, 16 x 8 chunks for 126 layers with an embedding-only and a loss-only end
    chunk, and FSDP that keeps the stage's bf16 weights gathered through the step (no reshard
    after forward) while gradients and optimizer states are sharded."""
    from planner.costmodel.layer import dense_layer_params
    from planner.validation.corpus import runs_from

    run = next(r for r in runs_from("corpus/meta-llama3.yaml")
               if r.name == "meta-llama3-405b-h100-16384-cp1-8k")
    assert (run.plan.pp, run.plan.virtual_stages, run.plan.zero_stage) == (16, 8, 2)
    est = run.estimate()
    assert est.feasible, est.reasons
    # the worst stage holds 8 layers' full bf16 weights (TP 8): 2 B x 8 x layer / 8
    layer = dense_layer_params(run.model, 8)
    assert est.memory_breakdown_bytes["weights"] == pytest.approx(2 * 8 * layer)
