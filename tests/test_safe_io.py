"""Safe reads and outputs (planner/fileio.py): bounded reads of regular files only, outputs
that never replace an input, follow a link, write into a device or overwrite without
--force, atomic writes through unique temporary files, the sweep table's lock and its
cut-off last row, duplicate YAML keys."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from planner.errors import InputError
from planner.fileio import read_user_file, write_output_atomic

from conftest import DATA, ROOT
from test_cli import run

TINY = str(DATA / "tiny-model.yaml")
SUPERPOD = str(ROOT / "examples" / "superpod.yaml")
PLAN70 = str(ROOT / "examples" / "launch" / "llama3-70b.plan.yaml")
SOLVE = ["-c", "dgx-h100-superpod", "--gpus", "8", "--max-microbatch", "2",
         "--max-virtual-stages", "2", "--time-limit", "10"]
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux special files")


def _run(capsys, *args: str) -> tuple[int, str, str]:
    """``planner ARGS`` with stderr's lines joined (rich wraps long paths)."""
    code, out, err = run(capsys, *args)
    return code, out, " ".join(err.split())


def _copy(src: str, dest: Path) -> Path:
    dest.write_bytes(Path(src).read_bytes())
    return dest


# ---- outputs that would lose a file ----------------------------------------------------------
def test_export_out_is_its_own_plan_input(capsys, tmp_path):
    plan = _copy(PLAN70, tmp_path / "p.yaml")
    before = plan.read_bytes()
    code, _, err = _run(capsys, "export", str(plan), "-m", "llama3-70b", "-c", SUPERPOD,
                       "-f", "megatron", "--out", str(plan), "--force")
    assert code == 2 and "--out" in err and "input" in err
    assert plan.read_bytes() == before


def test_solve_out_is_its_own_model_input(capsys, tmp_path):
    model = _copy(TINY, tmp_path / "tiny.yaml")
    before = model.read_bytes()
    code, _, err = _run(capsys, "solve", "-m", str(model), *SOLVE, "--out", str(model),
                       "--force")
    assert code == 2 and "--out" in err and "the model" in err
    assert model.read_bytes() == before
    # a hard link to the model is the same file under another name
    os.link(model, tmp_path / "alias.yaml")
    code, _, err = _run(capsys, "solve", "-m", str(model), *SOLVE, "--out",
                       str(tmp_path / "alias.yaml"), "--force")
    assert code == 2 and "the model" in err and model.read_bytes() == before


def test_solve_two_outputs_on_one_path(capsys, tmp_path):
    out = str(tmp_path / "p.yaml")
    code, _, err = _run(capsys, "solve", "-m", TINY, *SOLVE, "--out", out, "--export",
                       "megatron", "--export-out", str(tmp_path / "." / "p.yaml"))
    assert code == 2 and "--export-out" in err and "--out" in err
    assert not Path(out).exists()


