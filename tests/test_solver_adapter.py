"""One solver adapter (formulations/linear.py): the only module that builds a solver, and
whose sessions never call an answer cut short by the time limit optimal; the training,
serving and DLRM searches pass that on as ``time_limit`` with the incumbent's gap."""

from __future__ import annotations

import ast
import random
from dataclasses import replace

import pulp
import pytest
from ortools.sat.python import cp_model

from conftest import ROOT
from formulations.linear import CpsatSession, LinearModel, MilpSession

SOLVER_PACKAGES = ("ortools", "pulp", "highspy")
SOLVER_CALLS = ("CpSolver(", "CpModel(", "LpProblem(", "Highs(")
ADAPTER = ROOT / "formulations" / "linear.py"


def _solver_uses(path) -> list[str]:
    text = path.read_text()
    found = [call for call in SOLVER_CALLS if call in text]
    for node in ast.walk(ast.parse(text)):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        found += [n for n in names if n.split(".")[0] in SOLVER_PACKAGES]
    return found


def test_only_the_adapter_talks_to_a_solver():
    """Every formulation builds a LinearModel and solves it in a session of
    formulations/linear.py (or hands its float LP to linear.highs_bound)."""
    files = [p for d in ("formulations", "planner") for p in sorted((ROOT / d).rglob("*.py"))
             if p != ADAPTER]
    assert len(files) > 50
    offenders = {str(p.relative_to(ROOT)): u for p in files if (u := _solver_uses(p))}
    assert offenders == {}, f"build solvers in formulations/linear.py only: {offenders}"
    assert _solver_uses(ADAPTER)  # the scan sees a solver where there is one


def market_split(m: int = 4, n: int = 30, seed: int = 1) -> LinearModel:
    """Cornuejols-Dawande market split with slacks: x = 0 is feasible at once, the proof
    of optimality takes far longer than the limits below (m = 4, n = 10 (m - 1))."""
    rng = random.Random(seed)
    lm = LinearModel(objective_dim="count")
    x = [lm.binary(f"x{j}") for j in range(n)]
    for i in range(m):
        a = [rng.randint(0, 99) for _ in range(n)]
        half = sum(a) // 2
        over = lm.var(f"over{i}", 0, sum(a), integer=True)
        under = lm.var(f"under{i}", 0, sum(a), integer=True)
        lm.add({**dict(zip(x, a)), over: -1, under: 1}, lb=half, ub=half)
        lm.objective[over] = lm.objective[under] = 1
    return lm


@pytest.mark.parametrize("session", [CpsatSession, MilpSession])
def test_a_time_limited_incumbent_is_not_optimal(session):
    """Both backends stop with an incumbent; PuLP calls HiGHS's "Optimal" (its status
    with an unproven incumbent too), the session must not."""
    lm = market_split()
    out = session(lm).solve(0.2)
    assert out.status == "feasible" and out.values is not None
    assert len(out.values) == len(lm.vars) and out.objective >= 0
    if session is CpsatSession:
        assert out.bound is not None and out.bound <= out.objective


def test_a_proof_is_optimal_on_both_backends():
    lm = LinearModel(objective_dim="count", maximize=True)
    a, b = lm.var("a", 0, 10, integer=True), lm.var("b", 0, 10, integer=True)
    lm.add({a: 2, b: 3}, ub=12)
    lm.objective = {a: 3, b: 4}
    for session in (CpsatSession(lm), MilpSession(lm)):
        out = session.solve(10)
        assert out.status == "optimal" and out.values == [6, 0] and out.objective == 18


# ---- the searches pass a time-limited answer on as time_limit ---------------------------
def _cpsat_cut_short(monkeypatch):
    """CP-SAT's answers as if its time ran out after the last solution it found."""
    real = cp_model.CpSolver.solve

    def cut_short(self, *args, **kwargs):
        status = real(self, *args, **kwargs)
        return cp_model.FEASIBLE if status == cp_model.OPTIMAL else status

    monkeypatch.setattr(cp_model.CpSolver, "solve", cut_short)


def _milp_cut_short(monkeypatch):
    """HiGHS's answers as PuLP reports a time-limited incumbent: "Optimal", but only
    integer feasible."""
    real = pulp.LpProblem.solve

    def cut_short(self, *args, **kwargs):
        status = real(self, *args, **kwargs)
        if self.sol_status == pulp.constants.LpSolutionOptimal:
            self.sol_status = pulp.constants.LpSolutionIntegerFeasible
        return status

    monkeypatch.setattr(pulp.LpProblem, "solve", cut_short)


