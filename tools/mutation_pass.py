"""Mutation pass over the cost model: switch each modelled term off in turn and see which
tests notice and how far the published-run predictions move.

Each mutant is a source patch (exact text replaced in one planner/costmodel file). The
repository is copied once to a temporary folder; every mutant is applied to that copy,
run (``planner validate --json`` and one pytest process on a fast test subset) and
reverted. The working tree is never modified.

    python tools/mutation_pass.py                 # every mutant, markdown table
    python tools/mutation_pass.py --only fp8_cast_bytes --json

A mutant "survives" when no test of the subset fails. The summary counts the survivors
among the mutants that move some published-run prediction by more than 1 %.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Fast test files (about a minute together on one core); the pass stops at the first failure.
TESTS = (
    "tests/test_mechanisms.py",
    "tests/test_formulas.py",
    "tests/test_trust.py",
    "tests/test_batch.py",
    "tests/test_moe.py",
    "tests/test_evaluator.py",
    "tests/test_offload.py",
    "tests/test_serve_model.py",
    "tests/test_kernels.py",
    "tests/test_kernel_costs.py",
    "tests/test_torchtitan_calibration.py",
    "tests/test_recipe_memory.py",
    "tests/test_deepspeed_buckets.py",
    "tests/test_megatron_fsdp.py",
    "tests/test_cli.py::test_validate_json",
)
#: Slow consistency tests left out of the subset (solver agreement, not cost terms).
DESELECT = "not exhaustive_agree and not lp_bounds_are_below"

#: A prediction moved by more than this is a mechanism a test must catch.
MATERIAL = 0.01


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # under planner/costmodel
    edits: tuple[tuple[str, str], ...]  # (exact text, replacement), each found exactly once


def _m(name: str, path: str, *edits: tuple[str, str]) -> Mutant:
    return Mutant(name, path, tuple(edits))


MUTANTS: tuple[Mutant, ...] = (
    # ---- compute: kernels of one layer
    _m("fp8_cast_bytes", "compute.py",
       ("return C.FP8_CAST_BYTES * inputs if dtype == \"fp8\" else 0.0", "return 0.0")),
    _m("kernel_overhead", "compute.py",
       ("return max(t_math, t_mem) + gpu.efficiency.kernel_overhead_us * 1e-6",
        "return max(t_math, t_mem)"),
       ("t_f = fwd_flops / fwd_Fps + eff.kernel_overhead_us * 1e-6", "t_f = fwd_flops / fwd_Fps"),
       ("return t_f, t_b + eff.kernel_overhead_us * 1e-6", "return t_f, t_b")),
    _m("gemm_hbm_roofline", "compute.py",
       ("return max(t_math, t_mem) +", "return t_math +")),
    _m("gemm_shape_efficiency", "compute.py",
       ("return gpu.gemm_peak_fraction(dtype) * s(m) * s(n) * s(k)",
        "return gpu.gemm_peak_fraction(dtype)")),
    _m("flash_attention_time", "compute.py",
       ("    if fwd_flops <= 0:\n        return 0.0, 0.0",
        "    if True:\n        return 0.0, 0.0")),
    _m("flash_attention_backward", "compute.py",
       ("t_b = FLASH_BWD_FLOP_RATIO * fwd_flops", "t_b = 0.0 * fwd_flops")),
    _m("overlap_slowdown", "compute.py",
       ("+ slowdown * min(c, window_s)", "+ 0.0 * min(c, window_s)"),
       ("+ slowdown * np.minimum(comm_s, window_s)", "+ 0.0 * np.minimum(comm_s, window_s)")),
    _m("measured_gemm_table", "compute.py",
       ("tflops = measured_gemm_tflops(gpu.kernel_table, dtype, m * batch, n, k)",
        "tflops = None")),
    _m("kernel_fraction", "compute.py",
       ("t_math = flops / (tflops * 1e12 * gpu.efficiency.kernel_fraction",
        "t_math = flops / (tflops * 1e12 * 1.0"),
       ("scale = eff.kernel_fraction * flops_scale(gpu, \"bf16\")",
        "scale = flops_scale(gpu, \"bf16\")")),
    _m("measured_attention_table", "compute.py",
       ("rates = None if seq is None else measured_attention_tflops(",
        "rates = None if True else measured_attention_tflops(")),
    _m("decode_gemv_rate", "compute.py",
       ("    if gemv_GBps is not None:  # a decode GEMM", "    if False:  # a decode GEMM")),
    _m("measured_copy_bandwidth", "compute.py",
       ("gbps = measured_copy_GBps(gpu.kernel_table)", "gbps = None")),
    _m("eager_elementwise_bytes", "compute.py",
       ("    if fused:\n        return C.NORM_BYTES", "    if True:\n        return C.NORM_BYTES")),
    # ---- the dense layer
    _m("elementwise_bytes", "layer.py",
       ("    nbytes = 2 * norm * rows + 2 * C.RESIDUAL_BYTES * rows\n    if model.dropout:\n"
        "        nbytes += 2 * C.DROPOUT_BYTES * rows\n    nbytes += act * shape.tokens * f_loc",
        "    nbytes = 0.0\n    if model.dropout:\n"
        "        nbytes += 2 * C.DROPOUT_BYTES * rows\n    nbytes += 0.0")),
    _m("elementwise_backward", "layer.py",
       ("    ew_b = C.ELEMENTWISE_BWD_RATIO * ew_f\n\n", "    ew_b = 0.0 * ew_f\n\n")),
    _m("tp_userbuffer_chunk_launches", "layer.py",
       ("extra = (shape.tp - 1) * gpu.efficiency.kernel_overhead_us * 1e-6", "extra = 0.0")),
    _m("recompute_workspace", "layer.py",
       ("    workspace = (activation_bytes(model, shape, strat, \"none\")\n"
        "                 if strat.recompute in (\"full\", \"half\") else 0.0)",
        "    workspace = 0.0")),
    _m("activations_replicated", "layer.py",
       ("    return rep + sharded + core", "    return sharded + core")),
    _m("activations_sharded", "layer.py",
       ("    return rep + sharded + core", "    return rep + core")),
    _m("activations_attention_core", "layer.py",
       ("    return rep + sharded + core", "    return rep + sharded")),
    _m("activations_full_recompute_input", "layer.py",
       ("        return a * t * h / sp_div  # the layer input only", "        return 0.0")),
    # ---- attention: TP, CP, recomputation
    _m("tp_comm", "attention.py",
       ("    if shape.tp <= 1:\n        return 0.0, 0.0\n    spans, levels = net.tp_spans",
        "    if True:\n        return 0.0, 0.0\n    spans, levels = net.tp_spans")),
    _m("tp_comm_backward_overlap", "attention.py",
       ("return exposed_s(comm, gemm, kappa) if overlapped else comm", "return comm")),
    _m("cp_comm", "attention.py",
       ("    if shape.cp <= 1:\n        return 0.0, 0.0\n    q_loc, kv_loc, _, _ = local_dims(model, shape.tp)\n"
        "    spans, levels = net.cp_spans",
        "    if True:\n        return 0.0, 0.0\n    q_loc, kv_loc, _, _ = local_dims(model, shape.tp)\n"
        "    spans, levels = net.cp_spans")),
    _m("cp_buffers", "attention.py",
       ("    if shape.cp <= 1:\n        return 0.0\n", "    if True:\n        return 0.0\n")),
    _m("recompute_time", "attention.py",
       ("    if mode == \"full\":\n        return fwd_s, comms, full_flops",
        "    if mode == \"full\":\n        return 0.0, (0.0,) * len(comms), full_flops"),
       ("        return fwd_s / 2, tuple(c / 2 for c in comms), full_flops / 2",
        "        return 0.0, (0.0,) * len(comms), full_flops / 2"),
       ("        return attn_fwd_s, (0.0,) * len(comms), attn_flops",
        "        return 0.0, (0.0,) * len(comms), attn_flops")),
    _m("recompute_comm", "attention.py",
       ("    if mode == \"full\":\n        return fwd_s, comms, full_flops",
        "    if mode == \"full\":\n        return fwd_s, (0.0,) * len(comms), full_flops")),
    # ---- stage terms
    _m("embedding", "train/stage.py",
       ("    return EndCost(fwd, bwd, comm, 0.0, 0.0)", "    return EndCost(0.0, 0.0, 0.0, 0.0, 0.0)")),
    _m("lm_head_gemms", "train/stage.py",
       ("    fwd = norm + gemm_time_s(gpu, dt, t, v_loc, h) + loss / 2", "    fwd = norm + loss / 2"),
       ("    bwd = (C.ELEMENTWISE_BWD_RATIO * norm + gemm_time_s(gpu, dt, t, h, v_loc)\n"
        "           + gemm_time_s(gpu, dt, h, v_loc, t) + loss / 2)",
        "    bwd = (C.ELEMENTWISE_BWD_RATIO * norm + loss / 2)")),
    _m("cross_entropy_loss", "train/stage.py",
       ("    loss = elementwise_time_s(gpu, C.LOSS_BYTES_PER_LOGIT * t * v_loc)", "    loss = 0.0")),
    _m("head_tp_comm", "train/stage.py",
       ("    return EndCost(fwd, bwd, comm, act, logits)", "    return EndCost(fwd, bwd, 0.0, act, logits)")),
    _m("head_activations", "train/stage.py",
       ("    return EndCost(fwd, bwd, comm, act, logits)", "    return EndCost(fwd, bwd, comm, 0.0, logits)")),
    _m("logits_workspace", "train/stage.py",
       ("    return EndCost(fwd, bwd, comm, act, logits)", "    return EndCost(fwd, bwd, comm, act, 0.0)")),
    _m("pp_p2p", "train/stage.py",
       ("    return 2 * v * p2p_time_s(p2p_bytes(model, shape), pp_spans, levels)", "    return 0.0")),
    _m("dp_comm", "train/stage.py",
       ("        return collective_time_s(op, size, dp_spans, levels, chunks,  # type: ignore[arg-type]\n"
        "                                 message_bytes=bucket * per)",
        "        return 0.0")),
    _m("optimizer_step", "train/stage.py",
       ("    return elementwise_time_s(gpu, shard * C.OPTIMIZER_STEP_BYTES)", "    return 0.0")),
    _m("tied_embedding_sync", "train/stage.py",
       ("    if not model.tied_embeddings or pp <= 1:", "    if True:")),
    _m("weights_memory", "train/stage.py",
       ("        weights=0.0 if offload_params else", "        weights=0.0 if True else")),
    _m("gradient_buffers", "train/stage.py",
       ("        gradients=params_local * nm.grad_bytes", "        gradients=0.0 * nm.grad_bytes")),
    _m("optimizer_states", "train/stage.py",
       ("        optimizer=0.0 if offload_optimizer else", "        optimizer=0.0 if True else")),
    _m("comm_buffers", "train/stage.py",
       ("    out = shape.tokens * model.hidden_size * C.ACT_BYTES if shape.tp > 1 else 0.0",
        "    out = 0.0")),
    _m("deepspeed_reduce_buckets", "train/stage.py",
       ("    return count * elements * (4 if dtype == \"fp32\" else 2)",
        "    return 0.0")),
    _m("zero3_prefetch_buffers", "train/stage.py",
       ("    if zero == 3:\n        out += 2 * max(", "    if False:\n        out += 2 * max(")),
    # ---- composition
    _m("pipeline_bubble", "compose.py",
       ("    return bubble_factor(pp, v) / pp", "    return 0.0 * bubble_factor(pp, v) / pp")),
    _m("inflight_microbatches", "compose.py",
       ("    act = inflight / v * layer_act_bytes + head_act_bytes",
        "    act = layer_act_bytes / v + head_act_bytes")),
    _m("memory_reserve", "compose.py",
       ("    return (cluster.memory_reserve_gib * 2**30\n", "    return (0.0\n")),
    _m("allocator_fragmentation", "compose.py",
       ("            + ALLOCATOR_FRAGMENTATION * cluster.gpu.hbm_bytes)", "            + 0.0)")),
    _m("optimizer_in_tail", "compose.py",
       ("    return TailTime(dp, optimizer_s, off)", "    return TailTime(dp, 0.0 * optimizer_s, off)")),
    _m("dp_last_bucket_exposed", "compose.py",
       ("    tail = comm / (max(layers, 1)", "    tail = 0.0 * comm / (max(layers, 1)")),
    _m("dp_interleaved_window", "compose.py",
       ("    out = np.where(v > 1, np.clip(steps, 1.0, np.maximum(m, 1.0)), 1.0)",
        "    out = np.where(v > 1, 1.0, 1.0) + 0.0 * steps")),
    _m("fsdp2_prefetch", "compose.py",
       ("    on = ov.sharded\n", "    on = False\n")),
    # ---- framework profiles: what a framework changes in the cost model
    _m("framework_loss_bytes", "runtime.py",
       ("    update[\"loss_bytes_per_logit\"] = LOSS_PEAK_BYTES_PER_LOGIT[profile.kernels.cross_entropy]\n",
        "")),
    # ---- network
    _m("collective_latency", "network.py",
       ("        latency += steps * level.latency_us * 1e-6", "        latency += 0.0")),
    # ---- mixture of experts
    _m("moe_alltoall", "moe.py",
       ("    out = 2 * collective_time_s(\"all_to_all\", size, net.ep_spans, levels, chunks)",
        "    out = 0.0 * size")),
    _m("moe_permute_router_bytes", "moe.py",
       ("    nbytes += C.ROUTER_SOFTMAX_BYTES * r.dispatched * moe.num_experts\n"
        "    nbytes += 2 * C.MOE_PERMUTE_BYTES * r.received * model.hidden_size",
        "    nbytes += 0.0")),
    _m("moe_capacity_padding", "moe.py",
       ("    pad_flops = 3 * pad ", "    pad_flops = 0.0 * pad ")),
    # ---- offload
    _m("offload_traffic", "train/offload.py",
       ("    return OffloadTimes(grad, step, copy, fetch)", "    return OffloadTimes(0.0, 0.0, 0.0, 0.0)")),
    # ---- serving
    _m("serve_kv_cache_read", "serve/step.py",
       ("    return max(elementwise_time_s(gpu, kv), flash_attention_time_s(gpu, \"bf16\", flops)[0])",
        "    return flash_attention_time_s(gpu, \"bf16\", flops)[0]")),
    _m("serve_tp_comm", "serve/step.py",
       ("    if plan.tp <= 1 or m <= 0:\n        return 0.0\n    size", "    if True:\n        return 0.0\n    size")),
    _m("serve_elementwise", "serve/step.py",
       ("    return elementwise_time_s(gpu, nbytes)\n\n\ndef layer_pass_s", "    return 0.0\n\n\ndef layer_pass_s")),
    _m("serve_lm_head", "serve/step.py",
       ("    return plan.pp * (_stage_s(model, gpu, plan, net, mb, attn) + head / plan.pp)",
        "    return plan.pp * (_stage_s(model, gpu, plan, net, mb, attn))")),
    _m("serve_kv_paging_blocks", "serve/step.py",
       ("    blocks = math.ceil(tokens / KV_BLOCK_TOKENS) * KV_BLOCK_TOKENS", "    blocks = tokens")),
    # ---- DLRM
    _m("dlrm_interaction", "dlrm/model.py",
       ("    return DenseCost(bf, bb, tf + tb + _interaction_s(cluster, model, b), opt,",
        "    return DenseCost(bf, bb, tf + tb, opt,")),
    _m("dlrm_shard_io_buffers", "dlrm/model.py",
       ("    return rows * (dim * eb + ROWWISE_STATE_BYTES) + 2 * batch * dim * eb",
        "    return rows * (dim * eb + ROWWISE_STATE_BYTES)")),
)


def _copy_tree(dst: Path) -> Path:
    ignore = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.egg-info", ".pytest_cache",
                                    "build", "dist")
    shutil.copytree(ROOT, dst, ignore=ignore, symlinks=True)
    return dst


def _env(tree: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTEST_ADDOPTS", None)
    return env


def _predictions(tree: Path) -> dict[str, float] | None:
    """Every published-run prediction of ``planner validate --json``, by its JSON path."""
    r = subprocess.run([sys.executable, "-m", "planner", "validate", "--json"], cwd=tree,
                       env=_env(tree), capture_output=True, text=True)
    if r.returncode != 0:
        return None
    out: dict[str, float] = {}

    def walk(x: object, path: str) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, f"{path}/{k}")
        elif isinstance(x, list):
            for i, v in enumerate(x):
                walk(v, f"{path}/{i}")
        elif path.rsplit("/", 1)[-1].startswith("predicted") and isinstance(x, (int, float)):
            out[path] = float(x)

    walk(json.loads(r.stdout), "")
    return out


def _max_change(base: dict[str, float], mut: dict[str, float] | None) -> float | None:
    if mut is None:
        return None
    worst = 0.0
    for k, b in base.items():
        m = mut.get(k)
        if m is None or b == 0:
            continue
        worst = max(worst, abs(m - b) / abs(b))
    return worst


def _first_failure(tree: Path, tests: tuple[str, ...]) -> tuple[str | None, str]:
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-rf", "-p", "no:cacheprovider",
           "-k", DESELECT, *tests]
    r = subprocess.run(cmd, cwd=tree, env=_env(tree), capture_output=True, text=True)
    if r.returncode == 0:
        return None, ""
    m = re.search(r"^(?:FAILED|ERROR) (\S+)", r.stdout, re.M)
    return (m.group(1) if m else f"pytest exit {r.returncode}"), r.stdout[-2000:]


def apply(tree: Path, mut: Mutant) -> str:
    """Patch ``mut`` into ``tree``; returns the original text to restore."""
    path = tree / "planner" / "costmodel" / mut.path
    text = original = path.read_text()
    for old, new in mut.edits:
        n = text.count(old)
        if n != 1:
            raise LookupError(f"{mut.name}: {n} matches in {mut.path} for {old!r}")
        text = text.replace(old, new)
    path.write_text(text)
    return original


def run(only: set[str] | None, tests: tuple[str, ...], skip_tests: bool,
        material_only: bool = False) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="mutation-") as tmp:
        tree = _copy_tree(Path(tmp) / "tree")
        base = _predictions(tree)
        if base is None:
            raise SystemExit("planner validate fails on the unmutated tree")
        for mut in MUTANTS:
            if only and mut.name not in only:
                continue
            path = tree / "planner" / "costmodel" / mut.path
            try:
                original = apply(tree, mut)
            except LookupError as e:
                rows.append({"mutant": mut.name, "file": mut.path, "stale": str(e)})
                print(f"{mut.name}: stale ({e})", file=sys.stderr)
                continue
            try:
                change = _max_change(base, _predictions(tree))
                immaterial = material_only and change is not None and change <= MATERIAL
                caught, _ = ((None, "") if skip_tests or immaterial
                             else _first_failure(tree, tests))
            finally:
                path.write_text(original)
            row = {"mutant": mut.name, "file": mut.path, "max_change": change,
                   "caught_by": caught, "tested": not (skip_tests or immaterial)}
            rows.append(row)
            print(_line(row), file=sys.stderr, flush=True)
    return rows


def _fmt_change(c: float | None) -> str:
    return "validate fails" if c is None else f"{c:.2%}"


def _line(row: dict) -> str:
    if "stale" in row:
        return f"| {row['mutant']} | {row['file']} | stale | - |"
    caught = (f"yes ({row['caught_by']})" if row["caught_by"]
              else "NO" if row["tested"] else "not run")
    return f"| {row['mutant']} | {row['file']} | {_fmt_change(row['max_change'])} | {caught} |"


def summary(rows: list[dict]) -> dict:
    live = [r for r in rows if "stale" not in r]
    material = [r for r in live if r["max_change"] is None or r["max_change"] > MATERIAL]
    return {"mutants": len(live),
            "survivors": sum(not r["caught_by"] for r in live if r["tested"]),
            "material": len(material),
            "material_survivors": [r["mutant"] for r in material if not r["caught_by"]],
            "stale": [r["mutant"] for r in rows if "stale" in r]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", help="run only this mutant (repeatable)")
    ap.add_argument("--tests", nargs="+", help="pytest targets (default: the fast subset)")
    ap.add_argument("--no-tests", action="store_true", help="prediction changes only")
    ap.add_argument("--material-only", action="store_true",
                    help=f"run the tests only for mutants moving a prediction by over {MATERIAL:.0%}%")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--list", action="store_true", help="list the mutants")
    a = ap.parse_args(argv)
    if a.list:
        for m in MUTANTS:
            print(f"{m.name}\t{m.path}")
        return 0
    known = {m.name for m in MUTANTS}
    if a.only and not set(a.only) <= known:
        ap.error(f"--only: unknown mutant(s) {sorted(set(a.only) - known)}")
    tests = tuple(t for t in (a.tests or TESTS) if (ROOT / t.split("::")[0]).exists())
    rows = run(set(a.only) if a.only else None, tests, a.no_tests, a.material_only)
    s = summary(rows)
    if a.json:
        print(json.dumps({"rows": rows, "summary": s}, indent=2))
    else:
        print("| mutant | file | max change of a published-run prediction | caught (first failing test) |")
        print("|---|---|---|---|")
        for r in rows:
            print(_line(r))
        print(f"\n{s['mutants']} mutants, {s['survivors']} of those tested survive; "
              f"{s['material']} move a "
              f"prediction by more than {MATERIAL:.0%}, of which {len(s['material_survivors'])} "
              f"survive: {', '.join(s['material_survivors']) or 'none'}"
              + (f"; stale: {', '.join(s['stale'])}" if s["stale"] else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
