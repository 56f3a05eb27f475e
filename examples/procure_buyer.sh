#!/usr/bin/env bash
# A buyer's questions (docs/procure.md, Sec. 9 and 10): a power-limited site, a fleet already
# owned, rent against buy, and training then serving on one fleet or two. Each answer is one call of planner.procurement.procure on the DGX H100
# and DGX B200 SuperPOD templates (up to 8,192 GPUs), rented at the catalog's prices, goodput
# on. Run from the repository root (about 2 minutes on one core):
#   bash examples/procure_buyer.sh
# (planner procure takes the same as --max-power-mw, --max-racks, --max-ports, --owned,
# --serve-rate and --serve-days.)
set -euo pipefail
python - <<'EOF'
from __future__ import annotations

from planner.errors import InfeasibleError
from planner.orchestration.serve import workload
from planner.procurement import named_templates, procure, procure_train_serve
from planner.specs.loaders import load_model
from planner.specs.serve import load_engine

TEMPLATES = named_templates(["dgx-h100-superpod", "dgx-b200-superpod"])
#: what a separate serving fleet may be built of
SERVING = named_templates(["dgx-a100-superpod", "dgx-h100-superpod", "dgx-h200-superpod",
                           "dgx-b200-superpod"])


def ask(model: str, **kw):
    return procure(load_model(model), 15e12, days=90, templates=TEMPLATES, max_gpus=8192,
                   workers=1, **kw)


def line(res) -> str:
    c = res.choice
    return (f"{c.num_gpus:,}x {c.gpu}{' (owned)' if c.owned else ''}: {c.days:.1f} days, "
            f"${c.cost_usd:,.0f}, {c.facility_power_mw:.2f} MW peak"
            + (f", {c.racks} racks" if c.racks is not None else ""))


def main() -> None:
    print("1. Llama 3 70B, 15T tokens, 90 days")
    free = ask("llama3-70b")
    print("   no site limit:       ", line(free))
    print("   --max-power-mw 2.5:  ", line(ask("llama3-70b", max_power_mw=2.5)))
    try:
        ask("llama3-70b", max_power_mw=1.5)
    except InfeasibleError as e:
        print("   --max-power-mw 1.5:  ", e.reasons[0], "|", e.hints[0])
    print("2. Llama 3 8B, 15T tokens, 90 days")
    print("   nothing owned:       ", line(ask("llama3-8b")))
    own = ask("llama3-8b", owned={"dgx-a100-superpod": 1024})
    print("   1,024 A100 owned:    ", line(own))
    print("   ", own.owned["note"])
    print("3. Rent or buy the 70B answer's cluster")
    rb = free.rent_or_buy
    print("   ", rb["summary"])
    print(f"    prices: ${rb['on_demand_usd_per_gpu_hour']:.2f}/GPU-hour ({rb['price_source']}); "
          f"${rb['capex_usd_per_gpu']:,.0f}/GPU ({rb['capex_source']}); dated "
          f"{rb['pricing_date']}")
    print("4. Llama 3 70B, 15T tokens, 90 days, then 20 requests/s (1,024 in, 256 out; TTFT "
          "1 s, TPOT 50 ms at P99)")
    w = workload(1024, 256, 20.0, 1000.0, 50.0)
    for serve_days in (30, 730):
        ts = procure_train_serve(load_model("llama3-70b"), 15e12, days=90, serve=w,
                                 serve_days=serve_days, templates=TEMPLATES,
                                 serve_templates=SERVING, max_gpus=8192, workers=1,
                                 engine=load_engine("trtllm"))  # planner procure's default
        print(f"   serve {serve_days} days:", ts.summary)
        for name, f in (("reuse", ts.reuse), *ts.separate.items()):
            print(f"      {name:5s}: {f.label()}, ${f.capital_usd:,.0f} up front + "
                  f"${f.usd_per_day:,.1f}/day = ${f.cost_usd:,.0f}")


main()
EOF
