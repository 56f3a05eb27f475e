"""Training: the search space of parallel plans, its CP-SAT/MILP model, the decomposed
search with bounds, and the exhaustive reference search."""
