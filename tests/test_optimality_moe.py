"""Provably optimal on MoE models with cp, ep and etp choices: CP-SAT = MILP = exhaustive.

Same check as :mod:`test_optimality` (relative 1e-9 on the exact objective of the K best
plans), on random MoE instances: interleaved dense/MoE layers with their own recompute
decisions, shared experts, capacity factors, ep dividing dp x cp, expert TP 1 or tp, and
the three context-parallel exchanges.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from instances import moe_instances
from test_optimality import _check


@pytest.mark.slow(reason="60 MoE instances through CP-SAT, MILP and brute force")
@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=moe_instances())
def test_moe_backends_agree_with_exhaustive(case):
    space, objective, top_k = case
    _check(space, objective, top_k, presolve=True)
