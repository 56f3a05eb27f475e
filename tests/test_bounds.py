"""Bounded work and honest time limits (issue 31, item 4): Megatron layouts and argument
strings, tiny serving rates, ``--simulate``, the serving MILP's status, the DLRM LP bound
under the time limit, and a bounded fuzz of hostile inputs under a 2 GiB memory cap."""

from __future__ import annotations

import os
import random
import resource
import shlex
import subprocess
import sys
import time
import tracemalloc

import pytest
import yaml

from planner.errors import InputError
from planner.export.megatron import _layout_chunks
from planner.export.shell import command_words

from conftest import ROOT

MEGATRON = ["evaluate", "-m", "llama3-70b", "-c", "examples/superpod.yaml", "--from", "megatron"]
SERVE = ["serve", "-m", "llama3-70b", "-c", "dgx-h100-superpod", "--isl", "2048", "--osl", "256",
         "--fix", "kv_dtype=fp8", "--fix", "pp=1"]
MEMORY_CAP_BYTES = 2 << 30


def _planner(args: list[str], timeout_s: float = 120) -> tuple[int, str, str, float]:
    """The CLI in a subprocess with a 2 GiB address-space cap: (exit code, stdout,
    stderr, wall seconds)."""
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP_BYTES, MEMORY_CAP_BYTES))

    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "planner", *args], capture_output=True, text=True,
                       cwd=ROOT, preexec_fn=cap, timeout=timeout_s)
    return r.returncode, r.stdout, r.stderr, time.perf_counter() - t0


def _planner_rss(args: list[str], timeout_s: float = 120) -> tuple[int, str, str, float, int]:
    """:func:`_planner`, and the child's peak resident memory (bytes)."""
    import tempfile
    import threading

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP_BYTES, MEMORY_CAP_BYTES))

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "planner", *args], stdout=out,
                                stderr=err, text=True, cwd=ROOT, preexec_fn=cap)
        killer = threading.Timer(timeout_s, proc.kill)
        killer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read(), err.read(), wall, usage.ru_maxrss * 1024


# ---- Megatron layouts and argument strings -----------------------------------------------
@pytest.mark.parametrize("layout", ["Et*3000000000|tL", "(t|)*300000000",
                                    "Et*" + "9" * 5000 + "|tL"])
def test_layout_is_refused_before_expanding(layout):
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match="--pipeline-model-parallel-layout.*expands to more "
                                             "than 163 characters"):
            _layout_chunks(layout, 1, 80)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20  # was 5.8 GB and 2.9 GB


def test_huge_count_of_nothing_is_no_error():
    assert _layout_chunks("()*" + "9" * 5000 + "Et*80L", 1, 80) == [80]  # ValueError before


def test_layout_message_shortens_the_value():
    with pytest.raises(InputError) as e:
        _layout_chunks("E" + "t" * 500_000 + "L", 1, 80)
    assert len(str(e.value)) < 400


def test_layout_matches_megatrons_expansion():
    """Megatron-LM's own two re.sub passes (PipelineParallelLayerLayout), on layouts short
    enough to expand: the same chunks or both refused."""
    import re

    def megatron(text: str) -> list[int] | None:
        flat = text.replace(",", "")
        for pattern in (r"\(([^()]*)\)\*(\d+)", r"(.)\*(\d+)"):
            flat = re.sub(pattern, lambda mt: mt.group(1) * int(mt.group(2)), flat)
        stages = flat.split("|")
        if (set(flat) - set("tEL|") or len(stages) % 2 or not stages[0].startswith("E")
                or not stages[-1].endswith("L") or sum(s.count("t") for s in stages) != 8
                or len(flat) > 17):
            return None
        return [s.count("t") for s in stages]

    rng = random.Random(0)
    pieces = ["t", "E", "L", "|", "(", ")", "*", "2", "0", ",", "t*2", "(t|)*2", "(t*2|)*3"]
    for _ in range(20_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 12)))
        try:
            ours = _layout_chunks(text, 2, 8)
        except InputError:
            ours = None
        assert ours == megatron(text), text


def test_argument_words_are_shlex_words():
    """An argument string (no variables, no empty quoted words: the script reader follows
    bash there) reads as shlex.split reads it, errors included."""
    rng = random.Random(1)
    alphabet = " \t'\"\\ab-"
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        try:
            want: object = shlex.split(text, comments=True)
        except ValueError as e:
            want = str(e)
        if isinstance(want, list) and "" in want:
            continue
        try:
            got: object = command_words(text)[1]
        except ValueError as e:
            got = str(e)
        assert got == want, repr(text)


