"""Serving cost model: a replica's prefill and decode step times (step), the layout's
latency and throughput under load (evaluate) and the queueing terms (queueing)."""
