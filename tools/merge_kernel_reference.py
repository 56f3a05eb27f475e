"""Merge a reference kernel measurement into the catalog's kernel tables.

Two runs of the same kernels on the same GPU type differ (clocks, power state, timing of
launch-bound shapes: up to 2x at 1024^3, within 25 % at 4096 and above). The shared
calibration file ``calibration/hopper_microbench_2026-11.yaml`` (outside the repository) is
the reference the project measures its kernel speeds against; where it measured a shape,
its row is added (tagged ``ref``) and the cost model reads it; the table's own row stays
beside it for comparison, and elsewhere the table's own run stands. The
spread between the runs is printed, so the choice is visible.

    python tools/merge_kernel_reference.py REFERENCE.yaml            # print the spread
    python tools/merge_kernel_reference.py REFERENCE.yaml --write    # and rewrite the tables
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

KERNELS = Path(__file__).resolve().parents[1] / "hardware_catalog" / "kernels"


def _merge(rows: list[dict], new: dict, key: tuple[str, ...]) -> tuple[list[dict], float | None]:
    """``rows`` with ``new`` added (an earlier reference row with the same ``key`` fields
    replaced; the table's own row kept beside it, for comparison: the cost model reads the
    reference row); the ratio of the own run's figure to the reference's, None where the
    own run did not measure the shape."""
    same = [r for r in rows if all(r.get(k) == new.get(k) for k in key)]
    kept = [r for r in rows if not (r in same and r.get("ref"))]
    own = [r for r in same if not r.get("ref")]
    if not own:
        return kept + [new], None
    old = own[0].get("tflops") or own[0].get("fwd_tflops") or own[0].get("GBps")
    now = new.get("tflops") or new.get("fwd_tflops") or new.get("GBps")
    return kept + [new], old / now


def merge(table: dict, ref: dict, gpu: str, tag: str) -> tuple[dict, list[str]]:
    out, lines = dict(table), []
    for r in ref.get("gemm", {}).get(gpu, []):
        us = 2 * r["m"] * r["n"] * r["k"] / (r["tflops"] * 1e12) * 1e6
        row = {"m": r["m"], "n": r["n"], "k": r["k"], "dtype": r["dtype"], "us": round(us, 2),
               "tflops": r["tflops"], "ref": tag}
        out["gemm"], ratio = _merge(out.get("gemm", []), row, ("m", "n", "k", "dtype"))
        lines.append(f"gemm {r['dtype']} {r['m']}x{r['n']}x{r['k']}: reference {r['tflops']}, "
                     + ("new shape" if ratio is None else f"own run {ratio:.2f}x"))
    for r in ref.get("attention", {}).get(gpu, []):
        flops = 2 * 2 * r["batch"] * r["heads"] * r["seq"] ** 2 * r["head_dim"] / (
            2 if r["causal"] else 1)
        row = {k: r[k] for k in ("backend", "seq", "heads", "kv_heads", "batch", "head_dim",
                                 "causal")}
        row.update(fwd_us=round(flops / (r["fwd_tflops"] * 1e12) * 1e6, 2),
                   bwd_us=round(2.5 * flops / (r["bwd_tflops"] * 1e12) * 1e6, 2),
                   fwd_tflops=r["fwd_tflops"], bwd_tflops=r["bwd_tflops"], ref=tag)
        out["attention"], ratio = _merge(out.get("attention", []), row,
                                         ("backend", "seq", "heads", "kv_heads", "head_dim",
                                          "causal"))
        lines.append(f"attention {r['backend']} s={r['seq']} d={r['head_dim']}: reference "
                     f"{r['fwd_tflops']}/{r['bwd_tflops']}, "
                     + ("new case" if ratio is None else f"own run {ratio:.2f}x (fwd)"))
    copy = ref.get("copy", {}).get(gpu)
    if copy:
        gbps = copy["read_plus_write_GBps"]
        row = {"op": "copy", "bytes": copy["bytes"], "us": round(copy["bytes"] / gbps / 1e3, 2),
               "GBps": gbps, "ref": tag}
        out["memory"], ratio = _merge(out.get("memory", []), row, ("op", "bytes"))
        lines.append(f"copy {copy['bytes']} B: reference {gbps} GB/s, "
                     + ("new size" if ratio is None else f"own run {ratio:.2f}x"))
    return out, lines


def main(argv: list[str]) -> None:
    args = [a for a in argv if a != "--write"]
    if len(args) != 1:
        raise SystemExit(__doc__)
    ref_path = Path(args[0])
    ref = yaml.safe_load(ref_path.read_text())
    tag = ref_path.name  # its source line travels in the reference file
    for path in sorted(KERNELS.glob("*.yaml")):
        table = yaml.safe_load(path.read_text())
        gpu = table["gpu"]
        if gpu not in ref.get("gemm", {}):
            continue
        merged, lines = merge(table, ref, gpu, tag)
        print(f"== {gpu}")
        print("\n".join(f"  {x}" for x in lines))
        if "--write" in argv:
            header = "".join(l + "\n" for l in path.read_text().splitlines() if l.startswith("#"))
            path.write_text(header + yaml.safe_dump(merged, sort_keys=False, width=100))
            print(f"  wrote {path.relative_to(KERNELS.parents[1])}")


if __name__ == "__main__":
    main(sys.argv[1:])
