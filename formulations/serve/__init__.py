"""Serving: the layouts a fleet can use (space) and the replica-count model that picks the
cheapest fleet meeting the rate and SLOs (search)."""
