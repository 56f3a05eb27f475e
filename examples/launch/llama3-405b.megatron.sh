#!/usr/bin/env bash
# planner export --format megatron: llama3-405b on dgx-h100-superpod (16384 of 16384x h100-sxm)
# framework: Megatron-LM core_v0.15.3 (commit 309ffca6a40553362d44fd17efc56b772fa1aa44)
# argument names checked in: megatron/training/arguments.py (NVIDIA/Megatron-LM, tag core_v0.15.3)
# plan: tp8 cp2 pp8 dp128 v8 mbs1 gbs2048 seq8192 zero1 recompute=none sp=true bf16
# Add data, tokenizer, optimizer and checkpoint arguments (or pass them to this
# script: "$@"). Run once per node with NODE_RANK and MASTER_ADDR set.
# validate_args asserts this for tp > 1 or cp > 1 before Blackwell (arguments.py);
# Megatron-LM's examples export it for every run.
export CUDA_DEVICE_MAX_CONNECTIONS=1
torchrun --nnodes 2048 --nproc-per-node 8 --node-rank "${NODE_RANK:-0}" --master-addr "${MASTER_ADDR:-localhost}" --master-port 6000 pretrain_gpt.py \
  --num-layers 126 \
  --hidden-size 16384 \
  --ffn-hidden-size 53248 \
  --num-attention-heads 128 \
  --group-query-attention \
  --num-query-groups 8 \
  --normalization RMSNorm \
  --position-embedding-type rope \
  --rotary-base 500000 \
  --swiglu \
  --disable-bias-linear \
  --untie-embeddings-and-output-weights \
  --attention-dropout 0.0 \
  --hidden-dropout 0.0 \
  --seq-length 8192 \
  --max-position-embeddings 8192 \
  --micro-batch-size 1 \
  --global-batch-size 2048 \
  --tensor-model-parallel-size 8 \
  --pipeline-model-parallel-size 8 \
  --context-parallel-size 2 \
  --cp-comm-type p2p \
  --sequence-parallel \
  --use-distributed-optimizer \
  --pipeline-model-parallel-layout 'Et*1|(t*2|)*62t*1L' \
  --bf16 \
  --attention-backend flash \
  --overlap-grad-reduce \
  --overlap-param-gather \
  --tp-comm-overlap \
  "$@"