def test_the_reader_takes_each_run_of_word_characters_at_once(monkeypatch):
    """shlex grows a token one character at a time (a 1 MB token took 56 s): the reader
    takes a run of ordinary characters in one regex match, so the work is one step per run
    and per quote, not per character."""
    from planner.export import shell

    calls = []
    run = shell._LITERAL

    class Counting:
        def match(self, text, pos):
            calls.append(pos)
            return run.match(text, pos)

    monkeypatch.setattr(shell, "_LITERAL", Counting())
    text = "--x " + "a" * 2**20 + " 'b c'd" + "e" * 2**16
    assert command_words(text)[1] == ["--x", "a" * 2**20, "b cd" + "e" * 2**16]
    assert len(calls) == 3  # --x, the 1 MB run, and d + the 64 KB run


def test_huge_layout_count_is_a_clean_error():
    code, _, err, _ = _planner([*MEGATRON, "--pipeline-model-parallel-size 4 "
                                "--pipeline-model-parallel-layout Et*" + "9" * 5000 + "|tL"])
    assert code == 2 and "Traceback" not in err and "--pipeline-model-parallel-layout" in err


# ---- serving -------------------------------------------------------------------------------
def test_rate_units_round_up_the_decimal():
    from planner.orchestration.serve import rate_units

    assert rate_units(5e-7) == 1 and rate_units(1e-300) == 1
    assert rate_units(1.1) == 1_100_000 and rate_units(20) == 20_000_000
    assert rate_units(1.0000004) == 1_000_001  # covered, never rounded away


def test_tiny_rate_is_served():
    from planner.orchestration.serve import plan_serve, workload
    from planner.specs.loaders import load_cluster, load_model
    from planner.specs.serve import load_engine

    res = plan_serve(load_model("llama3-70b"), [load_cluster("dgx-h100-superpod")],
                     workload(2048, 256, 5e-7, 500, 30),
                     fix={"kv_dtype": "fp8", "pp": 1, "tp": 4, "weight_dtype": "fp8",
                          "mode": "aggregated"}, engine=load_engine("trtllm"))
    assert res.solver["status"] == "optimal" and res.plan.replicas == 1
    assert res.estimate.feasible and res.estimate.requests_per_s == pytest.approx(5e-7)


