"""Memos on the solve's set-up path (issue 38 item 2): worked out once, the same answer."""

from __future__ import annotations

from planner.specs import model as model_module
from planner.specs.loaders import load_model


def test_layer_types_are_worked_out_once_per_model():
    """The structural rules read ``ModelSpec.layer_types`` for every candidate plan: the
    second read of the same model is a memo hit, and equal to the layer counts' types."""
    m = load_model("deepseek-v3")
    first = m.layer_types
    before = model_module._layer_types.cache_info().hits
    assert m.layer_types == first == tuple(m.layer_counts()) == ("dense", "moe")
    assert model_module._layer_types.cache_info().hits > before
    dense = load_model("llama3-8b")
    assert dense.layer_types == ("dense",)
