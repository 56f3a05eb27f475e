"""Framework profiles: one statement of what each framework runs, read by the search space
and by the exporters. Whole restricted spaces of small instances are walked (every plan,
not a sample) and exported with the profile's exporter; each rule family has a plan that
breaks it, refused by the exporter and absent from the space."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import planner.catalog as catalog
from formulations.train.exhaustive import run_exhaustive
from formulations.train.search import run_search
from formulations.train.space import SearchSpace, SpaceOptions
from planner.costmodel.train.tables import build_tables
from planner.costmodel.frameworks import MODEL_RULES, RULES, framework_defaults, violations
from planner.errors import InputError
from planner.export import export_plan
from planner.specs.cluster import OffloadTier
from planner.specs.framework import FrameworkProfile, load_framework
from planner.specs.plan import Plan
from planner.specs.plan_base import model_defaults
from planner.specs.requests import DEFAULT_FRAMEWORK, framework_profile

from conftest import small_cluster, tiny_model
from instances import instances

PROFILES = ("megatron-core", "nemo", "torchtitan", "deepspeed", "pytorch")
OPTS = SpaceOptions(max_microbatch=2, max_virtual_stages=2, min_cp_tokens=256)


def _filled(profile: FrameworkProfile, base: dict, fixed: dict | None = None) -> dict:
    """``base`` with the framework's defaults for the settings neither it nor ``fixed``
    states (what build_space fills before it builds a space)."""
    return framework_defaults(profile, base, set(base) | set(fixed or {}))


def _space(name: str, model=None, cluster=None, fixed=None, base=None) -> SearchSpace:
    model = model or tiny_model(num_layers=6, hidden_size=512, num_attention_heads=8,
                                num_kv_heads=4, ffn_hidden_size=1024, seq_len=1024,
                                global_batch_size=16)
    cluster = cluster or small_cluster(16, domain=4)
    profile = load_framework(name)
    return SearchSpace(model, cluster, _filled(profile, {**model_defaults(model), **(base or {})},
                                               fixed), dict(fixed or {}),
                       replace(OPTS, framework=profile))


def _walk(space: SearchSpace, fmt: str) -> int:
    n = 0
    for o, dom, inner in space:
        plan = space.plan(o, dom, inner)
        assert not violations(space.options.framework, plan, space.model, space.cluster), plan
        export_plan(fmt, plan, space.model, space.cluster)  # raises on a refusal
        n += 1
    return n


def test_catalog_lists_the_five_profiles():
    assert set(PROFILES) <= set(catalog.names("frameworks"))
    for name in PROFILES:
        p = load_framework(name)
        assert p.kernels.attention_backend in ("cudnn", "flash2", "flash3", "unfused")
        assert p.export_format is not None
    # no default below the request: a request without a framework runs none
    assert framework_profile(None) is None and DEFAULT_FRAMEWORK is None
    with pytest.raises(InputError, match="framework None: expected a catalog name"):
        load_framework(None)
    assert load_framework("megatron-bridge").name == "nemo"


def test_an_unknown_framework_is_an_input_error():
    with pytest.raises(InputError, match="--framework 'torchtitn'.*closest: torchtitan"):
        load_framework("torchtitn")


def test_every_restriction_needs_a_citation():
    data = load_framework("torchtitan").model_dump()
    data["sources"] = {k: v for k, v in data["sources"].items() if k != "zero_stages"}
    with pytest.raises(ValueError, match="no citation for \\['zero_stages'\\]"):
        FrameworkProfile.model_validate(data)


@pytest.mark.parametrize("name", PROFILES)
def test_whole_space_exports_without_refusal(name):
    """Every plan of the restricted space of two small instances (a dense model on 16 GPUs
    in domains of 4, and one whose layers split unevenly on 8) exports with the profile's
    exporter."""
    fmt = load_framework(name).export_format
    total = 0
    total += _walk(_space(name), fmt)
    odd = tiny_model(num_layers=5, hidden_size=512, num_attention_heads=8, num_kv_heads=8,
                     ffn_hidden_size=1024, seq_len=2048, global_batch_size=8)
    total += _walk(_space(name, odd, small_cluster(8, domain=8)), fmt)
    assert total > 0


def test_whole_space_exports_moe():
    """An MoE model (dense first layer, experts split over ep) in Megatron-Core and
    torchtitan: one recomputation for every layer type, expert TP 1 or tp."""
    m = tiny_model(num_layers=4, hidden_size=512, num_attention_heads=8, num_kv_heads=8,
                   ffn_hidden_size=1024, seq_len=1024, global_batch_size=8,
                   moe=dict(num_experts=4, top_k=2, expert_ffn_hidden_size=512,
                            first_k_dense=1))
    for name in ("megatron-core", "torchtitan"):
        space = _space(name, m, small_cluster(8, domain=4))
        assert all(len(set(rc)) == 1 for rc in space.recompute_options())
        assert _walk(space, load_framework(name).export_format) > 0


#: one plan per rule family that the framework cannot run, and the field its refusal names
BROKEN = [
    ("megatron-core", dict(zero_stage=3), "zero_stage=3"),
    ("megatron-core", dict(zero_stage=1, offload_optimizer=True), "offload_optimizer=true"),
    ("megatron-core", dict(fused_elementwise=False), "fused_elementwise=false"),
    ("megatron-core", dict(tp=2, dp=4, sequence_parallel=False, tp_comm="rs_ag"), "tp_comm=rs_ag"),
    ("megatron-core", dict(tp=2, dp=4, placement={"order": ["tp", "dp", "cp", "pp"]}),
     "placement.order"),
    ("megatron-core", dict(tp=2, dp=8, placement={"domain": {"dp": 4}}), "placement.domain"),
    ("megatron-core", dict(pp=2, dp=4, virtual_stages=2, overlap_p2p_comm=False),
     "overlap_p2p_comm=false"),
    ("megatron-core", dict(zero_stage=1, overlap_param_gather=True,
                           overlap_dp_grad_reduce=False),
     "overlap_param_gather=true"),
    ("nemo", dict(dtype="fp16"), "dtype=fp16"),
    ("nemo", dict(dtype="fp8"), "fp8_params=false"),
    ("nemo", dict(attention="standard"), "attention=standard"),
    ("torchtitan", dict(zero_stage=1), "zero_stage=1"),
    ("torchtitan", dict(zero_stage=0, tp=2, dp=4, sequence_parallel=True), "zero_stage=0"),
    ("torchtitan", dict(zero_stage=3, tp=2, dp=4, sequence_parallel=False),
     "sequence_parallel=false"),
    ("torchtitan", dict(zero_stage=3, recompute="selective"), "recompute=selective"),
    ("torchtitan", dict(zero_stage=3, cp=2, dp=4, cp_comm="all_to_all"), "cp_comm=all_to_all"),
    ("torchtitan", dict(zero_stage=3, overlap_dp_grad_reduce=False), "overlap_dp_grad_reduce"),
    ("torchtitan", dict(zero_stage=3, tp=8, dp=1, sequence_parallel=True,
                        overlap_tp_comm=False), "zero_stage=3"),
    ("deepspeed", dict(tp=2, dp=4), "tp=2"),
    ("deepspeed", dict(zero_stage=2, recompute="half"), "recompute=half"),
    ("deepspeed", dict(zero_stage=0, grad_reduce_dtype="bf16"), "overlap_dp_grad_reduce=true"),
    # fp32 gradient accumulation stated (DeepSpeed's default for bf16 is bf16: get_data_types)
    ("deepspeed", dict(zero_stage=1, offload_optimizer=False, grad_reduce_dtype="fp32"),
     "grad_reduce_dtype=fp32"),
    ("deepspeed", dict(zero_stage=0, overlap_dp_grad_reduce=False, overlap_param_gather=False,
                       grad_reduce_dtype="fp32"), "grad_reduce_dtype=fp32"),
    ("deepspeed", dict(dtype="fp16", zero_stage=0, overlap_dp_grad_reduce=False,
                       overlap_param_gather=False), "zero_stage=0"),
    ("deepspeed", dict(zero_stage=2, overlap_param_gather=False), "overlap_param_gather=false"),
    ("pytorch", dict(zero_stage=3, fused_elementwise=True), "fused_elementwise=true"),
    ("pytorch", dict(zero_stage=0, tp=2, dp=4, overlap_tp_comm=False), "tp=2"),
    ("megatron-core", dict(pp=2, dp=4, virtual_stages=1, recompute="half", uneven_pipeline=True),
     "recompute=half"),
]


@pytest.mark.parametrize("name, change, needle", BROKEN)
def test_a_broken_rule_is_refused_and_absent_from_the_space(name, change, needle):
    """The exporter refuses the plan naming the field (pytorch, whose export is
    torchtitan's file, by its violations), and no plan of the space breaks the rule."""
    profile = load_framework(name)
    layers = 5 if change.get("recompute") == "half" else 8  # chunks of 2 and 3 layers
    model = tiny_model(num_layers=layers, hidden_size=512, num_attention_heads=8,
                       num_kv_heads=8, ffn_hidden_size=1024, seq_len=4096, global_batch_size=16)
    cluster = small_cluster(16 if "domain" in str(change) else 8, domain=8)
    cluster = cluster.model_copy(update={"offload": OffloadTier(
        name="host", capacity_gib_per_gpu=256.0, bandwidth_GBps=64.0, efficiency=0.8,
        cpu_adam_params_per_s=1e9)})
    plan = Plan.model_validate({"dp": cluster.num_gpus, "global_batch_size": 16,
                                "seq_len": 4096, **change})
    found = violations(profile, plan, model, cluster)
    assert found and needle in str(found[0]), found
    if name != "pytorch":
        with pytest.raises(InputError, match=f"cannot export to {profile.export_format}: ") as e:
            export_plan(profile.export_format, plan, model, cluster)
        assert needle in str(e.value)
    settings = {k: v for k, v in change.items() if k in (
        "dtype", "grad_reduce_dtype", "attention", "fused_elementwise", "overlap_p2p_comm",
        "overlap_param_gather", "overlap_dp_grad_reduce", "overlap_tp_comm")}
    try:
        space = SearchSpace(model, cluster, _filled(profile, {**model_defaults(model), **settings}),
                            {}, replace(OPTS, framework=profile))
    except InputError as e:  # a setting the framework never runs: no space at all
        assert needle.split("=")[0] in str(e)
        return
    decided = {k: v for k, v in change.items() if k not in settings and k != "placement"}
    for o, dom, inner in space:
        p = space.plan(o, dom, inner)
        assert not violations(profile, p, model, cluster), p
        assert "placement" in change or not all(getattr(p, k) == v for k, v in decided.items())


def test_the_solve_reduces_gradients_as_the_framework_does_by_default():
    """A solve that states no gradient reduction searches the framework's default for its
    precision: bf16 in NVIDIA's performance recipes (nemo) and DeepSpeed (the model dtype),
    fp32 in Megatron-LM (validate_args), torchtitan and its export (pytorch); a stated one is
    kept."""
    got = {n: _space(n).base["grad_reduce_dtype"] for n in PROFILES}
    assert got == {"megatron-core": "fp32", "nemo": "bf16", "torchtitan": "fp32",
                   "deepspeed": "bf16", "pytorch": "fp32"}
    assert _space("nemo", base={"grad_reduce_dtype": "fp32"}).base["grad_reduce_dtype"] == "fp32"
    assert _space("nemo", base={"dtype": "fp8"}).base["grad_reduce_dtype"] == "bf16"


def test_nemo_exports_the_gradient_reduction_it_costs():
    """bf16 gradients are the performance recipes' MixedPrecisionConfig edited in place
    (grad_reduce_in_fp32=false); a registered recipe string would set fp32 again."""
    model = tiny_model(num_layers=4, hidden_size=512, num_attention_heads=8, num_kv_heads=8,
                       ffn_hidden_size=1024, seq_len=1024, global_batch_size=8)
    cluster = small_cluster(8, domain=8)
    base = dict(dp=8, zero_stage=1, global_batch_size=8, seq_len=1024)
    bf16 = export_plan("megatron-bridge", Plan(**base, grad_reduce_dtype="bf16"), model, cluster)
    fp32 = export_plan("megatron-bridge", Plan(**base, grad_reduce_dtype="fp32"), model, cluster)
    lines = lambda text: [x for x in text.splitlines() if not x.startswith("#")]
    assert "mixed_precision.grad_reduce_in_fp32=false" in lines(bf16)
    assert "ddp.grad_reduce_in_fp32=false" in lines(bf16)
    assert not any(x.startswith("mixed_precision=") for x in lines(bf16))
    assert "mixed_precision=bf16_mixed" in lines(fp32)
    assert not any("grad_reduce_in_fp32" in x for x in lines(fp32))


def test_pytorch_runs_fp16_and_torchtitans_file_refuses_it():
    """FSDP2 trains in fp16 with a sharded gradient scaler (OPT-175B: FSDP, FP16 weights,
    dynamic loss scaling), so the pytorch profile runs it; its export, torchtitan's TOML,
    has no float16 parameter dtype and refuses it."""
    model = tiny_model(num_layers=4, hidden_size=512, num_attention_heads=8, num_kv_heads=8,
                       ffn_hidden_size=1024, seq_len=1024, global_batch_size=8)
    cluster = small_cluster(8, domain=8)
    plan = Plan(dp=8, zero_stage=3, dtype="fp16", fused_elementwise=False,
                global_batch_size=8, seq_len=1024)
    assert not violations(load_framework("pytorch"), plan, model, cluster)
    with pytest.raises(InputError, match="dtype=fp16"):
        export_plan("torchtitan", plan, model, cluster)
    assert _space("pytorch", base={"dtype": "fp16"}).base["dtype"] == "fp16"


def test_settings_a_framework_never_runs_are_input_errors():
    with pytest.raises(InputError, match="--framework nemo: dtype=fp16"):
        _space("nemo", base={"dtype": "fp16"})
    with pytest.raises(InputError, match="--framework torchtitan: zero_stage=1"):
        _space("torchtitan", fixed={"zero_stage": 1})
    with pytest.raises(InputError, match="placement.order=tp-dp-cp-pp: framework megatron-core"):
        _space("megatron-core", fixed={"placement": {"order": ["tp", "dp", "cp", "pp"]}})


def test_every_named_rule_is_implemented_and_used():
    used = {r for n in PROFILES for r in load_framework(n).rules}
    assert used <= set(RULES) | set(MODEL_RULES)


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=instances(max_gpus=8), name=st.sampled_from(PROFILES))
def test_backends_agree_on_framework_spaces(case, name):
    """CP-SAT and MILP find the exhaustive optimum of a framework's space (its per-point
    recomputation, sp and state options are masks the three backends share)."""
    space, objective, top_k = case
    fixed = {k: v for k, v in space.fixed.items() if k not in ("zero_stage", "tp")}
    try:
        profile = load_framework(name)
        space = SearchSpace(space.model, space.cluster, _filled(profile, space.base, fixed),
                            fixed, replace(space.options, framework=profile))
    except InputError:
        return
    ref = run_exhaustive(space, objective, top_k)
    if not space.outers:
        assert ref.status == "infeasible"
        return
    ref_vals = [c.objective for c in ref.candidates]
    tb = build_tables(space, objective)
    for backend in ("cpsat", "milp"):
        res = run_search(tb, backend, top_k, time_limit_s=120)
        vals = [c.objective for c in res.candidates]
        assert len(vals) == len(ref_vals) and all(
            math.isclose(a, b, rel_tol=1e-9) for a, b in zip(vals, ref_vals)), (backend, vals)
        for c in res.candidates:
            assert not violations(space.options.framework, c.plan, space.model, space.cluster)


