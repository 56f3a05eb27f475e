"""RAMP (Ottino et al.): the optical cluster kind, RAMP-x collectives, network
energy and cost, and the paper's ratios over an electrical fat tree."""

from __future__ import annotations

import functools

import pytest

from planner.cli.collective import collective_result
from planner.costmodel.energy import network_capex_usd_per_gpu, network_power_w_per_gpu
from planner.costmodel.train.evaluator import evaluate
from planner.costmodel.network import collective_breakdown, ramp_io_fraction
from planner.errors import InputError
from planner.specs.loaders import cluster_from_dict, load_cluster
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan

from conftest import ROOT

FAT_TREE = str(ROOT / "examples" / "ramp-baseline-fat-tree.yaml")
GB = 2**30


@pytest.fixture(scope="module")
def ramp():
    return load_cluster("ramp-a100")


@pytest.fixture(scope="module")
def fat():
    return load_cluster(FAT_TREE)


def full(cluster, op, size=GB):
    return collective_result(op, size, list(cluster.topology),
                             [lv.size for lv in cluster.topology], cluster.collective_chunks)


def test_ramp_design_point(ramp):
    """x = J = 32, Lambda = 64, b = 1, B = 400 Gb/s: 65,536 nodes at 12.8 Tb/s (Sec. 3.1)."""
    assert ramp.num_gpus == 65536 == ramp.ramp.num_nodes
    assert ramp.ramp.node_capacity_GBps * 8 == 12800
    assert [lv.size for lv in ramp.topology] == [32, 32, 32, 2]  # Table 5 #NS
    assert ramp.domain_size == 32


def test_ramp_spec_errors():
    with pytest.raises(InputError, match="J=8 racks per group exceeds x=4"):
        cluster_from_dict({"name": "r", "gpu": "a100", "ramp": {"x": 4, "J": 8, "Lambda": 8}}, "r")
    with pytest.raises(InputError, match="multiple of x"):
        cluster_from_dict({"name": "r", "gpu": "a100", "ramp": {"x": 4, "J": 4, "Lambda": 6}}, "r")


@pytest.mark.parametrize("op,max_steps", [("reduce_scatter", 4), ("all_gather", 4),
                                          ("all_to_all", 4), ("allreduce", 8)])
def test_ramp_x_step_counts(ramp, op, max_steps):
    """RAMP-x collectives take at most 4 steps, 8 for all-reduce (Sec. 5-6)."""
    assert full(ramp, op)["steps"] == max_steps


def test_ramp_x_message_sizes(ramp):
    """Table 8 per-destination payloads: RS m/x, m/x^2, m/(J x^2), m/(J Lambda x);
    all-to-all m/x, m/x, m/J, m x/Lambda (bytes per GPU = (d - 1) x payload)."""
    x, J, lam, m = 32, 32, 64, float(GB)
    spans = [lv.size for lv in ramp.topology]
    rs = collective_breakdown("reduce_scatter", m, spans, list(ramp.topology))
    assert [r.bytes / (r.span - 1) for r in rs] == pytest.approx(
        [m / x, m / x**2, m / (J * x**2), m / (J * lam * x)])
    a2a = collective_breakdown("all_to_all", m, spans, list(ramp.topology))
    assert [r.bytes / (r.span - 1) for r in a2a] == pytest.approx([m / x, m / x, m / J, m * x / lam])
    # all-gather runs the steps backwards: the payload before step 1 is m J Lambda (Table 8)
    piece = m / 65536
    ag = collective_breakdown("all_gather", m, spans, list(ramp.topology))
    assert ag[0].bytes / (x - 1) == pytest.approx(piece * J * lam)
    assert ag[3].bytes / 1 == pytest.approx(piece)


