"""Held-out check on newer NVIDIA recipes: NeMo 24.12 (H100), the NeMo 25.02 B200 rows the
calibration file leaves out, and NeMo 25.04 on GB200 (a GPU with no calibration run: its
efficiencies are the B200 fit). Nothing here is fitted; the rows are not read by
``tools/calibrate.py`` or ``planner validate``.

Sources (FP8, per-tensor scaling, tokens/s/GPU as published):
  * NeMo 24.12 performance summary, DGX-H100:
    docs.nvidia.com/nemo-framework/user-guide/24.12/nemotoolkit/performance/performance_summary.html
  * NeMo 25.02 performance summary, DGX-B200 (rows LLAMA3-8B and LLAMA3-405B):
    docs.nvidia.com/nemo-framework/user-guide/latest/performance/performance_summary.html
  * NeMo 25.04 performance summary, DGX-GB200:
    docs.nvidia.com/nemo-framework/user-guide/latest/performance/archive/25.04-performance-summary.html

Each row's published parallel sizes are evaluated with the recipe settings of
``planner.validation.nemo`` (distributed optimizer, FP8 parameters, bf16 gradient
reduction, no recomputation, TP communication overlap). Two rows need a setting the tables
do not give: Llama 3 405B (126 layers on pp 8 x vp 8) runs with Megatron's uneven first and
last stages, and the GB200 Llama 3 70B row uses Megatron-FSDP (ZeRO-3 here) at tp 1 with
a microbatch that does not fit without recomputation or activation offload, so its
recomputation is left to the solver (everything else pinned). Rows whose model is not in the
catalog are built from NeMo's own configs (GPT-3 5B and 20B: ``GPTConfig5B``/``GPTConfig20B`` in
NVIDIA/NeMo ``nemo/collections/llm/gpt/model/base.py``, Megatron-Core's default dropout 0.1,
the GPT-2 vocabulary of 50,257 padded to a multiple of 128); Nemotron 8B, whose NeMo config
this project has not read, is left out rather than guessed.

    python benchmarks/bench_heldout_nemo.py          # about 10 s
"""

from __future__ import annotations

from planner.api import solve
from planner.costmodel.train.evaluator import evaluate
from planner.specs.loaders import load_cluster, load_model
from planner.specs.model import ModelSpec
from planner.validation.errors import summary
from planner.validation.nemo import (
    nemo_data,
    recipe_base,
    recipe_model,
    recipe_plan,
    tokens_per_s_per_gpu,
)

H100, B200, GB200 = "dgx-h100-superpod", "dgx-b200-superpod", "gb200-nvl72"


def _nemo_gpt3(name: str, layers: int, hidden: int, heads: int) -> ModelSpec:
    # NeMo GPTConfig defaults: tied embeddings, learned positions, bias, 4h GELU MLP
    return ModelSpec(name=name, num_layers=layers, hidden_size=hidden,
                     num_attention_heads=heads, num_kv_heads=heads, ffn_hidden_size=4 * hidden,
                     ffn_type="gelu", vocab_size=50304, seq_len=2048, tied_embeddings=True,
                     norm_type="layernorm", position_embedding="learned", bias=True, dropout=True)


INLINE = {"gpt3-5b": _nemo_gpt3("gpt3-5b", 24, 4096, 32),
          "gpt3-20b": _nemo_gpt3("gpt3-20b", 44, 6144, 48)}
