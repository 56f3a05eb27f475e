"""Random small instances for the optimality tests (exhaustive search stays well under 1 s)."""

from __future__ import annotations

from hypothesis import strategies as st

from formulations.space import SearchSpace, SpaceOptions
from planner.plans import model_defaults

from conftest import small_cluster, tiny_model

OPTIONS = SpaceOptions(max_microbatch=4, max_virtual_stages=2, min_cp_tokens=256)


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
