"""Spec loading: catalog names, YAML files, Hugging Face configs and every bad input."""

from __future__ import annotations

import pytest
import yaml

from planner import catalog
from planner.errors import InputError
from planner.specs.loaders import load_cluster, load_gpu, load_model
from planner.specs.plan import Plan

from conftest import ROOT


def test_catalog_ships_required_entries():
    assert set(catalog.names("gpus")) >= {
        "a100-sxm-40gb", "a100-sxm-80gb", "h100-sxm", "h200", "b200", "gb200", "mi300x"}
    assert set(catalog.names("clusters")) >= {
        "dgx-a100-superpod", "dgx-h100-superpod", "dgx-h200-superpod", "dgx-b200-superpod",
        "gb200-nvl72"}
    assert set(catalog.names("models")) >= {
        "gpt3-175b", "megatron-22b", "mt-nlg-530b", "megatron-1t", "llama2-7b", "llama2-13b",
        "llama2-70b", "llama3-8b", "llama3-70b", "llama3-405b", "mixtral-8x7b"}


def test_every_catalog_entry_loads_and_cites_sources():
    for name in catalog.names("gpus"):
        gpu = load_gpu(name)
        assert gpu.sources, f"{name} has no sources"
        for key in ("peak_tflops", "hbm", "tdp_w"):
            assert key in gpu.sources, f"{name}: no source for {key}"
    for name in catalog.names("clusters"):
        assert load_cluster(name).source
    for name in catalog.names("models"):
        assert load_model(name).source


def test_alias_and_case_insensitive_lookup():
    assert load_model("llama70b").name == "llama3-70b"
    assert load_model("LLAMA70B").name == "llama3-70b"
    assert load_gpu("H100").name == "h100-sxm"


def test_example_superpod_is_the_catalog_cluster():
    example = yaml.safe_load((ROOT / "examples" / "superpod.yaml").read_text())
    shipped = yaml.safe_load((catalog.catalog_root() / "clusters" / "dgx-h100-superpod.yaml").read_text())
    assert example == shipped
    c = load_cluster(str(ROOT / "examples" / "superpod.yaml"))
    assert c.domain_size == 8
    assert c.topology[0].bandwidth_GBps == 450 and c.topology[1].bandwidth_GBps == 50


def test_unknown_name_suggests_closest():
    with pytest.raises(InputError) as e:
        load_model("llama3-70")
    assert "unknown model 'llama3-70'" in str(e.value)
    assert "llama3-70b" in str(e.value)
    with pytest.raises(InputError) as e:
        load_gpu("h10")
    assert "h100" in str(e.value)


def test_malformed_yaml_names_the_line(data_dir):
    with pytest.raises(InputError) as e:
        load_model(str(data_dir / "bad-syntax.yaml"))
    msg = str(e.value)
    assert "malformed YAML" in msg and "line" in msg


def test_wrong_field_type_names_field_and_value(data_dir):
    with pytest.raises(InputError) as e:
        load_model(str(data_dir / "wrong-type-model.yaml"))
    msg = str(e.value)
    assert "num_layers" in msg and "'many'" in msg and "integer" in msg


def test_extra_keys_are_fine(data_dir):
    m = load_model(str(data_dir / "tiny-model.yaml"))
    assert m.name == "tiny" and m.global_batch_size == 16


def test_missing_file():
    with pytest.raises(InputError) as e:
        load_cluster("no/such/cluster.yaml")
    assert "no such file" in str(e.value)


def test_cluster_size_mismatch_is_explained(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({
        "name": "x", "gpu": "h100", "num_gpus": 100,
        "topology": [{"name": "nv", "kind": "switch", "size": 8, "bandwidth_GBps": 450},
                     {"name": "ib", "kind": "switch", "size": 4, "bandwidth_GBps": 50}]}))
    with pytest.raises(InputError) as e:
        load_cluster(str(path))
    assert "num_gpus=100" in str(e.value) and "8 x 4 = 32" in str(e.value)