def test_ramp_transceiver_rules():
    """Eq. 5: B_IO = B b (1 + #TRX_add)(d - 1). With d = 2 the last step uses all x groups;
    Eq. 3 as printed gives the values the RAMP paper tabulates."""
    assert ramp_io_fraction(32, 2) == 1.0
    assert ramp_io_fraction(32, 32) == pytest.approx(31 / 32)
    eq3 = {d: ramp_io_fraction(32, d, "eq3") * 32 * 0.4 for d in (32, 16, 8, 4, 3)}
    assert eq3 == pytest.approx({32: 12.4, 16: 6.0, 8: 2.8, 4: 3.6, 3: 5.6})  # Tb/s


def test_ramp_one_gib_reduce_scatter_near_capacity_bound(ramp):
    """Step 1 already meets m/B_node; the rest add ~1/x (RAMP, Ottino et al.: ~0.65 ms for 1 GB
    at 12.8 Tb/s). We also derate by the 95% slot payload."""
    t = full(ramp, "reduce_scatter", 1e9)["time_us"]
    assert t == pytest.approx(1e9 / 1.6e12 / 0.95 * (1 + 1 / 32) * 1e6, rel=0.02)


def test_ramp_collective_speedups_over_fat_tree(ramp, fat):
    """'7.6-171x speed-up in completion time across all MPI operations' at 65,536 nodes,
    1 GB (Fig. 18). Ours: RS/AG/AR 7.0x (the paper also counts RAMP's faster x-to-1
    reduction compute, which we leave out, hence 10% below 7.6 is allowed) and all-to-all
    17x (well inside the range, far below 171x; docs/seeds.md says why). Reduce-scatter
    gains least and all-to-all most, as the paper explains."""
    speedup = {op: full(fat, op)["time_us"] / full(ramp, op)["time_us"]
               for op in ("reduce_scatter", "all_gather", "allreduce", "all_to_all")}
    for op, s in speedup.items():
        assert 7.6 * 0.9 <= s <= 171, (op, s)
    assert min(speedup, key=speedup.get) in ("reduce_scatter", "all_gather", "allreduce")
    assert max(speedup, key=speedup.get) == "all_to_all"


def test_ramp_network_energy_and_cost_ratios(ramp):
    """Table 4: 8.5 pJ/bit x 12.8 Tb/s x 65,536 = 7.1 MW; EPS at the same capacity 383
    (SuperPod) or 361 (fat tree) pJ/bit: 42-53x. Table 3: $20.12 against $1.62-6.12 per
    Gb/s: 3.3-12.4x."""
    ramp_w = network_power_w_per_gpu(ramp)
    assert ramp_w * 65536 / 1e6 == pytest.approx(7.1, rel=0.01)
    cap_12t8 = {"name": "eps", "kind": "switch", "size": 65536, "bandwidth_GBps": 1600}
    for pj in (383, 361):
        eps = cluster_from_dict({"name": "eps", "gpu": "a100", "num_gpus": 65536,
                                 "topology": [{**cap_12t8, "energy_pj_per_bit": pj,
                                               "cost_usd_per_Gbps": 20.12}]}, "eps")
        assert 42 <= network_power_w_per_gpu(eps) / ramp_w <= 53
    eps_cost = 20.12 * 12800
    for trx, ratio in ((1.50, 12.4), (6.00, 3.3)):
        r = cluster_from_dict({"name": "r", "gpu": "a100",
                               "ramp": {"cost_usd_per_Gbps": trx + 0.12}}, "r")
        assert eps_cost / network_capex_usd_per_gpu(r) == pytest.approx(ratio, abs=0.05)


def test_ramp_places_tensor_parallelism_in_one_step(ramp):
    """The greedy placement fills RAMP's first step (32 nodes) with TP, as the paper's
    'minimise the active steps' rule does; a TP-32 all-reduce is then 2 steps."""
    from planner.costmodel.network import group_spans

    plan = Plan(tp=32, dp=2048, global_batch_size=4096, seq_len=1024)
    spans = group_spans(plan, ramp)
    assert spans["tp"] == (32, 1, 1, 1)


