"""Hostile names (issue 31, item 1): a name that reaches a launch script, a config file or a
terminal cannot inject anything.

Two defences, each tested on its own: names with control characters (a line break, NUL,
ESC, DEL, C1, U+2028/2029, bidirectional overrides) are refused at load with exit 2 naming
the field (planner/specs/names.py); and every generated file escapes what it writes, so
that even a name that bypassed the load check (``model_copy``) leaves every line outside
the header comment as it is for a benign name, checked with each target's own parser
(``bash -n``, ``tomllib``, ``json``, ``yaml.safe_load``, ``shlex``)."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import tempfile
import tomllib
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import planner.catalog as catalog
from planner.errors import InputError
from planner.export import export_plan
from planner.export.torchtitan import toml_string
from planner.export.serve_launch import launch_commands
from planner.export.torchrec import torchrec_plan
from planner.specs.cluster import ClusterSpec
from planner.specs.dlrm import DLRMPlan, DLRMSpec, TablePlacement
from planner.specs.loaders import load_cluster, load_model
from planner.specs.model import ModelSpec
from planner.specs.names import MAX_NAME_CHARS, comment_text, name_problem, unsafe_char
from planner.specs.plan import Plan
from planner.specs.serve import ServePlan

from conftest import DATA, ROOT
from test_cli import run

LAUNCH = ROOT / "examples" / "launch"
SUPERPOD = str(ROOT / "examples" / "superpod.yaml")
BASH = shutil.which("bash")
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])

#: one character of each kind that must never reach a file or a terminal raw
CONTROLS = ["\n", "\r", "\t", "\x00", "\x1b", "\x7f", "\x85", "\x9b", "\x0b", "\x0c", "\x1c",
            "\u2028", "\u2029", "\u202e", "\u2066"]
#: a lone surrogate (JSON can carry one) is refused at load too; no spec can hold one past
#: that (it has no UTF-8 form, not even for the spec's hash), so the bypass tests skip it
LOAD_CONTROLS = CONTROLS + ["\ud800"]
#: what a shell, TOML or an override parser treats specially, and unicode; all valid in names
SPECIAL = list(" ;$()`'\"\\|&<>*?[]{}!#~%^=,.:/-_+@") + ["é", "名", "🚀", "\u00a0", "\u200d"]
INJECTIONS = ["x$(touch /tmp/PWNED)", "`touch /tmp/PWNED`", "a; touch /tmp/PWNED;",
              "'; touch /tmp/PWNED; '", "\"$(id)\"", "a # b", "[job]", "x\\", "x \\ y",
              "model.tensor_model_parallel_size=1", "--bf16 --fp16", "$HOME ${PATH}"]

valid_names = st.one_of(
    st.sampled_from(INJECTIONS),
    st.text(st.sampled_from(SPECIAL + list("abcXYZ019")), min_size=1, max_size=40),
    st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=40),
).filter(lambda s: name_problem(s) is None)


def _with_control(controls: list[str]):
    return st.builds(lambda a, c, b: a + c + b,
                     st.sampled_from(["", "x", "llama ", "$(id)"]),
                     st.sampled_from(controls),
                     st.sampled_from(["", "touch /tmp/PWNED", "\n[job]\ndump_folder = '/'"]))


control_names = _with_control(CONTROLS)

#: names that skip the load check (model_copy): anything, long ones included
any_names = st.one_of(valid_names, control_names,
                      st.text(min_size=1, max_size=60),
                      st.text(st.sampled_from(CONTROLS + SPECIAL), min_size=600, max_size=2000))


# ---- (a) refused at load -------------------------------------------------------------
def _catalog_data(kind: str, name: str) -> dict:
    return yaml.safe_load(catalog.find(kind, name).read_text())  # type: ignore[union-attr]


def _hostile_spec(where: str, name: str) -> tuple[dict, str, str]:
    """(file contents, loader kind, the field the error must name) with ``name`` placed at
    ``where``."""
    if where in ("model.name", "model.aliases"):
        data = _catalog_data("models", "llama3-8b")
        if where == "model.name":
            data["name"] = name
            return data, "model", "name"
        data["aliases"] = ["ok", name]
        return data, "model", "aliases.1"
    if where == "hf._name_or_path":
        data = json.loads((DATA / "llama3-8b-config.json").read_text())
        data["_name_or_path"] = name
        return data, "model", "_name_or_path"
    if where in ("dlrm.name", "dlrm.table"):
        data = _catalog_data("models", "criteo-dlrm")
        if where == "dlrm.name":
            data["name"] = name
            return data, "model", "name"
        data["tables"][3]["name"] = name
        return data, "model", "tables.3.name"
    data = yaml.safe_load(Path(SUPERPOD).read_text())
    if where == "cluster.name":
        data["name"] = name
        return data, "cluster", "name"
    if where == "cluster.level":
        data["topology"][0]["name"] = name
        return data, "cluster", "topology.0.name"
    data["gpu"] = {**_catalog_data("gpus", data["gpu"]), "name": name}
    return data, "cluster", "name"


WHERE = ["model.name", "model.aliases", "hf._name_or_path", "dlrm.name", "dlrm.table",
         "cluster.name", "cluster.level", "gpu.name"]


def _load(data: dict, kind: str, folder: Path):
    # JSON carries every character, lone surrogates included, as an escape
    path = folder / f"{kind}.json"
    path.write_text(json.dumps(data))
    return load_model(str(path)) if kind == "model" else load_cluster(str(path))


@SETTINGS
@given(where=st.sampled_from(WHERE), name=_with_control(LOAD_CONTROLS))
def test_names_with_control_characters_are_refused_at_load(where, name):
    data, kind, field = _hostile_spec(where, name)
    with tempfile.TemporaryDirectory() as tmp, pytest.raises(InputError) as e:
        _load(data, kind, Path(tmp))
    msg = str(e.value)
    bad = unsafe_char(name)
    assert bad is not None
    assert field in msg and f"U+{ord(bad[1]):04X}" in msg and "expected" in msg
    # the message shows the value escaped: no line of it holds a raw control character
    assert all(unsafe_char(line) is None for line in msg.split("\n")), msg


@SETTINGS
@given(where=st.sampled_from(WHERE), name=valid_names)
def test_valid_hostile_names_load_unchanged(where, name):
    data, kind, _ = _hostile_spec(where, name)
    if where == "cluster.level":  # level names are unique
        assume(name not in [lv["name"] for lv in data["topology"][1:]])
    with tempfile.TemporaryDirectory() as tmp:
        spec = _load(data, kind, Path(tmp))
    got = {"model.name": lambda: spec.name, "model.aliases": lambda: spec.aliases[1],
           "hf._name_or_path": lambda: spec.name, "dlrm.name": lambda: spec.name,
           "dlrm.table": lambda: spec.tables[3].name, "cluster.name": lambda: spec.name,
           "cluster.level": lambda: spec.topology[0].name,
           "gpu.name": lambda: spec.gpu.name}[where]()
    assert got == name


def test_overlong_names_are_refused_and_paths_may_be_long(tmp_path):
    data, kind, _ = _hostile_spec("model.name", "m" * (MAX_NAME_CHARS + 1))
    with pytest.raises(InputError, match=f"at most {MAX_NAME_CHARS}"):
        _load(data, kind, tmp_path)
    deep = tmp_path / ("d" * 200) / ("e" * 200) / ("f" * 200)
    deep.mkdir(parents=True)
    assert _load(_hostile_spec("model.name", "ok")[0], "model", deep).name == "ok"


# ---- (b) escaped at output -----------------------------------------------------------
def _plan(file: str) -> Plan:
    return Plan.model_validate(yaml.safe_load((LAUNCH / file).read_text()))


#: format -> (plan file, --gpus), the README's exportable plans (tests/test_export.py GOLDEN)
EXPORTS = {"megatron": ("llama3-70b.plan.yaml", None),
           "megatron-bridge": ("llama3-70b.plan.yaml", None),
           "torchtitan": ("llama3-70b.torchtitan.plan.yaml", None),
           "deepspeed": ("llama3-70b.deepspeed.plan.yaml", 512)}
_BASE: dict = {}


def _base() -> tuple[ModelSpec, dict[str, tuple[Plan, ClusterSpec]]]:
    if not _BASE:
        model = load_model("llama3-70b")
        assert isinstance(model, ModelSpec)
        _BASE["model"] = model
        _BASE["exports"] = {fmt: (_plan(f), load_cluster(SUPERPOD, g))
                            for fmt, (f, g) in EXPORTS.items()}
        _BASE["node"] = load_cluster(SUPERPOD, 8)
    return _BASE["model"], _BASE["exports"]


def _named(model: ModelSpec, cluster: ClusterSpec, name: str, validated: bool
           ) -> tuple[ModelSpec, ClusterSpec]:
    """Model, cluster and GPU all called ``name``: through validation, or around it."""
    if validated:
        gpu = cluster.gpu.model_validate({**cluster.gpu.to_dict(), "name": name})
        return (ModelSpec.model_validate({**model.to_dict(), "name": name}),
                ClusterSpec.model_validate({**cluster.to_dict(), "name": name,
                                            "gpu": gpu.to_dict()}))
    gpu = cluster.gpu.model_copy(update={"name": name})
    return (model.model_copy(update={"name": name}),
            cluster.model_copy(update={"name": name, "gpu": gpu}))


def _lines(text: str) -> list[str]:
    return text.split("\n")  # what a shell, grep and TOML call a line


def _same_outside_comments(text: str, benign: str) -> None:
    """Line for line: every comment line is a comment line still, every other line is the
    benign file's."""
    got, want = _lines(text), _lines(benign)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if w.startswith("#"):
            assert g.startswith("#") and unsafe_char(g) is None, g
        else:
            assert g == w