def test_simulate_is_bounded_before_the_search():
    from planner.validation.serve_sim import MAX_TOKENS, check_requests

    with pytest.raises(InputError, match=r"--simulate 10000000: expected 100 to 1,000,000"):
        check_requests(10_000_000, 256)
    with pytest.raises(InputError, match=r"--simulate 400,000: .* at most 195,312 requests"):
        check_requests(400_000, 256)
    check_requests(MAX_TOKENS // 256, 256)
    code, _, err, _ = _planner([*SERVE, "--rate", "20", "--simulate", "10000000"])
    assert code == 2 and "--simulate" in err and "Traceback" not in err


def test_simulate_is_refused_before_any_search(monkeypatch, capsys):
    """The count is checked before the solver runs (it took 125 s and 1.7 GB)."""
    import planner.api as api
    from test_cli import run

    def no_search(*args, **kwargs):
        raise AssertionError("searched before refusing --simulate")

    monkeypatch.setattr(api, "plan_serve", no_search)  # the command's road to the search
    code, _, err = run(capsys, *SERVE, "--rate", "20", "--simulate", "10000000")
    assert code == 2 and "--simulate" in err


def test_serve_milp_time_limited_incumbent_is_not_optimal(monkeypatch):
    """PuLP calls a time-limited incumbent "Optimal"; only its sol_status tells."""
    import pulp

    from formulations.serve.search import ServeProblem, solve
    from formulations.serve.space import ServeSpace, tables
    from planner.specs.serve import ServeEngine
    from planner.orchestration.serve import workload
    from planner.specs.loaders import load_cluster, load_model

    w = workload(2048, 256, 20.0, 500, 30)
    tabs = tables(load_model("llama3-70b"), [load_cluster("dgx-h100-superpod")], w,
                  ServeSpace(pp=(1,), kv_dtype=("fp8",), weight_dtype=("fp8",)), ServeEngine())
    problem = ServeProblem(tabs["aggregated"], "gpus", 20_000_000)
    assert solve(problem, "milp").status == "optimal"
    real = pulp.LpProblem.solve

    def time_limited(self, *args, **kwargs):
        status = real(self, *args, **kwargs)
        self.sol_status = pulp.constants.LpSolutionIntegerFeasible
        return status

    monkeypatch.setattr(pulp.LpProblem, "solve", time_limited)
    assert solve(problem, "milp").status == "time_limit"


# ---- DLRM under the time limit ---------------------------------------------------------------
def _hang(seconds: float) -> tuple[float, bool]:
    time.sleep(seconds)
    return 1.0, True


def test_large_lp_is_stopped_at_its_deadline():
    """HiGHS overran its own time limit 150-fold on a 1.1M-nonzero LP: large LPs run in a
    child that is stopped at the deadline."""
    from formulations.dlrm.bound import _with_deadline

    assert _with_deadline(_hang, (30.0,), 0.5) == (None, False)  # stopped, not awaited
    assert _with_deadline(_hang, (0.0,), 20.0) == (1.0, True)


def test_lp_bound_gets_the_time_left_and_says_when_cut(monkeypatch):
    from formulations.dlrm import bound as dlrm_bound
    from planner.specs.loaders import load_cluster, load_model

    seen = []

    def minimize(self, cost, time_limit_s=None):
        seen.append(time_limit_s)
        return 1.0, False

    monkeypatch.setattr(dlrm_bound._Rows, "minimize", minimize)
    m, c = load_model("dlrm-a"), load_cluster("zionex-128")
    value, finished = dlrm_bound.lp_bound(m, c, None, 3.0)
    assert 0 < seen[0] <= 3.0 and not finished and value is not None
    assert dlrm_bound.lp_bound(m, c, None, 1e-9) == (None, False)  # no time: no LP at all


def test_many_tables_large_lp_in_a_child(monkeypatch):
    """The large-LP path end to end on a small model (threshold lowered): a bound when it
    finishes, none and 'cut' when the deadline is too short."""
    from formulations.dlrm import bound as dlrm_bound
    from planner.specs.loaders import load_cluster, load_model

    monkeypatch.setattr(dlrm_bound, "HARD_LIMIT_NONZEROS", 0)
    m, c = load_model("dlrm-a"), load_cluster("zionex-128")
    value, finished = dlrm_bound.lp_bound(m, c, None, 30.0)
    assert finished and value is not None and value == pytest.approx(dlrm_bound.lp_bound_s(m, c))


@pytest.mark.slow(reason="a DLRM solve in a subprocess run to its time limit")
def test_dlrm_tiny_time_limit_is_honest():
    """A plan from the warm start is 'time_limit' (exit 0, like a transformer solve that
    found a plan), never 'optimal'; the overrun is stated in JSON and on stderr."""
    import json

    code, out, err, _ = _planner(["solve", "-m", "dlrm-a", "-c", "zionex-128",
                                  "--time-limit", "1e-9", "--json"])
    solver = json.loads(out)["solver"]
    assert code == 0 and solver["status"] == "time_limit"
    assert solver["time_limit_overrun_s"] > 0 and "past --time-limit" in err


def _many_tables_model(n: int, seed: int = 0):
    from planner.specs.dlrm import DLRMSpec
    from planner.specs.validate import validate

    rng = random.Random(seed)
    return validate(DLRMSpec, dict(
        name="many", kind="dlrm", dense_features=256, bottom_mlp=[512, 128], top_mlp=[512, 1],
        interaction={"kind": "none"}, top_input_dim=512, global_batch_size=65536,
        tables=[dict(name=f"t{i}", rows=int(10 ** rng.uniform(3, 6)),
                     dim=rng.choice([32, 64, 128]), pooling=rng.choice([1, 5, 20]))
                for i in range(n)]), "many.yaml")


@pytest.mark.slow(reason="builds a 162k-variable DLRM model in a subprocess")
def test_exact_dlrm_model_is_sized_by_memory_and_time(monkeypatch):
    """400 distinct tables on zionex-128 (162k variables) under a 4 s limit: building and
    loading the exact model takes about 3.5 s, so the local search answers (the exact model
    took 7 s here, 33 s and std::bad_alloc under 2 GiB at 2,000 tables)."""
    import formulations.dlrm.search as ds
    from planner.specs.loaders import load_cluster

    assert ds.max_exact_vars(1e6) == ds.MAX_MODEL_VARS <= 250_000
    assert ds.max_exact_vars(4.0) <= 100_000
    m, c = _many_tables_model(400), load_cluster("zionex-128")
    assert ds.model_vars(m, c) > 150_000
    monkeypatch.setattr(ds, "build", lambda *a, **k: pytest.fail("the exact model was built"))
    s = ds.solve_sharding(m, c, "cpsat", 4.0)
    assert s.status == "heuristic" and s.estimate.feasible


@pytest.mark.slow(reason="a CP-SAT solve of a 162k-variable DLRM model in a subprocess")
def test_cpsat_search_workers_fit_in_memory(monkeypatch):
    """CP-SAT's memory grows ~1.5 KB per variable per worker as it searches (162k
    variables, 8 workers: 2.2 GB resident within 12 s): large models get fewer workers and
    CP-SAT's own memory limit."""
    import formulations.dlrm.search as ds
    from formulations.linear import CpsatSession

    assert ds.search_workers(8, 1_000) == 8
    assert ds.search_workers(8, 162_400) == 2 and ds.search_workers(8, 250_000) == 1
    seen = {}
    real = CpsatSession.__init__

    def spy(self, lm, workers=8, **kw):
        seen["workers"] = workers
        real(self, lm, workers=workers, **kw)

    monkeypatch.setattr(CpsatSession, "__init__", spy)
    monkeypatch.setattr(ds, "search_workers", lambda workers, n: 3)
    m, c = _many_tables_model(8), _zionex(2)
    assert ds.solve_sharding(m, c, "cpsat", 10.0).estimate.feasible
    assert seen["workers"] == 3


def _zionex(nodes: int):
    from planner.specs.loaders import load_cluster

    return load_cluster("zionex-128", 8 * nodes)


def test_solver_out_of_memory_is_a_clear_error(monkeypatch, capsys, tmp_path):
    """std::bad_alloc from CP-SAT reaches Python as MemoryError: one line, exit 1."""
    import formulations.dlrm.search as ds
    from planner.errors import ResourceError

    from test_cli import run

    def bad_alloc(*a, **k):
        raise MemoryError("std::bad_alloc")

    monkeypatch.setattr(ds, "_cpsat", bad_alloc)
    m, c = _many_tables_model(8), _zionex(2)
    with pytest.raises(ResourceError, match="out of memory solving the exact DLRM"):
        ds.solve_sharding(m, c, "cpsat", 10.0)
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump(m.to_dict()))
    code, out, err = run(capsys, "solve", "-m", str(p), "-c", "zionex-128", "--gpus", "16")
    assert code == 1 and "out of memory" in err and len(err.strip().splitlines()) <= 3


