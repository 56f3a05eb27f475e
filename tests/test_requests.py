"""Each command's options declared once (issue 37 item 1): the options of ``planner solve``,
``serve`` and ``procure`` are the fields of their requests (planner/specs/requests.py),
a bad value is refused once, by the request, in one line naming the field and its flag,
and the API takes a request or the same fields as keywords."""

from __future__ import annotations

from dataclasses import fields as dc_fields

import typing

import pytest
import typer

import planner
from planner.cli import app
from planner.cli.options import command
from planner.errors import InputError
from planner.specs import requests as rq

from conftest import DATA
from test_cli import run

TINY = str(DATA / "tiny-model.yaml")
SUPERPOD = "dgx-h100-superpod"
COMMANDS = ("solve", "serve", "procure")
SPECS = (rq.SolveRequest, rq.SolveOutput, rq.ServeRequest, rq.ServeOutput, rq.ProcureRequest,
         rq.ProcureOutput)


def _click(name: str):
    return typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]


def _choices(option) -> list[str]:
    """The values a choice option takes (its enum, maybe Optional)."""
    kind = option.type_descriptor.annotation
    kind = next((a for a in typing.get_args(kind) if a is not type(None)), kind)
    return [e.value for e in kind]


def _flagged(specs) -> dict[str, tuple[type, str]]:
    """flag -> (spec, field) over ``specs``."""
    out = {}
    for spec in specs:
        for name, f in spec.model_fields.items():
            if "flag" in rq.cli(f):
                out[rq.cli(f)["flag"]] = (spec, name)
    return out


@pytest.mark.parametrize("name", COMMANDS)
def test_every_option_is_a_request_field(name):
    """Each option of the command (but --help) is one field of its request or output
    spec, with that field's flag, short flag and description as help; and every flagged
    field of those specs is an option."""
    cmd = _click(name)
    specs = app.registered_commands[[c.name for c in app.registered_commands].index(name)] \
        .callback.specs
    flagged = _flagged(specs)
    seen = set()
    for p in cmd.params:
        if p.param_type_name != "option" or p.name == "help":
            continue
        long = [o for o in p.opts if o.startswith("--")]
        assert len(long) == 1 and long[0] in flagged, f"{name} {p.opts}: no request field"
        spec, field_name = flagged[long[0]]
        f = spec.model_fields[field_name]
        assert p.help == f.description, (name, long[0])
        short = rq.cli(f).get("short")
        assert [o for o in p.opts if not o.startswith("--")] == ([short] if short else [])
        seen.add(long[0])
    assert seen == set(flagged)


def test_every_request_field_has_a_description():
    for spec in SPECS:
        for name, f in spec.model_fields.items():
            assert f.description and f.description.strip(), f"{spec.__name__}.{name}"


def test_flags_defaults_and_help_are_kept():
    """The generated options keep the flags, short flags, defaults and choices users
    know (those of the hand-written commands)."""
    by = {c: {o: p for p in _click(c).params for o in p.opts} for c in COMMANDS}
    solve, serve, procure = by["solve"], by["serve"], by["procure"]
    assert solve["-m"] is solve["--model"] and solve["-c"] is solve["--cluster"]
    assert solve["-p"] is solve["--plan"] and procure["-q"] is procure["--quiet"]
    assert solve["--time-limit"].default == 60.0 and solve["--top"].default == 1
    assert solve["--max-microbatch"].default == 16 and solve["--even-pipeline"].default is False
    assert solve["--no-presolve"].default is False and solve["--no-presolve"].is_flag
    assert _choices(solve["--objective"]) == ["time", "tokens", "gpu-hours",
                                                       "energy", "cost"]
    assert _choices(solve["--goodput"]) == ["on", "async", "off"]
    assert solve["--fix"].multiple and solve["--fix"].metavar == "FIELD=VALUE"
    assert serve["--percentile"].default == 99.0 and serve["-c"].multiple
    assert serve["--isl"].required and serve["--weight-dtypes"].default == "bf16,fp8"
    assert procure["--workers"].default is None  # the CPUs, where the API's is 1
    assert rq.ProcureRequest.model_fields["workers"].default == 1
    assert _choices(procure["--objective"]) == ["cost", "energy", "gpu-hours", "time"]


def test_names_match_the_cost_model():
    """The choices listed in specs (below the cost model) are the cost model's."""
    from typing import get_args

    from planner.costmodel.objective import NAMES
    from planner.costmodel.train.goodput import GOODPUT_MODES

    assert rq.SOLVE_OBJECTIVES == NAMES
    assert get_args(rq.GoodputMode) == GOODPUT_MODES