CUT_SHORT = {"cpsat": _cpsat_cut_short, "milp": _milp_cut_short}


def _serve_problem(objective: str):
    from formulations.serve.search import ServeProblem
    from formulations.serve.space import Row
    from planner.specs.loaders import load_cluster
    from planner.specs.serve import ServePlan

    h100 = load_cluster("dgx-h100-superpod")
    rows = [Row("aggregated", ServePlan(tp=g, gpu=h100.gpu.name), h100, g, cap,
                {"gpus": g, "cost": 3 * g, "energy": 5 * g})
            for g, cap in ((1, 7), (2, 15), (4, 29))]
    rate, budget = (None, 12) if objective == "throughput" else (100, None)
    return ServeProblem({"aggregated": rows}, objective, rate, budget, 2)


def _milp_has_bound() -> bool:
    """Whether PuLP solves with HiGHS (whose MIP dual bound the session reads); with CBC
    the MILP gap is unknown."""
    cls = getattr(pulp, "HiGHS", None)
    return cls is not None and cls().available()


@pytest.mark.parametrize("backend", ["cpsat", "milp"])
@pytest.mark.parametrize("objective", ["gpus", "throughput"])
def test_serve_time_limited_is_time_limit(monkeypatch, backend, objective):
    """Cut short, the answer keeps its incumbent (here the optimum the solver had found
    but not proven) and the gap to the solver's bound."""
    from formulations.serve.search import feasible, solve, value_of

    problem = _serve_problem(objective)
    proven = solve(problem, backend)
    assert proven.status == "optimal" and proven.gap == 0.0
    CUT_SHORT[backend](monkeypatch)
    out = solve(problem, backend)
    assert out.status == "time_limit"
    # an optimum: the proven one's value (the fleet itself may be another of the tied
    # optima: CP-SAT's parallel workers find them in no fixed order)
    assert out.objective == proven.objective
    assert feasible(problem, out.counts) and value_of(problem, out.counts) == proven.objective
    if backend == "cpsat" or _milp_has_bound():
        assert out.gap is not None and 0.0 <= out.gap < 1e-6
        assert (out.bound >= out.objective * (1 - 1e-9) if objective == "throughput"
                else out.bound <= out.objective * (1 + 1e-9))
    else:
        assert out.gap is None


def _energy_problem(seed: int):
    """The issue's reproduction: 400 synthetic layouts, up to 12 mixed, energy at a rate
    of 150 times the largest capacity (HiGHS needs longer than 0.2 s to prove these)."""
    from formulations.serve.search import ServeProblem
    from test_serve_search import _random_row

    rng = random.Random(seed)
    rows = [_random_row(rng, "aggregated", 10**5) for _ in range(400)]
    return ServeProblem({"aggregated": rows}, "energy", 150 * max(r.cap for r in rows), None,
                        12)


@pytest.mark.parametrize("seed", [1, 2])
def test_serve_milp_reproduction_is_honest(seed):
    """MILP at 0.2 s on the reproduction: never a false optimal; a time-limited answer is
    a feasible incumbent no better than CP-SAT's proven optimum, with a bound no worse
    and the gap between them. (Whether 0.2 s suffices depends on the machine, so both
    answers are checked for what they claim.)"""
    from formulations.serve.search import feasible, solve

    problem = _energy_problem(seed)
    best = solve(problem, "cpsat", 30)
    assert best.status == "optimal"
    out = solve(problem, "milp", 0.2)
    assert out.status in ("optimal", "time_limit")
    if out.status == "optimal":
        assert out.objective == best.objective
        return
    assert out.counts and feasible(problem, out.counts) and out.objective >= best.objective
    if _milp_has_bound():
        assert out.bound <= best.objective * (1 + 1e-9)
        assert out.gap == pytest.approx((out.objective - out.bound) / out.objective)


@pytest.mark.parametrize("backend", ["cpsat", "milp"])
def test_dlrm_time_limited_is_time_limit(monkeypatch, backend):
    from formulations.dlrm.search import solve_sharding
    from test_dlrm import random_instance

    m, c = random_instance(3)
    proven = solve_sharding(m, c, backend, 20, workers=1)
    assert proven.status == "optimal"
    CUT_SHORT[backend](monkeypatch)
    out = solve_sharding(m, c, backend, 20, workers=1)
    assert out.status == "time_limit" and out.estimate.feasible
    assert out.estimate.iteration_time_s == pytest.approx(proven.estimate.iteration_time_s)
    if backend == "cpsat":  # CP-SAT's bound reaches the answer's gap
        assert out.bound_s is not None and out.optimality_gap is not None