@pytest.mark.slow(reason="a 2,000-table DLRM solve in a subprocess under a 2 GiB cap")
def test_two_thousand_tables_under_two_gib(tmp_path):
    """The reproducer: 2,000 distinct tables (0.1 MB) crashed CP-SAT with std::bad_alloc
    under a 2 GiB address-space cap."""
    import json

    path = tmp_path / "many.yaml"
    path.write_text(yaml.safe_dump(_many_tables_model(2000, 3).to_dict()))
    code, out, err, _ = _planner(["solve", "-m", str(path), "-c", "zionex-128",
                                  "--time-limit", "4", "--json"])
    assert code == 0 and "Traceback" not in err and "bad_alloc" not in err, err[-2000:]
    assert json.loads(out)["solver"]["status"] == "heuristic"


# ---- time limits on every command ------------------------------------------------------------
@pytest.mark.slow(reason="solves in a subprocess run to their time limits")
def test_solve_reports_its_overrun(monkeypatch, capsys):
    import json

    import planner.orchestration.train as solver

    from test_cli import run

    real = solver.run_search

    def slow(tb, backend, top_k, time_limit_s, *a, **k):
        time.sleep(time_limit_s + 0.6)  # a search that does not stop at its limit
        return real(tb, backend, top_k, time_limit_s, *a, **k)

    monkeypatch.setattr(solver, "run_search", slow)
    code, out, err = run(capsys, "solve", "-m", "llama3-8b", "-c", "dgx-h100-superpod",
                         "--gpus", "8", "--fix", "tp=8", "--time-limit", "2", "--json")
    s = json.loads(out)["solver"]
    assert code == 0 and s["time_limit_overrun_s"] > 0.2 and "took" in s["overrun_note"]
    assert "past --time-limit 2 (enumerating and tabulating" in err