@pytest.mark.slow(reason="solves a catalog model through the CLI per framework")
def test_cli_framework_options(capsys, tmp_path):
    """solve --framework names it in the JSON and --export framework writes its format;
    without --framework, --export FORMAT picks that format's framework; evaluate
    --framework lists the rules a plan breaks; catalog lists the profiles; an unknown name
    exits 2."""
    from test_cli import run

    common = ["-m", "llama3-8b", "-c", "dgx-h100-superpod", "--gpus", "8", "--global-batch",
              "64", "--max-microbatch", "2", "--max-virtual-stages", "2", "--json"]
    dest = tmp_path / "run.toml"
    code, out, err = run(capsys, "solve", *common, "--framework", "torchtitan", "--export",
                         "framework", "--export-out", str(dest))
    assert code == 0, err
    res = json.loads(out)
    assert res["framework"] == "torchtitan" and res["plan"]["zero_stage"] in (0, 3)
    assert "[parallelism]" in dest.read_text()
    code, out, err = run(capsys, "solve", *common, "--export", "deepspeed", "--export-out",
                         str(tmp_path / "ds.json"))
    assert code == 0 and json.loads(out)["framework"] == "deepspeed", err
    # no framework: every plan, and the frameworks that run the answer, each checked
    code, out, err = run(capsys, "solve", *common)
    res = json.loads(out)
    assert code == 0 and res["framework"] is None and res["frameworks_that_run_it"]
    from planner.costmodel.frameworks import violations
    from planner.specs.framework import load_framework
    from planner.specs.loaders import load_cluster, load_model
    from planner.specs.plan import Plan

    plan, m = Plan.model_validate(res["plan"]), load_model("llama3-8b")
    c = load_cluster("dgx-h100-superpod", 8)
    for name in PROFILES:
        broken = violations(load_framework(name), plan, m, c)
        assert (name in res["frameworks_that_run_it"]) == (not broken), name
    code, out, err = run(capsys, "evaluate", "-m", "llama3-8b", "-c", "dgx-h100-superpod",
                         "--gpus", "8", "--tp", "2", "--set", "zero_stage=1", "--json",
                         "--framework", "torchtitan")
    broken = json.loads(out)["framework"]["violations"]
    assert any(v.startswith("zero_stage=1") for v in broken) and "cannot run" in err
    code, out, _ = run(capsys, "catalog", "frameworks", "--json")
    assert {r["name"] for r in json.loads(out)} >= set(PROFILES)
    code, _, err = run(capsys, "solve", *common, "--framework", "titan2")
    assert code == 2 and "--framework 'titan2'" in err


