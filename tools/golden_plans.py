"""The golden launch files of examples/launch/ from the solves that produce them.

Each :class:`Golden` names a plan file, the ``planner solve`` that returns it and the formats
it is exported to. This tool re-runs every solve through :func:`planner.api.solve` and
compares: the plan YAML with what the solve returns (written as ``planner solve --out``
writes it), each launch file with ``planner export`` of that plan, and docs/export.md's
golden table with the table rendered from the solves.

    python tools/golden_plans.py           # report what is stale (exit 1), print the table
    python tools/golden_plans.py --write   # rewrite the plan files and their launch files

The table is printed either way; docs/export.md quotes it verbatim. Every solve takes a
second or two, so ``tests/test_export.py`` runs the check on every test run.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

LAUNCH = "examples/launch"
DOC = "docs/export.md"


@dataclass(frozen=True)
class Golden:
    plan_file: str  # under examples/launch/
    model: str
    cluster: str
    gpus: int | None  # --gpus (None: the cluster's size)
    global_batch_size: int | None  # --global-batch (None: the model's)
    framework: str  # --framework: the space is what this framework runs
    formats: tuple[str, ...]  # planner export --format, one launch file each
    launchers: tuple[str, ...] = ()  # planner export --launcher, for every format


    def command(self) -> str:
        """The ``planner solve`` command line that returns this plan."""
        words = ["planner solve", "-m", self.model, "-c", self.cluster]
        if self.gpus is not None:
            words += ["--gpus", str(self.gpus)]
        if self.global_batch_size is not None:
            words += ["--global-batch", str(self.global_batch_size)]
        return " ".join(words + ["--framework", self.framework])

    def launch_files(self) -> list[tuple[str, str]]:
        """(format, file name) of each launch file written from this plan."""
        from planner.export import SUFFIX

        stem = self.plan_file.removesuffix(".plan.yaml").split(".")[0]
        return [(fmt, f"{stem}.{SUFFIX[fmt]}") for fmt in self.formats]

    def launcher_files(self, plan: Any) -> dict[str, str]:
        """File name -> text of the Slurm and Kubernetes files of ``plan`` (the export
        files themselves are :meth:`launch_files`')."""
        from planner.export.launch import launch_files
        from planner.specs.loaders import load_cluster, load_model

        model, cluster = load_model(self.model), load_cluster(self.cluster, self.gpus)
        out = {}
        for fmt in self.formats:
            for launcher in self.launchers:
                for name, text in launch_files(launcher, fmt, plan, model, cluster):
                    if name.endswith((".sbatch", ".k8s.yaml")):
                        out[name] = text
        return out


#: The README's Llama 3 70B (1024 H100) and 405B (16384 H100) runs as Megatron-Core runs
#: them (the framework ``--export megatron`` defaults to), and the best plans of the same
#: runs that torchtitan and DeepSpeed run (the DeepSpeed ones on fewer GPUs: dp only).
GOLDEN: tuple[Golden, ...] = (
    Golden("llama3-70b.plan.yaml", "llama3-70b", "examples/superpod.yaml", None, None,
           "megatron-core", ("megatron", "megatron-bridge"), ("slurm", "kubernetes")),
    Golden("llama3-405b.plan.yaml", "llama3-405b", "dgx-h100-superpod", 16384, 2048,
           "megatron-core", ("megatron", "megatron-bridge")),
    Golden("llama3-70b.torchtitan.plan.yaml", "llama3-70b", "examples/superpod.yaml", None,
           None, "torchtitan", ("torchtitan",)),
    Golden("llama3-405b.torchtitan.plan.yaml", "llama3-405b", "dgx-h100-superpod", 16384,
           2048, "torchtitan", ("torchtitan",)),
    Golden("llama3-70b.deepspeed.plan.yaml", "llama3-70b", "examples/superpod.yaml", 512,
           None, "deepspeed", ("deepspeed",)),
    Golden("llama3-405b.deepspeed.plan.yaml", "llama3-405b", "dgx-h100-superpod", 2048, 2048,
           "deepspeed", ("deepspeed",)),
)


@dataclass(frozen=True)
class ServeGolden:
    """The README's serving example and the Kubernetes manifests of its plan."""

    manifest_file: str  # under examples/launch/
    model: str
    cluster: str
    isl: int
    osl: int
    rate_rps: float
    ttft_ms: float
    tpot_ms: float
    engine: str  # the engine the solve plans for and the manifests start

    def command(self) -> str:
        return (f"planner serve -m {self.model} -c {self.cluster} --isl {self.isl} --osl "
                f"{self.osl} --ttft-ms {self.ttft_ms:g} --tpot-ms {self.tpot_ms:g} --rate "
                f"{self.rate_rps:g} --engine {self.engine} --launch --launcher kubernetes")

    def text(self) -> str:
        from planner.api import serve
        from planner.export.launch import serve_manifests
        from planner.specs.loaders import load_cluster, load_model

        r = serve(self.model, self.cluster, self.isl, self.osl, rate_rps=self.rate_rps,
                  ttft_ms=self.ttft_ms, tpot_ms=self.tpot_ms, engine=self.engine)
        m, c = load_model(self.model), load_cluster(self.cluster)
        return serve_manifests(self.engine, m.hf_id or m.name, r.plan, c.node_size, m.name)


#: README "Serving": Llama 3 70B on the H100 SuperPOD, 20 requests/s within the SLOs
SERVE_GOLDEN: tuple[ServeGolden, ...] = (
    ServeGolden("llama3-70b.serve.trtllm.k8s.yaml", "llama3-70b", "dgx-h100-superpod", 2048,
                256, 20, 500, 30, "trtllm"),
)


@lru_cache(maxsize=None)
def solved(g: Golden) -> Any:
    """The solve's result (``.best.plan``, ``.best.estimate``, ``.status``)."""
    from planner.api import solve

    return solve(g.model, g.cluster, gpus=g.gpus, global_batch_size=g.global_batch_size,
                 framework=g.framework)


def plan_text(g: Golden) -> str:
    """The plan YAML as ``planner solve --out`` writes it."""
    import yaml

    return yaml.safe_dump(solved(g).best.plan.to_dict(), sort_keys=False)


def launch_texts(g: Golden) -> dict[str, str]:
    """File name -> ``planner export`` of the solved plan (raises on a refusal)."""
    from planner.export import export_plan
    from planner.specs.loaders import load_cluster, load_model

    plan = solved(g).best.plan
    model, cluster = load_model(g.model), load_cluster(g.cluster, g.gpus)
    return {**{name: export_plan(fmt, plan, model, cluster) for fmt, name in g.launch_files()},
            **g.launcher_files(plan)}


def describe(plan: Any) -> str:
    """A plan in the table's words: degrees above 1 (dp always), ZeRO stage, recompute, SP."""
    degrees = [f"{k}{getattr(plan, k)}" for k in ("tp", "cp", "ep", "pp")
               if getattr(plan, k) > 1]
    degrees.append(f"dp{plan.dp}")
    if plan.virtual_stages > 1:
        degrees.append(f"v{plan.virtual_stages}")
    if plan.microbatch_size > 1:
        degrees.append(f"mbs{plan.microbatch_size}")
    words = [" ".join(degrees)]
    if plan.uneven_pipeline:
        words.append("uneven pipeline")
    words.append(f"ZeRO-{plan.zero_stage}")
    if plan.recompute != "none":
        words.append(f"recompute {plan.recompute}")
    if plan.sequence_parallel and plan.tp > 1:
        words.append("SP")
    return ", ".join(words)


def row(g: Golden) -> str:
    """The golden table's row for ``g``."""
    best = solved(g).best
    e = best.estimate
    return (f"| `{g.plan_file}` | `{g.command()}` | {describe(best.plan)} | "
            f"{e.iteration_time_s:.2f} s, {100 * e.mfu:.1f} % MFU |")


def table(goldens: tuple[Golden, ...] = GOLDEN) -> str:
    head = ("| file | command that made the plan | plan | iteration |\n"
            "|---|---|---|---|\n")
    return head + "\n".join(row(g) for g in goldens) + "\n"


def stale(root: Path = ROOT, goldens: tuple[Golden, ...] = GOLDEN) -> list[str]:
    """One line per plan file, launch file or docs row that is not what its solve gives."""
    out = []
    doc = (root / DOC).read_text(encoding="utf-8")
    for g in goldens:
        if solved(g).status != "optimal":  # a time-limited answer is no golden
            out.append(f"{g.plan_file}: `{g.command()}` returned {solved(g).status!r}, "
                       "not a proven optimum")
        want = {g.plan_file: plan_text(g), **launch_texts(g)}
        for name, text in want.items():
            path = root / LAUNCH / name
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                out.append(f"{LAUNCH}/{name}: not what `{g.command()}` gives "
                           "(python tools/golden_plans.py --write)")
        if row(g) not in doc:
            out.append(f"{DOC}: expected the row {row(g)!r}")
    for sg in SERVE_GOLDEN:
        path = root / LAUNCH / sg.manifest_file
        if not path.is_file() or path.read_text(encoding="utf-8") != sg.text():
            out.append(f"{LAUNCH}/{sg.manifest_file}: not what `{sg.command()}` gives "
                       "(python tools/golden_plans.py --write)")
    return out


def write(root: Path = ROOT, goldens: tuple[Golden, ...] = GOLDEN) -> list[str]:
    """Rewrite every plan file and launch file that differs; the paths written."""
    from planner.fileio import write_output_atomic

    written = []
    for g in goldens:
        for name, text in {g.plan_file: plan_text(g), **launch_texts(g)}.items():
            path = root / LAUNCH / name
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                write_output_atomic(path, text, "--write", force=True)
                written.append(f"{LAUNCH}/{name}")
    for sg in SERVE_GOLDEN:
        path, text = root / LAUNCH / sg.manifest_file, sg.text()
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            write_output_atomic(path, text, "--write", force=True)
            written.append(f"{LAUNCH}/{sg.manifest_file}")
    return written


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true",
                    help="rewrite the plan files and launch files that are stale")
    if ap.parse_args(argv).write:
        for path in write():
            print(f"wrote {path}", file=sys.stderr)
    bad = stale()
    print(table(), end="")
    for line in bad:
        print(line, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