@pytest.mark.slow(reason="solves through the CLI for every output option")
def test_existing_output_needs_force_and_is_replaced_atomically(capsys, tmp_path):
    out = tmp_path / "p.yaml"
    out.write_text("keep me\n")
    code, _, err = _run(capsys, "solve", "-m", TINY, *SOLVE, "--out", str(out))
    assert code == 2 and "--force" in err and out.read_text() == "keep me\n"
    code, _, _ = _run(capsys, "solve", "-m", TINY, *SOLVE, "--out", str(out), "--force")
    assert code == 0 and "tp:" in out.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.yaml"]  # no temporary left
    assert out.stat().st_mode & 0o777 == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_output_symlink_is_never_followed(capsys, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    link = tmp_path / "run.sh"
    link.symlink_to(victim)
    code, _, err = _run(capsys, "export", PLAN70, "-m", "llama3-70b", "-c", SUPERPOD, "-f",
                       "megatron", "--out", str(link), "--force")
    assert code == 2 and "symbolic link" in err
    assert victim.read_text() == "precious\n" and link.is_symlink()


def test_read_only_output_refused_even_with_force(capsys, tmp_path):
    out = tmp_path / "run.sh"
    out.write_text("read only\n")
    out.chmod(0o444)
    code, _, err = _run(capsys, "export", PLAN70, "-m", "llama3-70b", "-c", SUPERPOD, "-f",
                       "megatron", "--out", str(out), "--force")
    assert code == 2 and "read-only" in err and out.read_text() == "read only\n"


@linux
@pytest.mark.parametrize("target", ["loop", "/dev/full", "long"])
def test_output_errors_are_input_errors(capsys, tmp_path, target):
    """ELOOP (a link to itself), a device (ENOSPC on /dev/full), ENAMETOOLONG."""
    if target == "loop":
        path = tmp_path / "loop.sh"
        path.symlink_to(path)
    elif target == "long":
        path = tmp_path / ("x" * 300 + ".sh")
    else:
        path = Path(target)
    code, _, err = _run(capsys, "export", PLAN70, "-m", "llama3-70b", "-c", SUPERPOD, "-f",
                       "megatron", "--out", str(path), "--force")
    assert code == 2 and "--out" in err


def test_write_errors_name_the_option_and_leave_no_temporary(tmp_path, monkeypatch):
    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(InputError, match="--out .*no space left"):
        write_output_atomic(tmp_path / "x.yaml", "data", "--out")
    assert list(tmp_path.iterdir()) == []


def test_plot_is_written_through_a_temporary_file(capsys, tmp_path):
    png = tmp_path / "b.png"
    args = ["evaluate", "-m", "llama70b", "-c", SUPERPOD, "-p", str(DATA / "plan-tp8.yaml")]
    code, _, _ = _run(capsys, *args, "--plot", str(png))
    assert code == 0 and png.read_bytes()[:4] == b"\x89PNG"
    code, _, err = _run(capsys, *args, "--plot", str(png))
    assert code == 2 and "--plot" in err and "--force" in err
    code, _, err = _run(capsys, *args, "--plot", str(tmp_path / "b.xyz"))
    assert code == 2 and "--plot" in err and "xyz" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.png"]


# ---- reads ----------------------------------------------------------------------------------
def test_read_user_file_refuses_what_is_not_a_regular_file(tmp_path):
    with pytest.raises(InputError, match="a directory"):
        read_user_file(tmp_path, "x")
    big = tmp_path / "big.yaml"
    big.write_bytes(b"a" * 101)
    with pytest.raises(InputError, match="larger than 100 bytes"):
        read_user_file(big, "x", 100)
    assert read_user_file(big, "x", 101) == "a" * 101


def test_megatron_argument_file_not_utf8(capsys, tmp_path):
    f = tmp_path / "args.txt"
    f.write_bytes(b"--tensor-model-parallel-size 8 \xff\xfe")
    code, _, err = _run(capsys, "evaluate", "-m", "llama3-70b", "-c", SUPERPOD, "--from",
                       "megatron", f"@{f}")
    assert code == 2 and "not UTF-8" in err and str(f) in err


@pytest.mark.parametrize("text, key, line", [
    ("name: a\nnum_layers: 2\nname: b\n", "name", 3),
    ("a:\n  x: 1\n  y: 2\n  x: 3\n", "x", 4),
])
def test_duplicate_yaml_keys_refused(capsys, tmp_path, text, key, line):
    f = tmp_path / "m.yaml"
    f.write_text(text)
    code, _, err = _run(capsys, "solve", "-m", str(f), *SOLVE)
    assert code == 2 and f"duplicate key '{key}'" in err and f"line {line}" in err


def test_duplicate_json_keys_refused(capsys, tmp_path):
    f = tmp_path / "config.json"
    f.write_text('{"num_hidden_layers": 2, "num_hidden_layers": 80}')
    code, _, err = _run(capsys, "solve", "-m", str(f), *SOLVE)
    assert code == 2 and "duplicate key 'num_hidden_layers'" in err


def test_yaml_merge_keys_still_override():
    from planner.specs.loaders import read_structured

    assert read_structured(_tmp_yaml("b: &b {x: 1, y: 2}\nc:\n  <<: *b\n  x: 3\n"))["c"] == {
        "x": 3, "y": 2}


def _tmp_yaml(text: str) -> Path:
    import tempfile

    fd, name = tempfile.mkstemp(suffix=".yaml")
    os.write(fd, text.encode())
    os.close(fd)
    return Path(name)


# ---- special files for every path option of every command, in a bounded subprocess ----------
SWEEP = {"base": {"model": TINY, "cluster": "dgx-h100-superpod", "gpus": 16,
                  "time_limit_s": 10, "max_microbatch": 2, "max_virtual_stages": 2},
         "axes": {"nvs_domain": [8]}}
#: each command's valid arguments, and its path options (None: the positional argument)
COMMANDS = {
    "evaluate": (["-m", TINY, "-c", "dgx-h100-superpod", "--gpus", "8"],
                 ["-m", "-c", "-p", "--plot", "@"]),
    "solve": (["-m", TINY, *SOLVE, "--export", "megatron"],
              ["-m", "-c", "-p", "--out", "--export-out"]),
    "export": ([PLAN70, "-m", "llama3-70b", "-c", SUPERPOD, "-f", "megatron"],
               [None, "-m", "-c", "--out"]),
    "procure": (["-m", TINY, "--tokens", "1e9", "--gpus", "h100", "--max-gpus", "16",
                 "--workers", "1", "--time-limit", "10"], ["-m", "-c", "--prices", "--plot"]),
    "serve": (["-m", TINY, "-c", "dgx-h100-superpod", "--isl", "512", "--osl", "64",
               "--rate", "2"], ["-m", "-c", "--plot"]),
    "sweep": (["SWEEP"], [None, "--out", "--plot", "base.model"]),
}
SPECIALS = ["fifo", "/dev/zero", "dir", "loop", "/dev/full"]

RUNNER = textwrap.dedent("""
    import contextlib, io, json, os, resource, signal, sys
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    from planner.cli import main

    class Hang(Exception):
        pass

    def alarm(*_):
        raise Hang()

    signal.signal(signal.SIGALRM, alarm)
    results = []
    for args in json.load(sys.stdin):
        sys.argv = ["planner", *args]
        err = io.StringIO()
        code, exc = 0, None
        signal.alarm(20)
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                main()
        except SystemExit as e:
            code = e.code or 0
        except BaseException as e:
            exc = type(e).__name__
        finally:
            signal.alarm(0)
        results.append({"args": args, "code": code, "exc": exc, "err": err.getvalue()})
    print(json.dumps(results))
""")


def _special(kind: str, folder: Path, suffix: str) -> str:
    if kind.startswith("/"):
        return kind
    path = folder / f"{kind}{suffix}"
    if not os.path.lexists(path):
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "dir":
            path.mkdir()
        else:
            path.symlink_to(path)
    return str(path)


def _cases(folder: Path) -> list[list[str]]:
    cases = []
    for command, (base, options) in COMMANDS.items():
        for option in options:
            for kind in SPECIALS:
                suffix = ".csv" if command == "sweep" and option == "--out" else ".yaml"
                path = _special(kind, folder, suffix)
                args = [command, *base]
                if command == "sweep":
                    spec = dict(SWEEP)
                    if option == "base.model":
                        spec = {**SWEEP, "base": {**SWEEP["base"], "model": path}}
                    f = folder / f"sweep-{len(cases)}.yaml"
                    f.write_text(yaml.safe_dump(spec))
                    args = [command, path if option is None else str(f)]
                    if option in ("--out", "--plot"):
                        args += [option, path]
                elif option is None:
                    args[1] = path
                elif option == "@":
                    args += ["--from", "megatron", "@" + path]
                elif option in base:
                    args[base.index(option) + 1 + 1] = path
                else:
                    args += [option, path]
                cases.append(args)
    return cases


@pytest.mark.slow(reason="every command with every path option")
@linux
def test_special_files_for_every_path_option(tmp_path):
    """A FIFO, /dev/zero, a folder, a link to itself and /dev/full as every file option
    of every command: exit 2 with a message naming the path, never a hang, a memory
    blow-up (2 GiB address-space limit) or a traceback."""
    cases = _cases(tmp_path)
    assert len(cases) > 100
    proc = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps(cases),
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "COLUMNS": "400"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    bad = []
    for r in json.loads(proc.stdout):
        path = next((a for a in r["args"] if any(k in a for k in ("fifo", "dir", "loop",
                                                                   "/dev/"))), "")
        name = os.path.basename(path.lstrip("@"))
        if r["exc"] or r["code"] != 2 or "Traceback" in r["err"] or name not in r["err"]:
            bad.append((r["args"], r["code"], r["exc"], r["err"][-300:]))
    assert bad == []
    # every output option left the special file as it was: no regular file in its place
    assert os.path.isdir(tmp_path / "dir.yaml") and os.path.islink(tmp_path / "loop.yaml")


# ---- the sweep table ------------------------------------------------------------------------
def _sweep_file(tmp_path: Path, axes: dict | None = None) -> Path:
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({**SWEEP, "axes": axes or {"nvs_domain": [4, 8]}}))
    return f


