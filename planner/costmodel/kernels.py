"""Kernel speeds read from a GPU's measured kernel table (``planner.specs.kernels``), by
interpolation over shape.

- GEMM throughput: trilinear in (log2 m, log2 n, log2 k) over the measured grid. Above the
  grid the largest shape's throughput holds (large GEMMs saturate); below it in n or k the
  time of the smallest measured dimension holds (a GEMM that small is bound by its tile and
  launch floor, not its FLOPs); below it in m (decode steps) the smallest m's throughput
  holds for the math, and the memory side is the weight-streaming speed the measured
  decode GEMMs of the nearest shape reached (:func:`decode_weight_GBps`).
- GEMM throughput of a table without a full grid (published figures transcribed for a GPU
  this project could not run: a handful of shapes, no grid): inverse-square-distance
  weights in (log2 m, log2 n, log2 k) over the published shapes (:func:`sparse_gemm_tflops`),
  so each published shape returns its figure, a shape between them a weighted mean of its
  neighbours' (never more than the fastest published figure); outside the published range
  of a dimension the shape is clamped to it (the throughput held, as for attention and
  copies), and the memory side of the roofline (``compute.gemm_time_s``) bounds the thin
  GEMMs no figure covers. Unlike a grid's floor, nothing is assumed about how the
  throughput falls below the smallest published dimension.
- Fused attention throughput: linear in log2(sequence length) for the measured case nearest
  in head dimension, mask and grouping; held constant outside the measured lengths. A
  published case with no backward figure leaves the backward unknown (None).
- Copy bandwidth: linear in log2(bytes), held constant outside the measured sizes.
- A transcribed row measured on another GPU of the same die (its ``gpu``) is read at the
  same fraction of that GPU's datasheet peak (:func:`row_scale`).
"""

from __future__ import annotations

import bisect
import math
import statistics
from functools import lru_cache

import numpy as np

from planner.specs.kernels import KernelTable, Row
from planner.specs.loaders import load_gpu


@lru_cache(maxsize=None)
def _catalog_gpu(name: str):
    return load_gpu(name)


def row_scale(table: KernelTable, row: Row, dtype: str | None) -> float:
    """Factor from a row's figure to the table's GPU: 1 for a row measured on it; for a row
    measured on another GPU of the same die (``row.gpu``), the table GPU's datasheet peak in
    ``dtype`` over that GPU's (its HBM bandwidth over that GPU's for a copy, ``dtype``
    None): the kernel runs at the same fraction of either GPU's peak, as
    ``compute.flops_scale`` assumes for a GPU reading another's table."""
    if row.gpu is None or row.gpu == table.gpu:
        return 1.0
    own, other = _catalog_gpu(table.gpu), _catalog_gpu(row.gpu)
    if dtype is None:
        return own.hbm_Bps / other.hbm_Bps
    return own.peak_flops(dtype) / other.peak_flops(dtype)


def _bracket(grid: tuple[float, ...], x: float) -> tuple[int, int, float]:
    """Indices of the grid points around ``x`` (log2 scale) and the weight of the upper one;
    ``x`` is inside ``[grid[0], grid[-1]]``."""
    j = bisect.bisect_left(grid, x)
    if j == len(grid):
        return j - 1, j - 1, 0.0
    if j == 0 or grid[j] == x:
        return j, j, 0.0
    lo, hi = grid[j - 1], grid[j]
    return j - 1, j, (math.log2(x) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))


@lru_cache(maxsize=None)
def _gemm_grid(table: KernelTable, dtype: str) -> tuple[tuple[float, ...], ...] | None:
    """(m values, n values, k values, flat TFLOP/s) of the full grid of ``dtype``; None
    where the table has no complete grid."""
    # a shape measured by the table's run and by a merged reference: the reference's figure
    rows = {(r.m, r.n, r.k): r.tflops * row_scale(table, r, dtype) for r in sorted(
        (r for r in table.gemm if r.dtype == dtype), key=lambda r: r.ref is not None)}
    if not rows:
        return None
    # the grid's values recur across the other two axes; a model shape measured on its own
    # (an extra row) adds values that occur once or twice
    axes = []
    for i in range(3):
        counts: dict[int, int] = {}
        for key in rows:
            counts[key[i]] = counts.get(key[i], 0) + 1
        top = max(counts.values())
        axes.append(sorted(v for v, c in counts.items() if 2 * c >= top))
    ms, ns, ks = axes
    if not all((m, n, k) in rows for m in ms for n in ns for k in ks):
        return None
    vals = tuple(rows[(m, n, k)] for m in ms for n in ns for k in ks)
    return tuple(float(x) for x in ms), tuple(float(x) for x in ns), \
        tuple(float(x) for x in ks), vals