def test_cluster_unknown_gpu_suggests(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({
        "name": "x", "gpu": "h1000", "num_gpus": 8,
        "topology": [{"name": "nv", "size": 8, "bandwidth_GBps": 450}]}))
    with pytest.raises(InputError) as e:
        load_cluster(str(path))
    assert "unknown GPU 'h1000'" in str(e.value)


def test_negative_bandwidth_is_rejected(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({
        "name": "x", "gpu": "h100", "num_gpus": 8,
        "topology": [{"name": "nv", "size": 8, "bandwidth_GBps": -1}]}))
    with pytest.raises(InputError) as e:
        load_cluster(str(path))
    assert "topology.0.bandwidth_GBps" in str(e.value) and "-1" in str(e.value)


def test_resize_cluster():
    c = load_cluster("dgx-h100-superpod", gpus=16384)
    assert c.num_gpus == 16384 and c.topology[-1].size == 2048
    small = load_cluster("dgx-h100-superpod", gpus=4)
    assert small.num_gpus == 4 and len(small.topology) == 1 and small.topology[0].size == 4
    # not a multiple of 8: the fewest nodes that split it evenly (tests/test_network_realism.py)
    assert [lv.size for lv in load_cluster("dgx-h100-superpod", gpus=1020).topology] == [6, 170]
    with pytest.raises(InputError) as e:
        load_cluster("dgx-h100-superpod", gpus=1021)  # a prime: no even split
    assert "--gpus 1021 cannot be placed evenly" in str(e.value)
    assert "1020 (170 x 6 GPUs)" in str(e.value)


def test_hf_llama_config(data_dir):
    m = load_model(str(data_dir / "llama3-8b-config.json"))
    ref = load_model("llama3-8b")
    for f in ("num_layers", "hidden_size", "num_attention_heads", "kv_heads", "ffn_hidden_size",
              "ffn_type", "vocab_size", "seq_len", "tied_embeddings", "norm_type"):
        assert getattr(m, f) == getattr(ref, f), f


def test_hf_mistral_and_gpt2(data_dir):
    m = load_model(str(data_dir / "mistral-7b-config.json"))
    assert m.kv_heads == 8 and m.ffn_type == "swiglu" and m.seq_len == 32768
    g = load_model(str(data_dir / "gpt2-config.json"))
    assert g.hidden_size == 768 and g.ffn_hidden_size == 3072 and g.ffn_type == "gelu"
    assert g.tied_embeddings and g.position_embedding == "learned" and g.dropout


def test_hf_unknown_architecture_and_missing_field(data_dir):
    with pytest.raises(InputError) as e:
        load_model(str(data_dir / "bert-config.json"))
    assert "model_type 'bert' is not supported" in str(e.value) and "llama" in str(e.value)
    with pytest.raises(InputError) as e:
        load_model(str(data_dir / "llama-missing-config.json"))
    assert "missing 'intermediate_size'" in str(e.value)


def test_plan_defaults_and_rules():
    p = Plan(global_batch_size=8, seq_len=128, sequence_parallel=True)
    assert p.tp_comm == "rs_ag"
    assert Plan(global_batch_size=8, seq_len=128).tp_comm == "allreduce"
    with pytest.raises(ValueError, match="needs tp_comm=rs_ag"):
        Plan(global_batch_size=8, seq_len=128, sequence_parallel=True, tp_comm="allreduce")
    with pytest.raises(ValueError, match="unknown layer types"):
        Plan(global_batch_size=8, seq_len=128, recompute={"attention": "full"})
    p = Plan(global_batch_size=8, seq_len=128, recompute={"dense": "full"})
    assert p.recompute_for("dense") == "full" and p.recompute_for("moe") == "none"


def test_specs_are_frozen():
    p = Plan(global_batch_size=8, seq_len=128)
    with pytest.raises(Exception):
        p.tp = 2  # type: ignore[misc]