def _bash_syntax_ok(script: str) -> None:
    if BASH is None:
        return
    r = subprocess.run([BASH, "-n"], input=script.encode("utf-8", "surrogatepass"),
                       capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr


def _check_exports(name: str, validated: bool) -> None:
    base_model, exports = _base()
    for fmt, (plan, cluster) in exports.items():
        m, c = _named(base_model, cluster, name, validated)
        bm, bc = _named(base_model, cluster, "benign", validated)
        text, benign = export_plan(fmt, plan, m, c), export_plan(fmt, plan, bm, bc)
        if fmt == "deepspeed":
            got, want = json.loads(text), json.loads(benign)
            assert got.keys() == want.keys()
            assert {k: v for k, v in got.items() if k != "planner_export"} == \
                   {k: v for k, v in want.items() if k != "planner_export"}
            assert got["planner_export"] == [s.replace("benign", name)
                                             for s in want["planner_export"]]
            continue
        _same_outside_comments(text, benign)
        if fmt == "megatron":
            _bash_syntax_ok(text)
        elif fmt == "torchtitan":
            assert tomllib.loads(text) == tomllib.loads(benign)
        # the header holds the name, escaped: nothing of it is lost
        assert comment_text(name) in text


def _check_serve_launch(name: str) -> None:
    plans = [ServePlan(tp=2, replicas=3, weight_dtype="fp8", kv_dtype="fp8"),
             ServePlan(tp=4, ep=2, kv_dtype="fp8", prefill=ServePlan(tp=2, kv_dtype="fp8"))]
    for plan in plans:
        got, want = launch_commands(name, plan), launch_commands("benign", plan)
        for engine in want:
            for g, w in zip(got[engine], want[engine], strict=True):
                words, benign = shlex.split(g["command"]), shlex.split(w["command"])
                assert words == [name if b == "benign" else b for b in benign]
                _bash_syntax_ok(g["command"] + "\n")


def _check_torchrec(name: str, validated: bool) -> None:
    """Table names as TorchRec keys survive the YAML and JSON the DLRM --out writes."""
    assume(name != "b")
    tables = [dict(name=name, rows=1000, dim=16, pooling=2, count=2),
              dict(name="b", rows=500, dim=16, pooling=1)]
    spec = dict(name=name, bottom_mlp=[32, 16], top_mlp=[16, 1], global_batch_size=1024,
                tables=tables)
    if validated:
        model = DLRMSpec.model_validate(spec)
        plan = DLRMPlan.model_validate({"tables": [
            {"table": name, "sharding_type": "data_parallel", "copies": 2},
            {"table": "b", "sharding_type": "row_wise"}]})
    else:
        model = DLRMSpec.model_validate({**spec, "name": "m", "tables": [
            {**tables[0], "name": "a"}, tables[1]]})
        model = model.model_copy(update={"name": name, "tables": [
            model.tables[0].model_copy(update={"name": name}), model.tables[1]]})
        plan = DLRMPlan(tables=[
            TablePlacement(table="a", sharding_type="data_parallel", copies=2)
            .model_copy(update={"table": name}),
            TablePlacement(table="b", sharding_type="row_wise")])
    _base()
    data = {"model": model.name, "torchrec": torchrec_plan(model, _BASE["node"], plan)}
    assert set(data["torchrec"]["sharding_plan"]) == {f"{name}_0", f"{name}_1", "b"}
    assert yaml.safe_load(yaml.safe_dump(data, sort_keys=False)) == data
    assert json.loads(json.dumps(data, indent=1)) == data


@pytest.mark.slow(reason="hypothesis examples through every exporter")
@SETTINGS
@given(name=valid_names)
@example(name="x$(touch /tmp/PWNED)`id`;'\"")
def test_valid_hostile_names_change_nothing_outside_comments(name):
    _check_exports(name, validated=True)
    _check_serve_launch(name)
    _check_torchrec(name, validated=True)


@pytest.mark.slow(reason="hypothesis examples through every exporter")
@SETTINGS
@given(name=any_names)
@example(name="x\ntouch /tmp/PWNED\n")
@example(name='x\n[job]\ndump_folder = "/etc/evil"\n')
@example(name="x\nmodel.tensor_model_parallel_size=1\n")
@example(name="x\x00\x1b[2J\u2028y")
def test_output_escaping_holds_without_the_load_check(name):
    """Specs built around validation (model_copy): the exporters' own escaping keeps every
    line outside the header comment as it is; the serve launch refuses what no shell word
    can hold (NUL) and quotes the rest."""
    _check_exports(name, validated=False)
    _check_torchrec(name, validated=False)
    if name_problem(name, max_chars=None) is None:
        _check_serve_launch(name)
    else:
        with pytest.raises(InputError, match="--model"):
            launch_commands(name, ServePlan())


@SETTINGS
@given(text=any_names)
def test_toml_strings_round_trip(text):
    """Every string the torchtitan exporter writes as a TOML value reads back as itself."""
    assert tomllib.loads(f"x = {toml_string(text)}\n") == {"x": text}


def test_comment_text_escapes_every_line_end():
    for ch in CONTROLS:
        text = comment_text(f"a{ch}b")
        assert len(text.splitlines()) == 1 and unsafe_char(text) is None
        assert text.isprintable()
    assert comment_text("a\\nb") == "a\\\\nb"  # a literal backslash-n stays distinguishable
    assert comment_text("plain; $(x) `y` 名") == "plain; $(x) `y` 名"


# ---- the reproducers, at the command line ---------------------------------------------
def _evil_model(tmp_path: Path, name: str, suffix: str = ".yaml") -> str:
    data = _catalog_data("models", "llama3-70b")
    data["name"] = name
    path = tmp_path / f"evil{suffix}"
    path.write_text(yaml.safe_dump(data) if suffix == ".yaml" else json.dumps(data))
    return str(path)


@pytest.mark.parametrize("name, shown", [
    ("x\ntouch /tmp/PWNED\n", "'x\\ntouch /tmp/PWNED\\n'"),
    ("x\x00y", "'x\\x00y'"),
    ("x\x1b[2Jy", "'x\\x1b[2Jy'"),
    ("x\u2028touch y", "'x\\u2028touch y'"),
])
def test_export_of_a_model_named_with_a_newline_is_refused(capsys, tmp_path, name, shown):
    out = tmp_path / "run.sh"
    code, stdout, err = run(capsys, "export", str(LAUNCH / "llama3-70b.plan.yaml"), "-m",
                            _evil_model(tmp_path, name, ".json"), "-c", SUPERPOD, "-f",
                            "megatron", "--out", str(out))
    assert code == 2 and not out.exists()
    flat = " ".join(err.split())  # the console wraps long lines
    assert "name:" in flat and shown in flat and "expected a name without control" in flat
    assert unsafe_char(stdout + err.replace("\n", " ")) is None


def test_export_reproducer_yaml(capsys, tmp_path):
    """The issue's reproducer: a model YAML ``name: "x\\ntouch /tmp/PWNED\\n"``."""
    out = tmp_path / "run.sh"
    code, _, err = run(capsys, "export", str(LAUNCH / "llama3-70b.plan.yaml"), "-m",
                       _evil_model(tmp_path, "x\ntouch /tmp/PWNED\n"), "-c", SUPERPOD, "-f",
                       "megatron", "--out", str(out))
    assert code == 2 and not out.exists() and "name" in err and "U+000A" in err


def test_hugging_face_name_or_path_with_a_newline_is_refused(capsys, tmp_path):
    cfg = json.loads((DATA / "llama3-8b-config.json").read_text())
    cfg["_name_or_path"] = "meta-llama/x\ntouch /tmp/PWNED\n"
    hf = tmp_path / "config.json"
    hf.write_text(json.dumps(cfg))
    dest = tmp_path / "hf.sh"
    code, _, err = run(capsys, "solve", "-m", str(hf), "-c", "dgx-h100-superpod", "--gpus",
                       "8", "--global-batch", "64", "--export", "megatron",
                       "--export-out", str(dest))
    assert code == 2 and not dest.exists()
    assert "_name_or_path" in err and "U+000A" in err


@pytest.mark.slow(reason="a solve and every exporter on a hostile name")
def test_hugging_face_name_with_shell_characters_is_exported_in_the_comment(capsys, tmp_path):
    cfg = json.loads((DATA / "llama3-8b-config.json").read_text())
    cfg["_name_or_path"] = "org/m$(touch PWNED)`id`;'"
    hf = tmp_path / "config.json"
    hf.write_text(json.dumps(cfg))
    dest = tmp_path / "hf.sh"
    code, _, err = run(capsys, "solve", "-m", str(hf), "-c", "dgx-h100-superpod", "--gpus",
                       "8", "--global-batch", "64", "--fix", "tp=1", "--fix", "pp=1",
                       "--export", "megatron", "--export-out", str(dest))
    assert code == 0, err
    text = dest.read_text()
    assert [ln for ln in _lines(text) if cfg["_name_or_path"] in ln][0].startswith("# ")
    _bash_syntax_ok(text)


def test_serve_launch_quotes_the_model_path(capsys, tmp_path):
    """``serve --launch`` printed ``vllm serve /d/m;touch X;.yaml``: one shell word now (the
    weights come from --model-path here; the model file would give its hf_id)."""
    folder = tmp_path / "d"
    folder.mkdir()
    path = folder / "m;touch X;.yaml"
    path.write_text((catalog.find("models", "llama3-8b")).read_text())  # type: ignore[union-attr]
    code, out, err = run(capsys, "serve", "-m", str(path), "-c", "dgx-h100-superpod", "--isl",
                         "2048", "--osl", "256", "--fix", "kv_dtype=fp8", "--fix", "pp=1",
                         "--launch", "--json", "--model-path", str(path))
    assert code == 0, err
    for engine, pools in json.loads(out)["launch"].items():
        for pool in pools:
            assert str(path) in shlex.split(pool["command"]), (engine, pool["command"])
            _bash_syntax_ok(pool["command"] + "\n")
    code, out, _ = run(capsys, "serve", "-m", str(path), "-c", "dgx-h100-superpod", "--isl",
                       "2048", "--osl", "256", "--fix", "kv_dtype=fp8", "--fix", "pp=1",
                       "--launch", "--model-path", str(path))
    commands = [ln for ln in out.splitlines()
                if ln.startswith(("  vllm serve ", "  python -m sglang", "  trtllm-serve "))]
    assert len(commands) == 3
    assert all(str(path) in shlex.split(cmd) for cmd in commands)


def test_serve_model_path_with_a_newline_is_refused(capsys, tmp_path):
    path = tmp_path / "m\ntouch X\n.yaml"
    path.write_text((catalog.find("models", "llama3-8b")).read_text())  # type: ignore[union-attr]
    code, _, err = run(capsys, "serve", "-m", str(path), "-c", "dgx-h100-superpod", "--isl",
                       "2048", "--osl", "256", "--launch")
    assert code == 2 and "model" in err and "U+000A" in err


def test_dlrm_out_with_hostile_table_names_parses(capsys, tmp_path):
    name = "t'; $(touch PWNED) \"x: y\" # z"
    spec = dict(name="tiny-dlrm; `id`", kind="dlrm", bottom_mlp=[32, 16], top_mlp=[16, 1],
                global_batch_size=1024, tables=[dict(name=name, rows=1000, dim=16, pooling=2)])
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(spec))
    for suffix, parse in ((".yaml", yaml.safe_load), (".json", json.loads)):
        dest = tmp_path / f"plan{suffix}"
        code, _, err = run(capsys, "solve", "-m", str(path), "-c", "dgx-a100-superpod",
                           "--gpus", "4", "--out", str(dest))
        assert code == 0, err
        data = parse(dest.read_text())
        assert data["model"] == spec["name"]
        assert list(data["torchrec"]["sharding_plan"]) == [name]


