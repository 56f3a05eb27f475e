"""``planner serve``: the cheapest (or fastest) serving plan for a workload within its
latency SLOs, found exactly by the integer search and checked by the evaluator.
docs/serving.md states the model."""

from __future__ import annotations

import time
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from planner.api import evaluate_serve
from planner.api import serve as run_serve
from planner.api import serve_clusters
from planner.cli.console import (_emit_json, check_files, err, out, say_failed_overrun,
                                 say_overrun)
from planner.cli.export import write_folder
from planner.cli.options import command
from planner.errors import InfeasibleError, InputError
from planner.export.launch import serve_launch_files
from planner.export.readback import serve_plan_from_vllm
from planner.report.serve import serve_notes, time_limit_line
from planner.specs.loaders import load_model
from planner.procurement.serve import ServeProcurement
from planner.specs.requests import ServeOutput, ServeRequest, engine_profile
from planner.specs.serve import ServeEngine, load_engine
from planner.validation.band import SERVING
from planner.export.serve_launch import launch_commands
from planner.report.serve import plot_serve_pareto
from planner.specs.names import check_name
from planner.validation.serve_sim import check_requests, simulate

@command(ServeRequest, ServeOutput)
def serve(request: ServeRequest, output: ServeOutput) -> None:
    """Find the best serving plan: layout, concurrency, precision, pools and replica counts
    within the TTFT/TPOT SLOs, exactly (CP-SAT, MILP or brute force over the same tables)."""
    name = request.model
    check_files([("--plot", output.plot_path)],
                [("the model", name), *(("a cluster", c) for c in request.cluster)],
                output.force)
    _simulate_bounds(output.simulate_requests, request.osl)
    if (output.launcher or output.launch_out) and not (output.launch and output.launcher
                                                       and output.launch_out):
        raise InputError("--launcher and --launch-out go together, with --launch (the "
                         "commands the jobs run)")
    eng, only = _engine(request.engine, output.launch)
    m = load_model(name)
    weights = _weights(name, m, output.model_path, output.launch)
    clusters = serve_clusters(request.cluster)
    if request.from_vllm is not None:  # vLLM's own profile unless --engine names another
        eng = eng if request.engine is not None else load_engine("vllm")
    request = request.model_copy(update={"model": m, "cluster": clusters, "engine": eng})
    if request.from_vllm is not None:
        return _from_vllm(request, m, clusters[0], eng, output.as_json)
    start = time.monotonic()
    try:
        res = run_serve(request)
    except InfeasibleError as e:
        _no_plan(e, start, request.time_limit_s, output.as_json, request.backend, eng)
        raise
    calib, quant = serve_notes(res.plan, m.moe is not None, m.mla is not None)
    for n in calib:
        err.print(f"[yellow]calibration:[/] {escape(n)}")
    for n in quant:
        err.print(f"[yellow]quantization:[/] {escape(n)}")
    say_overrun(res.solver, request.time_limit_s)
    sim = _simulate(m, clusters, res, request.workload, output.simulate_requests, eng)
    if output.plot_path:
        plot_serve_pareto(res.pareto, output.plot_path,
                          f"{name}: ISL {request.isl}, OSL {request.osl}", force=output.force)
    cmds = _launch(weights, res.plan, only) if weights else None
    if output.launcher and weights:
        files = serve_launch_files(output.launcher, only or eng.launcher or "trtllm", weights,
                                   res.plan, {c.gpu.name: c.node_size for c in clusters},
                                   name=m.name)
        write_folder(files, output.launch_out or "", output.force, "--launch-out")
    if output.as_json:
        _emit_json(_result_json(res, eng, calib, quant, request.pareto, sim, cmds))
    else:
        _print_text(res, request.pareto, sim, cmds, eng)
    if not res.estimate.feasible:
        raise typer.Exit(1)


