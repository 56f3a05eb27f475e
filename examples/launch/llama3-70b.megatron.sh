#!/usr/bin/env bash
# planner export --format megatron: llama3-70b on dgx-h100-superpod (1024 of 1024x h100-sxm)
# framework: Megatron-LM core_v0.15.3 (commit 309ffca6a40553362d44fd17efc56b772fa1aa44)
# argument names checked in: megatron/training/arguments.py (NVIDIA/Megatron-LM, tag core_v0.15.3)
# plan: tp4 cp1 pp4 dp64 v8 mbs1 gbs512 seq8192 zero1 recompute=none sp=true bf16
# Add data, tokenizer, optimizer and checkpoint arguments (or pass them to this
# script: "$@"). Run once per node with NODE_RANK and MASTER_ADDR set.
# validate_args asserts this for tp > 1 or cp > 1 before Blackwell (arguments.py);
# Megatron-LM's examples export it for every run.
export CUDA_DEVICE_MAX_CONNECTIONS=1
torchrun --nnodes 128 --nproc-per-node 8 --node-rank "${NODE_RANK:-0}" --master-addr "${MASTER_ADDR:-localhost}" --master-port 6000 pretrain_gpt.py \
  --num-layers 80 \
  --hidden-size 8192 \
  --ffn-hidden-size 28672 \
  --num-attention-heads 64 \
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
  --global-batch-size 512 \
  --tensor-model-parallel-size 4 \
  --pipeline-model-parallel-size 4 \
  --context-parallel-size 1 \
  --sequence-parallel \
  --use-distributed-optimizer \
  --pipeline-model-parallel-layout 'Et*2|(t*2|)*7(t*3|)*16(t*2|)*7t*2L' \
  --bf16 \
  --attention-backend flash \
  --overlap-grad-reduce \
  --overlap-param-gather \
  --tp-comm-overlap \
  "$@"