def test_dlrm_table_name_with_a_newline_is_refused(capsys, tmp_path):
    spec = dict(name="tiny", kind="dlrm", bottom_mlp=[32, 16], top_mlp=[16, 1],
                global_batch_size=1024, tables=[dict(name="a\nb", rows=1000, dim=16, pooling=2)])
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(spec))
    code, _, err = run(capsys, "solve", "-m", str(path), "-c", "dgx-a100-superpod", "--gpus", "4")
    assert code == 2 and "tables.0.name" in err and "U+000A" in err


def test_the_checks_can_fail():
    """The line comparison and the parsers do see an injected line (the tests above are
    not vacuous)."""
    base_model, exports = _base()
    plan, cluster = exports["megatron"]
    benign = export_plan("megatron", plan, base_model, cluster)
    injected = benign.replace("# framework:", "touch /tmp/PWNED\n# framework:", 1)
    with pytest.raises(AssertionError):
        _same_outside_comments(injected, benign)
    if BASH is not None:
        with pytest.raises(AssertionError):
            _bash_syntax_ok(benign + "(\n")


# ---- the terminal: names are printed as they are, never read as console markup -------
MARKUP = "x[/][bold][link=https://example.com]y[/link]"


def _markup_files(tmp_path: Path) -> dict[str, str]:
    model = _catalog_data("models", "llama3-8b")
    cluster = _catalog_data("clusters", "dgx-h100-superpod")
    cluster.update(name=MARKUP, gpu={**_catalog_data("gpus", cluster["gpu"]), "name": MARKUP})
    dlrm = dict(name=MARKUP, kind="dlrm", bottom_mlp=[32, 16], top_mlp=[16, 1],
                global_batch_size=1024, tables=[dict(name=MARKUP, rows=1000, dim=16, pooling=2)])
    out = {}
    for key, data in (("model", {**model, "name": MARKUP}), ("cluster", cluster), ("dlrm", dlrm)):
        out[key] = str(tmp_path / f"{key}.yaml")
        Path(out[key]).write_text(yaml.safe_dump(data))
    return out


