"""Pipeline layout, in-flight microbatches and schedule time (1F1B and interleaved)."""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.specs.model import ModelSpec


@dataclass(frozen=True)
class Stage:
    """One pipeline rank: its layers (by type) over all its virtual chunks."""

    rank: int
    layers: dict[str, int] = field(hash=False)
    embedding: bool
    head: bool
    inflight_chunks: int  # chunk-microbatches whose activations are alive at the peak

    @property
    def num_layers(self) -> int:
        return sum(self.layers.values())


#: Chunks an uneven split may hold without a transformer layer: the embedding-only first
#: and the loss-only last (:func:`chunk_sizes`).
END_ONLY_CHUNKS = 2


def chunk_sizes(num_layers: int, n_chunks: int, uneven: bool) -> list[int] | None:
    """Layers per model chunk. ``None`` if the split is not allowed.

    Even split needs divisibility. The uneven split gives the smaller chunks to both ends
    of the pipeline, which also hold the embedding and the LM head (Llama 3 405B:
    126 layers on 16 stages, one layer fewer on the first and the last; Dubey et al.
    2024, Sec. 3.3.2). With one layer per chunk that leaves the two end chunks empty: "the
    first model chunk on the first stage has only the embedding, and the last model chunk
    on the last stage has only output projection and loss calculation" (ibid.; Megatron-Core
    states such chunks as ``E|`` and ``|L`` in ``--pipeline-model-parallel-layout``), so an
    uneven split may have up to two chunks more than layers, the empty ones at the ends.
    """
    if n_chunks > num_layers + (END_ONLY_CHUNKS if uneven else 0):
        return None
    base, extra = divmod(num_layers, n_chunks)
    if extra == 0:
        return [base] * n_chunks
    if not uneven:
        return None
    small = n_chunks - extra
    head_small = (small + 1) // 2  # ceil: the first chunk is lighter when it must choose
    return [base] * head_small + [base + 1] * extra + [base] * (small - head_small)


def block_recompute_layers(sizes: list[int]) -> int:
    """``--recompute-num-layers`` for ``recompute="half"`` under Megatron's block method
    (the first n layers of every chunk are recomputed): half the largest chunk, rounded up."""
    return -(-max(sizes) // 2)


def block_recompute_runs_half(sizes: list[int]) -> bool:
    """Whether block recomputation of :func:`block_recompute_layers` layers recomputes
    half of every chunk (rounded up), which is what ``recompute="half"`` costs. Megatron
    recomputes ``min(n, chunk)`` layers per chunk (megatron/core/transformer/
    transformer_block.py ``_checkpointed_forward``, core_v0.15.3), so unequal chunks of
    base and base + 1 layers match only when base is odd: Llama 3 70B on 28 chunks of
    2 and 3 layers would recompute 56 of 80 layers, not 40."""
    n = block_recompute_layers(sizes)
    return all(min(n, c) == -(-c // 2) for c in sizes)


def inflight_chunks(pp: int, v: int, m: int, rank: int) -> int:
    """Chunk-microbatches whose activations a rank holds at its peak.

    1F1B: ``pp - rank`` microbatches (Narayanan et al. 2021, Sec. 2.2.1). Interleaved:
    Megatron-LM's warm-up ``2 (pp - rank - 1) + (v - 1) pp`` plus one, which gives the
    first stage ``pp v + pp - 1`` chunks, i.e. ``L (1 + (pp - 1)/(pp v))`` layers
    (Korthikanti et al. 2022, Sec. 4.2.3). Never more than the ``m v`` that exist.
    """
    if v == 1:
        return max(1, min(pp - rank, m))
    return max(1, min(2 * (pp - rank - 1) + (v - 1) * pp + 1, m * v))


def stage_layout(model: ModelSpec, pp: int, v: int, m: int, uneven: bool) -> list[Stage] | None:
    """All pipeline ranks with their layers, or ``None`` if the layer split is invalid."""
    sizes = chunk_sizes(model.num_layers, pp * v, uneven)
    if sizes is None:
        return None
    kinds = model.layer_kinds()
    starts = [0]
    for s in sizes:
        starts.append(starts[-1] + s)
    stages = []
    for r in range(pp):
        counts: dict[str, int] = {}
        for j in range(v):
            c = r + j * pp
            for kind in kinds[starts[c]:starts[c + 1]]:
                counts[kind] = counts.get(kind, 0) + 1
        stages.append(Stage(
            rank=r,
            layers=counts,
            embedding=(r == 0),
            head=(r == pp - 1),
            inflight_chunks=inflight_chunks(pp, v, m, r),
        ))
    return stages


def distinct_stages(stages: list[Stage]) -> list[Stage]:
    """Stages that differ in what they hold (the others repeat a profile)."""
    seen: dict[tuple, Stage] = {}
    for s in stages:
        key = (tuple(sorted(s.layers.items())), s.embedding, s.head, s.inflight_chunks)
        seen.setdefault(key, s)
    return list(seen.values())


def bubble_factor(pp: int, v: int, variant: str = "megatron", *, num_layers: int = 1,
                  num_microbatches: float = 1.0, comm_share: float = 0.0) -> float:
    """Pipeline bubble in units of a stage's per-microbatch time.

    ``megatron`` (the default): ``(pp - 1)/v`` (Narayanan et al. 2021, Sec. 2.2: bubble
    fraction ``(pp - 1)/(v m)``). The steady part runs ``m`` microbatches at the pace of
    the slowest stage; the fill and drain pass through every stage, so the bubble uses
    the mean stage time.

    ``amped``: AMPeD's Eq. 8 as printed (Moolchandani et al., AMPeD, Eq. 8),
    ``W = R (pp - 1)/N_ub [U/(L N) + M_f + M_b]`` summed over the ``L`` layers, with
    ``R = 1/v``. Its compute term carries an extra ``1/L``, so only one average layer's
    compute idles per bubble step, while the communication term counts all layers
    (``pp`` stages' worth per microbatch). In units of the stage time ``c + k`` with
    ``k = comm_share (c + k)``: ``R (pp - 1) [(1 - comm_share)/L + comm_share pp/m]``.
    Kept as a named seed variant only: it makes the bubble nearly vanish, which
    contradicts measured 1F1B schedules (docs/seeds.md, AMPeD).
    """
    if variant == "megatron":
        return (pp - 1) / v
    if variant == "amped":
        r = 1.0 / v
        return r * (pp - 1) * ((1.0 - comm_share) / num_layers
                               + comm_share * pp / num_microbatches)
    raise ValueError(f"unknown bubble variant {variant!r}; expected 'megatron' or 'amped'")