def _no_plan(e: InfeasibleError, start: float, time_limit: float, json_: bool, backend: str,
             eng: Any) -> None:
    """The overrun line of a search that found no plan, and with --json the one object
    scripts get (then the reasons on stderr and exit 1)."""
    over = say_failed_overrun(start, time_limit, "no plan found; tabulating goes on past the "
                              "limit until a first plan is possible, and a request no layout "
                              "serves is checked against every layout")
    if json_:
        _emit_json({"plan": None, "estimate": None, "engine": _engine_json(eng),
                    "solver": {"backend": backend, "status": e.status, **over},
                    "message": str(e), "reasons": e.reasons, "hints": e.hints,
                    "reachable": getattr(e, "reachable", {})})


def _result_json(res: Any, eng: Any, calib: list[str], quant: list[str], pareto: bool,
                 sim: dict | None, launch: dict | None) -> dict:
    return {"plan": res.plan.to_dict(), "estimate": {**res.estimate.to_json(),
                                                     **SERVING.to_json()},
            "engine": _engine_json(eng), "solver": res.solver, "calibration_notes": calib,
            "quantization_notes": quant, **({"pareto": res.pareto} if pareto else {}),
            **({"simulation": sim} if sim else {}), **({"launch": launch} if launch else {})}


def _engine_json(eng: Any) -> dict:
    return {"name": eng.name, "version": eng.version}


def _engine(ref: str | None, launch: bool) -> tuple[Any, str | None]:
    """--engine's profile (default: the request's, DEFAULT_ENGINE) and the engine whose
    launch command --launch prints: None (all of them) unless --engine was given; an
    engine file that names no launcher is refused then, not guessed."""
    eng = engine_profile(ref)
    if ref is None or not launch:
        return eng, None
    if eng.launcher is None:
        raise InputError(f"--engine {eng.name}: names no launcher (trtllm, vllm or sglang), "
                         "so --launch has no command for it; add 'launcher:' to its file")
    return eng, eng.launcher


def _print_text(res: Any, pareto: bool, sim: dict | None, launch: dict | None,
                eng: Any) -> None:
    """The plan, then the simulation's percentiles and the launch commands if asked."""
    out.print(f"engine: {escape(eng.name)}" + (f" ({escape(eng.version)})" if eng.version else ""))
    _print(res, pareto)
    out.print(f"expected error: {SERVING.note}", highlight=False, soft_wrap=True)
    if sim:
        out.print(f"simulation ({sim['requests']:,} requests after warm-up, seed 0): TTFT "
                  f"P50 {sim['ttft_p50_ms']:.1f} / P99 {sim['ttft_p99_ms']:.1f} ms, TPOT "
                  f"P50 {sim['tpot_p50_ms']:.2f} / P99 {sim['tpot_p99_ms']:.2f} ms")
    for engine, pools in (launch or {}).items():
        for pool in pools:
            out.print(f"[bold]{engine}[/bold] {pool['pool']} x {pool['replicas']} "
                      f"({pool['gpus_per_replica']} x {escape(str(pool['gpu']))} each):")
            print("  " + pool["command"])
            for note in pool["notes"]:
                print("  # " + note)


def _weights(model: str, m: Any, model_path: str | None, launch: bool) -> str | None:
    """What the --launch commands load (None without --launch): --model-path, else the
    folder of a Hugging Face config.json given as -m, else the model file's hf_id. A
    catalog name or a planner model file is no checkpoint an engine can load."""
    from pathlib import Path

    if not launch:
        if model_path is not None:
            raise InputError("--model-path: names the weights of the --launch commands; "
                             "give --launch too")
        return None
    if model_path is not None:
        if not model_path.strip():
            raise InputError("--model-path: expected a Hugging Face id or a checkpoint path, "
                             "got an empty string")
        return check_name(model_path, "--model-path", max_chars=None)
    if model.endswith(".json"):
        return str(Path(model).parent)
    if m.hf_id:
        return m.hf_id
    raise InputError(f"--launch: model {m.name!r} names no weights (no hf_id in its model "
                     "file); give --model-path HF_ID_OR_PATH")


