#!/usr/bin/env bash
# A buyer's question, end to end (docs/procure.md):
#   "We must pre-train Llama 3 405B on 15T tokens within 90 days. What is the cheapest
#    cluster to rent, what do the alternatives cost in time, money and energy, what would
#    owning the GPUs cost instead, how fast could we go for $65M, and what if we stay
#    with H100?"
# Run from the repository root; the output is checked in as docs/procure-405b.txt and the
# plot as docs/pareto-405b.png:
#   bash examples/procure_405b.sh > docs/procure-405b.txt
set -euo pipefail
export COLUMNS=120

run() {
    echo "\$ planner procure $*"
    planner procure "$@"
    echo
}

# 1. Rent: the cheapest option within 90 days, and the fronts of days against cost and energy.
run --model llama3-405b --tokens 15e12 --days 90 --pareto --plot docs/pareto-405b.png --force
# 2. Own: capital over a 5-year depreciation plus electricity (hardware_catalog/pricing/).
run --model llama3-405b --tokens 15e12 --days 90 --pricing own
# 3. The inverse question: the fastest option within a $65M budget.
run --model llama3-405b --tokens 15e12 --budget 65e6
# 4. Only H100: the cheapest H100 cluster within 90 days.
run --model llama3-405b --tokens 15e12 --days 90 --gpus h100
