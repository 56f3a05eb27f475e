"""The results table: one row per point, written as Parquet (pyarrow) or CSV, and read
back to resume a sweep (rows are matched to points by ``point_key``)."""

from __future__ import annotations

import csv
import errno
import io
import os
import socket
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Sequence

from planner.errors import InputError
from planner.fileio import atomic_output, read_user_bytes, read_user_file
from planner.sweep.spec import Point

#: result columns and their types, in the table's order (after point_key and the axes)
RESULT_COLUMNS: dict[str, str] = {
    "status": "string", "reason": "string", "gpu_name": "string", "cluster_name": "string",
    "num_gpus": "int64", "tp": "int64", "pp": "int64", "dp": "int64", "cp": "int64",
    "ep": "int64", "microbatch_size": "int64", "virtual_stages": "int64",
    "zero_stage": "int64", "recompute": "string", "sequence_parallel": "bool",
    "offload_optimizer": "bool", "iteration_time_s": "float64", "mfu": "float64",
    "memory_per_gpu_gib": "float64", "tokens_per_s": "float64", "t_compute_s": "float64",
    "t_memory_s": "float64", "t_network_s": "float64", "t_bubble_s": "float64",
    "t_straggler_s": "float64", "bottleneck": "string", "train_days": "float64",
    "gpu_hours": "float64", "cost_usd": "float64", "energy_mwh": "float64",
    "facility_power_mw": "float64", "choice_owned": "bool",
}
FORMATS = (".parquet", ".csv")
#: a resumed CSV table is read whole: 100,000 points at ~1 KB a row, with room to spare
MAX_TABLE_BYTES = 1 << 30


def output_format(path: str | Path) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise InputError(f"--out {str(path)!r}: expected a .parquet or .csv file")
    return suffix


def check_axis_names(names: Sequence[str]) -> None:
    clash = [n for n in names if n in RESULT_COLUMNS or n == "point_key"]
    if clash:
        raise InputError(f"axes {clash}: these names are result columns; rename the axis")


def full_row(point: Point, result: dict[str, Any]) -> dict[str, Any]:
    """The table row of ``point``: its key, its axis values, then every result column."""
    row: dict[str, Any] = {"point_key": point.key}
    row.update(point.axes)
    row.update({c: result.get(c) for c in RESULT_COLUMNS})
    return row


def _arrow_table(rows: list[dict[str, Any]], axes: Sequence[str]):
    import pyarrow as pa

    cols: dict[str, Any] = {"point_key": pa.array([r["point_key"] for r in rows], pa.string())}
    for a in axes:
        values = [r[a] for r in rows]
        kinds = {type(v) for v in values if v is not None}
        if kinds == {int, float}:  # 1 and 0.5 on one axis: a float column
            values = [None if v is None else float(v) for v in values]
        elif len(kinds) > 1 or kinds & {dict, list}:
            values = [None if v is None else str(v) for v in values]
        cols[a] = pa.array(values)
    for c, kind in RESULT_COLUMNS.items():
        cols[c] = pa.array([r.get(c) for r in rows], type=pa.type_for_alias(kind))
    return pa.table(cols)


def write_table(rows: list[dict[str, Any]], axes: Sequence[str], path: str | Path) -> None:
    """Write ``rows`` to ``path`` (.parquet or .csv), replacing it atomically through a
    temporary file of its own (concurrent writers never share one); refused while another
    process holds the output's lock (:func:`output_lock`)."""
    fmt = output_format(path)
    table = _arrow_table(rows, axes)
    with _locked(path):
        with atomic_output(path, "--out") as tmp:
            if fmt == ".parquet":
                import pyarrow.parquet as pq

                pq.write_table(table, tmp)
            else:
                import pyarrow.csv as pcsv

                pcsv.write_csv(table, tmp)


# ---- the output lock -----------------------------------------------------------------------
#: locks this process holds: the output's real path -> the open lock file
_HELD: dict[str, int] = {}


def lock_path(path: str | Path) -> Path:
    """The lock file beside an output: ``.NAME.lock`` (it names the holder)."""
    out = Path(path)
    return out.with_name(f".{out.name}.lock")


def _holder(lock: Path) -> str:
    try:
        text = lock.read_text(errors="replace").strip()[:300]
    except OSError:
        text = ""
    return text or "another process"


