"""DLRM cost model: embedding lookup, all-to-all and dense costs per table and device
(model) and the exact evaluator of a sharding (evaluate)."""
