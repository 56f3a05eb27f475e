"""The presolve bound's reductions over short axes (formulations.train.search.fold_last):
the same values as numpy's own reductions, bit for bit, so that the faster bound prunes
exactly what the slower one did."""

from __future__ import annotations

import numpy as np
import pytest

from formulations.train.search import fold_last


@pytest.mark.parametrize("n", range(1, 11))
@pytest.mark.parametrize("ufunc", [np.minimum, np.maximum, np.add])
def test_fold_last_is_numpys_reduction(ufunc, n):
    rng = np.random.default_rng(n)
    # magnitudes over ten decades, so that a sum in another order would round otherwise
    x = rng.standard_normal((300, 7, n)) * 10.0 ** rng.uniform(-5, 5, (300, 7, n))
    x[rng.random(x.shape) < 0.05] = np.inf  # infeasible options, as in the bound
    with np.errstate(invalid="ignore"):
        got, ref = fold_last(ufunc, x), ufunc.reduce(x, axis=-1)
    assert got.shape == ref.shape
    assert np.array_equal(got, ref, equal_nan=True)
