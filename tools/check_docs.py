"""Check that the figures the README and docs quote are what their commands give now.

Each :class:`Figure` names a document, the command its numbers come from, and the exact
text the document must contain, rendered from that command's output. A figure the code
moved and the document did not is reported with the text expected, so the fix is to re-run
the command and copy the figure (or to update this registry when the text itself moved).

    python tools/check_docs.py          # every figure; exit 1 on a stale one
    python tools/check_docs.py --list   # the registry
    python tools/check_docs.py --write  # rewrite the generated blocks (tables between
                                        # <!-- check_docs: NAME --> markers), then check
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
benchmarks, solves of a second or two through ``planner.solve``, the catalog), so
``tests/test_check_docs.py`` checks them all on every test run; each command runs once, its
figures share the result.
"""

from __future__ import annotations

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


def _nemo(run: str, digits: int = 1) -> str:
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
    return (f"GB200 Llama 3 70B with Megatron-FSDP at tp 1: {_nemo(run)}.** At microbatch "
            f"1 x 8,192 tokens its activations need {none.memory_per_gpu_bytes / 2**30:.0f} GiB "
            f"without recomputation")


@lru_cache(maxsize=None)
def _gb200_fsdp_half() -> str:
    mem = bench_rows("bench_heldout_nemo")["nemo2504-gb200-llama3-70b-fsdp"]["memory_GiB"]
    return f"which the solver picks here ({mem:.0f} GiB) and the corpus row assumes"


@lru_cache(maxsize=None)
def _gb200_slow() -> str:
    return (f"GB200 GPT-3 175B and Llama 3 8B: {_nemo('nemo2504-gb200-gpt3-175b')} and "
            f"{_nemo('nemo2504-gb200-llama3-8b')}.")


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
    return (f"{_nemo('nemo2502-b200-llama3-405b')} on B200, "
            f"{_nemo('nemo2504-gb200-llama3-405b')} on GB200.")


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
def needs(model: str, cluster: str, gpus: int, offload: bool = True) -> tuple[float, float]:
    fix = None if offload else {"offload_optimizer": False, "offload_params": False}
    kw = {} if offload else {"global_batch_size": OFFLOAD[3]}
    return _needs(model, cluster, gpus, fix, **kw)


@lru_cache(maxsize=None)
def _no_offload() -> str:
    need, _ = needs(*OFFLOAD[:3], offload=False)
    return f"needs {need:.0f} GiB per GPU at best without it"


@lru_cache(maxsize=None)
def _oom_example() -> str:
    """The exit-code example: the offload example's solve without offload (solved once)."""
    need, hbm = needs(*OFFLOAD[:3], offload=False)
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
MADMAX_TABLE_I = (("dlrm-a", 1.2e6), ("dlrm-b", 3.4e6))


@lru_cache(maxsize=None)
def _madmax_table_i() -> str:
    """README: tests/test_dlrm.py::test_madmax_table_i's solves (CP-SAT, 60 s limit)."""
    from formulations.dlrm.search import solve_sharding
    from planner.specs.loaders import load_cluster, load_model

    out = []
    for name, measured in MADMAX_TABLE_I:
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
def sweep_rows(path: str) -> dict[tuple, dict[str, Any]]:
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

    rows = sweep_rows("examples/sweeps/lbnl-hbm.yaml")
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
    rows = sweep_rows("examples/sweeps/madmax-scaling.yaml")
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
    *README_VALIDATION,
)


def stale(root: Path = ROOT, figures: tuple[Figure, ...] = FIGURES) -> list[str]:
    """One line per figure whose text the document under ``root`` does not hold."""
    out = []
    for f in figures:
        want = f.text()
        # line breaks and indentation in prose are the document's, not the figure's
        # a quote marker inside a registered sentence is markup, not its text
        if " ".join(want.split()) not in " ".join(QUOTE.sub(" ", (root / f.doc).read_text(
                encoding="utf-8")).split()):
            out.append(f"{f.doc}: expected {want!r} (from `{f.command}`); re-run it and copy "
                       "the figure")
    return out


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