def test_evaluate_costs_unstated_settings_at_the_frameworks_defaults(capsys):
    """planner evaluate --framework nemo costs a BF16 plan that states no gradient reduction
    and no ZeRO stage as NeMo's performance recipes run it (bf16 main gradients, distributed
    optimizer) and names both defaults; without --framework the plan's own defaults (fp32,
    ZeRO 0) stay; a stated value is kept."""
    from test_cli import run

    args = ["evaluate", "-m", "llama3-8b", "-c", "dgx-h100-superpod", "--gpus", "16", "--tp",
            "2", "--global-batch", "64", "--json"]
    code, out, err = run(capsys, *args, "--framework", "nemo")
    res = json.loads(out)
    assert (res["plan"].get("grad_reduce_dtype"), res["plan"]["zero_stage"]) == ("bf16", 1), err
    assert "grad_reduce_dtype=bf16 (unstated: framework nemo's default)" in res["defaults"]
    assert "zero_stage=1 (unstated: framework nemo's default)" in res["defaults"]
    plain = json.loads(run(capsys, *args)[1])
    assert (plain["plan"].get("grad_reduce_dtype", "fp32"), plain["plan"]["zero_stage"]) == (
        "fp32", 0)
    # the distributed optimizer's bf16 gradients: 2 of fp32's 4 bytes per local parameter
    assert res["memory_breakdown_gib"]["gradients"] == pytest.approx(
        plain["memory_breakdown_gib"]["gradients"] / 2)
    stated = json.loads(run(capsys, *args, "--framework", "nemo", "--set",
                            "grad_reduce_dtype=fp32")[1])
    assert stated["plan"].get("grad_reduce_dtype", "fp32") == "fp32"
    assert not any(d.startswith("grad_reduce_dtype") for d in stated["defaults"])


