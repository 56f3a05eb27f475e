"""Constants of the cost model, each with its source."""

from __future__ import annotations

GiB = 2**30

#: HBM a training process cannot use for tensors beyond the cluster's fixed reserve (CUDA
#: context, NCCL channel buffers, cuBLAS/cuDNN workspaces; ``memory_reserve_gib``, 2 GiB by
#: default): fragmentation of PyTorch's caching allocator, which holds reserved but
#: unallocated blocks (PyTorch CUDA memory-management notes; Megatron-Core and torchtitan
#: runs report reserved minus allocated of a few percent of HBM). 3 % of capacity.
ALLOCATOR_FRAGMENTATION = 0.03

#: Bytes per element of activations and weights in the compute dtype. FP8 training keeps
#: bf16 master copies of activations for most tensors (NVIDIA Transformer Engine docs,
#: "Using FP8 with Transformer Engine"), so activations stay at 2 bytes.
ACT_BYTES = 2.0
#: Under FP8 the routed experts' grouped GEMMs keep the FP8 cast of their inputs for
#: backward, not the BF16 tensor: Megatron-Core frees the expert node's input after the
#: cast for FP8/FP4 ("Low precision saves a cast tensor", Megatron-LM
#: docs/user-guide/features/moe_a2a_overlap.md, Tensor lifetime management, main). 1 byte
#: per element (E4M3; the per-tensor scales are negligible).
EXPERT_FP8_INPUT_BYTES = 1.0
WEIGHT_BYTES = 2.0

#: Mixed-precision Adam (Megatron-LM docs, distributed optimizer table; Rajbhandari et al.
#: 2020, ZeRO Sec. 3.1): fp32 main gradients (4 B), fp32 master weights + momentum +
#: variance (12 B) per parameter.
GRAD_BYTES = 4.0
OPTIMIZER_BYTES = 12.0
#: One bf16 optimizer-state element (Apex ``DistributedFusedAdam`` with ``dtype=bf16``:
#: ``exp_avg_shard``/``exp_avg_sq_shard`` allocated in the optimizer dtype; NVIDIA/apex
#: apex/contrib/optimizers/distributed_fused_adam.py ``StateBucket``, commit 7d5ecf18).
BF16_OPTIMIZER_STATE_BYTES = 2.0
#: Gradients are reduced in fp32 (Megatron-LM ``--accumulate-allreduce-grads-in-fp32``,
#: required for bf16; Llama 3 paper Sec. 3.3.2 "FP32 gradient accumulation").
GRAD_COMM_BYTES = 4.0
#: Gradients kept and reduced in bf16 (``grad_reduce_in_fp32=False``, NVIDIA's setting for
#: FP8 recipes: NeMo ``bf16_with_fp8_mixed`` and the NeMo 2.0 performance recipes).
BF16_GRAD_BYTES = 2.0
#: Parameters are all-gathered in the compute dtype after the distributed optimizer step.
PARAM_COMM_BYTES = 2.0

#: HBM traffic of one Adam step per (sharded) parameter: read fp32 grad, master, m, v
#: (16 B); write master, m, v (12 B) and the bf16 copy (2 B); read grads again for the
#: global-norm clip (4 B). Megatron-LM ``optimizer.py``/apex FusedAdam.
OPTIMIZER_STEP_BYTES = 34.0

#: FlashAttention backward performs 5 matmuls against 2 in forward (Dao 2023,
#: FlashAttention-2, Sec. 3.1): backward FLOPs = 2.5 x forward.
FLASH_BWD_FLOP_RATIO = 2.5
#: Causal masking lets FlashAttention skip the upper triangle: about half the work
#: (Dao 2023, Sec. 4.1 benchmarks report causal FLOPs as half of non-causal).
FLASH_CAUSAL_FRACTION = 0.5

