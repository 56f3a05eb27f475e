"""Orchestration: solve (best plan on a cluster) and procure (what to buy)."""

from planner.orchestration.train import SolvedPlan, SolveResult, solve

__all__ = ["solve", "SolveResult", "SolvedPlan"]