#: issue 26's acceptance, as the README's Frameworks section runs it: (model, GPUs of
#: dgx-h100-superpod, --framework, --export)
ACCEPTANCE = [("llama3-70b", 512, "megatron-core", "megatron"),
              ("llama3-70b", 512, "nemo", "megatron-bridge"),
              ("llama3-70b", 512, "torchtitan", "torchtitan"),
              ("llama3-8b", 64, "deepspeed", "deepspeed")]


@pytest.mark.slow(reason="solves Llama 3 70B on 512 GPUs per framework")
@pytest.mark.parametrize("model, gpus, name, fmt", ACCEPTANCE)
def test_solve_with_a_framework_exports_its_format(capsys, tmp_path, model, gpus, name, fmt):
    """`planner solve -m M -c dgx-h100-superpod --gpus N --framework F --export FORMAT`
    exits 0 with a proven optimum of F's space that breaks none of F's rules, written in
    F's format (the file is the exporter's text of that plan)."""
    from test_cli import run

    from planner.specs.loaders import load_cluster, load_model

    dest = tmp_path / "launch"
    code, out, err = run(capsys, "solve", "-m", model, "-c", "dgx-h100-superpod", "--gpus",
                         str(gpus), "--framework", name, "--export", fmt, "--export-out",
                         str(dest), "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["framework"] == name and res["solver"]["status"] == "optimal"
    plan = Plan.model_validate(res["plan"])
    m, c = load_model(model), load_cluster("dgx-h100-superpod", gpus)
    assert not violations(load_framework(name), plan, m, c)
    assert dest.read_text() == export_plan(fmt, plan, m, c)


def test_sweep_axis_over_frameworks():
    """A sweep axis over frameworks: each point's plan is one its framework runs, and a
    point without one keeps the key it had before the field existed."""
    from planner.sweep.point import run_point
    from planner.sweep.spec import PointSpec, expand, sweep_from_dict

    spec = sweep_from_dict({"base": {"model": "llama3-8b", "cluster": "dgx-h100-superpod",
                                     "gpus": 8, "global_batch_size": 64, "time_limit_s": 20,
                                     "max_microbatch": 2, "max_virtual_stages": 2},
                            "axes": {"framework": ["megatron-core", "torchtitan"]}}, "test")
    rows = [run_point(p.spec.model_dump()) for p in expand(spec)]
    assert rows[0]["zero_stage"] in (0, 1) and rows[1]["zero_stage"] in (0, 3)
    import hashlib

    plain = PointSpec(model="llama3-8b")
    data = plain.model_dump(mode="json")
    for field in ("framework", "max_power_mw", "owned"):
        data.pop(field)  # the settings as hashed before the fields existed
    old = hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode())
    assert plain.key() == old.hexdigest()[:16]
    assert PointSpec(model="llama3-8b", framework="nemo").key() != plain.key()