def test_serve_modes_share_the_time_limit(monkeypatch):
    """Each mode's solve got the whole limit; now the time left of one deadline."""
    import planner.orchestration.serve as serve
    from planner.specs.loaders import load_cluster, load_model
    from planner.specs.serve import load_engine

    limits = []
    real = serve.solve

    def spy(problem, backend, time_limit_s):
        limits.append(time_limit_s)
        time.sleep(0.3)
        return real(problem, backend, time_limit_s)

    monkeypatch.setattr(serve, "solve", spy)
    serve.plan_serve(load_model("llama3-70b"), [load_cluster("dgx-h100-superpod")],
                     serve.workload(2048, 256, 20.0, None, 30), time_limit_s=30.0,
                     fix={"kv_dtype": "fp8", "pp": 1}, engine=load_engine("trtllm"))
    assert len(limits) >= 2 and all(b < a - 0.25 for a, b in zip(limits, limits[1:]))
    assert limits[0] <= 30.0


@pytest.mark.slow(reason="a serving search in a subprocess run to its time limit")
def test_serve_has_a_time_limit_and_reports_its_overrun(monkeypatch, capsys):
    import json

    import planner.orchestration.serve as serve

    from test_cli import run

    real = serve.timed_tables

    def slow(*a, **k):
        time.sleep(0.8)  # a tabulation that ran past the limit
        return real(*a, **k)

    monkeypatch.setattr(serve, "timed_tables", slow)
    code, out, err = run(capsys, *SERVE, "--rate", "20", "--tpot-ms", "30", "--time-limit",
                         "0.5", "--json")
    s = json.loads(out)["solver"]
    assert code == 0 and s["time_limit_s"] == 0.5 and s["time_limit_overrun_s"] > 0.3
    assert "tabulating" in s["overrun_note"] and "past --time-limit 0.5 (tabulating" in err
    code, _, err = run(capsys, *SERVE, "--rate", "20", "--time-limit", "nan")
    assert code == 2 and "--time-limit" in err


@pytest.mark.slow(reason="procurement solves in a subprocess run to their time limits")
def test_procure_time_limit_is_per_solve_and_the_total_is_reported(capsys):
    import json

    from test_cli import run

    code, out, err = run(capsys, "procure", "-m", "llama3-8b", "--tokens", "1e9", "--gpus",
                         "h100", "--counts", "8", "--time-limit", "5", "--json")
    stats = json.loads(out)["stats"]
    reported = {"time_limit_per_solve_s", "wall_s"}  # the limit is per solve
    assert code == 0 and stats["time_limit_per_solve_s"] == 5 and reported <= set(stats)
    code, out, _ = run(capsys, "procure", "--help")
    assert "per inner solve" in " ".join(out.split())


# ---- spec loading --------------------------------------------------------------------------
@pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML built without libyaml")
def test_spec_yaml_is_parsed_by_libyaml(monkeypatch, tmp_path):
    """The pure-Python parser took 9 s on a 0.75 MB DLRM file (16 s to load it)."""
    import yaml.parser

    from planner.specs.loaders import load_model

    def python_parser(*a, **k):
        raise AssertionError("the pure-Python YAML parser ran")

    monkeypatch.setattr(yaml.parser.Parser, "check_event", python_parser)
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump(_many_tables_model(50).to_dict()))
    assert len(load_model(str(p)).tables) == 50
    p.write_text(p.read_text() + "name: again\n")
    with pytest.raises(InputError, match="duplicate key 'name'"):
        load_model(str(p))


def test_many_table_names_are_checked():
    """50,000 distinct names pass (the check counted each name in the list, quadratic:
    about 40 s here; its speed is the bounded fuzz's business, with its 19,000-table
    files)."""
    assert len(_many_tables_model(50_000).tables) == 50_000


# ---- bounded fuzz ------------------------------------------------------------------------------
#: Distinct tables of the fuzz's DLRM files: 19,000 is about 0.95 MB (the 1 MB read limit);
#: 2,000 crashed CP-SAT under 2 GiB before the exact model was sized by its memory.
FUZZ_TABLES = (50, 400, 2000, 19_000)