def test_serve_gap_is_over_every_mode(monkeypatch):
    """The plan comes from a proven mode but another mode ran out of time: the gap is to
    the best any mode could reach (the other's bound), not the chosen mode's own proof."""
    import planner.orchestration.serve as orch
    from formulations.serve.search import ServeSolution
    from planner.specs.serve import ServeWorkload

    rows = _serve_problem("gpus").pools["aggregated"]
    answers = iter([ServeSolution("optimal", "cpsat", 10, {("aggregated", 0): 10}, bound=10),
                    ServeSolution("time_limit", "cpsat", 12, {("aggregated", 1): 6}, bound=6)])
    monkeypatch.setattr(orch, "solve", lambda *args: next(answers))
    tabs = {"aggregated": {"aggregated": rows}, "other": {"aggregated": rows}}
    w = ServeWorkload(isl=128, osl=16, rate_rps=1)
    mode, _, sol = orch._search(tabs, "gpus", w, None, "cpsat", 10, 2)
    assert (mode, sol.status, sol.objective) == ("aggregated", "time_limit", 10)
    assert sol.gap == pytest.approx(0.4)


def test_serve_cli_time_limit_json_and_text(monkeypatch, capsys):
    """`planner serve --time-limit`: a cut-short answer is `time_limit` with its plan and
    gap in --json, and the text says so; with no bound the gap is unknown (null)."""
    import json

    from formulations.linear import MilpSession
    from test_cli import run

    args = ["serve", "-m", "llama3-8b", "-c", "dgx-h100-superpod", "--isl", "1024", "--osl",
            "128", "--rate", "20", "--fix", "kv_dtype=fp8", "--fix", "pp=1", "--fix",
            "weight_dtype=fp8", "--fix", "mode=aggregated", "--time-limit", "30"]
    code, out, err = run(capsys, *args, "--json")
    assert code == 0, err
    proven = json.loads(out)["solver"]
    assert proven["status"] == "optimal" and proven["gap"] == 0.0
    CUT_SHORT["cpsat"](monkeypatch)
    code, out, err = run(capsys, *args, "--json")
    assert code == 0, err
    data = json.loads(out)
    solver = data["solver"]
    assert solver["status"] == "time_limit" and data["plan"] is not None
    assert solver["objective_value"] == proven["objective_value"]
    assert solver["gap"] is not None and 0.0 <= solver["gap"] < 1e-6
    code, out, err = run(capsys, *args)
    assert code == 0 and "time limit reached: best found, within 0.00 % of optimal" in out
    assert "optimal," not in out.split("\n")[0]
    _milp_cut_short(monkeypatch)
    monkeypatch.setattr(MilpSession, "_dual_bound", lambda self: None)
    code, out, err = run(capsys, *args, "--backend", "milp", "--json")
    assert code == 0, err
    solver = json.loads(out)["solver"]
    assert solver["status"] == "time_limit" and solver["gap"] is None
    code, out, err = run(capsys, *args, "--backend", "milp")
    assert code == 0 and "time limit reached: best found, gap unknown" in out


def test_time_limit_line_rounds_the_gap_up():
    from planner.report.serve import time_limit_line

    assert time_limit_line({"status": "optimal", "gap": 0.0}) is None
    assert time_limit_line({"status": "time_limit", "gap": 0.256771}).endswith(
        "within 25.68 % of optimal")
    assert "gap unknown" in time_limit_line({"status": "time_limit", "gap": None})


# ---- training: cut short, the answer is its incumbent and the gap to the best bound ------
def _sessions_stop_after_one_answer(monkeypatch):
    """Both sessions as if the time limit fell during the first solve: after its first
    solution if it found one (passed on unproven, with the solver's bound), before the
    proof if the model had none (presolve's incumbents may already be the optimum); no
    time is left for another. The points presolve leaves go to the model however few
    (planner.solve would otherwise cost a few hundred plans without it)."""
    import planner.orchestration.train as train
    from formulations.linear import SolverOutcome

    monkeypatch.setattr(train, "ENUMERATE_MAX_PLANS", 0)

    for cls in (CpsatSession, MilpSession):
        real, calls = cls.solve, []

        def stopped(self, *args, _real=real, _calls=calls, **kwargs):
            _calls.append(1)
            if len(_calls) > 1:
                return SolverOutcome("unknown", None, None, 0.0)
            out = _real(self, *args, **kwargs)
            if out.status == "infeasible":
                return SolverOutcome("unknown", None, None, out.wall_s)
            return replace(out, status="feasible") if out.status == "optimal" else out

        monkeypatch.setattr(cls, "solve", stopped)