@pytest.mark.parametrize("command", ["evaluate", "solve", "dlrm", "serve"])
def test_names_that_look_like_console_markup_print_as_they_are(capsys, tmp_path, command):
    """A name with ``[/]`` made rich raise MarkupError (a traceback); ``[link=...]`` wrote a
    terminal hyperlink."""
    f = _markup_files(tmp_path)
    small = ["--gpus", "8", "--global-batch", "64"]
    args = {"evaluate": ["evaluate", "-m", f["model"], "-c", f["cluster"], *small],
            "solve": ["solve", "-m", f["model"], "-c", f["cluster"], *small, "--fix", "tp=1",
                      "--fix", "pp=1"],
            "dlrm": ["solve", "-m", f["dlrm"], "-c", f["cluster"], "--gpus", "4"],
            "serve": ["serve", "-m", "llama3-8b", "-c", f["cluster"], "--isl", "2048", "--osl",
                      "256", "--fix", "kv_dtype=fp8", "--fix", "pp=1", "--launch"]}[command]
    code, out, err = run(capsys, *args)
    assert code == (1 if command == "evaluate" else 0), err  # llama3-8b unsharded: too big
    assert MARKUP in "".join(out.split()).replace("│", ""), out


SHORT_MARKUP = "a[/]b[bold]"  # short: table cells are cut at the terminal's width