#: how far (in octaves of shape, Euclidean over log2 m, n, k) a GEMM measured off the grid
#: reaches in correcting the grid's interpolation
OFF_GRID_REACH = 1.0


@lru_cache(maxsize=None)
def _off_grid(table: KernelTable, dtype: str) -> tuple[tuple[float, float, float, float], ...]:
    """(log2 m, log2 n, log2 k, measured / grid) of the ``dtype`` GEMMs measured off the
    grid (model shapes): each corrects the grid near its own shape."""
    grid = _gemm_grid(table, dtype)
    if grid is None:
        return ()
    ms, ns, ks = (set(a) for a in grid[:3])
    off = {(r.m, r.n, r.k): r.tflops * row_scale(table, r, dtype) for r in sorted(
        (r for r in table.gemm if r.dtype == dtype and not (r.m in ms and r.n in ns and r.k in ks)),
        key=lambda r: r.ref is not None)}  # a reference measurement wins
    return tuple((math.log2(m), math.log2(n), math.log2(k), tf / _grid_tflops(grid, m, n, k))
                 for (m, n, k), tf in off.items())


def gemm_tflops(table: KernelTable, dtype: str, m: float, n: float, k: float) -> float | None:
    """Measured throughput of an (m x k) @ (k x n) GEMM in ``dtype`` (TFLOP/s): interpolated
    over the grid, times a correction from the shapes measured off the grid within
    :data:`OFF_GRID_REACH` (inverse-square-distance weights over those shapes, whose
    correction is measured / grid, and the grid points around the shape, whose correction
    is 1), so every measured shape returns its measurement; None where the table has no
    grid for ``dtype``."""
    if min(m, n, k) <= 0:
        return None
    grid = _gemm_grid(table, dtype)
    if grid is None:
        return sparse_gemm_tflops(table, dtype, m, n, k)
    at = (math.log2(m), math.log2(n), math.log2(k))
    near = [(math.dist(at, p[:3]), p[3]) for p in _off_grid(table, dtype)]
    near = [x for x in near if x[0] < OFF_GRID_REACH]
    out = _grid_tflops(grid, max(m, grid[0][0]), n, k)
    if not near:
        return out
    corners = {tuple(math.log2(axis[j]) for axis, j in zip(grid[:3], pick))
               for pick in _corners(grid, m, n, k)}
    points = near + [(math.dist(at, c), 1.0) for c in corners]
    exact = [c for d, c in points if d == 0]
    if exact:
        return out * exact[0]
    w = [(1 / d ** 2, c) for d, c in points]
    return out * sum(a * c for a, c in w) / sum(a for a, _ in w)


@lru_cache(maxsize=None)
def _sparse_points(table: KernelTable, dtype: str) -> tuple[tuple[float, ...], ...]:
    """(log2 m, log2 n, log2 k, TFLOP/s) of every ``dtype`` GEMM of the table."""
    return tuple((math.log2(r.m), math.log2(r.n), math.log2(r.k),
                  r.tflops * row_scale(table, r, dtype))
                 for r in table.gemm if r.dtype == dtype)


#: Inverse-distance power of the sparse GEMM lookup: above the 3 dimensions of (m, n, k).
SHEPARD_POWER = 4


def sparse_gemm_tflops(table: KernelTable, dtype: str, m: float, n: float, k: float
                       ) -> float | None:
    """Throughput (TFLOP/s) of an (m x k) @ (k x n) GEMM from a table whose ``dtype``
    GEMMs form no grid: the inverse-distance-weighted mean (Shepard) in log2 shape over the
    published shapes, exact at each of them and never above the fastest, with the power
    SHEPARD_POWER above the shape space's dimension so that the nearest published shapes
    dominate (with a power at or below it, distant shapes pull every estimate toward the
    table's mean: Shepard 1968; Franke, Math. Comp. 38, 1982); each dimension
    clamped to its published range first (no figure says how fast a thinner GEMM runs:
    the roofline's memory side in ``compute.gemm_time_s`` bounds those). None without a
    ``dtype`` row."""
    points = _sparse_points(table, dtype)
    if not points:
        return None
    at = [min(max(math.log2(x), min(p[i] for p in points)), max(p[i] for p in points))
          for i, x in enumerate((m, n, k))]
    w = []
    for p in points:
        d = math.dist(at, p[:3])
        if d == 0:
            return p[3]
        w.append((d ** -SHEPARD_POWER, p[3]))
    return sum(a * tf for a, tf in w) / sum(a for a, _ in w)


def _corners(grid: tuple[tuple[float, ...], ...], m: float, n: float, k: float):
    """Index triples of the grid points around (m, n, k) (clamped to the grid)."""
    idx = [_bracket(axis, min(max(x, axis[0]), axis[-1]))[:2]
           for axis, x in zip(grid[:3], (m, n, k))]
    return {(a, b, c) for a in idx[0] for b in idx[1] for c in idx[2]}


