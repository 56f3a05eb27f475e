"""``planner catalog``: the shipped GPUs, clusters, models and framework and engine
profiles."""

from __future__ import annotations

import re
from enum import Enum
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

import planner.catalog as catalog
from planner.cli.console import _emit_json, out, print_table
from planner.costmodel.layer import total_params
from planner.specs.framework import load_framework
from planner.specs.loaders import load_cluster, load_gpu, load_model
from planner.specs.serve import load_engine


class CatalogKind(str, Enum):
    gpus = "gpus"
    clusters = "clusters"
    models = "models"
    frameworks = "frameworks"
    engines = "engines"


#: Table headers with spaces (they wrap) for the JSON keys; units as the keys have them.
HEADERS = {"params_b": "params (B)", "seq_len": "seq len", "bf16_tflops": "bf16 TFLOP/s",
           "fp8_tflops": "fp8 TFLOP/s", "hbm_gib": "HBM GiB", "hbm_TBps": "HBM TB/s",
           "nvlink_GBps": "NVLink GB/s", "tdp_w": "TDP W", "usd_per_gpu_hour": "$ per GPU-hour",
           "num_gpus": "GPUs", "gqa_shared": "GQA KV shared", "request_ms": "request ms",
           "collective_us": "collective us", "kernel_frac": "kernel fraction"}

#: Columns a narrow terminal leaves out first (``--json`` has them all).
DROP_ORDER = {CatalogKind.models: ["vocab", "moe", "seq_len", "hidden", "layers"],
              CatalogKind.gpus: ["tdp_w", "nvlink_GBps", "fp8_tflops"],
              CatalogKind.clusters: ["num_gpus"],
              CatalogKind.frameworks: ["elementwise", "attention", "zero"],
              CatalogKind.engines: ["gqa_shared"]}


def _rows(kind: CatalogKind) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    if kind is CatalogKind.gpus:
        for n in catalog.names("gpus"):
            g = load_gpu(n)
            rows.append(dict(name=g.name, bf16_tflops=g.peak_flops("bf16") / 1e12,
                             fp8_tflops=g.peak_tflops.get("fp8"), hbm_gib=g.hbm_gib,
                             hbm_TBps=g.hbm_TBps, nvlink_GBps=g.nvlink_GBps, tdp_w=g.tdp_w,
                             usd_per_gpu_hour=g.price_per_gpu_hour, aliases=g.aliases))
    elif kind is CatalogKind.frameworks:
        for n in catalog.names("frameworks"):
            f = load_framework(n)
            rows.append(dict(name=f.name, export=f.export_format, version=f.version,
                             zero=", ".join(map(str, f.zero_stages)),
                             recompute=", ".join(f.recompute), attention=f.kernels.attention_backend,
                             elementwise=f.kernels.elementwise, aliases=f.aliases))
    elif kind is CatalogKind.engines:
        for n in catalog.names("engines"):
            e = load_engine(n)
            # short keys: the table fits 80 columns
            rows.append(dict(name=e.name, version=e.version, gqa_shared=e.gqa_kv_shared,
                             request_ms=e.request_overhead_ms,
                             collective_us=e.collective_overhead_us,
                             kernel_frac=e.kernel_fraction, aliases=e.aliases))
    elif kind is CatalogKind.clusters:
        for n in catalog.names("clusters"):
            c = load_cluster(n)
            topo = " > ".join(f"{lv.name}({lv.size}, {lv.bandwidth_GBps:g} GB/s)" for lv in c.topology)
            rows.append(dict(name=c.name, gpu=c.gpu.name, num_gpus=c.num_gpus, topology=topo,
                             aliases=c.aliases))
    else:
        for n in catalog.names("models"):
            mm = load_model(n)
            if getattr(mm, "kind", None) == "dlrm":  # a recommendation model (specs/dlrm.py)
                rows.append(dict(name=mm.name, params_b=round(mm.total_params / 1e9, 2),
                                 layers=len(mm.bottom_mlp) + len(mm.top_mlp),
                                 hidden=max(mm.bottom_mlp + mm.top_mlp), heads=None,
                                 ffn=f"dlrm: {mm.num_tables} tables", vocab=None, seq_len=None,
                                 moe=False, aliases=mm.aliases))
                continue
            rows.append(dict(name=mm.name, params_b=round(total_params(mm) / 1e9, 2),
                             layers=mm.num_layers, hidden=mm.hidden_size,
                             heads=f"{mm.num_attention_heads}/{mm.kv_heads}",
                             ffn=f"{mm.ffn_hidden_size} {mm.ffn_type}", vocab=mm.vocab_size,
                             seq_len=mm.seq_len, moe=bool(mm.moe), aliases=mm.aliases))
    return rows


def _short_commits(text: str) -> str:
    """Git commit ids as their first 7 hex digits (git's own short form): a 40-digit word
    does not wrap (``--json`` keeps them whole)."""
    return re.sub(r"\b([0-9a-f]{7})[0-9a-f]{33}\b", r"\1", text)


def catalog_cmd(
    kind: CatalogKind = typer.Argument(..., help="gpus, clusters, models, frameworks or engines"),
    json_: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List the shipped GPUs, clusters, models, framework or serving-engine profiles."""
    rows = _rows(kind)
    if json_:
        _emit_json(rows)
        return
    table = Table(title=f"catalog: {kind.value}", header_style="bold")
    for col in rows[0]:
        table.add_column(HEADERS.get(col, col))
    for r in rows:
        # names from catalog files print as they are, never as rich markup
        table.add_row(*[escape(", ".join(v) if isinstance(v, list)
                               else ("-" if v is None else _short_commits(str(v))))
                        for v in r.values()])
    # whole names within the terminal's width: the other columns wrap, and the least
    # needed go (named under the table) only when wrapped they still do not fit
    print_table(out, table, whole=("name",), words=("aliases", "gpu"),
                drop=tuple(HEADERS.get(c, c) for c in DROP_ORDER[kind]))
