"""Launchers (issue 40 item 1): the sbatch scripts and Kubernetes manifests of
planner/export/launch.py, checked with bash and a YAML parser, and run under bash with
stand-in ``scontrol``, ``srun`` and ``torchrun`` that record what each node would start:
the world (nodes x processes per node) must be the plan's, each node must get its rank or
the rendezvous on the allocation's first host, and the file handed over must be the export."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, small_cluster, tiny_model
from formulations.train.space import SearchSpace, SpaceOptions
from planner.errors import InputError
from planner.export import FORMATS, export_plan
from planner.export.launch import MOUNT, k8s_name, launch_files, serve_manifests
from planner.specs.loaders import load_cluster, load_model
from planner.specs.plan_base import build_plan, model_defaults
from planner.specs.serve import ServePlan

BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="needs bash")
RFC1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
SEP = "\x1f"

#: stand-ins: scontrol lists two hosts; srun runs its command once per node with
#: SLURM_NODEID set; torchrun records its arguments and the node's environment
STANDINS = {
    "scontrol": '#!/bin/bash\n[ "$1 $2" = "show hostnames" ] || exit 9\n'
                'for i in $(seq 0 255); do echo "host$i"; done\n',
    "srun": '#!/bin/bash\nn=1\nwhile [[ "$1" == --* ]]; do\n'
            '  case "$1" in --nodes=*) n="${1#--nodes=}";; esac; shift\ndone\n'
            'for ((i=0; i<n; i++)); do SLURM_NODEID=$i "$@" || exit $?; done\n',
    "torchrun": '#!/bin/bash\n{ printf "%s\\x1f" "NODE_RANK=${NODE_RANK-}" '
                '"CDMC=${CUDA_DEVICE_MAX_CONNECTIONS-}" "$@"; printf "\\n"; } >> "$LOG"\n',
}


def _standins(tmp: Path) -> dict[str, str]:
    bin_ = tmp / "bin"
    bin_.mkdir(exist_ok=True)
    for name, text in STANDINS.items():
        (bin_ / name).write_text(text)
        (bin_ / name).chmod(0o755)
    return {"PATH": f"{bin_}:{os.environ['PATH']}", "LOG": str(tmp / "log"), "HOME": str(tmp)}


def _calls(tmp: Path) -> list[list[str]]:
    log = tmp / "log"
    if not log.exists():
        return []
    return [line.split(SEP)[:-1] for line in log.read_text().splitlines()]


def _opt(words: list[str], flag: str) -> str:
    return words[words.index(flag) + 1]


def _check_calls(calls: list[list[str]], fmt: str, plan, nodes: int, per_node: int,
                 config: Path, export_text: str, master: str) -> None:
    """One torchrun per node, the plan's world, each node's rank or the rendezvous at the
    first host, and the export file as written."""
    assert len(calls) == nodes, calls[:2]
    for rank, c in enumerate(calls):
        n, p = int(_opt(c, "--nnodes")), int(_opt(c, "--nproc-per-node"))
        assert (n, p) == (nodes, per_node) and n * p == plan.world_size
        if fmt == "megatron":
            assert c[0] == f"NODE_RANK={rank}" and _opt(c, "--node-rank") == str(rank)
            assert _opt(c, "--master-addr") == master
            assert c[1] == "CDMC=1"  # the script's export line ran
        else:
            assert _opt(c, "--rdzv-backend") == "c10d"
            assert _opt(c, "--rdzv-endpoint").split(":")[0] == master
    c = calls[0]
    if fmt == "torchtitan":
        assert Path(_opt(c, "--job.config_file")).read_text() == export_text
    elif fmt == "deepspeed":
        assert Path(_opt(c, "--deepspeed_config")).read_text() == export_text
    elif fmt == "megatron-bridge":
        overrides = [w for w in export_text.splitlines() if w and not w.startswith("#")]
        assert c[c.index("pretrain") + 1:] == overrides
    assert config.read_text() == export_text


def run_slurm(tmp: Path, files: list[tuple[str, str]], env_extra: dict | None = None
              ) -> subprocess.CompletedProcess:
    for name, text in files:
        (tmp / name).write_text(text)
    script = next(n for n, _ in files if n.endswith(".sbatch"))
    assert subprocess.run([BASH, "-n", str(tmp / script)]).returncode == 0
    env = {**_standins(tmp), "SLURM_JOB_NODELIST": "host[0-255]", "SLURM_JOB_ID": "42",
           "SLURM_SUBMIT_DIR": str(tmp), "RECIPE": "llama3_8b", **(env_extra or {})}
    return subprocess.run([BASH, str(tmp / script)], cwd=tmp, env=env, capture_output=True,
                          text=True, timeout=60)


def check_slurm(tmp: Path, fmt: str, plan, model, cluster) -> None:
    files = launch_files("slurm", fmt, plan, model, cluster)
    text = export_plan(fmt, plan, model, cluster)
    config, script = files[0][0], files[1][1]
    directives = dict(re.findall(r"^#SBATCH --([a-z-]+)(?:=(\S+))?$", script, re.M))
    nodes, per_node = int(directives["nodes"]), int(directives["gpus-per-node"])
    assert directives["ntasks-per-node"] == "1" and nodes * per_node == plan.world_size
    assert RFC1123.fullmatch(directives["job-name"]) and len(directives["job-name"]) <= 63
    # sbatch reads #SBATCH lines only before the first command
    first_cmd = next(i for i, l in enumerate(script.splitlines()[1:]) if not l.startswith("#"))
    assert all(not l.startswith("#SBATCH") for l in script.splitlines()[1 + first_cmd:])
    r = run_slurm(tmp, files)
    assert r.returncode == 0, r.stderr
    _check_calls(_calls(tmp), fmt, plan, nodes, per_node, tmp / config, text, "host0")


def check_kubernetes(tmp: Path, fmt: str, plan, model, cluster) -> None:
    (name, stream), = launch_files("kubernetes", fmt, plan, model, cluster)
    assert name.endswith(".k8s.yaml")
    docs = list(yaml.safe_load_all(stream))
    cm = next(d for d in docs if d["kind"] == "ConfigMap")
    job = next(d for d in docs if d["kind"] == "PyTorchJob")
    assert job["apiVersion"] == "kubeflow.org/v1"
    text = export_plan(fmt, plan, model, cluster)
    (config, data), = cm["data"].items()
    assert data == text
    for d in docs:
        assert RFC1123.fullmatch(d["metadata"]["name"]) and len(d["metadata"]["name"]) <= 63
    specs = job["spec"]["pytorchReplicaSpecs"]
    pods = specs["Master"]["replicas"] + specs.get("Worker", {}).get("replicas", 0)
    per_node = int(job["spec"]["nprocPerNode"])
    assert specs["Master"]["replicas"] == 1 and pods * per_node == plan.world_size
    folder = tmp / "mount"
    folder.mkdir(exist_ok=True)
    (folder / config).write_text(data)
    for rank in range(pods):
        role = "Master" if rank == 0 else "Worker"
        pod = specs[role]["template"]["spec"]
        (c,) = pod["containers"]
        assert c["name"] == "pytorch"  # the operator's container name
        assert c["resources"]["limits"]["nvidia.com/gpu"] == per_node
        assert pod["volumes"][0]["configMap"]["name"] == cm["metadata"]["name"]
        cmd = [w.replace(MOUNT, str(folder)) for w in c["command"]]
        env = {**_standins(tmp), "MASTER_ADDR": "master-0", "MASTER_PORT": "23456",
               "PET_NODE_RANK": str(rank), "WORLD_SIZE": str(pods * per_node),
               "RECIPE": "llama3_8b"}
        r = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
    _check_calls(_calls(tmp), fmt, plan, pods, per_node, folder / config, text, "master-0")


@lru_cache(maxsize=None)
def _sample(fmt: str, every: int = 5, gpus: int = 32):
    """Every ``every``-th plan of a ``gpus``-GPU space (nodes of 8) that ``fmt`` exports,
    with its framework's defaults for the fields the space does not search."""
    from planner.costmodel.frameworks import unstated_defaults
    from planner.export.common import format_profile

    model = tiny_model(num_layers=8, global_batch_size=32, seq_len=1024)
    cluster = small_cluster(gpus, domain=8)
    pinned = {"tp": 1, "pp": 1, "cp": 1} if fmt == "deepspeed" else {}
    space = SearchSpace(model, cluster, model_defaults(model), pinned,
                        SpaceOptions(max_microbatch=2, max_virtual_stages=2,
                                     min_cp_tokens=256))
    profile = format_profile(fmt)
    out = []
    for k, pt in enumerate(space):
        if k % every:
            continue
        data = space.plan(*pt).to_dict()
        fixed = unstated_defaults(profile, {f: v for f, v in data.items()
                                            if f in ("tp", "pp", "dp", "cp", "ep",
                                                     "microbatch_size", "global_batch_size",
                                                     "seq_len", "virtual_stages",
                                                     "recompute", "placement", "zero_stage")})
        try:
            p = build_plan(model, cluster, None, list(fixed.items()), [])
            export_plan(fmt, p, model, cluster)
        except InputError:
            continue
        out.append(p)
    return model, cluster, tuple(out)