# Table 9 of the RAMP paper: CE loss, d_model, heads, layers, global batch, GPUs, DP, MP.
TABLE9 = [
    (2.5, 1152, 12, 36, 2480, 16, 16, 1), (2.4, 1536, 16, 40, 3424, 32, 32, 1),
    (2.2, 2304, 24, 56, 4896, 128, 32, 4), (2.0, 4096, 32, 50, 7168, 512, 64, 8),
    (1.8, 6144, 64, 71, 10880, 2048, 64, 32), (1.7, 8192, 128, 128, 16896, 32768, 256, 128),
    (1.5, 16384, 512, 132, 14080, 65536, 128, 512),
    (1.3, 32768, 2048, 160, 1024, 65536, 32, 2048),
    (1.2, 131072, 8192, 52, 64, 65536, 8, 8192)]


def megatron_speedup(ramp, fat, row) -> float:
    """RAMP's iteration-time speed-up on one Table 9 configuration, with the paper's
    training setup: hybrid DP + TP, no pipelining, sequence 1024, fp16, activation
    checkpointing, communication not overlapped (RAMP, Ottino et al.)."""
    ce, d, heads, layers, gb, n, dp, mp = row
    model = ModelSpec(name=f"ramp-ce{ce}", num_layers=layers, hidden_size=d,
                      num_attention_heads=heads, ffn_hidden_size=4 * d, vocab_size=50257,
                      seq_len=1024, position_embedding="learned", dtype="fp16")
    batch = max(dp, gb - gb % dp)
    mbs = 32 if ce >= 1.8 else batch // dp  # the micro-batch implied by Table 9's MP msg
    while (batch // dp) % mbs:
        mbs //= 2
    plan = Plan(tp=mp, dp=dp, microbatch_size=mbs, global_batch_size=batch, seq_len=1024,
                recompute="full", dtype="fp16", overlap_dp_grad_reduce=False,
                overlap_param_gather=False)
    t_ramp = evaluate(model, ramp.resized(n), plan).iteration_time_s
    t_fat = evaluate(model, fat.resized(n), plan).iteration_time_s
    return t_fat / t_ramp


def test_ramp_megatron_speedups_trend(ramp, fat):
    """Paper: 1.3-16.7x, growing with the MP degree. Ours: 1.0-2.3x, growing with the MP
    degree, never outside [1, 16.7]. The magnitude is NOT reproduced (docs/seeds.md): our
    fat tree runs hierarchical collectives at full bisection with all 8 NICs of a node,
    and the paper's compute times are only in its figures."""
    s = [megatron_speedup(ramp, fat, row) for row in TABLE9]
    assert all(0.99 <= v <= 16.7 for v in s), s
    assert s[-1] > 2.0 and s[0] < 1.05
    tp_rows = s[2:]  # MP > 1: the speed-up grows with the degree of model parallelism
    assert all(b >= a - 0.05 for a, b in zip(tp_rows, tp_rows[1:])), s


# ---- procurement: RAMP or its electrical fat tree ----------------------------------
# Llama 3 70B on 15T tokens, A100s owned (5-year depreciation, 8.2 c/kWh): the network's
# capital and power enter the cost (RAMP $1.62 x 12.8 Tb/s = $20,736 and 108.8 W per GPU,
# the fat tree $20.12 x 200 Gb/s = $4,024 and 76.6 W per GPU). examples/procure_ramp.sh
# asks the same questions; docs/procure-ramp.txt has the full output.
RAMP_OR_FAT = ["ramp-a100", FAT_TREE]


def ramp_or_fat(days, counts, clusters=RAMP_OR_FAT, prices=None):
    from planner.api import procure

    # the RAMP paper's comparison (and docs/procure-ramp.txt) counts no failures
    return procure("llama3-70b", 15e12, days=days, clusters=clusters, pricing="own",
                   prices=prices, counts=counts, workers=1, goodput="off")


@functools.lru_cache(maxsize=1)
def fat_tree_needs_16k_days() -> tuple[float, float, float]:
    """(deadline, fat tree days on 8,192, on 16,384): a deadline midway between the fat
    tree's days on 8,192 and on 16,384 GPUs, so that only 16,384 meet it. Derived, not
    fixed: the days move with the A100's fitted efficiency and the straggler term (62.7
    and 64.3 days at this writing; 58.0 and 60.0 before either), the ordering is the
    premise. Above 8,192 GPUs the 4M-token batch leaves one micro-batch per replica, so
    twice the GPUs buy the fat tree little (MFU ~51 % -> ~26 %)."""
    d8 = ramp_or_fat(1000, (8192,), clusters=[FAT_TREE]).choice.days
    d16 = ramp_or_fat(1000, (16384,), clusters=[FAT_TREE]).choice.days
    assert d16 < d8, (d16, d8)
    return (d8 + d16) / 2, d8, d16


@pytest.mark.slow(reason="procurements at 8K-16K GPUs")
def test_procure_picks_ramp_over_fat_tree_when_cheaper():
    """Within a deadline the fat tree meets only with 16,384 GPUs (fat_tree_needs_16k_days),
    RAMP meets it with 8,192 at ~70 % MFU. RAMP's network costs 5x the fat tree's per GPU,
    but half the GPUs make RAMP the cheaper cluster. (With 8 KV heads Llama 3 70B cannot use
    TP 16, Megatron's rule, so neither network reaches 30 days.)"""
    days, d8, d16 = fat_tree_needs_16k_days()
    res = ramp_or_fat(days, (8192, 16384))
    ramp = res.choice
    assert (ramp.cluster, ramp.num_gpus) == ("ramp-a100", 8192)
    assert ramp.days <= days
    fat = ramp_or_fat(days, (8192, 16384), clusters=[FAT_TREE])
    assert (fat.choice.cluster, fat.choice.num_gpus) == ("ramp-baseline-fat-tree", 16384)
    assert fat.choice.days == pytest.approx(d16)
    assert fat.choice.cost_usd > 1.05 * ramp.cost_usd
    assert fat.choice.energy_mwh > ramp.energy_mwh  # twice the GPUs: more energy too
    fat8 = next(r for r in fat.records if r.num_gpus == 8192)
    assert fat8.days > days and not fat8.meets_limits


@pytest.mark.slow(reason="a procurement at 8K-16K GPUs")
def test_procure_picks_fat_tree_when_ramp_transceivers_cost_more():
    """The same query with RAMP at the high end of Table 3 ($6.12 per Gb/s, a pricing
    override): RAMP's network then costs $78k per GPU, and the fat tree wins."""
    high = {"clusters": {"ramp": {"cost_usd_per_Gbps": 6.12}}}
    res = ramp_or_fat(fat_tree_needs_16k_days()[0], (8192, 16384), prices=high)
    assert (res.choice.cluster, res.choice.num_gpus) == ("ramp-baseline-fat-tree", 16384)


@pytest.mark.slow(reason="a procurement at 8K-16K GPUs")
def test_procure_picks_fat_tree_with_a_longer_deadline():
    """Within 90 days, 8,192 GPUs suffice on either network; the fat tree's MFU is lower
    but its GPUs cost $21k each with the network against RAMP's $38k (the search may prune
    RAMP by its cost bound alone, so RAMP is solved on its own to compare)."""
    res = ramp_or_fat(90, (8192, 16384))
    assert (res.choice.cluster, res.choice.num_gpus) == ("ramp-baseline-fat-tree", 8192)
    ramp8 = ramp_or_fat(90, (8192,), clusters=["ramp-a100"]).choice
    assert (ramp8.cluster, ramp8.num_gpus) == ("ramp-a100", 8192)
    assert ramp8.days < res.choice.days and ramp8.cost_usd > res.choice.cost_usd


def test_cluster_price_overrides():
    """clusters.<name> in a pricing file prices one template apart from another with the
    same GPU: rent per GPU-hour, and the network's $/Gb/s for owned clusters."""
    from planner.procurement import network_capex, option_metrics, price_keys
    from planner.specs.pricing import load_pricing

    ramp, fat = load_cluster("ramp-a100").resized(64), load_cluster(FAT_TREE).resized(64)
    assert network_capex_usd_per_gpu(ramp) == pytest.approx(1.62 * 12800)
    assert network_capex_usd_per_gpu(fat) == pytest.approx(20.12 * 200)
    assert network_capex(ramp, 6.12) == pytest.approx(6.12 * 12800)
    p = price_keys(load_pricing(overrides={"clusters": {
        "ramp": {"cost_usd_per_Gbps": 6.12, "price_per_gpu_hour": 3.0}}}), [ramp, fat])
    assert set(p.clusters) == {"ramp-a100"}
    own = p.model_copy(update={"mode": "own"})
    hours = 5 * 8760 * 3600.0
    for cl, capex in ((ramp, 17000 + 6.12 * 12800), (fat, 17000 + 20.12 * 200)):
        got = option_metrics(cl, 1.0, own, cl.name)["cost_usd"].time
        electricity = option_metrics(cl, 1.0, own.model_copy(update={
            "depreciation_years": 1e12}), cl.name)["cost_usd"].time
        assert got - electricity == pytest.approx(64 * capex / hours)
    assert option_metrics(ramp, 3600.0, p, "ramp-a100")["cost_usd"].time == pytest.approx(64 * 3.0)
    assert option_metrics(fat, 3600.0, p, fat.name)["cost_usd"].time == pytest.approx(64 * 1.6)
    # a catalog cluster the query leaves out is skipped; a name nothing has is an error
    assert price_keys(load_pricing(overrides={"clusters": {"gb200-nvl72": {
        "price_per_gpu_hour": 1.0}}}), [ramp]).clusters == {}
    with pytest.raises(InputError, match="closest: ramp-a100"):
        price_keys(load_pricing(overrides={"clusters": {"ramp-a10": {
            "price_per_gpu_hour": 1.0}}}), [ramp, fat])
    with pytest.raises(InputError, match="prices no network level"):
        price_keys(load_pricing(overrides={"clusters": {"dgx-h100-superpod": {
            "cost_usd_per_Gbps": 1.0}}}), [load_cluster("dgx-h100-superpod")])
    with pytest.raises(InputError, match="unknown keys"):
        load_pricing(overrides={"clusters": {"ramp": {"usd_per_Gbps": 1.0}}})


def test_named_templates():
    """--cluster takes catalog names, aliases, files and derived names, comma-separated;
    an unknown name is an error naming the closest."""
    from planner.procurement import named_templates

    got = named_templates(["ramp," + FAT_TREE, "dgx-a100-superpod:a100-sxm-40gb"])
    assert [t.name for t in got] == ["ramp-a100", "ramp-baseline-fat-tree",
                                     "dgx-a100-superpod:a100-sxm-40gb"]
    assert [t.name for t in named_templates(["ramp", "dgx-h100-superpod"], ["a100"])] == [
        "ramp-a100"]
    with pytest.raises(InputError, match="closest: ramp-a100"):
        named_templates(["ramp-a10," + FAT_TREE])
    with pytest.raises(InputError, match="closest: dgx-a100-superpod:a100-sxm-40gb"):
        named_templates(["dgx-a100-superpod:a100-sxm-4gb"])
    # a derived name for a GPU that has its own catalog cluster names that cluster
    with pytest.raises(InputError, match="own catalog cluster, dgx-h200-superpod"):
        named_templates(["dgx-h100-superpod:h200"])