TRAIN_SMALL = dict(fixed={"global_batch_size": 64},
                   options=dict(max_microbatch=4, max_virtual_stages=2))


def _train_solve(backend: str, presolve: bool = True):
    from formulations.train.space import SpaceOptions
    from planner.orchestration.train import solve
    from planner.specs.loaders import load_cluster, load_model

    from test_cli import SUPERPOD

    cluster = load_cluster(SUPERPOD, 16)
    return solve(load_model("llama3-8b"), cluster, fixed=TRAIN_SMALL["fixed"],
                 options=SpaceOptions(**TRAIN_SMALL["options"]), backend=backend,
                 time_limit_s=120, presolve=presolve)


@pytest.mark.slow(reason="solves run to their time limits")
@pytest.mark.parametrize("presolve", [True, False])
@pytest.mark.parametrize("backend", ["cpsat", "milp"])
def test_train_time_limited_is_time_limit_with_gap(monkeypatch, backend, presolve):
    """A training solve cut short is ``time_limit`` (never optimal), keeps its incumbent,
    and reports its gap to a lower bound that holds over the whole space: no better than
    the optimum the uncut solve proves. Without presolve the bound is the solver's, which
    the rounding slack puts strictly below any plan's exact value: the gap is positive
    (the incumbent's own value passed off as the bound would read 0)."""
    proven = _train_solve(backend, presolve)
    assert proven.status == "optimal" and proven.optimality_gap == 0.0
    optimum = proven.best.objective
    _sessions_stop_after_one_answer(monkeypatch)
    out = _train_solve(backend, presolve)
    assert out.status == "time_limit" and out.status_text == "best found (time limit)"
    assert out.best.estimate.feasible and out.best.objective >= optimum * (1 - 1e-12)
    if backend == "milp" and not _milp_has_bound() and not presolve:
        assert out.proven_bound is None and out.optimality_gap is None
        return
    assert out.proven_bound is not None and out.proven_bound <= optimum * (1 + 1e-9)
    assert out.optimality_gap == pytest.approx(
        (out.best.objective - out.proven_bound) / out.best.objective)
    assert (0.0 if presolve else 1e-12) <= out.optimality_gap < 1.0
    solver = out.to_json()["solver"]
    assert solver["status"] == "time_limit" and solver["status_text"] == "best found (time limit)"
    assert (solver["optimality_gap"], solver["proven_bound"]) == (
        out.optimality_gap, out.proven_bound)


def test_train_cli_time_limit_json_and_text(monkeypatch, capsys):
    """`planner solve`: cut short, --json carries status time_limit, the plan, the gap and
    the bound; the text says "best found (time limit)" and the gap, never "proven"."""
    import json

    from test_cli import SUPERPOD, run

    args = ["solve", "-m", "llama3-8b", "-c", SUPERPOD, "--gpus", "16", "--global-batch",
            "64", "--max-microbatch", "4", "--max-virtual-stages", "2", "--time-limit", "120"]
    _sessions_stop_after_one_answer(monkeypatch)
    code, out, err = run(capsys, *args, "--json")
    assert code == 0, err
    data = json.loads(out)
    solver = data["solver"]
    assert solver["status"] == "time_limit" and data["plan"] is not None
    assert solver["status_text"] == "best found (time limit)"
    gap, bound = solver["optimality_gap"], solver["proven_bound"]
    assert gap is not None and 0.0 <= gap < 1.0
    assert gap == pytest.approx((solver["evaluator_objective"] - bound)
                                / solver["evaluator_objective"])
    code, out, err = run(capsys, *args)
    assert code == 0, err
    flat = " ".join(out.split())
    assert "best found (time limit)" in flat and "not proven optimal" in flat
    assert "proven optimal" not in flat.replace("not proven optimal", "")
    assert "optimality gap 0 (proven)" not in flat
    assert f"optimality gap at most {gap:.1e} (bound {bound:.6g})" in flat
