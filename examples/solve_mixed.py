"""Plan training across a mixed fleet and print the comparison docs/mixed.md quotes:

    python examples/solve_mixed.py [MODEL] [MIXED_CLUSTER_FILE]

(default: llama3-70b on examples/mixed-h100-a100.yaml, 512 H100 + 512 A100)."""

from __future__ import annotations

import sys

from planner import api


def main(model: str = "llama3-70b", cluster: str = "examples/mixed-h100-a100.yaml") -> None:
    res = api.solve_mixed(model, cluster)
    print(f"{res.status} ({res.best_kind}): {res.iteration_time_s:.3f} s per iteration")
    for pool, s in res.single.items():
        if s is None:
            print(f"{pool} alone: nothing fits")
            continue
        p = s.plan
        print(f"{pool} alone: {s.estimate.iteration_time_s:.3f} s (tp={p.tp} cp={p.cp} "
              f"pp={p.pp} dp={p.dp} v={p.virtual_stages}, {res.single_status[pool]})")
    if res.mixed is None:
        return
    mp, est = res.mixed.plan, res.mixed.estimate
    p = mp.plan
    print(f"mixed: tp={p.tp} cp={p.cp} pp={p.pp} dp={p.dp} mbs={p.microbatch_size} "
          f"sp={p.sequence_parallel} zero={p.zero_stage} recompute={p.recompute}")
    for s in est.stages:
        print(f"  stage {s.rank}: {s.pool} ({s.gpu}) {s.layers} layers, "
              f"{s.stage_time_s * 1e3:.1f} ms per microbatch, sends {s.p2p_s * 1e3:.2f} ms, "
              f"{s.memory_bytes / 2**30:.1f} of {s.hbm_bytes / 2**30:.0f} GiB")
    print(f"  MFU {est.mfu:.3f} of the pools' summed peak, {est.tokens_per_s:,.0f} tokens/s")
    st = res.mixed_stats
    print(f"  search: {st.points:,} shapes, {st.pruned:,} pruned by the bound, "
          f"{st.splits_solved:,} splits solved exactly, {res.solve_time_s:.0f} s wall")


if __name__ == "__main__":
    main(*sys.argv[1:3])