# ---- DeepSpeed's optimizer wrapper (issue 40 item 4) -----------------------------------------
def test_deepspeed_fp32_accumulation_at_dp1_is_refused_with_the_bytes_it_would_misstate():
    """bf16 with fp32 accumulation at ZeRO 0 on one GPU: DeepSpeed v0.18.0 builds
    FP16_UnfusedOptimizer (engine.py _do_optimizer_sanity_check returns BFLOAT16, which
    equals DDP_BFLOAT16), whose gradients are the bf16 parameters' .grad (2 B a parameter,
    accumulated in bf16), not the fp32 buffer the cost model charges (4 B): for the tiny
    model's P parameters the plan would state 4P gradient bytes and an fp32 accumulation
    that does not run. The profile refuses it at dp 1 as at dp > 1 (the rule used to
    exempt dp x cp = 1); with bf16 accumulation the same plan is exported as costed
    (2P bytes, FP16_UnfusedOptimizer)."""
    from planner.costmodel.frameworks import deepspeed_optimizer
    from planner.costmodel.train.stage import state_bytes

    model, cluster = tiny_model(), small_cluster(1)
    base = dict(dp=1, global_batch_size=8, seq_len=1024, zero_stage=0, fused_elementwise=False,
                overlap_dp_grad_reduce=False, overlap_param_gather=False,
                placement={"order": ["tp", "cp", "ep", "dp", "pp"]})
    fp32 = Plan.model_validate({**base, "grad_reduce_dtype": "fp32"})
    bf16 = Plan.model_validate({**base, "grad_reduce_dtype": "bf16"})
    P = 1000.0
    assert state_bytes(P, 0, 1, fp32).gradients == 4 * P   # what fp32 would be charged
    assert state_bytes(P, 0, 1, bf16).gradients == 2 * P   # the bf16 .grad DeepSpeed keeps
    assert state_bytes(P, 0, 1, bf16).optimizer == 12 * P  # fp32 master + Adam, unsharded
    assert deepspeed_optimizer("bf16", "fp32", 0, False) == "FP16_UnfusedOptimizer"
    assert deepspeed_optimizer("bf16", "bf16", 0, False) == "FP16_UnfusedOptimizer"
    ds = load_framework("deepspeed")
    hit = violations(ds, fp32, model)
    assert [v.field for v in hit] == ["grad_reduce_dtype"] and "FP16_UnfusedOptimizer" in hit[0].why
    assert violations(ds, bf16, model) == []
    with pytest.raises(InputError, match="grad_reduce_dtype=fp32"):
        export_plan("deepspeed", fp32, model, cluster)
    cfg = json.loads(export_plan("deepspeed", bf16, model, cluster))
    assert cfg["zero_optimization"]["stage"] == 0 and cfg["data_types"]["grad_accum_dtype"] == "bf16"
    # the header says which wrapper was costed (the file has no optimizer section)
    assert cfg["planner_export"][-1].endswith(
        "wraps it in FP16_UnfusedOptimizer (FP16_Optimizer for FusedAdam), whose memory and "
        "gradient reduction are costed")


