"""Training cost model: the exact evaluator of one plan, the per-point cost tables the
formulations read, the vectorized evaluator, stages, offload, streams and goodput."""