def test_search_bounds_are_the_requests():
    """SpaceOptions reads its four user-set bounds from SolveRequest (one declaration)."""
    from formulations.train.options import SpaceOptions

    opts = {f.name: f for f in dc_fields(SpaceOptions)}
    for bound, name in rq.SEARCH_BOUNDS.items():
        f = rq.SolveRequest.model_fields[name]
        default = opts[bound].default
        assert default == (not f.default if bound != name else f.default)
        assert opts[bound].metadata["help"] == f.description


def test_bounds_left_out_keep_the_options_value():
    """A bound left out (or None) keeps the ``options`` object's value; one given replaces
    it (the command line gives them all)."""
    from formulations.train.options import SpaceOptions
    from planner.api import _space_options

    mine = SpaceOptions(max_microbatch=4, allow_uneven=False)
    left_out = rq.SolveRequest.of(model=TINY, cluster=SUPERPOD, max_microbatch=None)
    assert _space_options(mine, left_out) == mine
    given = rq.SolveRequest.of(model=TINY, cluster=SUPERPOD, max_microbatch=16,
                               even_pipeline=False)
    assert _space_options(mine, given) == SpaceOptions(max_microbatch=16, allow_uneven=True)


@pytest.mark.parametrize("args,field,flag,value", [
    (["solve", "-m", TINY, "-c", SUPERPOD, "--top", "0"], "top_k", "--top", "0"),
    (["solve", "-m", TINY, "-c", SUPERPOD, "--time-limit", "nan"], "time_limit_s",
     "--time-limit", "nan"),
    (["serve", "-m", TINY, "-c", SUPERPOD, "--isl", "8", "--osl", "8", "--rate", "0"],
     "rate_rps", "--rate", "0.0"),
    (["procure", "-m", TINY, "--tokens", "1e9", "--workers", "0"], "workers", "--workers",
     "0"),
    (["procure", "-m", TINY, "--tokens", "1e9", "--counts", "8,x"], "counts", "--counts",
     "'8,x'"),
])
def test_a_bad_value_is_one_line_naming_the_field(capsys, args, field, flag, value):
    code, _, err = run(capsys, *args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert f"{field} ({flag}) {value}:" in lines[0]


def test_a_bad_keyword_names_the_field_and_the_closest_key():
    with pytest.raises(InputError) as info:
        planner.solve(TINY, SUPERPOD, top_k="2")
    assert str(info.value) == ("SolveRequest: top_k (--top) '2': Input should be a valid "
                               "integer")
    with pytest.raises(InputError, match="top: unknown key; did you mean top_k"):
        planner.solve(TINY, SUPERPOD, top=2)
    with pytest.raises(InputError) as info:
        planner.solve(cluster=SUPERPOD)
    assert str(info.value) == "SolveRequest: model (--model): required"
    with pytest.raises(InputError, match="not both"):
        planner.solve(rq.SolveRequest.of(model=TINY, cluster=SUPERPOD), top_k=2)


SOLVE = dict(gpus=8, max_microbatch=2, max_virtual_stages=2, global_batch_size=16,
             fix={"tp": 2}, top_k=2)


def test_solve_takes_a_request_or_keywords():
    a = planner.solve(TINY, SUPERPOD, **SOLVE)
    b = planner.solve(rq.SolveRequest.of(model=TINY, cluster=SUPERPOD, **SOLVE))
    assert [p.plan for p in a.plans] == [p.plan for p in b.plans]
    assert [p.objective for p in a.plans] == [p.objective for p in b.plans]
    assert a.best.plan.tp == 2 and len(a.plans) == 2


def test_serve_takes_a_request_or_keywords():
    kw = dict(rate_rps=2.0, tpot_ms=200.0, fix={"tp": 1, "pp": 1, "kv_dtype": "fp8",
                                                "weight_dtype": "fp8", "mode": "aggregated"})
    a = planner.serve(TINY, SUPERPOD, 256, 32, **kw)
    b = planner.serve(rq.ServeRequest.of(model=TINY, cluster=[SUPERPOD], isl=256, osl=32, **kw))
    assert a.plan == b.plan and a.estimate.to_json() == b.estimate.to_json()
    assert a.estimate.feasible


def test_procure_takes_a_request_or_keywords():
    kw = dict(gpus="h100", max_gpus=16, counts=[8, 16], workers=1, time_limit_s=10.0)
    a = planner.procure(TINY, 1e9, **kw)
    b = planner.procure(rq.ProcureRequest.of(model=TINY, tokens=1e9, **kw))
    assert a.choice.plan == b.choice.plan and a.choice.num_gpus == b.choice.num_gpus
    assert a.choice.cost_usd == b.choice.cost_usd


def test_the_generator_refuses_a_field_declared_twice():
    with pytest.raises(TypeError, match="declared twice"):
        command(rq.SolveRequest, rq.SolveRequest)(lambda a, b: None)