#: Per-element HBM traffic of the memory-bound operations (bytes read + written per
#: element, 2-byte tensors) in Megatron-LM's fused kernels.
NORM_BYTES = 4.0  # read x, write y
RESIDUAL_BYTES = 6.0  # read two inputs, write the sum
DROPOUT_BYTES = 5.0  # read x, write y, write 1-byte mask
GELU_BYTES = 4.0  # read x, write gelu(x)
SWIGLU_BYTES = 6.0  # read gate and up, write silu(gate) * up
ROPE_BYTES = 4.0  # read and write q/k
SOFTMAX_BYTES = 4.0  # fused scale-mask-softmax: read scores, write probabilities
#: The same operations in PyTorch eager mode, one kernel per operator (a plan with
#: ``fused_elementwise: false``; torchtitan without torch.compile, pytorch/torchtitan
#: ``torchtitan/models/llama/model.py`` @0413364). LayerNorm and GELU are single native
#: kernels either way; these three are not:
#: RMSNorm ``(x.float() * rsqrt(x.float().pow(2).mean(-1) + eps)).type_as(x) * w``: cast
#: (read 2, write 4), pow (4 + 4), mean (read 4), scale (4 + 4), cast back (4 + 2), weight
#: (2 + 2) bytes per element.
EAGER_RMSNORM_BYTES = 36.0
#: ``silu(w1 x) * w3 x``: silu (read 2, write 2), product (read 4, write 2).
EAGER_SWIGLU_BYTES = 10.0
#: complex RoPE: ``x.float()`` as complex (read 2, write 4), times the frequencies (read
#: 4, write 4), ``type_as`` (read 4, write 2).
EAGER_ROPE_BYTES = 20.0
#: Backward elementwise traffic relative to forward (read output grad and saved input,
#: write input grad).
ELEMENTWISE_BWD_RATIO = 2.0
#: Cross-entropy over fp32 logits: cast/write logits (4 B), read for max/sum (4 B), write
#: gradient (4 B) and read it in the head's backward (4 B) (Megatron vocab-parallel CE).
LOSS_BYTES_PER_LOGIT = 16.0
#: HBM bytes per local logit live at the loss's peak, by how the framework computes the
#: cross-entropy (a profile's ``kernels.cross_entropy``). ``fused``: Megatron's
#: vocab-parallel cross-entropy (megatron/core/tensor_parallel/cross_entropy.py) casts the
#: logits to fp32 once and turns them into the softmax and its gradient in place: one fp32
#: buffer. ``eager_fp32``: ``F.cross_entropy(logits.float(), labels)`` in eager PyTorch,
#: unchunked (torchtitan train.py @9dec370 ``loss_fn``; torchtitan/components/loss.py
#: v0.2.2): autograd keeps the fp32 log-softmax output for backward, where the loss's
#: gradient (fp32, dense) and log_softmax_backward's fp32 output are live beside it,
#: 3 x 4 B (the bf16 logits are freed before backward, ``del pred``).
LOSS_PEAK_BYTES_PER_LOGIT: dict[str, float] = {"fused": 4.0, "eager_fp32": 12.0}
#: FP8 training leaves the LM head in BF16: Megatron-LM's ``GPTModel.output_layer`` is a
#: ``tensor_parallel.ColumnParallelLinear`` (megatron/core/models/gpt/gpt_model.py), not a
#: Transformer Engine module, so no FP8 autocast applies to it (torchtitan's float8
#: conversion also skips ``output`` by default, ``float8.filter_fqns``).
HEAD_DTYPE_IN_FP8 = "bf16"
#: FP8 training keeps an fp8 copy of each weight beside the bf16 one (Transformer Engine
#: ``fp8_weight_caching``; NVIDIA TE docs, "FP8 primer").
FP8_WEIGHT_CACHE_BYTES = 1.0
#: FP8 GEMMs take FP8 inputs: Transformer Engine's ``cast_transpose`` reads each bf16 input
#: element (2 B) and writes it as FP8 twice, row-wise for this GEMM and transposed for the
#: weight-gradient GEMM (1 + 1 B), computing the amax on the way (NVIDIA Transformer Engine
#: docs, "FP8 primer"; ``transformer_engine/common/transpose/cast_transpose.cu``). Backward
#: casts the output gradients the same way (covered by ``ELEMENTWISE_BWD_RATIO``).
FP8_CAST_BYTES = 4.0

# ---- mixture of experts ------------------------------------------------------------------
#: Token permutation before the dispatch all-to-all and un-permutation after the combine:
#: each routed token copy is read and written once per direction (2-byte tensors;
#: Megatron-Core ``moe_utils.permute``/``unpermute``).
MOE_PERMUTE_BYTES = 4.0
#: Router scores are kept in fp32 (Megatron-Core ``--moe-router-dtype fp32``; DeepSeek-V3
#: report Sec. 3.3.2 keeps gating in higher precision); softmax/top-k reads the logits and
#: writes the probabilities.
ROUTER_PROB_BYTES = 4.0
ROUTER_SOFTMAX_BYTES = 8.0