@pytest.mark.parametrize("dtype,accum,stage,offload,fused,expect", [
    ("bf16", "bf16", 0, False, False, "FP16_UnfusedOptimizer"),
    ("bf16", "bf16", 0, False, True, "FP16_Optimizer"),     # FusedAdam (l. 1666)
    ("bf16", "fp32", 1, False, True, "FP16_Optimizer"),
    ("bf16", "fp32", 1, True, False, "DeepSpeedZeroOptimizer"),
    ("bf16", "bf16", 1, False, False, "DeepSpeedZeroOptimizer"),
    ("bf16", "fp32", 2, False, False, "DeepSpeedZeroOptimizer"),
    ("fp16", "fp32", 1, False, False, "DeepSpeedZeroOptimizer"),
    ("bf16", "fp32", 3, False, False, "DeepSpeedZeroOptimizer_Stage3"),
])
def test_deepspeed_optimizer_class_by_hand(dtype, accum, stage, offload, fused, expect):
    """engine.py v0.18.0, read by hand (rows checked against deepspeed.initialize on CPU,
    gloo, one rank, for the unfused and ZeRO rows); never BF16_Optimizer with an optimizer."""
    from planner.costmodel.frameworks import deepspeed_optimizer

    assert deepspeed_optimizer(dtype, accum, stage, offload, fused) == expect
    with pytest.raises(ValueError, match="NotImplementedError"):
        deepspeed_optimizer("fp16", "fp32", 0, False)
