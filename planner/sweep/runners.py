"""Running a sweep's points: in this process, on a local process pool
(concurrent.futures), or as Ray tasks (``ray.remote``; Ray's scheduler places them). The
rows come back in any order and are kept in the grid's order, so both backends write the
same table; the output is rewritten as results arrive, so an interrupted sweep resumes
where it stopped (points whose key is already in the output are not run again)."""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any

from planner.errors import InputError, PlannerError
from planner.sweep.point import check_points, run_point
from planner.sweep.spec import Point
from planner.sweep.table import (RESULT_COLUMNS, check_axis_names, done_results, full_row,
                                  write_table)
from planner.workers import INTERRUPTS, WorkerPool, with_message

BACKENDS = ("local", "ray")
Runner = Callable[[dict[str, Any]], dict[str, Any]]
Rows = Generator[tuple[Point, dict], None, None]
#: how often the output is rewritten while points run: every this many results or seconds
FLUSH_ROWS, FLUSH_S = 25, 10.0
RAY_HINT = "pip install 'planner[ray]'"


def _settings(point: Point) -> dict[str, Any]:
    return point.spec.model_dump(mode="json")


def _at(point: Point, err: InputError) -> InputError:
    return InputError(f"point {point.axes}: {err}")


def _serial(pending: Sequence[Point], runner: Runner) -> Rows:
    for p in pending:
        try:
            row = runner(_settings(p))
        except InputError as err:
            raise _at(p, err) from None
        yield p, row


def _pool(pending: Sequence[Point], runner: Runner, workers: int | None) -> Rows:
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, Future, wait

    # spawn: a fresh interpreter per worker, never a fork of a process with solver threads
    ctx = multiprocessing.get_context("spawn")
    width = workers or _cpus()
    todo = iter(pending)
    with WorkerPool(max_workers=width, mp_context=ctx) as pool:
        running: dict[Future, Point] = {}
        while True:
            # a few points queued per worker, not the whole grid's settings at once
            for p in itertools.islice(todo, max(2 * width - len(running), 0)):
                running[pool.submit(runner, _settings(p))] = p
            if not running:
                return
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in finished:
                p = running.pop(fut)
                try:
                    row = fut.result()
                except InputError as err:
                    raise _at(p, err) from None
                yield p, row


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _ray(pending: Sequence[Point], runner: Runner, address: str | None,
         workers: int | None) -> Rows:
    try:
        import ray
    except ImportError:
        raise InputError(f"--backend ray: Ray is not installed; {RAY_HINT}") from None
    started = not ray.is_initialized()
    if started:  # address None starts a local instance (ray.init docs: "address")
        ray.init(address=address, num_cpus=workers if address is None else None,
                 include_dashboard=False, log_to_driver=False)
    task = ray.remote(num_cpus=1)(runner)
    refs: dict[Any, Point] = {}
    try:
        waiting = list(pending)
        limit = workers or len(waiting) or 1  # at most this many tasks in flight
        while waiting or refs:
            while waiting and len(refs) < limit:
                p = waiting.pop(0)
                refs[task.remote(_settings(p))] = p
            ready, _ = ray.wait(list(refs), num_returns=1)
            p = refs.pop(ready[0])
            yield p, _ray_get(ray, ready[0], p)
    finally:
        for ref in refs:  # tasks in flight on a cluster this process does not own
            with contextlib.suppress(Exception):  # finished or already gone
                ray.cancel(ref, force=True)
        if started:
            ray.shutdown()


def _ray_get(ray: Any, ref: Any, point: Point) -> dict[str, Any]:
    """A task's row; a planner error inside the task is raised as itself."""
    try:
        return ray.get(ref)
    except Exception as err:  # RayTaskError wraps the task's exception as .cause
        cause = getattr(err, "cause", None)
        if isinstance(cause, InputError):
            raise _at(point, cause) from None
        if isinstance(cause, PlannerError):
            raise cause from None
        raise


def _results(pending: Sequence[Point], backend: str, runner: Runner, address: str | None,
             workers: int | None) -> Rows:
    if backend == "ray":
        return _ray(pending, runner, address, workers)
    if workers == 1 or len(pending) <= 1:
        return _serial(pending, runner)
    return _pool(pending, runner, workers)


def check_run_options(backend: str, address: str | None, workers: int | None) -> None:
    if backend not in BACKENDS:
        raise InputError(f"--backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    if address is not None and backend != "ray":
        raise InputError(f"--address {address!r}: only with --backend ray")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or workers < 1):
        raise InputError(f"--workers {workers!r}: expected a positive integer")


def run_sweep(points: Sequence[Point], *, out: str | None = None, backend: str = "local",
              address: str | None = None, workers: int | None = None,
              on_result: Callable[[Point, dict[str, Any]], None] | None = None,
              runner: Runner = run_point) -> list[dict[str, Any]]:
    """The table of ``points`` (rows in grid order). With ``out``, rows already there are
    kept and their points not run again; the file is rewritten as results arrive.
    ``on_result`` is called after each point run (for a progress bar)."""
    check_run_options(backend, address, workers)
    if points:
        check_axis_names(list(points[0].axes))
    check_points(points)
    done = done_results(out, points) if out else {}
    axes = list(points[0].axes) if points else []
    results: dict[str, dict[str, Any]] = dict(done)
    pending = list({p.key: p for p in points if p.key not in done}.values())
    total = len(done) + len(pending)

    def table() -> list[dict[str, Any]]:
        return [full_row(p, results[p.key]) for p in points if p.key in results]

    last, fresh, unsaved = time.monotonic(), 0, 0
    rows = _results(pending, backend, runner, address, workers)
    try:
        for point, result in rows:
            results[point.key] = {c: result.get(c) for c in RESULT_COLUMNS}
            fresh += 1
            unsaved += 1
            if on_result:
                on_result(point, result)
            # each rewrite writes the whole table: waiting for a tenth more rows keeps the
            # writes linear in the grid, the time bound keeps what an interrupt can lose
            if out and (unsaved >= max(FLUSH_ROWS, len(results) // 10)
                        or time.monotonic() - last > FLUSH_S):
                write_table(table(), axes, out)
                last, unsaved = time.monotonic(), 0
    except INTERRUPTS as exc:
        where = f"saved to {out}; rerun the same command to resume" if out else \
            "done; nothing saved (no --out)"
        raise with_message(exc, f"interrupted: {len(results)} of {total} points {where}"
                           ) from None
    finally:
        rows.close()  # stops the workers now, not when the generator is collected
        if out and fresh:
            write_table(table(), axes, out)
    return table()