@pytest.mark.parametrize("fmt", FORMATS)
def test_slurm_and_kubernetes_over_a_space(tmp_path, fmt):
    worlds = set()
    for gpus in (4, 32):  # a partial node, and four nodes
        model, cluster, plans = _sample(fmt, gpus=gpus)
        assert plans, (fmt, gpus)
        for i, p in enumerate(plans[::max(1, len(plans) // 6)]):
            for launcher, check in (("s", check_slurm), ("k", check_kubernetes)):
                d = tmp_path / f"{launcher}{gpus}-{i}"
                d.mkdir()
                check(d, fmt, p, model, cluster)
            worlds.add(p.world_size)
    assert worlds == {4, 32}


GOLDEN = [("llama3-70b.plan.yaml", "megatron", "llama3-70b", "examples/superpod.yaml", None),
          ("llama3-70b.plan.yaml", "megatron-bridge", "llama3-70b", "examples/superpod.yaml",
           None),
          ("llama3-70b.torchtitan.plan.yaml", "torchtitan", "llama3-70b",
           "examples/superpod.yaml", None),
          ("llama3-70b.deepspeed.plan.yaml", "deepspeed", "llama3-70b",
           "examples/superpod.yaml", 512)]


@pytest.mark.parametrize("plan_file, fmt, m, c, gpus", GOLDEN)
def test_the_readme_70b_plans(tmp_path, plan_file, fmt, m, c, gpus):
    model, cluster = load_model(m), load_cluster(str(ROOT / c), gpus)
    plan = build_plan(model, cluster, str(ROOT / "examples" / "launch" / plan_file), [], [])
    (tmp_path / "s").mkdir()
    (tmp_path / "k").mkdir()
    check_slurm(tmp_path / "s", fmt, plan, model, cluster)
    check_kubernetes(tmp_path / "k", fmt, plan, model, cluster)


def test_a_wrong_world_or_a_missing_export_line_is_caught(tmp_path):
    """Negative controls of the checks above: a script whose node count disagrees with the
    plan, and a Megatron script with its export line deleted, fail them."""
    model, cluster, plans = _sample("megatron")
    p = next(x for x in plans if x.world_size >= 16)
    files = launch_files("slurm", "megatron", p, model, cluster)
    nodes = p.world_size // 8
    bad = [(files[0][0], files[0][1]),
           (files[1][0], files[1][1].replace(f"--nodes={nodes} ", f"--nodes={nodes + 1} "))]
    r = run_slurm(tmp_path, bad)
    assert r.returncode == 0
    with pytest.raises(AssertionError):
        _check_calls(_calls(tmp_path), "megatron", p, nodes, 8, tmp_path / bad[0][0],
                     files[0][1], "host0")
    (tmp_path / "log").unlink()
    no_export = files[0][1].replace("export CUDA_DEVICE_MAX_CONNECTIONS=1\n", "")
    r = run_slurm(tmp_path, [(files[0][0], no_export), files[1]])
    with pytest.raises(AssertionError):
        _check_calls(_calls(tmp_path), "megatron", p, nodes, 8, tmp_path / files[0][0],
                     no_export, "host0")


# ---- names ------------------------------------------------------------------------------

def test_k8s_names_are_rfc1123_labels_and_do_not_collide():
    names = ["Llama 3 70B", "llama-3-70b", "a" * 100, "名前", "-x-", "x$(id)", "A_B", "a.b",
             "", "llama3-70b"]
    got = [k8s_name(n) for n in names]
    for g in got:
        assert RFC1123.fullmatch(g) and len(g) <= 63, g
    assert len(set(got)) == len(got)  # "Llama 3 70B" and "llama-3-70b" stay apart
    assert k8s_name("llama3-70b") == "llama3-70b"  # a valid name is kept as it is


INJECTIONS = ["x$(touch {m})", "`touch {m}`", "a; touch {m};", "'; touch {m}; '",
              "\"$(touch {m})\"", "a # b", "x\\", "$HOME ${{PATH}}", "Llama 3 70B (\"big\")",
              "--nodes=999", "a\ntouch {m}\n#", "a\r\u2028touch {m}"]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("template", INJECTIONS)
def test_hostile_model_and_cluster_names(tmp_path, fmt, template):
    marker = tmp_path / "PWNED"
    name = template.format(m=marker)
    model, cluster, plans = _sample(fmt, gpus=16)
    model = model.model_copy(update={"name": name})
    cluster = cluster.model_copy(update={"name": name})
    p = plans[0]
    for launcher, check in (("s", check_slurm), ("k", check_kubernetes)):
        d = tmp_path / launcher
        d.mkdir()
        check(d, fmt, p, model, cluster)
    assert not marker.exists()


# ---- serving ----------------------------------------------------------------------------

def _docs(engine, plan, node_size=8, model="meta-llama/Llama-3.1-70B"):
    return list(yaml.safe_load_all(serve_manifests(engine, model, plan, node_size)))


def test_serving_pools_as_deployments_and_leader_worker_sets():
    one = _docs("vllm", ServePlan(tp=4, replicas=3, concurrency=32))
    (dep,) = one
    assert dep["kind"] == "Deployment" and dep["spec"]["replicas"] == 3
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert "--tensor-parallel-size 4" in c["command"][-1]
    assert dep["spec"]["selector"]["matchLabels"] == dep["spec"]["template"]["metadata"]["labels"]

    big = _docs("sglang", ServePlan(tp=8, pp=2, replicas=2))
    (lws,) = big
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    t = lws["spec"]["leaderWorkerTemplate"]
    assert lws["spec"]["replicas"] == 2 and t["size"] == 2  # 16 GPUs over 2 nodes of 8
    for role in ("leaderTemplate", "workerTemplate"):
        (c,) = t[role]["spec"]["containers"]
        assert c["resources"]["limits"]["nvidia.com/gpu"] == 8
        assert '--node-rank "$LWS_WORKER_INDEX"' in c["command"][-1]
        assert subprocess.run([BASH, "-n", "-c", c["command"][-1]]).returncode == 0

    dis = _docs("vllm", ServePlan(tp=2, replicas=4, prefill=ServePlan(tp=16, replicas=1)))
    pools = {d["metadata"]["labels"]["planner/pool"]: d for d in dis}
    assert set(pools) == {"prefill", "decode"}
    assert pools["prefill"]["kind"] == "LeaderWorkerSet"
    assert pools["prefill"]["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert pools["decode"]["kind"] == "Deployment" and pools["decode"]["spec"]["replicas"] == 4
    gpus = sum(d["spec"]["replicas"] * (d["spec"]["leaderWorkerTemplate"]["size"] * 8
                                        if d["kind"] == "LeaderWorkerSet" else
                                        d["spec"]["template"]["spec"]["containers"][0]
                                        ["resources"]["limits"]["nvidia.com/gpu"])
               for d in dis)
    assert gpus == 4 * 2 + 16


def test_serving_refusals_and_hostile_model_ids(tmp_path):
    with pytest.raises(InputError, match="MPI"):
        serve_manifests("trtllm", "m", ServePlan(tp=16), 8)
    with pytest.raises(InputError, match="whole"):
        serve_manifests("vllm", "m", ServePlan(tp=12), 8)
    marker = tmp_path / "PWNED"
    for t in INJECTIONS:
        ref = t.format(m=marker)
        if any(ch in ref for ch in "\n\r\u2028"):  # refused: no shell word holds them
            with pytest.raises(InputError):
                serve_manifests("vllm", ref, ServePlan(tp=8), 8)
            continue
        for plan in (ServePlan(tp=8), ServePlan(tp=8, pp=2)):
            for d in _docs("vllm", plan, model=ref):
                assert RFC1123.fullmatch(d["metadata"]["name"])
                pods = ([d["spec"]["template"]] if d["kind"] == "Deployment" else
                        [d["spec"]["leaderWorkerTemplate"][r]
                         for r in ("leaderTemplate", "workerTemplate")])
                for pod in pods:
                    cmd = pod["spec"]["containers"][0]["command"][-1]
                    words = subprocess.run(
                        [BASH, "-c", 'set -- ' + cmd.replace("exec ", "", 1).split(" && ")[-1]
                         .removeprefix("exec ") + '; printf "%s\\n" "$@"'],
                        capture_output=True, text=True, cwd=tmp_path)
                    if "vllm" in cmd and "ray start --address" not in cmd:
                        assert ref in words.stdout.splitlines()
    assert not marker.exists()


# ---- golden launcher files (examples/launch/, tools/golden_plans.py) -----------------------

def _golden_tool():
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("golden_plans",
                                                  ROOT / "tools" / "golden_plans.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("golden_plans", mod)
    spec.loader.exec_module(mod)
    return mod


def test_golden_launcher_files_are_current():
    """The README 70B plan's sbatch scripts and PyTorchJobs, from the checked-in plan file,
    are what is checked in (tools/golden_plans.py writes them with the plan)."""
    gp = _golden_tool()
    from planner.specs.plan import Plan

    seen = 0
    for g in gp.GOLDEN:
        if not g.launchers:
            continue
        plan = Plan.model_validate(yaml.safe_load((ROOT / gp.LAUNCH / g.plan_file).read_text()))
        for name, text in g.launcher_files(plan).items():
            assert (ROOT / gp.LAUNCH / name).read_text() == text, f"regenerate {name}"
            seen += 1
    assert seen == 4  # megatron and megatron-bridge, slurm and kubernetes


def test_golden_serving_manifests_are_current():
    gp = _golden_tool()
    for sg in gp.SERVE_GOLDEN:
        text = (ROOT / gp.LAUNCH / sg.manifest_file).read_text()
        assert text == sg.text(), f"regenerate {sg.manifest_file}"
        pools = {d["metadata"]["labels"]["planner/pool"] for d in yaml.safe_load_all(text)}
        assert pools == {"prefill", "decode"}  # the README example is disaggregated


def test_serving_slurm_scripts(tmp_path):
    """One script per pool, a node per replica; run under bash with stand-ins, srun starts
    the engine once per replica with the plan's layout; the hostile model id stays one
    word; a replica larger than a node is refused."""
    from planner.export.launch import serve_launch_files

    marker = tmp_path / "PWNED"
    ref = f"x $(touch {marker}) 'y'"
    plan = ServePlan(tp=2, replicas=4, concurrency=16, prefill=ServePlan(tp=4, pp=2,
                                                                         replicas=3))
    files = serve_launch_files("slurm", "vllm", ref, plan, 8, name="Llama 70B")
    assert [n.removesuffix(".sbatch").rsplit("-", 1)[-1] for n, _ in files] == [
        "prefill", "decode"]
    assert all(RFC1123.fullmatch(n.removesuffix(".sbatch")) for n, _ in files)
    env = _standins(tmp_path)
    (tmp_path / "bin" / "vllm").write_text(STANDINS["torchrun"])
    (tmp_path / "bin" / "vllm").chmod(0o755)
    for (name, text), pool in zip(files, (plan.prefill, plan)):
        assert subprocess.run([BASH, "-n", "-c", text]).returncode == 0
        d = dict(re.findall(r"^#SBATCH --([a-z-]+)=(\S+)$", text, re.M))
        assert int(d["nodes"]) == pool.replicas
        assert int(d["gpus-per-node"]) == pool.tp * pool.pp
        (tmp_path / "log").unlink(missing_ok=True)
        r = subprocess.run([BASH, "-c", text], env=env, cwd=tmp_path, capture_output=True,
                           text=True)
        assert r.returncode == 0, r.stderr
        calls = _calls(tmp_path)
        assert len(calls) == pool.replicas
        assert all(c[2:4] == ["serve", ref] for c in calls)
        assert all(_opt(c, "--tensor-parallel-size") == str(pool.tp) for c in calls)
    assert not marker.exists()
    with pytest.raises(InputError, match="kubernetes"):
        serve_launch_files("slurm", "vllm", "m", ServePlan(tp=16), 8)
    (name, text), = serve_launch_files("kubernetes", "vllm", "m", ServePlan(tp=16), 8)
    assert name == "m.vllm.k8s.yaml" and "LeaderWorkerSet" in text
