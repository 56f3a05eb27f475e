"""A corpus source without a framework profile can state that its sharded traffic runs
behind compute (``sharded_overlap``): MaxText's timed runs schedule the FSDP all-gathers and
reduce-scatters asynchronously (XLA's latency-hiding scheduler, pipelined collectives;
dgxc-benchmarking v25.01 maxtext/configure.sh)."""

from __future__ import annotations

import pytest
import yaml

from planner.errors import InputError
from planner.validation import corpus
from planner.validation.corpus import CorpusFile, corpus_runs


def _maxtext():
    runs = [r for r in corpus_runs() if r.source == "dgxc-maxtext"]
    assert len(runs) == 12
    return runs


def test_the_stated_overlap_reaches_the_costed_cluster():
    assert all(r.costed_cluster().gpu.efficiency.sharded_overlap for r in _maxtext())


def test_overlap_hides_most_of_the_fsdp_traffic():
    """Charged in full, each layer's gathers and reduce-scatters sit on the critical path:
    at 64 GPUs about a seventh of the predicted step (BF16), which the stated overlap
    mostly removes; the compute terms do not move."""
    for run in _maxtext():
        on = run.estimate()
        eff = run.cluster.gpu.efficiency.model_copy(update={"sharded_overlap": False})
        off = run.estimate(run.cluster.model_copy(update={"gpu": run.cluster.gpu.model_copy(
            update={"efficiency": eff})}))
        assert on.time_breakdown_s["dp_comm"] < 0.3 * off.time_breakdown_s["dp_comm"], run.name
        assert on.time_breakdown_s["forward"] == off.time_breakdown_s["forward"]
        assert run.residual(on) > run.residual(off) + 0.05, run.name


def test_a_profile_source_cannot_restate_its_profiles_overlap(tmp_path, monkeypatch):
    src = corpus._corpus_folder() / "mbridge2511.yaml"
    data = yaml.safe_load(src.read_text())
    data["sharded_overlap"] = True
    (tmp_path / "x.yaml").write_text(yaml.safe_dump(data))
    f = CorpusFile.model_validate(data)
    with pytest.raises(InputError, match="sharded_overlap is the profile's"):
        corpus._file_runs("x.yaml", f)
