"""DLRM embedding sharding: the placement model (build), its lower bounds, local search
for incumbents, and the solve that ties them together (search)."""
