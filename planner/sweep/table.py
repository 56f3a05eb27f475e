"""The results table: one row per point, written as Parquet (pyarrow) or CSV, and read
back to resume a sweep (rows are matched to points by ``point_key``)."""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any, Sequence

from planner.errors import InputError
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
    "bottleneck": "string", "train_days": "float64", "gpu_hours": "float64",
    "cost_usd": "float64", "energy_mwh": "float64",
}
FORMATS = (".parquet", ".csv")


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
    """Write ``rows`` to ``path`` (.parquet or .csv), replacing it atomically."""
    fmt = output_format(path)
    out = Path(path)
    tmp = out.with_name(f".{out.name}.tmp")
    table = _arrow_table(rows, axes)
    if fmt == ".parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, tmp)
    else:
        import pyarrow.csv as pcsv

        pcsv.write_csv(table, tmp)
    os.replace(tmp, out)


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


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """The rows of an output file (CSV cells typed: result columns by their type, axis
    values as numbers where they read as numbers)."""
    fmt = output_format(path)
    try:
        if fmt == ".parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pylist()
        with open(path, newline="") as f:
            return [{k: _typed(v, "string" if k == "point_key" else RESULT_COLUMNS.get(k))
                     for k, v in r.items()}
                    for r in csv.DictReader(f)]
    except (OSError, ValueError) as err:  # pyarrow's errors derive from these
        raise InputError(f"--out {str(path)!r}: cannot read the earlier results to resume "
                         f"({err}); remove the file or choose another --out") from None


def done_results(path: str | Path, points: Sequence[Point]) -> dict[str, dict[str, Any]]:
    """Results already in ``path`` by point key; a row of another sweep is an error."""
    if not Path(path).exists():
        return {}
    keys = {p.key for p in points}
    rows = read_rows(path)
    foreign = [r.get("point_key") for r in rows if r.get("point_key") not in keys]
    if foreign:
        raise InputError(f"--out {str(path)!r}: {len(foreign)} rows (point_key "
                         f"{foreign[0]!r}, ...) are not points of this sweep; it was written "
                         "by another sweep file; choose another --out")
    return {r["point_key"]: {c: r.get(c) for c in RESULT_COLUMNS} for r in rows}