@contextmanager
def output_lock(path: str | Path, command: str | None = None) -> Iterator[None]:
    """Hold the output's lock (``fcntl.flock`` on ``.NAME.lock``, holding the holder's pid,
    host and command) while a sweep writes ``path``: a second writer is refused with an
    :class:`InputError` naming the holder. The kernel drops the lock when the holder dies,
    however it dies."""
    import fcntl

    key = os.path.realpath(path)
    if key in _HELD:
        yield
        return
    lock = lock_path(path)
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
                         | getattr(os, "O_CLOEXEC", 0), 0o666)
        except OSError as err:
            raise InputError(f"--out {path}: cannot create the lock file {lock}: "
                             f"{err.strerror or err}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                raise InputError(f"--out {path}: cannot lock {lock}: {err.strerror}") from None
            raise InputError(f"--out {path}: another sweep is writing it ({_holder(lock)}); "
                             "wait for it to finish or choose another --out") from None
        try:  # the holder before us may have removed the file it locked: lock the new one
            same = os.path.samestat(os.fstat(fd), os.stat(lock))
        except OSError:
            same = False
        if same:
            break
        os.close(fd)
    cmd = command if command is not None else " ".join(sys.argv)
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}: {cmd[:200]}\n".encode(
        "utf-8", "replace"))
    _HELD[key] = fd
    try:
        yield
    finally:
        del _HELD[key]
        try:
            os.unlink(lock)  # while still locked: a waiting writer re-checks the inode
        except OSError:
            pass
        os.close(fd)


@contextmanager
def _locked(path: str | Path) -> Iterator[None]:
    """The output's lock for one write, unless this process already holds it."""
    if os.path.realpath(path) in _HELD:
        yield
    else:
        with output_lock(path):
            yield


def _typed(value: str, kind: str | None) -> Any:
    """A CSV cell as its column's type (empty: missing); an axis cell (``kind`` None) as a
    number when it reads as one."""
    if value == "":
        return None
    if kind is None:
        for cast in (int, float):
            try:
                return cast(value)
            except ValueError:
                pass
        return value
    if kind == "int64":
        return int(value)
    if kind == "float64":
        return float(value)
    if kind == "bool":
        return value.lower() == "true"
    return value


def _read(path: str | Path) -> tuple[list[dict[str, Any]], str | None]:
    """The rows of an output file (CSV cells typed: result columns by their type, axis
    values as numbers where they read as numbers), and a note when a cut-off last CSV row
    (a copy or a disk that stopped mid-line) was left out."""
    fmt = output_format(path)
    note = None
    try:
        if fmt == ".parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            data = read_user_bytes(path, "--out", MAX_TABLE_BYTES)
            return pq.read_table(pa.BufferReader(data)).to_pylist(), None
        text = read_user_file(path, "--out", MAX_TABLE_BYTES)
        reader = csv.DictReader(io.StringIO(text, newline=""))
        raw = list(reader)
        # a row with fewer cells than the header (None) or more (key None), or a last line
        # without its newline: cut off; the table is written whole, so only the last can be
        bad = [i for i, r in enumerate(raw) if None in r or None in r.values()]
        if raw and not text.endswith(("\n", "\r")) and len(raw) - 1 not in bad:
            bad.append(len(raw) - 1)
        if bad and bad != [len(raw) - 1]:
            raise InputError(f"--out {str(path)!r}: line {bad[0] + 2} has "
                             f"{len([v for v in raw[bad[0]].values() if v is not None])} "
                             f"cells, the header {len(reader.fieldnames or [])}; the table is "
                             "damaged; remove the file or choose another --out")
        if bad:
            raw.pop()
            note = (f"--out {path}: its last row was cut off (line {len(raw) + 2}); left "
                    "out, its point runs again")
        return [{k: _typed(v, "string" if k == "point_key" else RESULT_COLUMNS.get(k))
                 for k, v in r.items()} for r in raw], note
    except (OSError, ValueError, csv.Error) as err:  # pyarrow's errors derive from these
        raise InputError(f"--out {str(path)!r}: cannot read the earlier results to resume "
                         f"({err}); remove the file or choose another --out") from None


def _warn(message: str) -> None:
    warnings.warn(message, stacklevel=3)


def read_rows(path: str | Path,
              warn: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """The rows of an output file (see :func:`_read`); ``warn`` gets the note on a cut-off
    last row (default: :func:`warnings.warn`)."""
    rows, note = _read(path)
    if note:
        (warn or _warn)(note)
    return rows


def done_results(path: str | Path, points: Sequence[Point],
                 warn: Callable[[str], None] | None = None) -> dict[str, dict[str, Any]]:
    """Results already in ``path`` by point key; a row of another sweep is an error. A
    cut-off last row is left out (``warn`` told) and the file rewritten without it."""
    if not Path(path).exists():
        return {}
    keys = {p.key for p in points}
    rows, note = _read(path)
    foreign = [r.get("point_key") for r in rows if r.get("point_key") not in keys]
    if foreign:
        raise InputError(f"--out {str(path)!r}: {len(foreign)} rows (point_key "
                         f"{foreign[0]!r}, ...) are not points of this sweep; it was written "
                         "by another sweep file; choose another --out")
    done = {r["point_key"]: {c: r.get(c) for c in RESULT_COLUMNS} for r in rows}
    if note:
        (warn or _warn)(note)
        axes = list(points[0].axes) if points else []
        write_table([full_row(p, done[p.key]) for p in points if p.key in done], axes, path)
    return done
