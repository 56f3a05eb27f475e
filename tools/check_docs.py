"""Check that the figures the README and docs quote are what their commands give now.

Each :class:`Figure` names a document, the command its numbers come from, and the exact
text the document must contain, rendered from that command's output. A figure the code
moved and the document did not is reported with the text expected, so the fix is to re-run
the command and copy the figure (or to update this registry when the text itself moved).

    python tools/check_docs.py          # every figure; exit 1 on a stale one
    python tools/check_docs.py --list   # the registry
    python tools/check_docs.py --write  # rewrite the generated blocks (tables between
                                        # <!-- check_docs: NAME --> markers), then check
    python tools/check_docs.py --fix    # copy the numbers of stale inline figures whose
                                        # sentence is otherwise unchanged, then check
    python tools/check_docs.py --unregistered  # every figure with a unit that neither a
                                        # registered command nor a quotation accounts for
    python tools/check_docs.py --unregistered --write-baseline  # record them as the ratchet
                                        # tools/docs_unregistered.txt

Every figure accounted for (issue 37, item 6): a number with a unit in README.md or docs/
is either produced by a registered command below or marked as a quotation of a source with
``<!-- quote: SOURCE -->`` (its paragraph, list item or table; ``<!-- quote 9.3 s | 4 %:
SOURCE -->`` for only the figures listed; ``<!-- quote column paper: SOURCE -->`` above a table
for the columns headed ``paper``). A wall-clock timing cannot be re-run to the digit: it is
quoted from the run that measured it. The rules are at ``UNIT_FIGURE`` below.

Every figure here comes from a command of a few seconds (``planner validate``, the held-out
benchmarks, solves of a second or two through ``planner.solve``, the catalog, the seed
papers' reproductions through their tests' own helpers and the two seed sweeps), so
``tests/test_check_docs.py`` checks them all on every test run; each command runs once, its
figures share the result.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from planner.costmodel.train.evaluator import Estimate
    from planner.specs.plan import Plan

ROOT = Path(__file__).resolve().parents[1]


def pct(x: float) -> str:
    """A fraction as the docs print it: one decimal, a space before the sign."""
    return f"{100 * x:.1f} %"


@lru_cache(maxsize=1)
def validate() -> dict:
    """What ``planner validate --json`` prints, as values."""
    from planner.validation import run_recipes, run_validation
    from planner.validation.fit import fit_summary
    from planner.validation.serving import run_serving
    from planner.validation.torchtitan import run_torchtitan

    rep, nemo, titan = run_validation(), run_recipes(), run_torchtitan()
    serving = run_serving().to_json()
    live = {"A100": (rep.mape, rep.max_error),
            **{g: (nemo.mape(g), nemo.max_error(g)) for g in nemo.by_generation()},
            **{f"{g} torchtitan": (titan.mape(g), titan.max_error(g))
               for g in titan.by_generation()}}
    return {"live": live, "fit": fit_summary(), "memory_max": rep.memory_max_error,
            "serving": serving["mape"]}


SUMMARY = re.compile(r"^(?P<label>[^:\n]+): MAPE (?P<mape>[-+\d.]+)%, mean (?P<mean>[-+\d.]+)%, "
                     r"max (?P<max>[-+\d.]+)%, (?P<runs>\d+) runs$", re.M)


@lru_cache(maxsize=None)
def bench(name: str) -> dict[str, dict[str, float]]:
    """The per-set summary lines (``LABEL: MAPE x%, mean y%, max z%, n runs``) that
    ``python benchmarks/NAME.py`` prints, as fractions."""
    # the script's folder, not the checkout, heads its sys.path: put the checkout first, so
    # the figures are this tree's even where another copy of planner is installed
    out = _bench_out(name)
    return {m["label"]: {k: float(m[k]) / 100 for k in ("mape", "mean", "max")}
            for m in SUMMARY.finditer(out)}


def signed(x: float) -> str:
    return f"{100 * x:+.1f} %".replace("+-", "-")


@dataclass(frozen=True)
class Figure:
    doc: str  # path under the repository
    command: str  # what produces the numbers
    text: Callable[[], str]  # the exact text the document must hold
    block: str | None = None  # a generated block: `--write` rewrites it between its markers


def heldout_table(label: str) -> str:
    """The held-out-by-source table of one slice, as ``planner validate`` prints it."""
    from planner.validation.heldout import heldout_report

    rows = heldout_report()["by"][label]
    lines = [f"| {label} | runs | sources | MAPE | mean | max |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['key']} | {r['runs']} | {r['sources']} | {pct(r['mape'])} | "
              f"{signed(r['bias'])} | {signed(r['max'])} |" for r in rows]
    return "\n".join(lines)


def heldout_line() -> str:
    from planner.validation.heldout import heldout_report

    h = heldout_report()
    return (f"{h['runs']} runs from {h['sources']} sources held out in turn: MAPE "
            f"{pct(h['mape'])}, mean {signed(h['bias'])}, residual slope "
            f"{signed(h['slope_per_decade_of_gpus'])} per tenfold GPUs")


def source_table() -> str:
    """Every source of the validation corpus: its runs, GPUs, framework and citation."""
    from planner.validation.corpus import corpus_runs

    by: dict[str, list] = {}
    for r in corpus_runs():
        by.setdefault(r.source, []).append(r)
    lines = ["| source | runs | GPUs | generation | framework | precision | citation |",
             "|---|---|---|---|---|---|---|"]
    for src, runs in by.items():
        lo, hi = min(r.gpus for r in runs), max(r.gpus for r in runs)
        gens = "/".join(sorted({r.generation for r in runs}))
        dts = "/".join(sorted({r.dtype.upper() for r in runs}))
        gpus = f"{lo:,}" if lo == hi else f"{lo:,}-{hi:,}"
        cite = runs[0].citation.replace("|", "/")
        lines.append(f"| {src} | {len(runs)} | {gpus} | {gens} | {runs[0].framework} | {dts} "
                     f"| {cite} |")
    return "\n".join(lines)


def group_table() -> str:
    """Per fit group: the shipped error and the held-out one (fit_summary.yaml)."""
    lines = ["| fit group | runs | sources | MAPE as shipped | held out by source: MAPE "
             "(mean) |", "|---|---|---|---|---|"]
    for g, f in validate()["fit"].items():
        held = ("one source: cannot be held out" if f["leave_one_source_out_mape"] is None
                else f"{pct(f['leave_one_source_out_mape'])} "
                     f"({signed(f['leave_one_source_out_bias'])})")
        lines.append(f"| {g} | {f['runs']} | {f['sources']} | {pct(f['calibration_mape'])} | "
                     f"{held} |")
    return "\n".join(lines)


def _serving() -> str:
    m = validate()["serving"]
    return (f"MAPE {pct(m['output_tokens_per_s_per_gpu'])} on output\n"
            f"tokens/s/GPU and {pct(m['first_token_latency_ms'])} on TTFT")


def _memory(doc: str) -> Callable[[], str]:
    """The largest error of the model's memory against Korthikanti et al. 2022's Figure 1,
    as ``planner validate`` prints it."""
    def text() -> str:
        m = pct(validate()["memory_max"])
        if doc == "README.md":
            return f"memory is checked against Korthikanti's 2022 runs (within {m})"
        return f"its Figure 1 memory is reproduced within {m}"
    return text


def _summary_row(script: str, key: str, cells: str) -> Callable[[], str]:
    """A table row of ``cells`` (the row's leading cells) then MAPE, mean and max of the
    summary line ``key`` that ``benchmarks/<script>.py`` prints."""
    def text() -> str:
        r = bench(script)[key]
        return f"| {cells} | {pct(r['mape'])} | {signed(r['mean'])} | {signed(r['max'])}"
    return text


#: bench_heldout_mosaicml's sets: its label, docs/validation.md's row label.
MOSAICML = (("A100 no recompute", "A100, 4 runs without recomputation (1B-13B, 2K context)"),
            ("A100 full recompute", "A100, 4 runs with full recomputation (7B 8K, 13B 4K, "
             "30B, 70B on 64 GPUs)"),
            ("H100 no recompute", "H100 BF16, 3 runs without recomputation (7B, 13B on 8 "
             "and 64 GPUs)"),
            ("H100 full recompute", "H100 BF16, 5 runs with full recomputation (7B 4K, 13B "
             "4K, 30B on 8 and 32, 70B on 64)"))


def _mosaicml(doc: str) -> Callable[[], str]:
    def text() -> str:
        b = bench("bench_heldout_mosaicml")
        a, n = b["A100 no recompute"], pct(b["all"]["mape"])
        return (f"the 16 runs come out within {n} MAPE (A100 without recomputation "
                f"{signed(a['mean'])}, max {signed(a['max'])}")
    return text


@lru_cache(maxsize=None)
def _bench_out(name: str) -> str:
    """What ``python benchmarks/NAME.py`` prints, run once."""
    path = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / f"{name}.py")], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": path},
                          capture_output=True, text=True, check=True).stdout


#: bench_heldout_torchtitan's runs, in docs/validation.md's order (with its row labels)
TORCHTITAN_ROWS = (("torchtitan-a100-llama3-8b-half", "Llama 3 8B, every second layer"),
                   ("torchtitan-a100-llama3-70b-full", "Llama 3 70B, full"),
                   ("torchtitan-a100-llama2-13b-none", "Llama 2 13B, none"),
                   ("torchtitan-a100-llama2-13b-half", "Llama 2 13B, every second layer"),
                   ("torchtitan-a100-llama2-70b-full", "Llama 2 70B, full"))


def _torchtitan_row(run: str) -> Callable[[], str]:
    """A row's predicted throughput (MFU), error and error with fused kernels, as
    ``benchmarks/bench_heldout_torchtitan.py`` prints them (the published cell is a
    quotation of torchtitan's docs/performance.md)."""
    def text() -> str:
        m = re.search(rf"^{re.escape(run)}\s+[\d,]+\s+(?P<pred>[\d,]+)\s+(?P<err>[-+\d.]+)%\s+"
                      r"(?P<mfu>[\d.]+)%\s+(?P<fused>[-+\d.]+)%$",
                      _bench_out("bench_heldout_torchtitan"), re.M)
        if m is None:
            raise RuntimeError(f"bench_heldout_torchtitan.py prints no row {run}")
        return f"| {m['pred']} ({m['mfu']} %) | {m['err']} % | {m['fused']} % |"
    return text


def _torchtitan_mape() -> str:
    b = bench("bench_heldout_torchtitan")
    eager, fused = b["A100 FSDP2, eager elementwise"], b["A100 FSDP2, fused elementwise"]
    sign = "all pessimistic" if eager["max"] < 0 and eager["mean"] < 0 else "not all pessimistic"
    return (f"MAPE {pct(eager['mape'])} counted as the runs ran, {sign} "
            f"({pct(fused['mape'])} if they had fused kernels)")


@lru_cache(maxsize=None)
def solved(model: str, cluster: str, gpus: int | None, framework: str) -> tuple[Plan, Estimate]:
    """The best plan and its estimate that ``planner solve -m MODEL -c CLUSTER [--gpus N]
    --framework F`` prints (``planner.solve``, the function the CLI calls), solved once for
    every figure that quotes it."""
    import planner

    res = planner.solve(model, cluster, gpus=gpus, framework=framework)
    if res.status != "optimal":  # the docs quote proven optima; a time-limited answer is not one
        raise RuntimeError(f"planner.solve({model!r}, {cluster!r}, gpus={gpus}, framework="
                           f"{framework!r}) ended {res.status!r}, not proven optimal: the "
                           "figures quoting it cannot be checked")
    return res.best.plan, res.best.estimate


def seconds(x: float) -> str:
    return f"{x:.2f} s"


def layout(p: Plan) -> str:
    """``tp4 pp4 dp32 v8``: tp, pp and dp always, cp and ep above 1, interleaving if any."""
    dims = [d for d in ("tp", "cp", "ep", "pp", "dp") if d in ("tp", "pp", "dp")
            or getattr(p, d) > 1]
    v = f" v{p.virtual_stages}" if p.virtual_stages > 1 else ""
    return " ".join(f"{d}{getattr(p, d)}" for d in dims) + v


def unquoted(p: Plan, quoted: set[str]) -> str:
    """``, FIELD`` for each field that shapes the plan, differs from its default and is not
    among ``quoted`` (the fields the document's sentence names), so a plan that changed in
    a field the sentence leaves out no longer matches it."""
    parts = [f"{d}{getattr(p, d)}" for d in ("tp", "cp", "ep", "pp", "dp")
             if d not in quoted and getattr(p, d) > 1]
    extra = {"microbatch_size": (p.microbatch_size > 1, f"mbs{p.microbatch_size}"),
             "virtual_stages": (p.virtual_stages > 1, f"v{p.virtual_stages}"),
             "uneven_pipeline": (p.uneven_pipeline, "uneven pipeline"),
             "recompute": (p.recompute != "none", f"{p.recompute} recomputation"),
             "zero_stage": (p.zero_stage > 0, f"ZeRO-{p.zero_stage}"),
             "offload_optimizer": (p.offload_optimizer, "optimizer offloaded"),
             "offload_params": (p.offload_params, "weights offloaded"),
             "dtype": (p.dtype != "bf16", p.dtype)}
    parts += [text for field, (on, text) in extra.items() if on and field not in quoted]
    return "".join(f", {x}" for x in parts)


ATTENTION = {"flash2": "FlashAttention-2", "flash3": "FlashAttention-3", "cudnn": "cuDNN"}


def attention(framework: str) -> str:
    from planner.specs.framework import load_framework

    backend = load_framework(framework).kernels.attention_backend
    return ATTENTION.get(backend, backend)


def eager(p: Plan, words: str) -> str:
    """``words`` (the document's for unfused elementwise kernels) or, fused, ``fused``."""
    return words if not p.fused_elementwise else "fused elementwise"


#: the README's one example per framework profile (section "Frameworks")
H100_512 = ("llama3-70b", "dgx-h100-superpod", 512)
H100_64 = ("llama3-8b", "dgx-h100-superpod", 64)


def _megatron_core() -> str:
    p, e = solved(*H100_512, "megatron-core")
    q = {"tp", "pp", "dp", "virtual_stages", "zero_stage"}
    return (f"#   {layout(p)} ZeRO-{p.zero_stage}{unquoted(p, q)}"
            f"{', sequence parallel' if p.sequence_parallel else ''}"
            f"{', TP overlap on' if p.overlap_tp_comm is True else ''}: "
            f"{seconds(e.iteration_time_s)}/iteration, MFU {pct(e.mfu)}")


def _nemo() -> str:
    import planner
    from planner.specs.loaders import load_cluster

    p, _ = solved(*H100_512, "nemo")
    same = "the same plan" if p == solved(*H100_512, "megatron-core")[0] else \
        f"{layout(p)}{unquoted(p, {'tp', 'pp', 'dp', 'virtual_stages'})}"
    text = planner.export_plan("megatron-bridge", H100_512[0],
                               load_cluster(H100_512[1], H100_512[2]), p)
    precision = re.search(r"^mixed_precision=(\S+)$", text, re.M)
    return f"#   {same} as Bridge recipe overrides ({precision[1] if precision else 'no'}"


def _torchtitan() -> str:
    p, e = solved(*H100_512, "torchtitan")
    rec = f"{p.recompute} recomputation" if p.recompute != "none" else "no recomputation"
    return (f"#   FSDP2 over {p.dp} ranks (ZeRO-{p.zero_stage})"
            f"{unquoted(p, {'dp', 'zero_stage', 'recompute'})}, {rec}, "
            f"{attention('torchtitan')}: {seconds(e.iteration_time_s)}, MFU {pct(e.mfu)}")


def _deepspeed() -> str:
    p, e = solved(*H100_64, "deepspeed")
    return (f"#   ZeRO-{p.zero_stage} over dp{p.dp}{unquoted(p, {'dp', 'zero_stage'})}, "
            f"{eager(p, 'eager model code')}: {seconds(e.iteration_time_s)}, MFU {pct(e.mfu)}")


def _pytorch() -> str:
    from planner.specs.framework import load_framework

    p, e = solved(*H100_64, "pytorch")
    return (f"#   FSDP2 (ZeRO-{p.zero_stage}) over dp{p.dp}{unquoted(p, {'dp', 'zero_stage'})}, "
            f"{eager(p, 'eager modules')}: {seconds(e.iteration_time_s)}, MFU {pct(e.mfu)} "
            f"(written as {load_framework('pytorch').export_format}'s TOML)")


def _kernel_fraction() -> str:
    """The share of the kernel table's speeds each framework's training step sustains on
    the README's H100s, as the cost model applies it (the GPU file's value, or the
    framework profile's fit on that GPU)."""
    from planner.costmodel.runtime import apply_profile
    from planner.specs.framework import load_framework
    from planner.specs.loaders import load_cluster

    c = load_cluster("dgx-h100-superpod")
    kf = {f: apply_profile(c, load_framework(f)).gpu.efficiency.kernel_fraction
          for f in ("megatron-core", "torchtitan")}
    return (f"`kernel_fraction`: {kf['megatron-core']:.2f} for Megatron-Core on NVIDIA's NeMo "
            f"runs, {kf['torchtitan']:.2f} for torchtitan on its own")


#: the README's launch example (section "From plan to launch"): `--export megatron` solves
#: for Megatron-Core, `--framework torchtitan` for torchtitan, on the 1024-GPU SuperPOD
SUPERPOD = ("llama3-70b", "examples/superpod.yaml", None)
#: the flags of the README's excerpt of run.sh, in the order the exporter writes them
EXCERPT_FLAGS = ("--tensor-model-parallel-size", "--pipeline-model-parallel-size",
                 "--context-parallel-size", "--sequence-parallel", "--use-distributed-optimizer",
                 "--num-layers-per-virtual-pipeline-stage", "--overlap-grad-reduce",
                 "--overlap-param-gather", "--tp-comm-overlap")


@lru_cache(maxsize=1)
def run_sh() -> str:
    """run.sh: the Megatron-LM arguments ``planner solve ... --export megatron`` writes."""
    import planner

    return planner.export_plan("megatron", SUPERPOD[0], SUPERPOD[1],
                               solved(*SUPERPOD, "megatron-core")[0])


def _excerpt_intro() -> str:
    p, _ = solved(*SUPERPOD, "megatron-core")
    return (f"`run.sh` for the 70B optimum above ({layout(p)}, ZeRO-{p.zero_stage}"
            f"{unquoted(p, {'tp', 'pp', 'dp', 'virtual_stages', 'zero_stage'})}; excerpt)")


def _excerpt() -> str:
    """The README's excerpt of run.sh: the framework line, the torchrun line up to the node
    rank, and the lines of the excerpt's flags (a flag the exporter no longer writes, or
    writes with another value, no longer matches)."""
    lines = run_sh().splitlines()
    head = next(x for x in lines if x.startswith("# framework:"))
    torchrun = next(x for x in lines if x.startswith("torchrun "))
    torchrun = torchrun[:torchrun.index(" --master-addr")] + " ... pretrain_gpt.py \\"
    flags = [x for x in lines if x.strip().split(" ")[0] in EXCERPT_FLAGS]
    return "\n".join([head, torchrun, *flags])


def _round_trip() -> str:
    """``planner evaluate --from megatron @run.sh``: run.sh read back and evaluated (no
    --framework), against the solve's figures."""
    import planner

    _, e = solved(*SUPERPOD, "megatron-core")
    plan, _ = planner.plan_from_megatron(run_sh(), SUPERPOD[0], SUPERPOD[1])
    back = planner.evaluate(SUPERPOD[0], SUPERPOD[1], plan)
    figures = f"{seconds(back.iteration_time_s)} and {pct(back.mfu)} MFU"
    same = figures == f"{seconds(e.iteration_time_s)} and {pct(e.mfu)} MFU"
    return f"evaluates it back to {'the same ' if same else ''}{figures}"


def _launch_torchtitan() -> str:
    p, e = solved(*SUPERPOD, "torchtitan")
    _, mc = solved(*SUPERPOD, "megatron-core")
    gpus = p.tp * p.cp * p.pp * p.dp
    fsdp = "FSDP2" if p.zero_stage == 3 else f"ZeRO-{p.zero_stage}"
    rec = f"{p.recompute} recomputation" if p.recompute != "none" else "no recomputation"
    return (f"{gpus} GPUs is {seconds(e.iteration_time_s)} under torchtitan (cp{p.cp} with "
            f"{fsdp} over dp{p.dp}{unquoted(p, {'cp', 'dp', 'zero_stage', 'recompute'})}, "
            f"{rec}, in a rank order torchtitan can produce) against "
            f"{seconds(mc.iteration_time_s)} under Megatron-LM")


@lru_cache(maxsize=None)
def solve_result(model: str, cluster: str, gpus: int | None, global_batch: int | None = None,
                 framework: str | None = None) -> Any:
    """What ``planner solve -m MODEL -c CLUSTER --gpus N [--global-batch B]`` answers
    (``planner.solve``, the function the CLI calls): plan, estimate and the comparison with
    published runs, once per process."""
    import planner

    kw: dict[str, Any] = {} if global_batch is None else {"global_batch_size": global_batch}
    if framework is not None:
        kw["framework"] = framework
    res = planner.solve(model, cluster, gpus=gpus, **kw)
    if res.status != "optimal":
        raise RuntimeError(f"planner.solve({model!r}, {cluster!r}, gpus={gpus}) ended "
                           f"{res.status!r}, not proven optimal: its figures cannot be checked")
    return res


def _a100_8b() -> str:
    """README, Known limitations: the Llama 3 8B answer on 64 A100."""
    e = solve_result("llama3-8b", "dgx-a100-superpod", 64, 512).best.estimate
    return (f"answers {pct(e.mfu)} MFU ({pct(e.hfu)} HFU: MFU counts the causal half of "
            f"attention FlashAttention skips), expected within ±{e.expected_error_pct:.0f} %")


def _a100_175b(lead: str) -> Callable[[], str]:
    """README: the GPT-3 175B answer on 1024 A100 against the best published run like it,
    and (Known limitations) the setting that makes most of the difference."""
    def text() -> str:
        res = solve_result("gpt3-175b", "dgx-a100-superpod", 1024)
        gain = f"{res.published['gain_pct']:.0f} % faster per GPU than the best published run"
        if lead == "row":
            return f"The A100 row's answer says that it is {gain}"
        top = res.published["differences"][0]
        setting = top["setting"].split(" ", 1)
        return (f"({pct(res.best.estimate.mfu)} MFU) says that its plan is {gain} like it and "
                f"that interleaving ({setting[0]} {setting[1]}: {top['slowdown_pct']:+.0f} %)")
    return text


def plan_cell(p: Plan) -> str:
    """docs/export.md's plan cell: ``tp4 pp4 dp64 v8, uneven pipeline, ZeRO-1, SP``."""
    dims = " ".join(f"{d}{getattr(p, d)}" for d in ("tp", "cp", "ep", "pp", "dp")
                    if getattr(p, d) > 1)
    parts = [dims + (f" v{p.virtual_stages}" if p.virtual_stages > 1 else "")]
    parts += ["uneven pipeline"] if p.uneven_pipeline else []
    parts += [f"ZeRO-{p.zero_stage}"]
    parts += [f"recompute {p.recompute}"] if p.recompute != "none" else []
    parts += ["SP"] if p.sequence_parallel else []
    return ", ".join(parts)


#: docs/export.md's table of example plans: file, then the solve that made it (model,
#: cluster, --gpus, --global-batch, --framework)
EXPORT_PLANS = (
    ("llama3-70b.plan.yaml", ("llama3-70b", "examples/superpod.yaml", None, None,
                              "megatron-core")),
    ("llama3-405b.plan.yaml", ("llama3-405b", "dgx-h100-superpod", 16384, 2048,
                               "megatron-core")),
    ("llama3-70b.torchtitan.plan.yaml", ("llama3-70b", "examples/superpod.yaml", None, None,
                                         "torchtitan")),
    ("llama3-405b.torchtitan.plan.yaml", ("llama3-405b", "dgx-h100-superpod", 16384, 2048,
                                          "torchtitan")),
    ("llama3-70b.deepspeed.plan.yaml", ("llama3-70b", "examples/superpod.yaml", 512, None,
                                        "deepspeed")),
    ("llama3-405b.deepspeed.plan.yaml", ("llama3-405b", "dgx-h100-superpod", 2048, 2048,
                                         "deepspeed")),
)


def export_command(args: tuple) -> str:
    model, cluster, gpus, batch, framework = args
    return (f"planner solve -m {model} -c {cluster}" + (f" --gpus {gpus}" if gpus else "")
            + (f" --global-batch {batch}" if batch else "") + f" --framework {framework}")


def _export_row(file: str, args: tuple) -> Callable[[], str]:
    def text() -> str:
        res = solve_result(*args)
        p, e = res.best.plan, res.best.estimate
        return (f"| `{file}` | `{export_command(args)}` | {plan_cell(p)} | "
                f"{seconds(e.iteration_time_s)}, {pct(e.mfu)} MFU |")
    return text


#: the README's offload example: Llama 3 70B with Adam on one 8x H100 node, 512K tokens a step
OFFLOAD = ("llama3-70b", "dgx-h100-superpod", 8, 64)


def _offload(part: str) -> Callable[[], str]:
    """README, the offload tier: the optimum's HBM and host memory per GPU, and the share of
    the step the CPU optimizer step and its transfers take (the breakdown's ``offload``)."""
    def text() -> str:
        res = solve_result(*OFFLOAD)
        p, e = res.best.plan, res.best.estimate
        if part == "memory":
            what = "the optimizer offloaded" if p.offload_optimizer else "nothing offloaded"
            return (f"returns TP{p.tp} with {what}: {e.memory_per_gpu_bytes / 2**30:.1f} GiB of "
                    f"HBM, {e.host_memory_per_gpu_bytes / 2**30:.0f} GiB of host memory per GPU")
        return f"{e.time_breakdown_s['offload']:.1f} s of it the CPU step and transfers"
    return text


#: the serving example (README "Serving", docs/serving.md), simulated with --simulate 20000
SERVE_EXAMPLE = ("planner serve -m llama3-70b -c dgx-h100-superpod --isl 2048 --osl 256 "
                 "--ttft-ms 500 --tpot-ms 30 --rate 20 --simulate 20000")


@lru_cache(maxsize=None)
def served(extra: str = "") -> dict:
    """``SERVE_EXAMPLE [extra] --json`` as the CLI prints it (the simulation is the CLI's)."""
    import json

    path = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
    cmd = [sys.executable, "-m", *SERVE_EXAMPLE.split(), *extra.split(), "--json"]
    out = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": path},
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def _simulated_readme() -> str:
    d = served()
    sim, est = d["simulation"], d["estimate"]
    ttft = est["ttft_p99_ms"] / sim["ttft_p99_ms"] - 1
    tpot = est["tpot_p99_ms"] / sim["tpot_p99_ms"] - 1
    return (f"TTFT P50 {sim['ttft_p50_ms']:.1f} / P99 {sim['ttft_p99_ms']:.1f} ms, TPOT P50 "
            f"{sim['tpot_p50_ms']:.2f} / P99 {sim['tpot_p99_ms']:.2f} ms (the model's TTFT P99 is "
            f"{pct(abs(ttft))} {'higher' if ttft >= 0 else 'lower'}, its TPOT P99 "
            f"{pct(abs(tpot))} {'higher' if tpot >= 0 else 'lower'}")


def _simulated_row(label: str, extra: str) -> Callable[[], str]:
    """A row of docs/serving.md's table: P99 TTFT and TPOT, the model's and simulated."""
    def text() -> str:
        d = served(extra)
        sim, est = d["simulation"], d["estimate"]
        return (f"| {est['ttft_p99_ms']:.1f} / {sim['ttft_p99_ms']:.1f} ms | "
                f"{est['tpot_p99_ms']:.2f} / {sim['tpot_p99_ms']:.2f} ms |")
    return text


def goodput_of(cluster: str, gpus: int, plan: Plan | None = None) -> Any:
    """Llama 3 405B's goodput (planner.costmodel.train.goodput) on ``gpus`` of ``cluster``:
    a procurement option's (it depends on the option, never on the plan), or with ``plan``
    and the Llama 3 paper's interruption rate, docs/cost-model.md's check."""
    from planner.costmodel.train.goodput import training_goodput
    from planner.specs.loaders import load_cluster, load_model

    c = load_cluster(cluster, gpus)
    if plan is not None:
        c = c.model_copy(update={"failures_per_gpu_hour": 466 / (54 * 24 * 16384)})
    return training_goodput(load_model("llama3-405b"), c, gpus, plan or "bf16")


def _goodput_line(g: Any) -> str:
    return (f"{pct(g.fraction)}, an interruption every {g.mtbf_s / 3600:.2f} h, a "
            f"{g.checkpoint_bytes / 2**30:,.0f} GiB checkpoint every {g.interval_s:.0f} s, "
            f"{g.lost_per_failure_s:.0f} s lost per interruption")


def _goodput_readme() -> str:
    """README: the goodput line of the procurement answer (16,384 x mi300x)."""
    return f"16,384 GPUs: {_goodput_line(goodput_of('mi300x-cluster', 16384))}"


def _goodput_procure() -> str:
    """docs/procure.md: 8,192 B200, then 16,384."""
    g, big = goodput_of("dgx-b200-superpod", 8192), goodput_of("dgx-b200-superpod", 16384)
    return (f"Llama 3 405B on 8,192 B200: `f` = {pct(g.fraction)} (an interruption every "
            f"{g.mtbf_s / 3600:.2f} h, a {g.checkpoint_bytes / 2**30:,.0f} GiB checkpoint every "
            f"{g.interval_s:.0f} s, {g.lost_per_failure_s:.0f} s lost per interruption); on "
            f"16,384 GPUs {pct(big.fraction)}")


def _goodput_check() -> str:
    """docs/cost-model.md's check: the Llama 3 paper's plan and interruption rate
    (tests/test_goodput.py), then the restart time at 5 and 20 minutes."""
    from planner.costmodel.train.goodput import job_goodput
    from planner.specs.plan import Plan

    plan = Plan(tp=8, cp=1, pp=16, dp=128, global_batch_size=1024, seq_len=8192,
                microbatch_size=1, zero_stage=1, uneven_pipeline=True)
    g = goodput_of("dgx-h100-superpod", 16384, plan)
    again = {r: job_goodput(g_cluster(r), 16384, g.checkpoint_bytes, "sync").fraction
             for r in (300, 1200)}
    return (f"`M` = {g.mtbf_s / 3600:.2f} h, a {g.checkpoint_bytes / 1e12:.1f} TB checkpoint "
            f"written in {g.write_s:.1f} s every {g.interval_s:.0f} s, "
            f"{g.lost_per_failure_s:.0f} s lost per interruption, `f` = {pct(g.fraction)} (the "
            f"catalog's default rate is this one), against the published \"higher than 90 %\" "
            f"(tests/test_goodput.py). With `R` = 5 min `f` is {pct(again[300])}, with 20 min "
            f"{pct(again[1200])}")


def g_cluster(restart_s: float) -> Any:
    from planner.specs.loaders import load_cluster

    return load_cluster("dgx-h100-superpod", 16384).model_copy(
        update={"failures_per_gpu_hour": 466 / (54 * 24 * 16384), "restart_s": restart_s})


SOLVE_512 = "planner solve -m llama3-70b -c dgx-h100-superpod --gpus 512"
SOLVE_64 = "planner solve -m llama3-8b -c dgx-h100-superpod --gpus 64"
SOLVE_SUPERPOD = "planner solve -m llama3-70b -c examples/superpod.yaml"
SOLVES: tuple[Figure, ...] = (
    Figure("README.md", f"{SOLVE_512} --framework megatron-core --export megatron",
           _megatron_core),
    Figure("README.md", f"{SOLVE_512} --framework nemo --export megatron-bridge", _nemo),
    Figure("README.md", f"{SOLVE_512} --framework torchtitan --export torchtitan", _torchtitan),
    Figure("README.md", f"{SOLVE_64} --framework deepspeed --export deepspeed", _deepspeed),
    Figure("README.md", f"{SOLVE_64} --framework pytorch --export framework", _pytorch),
    Figure("README.md", "planner catalog frameworks (hardware_catalog/frameworks/*.yaml fit, "
           "hardware_catalog/gpus/h100-sxm.yaml)", _kernel_fraction),
    Figure("README.md", f"{SOLVE_SUPERPOD} --export megatron --export-out run.sh",
           _excerpt_intro),
    Figure("README.md", f"{SOLVE_SUPERPOD} --export megatron --export-out run.sh", _excerpt),
    Figure("README.md", "planner evaluate -m llama3-70b -c examples/superpod.yaml --from "
           "megatron @run.sh", _round_trip),
    Figure("README.md", f"{SOLVE_SUPERPOD} --framework torchtitan (and --export megatron)",
           _launch_torchtitan),
    Figure("README.md", "planner solve -m llama3-8b -c dgx-a100-superpod --gpus 64 "
           "--global-batch 512", _a100_8b),
    Figure("README.md", "planner solve -m gpt3-175b -c dgx-a100-superpod --gpus 1024",
           _a100_175b("limitations")),
    Figure("README.md", "planner solve -m gpt3-175b -c dgx-a100-superpod --gpus 1024",
           _a100_175b("row")),
    *(Figure("docs/export.md", export_command(args), _export_row(file, args))
      for file, args in EXPORT_PLANS),
    Figure("README.md", "planner solve -m llama3-70b -c dgx-h100-superpod --gpus 8 "
           "--global-batch 64", _offload("memory")),
    Figure("README.md", "planner solve -m llama3-70b -c dgx-h100-superpod --gpus 8 "
           "--global-batch 64", _offload("step")),
    Figure("README.md", SERVE_EXAMPLE, _simulated_readme),
    Figure("README.md", "planner procure --model llama3-405b --tokens 15e12 --days 90 (its "
           "goodput line: training_goodput on 16,384 GPUs of mi300x-cluster)", _goodput_readme),
    Figure("docs/procure.md", "training_goodput of llama3-405b on dgx-b200-superpod (8,192 and "
           "16,384 GPUs; planner procure's goodput line)", _goodput_procure),
    Figure("docs/cost-model.md", "tests/test_goodput.py's case: training_goodput of llama3-405b "
           "at TP8 CP1 PP16 DP128 on 16,384 H100, 466 interruptions in 54 days", _goodput_check),
    Figure("docs/serving.md", SERVE_EXAMPLE, _simulated_row("disaggregated", "")),
    Figure("docs/serving.md", SERVE_EXAMPLE + " --fix mode=aggregated",
           _simulated_row("aggregated", "--fix mode=aggregated")),
)


# ---- docs/seeds.md: the seed papers' claims as the product reproduces them ----------------
# Each "ours" figure is computed by the helpers of the test that holds it (tests/test_seeds_*.py,
# test_networks.py, test_ramp.py, test_dlrm.py, imported from tests/, so the setups are the
# tests' own), or by the sweep the document names; the papers' figures are quoted in the
# document (<!-- quote column paper: ... --> and listings).
SEEDS_DOC = "docs/seeds.md"


@lru_cache(maxsize=None)
def seed_test(name: str) -> Any:
    """``tests/NAME.py`` as a module (tests/ on the path for its conftest imports)."""
    import importlib.util

    tests = str(ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    spec = importlib.util.spec_from_file_location(f"check_docs_{name}",
                                                  ROOT / "tests" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


def rel_pct(x: float, ref: float, digits: int = 1) -> str:
    """``+6.7%``: x against ref, signed, no space (the seed tables' style)."""
    return f"{100 * (x / ref - 1):+.{digits}f}%"


def _cell(fn: Callable[[], str]) -> Callable[[], str]:
    """A table cell: ``| TEXT |``."""
    return lambda: f"| {fn()} |"


# ASTRA-sim 2.0 Table III through `planner collective` (the CLI's build_levels and
# collective_result, as tests/test_networks.py::test_astra_sim_table3_cli runs it)
ASTRA_SHAPE = "Ring({})_FC(8)_Ring(8)_Switch({})"


@lru_cache(maxsize=None)
def astra_us(a: int, d: int = 4, unit: str = "GiB/s") -> float:
    from planner.cli.collective import build_levels, collective_result

    levels, chunks, _ = build_levels(ASTRA_SHAPE.format(a, d), None, "1000,200,100,50", "0.02",
                                     unit, None, None)
    return collective_result("allreduce", 2**30, levels, [lv.size for lv in levels],
                             chunks)["time_us"]


def astra_paper_us(a: int) -> float:
    return next(us for dims, _, us in seed_test("test_formulas").ASTRA_TABLE3
                if dims == (a, 8, 8, 4))


def _astra_row(a: int) -> str:
    t = astra_us(a)
    return f"{t:.2f} µs ({rel_pct(t, astra_paper_us(a), 2).replace('-', '−')})"


def _astra_units() -> str:
    t = astra_us(2, unit="GB/s")
    return (f"Without the binary units (`--bandwidth-unit GB/s`) the 2_8_8_4 time would be "
            f"{t:.0f} µs ({rel_pct(t, astra_paper_us(2))})")


@lru_cache(maxsize=None)
def astra_allreduce() -> dict[str, tuple[float, float]]:
    """(baseline, themis) ms of the 1 GiB all-reduce on each Table I system."""
    nw = seed_test("test_networks")
    return {n: (nw.allreduce_ms(n, "baseline"), nw.allreduce_ms(n, "themis")) for n in nw.WAFER}


def _astra_wafer() -> str:
    t = astra_allreduce()
    ws = ("W-1D-350", "W-1D-500", "W-1D-600")
    same = all(abs(t[w][1] / t[w][0] - 1) < 1e-9 for w in ws)
    return " / ".join(f"{t[w][0]:.3f}" for w in ws) + (" ms either way" if same else
                                                        " ms baseline, not with Themis")


def _astra_themis() -> str:
    t = astra_allreduce()
    multi = ("W-2D", "Conv-3D", "Conv-4D")
    return (", ".join(f"{t[m][0]:.2f} → {t[m][1]:.2f}" for m in multi) + " ms ("
            + ", ".join(f"{t[m][0] / t[m][1]:.2f}x" for m in multi) + ")")


def _astra_equal_bw() -> str:
    t, same = astra_allreduce(), seed_test("test_networks").SAME_BW
    return ", ".join(f"{m} {t[m][1]:.2f} vs {w} {t[w][0]:.2f}" for m, w in same.items()) + " ms"


def _astra_conv4d() -> str:
    t = astra_allreduce()
    a, b = t["Conv-4D"][0], t["W-1D-350"][0]
    return f"{a:.2f} {'<' if a < b else '>'} {b:.2f} ms"


@lru_cache(maxsize=None)
def astra_dlrm() -> dict[tuple[str, str], Any]:
    """MAD-Max's DLRM-A table-wise on 512 GPUs of each Table I system (the plan of
    test_astra_sim_dlrm_conventional_with_themis_near_wafer_scale)."""
    from planner.costmodel.dlrm.evaluate import evaluate_dlrm
    from planner.specs.dlrm import DLRMPlan
    from planner.specs.loaders import load_model

    nw = seed_test("test_networks")
    m = load_model("dlrm-a")
    entry = m.tables[0]
    plan = DLRMPlan(tables=[dict(table=entry.name, sharding_type="table_wise",
                                 copies=entry.count,
                                 ranks={r: entry.count // 512 for r in range(512)})])
    return {(n, s): evaluate_dlrm(m, nw.astra_cluster(n, s), plan)
            for n in nw.WAFER for s in ("baseline", "themis")}


def _astra_dlrm_row() -> str:
    e, same = astra_dlrm(), seed_test("test_networks").SAME_BW
    ms = {k: v.iteration_time_s * 1e3 for k, v in e.items()}
    pairs = [f"{m} {ms[m, 'themis']:.2f} vs {ms[w, 'baseline']:.2f}" for m, w in same.items()]
    w1d = all(abs(ms[w, "themis"] / ms[w, "baseline"] - 1) < 1e-9 for w in same.values())
    base = ", ".join(f"{ms[m, 'baseline']:.2f}" for m in same)
    return (f"MAD-Max DLRM-A, table-wise on 512 A100: {pairs[0]} ms; {pairs[1]}; {pairs[2]} "
            f"(baseline {base}; W-1D {'unchanged' if w1d else 'changed'})")


def _astra_dlrm_a2a() -> str:
    from planner.specs.loaders import load_model

    e = astra_dlrm()
    m = load_model("dlrm-a")
    return (f"({e['Conv-3D', 'baseline'].phases_s['dist_fwd'] * 1e3:.2f} against "
            f"{e['W-1D-350', 'baseline'].phases_s['dist_fwd'] * 1e3:.2f} ms per direction on "
            f"Conv-3D). ASTRA-sim's own DLRM (57M MLP parameters, its tables not published) is "
            f"all-reduce-heavier; with DLRM-A's {m.dense_params * m.dense_bytes / 1e9:.1f} GB of "
            "dense gradients")


# RAMP (tests/test_ramp.py): collectives at 65,536 GPUs, energy and cost, Table 9
@lru_cache(maxsize=None)
def ramp_collectives() -> dict[str, tuple[float, float]]:
    """(RAMP, fat tree) µs of each 1 GiB collective at 65,536 GPUs."""
    from planner.specs.loaders import load_cluster

    rp = seed_test("test_ramp")
    ramp, fat = load_cluster("ramp-a100"), load_cluster(rp.FAT_TREE)
    return {op: (rp.full(ramp, op)["time_us"], rp.full(fat, op)["time_us"])
            for op in ("reduce_scatter", "all_gather", "allreduce", "all_to_all")}


def _ramp_rs() -> str:
    t = ramp_collectives()
    s = [f"{t[op][1] / t[op][0]:.2f}×" for op in ("reduce_scatter", "all_gather", "allreduce")]
    each = f"{s[0]} each" if len(set(s)) == 1 else " / ".join(s)
    a, b = t["reduce_scatter"]
    return (f"{each} (`planner collective -c ramp-a100 --op reducescatter` {a:.1f} µs vs `-c "
            f"examples/ramp-baseline-fat-tree.yaml` {b:.1f} µs)")


def _ramp_a2a() -> str:
    a, b = ramp_collectives()["all_to_all"]
    return f"{b / a:.1f}× ({a:.0f} µs vs {b:,.0f} µs)"


@lru_cache(maxsize=1)
def ramp_energy() -> tuple[float, list[float], list[float]]:
    """RAMP's MW at 65,536 GPUs, the EPS/RAMP power ratios (383, 361 pJ/bit) and the
    cost ratios (transceivers at $1.50 and $6.00 per Gb/s), as the test computes them."""
    from planner.costmodel.energy import network_capex_usd_per_gpu, network_power_w_per_gpu
    from planner.specs.loaders import cluster_from_dict, load_cluster

    ramp_w = network_power_w_per_gpu(load_cluster("ramp-a100"))
    cap = {"name": "eps", "kind": "switch", "size": 65536, "bandwidth_GBps": 1600}
    power = [network_power_w_per_gpu(cluster_from_dict(
        {"name": "eps", "gpu": "a100", "num_gpus": 65536,
         "topology": [{**cap, "energy_pj_per_bit": pj, "cost_usd_per_Gbps": 20.12}]}, "eps"))
        / ramp_w for pj in (383, 361)]
    cost = [20.12 * 12800 / network_capex_usd_per_gpu(cluster_from_dict(
        {"name": "r", "gpu": "a100", "ramp": {"cost_usd_per_Gbps": trx + 0.12}}, "r"))
        for trx in (1.50, 6.00)]
    return ramp_w * 65536 / 1e6, power, cost


def _ramp_energy() -> str:
    mw, (a, b), _ = ramp_energy()
    return (f"{a:.1f}× (383 pJ/bit SuperPod) and {b:.1f}× (361 pJ/bit fat tree) against 8.5 "
            f"pJ/bit; {mw:.2f} MW")


def _ramp_cost() -> str:
    _, _, (a, b) = ramp_energy()
    return f"{a:.2f}× and {b:.2f}×"


@lru_cache(maxsize=1)
def ramp_megatron() -> list[float]:
    from planner.specs.loaders import load_cluster

    rp = seed_test("test_ramp")
    ramp, fat = load_cluster("ramp-a100"), load_cluster(rp.FAT_TREE)
    return [rp.megatron_speedup(ramp, fat, row) for row in rp.TABLE9]


def _ramp_megatron() -> str:
    s = ramp_megatron()
    grows = all(b >= a - 0.05 for a, b in zip(s[2:], s[3:]))  # the test's trend, MP > 1
    return (", ".join(f"{x:.2f}" for x in s) + "×, "
            + ("growing with MP" if grows else "not growing with MP"))


def _ramp_gaps() -> str:
    rs = ramp_collectives()["reduce_scatter"]
    return f"*Reduce-scatter {rs[1] / rs[0]:.2f}× vs 7.6×.*"


def _ramp_gaps_a2a() -> str:
    a, b = ramp_collectives()["all_to_all"]
    return f"*All-to-all {b / a:.0f}× vs 171×, Megatron {max(ramp_megatron()):.1f}× vs 16.7×.*"


def _ramp_penalty() -> str:
    a, b = ramp_collectives()["all_to_all"]
    return f"Reaching 171× would take a ~{171 / (b / a):.0f}× per-step oversubscription penalty"


# LBNL (tests/test_seeds_lbnl.py)
LBNL_175B = (4, 16, 8, 1)  # LBNL's optimum (n_t, n_p, n_d, b_m)


@lru_cache(maxsize=1)
def lbnl_175b() -> tuple[Any, dict[tuple, float]]:
    from planner.specs.loaders import load_model

    lb = seed_test("test_seeds_lbnl")
    plans = lb.best(load_model("gpt3-175b"), lb.lbnl_system("a100-sxm-80gb", 4, 512, 300, 25),
                    1024, top_k=5)
    times: dict[tuple, float] = {}
    for p in plans:  # the best variant of each (tp, pp, dp, mbs), as the test keeps them
        times[lb.key(p)] = min(times.get(lb.key(p), float("inf")), p.estimate.iteration_time_s)
    return plans[0], times


def _lbnl_175b() -> str:
    top, times = lbnl_175b()
    lb = seed_test("test_seeds_lbnl")
    t, mine = top.estimate.iteration_time_s, lb.key(top)
    theirs = times.get(LBNL_175B)
    ranked = ("not among our five best" if theirs is None else
              f"at {theirs:.3f} s ({rel_pct(theirs, t, 2)})")
    domain = top.plan.placement.domain.get("tp")
    fills = (f"TP {top.plan.tp} fills the NVS4 domain" if domain == top.plan.tp == 4 else
             f"TP {top.plan.tp}, {domain} in the NVS4 domain")
    return (f"{mine} at {t:.3f} s; LBNL's optimum {LBNL_175B} {ranked}; {fills}")


@lru_cache(maxsize=None)
def lbnl_1t(nvs: int, n: int, tp8_in_domain: bool = False) -> Any:
    lb = seed_test("test_seeds_lbnl")
    fixed = {"tp": 8, "placement": {"domain": {"tp": 8, "cp": 1, "dp": 1, "pp": 1}}}
    return lb.best(lb.GPT3_1T, lb.b200(nvs, n), 4096, fixed=fixed if tp8_in_domain else None)[0]


def _lbnl_nvs() -> str:
    g = {n: lbnl_1t(8, n).estimate.iteration_time_s / lbnl_1t(64, n).estimate.iteration_time_s
         for n in (512, 16384)}
    inside = "just inside" if g[512] < 1.01 else "outside"
    return (f"NVS64 over NVS8: {g[512]:.4f}× at 512 GPUs ({inside} the 1 % bar), "
            f"{g[16384]:.3f}× at 16,384")


def _lbnl_tp8() -> str:
    big = lbnl_1t(8, 16384)
    d16 = big.plan.placement.domain.get("tp")
    opt, ind = lbnl_1t(8, 8192), lbnl_1t(8, 8192, True)
    t, ti = opt.estimate.iteration_time_s, ind.estimate.iteration_time_s
    at8 = (f"yes (TP 8 in the domain is our optimum, {t:.2f} s)" if ti <= t * (1 + 1e-9) else
           f"TP 8 in the domain {rel_pct(ti, t)} over our optimum ({t:.2f} s)")
    return (f"at 16,384: {'yes' if d16 == 8 else 'no'} (TP {big.plan.tp}, {d16} in the "
            f"domain); at 8,192: {at8}")


# AMPeD (tests/test_seeds_amped.py)
@lru_cache(maxsize=None)
def amped_table2(name: str, attention: str = "standard") -> tuple[float, float]:
    """Our TFLOP/s per GPU on one Table II row and the published one."""
    am = seed_test("test_seeds_amped")
    row = next(r for r in am.TABLE2 if r[0] == name)
    name, heads, h, layers, tp, pp, n, b, published, _ = row
    if attention == "standard":
        est = am.table2_row(name, heads, h, layers, tp, pp, n, b)
    else:  # the same run with FlashAttention in place of the 2021 kernels
        from planner.costmodel.train.evaluator import evaluate
        from planner.specs.plan import Plan

        plan = Plan(tp=tp, pp=pp, dp=n // (tp * pp), global_batch_size=b, seq_len=2048,
                    microbatch_size=1, recompute="full", attention=attention, zero_stage=0,
                    dtype="fp16", virtual_stages=1)
        est = evaluate(am.megatron_model(name, heads, h, layers), am.selene(n), plan)
    return am.megatron_tflops(est, b, layers, h, n), published


def _amped_row(name: str) -> Callable[[], str]:
    def text() -> str:
        ours, published = amped_table2(name)
        return f"{ours:.1f} ({rel_pct(ours, published)})"
    return text


def _amped_table2_gap() -> str:
    names = [r[0] for r in seed_test("test_seeds_amped").TABLE2]
    std = [100 * (o / p - 1) for o, p in map(amped_table2, names)]
    fa = [100 * (o / p - 1) for o, p in (amped_table2(n, "flash") for n in names)]
    return (f"comes out {min(std):+.1f} to {max(std):+.1f}% against Narayanan et al. 2021's "
            f"published numbers; with FlashAttention instead of the 2021 attention kernels "
            f"{min(fa):+.1f} to {max(fa):+.1f}%")


def _amped_h100() -> str:
    from planner.specs.loaders import load_gpu

    amped = 1.8e9 * 132 * 4 * 1024 * 2 / 1e12  # 8-bit MACs/s as TFLOP/s
    off = abs(amped / load_gpu("h100-sxm").peak_tflops["fp8"] - 1)
    return f"is the catalog FP8 peak within {math.ceil(100 * off)}%"


@lru_cache(maxsize=None)
def amped_case1(bubble: str) -> dict[str, float]:
    am = seed_test("test_seeds_amped")
    return {k: am.days(am.case1(k, bubble)) for k in am.MAPPINGS}


def _amped_case1(what: str) -> Callable[[], str]:
    def text() -> str:
        d, a = amped_case1("megatron"), amped_case1("amped")
        best = "TP intra, DP inter"
        if what == "best":
            return f"{d[best]:.1f} days (300B tokens)"
        if what == "pp":
            k = "TP intra, PP+DP inter"
            return (f"{d[k]:.1f} d with our bubble; {a[k]:.1f} d ({a[k] / a[best]:.2f}×) with "
                    "AMPeD's")
        if what == "tp":
            k = "TP intra, TP+DP inter"
            return f"{d[k]:.1f} d ({d[k] / d[best]:.2f}×)"
        k = "DP intra, PP+DP inter"
        return f"{d[k]:.1f} d (default), {a[k]:.1f} d (`amped` bubble)"
    return text


def _amped_tp_inter() -> str:
    d = amped_case1("megatron")
    r = d["TP intra, TP+DP inter"] / d["TP intra, DP inter"]
    return f"so inter-node TP costs {r:.2f}×, not ≈3×"


@lru_cache(maxsize=1)
def amped_case3() -> dict[str, float]:
    am = seed_test("test_seeds_amped")
    t = {bar: am.case3(bar) for bar in am.CASE3}
    t["TP = substrate"] = am.case3("opt2 32/node", tp_fills_node=True)
    return t


def _amped_case3(what: str) -> Callable[[], str]:
    def text() -> str:
        t = amped_case3()
        opt1, big = t["opt1 (8 x off-chip)"], t["opt2 32/node"]
        if what == "opt1":
            return rel_pct(t["reference"], opt1, 0)
        if what == "substrate":
            return (f"×{opt1 / big:.2f} (TP 8, DP/EP on the substrate); AMPeD's TP = substrate "
                    f"size loses (×{opt1 / t['TP = substrate']:.2f})")
        if what == "offchip":
            return f"×{big / t['opt3 2x off-chip']:.2f} / ×{big / t['opt3 4x off-chip']:.2f}"
        return f"{t['reference'] / t['opt3 4x off-chip']:.2f}×"
    return text


# MAD-Max (tests/test_seeds_madmax.py)
@lru_cache(maxsize=None)
def madmax(what: str) -> Any:
    mm = seed_test("test_seeds_madmax")
    if what == "stream":
        return mm.stream_speedups()
    if what == "optimized":
        return mm.stream_speedups("optimized")
    if what == "default":
        return mm.speedups()
    if what == "no optimizer":
        return mm.speedups(without_optimizer=True)
    strategy, _, recompute = what.partition(":")  # a strategy's estimate, recompute if given
    return mm.run(strategy, **({"recompute": recompute} if recompute else {}))


def _madmax_gemm() -> str:
    from planner.specs.kernels import kernel_table

    bd = madmax("FSDP").time_breakdown_s
    gpu = seed_test("test_seeds_madmax").madmax_cluster().gpu
    table = kernel_table(gpu.kernel_table)
    fastest = max(r.tflops for r in table.gemm if r.dtype == "fp16") / gpu.peak_tflops["fp16"]
    return (f"ours ({bd['forward'] + bd['backward']:.2f} s) is no slower than it and no faster "
            f"than every GEMM at the fastest published speed ({9.72 * 0.705 / fastest:.2f} s)")


def _madmax_row(strategy: str) -> Callable[[], str]:
    def text() -> str:
        s, d = madmax("stream")[strategy], madmax("default")[strategy]
        if strategy == "DDP":
            n = madmax("no optimizer")[strategy]
            return (f"| **{s:.2f}×** with MAD-Max's stream model; {d:.2f}× with our default "
                    f"evaluator ({n:.2f}× without the optimizer step;")
        if strategy == "(TP,DDP)":
            return f"| **{s:.2f}×** stream model; {d:.2f}× default |"
        return f"| {s:.2f}× stream model; {d:.2f}× default |"
    return text


def _madmax_fsdp() -> str:
    from planner.costmodel.train.streams import two_stream_iteration
    from planner.specs.loaders import load_model

    mm = seed_test("test_seeds_madmax")
    t = two_stream_iteration(load_model("gpt3-175b"), mm.madmax_cluster(), mm.plan_for("FSDP"))
    return f"| 16.38 s | {t.iteration_s:.2f} s |"


def _madmax_gemm_row() -> str:
    bd = madmax("FSDP").time_breakdown_s
    return f"| 9.72 s | {bd['forward'] + bd['backward']:.2f} s |"


def _madmax_memory() -> str:
    e = madmax("FSDP:full")
    return f"(FSDP with full recomputation: {e.memory_per_gpu_bytes / 2**30:.1f} GiB)"


def _madmax_prefetch() -> str:
    return (f"DDP gain {madmax('stream')['DDP']:.2f}× → {madmax('optimized')['DDP']:.2f}× with "
            '`prefetch="optimized"`')


def _madmax_adam() -> str:
    d, s, n = madmax("DDP"), madmax("default"), madmax("no optimizer")
    ddp = "ties it" if abs(s["DDP"] - 1) < 0.03 else f"by {s['DDP']:.2f}x"
    return (f"which for a full GPT-3 replica under DDP is {d.time_breakdown_s['optimizer']:.1f} s "
            f"per iteration; and, like MAD-Max's measurements, it charges FSDP's per-microbatch "
            f"gathers and reduce-scatters in full (`compose.SHARDED_MICROBATCH_OVERLAP`, which "
            f"MosaicML's published FSDP runs also support: "
            f"`benchmarks/bench_heldout_mosaicml.py`). "
            f"With those, (TP,DDP) beats FSDP by {s['(TP,DDP)']:.2f}x and DDP {ddp} "
            f"({n['DDP']:.2f}x without the Adam step)")


def _madmax_tp256() -> str:
    from planner.specs.loaders import load_model

    mm = seed_test("test_seeds_madmax")
    m, plan = load_model("gpt3-175b"), mm.plan_for("(DDP,TP)")
    act = plan.microbatch_size * plan.seq_len * m.hidden_size * 2  # fp16 activations
    ib = mm.madmax_cluster().topology[-1]
    tp_s = madmax("(DDP,TP)").time_breakdown_s["tp_comm"]
    # MAD-Max's rule (its released code): the bytes over its 60 GB/s "mixed" bandwidth
    madmax_s = act * 4 * m.num_layers / MADMAX_MIXED_GBps / 1e9
    return (f"TP 256 across nodes all-reduces {act / 1e9:.1f} GB of activations four times per "
            f"layer. Our ring over 256 nodes moves 2(n−1)/n of it at the per-GPU "
            f"{ib.bandwidth_GBps * ib.efficiency:.1f} GB/s ({tp_s:.0f} s per iteration); MAD-Max "
            f"divides the bytes by a calibrated {MADMAX_MIXED_GBps} GB/s \"mixed\" NVLink/IB "
            f"bandwidth with no (n−1)/n term ({madmax_s:.0f} s)")


#: MAD-Max's all-reduce bandwidth on dc_A_2048 (released code, facebookresearch/ScaleExplorer
#: madmax/: 0.7254 x 7.0 + 0.2746 x 200.0 GB/s), quoted in docs/seeds.md
MADMAX_MIXED_GBps = 60


# MAD-Max DLRM (tests/test_dlrm.py): Table I on zionex-128, and RAMP's 256-GPU DLRM
DLRM_FAST_GBps = 100  # the faster inter-node level of test_faster_network_speeds_up_...


@lru_cache(maxsize=None)
def dlrm_solved(model: str, cluster: str = "zionex-128", fast: bool = False) -> Any:
    from formulations.dlrm.search import solve_sharding
    from planner.specs.loaders import load_cluster, load_model

    # RAMP Table 10's DLRM runs on 256 GPUs of RAMP or of its fat tree (a file)
    c = (load_cluster("zionex-128") if cluster == "zionex-128" else
         load_cluster(str(ROOT / cluster) if "/" in cluster else cluster, 256))
    if fast:  # test_faster_network_speeds_up_network_bound_dlrm_a_most's network
        c = c.model_copy(update={"topology": [c.topology[0], c.topology[1].model_copy(
            update={"bandwidth_GBps": DLRM_FAST_GBps})]})
    s = solve_sharding(load_model(model), c, "cpsat", 60 if cluster == "zionex-128" else 30)
    if s.status != "optimal":
        raise RuntimeError(f"solve_sharding({model}, {cluster}) ended {s.status!r}")
    return s.estimate


def _dlrm_table_i(model: str, measured: float) -> Callable[[], str]:
    def text() -> str:
        q = dlrm_solved(model).samples_per_s
        return f"{q / 1e6:.3f} MQPS ({rel_pct(q, measured).replace('-', '−')})"
    return text


def _dlrm_bound() -> str:
    a, b = dlrm_solved("dlrm-a").phases_s, dlrm_solved("dlrm-b").phases_s
    da, la = (a["dist_fwd"] + a["dist_bwd"]) * 1e3, (a["lookup_fwd"] + a["lookup_bwd"]) * 1e3
    db, lb = (b["dist_fwd"] + b["dist_bwd"]) * 1e3, (b["lookup_fwd"] + b["lookup_bwd"]) * 1e3
    return (f"A: distribution phases {da:.1f} ms {'>' if da > la else '<'} lookups {la:.1f} ms; "
            f"B: lookups {lb:.1f} ms {'>' if lb > 2 * db else '<'} 2 x the distribution phases "
            f"({db:.1f} ms)")


def _dlrm_fast() -> str:
    from planner.specs.loaders import load_cluster

    x = DLRM_FAST_GBps / load_cluster("zionex-128").topology[1].bandwidth_GBps
    g = {m: dlrm_solved(m, fast=True).samples_per_s / dlrm_solved(m).samples_per_s
         for m in ("dlrm-a", "dlrm-b")}
    return (f"{x:.0f}x inter-node bandwidth: DLRM-A {g['dlrm-a']:.2f}x, DLRM-B "
            f"{g['dlrm-b']:.2f}x")


def _dlrm_ramp() -> str:
    r = dlrm_solved("ramp-dlrm-256", "ramp-a100").iteration_time_s * 1e3
    t = dlrm_solved("ramp-dlrm-256", "examples/ramp-baseline-fat-tree.yaml").iteration_time_s * 1e3
    return f"{t / r:.1f}x ({r:.2f} ms vs {t:.2f} ms per iteration)"


# Sweeps (planner sweep FILE, run point by point in this process)
@lru_cache(maxsize=None)
def sweep_rows(path: str) -> list[dict]:
    from planner.sweep.runners import run_sweep
    from planner.sweep.spec import expand, load_sweep

    rows = run_sweep(expand(load_sweep(ROOT / path), path), backend="local", workers=1)
    if any(r["status"] != "optimal" for r in rows):
        raise RuntimeError(f"planner sweep {path}: a point is not proven optimal")
    return rows


LBNL_SWEEP, MADMAX_SWEEP = "examples/sweeps/lbnl-hbm.yaml", "examples/sweeps/madmax-scaling.yaml"


def lbnl_point(cap: float, bw: float) -> dict:
    return next(r for r in sweep_rows(LBNL_SWEEP)
                if r["hbm_capacity"] == cap and r["hbm_bandwidth"] == bw)


def plan_of(r: dict) -> str:
    return f"TP{r['tp']} PP{r['pp']} DP{r['dp']}" + (
        f" v{r['virtual_stages']}" if r["virtual_stages"] > 1 else "")


def _lbnl_grid() -> str:
    from planner.specs.loaders import load_cluster

    gpu = load_cluster(str(ROOT / "examples/sweeps/lbnl-b200-nvs8.yaml")).gpu
    rows = sweep_rows(LBNL_SWEEP)
    caps = sorted({r["hbm_capacity"] for r in rows})
    bws = sorted({r["hbm_bandwidth"] for r in rows})
    gb = gpu.hbm_gib * 2**30 / 1e9
    return (f"HBM capacity {caps[0] * gb:.0f}-{caps[-1] * gb:.0f} GB x bandwidth "
            f"{bws[0] * gpu.hbm_TBps:g}-{bws[-1] * gpu.hbm_TBps:g} TB/s")


def _lbnl_weak() -> str:
    from planner.specs.loaders import load_gpu

    bw = load_gpu("b200").hbm_TBps
    gb = load_gpu("b200").hbm_gib * 2**30 / 1e9
    base = lbnl_point(1, 1)
    t0 = base["iteration_time_s"]
    small = [0.5, 0.75, 1, 2, 3]  # 90-540 GB
    shape = {(r["tp"], r["pp"], r["dp"], r["microbatch_size"]) for c in small
             for b in (0.125, 0.25, 0.5, 1, 2) for r in [lbnl_point(c, b)]}
    slow = [lbnl_point(c, 0.0625) for c in small]
    ts = sorted(r["iteration_time_s"] for r in slow)
    shorter = all(a["pp"] >= b["pp"] for a, b in zip(slow, slow[1:]))
    near = max(abs(lbnl_point(c, b)["iteration_time_s"] / t0 - 1) for c in small
               for b in (0.25, 0.5, 1, 2))
    same = "identical optimum" if len(shape) == 1 else "the optimum changes"
    at1 = lbnl_point(1, 0.125)["iteration_time_s"]
    return (f"{small[0] * gb:.0f}-{small[-1] * gb:.0f} GB: {same} from {0.125 * bw:g} TB/s up "
            f"({t0:.2f} s at {bw:g} TB/s); {0.0625 * bw:g} TB/s "
            f"+{100 * (ts[0] / t0 - 1):.0f}-{100 * (ts[-1] / t0 - 1):.0f} % ({ts[0]:.2f}-"
            f"{ts[-1]:.2f} s{', a shorter pipeline with more capacity' if shorter else ''}), "
            f"{0.125 * bw:g} TB/s {100 * (at1 / t0 - 1):+.0f} %, {0.25 * bw:g}-{2 * bw:g} TB/s "
            f"within {math.ceil(100 * near)} %")


def _lbnl_lpddr() -> str:
    from planner.specs.loaders import load_gpu

    g = load_gpu("b200")
    gb = 5.5 * g.hbm_gib * 2**30 / 1e9
    t0 = lbnl_point(1, 1)["iteration_time_s"]
    a, b = lbnl_point(5.5, 0.125)["iteration_time_s"], lbnl_point(5.5, 0.0625)["iteration_time_s"]
    return (f"{gb:.0f} GB at {0.125 * g.hbm_TBps:g} TB/s: {a:.2f} s (B200: {t0:.2f} s); at "
            f"{0.0625 * g.hbm_TBps:g} TB/s {b:.2f} s ({rel_pct(b, t0, 0).replace('%', ' %')})")


def _lbnl_capacity() -> str:
    from planner.specs.loaders import load_gpu

    g = load_gpu("b200")
    t0 = lbnl_point(1, 1)["iteration_time_s"]
    same = all(lbnl_point(c, 1)["iteration_time_s"] == t0 for c in (0.5, 0.75, 2, 3))
    big = lbnl_point(5.5, 1)
    gain = 100 * (1 - big["iteration_time_s"] / t0)
    return (f"at {g.hbm_TBps:g} TB/s, up to 3x B200's capacity "
            f"{'nothing changes' if same else 'the optimum moves'}; 5.5x "
            f"({5.5 * g.hbm_gib * 2**30 / 1e9:.0f} GB) lets the optimum drop the pipeline (PP "
            f"{big['pp']}, DP {big['dp']}, {big['memory_per_gpu_gib']:.0f} GiB per GPU) and its "
            f"bubble: {big['iteration_time_s']:.2f} s, {gain:.0f} % faster")


def _lbnl_optimum() -> str:
    r = lbnl_point(1, 1)
    t = r["iteration_time_s"]
    return (f"| {plan_of(r)}, {t:.2f} s, {r['memory_per_gpu_gib']:.0f} GiB | plan shape agrees "
            f"(TP fills the NVS domain, deep PP); ours {t / 5.33:.2f}x LBNL's time: the catalog "
            f"B200 runs its GEMMs at the published cuBLASLt speeds of its kernel table times the "
            f"fitted kernel_fraction, LBNL at 2.5 PFLOP/s x 0.8, and ours adds the straggler wait "
            f"({100 * r['t_straggler_s'] / t:.1f} %) |")


def shares(r: dict) -> dict[str, float]:
    t = r["iteration_time_s"]
    return {k: 100 * r[f"t_{k}_s"] / t for k in ("compute", "bubble", "network", "straggler",
                                                 "memory")}


def _lbnl_breakdown() -> str:
    s = shares(lbnl_point(1, 1))
    return (f"compute {s['compute']:.0f} %, bubble {s['bubble']:.0f} %, network "
            f"{s['network']:.1f} %, straggler {s['straggler']:.1f} %, HBM {s['memory']:.1f} %")


def madmax_point(resource: str, factor: int) -> dict:
    return next(r for r in sweep_rows(MADMAX_SWEEP)
                if r["factor"] == factor and (r["resource"] == resource or factor == 1))


def madmax_speedup(resource: str, factor: int) -> float:
    return (madmax_point(resource, 1)["iteration_time_s"]
            / madmax_point(resource, factor)["iteration_time_s"])


def _madmax_baseline() -> str:
    r = madmax_point("compute", 1)
    mbs = f" microbatch {r['microbatch_size']}" if r["microbatch_size"] > 1 else ""
    return f"the baseline is {plan_of(r)}{mbs} at {r['iteration_time_s']:.2f} s"


MADMAX_RESOURCES = (("compute", "compute"), ("memory", "memory"), ("intra-node", "NVLink"),
                    ("inter-node", "InfiniBand"))


def _madmax_scaling() -> str:
    return "; ".join(f"{label} " + " / ".join(f"{madmax_speedup(res, f):.2f}" for f in (2, 4, 10))
                     for res, label in MADMAX_RESOURCES)


def _madmax_sublinear() -> str:
    best = max(MADMAX_RESOURCES, key=lambda x: madmax_speedup(x[0], 10))
    return f"{madmax_speedup(best[0], 10):.2f}x at best ({best[1]})"


def _madmax_joint() -> str:
    r = madmax_point("all", 10)
    mbs = f" with microbatch {r['microbatch_size']}" if r["microbatch_size"] > 1 else ""
    return (" / ".join(f"{madmax_speedup('all', f):.2f}" for f in (2, 4, 10))
            + f" | agrees (slightly: at 10x the plan moves to {plan_of(r)}{mbs})")


def _madmax_memory_gain() -> str:
    return f"{madmax_speedup('memory', 10):.2f}x at 10x memory"


def _madmax_bottleneck() -> str:
    rows = sweep_rows(MADMAX_SWEEP)
    kinds = {r["bottleneck"] for r in rows}
    s = shares(madmax_point("compute", 10))
    first = ("The bottleneck at every point is compute" if kinds == {"compute"} else
             "The bottleneck is " + ", ".join(sorted(kinds)))
    return (f"{first} (largest share of the optimum's iteration); at 10x compute it falls to "
            f"{s['compute']:.0f} % of the iteration, with network {s['network']:.0f} %, HBM "
            f"{s['memory']:.0f} % and bubble {s['bubble']:.0f} %")


THEMIS_TEST = "test_themis_balances_multi_dimensional_allreduce_like_wafer_scale"


def _seed(text: Callable[[], str], command: str) -> Figure:
    return Figure(SEEDS_DOC, command, text)


SEEDS_FIGURES: tuple[Figure, ...] = (
    _seed(_madmax_gemm, "tests/test_seeds_madmax.py::test_gemm_time_matches_madmax"),
    *(_seed(_cell((lambda a: lambda: _astra_row(a))(a)), "planner collective -t "
            f"'{ASTRA_SHAPE.format(a, 4)}' -b 1000,200,100,50 --bandwidth-unit GiB/s "
            "--latencies 0.02 --op allreduce --size 1GiB") for a in (2, 4, 8, 16)),
    _seed(lambda: f"| {astra_us(2, 16) / astra_us(8):.2f}× | 1% |",
          "tests/test_networks.py::test_table3_wafer_scale_speedup"),
    *(_seed(_cell(f), f"tests/test_networks.py::{THEMIS_TEST}")
      for f in (_astra_wafer, _astra_themis, _astra_equal_bw, _astra_conv4d)),
    _seed(_cell(_astra_dlrm_row), "test_astra_sim_dlrm_conventional_with_themis_near_wafer_scale"),
    _seed(_astra_dlrm_a2a, "test_astra_sim_dlrm_conventional_with_themis_near_wafer_scale"),
    _seed(_astra_units, "planner collective -t 'Ring(2)_FC(8)_Ring(8)_Switch(4)' -b "
          "1000,200,100,50 --bandwidth-unit GB/s --latencies 0.02 --op allreduce --size 1GiB"),
    _seed(_cell(_ramp_rs), "tests/test_ramp.py::test_ramp_collective_speedups_over_fat_tree"),
    _seed(_cell(_ramp_a2a), "tests/test_ramp.py::test_ramp_collective_speedups_over_fat_tree"),
    _seed(_cell(_ramp_energy), "tests/test_ramp.py::test_ramp_network_energy_and_cost_ratios"),
    _seed(_cell(_ramp_cost), "tests/test_ramp.py::test_ramp_network_energy_and_cost_ratios"),
    _seed(_cell(_ramp_megatron), "tests/test_ramp.py::test_ramp_megatron_speedups_trend"),
    _seed(_ramp_gaps, "tests/test_ramp.py::test_ramp_collective_speedups_over_fat_tree"),
    _seed(_ramp_gaps_a2a, "tests/test_ramp.py (collective speed-ups, Megatron trend)"),
    _seed(_ramp_penalty, "tests/test_ramp.py::test_ramp_collective_speedups_over_fat_tree"),
    _seed(_cell(_lbnl_175b), "tests/test_seeds_lbnl.py::test_gpt3_175b_512_a100_nvs4_optimum"),
    _seed(_cell(_lbnl_nvs),
          "tests/test_seeds_lbnl.py::test_large_nvs_domains_pay_off_at_pretraining_scale"),
    _seed(_cell(_lbnl_tp8), "tests/test_seeds_lbnl.py::test_tp8_fills_the_nvs8_domain_at_scale"),
    _seed(_amped_h100, "hardware_catalog/gpus/h100-sxm.yaml (peak_tflops.fp8) against AMPeD "
          "Table IV"),
    *(_seed(_cell(_amped_row(name)), "tests/test_seeds_amped.py::"
            "test_table2_tflops_within_12_percent") for name in ("145b", "310b", "530b", "1t")),
    *(_seed(_cell(_amped_case1(w)), "tests/test_seeds_amped.py (Case Study I)")
      for w in ("best", "pp", "tp", "dp")),
    *(_seed(_cell(_amped_case3(w)), "tests/test_seeds_amped.py::test_case3_progression")
      for w in ("opt1", "substrate", "offchip", "overall")),
    _seed(_amped_tp_inter, "tests/test_seeds_amped.py::test_case1_tp_intra_dp_inter_is_best"),
    _seed(_amped_table2_gap, "tests/test_seeds_amped.py::test_table2_tflops_within_12_percent "
          "(and its rows with attention=flash)"),
    *(_seed(_madmax_row(s), "tests/test_seeds_madmax.py (stream model and default)")
      for s in ("DDP", "(TP,DDP)", "(DDP,TP)")),
    _seed(_madmax_fsdp,
          "tests/test_seeds_madmax.py::test_strategy_ratios_with_madmax_stream_model"),
    _seed(_madmax_gemm_row, "tests/test_seeds_madmax.py::test_gemm_time_matches_madmax"),
    _seed(_madmax_memory, "tests/test_seeds_madmax.py::test_memory_validity_labels"),
    _seed(_madmax_prefetch,
          "tests/test_seeds_madmax.py::test_optimized_prefetch_shrinks_the_gains"),
    _seed(_madmax_adam, "tests/test_seeds_madmax.py::test_default_model_follows_madmax_ranking"),
    _seed(_madmax_tp256, "tests/test_seeds_madmax.py::test_order_matters_tp_inside_the_node"),
    _seed(_cell(_dlrm_table_i("dlrm-a", 1.2e6)), "tests/test_dlrm.py::test_madmax_table_i"),
    _seed(_cell(_dlrm_table_i("dlrm-b", 3.4e6)), "tests/test_dlrm.py::test_madmax_table_i"),
    _seed(_cell(_dlrm_bound),
          "tests/test_dlrm.py::test_dlrm_a_is_network_bound_and_b_lookup_bound"),
    _seed(_cell(_dlrm_fast),
          "tests/test_dlrm.py::test_faster_network_speeds_up_network_bound_dlrm_a_most"),
    _seed(_cell(_dlrm_ramp), "tests/test_dlrm.py::test_ramp_dlrm_speedup_over_fat_tree"),
    _seed(_lbnl_grid, f"planner sweep {LBNL_SWEEP}"),
    _seed(_cell(_lbnl_weak), f"planner sweep {LBNL_SWEEP}"),
    _seed(_cell(_lbnl_lpddr), f"planner sweep {LBNL_SWEEP}"),
    _seed(_cell(_lbnl_capacity), f"planner sweep {LBNL_SWEEP}"),
    _seed(_lbnl_optimum, f"planner sweep {LBNL_SWEEP}"),
    _seed(_cell(_lbnl_breakdown), f"planner sweep {LBNL_SWEEP}"),
    _seed(_madmax_baseline, f"planner sweep {MADMAX_SWEEP}"),
    _seed(_cell(_madmax_scaling), f"planner sweep {MADMAX_SWEEP}"),
    _seed(lambda: f"| {_madmax_sublinear()}", f"planner sweep {MADMAX_SWEEP}"),
    _seed(_madmax_joint, f"planner sweep {MADMAX_SWEEP}"),
    _seed(_cell(_madmax_memory_gain), f"planner sweep {MADMAX_SWEEP}"),
    _seed(_madmax_bottleneck, f"planner sweep {MADMAX_SWEEP}"),
)


# ---- docs/dlrm.md (issue 37, item 6): the DLRM plans' figures ---------------------------
#: MAD-Max Table I (Hsia et al., ISCA 2024): measured samples/s on 128 A100 40GB (ZionEX),
#: and issue 16's target (within 10 %); tests/test_dlrm.py::TABLE_I holds the same values
MADMAX_TABLE_I = (("dlrm-a", "DLRM-A", 1.2e6), ("dlrm-b", "DLRM-B", 3.4e6))
MADMAX_TARGET = 0.10


def minus(text: str) -> str:
    """docs/dlrm.md's signs: a typographic minus."""
    return text.replace("-", "−")


def dpct(x: float) -> str:
    """A signed fraction as docs/dlrm.md prints it: ``−15.9%``."""
    return minus(f"{100 * x:+.1f}%")


@lru_cache(maxsize=None)
def dlrm_doc_solved(model: str, cluster: str, gpus: int | None = None) -> Any:
    """``planner solve -m MODEL -c CLUSTER [--gpus N]`` for a DLRM (``solve_sharding``, the
    function the CLI calls), proven optimal, once per process."""
    from formulations.dlrm.search import solve_sharding
    from planner.specs.loaders import load_cluster, load_model

    s = solve_sharding(load_model(model), load_cluster(cluster, gpus), "cpsat", 60)
    if s.status != "optimal":
        raise RuntimeError(f"solve_sharding({model!r}, {cluster!r}) ended {s.status!r}, not "
                           "proven optimal: the figures quoting it cannot be checked")
    return s


@lru_cache(maxsize=None)
def dlrm_madmax(model: str) -> dict[str, Any]:
    """One MAD-Max seed on zionex-128: its spec, the optimum's plan and estimate, the dense
    all-reduce that floors the backward lookups, and per rank the tables and lookups (the
    seeds are one table entry with copies, table-wise)."""
    from planner.costmodel.dlrm.model import dense_cost, links
    from planner.specs.loaders import load_cluster, load_model

    m, c = load_model(model), load_cluster("zionex-128")
    s = dlrm_doc_solved(model, "zionex-128")
    per = max(n for t in s.plan.tables for n in t.ranks.values())
    return {"m": m, "c": c, "plan": s.plan, "e": s.estimate, "ar_s": _pieces(model, False)[3],
            "dense": dense_cost(m, c), "a2a_s_per_B": links(m, c).a2a[0], "tables_per_rank": per,
            "lookups_per_rank": per * m.global_batch_size * m.tables[0].pooling}


def _line_rate(c: Any) -> Any:
    """The cluster with its inter-node network at line rate (efficiency 1)."""
    return c.model_copy(update={"topology": [c.topology[0], c.topology[1].model_copy(
        update={"efficiency": 1.0})]})


@lru_cache(maxsize=None)
def _pieces(model: str, line_rate: bool) -> tuple[float, float, float, float, float]:
    """The optimum's iteration in the parts the lookup rate scales and those it does not:
    (distribution + dense middle, forward lookups, the slowest rank's backward lookups,
    the dense all-reduce that floors them, the optimizer step), on zionex-128 or with its
    RoCE at line rate."""
    from planner.costmodel.dlrm.evaluate import evaluate_dlrm, phase_floors_s, plan_loads
    from planner.specs.loaders import load_cluster, load_model

    m, c = load_model(model), load_cluster("zionex-128")
    c = _line_rate(c) if line_rate else c
    plan = dlrm_doc_solved(model, "zionex-128").plan
    e, loads = evaluate_dlrm(m, c, plan), plan_loads(m, c, plan)
    ph = e.phases_s
    ar_s = phase_floors_s(m, c, loads.recv_bytes, loads.allreduce_bytes)[1]
    return (ph["dist_fwd"] + ph["dense_middle"] + ph["dist_bwd"], ph["lookup_fwd"],
            max(e.per_rank["lookup_bwd_s"]), ar_s, ph["optimizer"])


def lookup_time(model: str, f: float, line_rate: bool = False, hide_optimizer: bool = False,
                id_bytes: int = 0) -> float:
    """The iteration time of the optimum's plan (held fixed) with the lookups at ``f`` of
    HBM bandwidth (a lookup phase is bytes / (HBM bandwidth x f): it scales as 1/f, the
    backward one floored by the dense all-reduce), optionally with the RoCE at line rate,
    the optimizer step hidden, or the ids' all-to-all (``id_bytes`` per id) added, not
    pipelined."""
    rest, fwd, bwd, ar_s, opt = _pieces(model, line_rate)
    f0 = dlrm_madmax(model)["c"].gpu.efficiency.embedding_lookup_fraction
    ids = id_bytes * dlrm_madmax(model)["lookups_per_rank"] * dlrm_madmax(model)["a2a_s_per_B"]
    return (rest + (0.0 if hide_optimizer else opt) + ids + fwd * f0 / f
            + max(bwd * f0 / f, ar_s))


def _error(model: str, t: float) -> float:
    measured = next(x for n, _, x in MADMAX_TABLE_I if n == model)
    return dlrm_madmax(model)["m"].global_batch_size / t / measured - 1


def _solve_f(g: Callable[[float], float]) -> float:
    """Where the increasing function ``g`` of the lookup fraction crosses 0 (bisection on
    log f between 0.01 and 100); infinity where no lookup rate gets there."""
    lo, hi = 0.01, 100.0
    if g(hi) < 0:
        return float("inf")
    for _ in range(60):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if g(mid) < 0 else (lo, mid)
    return (lo * hi) ** 0.5


@lru_cache(maxsize=None)
def needs(**kw: Any) -> tuple[float, float, float, float, float]:
    """A mechanism (``lookup_time``'s options) against Table I: the lookup fraction DLRM-A
    needs to come within the target (error ≥ −10 %), the one DLRM-B needs (≤ +10 %), and
    the fraction that makes their errors equal and opposite, with those two errors."""
    def err(n: str, f: float) -> float:
        return _error(n, lookup_time(n, f, **kw))
    a = _solve_f(lambda f: err("dlrm-a", f) + MADMAX_TARGET)
    b = _solve_f(lambda f: err("dlrm-b", f) - MADMAX_TARGET)
    both = _solve_f(lambda f: err("dlrm-a", f) + err("dlrm-b", f))
    return a, b, both, err("dlrm-a", both), err("dlrm-b", both)


def needs_f(**kw: Any) -> tuple[str, str, str]:
    """``needs`` as the mechanism table's three cells."""
    a, b, both, ea, eb = needs(**kw)
    return ("none" if a == float("inf") else f"≥ {a:.3f}", f"≤ {b:.3f}",
            f"{both:.3f}: {dpct(ea)}, {dpct(eb)}")


def _ms(x: float, sign: bool = False) -> str:
    return minus(f"{1e3 * x:+.1f} ms" if sign else f"{1e3 * x:.1f} ms")


def _dlrm_madmax_row(model: str) -> Callable[[], str]:
    """docs/dlrm.md's Table I row: the optimum's samples/s, iteration and error, and its plan."""
    def text() -> str:
        _, label, measured = next(r for r in MADMAX_TABLE_I if r[0] == model)
        s = dlrm_madmax(model)
        e, p = s["e"], s["plan"].tables
        kinds = {t.sharding_type for t in p}
        per = {n for t in p for n in t.ranks.values()}
        plan = (f"{sum(t.copies for t in p)} tables {'/'.join(sorted(kinds)).replace('_', '-')}"
                + (f", {per.pop()} per rank" if len(per) == 1 else ""))
        return (f"| {label} | {measured / 1e6:.1f} MQPS | {e.samples_per_s / 1e6:.3f} MQPS "
                f"({1e3 * e.iteration_time_s:.2f} ms) | {dpct(_error(model, e.iteration_time_s))} "
                f"| {plan} |")
    return text


def _madmax_phases() -> str:
    def ph(model: str) -> str:
        return " + ".join(f"{1e3 * v:.2f}" for v in dlrm_madmax(model)["e"].phases_s.values())
    return (f"Today A = {ph('dlrm-a')} ms (lookups fwd, distribution, dense middle, "
            f"distribution, lookups bwd floored by the {1e3 * dlrm_madmax('dlrm-a')['ar_s']:.2f} ms "
            f"dense all-reduce, optimizer), B = {ph('dlrm-b')} ms.")


def _madmax_targets() -> str:
    def t(model: str, sign: int) -> tuple[float, float]:
        measured = next(x for n, _, x in MADMAX_TABLE_I if n == model)
        rate = measured * (1 + sign * MADMAX_TARGET)
        return 1e3 * dlrm_madmax(model)["m"].global_batch_size / rate, rate / 1e6
    (ta, ra), (tb, rb) = t("dlrm-a", -1), t("dlrm-b", 1)
    return (f"Targets: DLRM-A ≤ {ta:.2f} ms per 64K batch (≥ {ra:.2f} MQPS), DLRM-B ≥ "
            f"{tb:.2f} ms per 256K (≤ {rb:.2f} MQPS).")


def _madmax_a2a() -> str:
    """DLRM-A's pooled all-to-all per rank and pass, at line rate and as the model charges it."""
    d = dlrm_madmax("dlrm-a")
    m, c, e = d["m"], d["c"], d["e"]
    t = m.tables[0]
    per = d["tables_per_rank"]
    nbytes = per * m.global_batch_size * t.dim * 2
    net = c.topology[1]
    line = nbytes * (net.size - 1) / net.size / (net.bandwidth_GBps * 1e9)
    return (f"each rank sends {per} tables x {m.global_batch_size:,} x {t.dim} x 2 B = "
            f"{nbytes / 1e6:.0f} MB per pass, {net.size - 1}/{net.size} of it over a "
            f"{net.bandwidth_GBps:g} GB/s RoCE port: ≥ {1e3 * line:.1f} ms per pass at line "
            f"rate, {1e3 * e.phases_s['dist_fwd']:.1f} ms at {100 * net.efficiency:.0f}%")


def _madmax_needs_sentence() -> str:
    a, b, *_ = needs()
    return (f"DLRM-A needs its lookups at ≥ {a:.2f} of HBM bandwidth"
            f"{' (more than all of it)' if a > 1 else ''}; DLRM-B needs ≤ {b:.2f}")


def _serialized() -> str:
    """DLRM-A's phases run one after the other: every lookup, GEMM and collective."""
    d = dlrm_madmax("dlrm-a")
    e, dn = d["e"], d["dense"]
    total = (e.phases_s["lookup_fwd"] + max(e.per_rank["lookup_bwd_s"]) + dn.bottom_fwd_s
             + dn.bottom_bwd_s + dn.middle_s + dn.optimizer_s + max(e.per_rank["comm_fwd_s"])
             + max(e.per_rank["comm_bwd_s"]) + d["ar_s"])
    return f"serialized sum (compute + all communication) is {1e3 * total:.0f} ms"


def _madmax_batch() -> str:
    d = dlrm_madmax("dlrm-a")
    e, batch = d["e"], d["m"].global_batch_size
    opt = e.phases_s["optimizer"]
    t4 = e.iteration_time_s - opt + opt / 4  # the step once per 4 batches
    return (f"1.2 MQPS at {batch:,} per iteration is {1e3 * batch / 1.2e6:.1f} ms, and with a "
            f"4x larger batch the {1e3 * opt:.2f} ms optimizer step alone would amortize to A "
            f"{dpct(_error('dlrm-a', t4))}")


def _unique_share(model: str) -> float:
    """Expected distinct rows among one table's lookups of a batch, uniform random ids, as
    a share of its lookups: rows x (1 - exp(-lookups / rows)) / lookups."""
    import math

    m = dlrm_madmax(model)["m"]
    t = m.tables[0]
    n = m.global_batch_size * t.pooling
    return t.rows * (1 - math.exp(-n / t.rows)) / n


def _sector_bytes(row_bytes: int, sector: int = 32, align: int = 8) -> float:
    """Bytes of ``sector``-byte sectors a row read touches, averaged over the row's start
    at each ``align``-byte offset within a sector."""
    offs = range(0, sector, align)
    return sum(-(-(o + row_bytes) // sector) for o in offs) * sector / len(offs)


def mechanism_table() -> str:
    """docs/dlrm.md's table of mechanisms against MAD-Max Table I: each computed from the
    optimum's phases and the seeds' specs (the lookup fraction each row needs, ms each
    mechanism adds or removes)."""
    a, b = dlrm_madmax("dlrm-a"), dlrm_madmax("dlrm-b")
    ra, rb = (2 * x["m"].tables[0].dim for x in (a, b))
    sa, sb = _sector_bytes(ra), _sector_bytes(rb)
    ua, ub = _unique_share("dlrm-a"), _unique_share("dlrm-b")
    la, lb = a["lookups_per_rank"], b["lookups_per_rank"]
    ida, idb = la * 8, lb * 8  # int64 ids
    ta, tb = ida * a["a2a_s_per_B"], idb * b["a2a_s_per_B"]
    idle_a = a["e"].iteration_time_s - a["e"].phases_s["dist_fwd"] - a["e"].phases_s["dist_bwd"]
    idle_b = b["e"].iteration_time_s - b["e"].phases_s["dist_fwd"] - b["e"].phases_s["dist_bwd"]
    fits = "fit in" if ta <= idle_a and tb <= idle_b else "do not fit in"
    c = a["c"]
    net = c.topology[1]
    f0 = c.gpu.efficiency.embedding_lookup_fraction
    d_line = {n: lookup_time(n, f0, line_rate=True) - x["e"].iteration_time_s
              for n, x in (("dlrm-a", a), ("dlrm-b", b))}
    opt_a, opt_b = a["e"].phases_s["optimizer"], b["e"].phases_s["optimizer"]

    def cells(*x: str) -> str:
        return " | ".join(x)

    rows = [
        "| mechanism | source | effect | A needs f | B needs f | best common f: errors |",
        "|---|---|---|---|---|---|",
        f"| as modelled | — | — | {cells(*needs_f())} |",
        f"| row reads rounded to 32/64/128 B sectors | A100 memory sectors | rows {ra} B (A) "
        f"and {rb} B (B) both round to {-(-ra // 64) * 64} B (64 B) or {-(-ra // 128) * 128} B "
        f"(128 B); 32 B sectors of rows starting at 8 B offsets average {sa:.0f} B (A, "
        f"x{sa / ra:.2f}) vs {sb:.0f} B (B, x{sb / rb:.2f}) | — | — | penalizes A slightly "
        f"more: wrong way, {100 * (sa / ra / (sb / rb) - 1):.1f}% apart |",
        f"| backward deduplication of rows | FBGEMM exact row-wise Adagrad (sorts indices) | "
        f"unique rows per table and batch (uniform ids): A {100 * ua:.0f}% of lookups, B "
        f"{100 * ub:.0f}% | — | — | makes B faster: wrong way |",
        f"| per-bag / per-table kernel overhead | — | A has "
        f"{a['lookups_per_rank'] / a['m'].tables[0].pooling / 1e6:.1f}M bags and "
        f"{a['tables_per_rank']} tables per rank, B "
        f"{b['lookups_per_rank'] / b['m'].tables[0].pooling / 1e6:.2f}M and "
        f"{b['tables_per_rank']} | — | — | slows A more: wrong way |",
        f"| any per-lookup cost (index sort, L2 reuse, TLB) | — | proportional to lookups per "
        f"rank (A {la / 1e6:.1f}M, B {lb / 1e6:.1f}M), as the bytes already are, since the rows "
        f"are the same size | — | — | absorbed by f; cannot separate A from B |",
        f"| ids all-to-all, pipelined (TorchRec `TrainPipelineSparseDist`) | TorchRec | int64 "
        f"ids per rank and iteration at the pooled all-to-all's rate: A {ida / 1e6:.0f} MB "
        f"({_ms(ta)}), B {idb / 1e6:.0f} MB ({_ms(tb)}), {fits} the NIC's idle time (A "
        f"{_ms(idle_a)}, B {_ms(idle_b)}) | unchanged | unchanged | no change |",
        f"| ids all-to-all not pipelined, int32 ids | — | A {_ms(ta / 2, True)}, B "
        f"{_ms(tb / 2, True)} | {cells(*needs_f(id_bytes=4))} |",
        f"| dense optimizer step hidden (MAD-Max models none) | MAD-Max code: no optimizer "
        f"trace | A {minus(f'{-1e3 * opt_a:.2f} ms')}, B {minus(f'{-1e3 * opt_b:.2f} ms')} | "
        f"{cells(*needs_f(hide_optimizer=True))} |",
        f"| RoCE at line rate (efficiency 1.0, not {net.efficiency:g}) | — (nccl-tests reach "
        f"~22.5 of 25 GB/s) | A {_ms(d_line['dlrm-a'], True)}, B {_ms(d_line['dlrm-b'], True)} "
        f"| {cells(*needs_f(line_rate=True))} |",
        f"| the last two together | not defensible | | "
        f"{cells(*needs_f(line_rate=True, hide_optimizer=True))} |",
        "| fp16 (not quantized) pooled all-to-all | MAD-Max code: 2-byte embeddings and comms "
        "| already what we model; Table II's 22.61 / 13.19 MB are 4-byte elements, which would "
        "double both rows' lookups (A would need f > 1) | — | — | — |",
        "| ZionEX network per GPU | Table III: 25.6 Tbps / 128 = 200 Gb/s | as modelled "
        "(MAD-Max's code: 8 x 25e9 B/s ports, halved, x 0.56 = 7 GB/s per GPU, with a "
        "different payload) | — | — | — |",
    ]
    return "\n".join(rows)


#: bench_heldout_dlrm's rows: GPUs, model size, precision as it prints them
HELDOUT_DLRM_ROW = re.compile(r"^(?P<run>\d+ GPU, \d+ GB, \w+)\s+(?P<pub>[\d,]+)\s+"
                              r"(?P<opt>[\d,]+)\s+(?P<err>[-+\d.]+)%\s+(?P<nv>[\d,]+)\s+"
                              r"(?P<nverr>[-+\d.]+)%$", re.M)


@lru_cache(maxsize=1)
def _heldout_dlrm_out() -> str:
    """What ``python benchmarks/bench_heldout_dlrm.py`` prints, run in this process (its
    solves are seconds; a second interpreter would add its imports)."""
    import contextlib
    import io

    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_heldout_dlrm

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        bench_heldout_dlrm.main()
    return out.getvalue()


def heldout_dlrm_rows() -> list[dict[str, str]]:
    """The rows ``python benchmarks/bench_heldout_dlrm.py`` prints (run, published, optimum,
    error, NVIDIA's placement, error)."""
    rows = [m.groupdict() for m in HELDOUT_DLRM_ROW.finditer(_heldout_dlrm_out())]
    if not rows:
        raise RuntimeError("bench_heldout_dlrm.py prints no rows")
    return rows


def heldout_dlrm_table() -> str:
    lines = ["| run | published | optimum (ours) | error | NVIDIA's placement | error |",
             "|---|---|---|---|---|---|"]
    for r in heldout_dlrm_rows():
        gpus, size, prec = r["run"].split(", ")
        run = f"{gpus}, {size}, {prec.upper()}"
        lines.append(f"| {run} | {r['pub']} | {r['opt']} | {r['err']} % | {r['nv']} | "
                     f"{r['nverr']} % |")
    return "\n".join(lines)


def _heldout_dlrm_row(run: str) -> dict[str, float]:
    r = next(x for x in heldout_dlrm_rows() if x["run"] == run)
    return {k: float(r[k].replace(",", "")) for k in ("pub", "opt", "nv")}


def _heldout_dlrm_short() -> str:
    r, batch = _heldout_dlrm_row("8 GPU, 82 GB, tf32"), 65_536  # the benchmark's batch
    return (f"{1e3 * batch / r['nv']:.1f} ms predicted for NVIDIA's placement on 8 GPUs in "
            f"TF32 against {1e3 * batch / r['pub']:.1f} ms measured")


def _heldout_dlrm_gain() -> str:
    r = _heldout_dlrm_row("8 GPU, 82 GB, tf32")
    return (f"The 8-GPU optimum is also {100 * (r['opt'] / r['nv'] - 1):.0f} % faster (TF32) "
            "than NVIDIA's own placement")


def _madmax_within() -> str:
    import math

    worst = max(abs(_error(n, dlrm_madmax(n)["e"].iteration_time_s)) for n, _, _ in MADMAX_TABLE_I)
    return f"the model is within {math.ceil(100 * worst)} %"


def _criteo_row() -> str:
    s = dlrm_doc_solved("criteo-dlrm", "dgx-a100-superpod", 8)
    return f"| — | — | {1e3 * s.estimate.iteration_time_s:.2f} ms, proven optimal"


#: docs/dlrm.md's Scale table: benchmarks/bench_dlrm.py's random instances (tables, GPUs on
#: zionex-128, the row's command)
SCALE_ROWS = ((20, 16, "bench_dlrm.py --tables 20 --gpus 16"), (100, 128, "--tables 100"),
              (500, 128, "python benchmarks/bench_dlrm.py --time-limit 10"))


@lru_cache(maxsize=None)
def scale_bounds(tables: int, gpus: int) -> tuple[float, float, float]:
    """bench_dlrm.py's instance of ``tables`` random tables (seed 0) on ``gpus`` of
    zionex-128: the rank-aggregated LP bound, the work bound and TorchRec's greedy
    partitioner's iteration time (what the benchmark prints as lower_bound_ms where the LP
    is the best bound, and greedy_iteration_ms): deterministic, under a second."""
    if str(ROOT / "benchmarks") not in sys.path:  # bench_dlrm imports its folder's _timing
        sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_dlrm import greedy, model
    from formulations.dlrm.bound import lp_bound_s
    from formulations.dlrm.search import work_bound_s
    from planner.costmodel.dlrm.evaluate import evaluate_dlrm
    from planner.specs.loaders import load_cluster

    m, c = model(tables, 0), load_cluster("zionex-128", gpus)
    lp = lp_bound_s(m, c)
    if lp is None:
        raise RuntimeError(f"bench_dlrm's {tables} tables on {gpus} GPUs: the LP has no bound")
    return lp, work_bound_s(m, c), evaluate_dlrm(m, c, greedy(m, c)).iteration_time_s


def _scale_row(tables: int, gpus: int, cmd: str) -> Callable[[], str]:
    def text() -> str:
        lp, _, g = scale_bounds(tables, gpus)
        return f"(`{cmd}`) | {1e3 * lp:.3f} ms | {1e3 * g:.3f} ms |"
    return text


def _lp_prose() -> str:
    (lp5, w5, _), (lp1, w1, _) = scale_bounds(500, 128), scale_bounds(100, 128)
    return (f"It is {1e3 * lp5:.3f} ms at 500 tables (the work bound {1e3 * w5:.3f}), "
            f"{1e3 * lp1:.3f} ms at 100 tables (work bound {1e3 * w1:.3f}")


DLRM_DOC: tuple[Figure, ...] = (  # docs/dlrm.md: every command below runs in a few seconds
    *(Figure("docs/dlrm.md", f"planner solve -m {n} -c zionex-128", _dlrm_madmax_row(n))
      for n, _, _ in MADMAX_TABLE_I),
    Figure("docs/dlrm.md", "planner solve -m dlrm-a|dlrm-b -c zionex-128 (phases)",
           _madmax_phases),
    Figure("docs/dlrm.md", "MAD-Max Table I and the seeds' batches", _madmax_targets),
    Figure("docs/dlrm.md", "planner solve -m dlrm-a -c zionex-128 (dist_fwd)", _madmax_a2a),
    Figure("docs/dlrm.md", "planner solve -m dlrm-a|dlrm-b -c zionex-128, lookups rescaled",
           _madmax_needs_sentence),
    Figure("docs/dlrm.md", "planner solve -m dlrm-a -c zionex-128 (every phase serialized)",
           _serialized),
    Figure("docs/dlrm.md", "planner solve -m dlrm-a -c zionex-128 (optimizer)", _madmax_batch),
    Figure("docs/dlrm.md", "planner solve -m dlrm-a|dlrm-b -c zionex-128, mechanisms applied",
           mechanism_table, "dlrm mechanisms"),
    Figure("docs/dlrm.md", "planner solve -m dlrm-a|dlrm-b -c zionex-128", _madmax_within),
    Figure("docs/dlrm.md", "python benchmarks/bench_heldout_dlrm.py", heldout_dlrm_table,
           "dlrm heldout"),
    Figure("docs/dlrm.md", "python benchmarks/bench_heldout_dlrm.py", _heldout_dlrm_short),
    Figure("docs/dlrm.md", "python benchmarks/bench_heldout_dlrm.py", _heldout_dlrm_gain),
    Figure("docs/dlrm.md", "planner solve -m criteo-dlrm -c dgx-a100-superpod --gpus 8",
           _criteo_row),
    *(Figure("docs/dlrm.md", f"python benchmarks/bench_dlrm.py --tables {t} --gpus {g} "
             "(lower_bound_ms, greedy_iteration_ms)", _scale_row(t, g, cmd))
      for t, g, cmd in SCALE_ROWS),
    Figure("docs/dlrm.md", "formulations/dlrm/bound.py, work_bound_s on bench_dlrm's instances",
           _lp_prose),
    Figure("docs/dlrm.md", "formulations/dlrm/bound.py on bench_dlrm.py --tables 20 --gpus 16",
           lambda: f"(the LP above: {1e3 * scale_bounds(20, 16)[0]:.3f})"),
    Figure("docs/dlrm.md", "docs/dlrm.md's backward deduplication (uniform ids)",
           lambda: f"only ~{100 * _unique_share('dlrm-b'):.0f}% of DLRM-B's updates are "
                   "unique rows"),
)



# ---- docs/serving.md, docs/cost-model.md, docs/procure.md, docs/moe-long-context.md,
# ---- docs/mixed.md, docs/formats.md (issue 37, item 6: every figure accounted for)


def _band_level() -> str:
    """docs/formats.md: the coverage of the expected-error band (planner.validation.band)."""
    from planner.validation.band import LEVEL

    return f"({100 * LEVEL:.0f} %, from runs held out by source near this regime)"


def _similar_scale() -> str:
    """docs/formats.md: how far a published run's GPU count may be from the answer's to be
    similar (planner.validation.trust.similar_runs)."""
    from planner.validation.trust import SCALE_FACTOR

    return f"within {SCALE_FACTOR:g}x GPUs"


#: docs/mixed.md's worked example: Llama 3 70B on examples/mixed-h100-a100.yaml, and the
#: mixed plan ``python examples/solve_mixed.py`` returns (its whole search takes ~40 s, so
#: the check evaluates that plan and solves the H100 pool alone, as solve_mixed's part 1 does)
MIXED = ("llama3-70b", "examples/mixed-h100-a100.yaml")
MIXED_PLAN = {"plan": {"tp": 8, "pp": 2, "dp": 64, "microbatch_size": 1,
                       "global_batch_size": 512, "seq_len": 8192, "sequence_parallel": True,
                       "zero_stage": 1},
              "stages": [{"pool": "a100", "layers": 20}, {"pool": "h100", "layers": 60}]}


def _mixed() -> str:
    from planner import api
    from planner.orchestration.train import solve
    from planner.specs.loaders import load_model

    mc = api.load_mixed_cluster(MIXED[1])
    m = load_model(MIXED[0])
    e = api.evaluate_mixed(m, mc, MIXED_PLAN)
    pool = next(p for p in mc.pools if p.name == "h100")
    alone = solve(m, pool.cluster, objective="time")
    if alone.status != "optimal":
        raise RuntimeError(f"the h100 pool alone ended {alone.status!r}, not optimal")
    t0, t = alone.best.estimate.iteration_time_s, e.iteration_time_s
    a100, h100 = e.stages
    per_layer = (a100.stage_time_s / a100.layers) / (h100.stage_time_s / h100.layers)
    p = MIXED_PLAN["plan"]
    act = p["seq_len"] * m.hidden_size * 2 / p["tp"]
    j = mc.join
    return (f"cuts the iteration from {t0:.2f} s to {t:.2f} s ({100 * (1 - t / t0):.0f} %): the "
            f"A100 stage, about {per_layer:.0f}x slower per layer, takes a quarter of the "
            f"layers, and the two stages take {a100.stage_time_s * 1e3:.0f} and "
            f"{h100.stage_time_s * 1e3:.0f} ms per microbatch. Each stage sends its activations "
            f"({p['seq_len']:,} tokens x {m.hidden_size:,} x 2 B / tp {p['tp']} = "
            f"{act / 1e6:.1f} MB) over the {j.bandwidth_GBps:g} GB/s join at "
            f"{100 * j.efficiency:.0f} % efficiency, {a100.p2p_s / 2 * 1e3:.2f} ms each way")


@lru_cache(maxsize=None)
def serve_json(args: str) -> dict:
    """``planner serve ARGS --json`` as the CLI prints it (exit 0, or 1 when nothing is
    feasible: the JSON then says why)."""
    import json

    path = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
    run = subprocess.run([sys.executable, "-m", "planner", "serve", *args.split(), "--json"],
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": path},
                         capture_output=True, text=True)
    if run.returncode not in (0, 1):
        raise RuntimeError(f"planner serve {args} exited {run.returncode}: {run.stderr}")
    return json.loads(run.stdout)


#: docs/serving.md: issue 29's reproducer, and an SLO no layout reaches
ISSUE_29 = ("-m llama3-70b -c dgx-h100-superpod --gpus 4 --isl 467 --osl 256 --fix tp=4 "
            "--fix pp=1 --fix weight_dtype=bf16 --rate 2")
UNREACHABLE = "-m llama3-70b -c dgx-h100-superpod --isl 2048 --osl 256 --ttft-ms 500 " \
              "--tpot-ms 5 --rate 20"


def _issue_29() -> str:
    e = serve_json(ISSUE_29)["estimate"]
    return (f"{e['tpot_ms']:.2f} ms mean / {e['tpot_p99_ms']:.2f} ms P99 with "
            f"{e['decode_batch']:.1f} sequences in flight")


def _unreachable() -> str:
    d = serve_json(UNREACHABLE)
    return "\"; \"".join(d["reasons"])


def _sides(x: float, y: float, over: str, under: str) -> str:
    """Two relative errors (model / simulation - 1) in words."""
    if (x >= 0) == (y >= 0):
        return f"{pct(abs(x))} and {pct(abs(y))} {over if x >= 0 else under}"
    return (f"{pct(abs(x))} {over if x >= 0 else under} and {pct(abs(y))} "
            f"{over if y >= 0 else under}")


def _model_vs_sim() -> str:
    """docs/serving.md: the table's two plans, the model's P99s against the simulation's."""
    rel = {k: [served(x)["estimate"][f"{k}_p99_ms"] / served(x)["simulation"][f"{k}_p99_ms"]
               - 1 for x in ("", "--fix mode=aggregated")] for k in ("ttft", "tpot")}
    ttft = _sides(*rel["ttft"], "above the simulation", "under the simulation")
    return (f"The analytic TTFT P99s land {ttft}; the TPOT P99s "
            f"{_sides(*rel['tpot'], 'above', 'under')}")


def _more_seeds() -> str:
    """docs/serving.md: the aggregated example simulated with 60,000 requests, seeds 1-3."""
    from planner.specs.loaders import load_cluster, load_model
    from planner.specs.serve import ServePlan, ServeWorkload, load_engine
    from planner.validation.serve_sim import simulate

    d = served("--fix mode=aggregated")
    plan, model = ServePlan.model_validate(d["plan"]), d["estimate"]["tpot_p99_ms"]
    w = ServeWorkload(isl=2048, osl=256, rate_rps=20.0)
    p99 = [simulate(load_model("llama3-70b"), load_cluster("dgx-h100-superpod"), plan, w, 60000,
                    seed, engine=load_engine("trtllm")).tpot_p99_ms for seed in (1, 2, 3)]
    lo, hi = sorted((min(p99) / model - 1, max(p99) / model - 1), key=abs)
    side = "above" if min(p99) >= model else "under" if max(p99) <= model else "around"
    return (f"aggregated P99 TPOT is {min(p99):.1f}-{max(p99):.1f} ms, {100 * abs(lo):.0f}-"
            f"{100 * abs(hi):.0f} % {side} the model")


@lru_cache(maxsize=None)
def _light_heavy(rate: float) -> tuple[Any, Any]:
    """tests/test_serve_load.py's case: Llama 3 8B on one H100, concurrency 64, ISL 512,
    OSL 128, the v0.6.1 engine: the estimate and a 4,000-request simulation at ``rate``."""
    from planner.costmodel.serve.evaluate import evaluate_serve
    from planner.specs.loaders import load_cluster, load_model
    from planner.specs.serve import ServeEngine, ServePlan, ServeWorkload
    from planner.validation.serve_sim import simulate

    m, c = load_model("llama3-8b"), load_cluster("dgx-h100-superpod")
    plan = ServePlan(tp=1, concurrency=64, kv_dtype="fp8", prefill_chunk=2048)
    w = ServeWorkload(isl=512, osl=128, rate_rps=rate)
    return (evaluate_serve(m, c, plan, w, ServeEngine()),
            simulate(m, c, plan, w, 4000, engine=ServeEngine()))


def _light_heavy_tpot() -> str:
    light, heavy = _light_heavy(1.0)[0], _light_heavy(20.0)[0]
    return (f"{light.tpot_ms:.2f} ms at 1 request/s, {heavy.tpot_ms:.2f} ms at 20 of its "
            f"{heavy.capacity_rps:.0f} requests/s")


def _light_heavy_ttft() -> str:
    est, sim = _light_heavy(20.0)
    return f"({est.ttft_ms:.0f} ms against {sim.ttft_mean_ms:.0f} ms simulated at 20 requests/s"


@lru_cache(maxsize=1)
def _serving_report() -> dict:
    from planner.validation.serving import run_serving

    return run_serving().to_json()


#: docs/serving.md's names of the serving set's models
SERVING_MODELS = {"gptj-6b": "GPT-J 6B", "llama2-7b": "Llama 2 7B", "llama2-70b": "Llama 2 70B",
                  "falcon-180b": "Falcon 180B"}


def _serving_row(metric: str, label: str) -> Callable[[], str]:
    """A row of docs/serving.md's calibration table: rows, MAPE, the largest error and its
    row (``planner validate``'s serving set)."""
    def text() -> str:
        r = _serving_report()
        rows = [x for x in r["rows"] if x["metric"] == metric]
        worst = max(rows, key=lambda x: abs(x["error"]))
        where = (f"{worst['isl']}/{worst['osl']}" if metric == "output_tokens_per_s_per_gpu"
                 else f"{worst['isl']} tokens")
        return (f"| {label} | {len(rows)} | {pct(r['mape'][metric])} | "
                f"{pct(abs(worst['error']))} ({SERVING_MODELS[worst['model']]} TP{worst['tp']}, "
                f"{where}) |")
    return text


def _engine_defaults(part: str) -> Callable[[], str]:
    """docs/serving.md: ServeEngine's class defaults (the v0.6.1 fit)."""
    def text() -> str:
        from planner.specs.serve import ServeEngine

        e = ServeEngine()
        if part == "fit":
            return (f"(`kernel_fraction` {e.kernel_fraction:.2f}, in place of the training "
                    f"framework's 0.80), {e.request_overhead_ms:g} ms of host time per request "
                    f"before its first token and {e.collective_overhead_us:g} us per")
        if part == "aic":
            return (f"The {e.collective_overhead_us:g} us per collective fitted on TensorRT-LLM "
                    "v0.6.1")
        return f"TensorRT-LLM v0.6.1's fit, {e.collective_overhead_us:g} us per collective included"
    return text


@lru_cache(maxsize=None)
def _aic_rows(dtype: str, engine: str, act_quant: bool = True) -> tuple[list[dict], Any]:
    """``python benchmarks/bench_aiconfigurator.py --dtype DTYPE --engine ENGINE``'s rows
    and the module (its BOUND and summary), run in process; ``engine`` ``v0.6.1`` is the
    ServeEngine class defaults, ``act_quant=False`` the profile without its FP8 activation
    quantize launches."""
    import importlib.util

    from planner.specs.serve import ServeEngine, load_engine

    spec = importlib.util.spec_from_file_location(
        "bench_aiconfigurator", ROOT / "benchmarks" / "bench_aiconfigurator.py")
    bench_mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_mod)
    eng = ServeEngine() if engine == "v0.6.1" else load_engine(engine)
    if not act_quant:
        eng = eng.model_copy(update={"fp8_act_quant_kernels": 0})
    return bench_mod.rows(dtype, eng), bench_mod


def _within(rows: list[dict], bound: float) -> int:
    return sum(abs(r["ratio"] - 1) <= bound for r in rows)


def _aic(part: str) -> Callable[[], str]:
    """docs/serving.md, "Against aiconfigurator's database"."""
    def text() -> str:
        if part == "bf16":
            rows, mod = _aic_rows("bf16", "trtllm")
            return (f"{_within(rows, mod.BOUND)} of {len(rows)} rows are within "
                    f"{100 * mod.BOUND:.0f} %")
        if part == "v0.6.1":
            rows, mod = _aic_rows("bf16", "v0.6.1")
            worst = max(r["ratio"] for r in rows if r["phase"] == "decode")
            return (f"put these decode rows up to {worst:.0f}x slow ({_within(rows, mod.BOUND)} "
                    f"of {len(rows)} rows within {100 * mod.BOUND:.0f} %)")
        rows, mod = _aic_rows("fp8", "trtllm", part == "fp8")
        g = [x["geomean"] for x in mod.summary(rows)]
        if part == "fp8":
            return (f"{_within(rows, mod.BOUND)} of {len(rows)} within {100 * mod.BOUND:.0f} %, "
                    f"geomeans {min(g):.2f}-{max(g):.2f}")
        off = [r for r in rows if abs(r["ratio"] - 1) > mod.BOUND]
        rest = "all the others too fast" if all(r["ratio"] < 1 for r in off) else \
            "the others off both ways"
        return (f"without them {_within(rows, mod.BOUND)} rows were within "
                f"{100 * mod.BOUND:.0f} %, {rest} (geomeans {min(g):.2f}-{max(g):.2f})")
    return text


def _buy_b200_running() -> str:
    """docs/procure.md Sec. 10: three bought B200 serving, per day: their facility power at
    full load (planner.costmodel.energy.facility_power_w) times the pricing file's
    electricity price."""
    from planner.costmodel.energy import facility_power_w, network_power_w_per_gpu
    from planner.specs.loaders import load_cluster
    from planner.specs.pricing import load_pricing

    c, n = load_cluster("dgx-b200-superpod"), 3
    node = c.topology[0].size
    kwh = load_pricing().electricity_usd_per_kwh
    w = n * c.pue * (c.gpu.tdp_w + c.node_power_w / node + network_power_w_per_gpu(c))
    if abs(w - facility_power_w(c, n * node) / node) > 1e-6:
        raise RuntimeError("facility_power_w is no longer the sum the sentence writes out")
    return (f"{n} x {c.pue:g} x ({c.gpu.tdp_w:,.0f} + {c.node_power_w:,.0f} / {node} + "
            f"{network_power_w_per_gpu(c):.0f}) W x 24 h x ${kwh:.3f}/kWh = "
            f"${w * 24 / 1000 * kwh:.2f}/day")

def _grid_mfu() -> str:
    """docs/procure.md: why the default grid leaves 3 x 2^k counts out (planner.solve, the
    function procure's solves go through)."""
    odd = solve_result("llama3-405b", "dgx-h100-superpod", 12288).best.estimate.mfu
    even = solve_result("llama3-405b", "dgx-h100-superpod", 8192).best.estimate.mfu
    return f"12,288 H100 reach {pct(odd)} MFU against {pct(even)} on 8,192"


def _node_power() -> str:
    from planner.specs.loaders import load_cluster

    w = load_cluster("dgx-h100-superpod").node_power_w
    return f"(`node_power_w`, e.g. ~{w / 1000:g} kW of the DGX H100's"


RAMP_TEMPLATES = ("ramp-a100", "examples/ramp-baseline-fat-tree.yaml")


def _ramp_power() -> str:
    from planner.specs.loaders import load_cluster

    ramp, tree = (load_cluster(n) for n in RAMP_TEMPLATES)
    if ramp.node_power_w != tree.node_power_w:
        raise RuntimeError("the RAMP templates' node power differs: the sentence says one")
    return f"({ramp.node_power_w / 1000:g} kW non-GPU power,"


def _ramp_templates() -> str:
    """docs/procure.md Sec. 8: the two templates' non-GPU power and their networks' price,
    energy and capacity per GPU against each other (planner.costmodel.energy)."""
    from planner.costmodel.energy import network_capex_usd_per_gpu, network_power_w_per_gpu
    from planner.specs.loaders import load_cluster

    ramp, tree = (load_cluster(n) for n in RAMP_TEMPLATES)

    def per_gbps(c: Any, field: str) -> float:
        return sum(getattr(lv, field) for lv in c.topology)

    cap = {c.name: network_capex_usd_per_gpu(c) / per_gbps(c, "cost_usd_per_Gbps")
           for c in (ramp, tree)}
    usd = per_gbps(tree, "cost_usd_per_Gbps") / per_gbps(ramp, "cost_usd_per_Gbps")
    pj = per_gbps(tree, "energy_pj_per_bit") / per_gbps(ramp, "energy_pj_per_bit")
    return (f"Per Gb/s RAMP is {usd:.1f}x cheaper and {pj:.0f}x "
            f"more frugal, but it gives each GPU {cap[ramp.name] / cap[tree.name]:.0f}x the fat "
            f"tree's off-node capacity, so per GPU its network costs "
            f"{network_capex_usd_per_gpu(ramp) / network_capex_usd_per_gpu(tree):.0f}x more and "
            f"draws {network_power_w_per_gpu(ramp) / network_power_w_per_gpu(tree):.1f}x the power")


def _site_power() -> str:
    """docs/procure.md Sec. 9: the peak facility power of 2,048 H100 in the DGX H100
    SuperPOD, term by term (planner.costmodel.energy.facility_power_w)."""
    from planner.costmodel.energy import facility_power_w, network_power_w_per_gpu
    from planner.specs.loaders import load_cluster

    n = 2048
    c = load_cluster("dgx-h100-superpod", n)
    nodes = n // c.topology[0].size
    return (f"{c.pue:g} x ({n:,} x {c.gpu.tdp_w:,.0f} + {nodes:,} x {c.node_power_w:,.0f} + "
            f"{n:,} x {network_power_w_per_gpu(c):,.0f}) W = {facility_power_w(c, n) / 1e6:.2f} MW")


def _constant(fmt: str) -> Callable[[], str]:
    """A sentence of docs/cost-model.md that states a constant of planner/costmodel/constants.py
    (``fmt`` names it in braces)."""
    def text() -> str:
        from planner.costmodel import constants

        return fmt.format(**{k: getattr(constants, k) for k in dir(constants) if k.isupper()})
    return text


def _compiled_titan() -> str:
    b = bench("bench_heldout_torchtitan")
    fused = b["A100 FSDP2, fused elementwise"]["mape"]
    return f"A100 runs before torch.compile come within {pct(fused)} with it"


@lru_cache(maxsize=1)
def _recipe_memory() -> Any:
    """tests/test_recipe_memory.py, loaded: its recipes and their set-up (each recipe costed
    as its framework runs it), so the figures are the ones the tests check."""
    import importlib.util

    if str(ROOT / "tests") not in sys.path:  # its conftest's helpers; after the checkout's
        sys.path.append(str(ROOT / "tests"))
    spec = importlib.util.spec_from_file_location("test_recipe_memory",
                                                  ROOT / "tests" / "test_recipe_memory.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _recipe(name: str, **update: Any) -> tuple[Any, Any, dict]:
    """The estimate of the named recipe (with ``update`` applied to its plan) and its row."""
    from planner.costmodel.train.evaluator import evaluate

    mod = _recipe_memory()
    row = next(r for r in mod.RECIPES if r["name"] == name)
    model, cluster, plan = mod._setup(row)
    return evaluate(model, cluster, plan.model_copy(update=update)), cluster, row


def _gib(x: float) -> str:
    return f"{x / 2**30:.1f}"


def _fp32_gradients() -> str:
    h100 = "mbridge-h100-llama31-405b-512-bf16"
    gb200 = "mbridge-gb200-llama31-405b-128-bf16"
    (a, ca, _), (b, cb, _) = (_recipe(n, grad_reduce_dtype="fp32") for n in (h100, gb200))
    a0, b0 = _recipe(h100)[0], _recipe(gb200)[0]
    return (f"needs {_gib(a.memory_per_gpu_bytes)} GiB of {ca.gpu.hbm_gib:g} and on 128 GB200 "
            f"(TP4 PP8 CP2 VP8) {_gib(b.memory_per_gpu_bytes)} of {cb.gpu.hbm_gib:g}; as "
            f"published, {_gib(a0.memory_per_gpu_bytes)} and {_gib(b0.memory_per_gpu_bytes)}")


def _nemotron_340b() -> str:
    """tests/test_recipe_memory.py::test_nemotron4_340b_fits_with_its_recipes_optimizer."""
    from planner.validation.corpus import runs_from

    run = next(r for r in runs_from("corpus/dgxc-nemotron4.yaml")
               if r.name == "dgxc2411-h100-nemotron4-340b-bf16-128")
    est = run.estimate()
    fp32 = run.estimate(plan=run.plan.model_copy(update={"optimizer_dtype": "fp32"}))
    return (f"{_gib(fp32.memory_per_gpu_bytes)} GiB of {est.hbm_capacity_bytes / 2**30:g}, as "
            f"configured {_gib(est.memory_per_gpu_bytes)}")


def _nemo_405b_576() -> str:
    e = _recipe("nemo-h100-llama31-405b-576-bf16")[0]
    return f"PP9 VP2 CP4, 256 microbatches) needs {_gib(e.memory_per_gpu_bytes)} GiB"


def _titan_loss() -> str:
    e, _, row = _recipe("torchtitan-h100-96gb-llama31-8b-8-32k")
    return (f"the model says {_gib(e.memory_per_gpu_bytes)} GiB against "
            f"{row['measured_peak_gib']:g} GiB measured")


def _mesh() -> str:
    """docs/cost-model.md: what a TP group of k GPUs of an MI300X node moves (the links among
    its members, before the level's efficiency)."""
    from planner.specs.loaders import load_cluster

    lv = load_cluster("mi300x-cluster").topology[0]
    return ", ".join(f"TP{k} {min(lv.bandwidth_GBps, (k - 1) * lv.link_GBps):.0f} GB/s"
                     for k in (4, 8))


def _mesh_all_reduce() -> str:
    """docs/cost-model.md: a 1 GiB all-reduce on the MI300X mesh against the same node as a
    switch of the DGX H100 SuperPOD's NVSwitch efficiency (tests/test_network_realism.py)."""
    from planner.costmodel.network import collective_time_s
    from planner.specs.loaders import load_cluster

    mesh = load_cluster("mi300x-cluster").topology[0]
    eff = load_cluster("dgx-h100-superpod").topology[0].efficiency
    switch = mesh.model_copy(update={"kind": "switch", "link_GBps": None, "efficiency": eff})
    t = {(k, lv.kind): 1e3 * collective_time_s("allreduce", 2**30, (k,), (lv,))
         for k in (2, 8) for lv in (mesh, switch)}
    m2, s2 = t[(2, mesh.kind)], t[(2, "switch")]
    return (f"an all-reduce of 1 GiB takes {m2:.1f} ms on TP2 against {s2:.1f} ms were the node a "
            f"{mesh.bandwidth_GBps:.0f} GB/s switch ({m2 / s2:.1f}x); on TP8 "
            f"{t[(8, mesh.kind)]:.1f} ms against {t[(8, 'switch')]:.1f} ms (efficiency "
            f"{mesh.efficiency:g} instead of {eff:g})")

def _mosaicml_in_full() -> str:
    return (f"within {pct(bench('bench_heldout_mosaicml')['all']['mape'])} MAPE when charged in "
            "full")

def _scale_module() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_scale",
                                                  ROOT / "benchmarks" / "bench_scale.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@lru_cache(maxsize=1)
def _scale() -> dict:
    """benchmarks/bench_scale.py's rows, run in process."""
    mod = _scale_module()
    return {"megascale": mod.megascale_rows(True), "today": mod.megascale_rows(False),
            "llama": mod.llama_weak_scaling()}


def _megascale() -> str:
    """docs/cost-model.md: MegaScale's 175B rows, the error's ends and slope (as run, and
    with today's defaults), and the time per iteration more GPUs do not shrink (the line
    through the smallest and the largest run), measured and predicted."""
    from planner.validation.scaling import residual_slope

    def slope(rows: list) -> float:
        return residual_slope([(g, 100 * (p / m - 1)) for g, p, m in rows]).slope_per_decade

    rows = _scale()["megascale"]
    (g0, p0, m0), (g1, p1, m1) = rows[0], rows[-1]

    def line(t0: float, t1: float) -> tuple[float, float]:
        a = (t0 - t1) / (1 / g0 - 1 / g1)
        return a, t1 - a / g1

    (am, bm), (_, bp) = line(m0, m1), line(p0, p1)
    return (f"model's error goes from {signed(p0 / m0 - 1)} to {signed(p1 / m1 - 1)} "
            f"({slope(rows):+.0f} points per tenfold GPUs; {slope(_scale()['today']):+.0f} with "
            f"today's overlapped defaults). The measured iteration times fit `{am:,.0f} / GPUs + "
            f"{bm:.1f} s`: {bm:.1f} s per iteration that more GPUs do not shrink, of which the "
            f"model has {bp:.1f} s (the fp32 all-reduce, the bubble, the optimizer). What makes "
            f"up the other {bm - bp:.1f} s").replace("(+", "(").replace("; +", "; ")


def _weak_llama() -> str:
    rows = _scale()["llama"]
    return (f"slows by {pct(rows[-1][1] / rows[0][1] - 1)} from {rows[0][0]:,} to "
            f"{rows[-1][0]:,} replicas")


NEMOTRON_DP = (96, 192, 288)


@lru_cache(maxsize=None)
def _nemotron(dp: int, ideal: bool) -> Any:
    """``planner evaluate -m nemotron-4-15b -c dgx-h100-superpod --gpus 8*dp --tp 8 --pp 1
    --dp dp --mbs 1 --global-batch 4*dp --set zero_stage=1 --set sequence_parallel=true``;
    ``ideal``: with step_time_cv 0 and the network's algorithm left to ``auto``."""
    import planner
    from planner.specs.loaders import load_cluster, load_model
    from planner.specs.plan import Plan

    c = load_cluster("dgx-h100-superpod", 8 * dp)
    if ideal:
        c = c.model_copy(update={"step_time_cv": 0.0, "topology": tuple(
            lv.model_copy(update={"algorithm": "auto"}) for lv in c.topology)})
    plan = Plan(tp=8, pp=1, dp=dp, microbatch_size=1, global_batch_size=4 * dp,
                seq_len=load_model("nemotron-4-15b").seq_len, zero_stage=1,
                sequence_parallel=True)
    return planner.evaluate("nemotron-4-15b", c, plan)


def _nemotron_weak() -> str:
    t = [_nemotron(dp, False) for dp in NEMOTRON_DP]
    t0 = [_nemotron(dp, True).iteration_time_s for dp in NEMOTRON_DP]
    times = ", ".join(f"{e.iteration_time_s:.3f}" for e in t)
    lag = ", ".join(f"{1e3 * e.time_breakdown_s['straggler']:.1f}" for e in t)
    ideal = ", ".join(f"{x:.3f}" for x in t0)
    return (f"predicts {times} s (straggler {lag} ms); with `step_time_cv: 0` and the "
            f"network's `auto` algorithm {ideal} s")


def _nemotron_growth() -> str:
    a, b = (_nemotron(dp, False).iteration_time_s for dp in (NEMOTRON_DP[0], NEMOTRON_DP[-1]))
    return f"({signed(b / a - 1)} predicted)"


def _headroom() -> str:
    from planner.costmodel.compose import headroom_bytes
    from planner.specs.loaders import load_cluster

    c = load_cluster("dgx-h100-superpod")
    return f"{headroom_bytes(c) / 2**30:.1f} GiB on an {c.gpu.hbm_gib:g} GB GPU"


def _checkpoint_405b() -> str:
    g = goodput_of("dgx-h100-superpod", 16384)
    return f"Llama 3 405B: {g.checkpoint_bytes / 1e12:.1f} TB"


def _memory_row() -> str:
    return f"matches Figure 1 within {pct(validate()['memory_max'])}"


def _mla(part: str) -> Callable[[], str]:
    """docs/moe-long-context.md: what counting DeepSeek-V3's MLA as MHA with query/key-wide
    heads adds (hardware_catalog/models/deepseek-v3.yaml)."""
    def text() -> str:
        from planner.specs.loaders import load_model

        m = load_model("deepseek-v3")
        qk, v = m.head_dim, m.mla.v_head_dim
        if part == "activations":
            return (f"the {v}-wide values are counted at {qk} (about "
                    f"{100 * (3 * qk / (2 * qk + v) - 1):+.0f}% on Q/K/V activations)")
        return (f"`4 seq heads {qk}` instead of `2 seq heads ({qk} + {v})` "
                f"({100 * (4 * qk / (2 * (qk + v)) - 1):+.0f}% on a term")
    return text


#: docs/moe-long-context.md: the plans its solves returned (python -m planner solve ...,
#: 2026-11-29; the solves take 5-60 s each, so the check evaluates the plans they returned:
#: a change of the cost model moves these figures, a change of the optimum does not show)
_ORDER = {"order": ["tp", "cp", "ep", "dp", "pp"]}
_COMMON = {"microbatch_size": 1, "uneven_pipeline": False, "recompute": "none",
           "zero_stage": 1, "sequence_parallel": True, "tp_comm": "rs_ag"}
MOE_PLANS: dict[str, tuple[str, str, int | None, str | None, dict]] = {
    # planner solve --model mixtral-8x7b --cluster examples/superpod.yaml [--fix ep=1]
    "mixtral": ("mixtral-8x7b", "examples/superpod.yaml", None, None, {
        **_COMMON, "tp": 2, "pp": 8, "dp": 64, "ep": 8, "expert_tp": 1,
        "global_batch_size": 1024, "seq_len": 4096, "virtual_stages": 4,
        "placement": {**_ORDER, "domain": {"tp": 2, "cp": 1, "dp": 4, "pp": 1}}}),
    "mixtral ep=1": ("mixtral-8x7b", "examples/superpod.yaml", None, None, {
        **_COMMON, "tp": 2, "pp": 8, "dp": 64, "expert_tp": 2, "global_batch_size": 1024,
        "seq_len": 4096, "virtual_stages": 4,
        "placement": {**_ORDER, "domain": {"tp": 2, "cp": 1, "dp": 4, "pp": 1}}}),
    # planner solve -m llama3-405b -c examples/superpod.yaml --seq-len 131072
    # --global-batch 128 [--fix cp=1 | --framework megatron-core]
    "405b": ("llama3-405b", "examples/superpod.yaml", None, None, {
        **_COMMON, "tp": 8, "pp": 8, "dp": 1, "cp": 16, "global_batch_size": 128,
        "seq_len": 131072, "virtual_stages": 8, "uneven_pipeline": True, "recompute": "half",
        "offload_optimizer": True,
        "placement": {**_ORDER, "domain": {"tp": 8, "cp": 1, "dp": 1, "pp": 1}}}),
    "405b cp=1": ("llama3-405b", "examples/superpod.yaml", None, None, {
        **_COMMON, "tp": 8, "pp": 8, "dp": 16, "global_batch_size": 128, "seq_len": 131072,
        "uneven_pipeline": True, "recompute": "full", "zero_stage": 3,
        "offload_optimizer": True, "offload_params": True,
        "placement": {**_ORDER, "domain": {"tp": 8, "cp": 1, "dp": 1, "pp": 1}}}),
    "405b megatron-core": ("llama3-405b", "examples/superpod.yaml", None, "megatron-core", {
        **_COMMON, "tp": 8, "pp": 8, "dp": 1, "cp": 16, "global_batch_size": 128,
        "seq_len": 131072, "uneven_pipeline": True, "recompute": "half",
        "overlap_tp_comm": True, "placement": _ORDER}),
    # tests/test_long_context.py's LBNL ViT: --fix recompute=none --fix sequence_parallel=false
    # --fix cp_comm=all_gather on 512 and 2,048 B200; and with sequence parallelism, --fix cp=1
    "vit 512": ("vit-era5-64k", "dgx-b200-superpod", 512, None, {
        **_COMMON, "tp": 2, "pp": 8, "dp": 4, "cp": 8, "global_batch_size": 4096,
        "seq_len": 64800, "sequence_parallel": False, "tp_comm": "allreduce",
        "cp_comm": "all_gather",
        "placement": {**_ORDER, "domain": {"tp": 2, "cp": 4, "dp": 1, "pp": 1}}}),
    "vit 2048": ("vit-era5-64k", "dgx-b200-superpod", 2048, None, {
        **_COMMON, "tp": 2, "pp": 8, "dp": 16, "cp": 8, "global_batch_size": 4096,
        "seq_len": 64800, "virtual_stages": 4, "uneven_pipeline": True,
        "sequence_parallel": False, "tp_comm": "allreduce", "cp_comm": "all_gather",
        "placement": {**_ORDER, "domain": {"tp": 2, "cp": 4, "dp": 1, "pp": 1}}}),
    "vit 1d sp 2048": ("vit-era5-64k", "dgx-b200-superpod", 2048, None, {
        **_COMMON, "tp": 8, "pp": 4, "dp": 64, "global_batch_size": 4096, "seq_len": 64800,
        "zero_stage": 2,
        "placement": {**_ORDER, "domain": {"tp": 8, "cp": 1, "dp": 1, "pp": 1}}}),
}


@lru_cache(maxsize=None)
def moe_estimate(name: str) -> Any:
    import planner
    from planner.specs.loaders import load_cluster

    model, cluster, gpus, framework, plan = MOE_PLANS[name]
    return planner.evaluate(model, load_cluster(cluster, gpus), plan, framework=framework)


def _mixtral() -> str:
    e, no_ep = moe_estimate("mixtral"), moe_estimate("mixtral ep=1")
    share = e.time_breakdown_s["ep_comm"] / e.iteration_time_s
    return (f"all-to-alls take {pct(share)} of the iteration. Without EP (`--fix ep=1`) the best "
            f"plan splits the experts by TP instead (TP 2, PP 8, v 4, ETP 2) and takes "
            f"{no_ep.iteration_time_s:.3f} s, "
            f"{100 * (no_ep.iteration_time_s / e.iteration_time_s - 1):.0f} % slower")


def _llama_128k() -> str:
    e, cp1, mc = (moe_estimate(n) for n in ("405b", "405b cp=1", "405b megatron-core"))
    return (f"`--fix cp=1` gives {cp1.iteration_time_s:.0f} s per iteration (the best found "
            f"within the 60 s limit: TP 8, PP 8, DP 16, full recomputation, ZeRO-3 with the "
            f"optimizer and parameters offloaded: {_gib(cp1.memory_per_gpu_bytes)} of "
            f"{cp1.hbm_capacity_bytes / 2**30:g} GiB), "
            f"{cp1.iteration_time_s / e.iteration_time_s:.1f}x slower. The offload is not a "
            f"Megatron-Core setting: the text output names the closest framework and the rule "
            f"it breaks, and `--framework megatron-core` searches only what Megatron-Core runs: "
            f"TP 8, CP 16, PP 8 without interleaving, half recomputed, ZeRO-1, "
            f"{mc.iteration_time_s:.0f} s "
            f"({100 * (mc.iteration_time_s / e.iteration_time_s - 1):.0f} % slower)")


def _vit_row(gpus: int) -> Callable[[], str]:
    def text() -> str:
        plan = MOE_PLANS[f"vit {gpus}"][4]
        v = f", v {plan['virtual_stages']}" if plan.get("virtual_stages", 1) > 1 else ""
        return (f"| {gpus} | tp {plan['tp']}, cp {plan['cp']} (all-gather), pp {plan['pp']}, dp "
                f"{plan['dp']}{v} | {moe_estimate(f'vit {gpus}').iteration_time_s:.0f} s |")
    return text


def _vit_1d() -> str:
    e = moe_estimate("vit 1d sp 2048")
    plan = MOE_PLANS["vit 1d sp 2048"][4]
    return (f"(tp {plan['tp']}, pp {plan['pp']}, dp {plan['dp']}: {e.iteration_time_s:.0f} s, "
            f"{_gib(e.memory_per_gpu_bytes)} of {e.hbm_capacity_bytes / 2**30:.1f} GiB)")


@lru_cache(maxsize=1)
def _cp_gain() -> dict[int, float]:
    """tests/test_long_context.py::test_planner_picks_cp_at_long_sequences: the best plan
    without CP against the best, Llama 3 8B on its 64-GPU test cluster."""
    from planner.orchestration import solve
    from planner.specs.loaders import load_model

    if str(ROOT / "tests") not in sys.path:  # its conftest's helpers; after the checkout's
        sys.path.append(str(ROOT / "tests"))
    from conftest import small_cluster

    m, c, gain = load_model("llama3-8b"), small_cluster(64, domain=8), {}
    for seq, gb in ((8192, 64), (131072, 8)):
        base = {"seq_len": seq, "global_batch_size": gb}
        gain[seq] = (solve(m, c, base=base, fixed={"cp": 1}).best.objective
                     / solve(m, c, base=base).best.objective)
    return gain


def _cp_close_call() -> str:
    g = _cp_gain()
    return (f"is {100 * (g[8192] - 1):.0f} % slower at 8K, where CP 2 and TP 2 trade places as "
            f"NVIDIA's 8K recipe runs CP 2, and {100 * (g[131072] - 1):.0f} % slower at 128K")

_REST_DOCS: tuple[Figure, ...] = (
    Figure("docs/formats.md", "planner.validation.band.LEVEL", _band_level),
    Figure("docs/formats.md", "planner.validation.trust.SCALE_FACTOR", _similar_scale),
    Figure("docs/serving.md", f"planner serve {ISSUE_29}", _issue_29),
    Figure("docs/serving.md", f"planner serve {UNREACHABLE}", _unreachable),
    Figure("docs/serving.md", f"{SERVE_EXAMPLE} (and --fix mode=aggregated)", _model_vs_sim),
    Figure("docs/serving.md", "simulate(..., 60000, seed) of the aggregated example's plan, "
           "seeds 1-3", _more_seeds),
    Figure("docs/serving.md", "tests/test_serve_load.py's light and heavy loads "
           "(evaluate_serve, simulate with 4,000 requests)", _light_heavy_tpot),
    Figure("docs/serving.md", "tests/test_serve_load.py's heavy load", _light_heavy_ttft),
    Figure("docs/serving.md", "planner validate (serving rows)",
           _serving_row("output_tokens_per_s_per_gpu", "output tokens/s per GPU")),
    Figure("docs/serving.md", "planner validate (serving rows)",
           _serving_row("first_token_latency_ms", "TTFT (batch 1)")),
    Figure("docs/serving.md", "planner.specs.serve.ServeEngine() (the class defaults)",
           _engine_defaults("fit")),
    Figure("docs/serving.md", "planner.specs.serve.ServeEngine() (the class defaults)",
           _engine_defaults("default")),
    Figure("docs/serving.md", "planner.specs.serve.ServeEngine() (the class defaults)",
           _engine_defaults("aic")),
    Figure("docs/serving.md", "python benchmarks/bench_aiconfigurator.py", _aic("bf16")),
    Figure("docs/serving.md", "python benchmarks/bench_aiconfigurator.py, engine ServeEngine() "
           "(the v0.6.1 fit)", _aic("v0.6.1")),
    Figure("docs/serving.md", "python benchmarks/bench_aiconfigurator.py --dtype fp8",
           _aic("fp8")),
    Figure("docs/serving.md", "python benchmarks/bench_aiconfigurator.py --dtype fp8, the trtllm "
           "profile with fp8_act_quant_kernels 0", _aic("fp8 unquantized")),
    Figure("docs/procure.md", "planner solve -m llama3-405b -c dgx-h100-superpod --gpus 12288 "
           "(and --gpus 8192)", _grid_mfu),
    Figure("docs/procure.md", "hardware_catalog/clusters/dgx-h100-superpod.yaml node_power_w",
           _node_power),
    Figure("docs/procure.md", "network_capex_usd_per_gpu / network_power_w_per_gpu of ramp-a100 "
           "and examples/ramp-baseline-fat-tree.yaml", _ramp_templates),
    Figure("docs/procure.md", "node_power_w of ramp-a100 and examples/ramp-baseline-fat-tree.yaml",
           _ramp_power),
    Figure("docs/procure.md", "facility_power_w of 2,048 GPUs of dgx-h100-superpod", _site_power),
    Figure("docs/procure.md", "three B200 of dgx-b200-superpod at full load, 24 h, the pricing "
           "file's electricity", _buy_b200_running),
    Figure("docs/cost-model.md", "planner/costmodel/constants.py FLASH_BWD_FLOP_RATIO",
           _constant("Backward runs {FLASH_BWD_FLOP_RATIO:g}x the forward FLOPs")),
    Figure("docs/cost-model.md", "planner/costmodel/constants.py ELEMENTWISE_BWD_RATIO",
           _constant("Backward moves {ELEMENTWISE_BWD_RATIO:g}x the bytes.")),
    Figure("docs/cost-model.md", "python benchmarks/bench_heldout_torchtitan.py", _compiled_titan),
    Figure("docs/cost-model.md", "tests/test_recipe_memory.py's 405B recipes with fp32 gradients",
           _fp32_gradients),
    Figure("docs/cost-model.md", "tests/test_recipe_memory.py's Nemotron-4 340B run",
           _nemotron_340b),
    Figure("docs/cost-model.md", "tests/test_recipe_memory.py's NeMo 405B trainer on 576 GPUs",
           _nemo_405b_576),
    Figure("docs/cost-model.md", "tests/test_recipe_memory.py's torchtitan 8B at 32K", _titan_loss),
    Figure("docs/cost-model.md", "hardware_catalog/clusters/mi300x-cluster.yaml (link_GBps)",
           _mesh),
    Figure("docs/cost-model.md", "collective_time_s of a 1 GiB all-reduce on mi300x-cluster's mesh "
           "and as a switch", _mesh_all_reduce),
    Figure("docs/cost-model.md", "python benchmarks/bench_heldout_mosaicml.py", _mosaicml_in_full),
    Figure("docs/cost-model.md", "python benchmarks/bench_scale.py (MegaScale rows)", _megascale),
    Figure("docs/cost-model.md", "python benchmarks/bench_scale.py (Llama 3 8B weak scaling)",
           _weak_llama),
    Figure("docs/cost-model.md", "planner evaluate -m nemotron-4-15b ... (dp 96, 192, 288)",
           _nemotron_weak),
    Figure("docs/cost-model.md", "planner evaluate -m nemotron-4-15b ... (dp 96 and 288)",
           _nemotron_growth),
    Figure("docs/cost-model.md", "planner.costmodel.compose.headroom_bytes of dgx-h100-superpod",
           _headroom),
    Figure("docs/cost-model.md", "training_goodput of llama3-405b (its checkpoint bytes)",
           _checkpoint_405b),
    Figure("docs/cost-model.md", "planner validate (memory table)", _memory_row),
    Figure("docs/moe-long-context.md", "hardware_catalog/models/deepseek-v3.yaml (head_dim, "
           "mla.v_head_dim)", _mla("activations")),
    Figure("docs/moe-long-context.md", "hardware_catalog/models/deepseek-v3.yaml (head_dim, "
           "mla.v_head_dim)", _mla("flops")),
    Figure("docs/moe-long-context.md", "planner evaluate of the plans planner solve returned for "
           "mixtral-8x7b on examples/superpod.yaml (and --fix ep=1)", _mixtral),
    Figure("docs/moe-long-context.md", "planner evaluate of the plans planner solve returned for "
           "llama3-405b at 128K (--fix cp=1, --framework megatron-core)", _llama_128k),
    Figure("docs/moe-long-context.md", "planner evaluate of the 2D plan of vit-era5-64k on 512 "
           "B200", _vit_row(512)),
    Figure("docs/moe-long-context.md", "planner evaluate of the 2D plan of vit-era5-64k on 2,048 "
           "B200", _vit_row(2048)),
    Figure("docs/moe-long-context.md", "planner evaluate of the 1D plan with sequence parallelism "
           "of vit-era5-64k on 2,048 B200", _vit_1d),
    Figure("docs/moe-long-context.md", "tests/test_long_context.py's solves with and without CP",
           _cp_close_call),
    Figure("docs/mixed.md", "python examples/solve_mixed.py (its mixed plan evaluated, the h100 "
           "pool solved alone)", _mixed),
)
#: each text rendered once per process: tests/test_check_docs.py renders the registry once per
#: figure, and the documents, not these commands, are what it changes
REST_DOCS = tuple(Figure(f.doc, f.command, lru_cache(maxsize=1)(f.text), f.block)
                  for f in _REST_DOCS)
# ---- end of docs/serving.md ... docs/formats.md

# ---- README.md and docs/validation.md (issue 37, item 6): every figure accounted for ------
# A corpus run's residual, as shipped and held out by source, is what `planner validate`
# reads (hardware_catalog/calibration/heldout_residuals.yaml, rewritten by
# tools/calibrate.py --write): a refit moves these figures, and the check follows it.


@lru_cache(maxsize=1)
def residuals() -> dict[str, dict]:
    """Per corpus run: its residuals as shipped and held out by source (fractions)."""
    from planner.validation.band import heldout_file

    return {r["run"]: r for r in heldout_file()}


def _signed(x: float, digits: int = 1) -> str:
    return f"{100 * x:+.{digits}f} %".replace("+-", "-")


def shipped(run: str, digits: int = 1) -> str:
    """A run's residual with the shipped parameters (``planner validate``), signed."""
    return _signed(residuals()[run]["residual"], digits)


def held(run: str, digits: int = 1) -> str:
    """A run's residual held out by source (``planner validate``), signed."""
    return _signed(residuals()[run]["heldout_residual"], digits)


def span(xs: list[float], digits: int = 0) -> str:
    """``+11 to +13 %``: the least and largest of signed fractions (one figure if equal)."""
    lo, hi = (_signed(x, digits)[:-2] for x in (min(xs), max(xs)))
    return f"{lo} %" if lo == hi else f"{lo} to {hi} %"


@lru_cache(maxsize=None)
def bench_rows(name: str) -> dict[str, dict[str, float]]:
    """The run rows of ``python benchmarks/NAME.py`` (run, published, predicted, error %
    and optionally the memory in GiB), as numbers."""
    row = re.compile(r"^(?P<run>[a-z][\w.-]+)\s+(?P<pub>[\d,]+)\s+(?P<pred>[\d,]+)\s+"
                     r"(?P<err>[-+\d.]+)%(?:\s+(?P<mem>\d+) GiB)?", re.M)
    return {m["run"]: {"published": float(m["pub"].replace(",", "")),
                       "predicted": float(m["pred"].replace(",", "")),
                       "error": float(m["err"]) / 100,
                       "memory_GiB": float(m["mem"]) if m["mem"] else float("nan")}
            for m in row.finditer(_bench_out(name))}


def _rv_nemo(run: str, digits: int = 1) -> str:
    """bench_heldout_nemo.py's error of one run."""
    return _signed(bench_rows("bench_heldout_nemo")[run]["error"], digits)


#: bench_heldout_nemo.py's sets: its label, the run-name prefix, docs/validation.md's label
NEMO_SETS = (("H100", "nemo2412-h100", "H100, NeMo 24.12"),
             ("B200", "nemo2502-b200", "B200, NeMo 25.02 (rows not in the fit)"),
             ("GB200", "nemo2504-gb200", "GB200, NeMo 25.04"))


def nemo_table() -> str:
    """docs/validation.md: bench_heldout_nemo.py's summary per set, its worst run, and the
    GB200 set without its Megatron-FSDP row (from the printed rows)."""
    rows = bench_rows("bench_heldout_nemo")
    lines = ["| set | runs | MAPE | mean | max error |", "|---|---|---|---|---|"]
    for label, prefix, name in NEMO_SETS:
        b = bench("bench_heldout_nemo")[label]
        runs = {k: r["error"] for k, r in rows.items() if k.startswith(prefix)}
        worst = max(runs, key=lambda k: abs(runs[k]))
        lines.append(f"| {name} | {len(runs)} | {pct(b['mape'])} | {signed(b['mean'])} | "
                     f"{signed(b['max'])} (`{worst}`) |")
    errs = {k: r["error"] for k, r in rows.items()
            if k.startswith("nemo2504-gb200") and "fsdp" not in k}
    worst = max(errs, key=lambda k: abs(errs[k]))
    lines.append(f"| GB200 without the FSDP row | {len(errs)} | "
                 f"{pct(sum(map(abs, errs.values())) / len(errs))} | "
                 f"{signed(sum(errs.values()) / len(errs))} | {signed(errs[worst])} (`{worst}`) |")
    return "\n".join(lines)


def mosaicml_table() -> str:
    """docs/validation.md: bench_heldout_mosaicml.py's summary per set (MOSAICML's labels)."""
    b = bench("bench_heldout_mosaicml")
    lines = ["| runs | MAPE | mean | max |", "|---|---|---|---|"]
    lines += [f"| {row} | {pct(b[label]['mape'])} | {signed(b[label]['mean'])} | "
              f"{signed(b[label]['max'])} |" for label, row in MOSAICML]
    return "\n".join(lines)


@lru_cache(maxsize=None)
def _gb200_fsdp() -> str:
    """The Megatron-FSDP row: its error, its activations without recomputation (the
    corpus row's plan at recompute none) and the memory of the plan the row assumes."""
    from planner.validation.corpus import corpus_runs

    run = "nemo2504-gb200-llama3-70b-fsdp"
    r = next(x for x in corpus_runs() if x.name == run)
    none = r.estimate(plan=r.plan.model_copy(update={"recompute": "none"}))
    return (f"GB200 Llama 3 70B with Megatron-FSDP at tp 1: {_rv_nemo(run)}.** At microbatch "
            f"1 x 8,192 tokens its activations need {none.memory_per_gpu_bytes / 2**30:.0f} GiB "
            f"without recomputation")


@lru_cache(maxsize=None)
def _gb200_fsdp_half() -> str:
    mem = bench_rows("bench_heldout_nemo")["nemo2504-gb200-llama3-70b-fsdp"]["memory_GiB"]
    return f"which the solver picks here ({mem:.0f} GiB) and the corpus row assumes"


@lru_cache(maxsize=None)
def _gb200_slow() -> str:
    return (f"GB200 GPT-3 175B and Llama 3 8B: {_rv_nemo('nemo2504-gb200-gpt3-175b')} and "
            f"{_rv_nemo('nemo2504-gb200-llama3-8b')}.")


@lru_cache(maxsize=None)
def _gb200_ratio() -> str:
    """Llama 3 8B on GB200 (NeMo 25.04) against the same configuration on B200 (NeMo
    25.02): published and predicted (the corpus's measurement and shipped residual)."""
    from planner.validation.corpus import corpus_runs

    gb, b = "nemo2504-gb200-llama3-8b", "nemo2502-b200-llama3-8b"
    m = {r.name: r.measured for r in corpus_runs() if r.name in (gb, b)}
    pred = (m[gb] * (1 + residuals()[gb]["residual"])) / (m[b] * (1 + residuals()[b]["residual"]))
    return (f"{m[gb] / m[b]:.2f}x the B200 run of the same configuration ({m[gb]:,.0f} against "
            f"{m[b]:,.0f}\ntokens/s/GPU); the model gives {pred:.2f}x")


@lru_cache(maxsize=None)
def _eager_h100() -> str:
    """torchtitan's H100 FSDP runs (8 and 128 GPUs): the model's throughput with eager
    element-wise kernels against fused ones."""
    from planner.validation.corpus import corpus_runs

    lost = []
    for r in corpus_runs():
        if r.name in ("tt-8b-8gpu-fsdp", "tt-8b-128gpu-fsdp"):
            t = {f: r.estimate(plan=r.plan.model_copy(update={"fused_elementwise": f}))
                 .iteration_time_s for f in (False, True)}
            lost.append(1 - t[True] / t[False])
    lo, hi = (f"{100 * x:.0f}" for x in (min(lost), max(lost)))
    return f"plan's throughput is {lo if lo == hi else f'{lo}-{hi}'} % below its fused one's there"


@lru_cache(maxsize=None)
def _b200_spread() -> str:
    return (f"(Nemotron-4 15B {shipped('nemo2502-b200-nemotron4-15b-64')}, GPT-3 "
            f"{shipped('nemo2502-b200-gpt3-175b-512')} there)")


@lru_cache(maxsize=None)
def _nemo_405b() -> str:
    return (f"{_rv_nemo('nemo2502-b200-llama3-405b')} on B200, "
            f"{_rv_nemo('nemo2504-gb200-llama3-405b')} on GB200.")


@lru_cache(maxsize=None)
def _nemo_gpt3_512() -> str:
    """The 512-H100 GPT-3 run as shipped, and against NeMo 24.07's 782 tokens/s/GPU for the
    same configuration (the calibration file's note)."""
    from planner.validation.corpus import corpus_runs

    run = "nemo2502-h100-gpt3-175b-512"
    r = next(x for x in corpus_runs() if x.name == run)
    pred = r.measured * (1 + residuals()[run]["residual"])
    return f"the error is {_signed(pred / 782 - 1, 0)}"


@lru_cache(maxsize=None)
def _nemotrons() -> str:
    return (f"Nemotron 22B on 64 H100: {shipped('nemo2407-h100-nemotron-22b-64')}; Nemotron-4 "
            f"15B on 64 B200: {shipped('nemo2502-b200-nemotron4-15b-64')}")


@lru_cache(maxsize=None)
def _moe_host() -> str:
    from planner.specs.framework import load_framework

    us = load_framework("megatron-core").kernels.moe_expert_host_us
    return f"one host time per local expert ({us:.0f} us)"


@lru_cache(maxsize=None)
def _moe_effect() -> str:
    from planner.validation.heldout import heldout_report

    moe = next(r for r in heldout_report()["by"]["dense / MoE"] if r["key"] == "MoE")
    run = "mbridge2511-b200-qwen3-30b-a3b-fp8-mx-8"
    return (f"Qwen3-30B-A3B on 8 B200 at microbatch 1: {shipped(run, 0)} as shipped "
            f"({held(run, 0)} held out: without Megatron-Bridge 25.11, the only source with many "
            f"small experts, the fit reaches the grid's edge); MoE held out by source "
            f"{pct(moe['mape'])} (mean {signed(moe['bias'])})")


@lru_cache(maxsize=None)
def _meta_405b() -> str:
    """The Llama 3 paper's runs as the corpus costs them, held out, and the one that does
    not fit."""
    from planner.validation.heldout import heldout_report

    why = next(r["why"] for r in heldout_report()["infeasible"]
               if r["run"] == "meta-llama3-405b-h100-8192-cp1-8k")
    need = re.search(r"needs ([\d.]+ GiB) per GPU", why)[1]
    return (f"{held('meta-llama3-405b-h100-16384-cp1-8k', 0)} (8K) and "
            f"{held('meta-llama3-405b-h100-16384-cp16-128k', 0)} (128K, CP 16) held out, and the "
            f"8,192-GPU row needs {need} per GPU")


#: Meta's Llama 3 405B plan (Dubey et al. 2024, Sec. 3.3): tp 8, pp 16, no CP, on 16,384 H100
META_405B = ("llama3-405b", "dgx-h100-superpod", 16384)


@lru_cache(maxsize=1)
def meta_plan() -> Any:
    """``planner solve -m llama3-405b -c dgx-h100-superpod --gpus 16384 --fix tp=8 --fix
    pp=16 --fix cp=1``."""
    import planner

    res = planner.solve(*META_405B[:2], gpus=META_405B[2], fix={"tp": 8, "pp": 16, "cp": 1})
    if res.status != "optimal":
        raise RuntimeError(f"the Llama 3 405B production solve ended {res.status!r}")
    return res.best


def _meta_mfu(doc: str) -> Callable[[], str]:
    def text() -> str:
        e = meta_plan().estimate
        p = meta_plan().plan
        tokens = p.global_batch_size * p.seq_len
        if doc == "README.md":
            return (f"the model predicts {pct(e.mfu)} MFU ({e.iteration_time_s:.2f} s per "
                    f"{tokens / 2**20:.0f}M-token step)")
        if doc == "limitations":
            return f"predicts {pct(e.mfu)} MFU against a published"
        return (f"gives {pct(e.mfu)} MFU ({p.dtype}, {e.iteration_time_s:.2f} s per "
                f"{p.global_batch_size:,} x {p.seq_len:,}-token iteration")
    return text


@lru_cache(maxsize=None)
def _meta_layout() -> str:
    p, e = meta_plan().plan, meta_plan().estimate
    rec = {"half": "every second layer recomputed", "none": "no recomputation",
           "full": "every layer recomputed", "selective": "selective recomputation"}
    return (f"with ZeRO-{p.zero_stage} and {rec[p.recompute]} ({p.virtual_stages} interleaved "
            f"stages, {'uneven' if p.uneven_pipeline else 'even'} pipeline, "
            f"{e.memory_per_gpu_bytes / 2**30:.0f} GiB per GPU)")


@lru_cache(maxsize=None)
def _free_405b() -> str:
    """The unconstrained 405B optimum (bench_solve.py's third case)."""
    res = solve_result(*META_405B, 2048)
    p, e = res.best.plan, res.best.estimate
    rec = "no recomputation" if p.recompute == "none" else f"{p.recompute} recomputation"
    return (f"(TP {p.tp}, PP {p.pp}, {p.virtual_stages} interleaved stages, DP {p.dp}, "
            f"ZeRO-{p.zero_stage}, {rec}): {e.iteration_time_s:.2f} s, {pct(e.mfu)} MFU")


#: benchmarks/bench_solve.py's cases (model, cluster, GPUs, global batch)
BENCH_SOLVE = (("llama3-70b", "dgx-h100-superpod", 1024, None),
               ("gpt3-175b", "dgx-a100-superpod", 1024, None),
               ("llama3-405b", "dgx-h100-superpod", 16384, 2048))


def _bench_solve_row(case: tuple) -> Callable[[], str]:
    """A row's best plan, iteration time and MFU: the solve bench_solve.py times."""
    def text() -> str:
        res = solve_result(*case)
        p, e = res.best.plan, res.best.estimate
        cp = f" CP{p.cp}" if p.cp > 1 else ""
        rec = "no recompute" if p.recompute == "none" else p.recompute
        return (f"| TP{p.tp}{cp} PP{p.pp} DP{p.dp} v{p.virtual_stages} mb{p.microbatch_size} "
                f"ZeRO-{p.zero_stage}, {rec}{', SP' if p.sequence_parallel else ''} | "
                f"{e.iteration_time_s:.3f} | {100 * e.mfu:.1f}% |")
    return text


@lru_cache(maxsize=None)
def _band_example() -> str:
    """The expected-error note of the README's 512-H100 solve (megatron-core)."""
    return solved(*H100_512, "megatron-core")[1].expected_error_note


@lru_cache(maxsize=None)
def _offload_step() -> str:
    res = solve_result(*OFFLOAD)
    p, e = res.best.plan, res.best.estimate
    return f"{e.iteration_time_s:.1f} s per {p.global_batch_size * p.seq_len // 1024}K-token step"


def _needs(model: str, cluster: str, gpus: int, fix: dict | None = None,
           **kw: Any) -> tuple[float, float]:
    """The least memory per GPU an infeasible solve reports (GiB), and the HBM (GiB)."""
    import planner
    from planner.errors import InfeasibleError

    try:
        planner.solve(model, cluster, gpus=gpus, fix=fix or {}, **kw)
    except InfeasibleError as err:
        for r in err.reasons:
            m = re.search(r"needs ([\d.]+) GiB per GPU even at maximum sharding.*HBM is "
                          r"([\d.]+) GiB", r)
            if m:
                return float(m[1]), float(m[2])
    raise RuntimeError(f"planner.solve({model!r}, {cluster!r}, gpus={gpus}, fix={fix}) gave "
                       "no 'even at maximum sharding' reason")


@lru_cache(maxsize=None)
def rv_needs(model: str, cluster: str, gpus: int, offload: bool = True) -> tuple[float, float]:
    fix = None if offload else {"offload_optimizer": False, "offload_params": False}
    kw = {} if offload else {"global_batch_size": OFFLOAD[3]}
    return _needs(model, cluster, gpus, fix, **kw)


@lru_cache(maxsize=None)
def _no_offload() -> str:
    need, _ = rv_needs(*OFFLOAD[:3], offload=False)
    return f"needs {need:.0f} GiB per GPU at best without it"


@lru_cache(maxsize=None)
def _oom_example() -> str:
    """The exit-code example: the offload example's solve without offload (solved once)."""
    need, hbm = rv_needs(*OFFLOAD[:3], offload=False)
    return f"needs {need:.1f} GiB per GPU even at maximum sharding …; HBM is {hbm:.0f} GiB"


@lru_cache(maxsize=None)
def _mosaicml_rest() -> str:
    b = bench("bench_heldout_mosaicml")
    return (f"with full recomputation {signed(b['A100 full recompute']['mean'])}; H100 "
            f"{signed(b['H100 no recompute']['mean'])} without recomputation and "
            f"{signed(b['H100 full recompute']['mean'])} with it")


@lru_cache(maxsize=None)
def _mosaicml_unaffected() -> str:
    return (f"stay {signed(bench('bench_heldout_mosaicml')['A100 no recompute']['mean'])} on "
            "A100 without recomputation")


@lru_cache(maxsize=None)
def _where_large() -> str:
    """README, known limitations: the long-context NeMo runs (16K and up) and MaxText, held
    out by source."""
    r = residuals()
    long = [v["heldout_residual"] for k, v in r.items()
            if k.startswith("nemo-longseq-h100-llama2-7b") and v["seq_len"] >= 16384]
    maxtext = [v["heldout_residual"] for k, v in r.items() if k.startswith("dgxc-maxtext")]
    lo, hi = (f"{100 * x:.0f}" for x in (min(long), max(long)))
    return (f"(NeMo's Llama 2 7B at 16K-1M tokens) +{lo}-{hi} %; frameworks without a "
            f"profile (MaxText) about {_signed(sum(maxtext) / len(maxtext), 0)}")


@lru_cache(maxsize=None)
def _tt_cp_limit() -> str:
    worst = max(v["heldout_residual"] for k, v in residuals().items()
                if k.startswith("tt-") and ("cp4-128k" in k or "cp8-256k" in k))
    return f"predicted optimistic (up to {_signed(worst, 0)} held out)"


@lru_cache(maxsize=None)
def _tt_cp() -> str:
    """docs/validation.md: torchtitan's context-parallel runs, as shipped."""
    def s(run: str) -> str:
        return shipped(run, 0)
    t4 = [residuals()[f"tt-405b-512gpu-4d-fsdp{f}-cp{c}-{k}"]["residual"]
          for f, c, k in ((4, 2, "64k"), (2, 4, "128k"))]
    return (f"(8B: {s('tt-8b-8gpu-fsdp4-cp2-64k')} at cp2, {s('tt-8b-8gpu-fsdp2-cp4-128k')} at "
            f"cp4, {s('tt-8b-8gpu-fsdp1-cp8-256k')} at cp8; 405B: {span(t4)} at cp2 and cp4, "
            f"{s('tt-405b-512gpu-4d-fsdp1-cp8-256k')} at cp8)")


@lru_cache(maxsize=None)
def _tt_tp() -> str:
    xs = [v["residual"] for k, v in residuals().items() if k.startswith("tt25-8b-64gpu")]
    return f"the 2025-06 8B runs with TP are {100 * min(xs):.0f}-{100 * max(xs):.0f} % optimistic"


@lru_cache(maxsize=None)
def _tt_405b_prefetch() -> str:
    xs = [shipped(f"tt24-405b-128gpu-{k}") for k in ("bf16", "fp8", "fp8-asynctp")]
    return f"to {xs[0]}, {xs[1]} and {xs[2]}"


#: the bench_recipes.py summary: 'optimum vs published, LABEL: mean x%, max y%, min z%'
RECIPES_SUMMARY = re.compile(r"^optimum vs published, (?P<label>[^:]+): mean (?P<mean>[-+\d.]+)%, "
                             r"max (?P<max>[-+\d.]+)%, min (?P<min>[-+\d.]+)%$", re.M)


@lru_cache(maxsize=1)
def recipe_rows() -> dict[str, dict[str, Any]]:
    """``python benchmarks/bench_recipes.py``: per NeMo row, the published throughput, the
    optimum's (Megatron features) against it and against the recipe, memory and plan."""
    row = re.compile(r"^(?P<run>nemo\S+)\s+(?P<pub>[\d,]+)\s+[\d,]+\s+[\d,]+\s+"
                     r"(?P<opt>[-+\d.]+)%\s+(?P<rec>[-+\d.]+)%\s+(?P<mr>\d+)/(?P<mo>\d+)\s+"
                     r"(?P<plan>[^|]+?)\s+\|", re.M)
    return {m["run"]: {"published": m["pub"], "vs_published": float(m["opt"]) / 100,
                       "vs_recipe": float(m["rec"]) / 100, "memory_recipe_GiB": int(m["mr"]),
                       "memory_optimum_GiB": int(m["mo"]), "plan": m["plan"]}
            for m in row.finditer(_bench_out("bench_recipes"))}


def compact_plan(text: str) -> str:
    """``tp4 pp4 v8 cp1 dp8 mbs1 z1 rc=none`` as the README prints it: sizes above 1,
    microbatch above 1, recomputation when on."""
    out = []
    for part in text.split():
        key, val = re.match(r"([a-z]+)=?(\S+)", part).groups()
        if key == "rc":
            out += [] if val == "none" else [val]
        elif key == "z":
            out += [] if val in ("0", "1") else [f"ZeRO-{val}"]
        elif val != "1":
            out.append(part)
    return " ".join(out)


#: issue 13's acceptance: no optimum above +15 % of its recipe unless the README explains it
#: (the table bolds those rows)
RECIPE_ALARM = 0.15


def recipes_table() -> str:
    lines = ["| run | published | optimum (Megatron features) | vs published | GiB, recipe / "
             "optimum |", "|---|---|---|---|---|"]
    for run, r in recipe_rows().items():
        err = signed(r["vs_published"])
        err = f"**{err}**" if r["vs_published"] > RECIPE_ALARM else err
        lines.append(f"| {run} | {r['published']} | {compact_plan(r['plan'])} | {err} | "
                     f"{r['memory_recipe_GiB']} / {r['memory_optimum_GiB']} |")
    return "\n".join(lines)


@lru_cache(maxsize=None)
def _recipes_summary() -> str:
    out = _bench_out("bench_recipes")
    s = {m["label"]: m for m in RECIPES_SUMMARY.finditer(out)}
    meg, anyf = s["Megatron features (ZeRO <= 1)"], s["any framework"]
    rest = [r["vs_published"] for k, r in recipe_rows().items() if "nemotron-22b" not in k]
    same = "the same" if meg["mean"] == anyf["mean"] else f"{float(anyf['mean']):+.1f} %"
    return (f"Mean {float(meg['mean']):+.1f} % ({signed(sum(rest) / len(rest))} without the "
            f"Nemotron 22B row; range {float(meg['min']):+.1f} % to {float(meg['max']):+.1f} %)"
            f"; \"Megatron features\" searches ZeRO stages 0-1, the sharding the recipes' "
            f"framework offers (`SpaceOptions.max_zero_stage`); with FSDP-style ZeRO-2/3 allowed "
            f"the mean is {same} ({float(anyf['mean']):+.1f} %").replace("+-", "-")


@lru_cache(maxsize=None)
def _recipes_nemotron_text() -> str:
    return (f"the model predicts NVIDIA's own plan (tp2 pp4 v10 dp8) at "
            f"{shipped('nemo2407-h100-nemotron-22b-64')}")


@lru_cache(maxsize=None)
def _recipes_nemotron_memory() -> str:
    r = recipe_rows()["nemo2407-h100-nemotron-22b-64"]
    return f"The optimum drops the pipeline instead, at {r['memory_optimum_GiB']} GiB of 80"


@lru_cache(maxsize=None)
def _recipes_cp2() -> str:
    run = "nemo2407-h100-llama3-8b-8-cp2"
    return (f"the model predicts NVIDIA's own plan at {shipped(run)} and the optimum (dp8, no "
            f"context parallelism) {100 * recipe_rows()[run]['vs_recipe']:.0f} % above that")


@lru_cache(maxsize=None)
def _recipes_memory() -> str:
    def rng(gen: str, key: str) -> str:
        xs = [r[key] for k, r in recipe_rows().items() if f"-{gen}-" in k]
        return f"{min(xs)}-{max(xs)}"
    return (f"(H100: {rng('h100', 'memory_optimum_GiB')} GiB against "
            f"{rng('h100', 'memory_recipe_GiB')}; B200: {rng('b200', 'memory_optimum_GiB')} "
            f"against {rng('b200', 'memory_recipe_GiB')})")


@lru_cache(maxsize=None)
def _criteo() -> str:
    """README: ``planner solve -m criteo-dlrm -c dgx-a100-superpod --gpus 4``."""
    import planner

    res = planner.solve("criteo-dlrm", "dgx-a100-superpod", gpus=4)
    if res.status != "optimal":
        raise RuntimeError(f"the criteo-dlrm solve ended {res.status!r}")
    e = res.best.estimate
    return (f"{1e3 * e.iteration_time_s:.2f} ms,\n{e.samples_per_s / 1e6:.1f}M samples/s, proven "
            "optimal")


#: MAD-Max Table I (Hsia et al. 2024): measured samples/s of DLRM-A and DLRM-B on 128 A100
#: (tests/test_dlrm.py TABLE_I)
RV_MADMAX_TABLE_I = (("dlrm-a", 1.2e6), ("dlrm-b", 3.4e6))


@lru_cache(maxsize=None)
def _madmax_table_i() -> str:
    """README: tests/test_dlrm.py::test_madmax_table_i's solves (CP-SAT, 60 s limit)."""
    from formulations.dlrm.search import solve_sharding
    from planner.specs.loaders import load_cluster, load_model

    out = []
    for name, measured in RV_MADMAX_TABLE_I:
        s = solve_sharding(load_model(name), load_cluster("zionex-128"), "cpsat", 60)
        if s.status != "optimal":
            raise RuntimeError(f"the {name} sharding solve ended {s.status!r}")
        rel = f"{100 * (s.estimate.samples_per_s / measured - 1):+.1f}%".replace("-", "\u2212")
        out.append(f"{s.estimate.samples_per_s / 1e6:.2f}M against {measured / 1e6:.1f}M "
                   f"{'measured ' if name == 'dlrm-a' else ''}({rel})")
    return f"DLRM-A is {out[0].replace('M against', 'M samples/s against', 1)} and DLRM-B {out[1]}"


@lru_cache(maxsize=None)
def _nemotron_340b_memory() -> str:
    mem = recipe_rows()["nemo2407-h100-nemotron4-340b-128"]["memory_recipe_GiB"]
    return f"headroom ({mem} GiB without it"


@lru_cache(maxsize=None)
def _weak_scaling() -> str:
    """README: Nemotron-4 15B's weak scaling, as ``python benchmarks/bench_scale.py`` prints
    it (the step's growth over the measured GPU counts, published and predicted)."""
    out = _bench_out("bench_scale")
    block = out[out.index("Nemotron-4 15B weak scaling"):]
    m = re.search(r"measured ([-+\d.]+)%, predicted ([-+\d.]+)%", block)
    return (f"grows {float(m[1]):.0f} % from DP 96 to 288; the model's, with the last gradient "
            f"bucket exposed, about {float(m[2]):.0f} %")


@lru_cache(maxsize=None)
def rv_sweep_rows(path: str) -> dict[tuple, dict[str, Any]]:
    """``planner sweep PATH``'s rows, keyed by the point's axis values (each distinct point
    solved once, serially: what the sweep's workers would run)."""
    from planner.sweep.point import run_point
    from planner.sweep.runners import _settings
    from planner.sweep.spec import expand, load_sweep

    done: dict[str, dict[str, Any]] = {}
    rows = {}
    for p in expand(load_sweep(ROOT / path)):
        row = done.setdefault(p.spec.key(), run_point(_settings(p)))
        if row["status"] != "optimal":
            raise RuntimeError(f"{path} {p.axes}: {row['status']} ({row['reason']})")
        rows[tuple(p.axes.values())] = row
    return rows


@lru_cache(maxsize=None)
def _lbnl() -> str:
    """README: LBNL's Fig. A6 again (examples/sweeps/lbnl-hbm.yaml: HBM capacity x bandwidth
    factors on the B200 of examples/sweeps/lbnl-b200-nvs8.yaml)."""
    from planner.specs.loaders import load_cluster

    rows = rv_sweep_rows("examples/sweeps/lbnl-hbm.yaml")
    gpu = load_cluster(str(ROOT / "examples/sweeps/lbnl-b200-nvs8.yaml")).gpu
    caps = sorted({c for c, _ in rows})
    bws = sorted({b for _, b in rows})

    def gb(c: float) -> str:
        return f"{c * gpu.hbm_gib * 2**30 / 1e9:.0f} GB"

    def tbs(b: float) -> str:
        return f"{b * gpu.hbm_TBps:g} TB/s"

    def t(c: float, b: float) -> float:
        return rows[(c, b)]["iteration_time_s"]

    small, big, slow, base = caps[:-2], caps[-2], bws[0], 1
    flat = all(abs(t(c, b) - t(caps[0], b)) < 1e-9 for c in small + [big] for b in bws[1:])
    r = rows[(caps[0], base)]
    top = rows[(caps[-1], base)]
    return (f"from {tbs(bws[1])} up, capacity from {gb(caps[0])[:-3]} to {gb(big)} "
            f"{'changes nothing' if flat else 'changes the time'} ({t(caps[0], base):.2f} s per "
            f"iteration at {tbs(base)}, TP{r['tp']} PP{r['pp']} DP{r['dp']}), and only the slowest "
            f"bandwidth hurts ({100 * (t(caps[0], slow) / t(caps[0], base) - 1):+.0f} % at "
            f"{tbs(slow)}, where more capacity buys a shorter pipeline: {t(caps[0], slow):.2f} s "
            f"at {gb(caps[0])}, {t(big, slow):.2f} s at {gb(big)}; "
            f"{100 * (t(caps[0], bws[1]) / t(caps[0], base) - 1):+.0f} % at {tbs(bws[1])}). "
            f"{gb(caps[-1])} lets the optimum drop the pipeline (PP {top['pp']}, DP {top['dp']}, "
            f"{top['memory_per_gpu_gib']:.0f} GiB per GPU) and its bubble: "
            f"{top['iteration_time_s']:.2f} s")


@lru_cache(maxsize=None)
def _madmax_sweep() -> str:
    """README: MAD-Max's Fig. 19b study (examples/sweeps/madmax-scaling.yaml): the step's
    speed-up at the largest factor of each resource."""
    rows = rv_sweep_rows("examples/sweeps/madmax-scaling.yaml")
    top = max(f for _, f in rows)

    def up(res: str) -> float:
        return rows[(res, 1)]["iteration_time_s"] / rows[(res, top)]["iteration_time_s"]

    mid = [up(r) for r in ("memory", "intra-node", "inter-node")]
    return (f"compute {top}x gives {up('compute'):.1f}x, memory, intra- or inter-node bandwidth "
            f"{top}x give {min(mid):.2f}-{max(mid):.2f}x, all four together {up('all'):.1f}x")


README_VALIDATION: tuple[Figure, ...] = (
    Figure("README.md", "planner solve -m llama3-70b -c dgx-h100-superpod --gpus 8 "
           "--global-batch 64 --fix offload_optimizer=false --fix offload_params=false",
           _no_offload),
    Figure("README.md", "planner solve -m llama3-70b -c dgx-h100-superpod --gpus 8 "
           "--global-batch 64", _offload_step),
    Figure("README.md", "planner solve -m llama3-70b -c dgx-h100-superpod --gpus 8 "
           "--global-batch 64 --fix offload_optimizer=false --fix offload_params=false",
           _oom_example),
    Figure("README.md", f"{SOLVE_512} --framework megatron-core", _band_example),
    Figure("README.md", "python benchmarks/bench_recipes.py", recipes_table, "recipes"),
    Figure("README.md", "python benchmarks/bench_recipes.py", _recipes_summary),
    Figure("README.md", "planner validate (nemo2407-h100-nemotron-22b-64)",
           _recipes_nemotron_text),
    Figure("README.md", "python benchmarks/bench_recipes.py", _recipes_nemotron_memory),
    Figure("README.md", "planner validate; python benchmarks/bench_recipes.py", _recipes_cp2),
    Figure("README.md", "python benchmarks/bench_recipes.py", _recipes_memory),
    *(Figure("README.md", "planner solve -m {} -c {} --gpus {}".format(*case[:3])
             + (f" --global-batch {case[3]}" if case[3] else "") + " (bench_solve.py's case)",
             _bench_solve_row(case)) for case in BENCH_SOLVE),
    Figure("README.md", "planner solve -m llama3-405b -c dgx-h100-superpod --gpus 16384 "
           "--fix tp=8 --fix pp=16 --fix cp=1", _meta_mfu("README.md")),
    Figure("README.md", "planner solve -m llama3-405b -c dgx-h100-superpod --gpus 16384 "
           "--fix tp=8 --fix pp=16 --fix cp=1", _meta_layout),
    Figure("README.md", "planner solve -m llama3-405b -c dgx-h100-superpod --gpus 16384 "
           "--global-batch 2048", _free_405b),
    Figure("README.md", "planner solve -m llama3-405b -c dgx-h100-superpod --gpus 16384 "
           "--fix tp=8 --fix pp=16 --fix cp=1", _meta_mfu("limitations")),
    Figure("README.md", "python benchmarks/bench_heldout_mosaicml.py", _mosaicml_rest),
    Figure("README.md", "planner validate (held-out residuals)", _where_large),
    Figure("README.md", "planner validate (held-out residuals)", _tt_cp_limit),
    Figure("docs/validation.md", "hardware_catalog/frameworks/megatron-core.yaml (the fit)",
           _moe_host),
    Figure("docs/validation.md", "planner validate", _moe_effect),
    Figure("docs/validation.md", "planner validate", _nemo_gpt3_512),
    Figure("docs/validation.md", "planner validate", _nemotrons),
    Figure("docs/validation.md", "planner validate",
           lambda: f"B200 GPT-3 175B: {shipped('nemo2502-b200-gpt3-175b-512', 0)}."),
    Figure("docs/validation.md", "planner validate",
           lambda: f"NeMo 25.02 GPT-3 175B on 512 H100: "
                   f"{shipped('nemo2502-h100-gpt3-175b-512', 0)}."),
    Figure("docs/validation.md", "python benchmarks/bench_heldout_mosaicml.py",
           _mosaicml_unaffected),
    Figure("docs/validation.md", "python benchmarks/bench_heldout_nemo.py", nemo_table,
           "heldout nemo"),
    Figure("docs/validation.md", "python benchmarks/bench_heldout_mosaicml.py", mosaicml_table,
           "heldout mosaicml"),
    Figure("docs/validation.md", "python benchmarks/bench_heldout_nemo.py; planner evaluate "
           "of its corpus plan at --fix recompute=none", _gb200_fsdp),
    Figure("docs/validation.md", "python benchmarks/bench_heldout_nemo.py", _gb200_fsdp_half),
    Figure("docs/validation.md", "python benchmarks/bench_heldout_nemo.py", _gb200_slow),
    Figure("docs/validation.md", "planner validate", _b200_spread),
    Figure("docs/validation.md", "python benchmarks/bench_heldout_nemo.py", _nemo_405b),
    Figure("docs/validation.md", "planner solve -m llama3-405b -c dgx-h100-superpod --gpus "
           "16384 --fix tp=8 --fix pp=16 --fix cp=1", _meta_mfu("docs/validation.md")),
    Figure("docs/validation.md", "planner validate", _meta_405b),
    Figure("docs/validation.md", "planner validate", _tt_405b_prefetch),
    Figure("docs/validation.md", "planner validate", _tt_cp),
    Figure("docs/validation.md", "planner validate", _tt_tp),
    Figure("README.md", "planner solve -m criteo-dlrm -c dgx-a100-superpod --gpus 4", _criteo),
    Figure("README.md", "tests/test_dlrm.py::test_madmax_table_i (solve_sharding of dlrm-a and "
           "dlrm-b on zionex-128)", _madmax_table_i),
    Figure("docs/validation.md", "python benchmarks/bench_recipes.py",
           _nemotron_340b_memory),
    Figure("README.md", "python benchmarks/bench_scale.py", _weak_scaling),
    Figure("README.md", "planner sweep examples/sweeps/lbnl-hbm.yaml", _lbnl),
    Figure("README.md", "planner sweep examples/sweeps/madmax-scaling.yaml", _madmax_sweep),
    Figure("docs/validation.md", "planner validate (corpus measurements and residuals)",
           _gb200_ratio),
    Figure("docs/validation.md", "planner evaluate of tt-8b-8gpu-fsdp and tt-8b-128gpu-fsdp at "
           "--fix fused_elementwise=false / true", _eager_h100),
)


REGIME_LABELS = ("framework x generation", "GPU count", "sequence length", "precision",
                 "dense / MoE")
FIGURES: tuple[Figure, ...] = (
    Figure("README.md", "planner validate", lambda: heldout_table("framework x generation"),
           "heldout framework x generation"),
    Figure("README.md", "planner validate", heldout_line, "heldout summary"),
    *(Figure("docs/validation.md", "planner validate", (lambda lb: lambda: heldout_table(lb))(
        label), f"heldout {label}") for label in REGIME_LABELS),
    Figure("docs/validation.md", "planner validate", heldout_line, "heldout summary"),
    Figure("docs/validation.md", "planner validate", group_table, "fit groups"),
    Figure("docs/validation.md", "planner validate --json (corpus_sources)", source_table,
           "corpus sources"),
    Figure("README.md", "planner validate", _serving),
    Figure("README.md", "planner validate (memory table)", _memory("README.md")),
    Figure("docs/cost-model.md", "planner validate (memory table)", _memory("docs/cost-model.md")),
    Figure("docs/validation.md", "python benchmarks/bench_heldout_mosaicml.py",
           lambda: f"All 16 runs: {pct(bench('bench_heldout_mosaicml')['all']['mape'])} MAPE."),
    Figure("README.md", "python benchmarks/bench_heldout_mosaicml.py", _mosaicml("README.md")),
    *(Figure("docs/validation.md", "python benchmarks/bench_heldout_torchtitan.py",
             _torchtitan_row(run)) for run, _ in TORCHTITAN_ROWS),
    Figure("docs/validation.md", "python benchmarks/bench_heldout_torchtitan.py",
           _torchtitan_mape),
    *SOLVES,
    *SEEDS_FIGURES,
    *DLRM_DOC,
    *REST_DOCS,
    *README_VALIDATION,
)


def stale(root: Path = ROOT, figures: tuple[Figure, ...] = FIGURES) -> list[str]:
    """One line per figure whose text the document under ``root`` does not hold."""
    out = []
    # line breaks and indentation in prose are the document's, not the figure's
    # a quote marker inside a registered sentence is markup, not its text
    # (each document read once: the registry is long)
    held = {doc: " ".join(QUOTE.sub(" ", (root / doc).read_text(encoding="utf-8")).split())
            for doc in {f.doc for f in figures}}
    for f in figures:
        want = f.text()
        if " ".join(want.split()) not in held[f.doc]:
            out.append(f"{f.doc}: expected {want!r} (from `{f.command}`); re-run it and copy "
                       "the figure")
    return out


_NUM = r"[+\-\u2212]?\d[\d,]*(?:\.\d+)?"


def _shape(want: str) -> re.Pattern[str]:
    """``want`` with each number free and each run of spaces any whitespace: the figure's
    sentence as the document holds it with older numbers."""
    parts = re.split(f"({_NUM})", want)
    rx = "".join(f"({_NUM})" if i % 2 else r"\s+".join(map(re.escape, re.split(r"\s+", p)))
                 for i, p in enumerate(parts))
    return re.compile(rx)


def fix_inline(root: Path = ROOT, figures: tuple[Figure, ...] = FIGURES) -> list[str]:
    """Copy each stale inline figure's numbers into its document where the sentence around
    them is unchanged and found once (the document's line breaks kept); the figures it
    could not place, for a hand edit."""
    left = []
    for f in figures:
        if f.block:
            continue
        path = root / f.doc
        text = path.read_text(encoding="utf-8")
        want = f.text()
        if " ".join(want.split()) in " ".join(QUOTE.sub(" ", text).split()):
            continue
        found = list(_shape(want).finditer(text))
        if len(found) != 1:
            left.append(f"{f.doc}: {len(found)} places for {want!r}")
            continue
        m, nums = found[0], re.findall(_NUM, want)
        out, at = [], m.start()
        for i, n in enumerate(nums, 1):
            out += [text[at:m.start(i)], n]
            at = m.end(i)
        path.write_text(text[:m.start()] + "".join(out) + text[at:], encoding="utf-8")
    return left


def write_blocks(root: Path = ROOT, figures: tuple[Figure, ...] = FIGURES) -> list[str]:
    """Rewrite every generated block between ``<!-- check_docs: NAME -->`` and
    ``<!-- /check_docs -->`` with its figure's text; the documents changed."""
    changed = []
    for doc in sorted({f.doc for f in figures if f.block}):
        path = root / doc
        text = path.read_text(encoding="utf-8")
        new = text
        for f in (f for f in figures if f.doc == doc and f.block):
            start = f"<!-- check_docs: {f.block} -->"
            if start not in new:
                raise SystemExit(f"{doc}: no block '{start}'")
            head, rest = new.split(start, 1)
            _, tail = rest.split("<!-- /check_docs -->", 1)
            new = f"{head}{start}\n{f.text()}\n<!-- /check_docs -->{tail}"
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(doc)
    return changed


#: Every figure the documents hold must be accounted for (issue 37, item 6). A figure is a
#: number with a unit (UNITS). It is accounted for when it is
#:   - in a generated block (``<!-- check_docs: NAME -->`` ... ``<!-- /check_docs -->``),
#:   - inside the text of a registered Figure above, as the document holds it,
#:   - marked as a quotation of a source: ``<!-- quote: SOURCE -->`` (a paper and its table,
#:     a vendor's page, a repository file, the project file that sets the value, or the
#:     measurement a timing was read from) covers every figure of its block: the paragraph,
#:     list item, table or heading the marker sits in, or the one right below a line that
#:     holds only the marker; ``<!-- quote 68.1 s | 9.3 s: SOURCE -->`` covers only the
#:     figures it lists (each must be in the block, or the marker is reported stale);
#:     ``<!-- quote column paper: SOURCE -->`` above a table covers the figures of the
#:     columns whose header starts with ``paper`` (a claim's published value beside ours),
#:   - in code (fenced blocks, ``inline code``), an HTML comment or a link's target, or
#:   - not a figure: a product name's capacity (``A100 80GB``), a GPU count (``8x H100``).
#: ``--unregistered`` lists the others; tools/docs_unregistered.txt holds those still left
#: (the ratchet: tests/test_check_docs.py fails on one not in it, and on an entry of it that
#: is gone, so the list only shrinks).
DOCS = ("README.md", "docs/*.md")
UNITS = r"(?:%|GiB|MiB|TiB|GB/s|TB/s|GB|TB|MB|PB|Gbps|MW|kW|ms|us|µs|min|s|h|x|×)"
NUMBER = r"[-+−±~≈]?\d[\d,]*(?:\.\d+)?"
UNIT_FIGURE = re.compile(rf"(?<![\w.$/#@^-]){NUMBER}(?:\s?(?:-|–|to)\s?{NUMBER})?\s?{UNITS}"
                         r"(?!\w)")
QUOTE = re.compile(r"<!-- quote(?P<only>[^:>]*): (?P<source>[^>]*?) -->")
#: a GPU or system name right before a capacity (``A100 80GB``) or after a count (``8x H100``)
PRODUCT = r"(?:A100|H100|H200|B200|GB200|MI300X|MI325X|DGX A100|DGX H100)"  # any case
BASELINE = ROOT / "tools" / "docs_unregistered.txt"


@dataclass(frozen=True)
class Loose:
    """A figure no registered command or quotation accounts for."""

    doc: str
    line: int
    figure: str
    context: str  # the line's text around it

    @property
    def key(self) -> str:
        """What the baseline records: the document, the figure's unit and its context with
        every digit as ``#`` (a refit that moves the number keeps the key; new prose not)."""
        return "\t".join((self.doc, re.sub(r"\d", "#", self.figure),
                          re.sub(r"\d", "#", self.context)))


def documents(root: Path = ROOT) -> list[str]:
    return sorted({str(p.relative_to(root)) for pat in DOCS for p in root.glob(pat)})


def _blank(m: re.Match) -> str:
    return re.sub(r"[^\n]", " ", m[0])


def _blocks(lines: list[str]) -> list[int]:
    """A block number per line: a blank line, a heading, a list item or a table's edge starts
    a new block; a line that holds only a quote marker belongs to the block below it."""
    ids, n, prev_table = [], 0, False
    item = re.compile(r"\s*(?:[-*+]|\d+\.)\s")
    for ln in lines:
        table = ln.lstrip().startswith("|")
        if not ln.strip() or ln.startswith("#") or item.match(ln) or table != prev_table:
            n += 1
        ids.append(n)
        prev_table = table
        if not ln.strip():
            n += 1
    for i in range(len(lines) - 2, -1, -1):
        if QUOTE.fullmatch(lines[i].strip()):
            ids[i] = ids[i + 1]
    return ids


def scan(doc: str, root: Path = ROOT, figures: tuple[Figure, ...] = FIGURES
         ) -> tuple[list[Loose], dict[str, int], list[str]]:
    """The loose figures of ``doc``, the count of each kind accounted for (``registered``,
    ``quoted``, ``other``: code, comments, non-figures) and the stale quote markers."""
    raw = (root / doc).read_text(encoding="utf-8")
    code = re.sub(r"```.*?```", _blank, raw, flags=re.S)
    code = re.sub(r"`[^`\n]*`", _blank, code)
    lines = code.split("\n")
    block_of = _blocks(lines)
    quotes: dict[int, list[tuple[int, set[str] | None]]] = {}
    columns: dict[int, list[tuple[int, str]]] = {}  # block -> (marker line, column header)
    for i, ln in enumerate(lines):
        for m in QUOTE.finditer(ln):
            if m["only"].strip().startswith("column "):
                columns.setdefault(block_of[i], []).append((i, m["only"].strip()[7:].strip()))
                continue
            only = {x.strip() for x in m["only"].split("|")} if m["only"].strip() else None
            quotes.setdefault(block_of[i], []).append((i, only))
    first_row = {}  # block -> its first line (a table's header)
    for i, b in enumerate(block_of):
        if lines[i].lstrip().startswith("|"):
            first_row.setdefault(b, i)
    # the markers' own text (a figure a listing names) is no figure of the document
    text = QUOTE.sub(_blank, raw)
    code = QUOTE.sub(_blank, code)
    masked = re.sub(r"<!-- check_docs: .*?<!-- /check_docs -->", _blank, code, flags=re.S)
    masked = re.sub(r"<!--.*?-->", _blank, masked, flags=re.S)
    masked = re.sub(r"\]\([^)]*\)", _blank, masked)
    spans = []
    for f in figures:
        if f.doc == doc and not f.block:
            spans += [(m.start(), m.end()) for m in re.finditer(
                r"\s+".join(map(re.escape, f.text().split())), text)]
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    counts = {"registered": 0, "quoted": 0, "other": 0}
    loose, used = [], set()
    for m in UNIT_FIGURE.finditer(text):
        line = next(i for i in range(len(starts) - 1, -1, -1) if starts[i] <= m.start())
        fig = " ".join(m[0].split())
        before, after = text[max(0, m.start() - 16):m.start()], text[m.end():m.end() + 12]
        if masked[m.start():m.end()] != m[0]:
            counts["other"] += 1  # in code, a comment, a generated block or a link
        elif any(a <= m.start() < b for a, b in spans):
            counts["registered"] += 1
        elif (re.search(rf"{PRODUCT}[\s-]+$", before) and re.fullmatch(r"\d+\s?GB", fig)) or (
                re.fullmatch(r"[\d,]+\s?[x×]", fig) and re.match(rf"\s+{PRODUCT}\b", after,
                                                                 re.I)) or (
                re.fullmatch(rf"{NUMBER} [x×]", fig) and re.match(r" ", after)):
            # a capacity in a product's name, a GPU count, a spaced x (a product: 4 x 8)
            counts["other"] += 1
        else:
            cover = [(i, only) for i, only in quotes.get(block_of[line], [])
                     if only is None or fig in only]
            b = block_of[line]
            if b in columns and b in first_row:
                col = text[starts[line]:m.start()].count("|") - 1
                head = [c.strip() for c in lines[first_row[b]].strip().strip("|").split("|")]
                cover += [(i, None) for i, name in columns[b]
                          if 0 <= col < len(head) and head[col].startswith(name)]
            if cover:
                counts["quoted"] += 1
                used.update((i, fig) for i, _ in cover)
            else:
                ctx = " ".join(text[starts[line]:starts[line + 1] if line + 1 < len(starts)
                                    else len(text)].split())
                loose.append(Loose(doc, line + 1, fig, ctx))
    stale_quotes = [f"{doc}:{i + 1}: quote marker lists {x!r}, not a figure of its block"
                    for q in quotes.values() for i, only in q for x in sorted(only or ())
                    if (i, x) not in used]
    stale_quotes += [f"{doc}:{i + 1}: quote marker names no source" for i, ln in
                     enumerate(lines) for m in QUOTE.finditer(ln) if not m["source"].strip()]
    return loose, counts, stale_quotes


def unregistered(root: Path = ROOT, figures: tuple[Figure, ...] = FIGURES
                 ) -> tuple[list[Loose], dict[str, dict[str, int]], list[str]]:
    """Every loose figure of README.md and docs/, the counts per document, stale markers."""
    loose, counts, bad = [], {}, []
    for doc in documents(root):
        lo, c, b = scan(doc, root, figures)
        loose += lo
        counts[doc] = {**c, "loose": len(lo)}
        bad += b
    return loose, counts, bad


def read_baseline(path: Path = BASELINE) -> list[str]:
    if not path.exists():
        return []
    return [x for x in path.read_text(encoding="utf-8").split("\n")
            if x and not x.startswith("#")]


def write_baseline(loose: list[Loose], path: Path = BASELINE) -> None:
    head = ("# Figures of README.md and docs/ that no registered command or quotation accounts\n"
            "# for yet (python tools/check_docs.py --unregistered --write-baseline). The list\n"
            "# may only shrink: register a figure or mark its quotation, then rewrite it.\n"
            "# document<TAB>figure<TAB>its line, digits as #\n")
    path.write_text(head + "".join(f"{x.key}\n" for x in loose), encoding="utf-8")


def ratchet(loose: list[Loose], baseline: list[str]) -> tuple[list[Loose], list[str]]:
    """The loose figures the baseline does not hold, and its entries no longer loose."""
    from collections import Counter

    left = Counter(baseline)
    new = []
    for x in loose:
        if left[x.key] > 0:
            left[x.key] -= 1
        else:
            new.append(x)
    return new, sorted(left.elements())


def main(argv: list[str]) -> int:
    if "--unregistered" in argv:
        loose, counts, bad = unregistered()
        for x in loose:
            print(f"{x.doc}:{x.line}: {x.figure}: {x.context}")
        for doc, c in counts.items():
            print(f"{doc}: {c['registered']} registered, {c['quoted']} quoted, "
                  f"{c['other']} in code or not figures, {c['loose']} unregistered",
                  file=sys.stderr)
        print("\n".join(bad), file=sys.stderr) if bad else None
        if "--write-baseline" in argv:
            write_baseline(loose)
            print(f"wrote {len(loose)} entries to {BASELINE.relative_to(ROOT)}", file=sys.stderr)
            return 1 if bad else 0
        new, gone = ratchet(loose, read_baseline())
        print(f"{len(loose)} unregistered figures ({len(read_baseline())} in the baseline, "
              f"{len(new)} new, {len(gone)} gone)", file=sys.stderr)
        return 1 if new or gone or bad else 0
    if "--write" in argv:
        print("rewrote generated blocks in " + (", ".join(write_blocks()) or "nothing"))
    if "--fix" in argv:  # numbers of stale sentences copied in; the rest by hand
        print("\n".join(fix_inline()) or "every stale inline figure rewritten")
    if "--list" in argv:
        for f in FIGURES:
            print(f"{f.doc}: `{f.command}`: {f.text()!r}")
        return 0
    bad = stale()
    print("\n".join(bad) or f"{len(FIGURES)} figures match their commands")
    return 1 if bad else 0


if __name__ == "__main__":
    # the checkout's planner, not another copy installed: the figures are this tree's
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