def small_m(table: KernelTable, dtype: str, m: float) -> bool:
    """Whether an M = ``m`` GEMM lies below the grid's smallest M (a decode step's); never
    for a table without a grid (its small-M shapes take the floor of
    :func:`sparse_gemm_tflops`)."""
    grid = _gemm_grid(table, dtype)
    return grid is not None and m < grid[0][0]


def decode_weight_GBps(table: KernelTable, dtype: str, n: float, k: float) -> float | None:
    """Weight bytes per second (GB/s) the measured decode-step GEMMs of the (n, k) shape
    nearest in log scale stream: the median over their M below the grid (one rate per shape,
    so that a decode step's time stays affine in its batch, as the serving model's mean
    batch needs); the memory side of a small-M GEMM's roofline. None without such rows."""
    grid = _gemm_grid(table, dtype)
    rows = [r for r in table.decode_gemm
            if r.dtype == dtype and (grid is None or r.m < grid[0][0])]
    if not rows:
        return None
    at = (math.log2(n), math.log2(k))
    shape = min({(r.n, r.k) for r in rows},
                key=lambda s: math.dist(at, (math.log2(s[0]), math.log2(s[1]))))
    return statistics.median(r.weight_GBps for r in rows if (r.n, r.k) == shape)


def _grid_tflops(grid: tuple[tuple[float, ...], ...], m: float, n: float, k: float) -> float:
    axes, vals = grid[:3], np.asarray(grid[3]).reshape(len(grid[0]), len(grid[1]), len(grid[2]))
    floor = 1.0
    idx = []
    for axis, x in zip(axes, (m, n, k)):
        if x < axis[0]:
            floor *= x / axis[0]  # same time as the smallest measured dimension
        idx.append(_bracket(axis, min(max(x, axis[0]), axis[-1])))
    out = 0.0
    for a in (0, 1):
        for b in (0, 1):
            for c in (0, 1):
                w = ((idx[0][2] if a else 1 - idx[0][2]) * (idx[1][2] if b else 1 - idx[1][2])
                     * (idx[2][2] if c else 1 - idx[2][2]))
                if w:
                    out += w * vals[idx[0][a], idx[1][b], idx[2][c]]
    return out * floor


def attention_tflops(table: KernelTable, backend: str, seq: float, head_dim: int,
                     causal: bool = True, grouped: bool = False
                     ) -> tuple[float, float | None] | None:
    """Measured (forward, backward) throughput of fused attention (TFLOP/s, the backward
    counted as 2.5x the forward's FLOPs) at sequence length ``seq``, from the measured case
    nearest in head dimension, then mask, then grouping; None where ``backend`` was not
    measured; the backward None where the case's rows have no backward figure (a
    publication that timed the forward only)."""
    rows = [r for r in table.attention if r.backend == backend]
    if not rows or seq <= 0:
        return None

    def distance(r) -> tuple[float, bool, bool]:
        return (abs(math.log2(r.head_dim / head_dim)), r.causal != causal,
                (r.kv_heads < r.heads) != grouped)

    best = min(distance(r) for r in rows)
    by_seq = {r.seq: r for r in sorted((r for r in rows if distance(r) == best),
                                       key=lambda r: r.ref is not None)}  # reference wins
    case = [by_seq[s] for s in sorted(by_seq)]
    seqs = tuple(float(r.seq) for r in case)
    lo, hi, w = _bracket(seqs, min(max(seq, seqs[0]), seqs[-1]))
    a, b = row_scale(table, case[lo], "bf16"), row_scale(table, case[hi], "bf16")
    fwd = (1 - w) * case[lo].fwd_tflops * a + w * case[hi].fwd_tflops * b
    if case[lo].bwd_tflops is None or case[hi].bwd_tflops is None:
        return fwd, None
    bwd = (1 - w) * case[lo].bwd_tflops * a + w * case[hi].bwd_tflops * b
    return fwd, bwd


def copy_GBps(table: KernelTable, nbytes: float) -> float | None:
    """Measured device-copy bandwidth (bytes read plus written per second, GB/s) for a copy
    of ``nbytes``; None where the table has no copies."""
    by_size = {r.bytes: r for r in sorted((r for r in table.memory if r.op == "copy"),
                                          key=lambda r: r.ref is not None)}  # reference wins
    rows = [by_size[b] for b in sorted(by_size)]
    if not rows or nbytes <= 0:
        return None
    sizes = tuple(float(r.bytes) for r in rows)
    lo, hi, w = _bracket(sizes, min(max(nbytes, sizes[0]), sizes[-1]))
    return ((1 - w) * rows[lo].GBps * row_scale(table, rows[lo], None)
            + w * rows[hi].GBps * row_scale(table, rows[hi], None))