def _launch(weights: str, plan, only: str | None = None) -> dict:
    cmds = launch_commands(weights, plan)
    return cmds if only is None else {only: cmds[only]}


def _simulate_bounds(n: int, osl: int) -> None:
    """Refuse an oversized --simulate before the search, not after it."""
    if n:
        check_requests(n, osl)


def _simulate(model, clusters, res, w, n: int, eng) -> dict | None:
    if not n:
        return None

    main = next(c for c in clusters if res.plan.gpu in (c.gpu.name, *c.gpu.aliases))
    return simulate(model, main, res.plan, w, n, engine=eng, others=tuple(clusters)).to_json()


def _pool(plan, role: str) -> str:
    """One pool in words: what a prefill pool's concurrency and a decode pool's chunk
    would say does not apply to it."""
    text = (f"{role}: {plan.replicas} x ({escape(str(plan.gpu))} tp{plan.tp} pp{plan.pp}"
            + (f" ep{plan.ep}" if plan.ep > 1 else "")
            + f"), weights {plan.weight_dtype}, KV {plan.kv_dtype}")
    if role != "prefill":
        text += f", concurrency {plan.concurrency}"
    if role != "decode":
        text += f", prefill chunk {plan.prefill_chunk}"
    return text


def _print(res, pareto: bool) -> None:
    plan, e, s = res.plan, res.estimate, res.solver
    out.print(f"[bold]{s['mode']} serving[/bold], {e.num_gpus} GPUs "
              f"({s['backend']}, {s['status']}, {s['rows']:,} layouts, {s['wall_s']:.2f} s)")
    if (line := time_limit_line(s)) is not None:
        out.print(f"  [yellow]{line}[/]")
    out.print("  " + _pool(plan, "decode" if plan.prefill else "replicas"))
    if plan.prefill:
        out.print("  " + _pool(plan.prefill, "prefill"))
    t = Table(header_style="bold")
    t.add_column("metric")
    t.add_column("value", justify="right")
    pct = f"P{e.percentile * 100:g}"
    for name, v in (("TTFT mean / " + pct + " ms", _pair(e.ttft_ms, e.ttft_p99_ms, 1)),
                    ("TPOT mean / " + pct + " ms", _pair(e.tpot_ms, e.tpot_p99_ms, 2)),
                    ("decode batch (mean, cap)", "-" if e.decode_batch is None
                     else f"{e.decode_batch:,.1f} of {plan.concurrency:,}"),
                    ("requests/s", f"{e.requests_per_s:,.2f}"),
                    ("output tokens/s", f"{e.output_tokens_per_s:,.0f}"),
                    ("output tokens/s per GPU", f"{e.output_tokens_per_s_per_gpu:,.1f}"),
                    ("memory per GPU GiB", f"{e.memory_per_gpu_gib:.1f}"),
                    ("$ per million output tokens", "-" if e.usd_per_million_tokens is None
                     else f"{e.usd_per_million_tokens:.3f}"),
                    ("power kW", f"{(e.power_w or 0) / 1e3:.1f}")):
        t.add_row(name, v)
    out.print(t)
    for r in e.reasons:
        err.print(f"[red]infeasible:[/] {r}")
    if pareto:
        out.print("[bold]Pareto front[/bold] (tokens/s/user, tokens/s/GPU, layout)")
        for p in res.pareto:
            q = p["plan"]
            out.print(f"  {p['tokens_per_s_per_user']:8.1f} {p['tokens_per_s_per_gpu']:10.1f}  "
                      f"{escape(str(p['gpu']))} tp{q['tp']} pp{q['pp']} {q['weight_dtype']} "
                      f"B{q['concurrency']}")


def _pair(a: float | None, b: float | None, digits: int) -> str:
    if a is None or b is None:
        return "saturated"
    return f"{a:.{digits}f} / {b:.{digits}f}"