def test_sweep_output_locked_while_another_sweep_writes(capsys, tmp_path):
    out = tmp_path / "r.csv"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom planner.sweep.table import output_lock\n"
         f"with output_lock({str(out)!r}, 'planner sweep other.yaml'):\n"
         "    print('held', flush=True)\n    sys.stdin.read()\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        code, _, err = _run(capsys, "sweep", str(_sweep_file(tmp_path)), "--out", str(out),
                           "-j", "1")
        assert code == 2 and "another sweep" in err and f"pid {holder.pid}" in err
        assert "other.yaml" in err and not out.exists()
    finally:
        holder.communicate("", timeout=30)
    assert not (tmp_path / ".r.csv.lock").exists()  # released and removed
    code, _, err = _run(capsys, "sweep", str(_sweep_file(tmp_path)), "--out", str(out), "-j", "1")
    assert code == 0 and "2 rows written" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.csv", "s.yaml"]


def test_sweep_table_temporary_is_unique(tmp_path):
    """Every writer had the temporary ``.NAME.tmp``: a second writer's removed it (or a
    folder of that name broke every write)."""
    from planner.sweep.table import read_rows, write_table

    (tmp_path / ".r.csv.tmp").mkdir()
    write_table([{"point_key": "k", "a": 1}], ["a"], tmp_path / "r.csv")
    assert read_rows(tmp_path / "r.csv")[0]["point_key"] == "k"