def _dlrm_file(path, rng: random.Random, n: int) -> None:
    tables = [dict(name=f"t{i}", rows=int(10 ** rng.uniform(3, 6)), dim=rng.choice([32, 64, 128]),
                   pooling=rng.choice([1, 5, 20])) for i in range(n)]
    path.write_text(yaml.safe_dump(dict(
        name="fuzz", kind="dlrm", tables=tables, dense_features=256, bottom_mlp=[512, 128],
        top_mlp=[512, 1], interaction={"kind": "none"}, top_input_dim=512,
        global_batch_size=rng.choice([1024, 65536]), emb_dtype="fp16")))


def _case(rng: random.Random, tmp_path, k: int, randomized: bool
          ) -> tuple[list[str], float | None]:
    """(arguments, the time limit they give or None)."""
    kind = k % 3
    if kind == 0:
        layout = rng.choice(["Et*{n}|tL", "(t|)*{n}", "E(t*{n}|)*{n}L", "((t|)*{n})*{n}",
                             "Et*{n}" + "t*0" * 1000 + "L", "()*{n}Et*80L"])
        n = rng.choice(["0", "1", "3000000000", "9" * rng.randint(1, 6000), "07"])
        return [*MEGATRON, "--pipeline-model-parallel-size 4 --pipeline-model-parallel-layout "
                + layout.replace("{n}", n)], None
    if kind == 1:
        rate = rng.choice(["5e-7", "1e-300", "4.9e-7", "1e9", "0", "-1", "nan", "inf", "20"])
        sim = rng.choice(["0", "100", "10000000", "1000001", "400000", "-5"])
        limit = rng.choice([0.5, 2.0, 4.0])
        return [*SERVE, "--rate", rate, "--simulate", sim, "--tpot-ms", "30",
                "--time-limit", str(limit)], limit
    path = tmp_path / f"dlrm{k}.yaml"
    # the short run has every size once; a longer one draws them
    _dlrm_file(path, rng, rng.choice(FUZZ_TABLES) if randomized
               else FUZZ_TABLES[(k // 3) % len(FUZZ_TABLES)])
    assert path.stat().st_size < 1 << 20
    limit = rng.choice([0.5, 2.0, 4.0])
    return ["solve", "-m", str(path), "-c", "zionex-128", "--time-limit", str(limit)], limit


def _stated_overrun_s(err: str) -> float:
    """The overrun a command said on stderr (``planner: ran X s past --time-limit``), or 0."""
    import re

    m = re.search(r"planner: ran ([0-9.]+) s past --time-limit", err)
    return float(m.group(1)) if m else 0.0


@pytest.mark.slow(reason="hostile inputs through the CLI, one subprocess each, under a memory cap")
def test_bounded_fuzz(tmp_path):
    """Hostile inputs under 1 MB: exit 0, 1 or 2, never a traceback, within the memory cap.
    Wall time is printed, never asserted (it is the machine's load as much as the
    command's); that a command past its limit says so is tests/test_reliability.py's."""
    runs = int(os.environ.get("PLANNER_BOUNDS_FUZZ", "0") or 0)  # a longer run, randomized
    rng = random.Random(None if runs else 31)
    failures, peak_rss_bytes, overruns_s = [], 0, [0.0]
    for k in range(runs or 12):
        args, _ = _case(rng, tmp_path, k, bool(runs))
        code, _, err, wall, rss = _planner_rss(args)
        peak_rss_bytes = max(peak_rss_bytes, rss)
        overruns_s.append(_stated_overrun_s(err))
        if code not in (0, 1, 2) or "Traceback" in err:
            failures.append((args[-4:], code, round(wall, 2), err[-500:]))
            print("bounded fuzz failure:", failures[-1], flush=True)  # the assert cuts it
    print(f"bounded fuzz: {runs or 12} cases, {len(failures)} failures, peak resident "
          f"{peak_rss_bytes / 2**20:.0f} MiB, largest stated overrun {max(overruns_s):.2f} s")
    assert not failures, failures


def test_out_of_memory_anywhere_is_one_line(monkeypatch, capsys):
    import planner.orchestration.train as solver

    from test_cli import run

    def bad_alloc(*a, **k):
        raise MemoryError("std::bad_alloc")

    monkeypatch.setattr(solver, "build_space", bad_alloc)
    code, out, err = run(capsys, "solve", "-m", "llama3-8b", "-c", "dgx-h100-superpod",
                         "--gpus", "8")
    assert code == 1 and err.strip().splitlines() == [
        "planner: out of memory (the process's memory limit, or the machine's); give it "
        "more, or a smaller input"]
