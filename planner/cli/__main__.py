"""``python -m planner.cli``."""

from planner.cli import main

main()
