"""Signals: a sweep on a process pool stops its workers on SIGINT (Ctrl-C: the whole
process group) and SIGTERM, saves its rows, exits 130 or 143 with one line; its workers
and the resource tracker die with it on SIGKILL. The other commands exit 130 on Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from planner.sweep import expand, load_sweep
from planner.sweep.table import done_results, read_rows

from conftest import DATA

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")

#: 400 points of ~0.05 s each: seconds of work on two workers, so a signal sent after the
#: first rows are written finds the sweep running
SLOW = {"name": "slow", "base": {"model": str(DATA / "tiny-model.yaml"),
                                 "cluster": "dgx-h100-superpod", "gpus": 16},
        "axes": {"peak_flops": [1 + i / 10 for i in range(20)],
                 "hbm_bandwidth": [1 + i / 10 for i in range(20)]}}
#: liveness bounds, not speed requirements
START_S, EXIT_S = 60.0, 20.0


def _descendants(pid: int) -> set[int]:
    """Live (not zombie) processes below ``pid``: a pool's workers, the resource tracker, a
    forkserver and its children."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, ppid = stat.read_text().rpartition(")")[2].split()[:2]
        except OSError:  # gone meanwhile
            continue
        if state != "Z":
            parents[int(stat.parent.name)] = int(ppid)
    out: set[int] = set()
    while True:
        more = {c for c, p in parents.items() if (p == pid or p in out) and c not in out}
        if not more:
            return out
        out |= more


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def _wait_until(cond, limit_s: float) -> bool:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


def _start(tmp_path: Path, rows: bool = True) -> tuple[subprocess.Popen, Path, Path]:
    f = tmp_path / "slow.yaml"
    f.write_text(yaml.safe_dump(SLOW))
    out = tmp_path / "out.csv"
    proc = subprocess.Popen([sys.executable, "-m", "planner", "sweep", str(f), "--out", str(out),
                             "--workers", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    # running: two workers and the resource tracker started (and the first rows written)
    started = _wait_until(lambda: proc.poll() is not None or (
        (out.exists() or not rows) and len(_descendants(proc.pid)) >= 3), START_S)
    if not started or proc.poll() is not None:
        proc.kill()
        pytest.fail(f"the sweep did not start: {proc.communicate()}")
    return proc, f, out


@pytest.mark.slow(reason="a 400-point sweep in a subprocess, twice")
@pytest.mark.parametrize("signum,code,group", [(signal.SIGINT, 130, True),
                                               (signal.SIGTERM, 143, False)])
def test_interrupted_sweep_stops_workers_saves_rows_and_exits(tmp_path, signum, code, group):
    """SIGINT to the process group is Ctrl-C at a terminal (the workers get it too);
    SIGTERM to the parent alone is ``kill``."""
    proc, f, out = _start(tmp_path)
    workers = _descendants(proc.pid)
    # rows already written when the signal is sent (how many depends on the machine's speed:
    # a flush every 25 rows or 10 s); the output is replaced whole, so this reads one table
    before = len(read_rows(out))
    if group:
        os.killpg(proc.pid, signum)
    else:
        os.kill(proc.pid, signum)
    try:
        _, stderr = proc.communicate(timeout=EXIT_S)
    finally:
        proc.kill()
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr and "Error" not in stderr, stderr
    # "400 points (400 distinct)", progress lines ("[12.3 s] ...", after 2 s when stderr is
    # no terminal: how many depends on the machine's speed), then one line
    lines = stderr.strip().splitlines()
    counted, last = lines[0], lines[-1]
    assert counted.startswith("400 points")
    assert all(line.startswith("[") for line in lines[1:-1]), lines
    saved = len(read_rows(out))
    # every row done is saved: those on disk at the signal and those finished since
    assert 1 <= before <= saved <= 400, (before, saved)
    assert last == (f"interrupted: {saved} of 400 points saved to {out}; rerun the same "
                    "command to resume")
    assert _wait_until(lambda: not any(_alive(w) for w in workers), EXIT_S)
    # resumable: the rows are this sweep's points
    assert len(done_results(out, expand(load_sweep(f), str(f)))) == saved


def test_workers_die_with_a_killed_sweep(tmp_path):
    proc, _, _ = _start(tmp_path, rows=False)
    children = _descendants(proc.pid)  # the workers and the resource tracker
    try:
        proc.kill()
        proc.wait(timeout=EXIT_S)
        assert _wait_until(lambda: not any(_alive(c) for c in children), EXIT_S), \
            [Path(f"/proc/{c}/cmdline").read_text() for c in children if _alive(c)]
    finally:
        for c in children:
            if _alive(c):
                os.kill(c, signal.SIGKILL)


def test_ctrl_c_in_another_command_is_one_line():
    """A procurement over the catalog runs for minutes; Ctrl-C exits 130 with one line."""
    proc = subprocess.Popen([sys.executable, "-m", "planner", "procure", "-m", "llama3-70b",
                             "--tokens", "1e12", "--workers", "2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    started = _wait_until(lambda: len(_descendants(proc.pid)) >= 3 or proc.poll() is not None,
                          START_S)
    workers = _descendants(proc.pid)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        _, stderr = proc.communicate(timeout=EXIT_S)
    finally:
        proc.kill()
    assert started and proc.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == "interrupted" and "Traceback" not in stderr
    assert _wait_until(lambda: not any(_alive(w) for w in workers), EXIT_S)


def test_a_pool_left_by_an_exception_kills_its_workers(monkeypatch):
    """Leaving the pool on an error or an interrupt does not wait for the running jobs
    (here 40 s sleeps; a sweep's point can be a 60 s solve), and no thread of the pool
    reports an error (Python 3.11's InvalidStateError on a cancelled future)."""
    import multiprocessing
    import threading

    from planner.workers import WorkerPool

    thread_errors: list = []
    monkeypatch.setattr(threading, "excepthook", thread_errors.append)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError):
        with WorkerPool(2, multiprocessing.get_context("spawn")) as pool:
            pool.submit(os.getpid).result(timeout=START_S)  # the workers are up
            jobs = [pool.submit(time.sleep, 40) for _ in range(4)]
            procs = list(pool._processes.values())
            time.sleep(0.5)
            raise RuntimeError("a point's input error")
    assert time.monotonic() - t0 < 30
    assert not any(p.is_alive() for p in procs)
    assert all(j.done() for j in jobs) and thread_errors == []


def test_the_procurement_forkserver_ignores_ctrl_c_before_it_imports_the_solver():
    """A Ctrl-C landing while the forkserver imports its preload, or while a worker it forked
    has not yet run its initializer, printed a KeyboardInterrupt traceback (seen once in
    test_ctrl_c_in_another_command_is_one_line). The forkserver's first preload makes it
    ignore SIGINT, and its workers inherit that handler."""
    from planner.procurement.train import FORKSERVER_PRELOAD

    assert FORKSERVER_PRELOAD[0] == "planner.procurement.deaf"
    out = subprocess.run([sys.executable, "-c", "import signal, planner.procurement.deaf; "
                          "print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"
