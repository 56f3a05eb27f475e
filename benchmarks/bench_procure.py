"""Wall time of a procurement query over the full shipped catalog (the README's procurement benchmark).

    python benchmarks/bench_procure.py                   # Llama 3 405B, 15T tokens, 90 days
    python benchmarks/bench_procure.py --pareto --workers 1
    python benchmarks/bench_procure.py --repeats 3       # min / median / max of 3 queries

The same work as ``planner procure --model llama3-405b --tokens 15e12 --days 90``: every
catalog cluster (and a derived template for each GPU without one) at the default GPU counts,
lower bounds, branch and bound, and the exact inner solves. The query runs ``--repeats``
times (``--repeat`` is the same option); its wall time is given as median, min and max after
a line naming the machine. Run on an otherwise idle machine; the figure in the README comes
from here.
"""

from __future__ import annotations

import argparse
import json

from _timing import add_repeats, machine, machine_line, spread, spread_text, timed
from planner.api import procure


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama3-405b")
    ap.add_argument("--tokens", type=float, default=15e12)
    ap.add_argument("--days", type=float, default=90.0)
    ap.add_argument("--objective", default="cost")
    ap.add_argument("--pareto", action="store_true", help="also solve for the fronts")
    ap.add_argument("--workers", type=int, default=None, help="default: one per CPU")
    add_repeats(ap, 1, "--repeat")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    results, walls = timed(lambda: procure(args.model, args.tokens, days=args.days,
                                           objective=args.objective, pareto=args.pareto,
                                           workers=args.workers), args.repeats)
    res = results[-1]
    c = res.choice
    row = {"machine": machine(), "query": res.query, "wall_s": spread(walls), "stats": res.stats,
           "choice": {k: v for k, v in c.to_json().items() if k != "plan"}}
    if args.json:
        print(json.dumps(row, indent=2))
        return
    s = res.stats
    print(machine_line())
    print(f"{args.model}, {args.tokens:g} tokens, {args.days:g} days, objective {args.objective}"
          f"{' + Pareto fronts' if args.pareto else ''}: wall {spread_text(walls, fmt='.1f')}")
    print(f"  {s['options']} options, {s['pruned_by_limits']} ruled out by bounds, {s['solved']} "
          f"solved ({s['solver_calls']} solver calls), {s['pruned_by_incumbent']} pruned by "
          "the incumbent")
    print(f"  choice: {c.num_gpus} x {c.gpu} ({c.cluster}), {c.days:.1f} days, "
          f"${c.cost_usd / 1e6:.1f}M, {c.energy_mwh:,.0f} MWh, MFU {c.mfu:.1%}")


if __name__ == "__main__":
    main()