#: name, cluster, model, GPUs, global batch, microbatch, sequence, tp, pp, cp, vp, ep,
#: Megatron-FSDP, measured tokens/s/GPU.
ROWS = [
    ("nemo2412-h100-gpt3-5b", H100, "gpt3-5b", 64, 2048, 4, 2048, 1, 1, 1, 1, 1, 0, 23406),
    ("nemo2412-h100-gpt3-20b", H100, "gpt3-20b", 64, 256, 2, 2048, 2, 1, 1, 1, 1, 0, 5851),
    ("nemo2412-h100-gpt3-175b-128", H100, "gpt3-175b", 128, 256, 1, 2048, 4, 8, 1, 6, 1, 0, 716),
    ("nemo2412-h100-gpt3-175b-512", H100, "gpt3-175b", 512, 2048, 2, 2048, 4, 8, 1, 6, 1, 0, 825),
    ("nemo2412-h100-llama2-7b", H100, "llama2-7b", 8, 128, 1, 4096, 1, 1, 1, 1, 1, 0, 16934),
    ("nemo2412-h100-llama2-13b", H100, "llama2-13b", 16, 128, 1, 4096, 1, 4, 1, 10, 1, 0, 8715),
    ("nemo2412-h100-llama2-70b", H100, "llama2-70b", 64, 128, 1, 4096, 4, 4, 1, 20, 1, 0, 1728),
    ("nemo2412-h100-nemotron-22b", H100, "nemotron-22b", 64, 256, 2, 4096, 2, 4, 1, 10, 1, 0, 4312),
    ("nemo2412-h100-nemotron4-340b", H100, "nemotron4-340b", 128, 32, 1, 4096, 8, 8, 1, 12, 1, 0,
     326),
    ("nemo2412-h100-llama3-8b", H100, "llama3-8b", 8, 128, 1, 8192, 1, 1, 2, 1, 1, 0, 12273),
    ("nemo2412-h100-llama3-70b", H100, "llama3-70b", 64, 128, 1, 8192, 4, 4, 2, 5, 1, 0, 1524),
    ("nemo2502-b200-llama3-8b", B200, "llama3-8b", 8, 128, 2, 8192, 1, 1, 1, 1, 1, 0, 26006),
    ("nemo2502-b200-llama3-405b", B200, "llama3-405b", 128, 64, 1, 8192, 4, 8, 2, 8, 1, 0, 625),
    ("nemo2504-gb200-gpt3-175b", GB200, "gpt3-175b", 128, 256, 2, 2048, 4, 4, 1, 12, 1, 0, 1804),
    ("nemo2504-gb200-llama3-8b", GB200, "llama3-8b", 8, 128, 2, 8192, 1, 1, 1, 1, 1, 0, 33099),
    ("nemo2504-gb200-llama3-70b-fsdp", GB200, "llama3-70b", 64, 128, 1, 8192, 1, 1, 1, 1, 1, 1,
     4035),
    ("nemo2504-gb200-llama3-405b", GB200, "llama3-405b", 128, 64, 1, 8192, 4, 8, 2, 8, 1, 0, 665),
    ("nemo2504-gb200-nemotron4-15b", GB200, "nemotron4-15b", 64, 256, 2, 4096, 1, 1, 1, 1, 1, 0,
     17809),
    ("nemo2504-gb200-nemotron4-340b", GB200, "nemotron4-340b", 128, 32, 1, 4096, 8, 4, 1, 12, 1, 0,
     737),
    ("nemo2504-gb200-mixtral-8x7b", GB200, "mixtral-8x7b", 64, 256, 2, 4096, 1, 1, 1, 1, 8, 0,
     19275),
    ("nemo2504-gb200-mixtral-8x22b-64k", GB200, "mixtral-8x22b", 256, 64, 1, 65536, 2, 4, 8, 14, 8,
     0, 2731),
]


def _row(name, cluster, model, gpus, gbs, mbs, seq, tp, pp, cp, vp, ep, measured) -> dict:
    fix = dict(tp=tp, pp=pp, cp=cp, dp=gpus // (tp * pp * cp), virtual_stages=vp,
               microbatch_size=mbs)
    if ep > 1:
        fix["ep"] = ep
    gen = {H100: "H100", B200: "B200", GB200: "GB200"}[cluster]
    return dict(name=name, gen=gen, cluster=cluster, model=model, gpus=gpus, gbs=gbs, seq=seq,
                dtype="fp8", fix=fix, measured=measured)


def _estimate(data: dict, row: dict, fsdp: bool):
    name = row["model"]
    model = INLINE[name] if name in INLINE else (
        recipe_model(data, name) if name in data["models"] else load_model(name))
    cluster = load_cluster(row["cluster"], row["gpus"])
    plan = recipe_plan(row)
    if model.num_layers % (plan.pp * plan.virtual_stages):
        plan = plan.model_copy(update={"uneven_pipeline": True})
    if not fsdp:
        return plan, evaluate(model, cluster, plan)
    pinned = plan.model_dump(include={"tp", "pp", "cp", "dp", "virtual_stages",
                                      "microbatch_size", "fp8_params", "grad_reduce_dtype"})
    base = recipe_base(row)
    best = solve(model, cluster, fix=dict(pinned, zero_stage=3), time_limit_s=60,
                 global_batch_size=base["global_batch_size"], seq_len=base["seq_len"],
                 dtype=base["dtype"]).best
    return best.plan, best.estimate


def main() -> None:
    data = nemo_data()
    errors: dict[str, list[float]] = {}
    print(f"{'run':34s} {'published':>9s} {'predicted':>9s} {'error':>7s}  memory   note")
    for name, cluster, model, gpus, gbs, mbs, seq, tp, pp, cp, vp, ep, fsdp, measured in ROWS:
        row = _row(name, cluster, model, gpus, gbs, mbs, seq, tp, pp, cp, vp, ep, measured)
        plan, est = _estimate(data, row, bool(fsdp))
        if not est.feasible:
            print(f"{name:34s} {measured:9,.0f} {'-':>9s} {'':>7s}  infeasible: {est.reasons[0]}")
            continue
        predicted = tokens_per_s_per_gpu(row, est)
        err = predicted / measured - 1
        errors.setdefault(row["gen"], []).append(err)
        note = []
        if plan.uneven_pipeline:
            note.append("uneven pipeline")
        if fsdp:
            note.append(f"FSDP, recompute chosen: {plan.recompute}")
        print(f"{name:34s} {measured:9,.0f} {predicted:9,.0f} {err:+7.1%}  "
              f"{est.memory_per_gpu_bytes / 2**30:5.0f} GiB  {', '.join(note)}")
    for gen, errs in errors.items():
        print(f"{gen}: {summary(errs)}")


if __name__ == "__main__":
    main()