def test_collective_prints_level_and_cluster_names_as_they_are(capsys, tmp_path):
    f = _markup_files(tmp_path)
    data = yaml.safe_load(Path(f["cluster"]).read_text())
    data["name"] = SHORT_MARKUP
    for i, lv in enumerate(data["topology"]):
        lv["name"] = f"{i}{SHORT_MARKUP}"
    Path(f["cluster"]).write_text(yaml.safe_dump(data))
    code, out, err = run(capsys, "collective", "--cluster", f["cluster"], "--op", "all_reduce",
                         "--size", "1GiB")
    flat = "".join(out.split()).replace("│", "")
    assert code == 0 and flat.count(SHORT_MARKUP) == 1 + len(data["topology"]), out


def test_catalog_prints_names_as_they_are(capsys, monkeypatch):
    """Catalog rows hold names from catalog files: printed as text, never as markup."""
    import planner.cli.catalog as cli_catalog

    monkeypatch.setattr(cli_catalog, "_rows",
                        lambda kind: [dict(name=SHORT_MARKUP, aliases=[SHORT_MARKUP])])
    code, out, err = run(capsys, "catalog", "clusters")
    assert code == 0 and "".join(out.split()).replace("│", "").count(SHORT_MARKUP) == 2, out


def test_sweep_name_is_a_name(tmp_path):
    from planner.sweep.spec import SweepSpec
    from planner.specs.validate import validate

    with pytest.raises(InputError, match=r"name.*LINE FEED"):
        validate(SweepSpec, {"name": "a\nb", "axes": {"gpus": [8]}}, "sweep.yaml")


@pytest.mark.parametrize("section", ["clusters", "gpus"])
def test_pricing_keys_are_names(tmp_path, section):
    from planner.specs.pricing import load_pricing

    p = tmp_path / "prices.yaml"
    p.write_text(yaml.safe_dump({section: {"evil\nx": {"price_per_gpu_hour": 2.0}}}))
    with pytest.raises(InputError, match=rf"{section} key 'evil\\nx': .*LINE FEED"):
        load_pricing(str(p))
    with pytest.raises(InputError, match=r"CARRIAGE RETURN"):
        load_pricing(None, overrides={section: {"a\rb": {"price_per_gpu_hour": 2.0}}})