def test_sweep_resume_of_another_sweeps_table_refused(capsys, tmp_path):
    out = tmp_path / "r.csv"
    code, _, _ = _run(capsys, "sweep", str(_sweep_file(tmp_path)), "--out", str(out), "-j", "1")
    assert code == 0
    before = out.read_bytes()
    other = _sweep_file(tmp_path, {"nvs_domain": [2]})
    code, _, err = _run(capsys, "sweep", str(other), "--out", str(out), "-j", "1")
    assert code == 2 and "another sweep" in err and out.read_bytes() == before


def test_sweep_resume_drops_a_cut_off_last_row(capsys, tmp_path):
    from planner.sweep import expand, sweep_from_dict
    from planner.sweep.table import done_results, full_row, read_rows, write_table

    points = expand(sweep_from_dict({**SWEEP, "axes": {"nvs_domain": [2, 4, 8]}}, "s"))
    result = {"status": "optimal", "tp": 2, "iteration_time_s": 1.5, "mfu": 0.4}
    out = tmp_path / "r.csv"
    write_table([full_row(p, result) for p in points], ["nvs_domain"], out)
    text = out.read_text()
    out.write_text(text[:text.rindex("\"optimal\"") + 4])  # the last row cut off mid-cell
    notes: list[str] = []
    done = done_results(out, points, warn=notes.append)
    assert set(done) == {p.key for p in points[:2]} and done[points[0].key]["tp"] == 2
    assert len(notes) == 1 and "cut off" in notes[0]
    assert len(read_rows(out)) == 2 and out.read_text().endswith("\n")  # rewritten whole
    # a damaged row before the last is not guessed at
    lines = text.splitlines(keepends=True)
    out.write_text(lines[0] + lines[1][:20] + "\n" + "".join(lines[2:]))
    with pytest.raises(InputError, match="line 2 has"):
        done_results(out, points)


def test_errors_never_break_a_long_path_across_lines(capsys, tmp_path):
    """Rich folds output at the console width; an error naming a file must keep the name
    on one line so it can be copied (soft wrap)."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    f = deep / "args.txt"
    f.write_bytes(b"--tensor-model-parallel-size 8 \xff\xfe")
    code, _, err = _run(capsys, "evaluate", "-m", "llama3-70b", "-c", SUPERPOD, "--from",
                        "megatron", f"@{f}")
    assert code == 2 and str(f) in err
