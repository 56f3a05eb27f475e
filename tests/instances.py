"""Random small instances for the optimality tests (exhaustive search stays well under 1 s)."""

from __future__ import annotations

from hypothesis import strategies as st

from formulations.train.space import SearchSpace, SpaceOptions
from planner.specs.plan_base import model_defaults

from conftest import small_cluster, tiny_model

OPTIONS = SpaceOptions(max_microbatch=4, max_virtual_stages=2, min_cp_tokens=256)
#: MoE spaces also choose ep, etp and the cp exchange; keep brute force under ~2 s each.
MOE_OPTIONS = SpaceOptions(max_microbatch=2, max_virtual_stages=1, min_cp_tokens=256)


@st.composite
def instances(draw, max_gpus: int = 16):
    heads = draw(st.sampled_from([4, 8, 16]))
    kv = draw(st.sampled_from([h for h in (1, 2, 4, heads) if heads % h == 0]))
    hidden = heads * draw(st.sampled_from([32, 64, 128, 256]))
    layers = draw(st.sampled_from([2, 3, 4, 6, 8]))
    # Some instances are large for their GPUs, so out-of-memory and infeasible cases occur.
    big = draw(st.booleans())
    model = tiny_model(
        num_layers=layers * (8 if big else 1), hidden_size=hidden * (4 if big else 1),
        num_attention_heads=heads, num_kv_heads=kv,
        ffn_hidden_size=hidden * (4 if big else 1) * draw(st.sampled_from([2, 4])),
        ffn_type=draw(st.sampled_from(["gelu", "swiglu"])),
        vocab_size=draw(st.sampled_from([1000, 32000])),
        seq_len=draw(st.sampled_from([512, 1024, 4096])),
        global_batch_size=draw(st.sampled_from([4, 8, 16])),
        tied_embeddings=draw(st.booleans()),
    )
    n = draw(st.sampled_from([g for g in (2, 4, 8, 16) if g <= max_gpus]))
    domain = draw(st.sampled_from([2, 4, 8])) if n > 2 else 2
    gpu = draw(st.sampled_from(["a100-sxm-40gb", "h100-sxm", "mi300x"]))
    cluster = small_cluster(n, domain=domain, gpu=gpu)
    fixed = draw(st.sampled_from([{}, {}, {}, {"recompute": "full"}, {"zero_stage": 1},
                                  {"sequence_parallel": False}, {"tp": 2}]))
    objective = draw(st.sampled_from(["time", "time", "energy", "gpu_hours", "cost"]))
    top_k = draw(st.sampled_from([1, 1, 2]))
    space = SearchSpace(model, cluster, model_defaults(model), fixed, OPTIONS)
    return space, objective, top_k


@st.composite
def moe_instances(draw, max_gpus: int = 8):
    """Small MoE models (interleaved dense/MoE layers, shared experts, capacity factors),
    long-enough sequences for cp > 1, and clusters where EP may cross the domain."""
    heads = draw(st.sampled_from([4, 8]))
    kv = draw(st.sampled_from([h for h in (1, 2, heads) if heads % h == 0]))
    hidden = heads * draw(st.sampled_from([32, 64, 128]))
    layers = draw(st.sampled_from([2, 3, 4]))
    big = draw(st.booleans())
    experts = draw(st.sampled_from([2, 4, 8]))
    moe = dict(
        num_experts=experts,
        top_k=draw(st.sampled_from([k for k in (1, 2) if k <= experts])),
        expert_ffn_hidden_size=hidden * draw(st.sampled_from([1, 2])) * (4 if big else 1),
        num_shared_experts=draw(st.sampled_from([0, 0, 1])),
        capacity_factor=draw(st.sampled_from([None, None, 1.25])),
        first_k_dense=draw(st.sampled_from([0, 1])),
        every_n=draw(st.sampled_from([1, 2])),
    )
    model = tiny_model(
        num_layers=layers * (8 if big else 1), hidden_size=hidden * (4 if big else 1),
        num_attention_heads=heads, num_kv_heads=kv,
        ffn_hidden_size=hidden * (4 if big else 1) * 2,
        ffn_type=draw(st.sampled_from(["gelu", "swiglu"])),
        vocab_size=draw(st.sampled_from([1000, 32000])),
        seq_len=draw(st.sampled_from([512, 2048])),
        global_batch_size=draw(st.sampled_from([4, 8])),
        moe=moe,
    )
    n = draw(st.sampled_from([g for g in (2, 4, 4, 8) if g <= max_gpus]))
    domain = draw(st.sampled_from([2, 4])) if n > 2 else 2
    gpu = draw(st.sampled_from(["a100-sxm-40gb", "h100-sxm"]))
    cluster = small_cluster(n, domain=domain, gpu=gpu)
    fixed = draw(st.sampled_from([{}, {}, {}, {"zero_stage": 1}, {"sequence_parallel": True},
                                  {"pp": 1}, {"recompute": {"dense": "none"}}]))
    if n == 8:  # the largest spaces: pin the ZeRO stage to keep brute force quick
        fixed = {**fixed, "zero_stage": draw(st.sampled_from([0, 1, 3]))}
    objective = draw(st.sampled_from(["time", "time", "energy"]))
    top_k = draw(st.sampled_from([1, 1, 2]))
    space = SearchSpace(model, cluster, model_defaults(model), fixed, MOE_OPTIONS)
    return space, objective, top_k


@st.composite
def offload_instances(draw, max_gpus: int = 8):
    """Instances of :func:`instances` on clusters with an offload tier: capacities that
    bind (0.25 GiB) or not, PCIe- and C2C-like links, slow and (unrealistically) fast CPUs
    so that offloading sometimes wins on time too, less HBM, offloads free or fixed."""
    from planner.specs.cluster import OffloadTier

    space, objective, top_k = draw(instances(max_gpus=max_gpus))
    tier = OffloadTier(
        name="host", capacity_gib_per_gpu=draw(st.sampled_from([256.0, 0.25])),
        bandwidth_GBps=draw(st.sampled_from([450.0, 64.0])), efficiency=0.8,
        cpu_adam_params_per_s=draw(st.sampled_from([1e12, 1e9])))
    fixed = {**space.fixed, **draw(st.sampled_from(
        [{}, {}, {}, {"offload_optimizer": True}, {"offload_params": False}]))}
    # less HBM, so that offloading is what makes more of the plans fit
    gpu = space.cluster.gpu
    gpu = gpu.model_copy(update={"hbm_gib": gpu.hbm_gib * draw(st.sampled_from([0.3, 1.0]))})
    cluster = space.cluster.model_copy(update={"offload": tier, "gpu": gpu})
    return SearchSpace(space.model, cluster, space.base, fixed, space.options), objective, top_k