def show_procure_serve(res: ServeProcurement, eng: ServeEngine, rate: float | None,
                       json_: bool) -> None:
    """``planner procure --serve``'s answer: the cheapest fleet per GPU type and overall,
    as one JSON object or a table."""
    if json_:
        _emit_json({"engine": _engine_json(eng), **res.to_json()})
        return
    t = Table(title=f"Serving {rate:g} req/s ({res.mode}, {escape(eng.name)}): cheapest fleet "
              "per GPU type",
              header_style="bold")
    for col in ("GPU", "GPUs", "$/h", "$/M output tok", "mode", "layout"):
        t.add_column(col, justify="left" if col in ("GPU", "mode", "layout") else "right")
    # cheapest first; GPU types that cannot serve the rate last
    rows = sorted(res.per_gpu, key=lambda g: (g[1] is None, g[1].estimate.usd_per_hour
                                              if g[1] is not None else 0.0))
    for gpu, r, why in rows:
        if r is None:
            t.add_row(gpu, "-", "-", "-", "-", why[:60])
            continue
        e = r.estimate
        t.add_row(gpu, str(e.num_gpus), f"{e.usd_per_hour:,.2f}", f"{e.usd_per_million_tokens:.3f}",
                  r.solver["mode"], _short(r.plan))
    out.print(t)
    b = res.best.estimate
    gpus = f"{b.num_gpus} GPU{'s' * (b.num_gpus != 1)}"
    out.print(f"[bold]cheapest:[/bold] {gpus}, ${b.usd_per_hour:,.2f}/h, "
              f"${b.usd_per_million_tokens:.3f} per million output tokens: {_short(res.best.plan)}")


def _short(plan) -> str:
    one = f"{plan.replicas}x{plan.gpu} tp{plan.tp}pp{plan.pp} {plan.weight_dtype} B{plan.concurrency}"
    if plan.prefill is None:
        return one
    p = plan.prefill
    return f"decode {one} + prefill {p.replicas}x{p.gpu} tp{p.tp}pp{p.pp} {p.weight_dtype}"



def _from_vllm(request: ServeRequest, m: Any, cluster: Any, eng: Any, json_: bool) -> None:
    """One vLLM command's plan costed under the workload (``--from-vllm``), with the
    arguments not read."""
    plan, ignored = serve_plan_from_vllm(request.from_vllm or "", m, cluster)
    w = request.workload
    est = evaluate_serve(m, cluster, plan, w.isl, w.osl, rate_rps=w.rate_rps,
                         ttft_ms=w.ttft_ms, tpot_ms=w.tpot_ms, percentile=w.percentile,
                         engine=eng)
    if json_:
        _emit_json({"plan": plan.to_dict(), "estimate": {**est.to_json(), **SERVING.to_json()},
                    "engine": _engine_json(eng), "ignored_arguments": ignored})
    else:
        out.print(f"vLLM command: {plan.gpus_per_replica} x {escape(cluster.gpu.name)}, tp "
                  f"{plan.tp}, pp {plan.pp}, concurrency {plan.concurrency}, weights "
                  f"{plan.weight_dtype}, KV {plan.kv_dtype} (engine {escape(eng.name)})",
                  highlight=False)
        ttft = "-" if est.ttft_ms is None else f"{est.ttft_ms:.1f} ms"
        tpot = "-" if est.tpot_ms is None else f"{est.tpot_ms:.2f} ms"
        out.print(f"TTFT {ttft}, TPOT {tpot} at P{100 * est.percentile:g}; capacity "
                  f"{est.capacity_rps:.2f} requests/s, {est.output_tokens_per_s:,.0f} output "
                  f"tokens/s", highlight=False)
        for why in est.reasons:
            out.print(f"[red]not met:[/] {escape(why)}")
        if ignored:
            err.print("[yellow]not read:[/] " + escape(" ".join(ignored)))
    if not est.feasible:
        raise typer.Exit(1)
