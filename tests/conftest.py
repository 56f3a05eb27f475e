from __future__ import annotations

from pathlib import Path

import pytest

from planner.specs.cluster import ClusterSpec, TopologyLevel
from planner.specs.loaders import load_cluster, load_gpu, load_model
from planner.specs.model import ModelSpec

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parent.parent


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def superpod() -> ClusterSpec:
    return load_cluster(str(ROOT / "examples" / "superpod.yaml"))


@pytest.fixture(scope="session")
def selene() -> ClusterSpec:
    return load_cluster("dgx-a100-superpod")


@pytest.fixture(scope="session")
def llama70b() -> ModelSpec:
    return load_model("llama3-70b")


@pytest.fixture(scope="session")
def gpt3() -> ModelSpec:
    return load_model("gpt3-175b")


def small_cluster(num_gpus: int = 16, domain: int = 8, gpu: str = "h100-sxm",
                  inner_bw: float = 450.0, outer_bw: float = 50.0) -> ClusterSpec:
    """A two-level test cluster."""
    levels = [TopologyLevel(name="nvswitch", kind="switch", size=min(domain, num_gpus),
                            bandwidth_GBps=inner_bw, latency_us=2, efficiency=0.8)]
    if num_gpus > domain:
        levels.append(TopologyLevel(name="ib", kind="switch", size=num_gpus // domain,
                                    bandwidth_GBps=outer_bw, latency_us=5, efficiency=0.9))
    return ClusterSpec(name=f"test-{num_gpus}", gpu=load_gpu(gpu), num_gpus=num_gpus,
                       topology=levels)


def tiny_model(**kw) -> ModelSpec:
    base = dict(name="tiny", num_layers=8, hidden_size=1024, num_attention_heads=16,
                num_kv_heads=8, ffn_hidden_size=4096, ffn_type="swiglu", vocab_size=32000,
                seq_len=2048, global_batch_size=64)
    base.update(kw)
    return ModelSpec(**base)
