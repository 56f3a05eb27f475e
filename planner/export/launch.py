"""Where users launch: a plan's export as a Slurm batch script or Kubernetes manifests.

Versions followed (names checked in each project's documentation or source):

- Slurm: ``sbatch(1)`` (https://slurm.schedmd.com/sbatch.html): ``#SBATCH`` directives
  before the first command (``--job-name``, ``--nodes``, ``--ntasks-per-node``,
  ``--gpus-per-node``, ``--exclusive``); ``srun`` runs one task per node and sets
  ``SLURM_NODEID``; ``SLURM_JOB_NODELIST`` expands with ``scontrol show hostnames``.
- torchrun's c10d rendezvous (``--rdzv-backend c10d --rdzv-endpoint HOST:PORT
  --rdzv-id ID``, PyTorch ``torch/distributed/run.py``): node ranks are assigned by the
  rendezvous, so every node runs the same command.
- Kubeflow ``PyTorchJob`` (``kubeflow.org/v1``, kubeflow/training-operator v1.8
  ``pkg/apis/kubeflow.org/v1/pytorch_types.go``): ``spec.pytorchReplicaSpecs.{Master,Worker}``
  with ``replicas``, ``restartPolicy``, ``template``; the container must be named
  ``pytorch``; the operator sets ``MASTER_ADDR``/``MASTER_PORT`` in every pod
  (``pkg/controller.v1/pytorch/envvar.go``).
- Serving: ``apps/v1`` ``Deployment`` for a replica on one node; ``LeaderWorkerSet``
  (``leaderworkerset.x-k8s.io/v1``, kubernetes-sigs/lws ``api/leaderworkerset/v1``):
  ``spec.replicas``, ``spec.leaderWorkerTemplate.{size,leaderTemplate,workerTemplate}``;
  the controller sets ``LWS_LEADER_ADDRESS`` and ``LWS_WORKER_INDEX`` in each pod.
- GPUs: the NVIDIA device plugin's extended resource ``nvidia.com/gpu`` in
  ``resources.limits``.

Names from model and cluster files reach these files only as comments
(:func:`planner.export.common.comment_line`), as one shell word quoted by
:func:`shlex.quote`, as YAML strings written by ``yaml.safe_dump``, or as a Kubernetes
name (:func:`k8s_name`: an RFC 1123 label).
"""

from __future__ import annotations

import hashlib
import re
import shlex
from typing import Any

from planner.errors import InputError
from planner.export.common import Target, comment_line, launch_shape
from planner.specs.plan import Plan
from planner.export import SUFFIX, export_plan
from planner.export.serve_launch import launch_commands

LAUNCHERS: tuple[str, ...] = ("slurm", "kubernetes")
SLURM_SOURCE = "sbatch(1), https://slurm.schedmd.com/sbatch.html"
PYTORCHJOB_VERSION = "kubeflow.org/v1 PyTorchJob (kubeflow/training-operator v1.8)"
LWS_VERSION = "leaderworkerset.x-k8s.io/v1 LeaderWorkerSet (kubernetes-sigs/lws)"
#: the port torchrun's c10d rendezvous listens on (torch/distributed/run.py default 29400)
RDZV_PORT = 29400
#: where the export file is mounted in a pod (a ConfigMap volume)
MOUNT = "/etc/planner"
#: the container image: the user's (the planner does not know which image holds the
#: framework); a placeholder that a deployment must replace
IMAGE = "REPLACE-WITH-YOUR-IMAGE"

_LABEL_MAX = 63  # RFC 1123 label (Kubernetes object names of most kinds; DNS label)


def k8s_name(*parts: str, max_chars: int = _LABEL_MAX) -> str:
    """An RFC 1123 label from free text: lowercase alphanumerics and '-', starting and
    ending alphanumeric, at most ``max_chars``; a name that had to change (or was cut)
    ends in a short hash of the original, so that two names do not collide."""
    raw = "-".join(parts)
    slug = re.sub(r"[^a-z0-9]+", "-", raw.lower()).strip("-") or "plan"
    if slug == raw and len(slug) <= max_chars:
        return slug
    digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return (slug[:max_chars - 9].rstrip("-") + "-" + digest).lstrip("-")


def _check_launcher(launcher: str) -> None:
    if launcher not in LAUNCHERS:
        raise InputError(f"--launcher {launcher!r}: expected one of {', '.join(LAUNCHERS)}")


# ---- training ---------------------------------------------------------------------------

def _rdzv(nodes: int, per_node: int, endpoint: str, job_id: str) -> str:
    return (f"--nnodes {nodes} --nproc-per-node {per_node} --rdzv-backend c10d "
            f'--rdzv-endpoint "{endpoint}" --rdzv-id "{job_id}"')


def node_command(fmt: str, nodes: int, per_node: int, endpoint: str, job_id: str,
                 node_rank: str) -> str:
    """The shell command every node runs (``$1``: the export file; further arguments go to
    the training script), with no name in it: names arrive as quoted arguments."""
    rdzv = _rdzv(nodes, per_node, endpoint, job_id)
    if fmt == "megatron":
        # the exported script runs torchrun itself with NODE_RANK and MASTER_ADDR
        host = endpoint.rsplit(":", 1)[0]
        return (f'CONFIG="$1"; shift; NODE_RANK="{node_rank}" MASTER_ADDR="{host}" '
                'exec bash "$CONFIG" "$@"')
    if fmt == "torchtitan":
        return (f'CONFIG="$1"; shift; exec torchrun {rdzv} -m torchtitan.train '
                '--job.config_file "$CONFIG" "$@"')
    if fmt == "deepspeed":
        return (f'CONFIG="$1"; shift; exec torchrun {rdzv} "${{TRAIN_SCRIPT:-train.py}}" '
                '--deepspeed_config "$CONFIG" "$@"')
    if fmt == "megatron-bridge":
        # the overrides file's non-comment lines are KEY=VALUE words (planner/export/bridge.py)
        return (f'CONFIG="$1"; shift; exec torchrun {rdzv} scripts/training/run_recipe.py '
                '--recipe "${RECIPE:?set RECIPE to a Megatron-Bridge recipe}" --mode pretrain '
                '$(grep -v "^#" "$CONFIG") "$@"')
    raise InputError(f"--format {fmt!r}: no launcher for it")


def export_name(fmt: str, target: Target) -> str:
    """The export file's name: the model's name made safe, and the format's suffix."""
    return f"{k8s_name(target.model.name, max_chars=40)}.{SUFFIX[fmt]}"


def slurm_script(fmt: str, plan: Plan, target: Target, config_file: str, header: list[str]
                 ) -> str:
    """An ``sbatch`` script: one task per node, the plan's GPUs per node, torchrun's
    rendezvous on the first node of the allocation, the export file next to the script."""
    nodes, per_node = launch_shape(plan, target.cluster, fmt)
    job = k8s_name(target.model.name, fmt)
    lines = ["#!/bin/bash",
             f"#SBATCH --job-name={job}",
             f"#SBATCH --nodes={nodes}",
             "#SBATCH --ntasks-per-node=1",
             f"#SBATCH --gpus-per-node={per_node}",
             "#SBATCH --exclusive"]
    lines += [comment_line(h) for h in header]
    lines += [f"# Slurm options: {SLURM_SOURCE}; submit from the folder that holds "
              f"{config_file}",
              f"# world size {plan.world_size} = {nodes} nodes x {per_node} GPUs",
              "set -euo pipefail",
              f'CONFIG="${{SLURM_SUBMIT_DIR:-.}}"/{shlex.quote(config_file)}',
              # the first host; sed reads the whole list (head would close the pipe early,
              # and pipefail turns scontrol's SIGPIPE into a failed script)
              'MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)"',
              "export MASTER_ADDR",
              f"export MASTER_PORT={RDZV_PORT}"]
    inner = node_command(fmt, nodes, per_node, "$MASTER_ADDR:$MASTER_PORT", "$SLURM_JOB_ID",
                         "$SLURM_NODEID")
    lines.append(f"srun --nodes={nodes} --ntasks-per-node=1 --kill-on-bad-exit=1 "
                 f"bash -c {shlex.quote(inner)} bash \"$CONFIG\" \"$@\"")
    return "\n".join(lines) + "\n"


def _configmap(name: str, filename: str, text: str, header: list[str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "annotations": {"planner/plan": " | ".join(header)}},
            "data": {filename: text}}


def _gpu_container(name: str, command: list[str], gpus: int, mounts: bool,
                   env: list[dict[str, str]] | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": IMAGE, "command": command,
                         "resources": {"limits": {"nvidia.com/gpu": gpus}}}
    if env:
        c["env"] = env
    if mounts:
        c["volumeMounts"] = [{"name": "plan", "mountPath": MOUNT, "readOnly": True}]
    return c


def pytorchjob(fmt: str, plan: Plan, target: Target, config_file: str, export_text: str,
               header: list[str]) -> list[dict[str, Any]]:
    """A ConfigMap holding the export file and a PyTorchJob: one Master and nodes - 1
    Workers, one pod per node with the plan's GPUs per node."""
    nodes, per_node = launch_shape(plan, target.cluster, fmt)
    name = k8s_name(target.model.name, fmt)
    cm = k8s_name(name, "plan")
    inner = node_command(fmt, nodes, per_node, "$MASTER_ADDR:$MASTER_PORT", name,
                         "$PET_NODE_RANK")
    command = ["bash", "-c", inner, "bash", f"{MOUNT}/{config_file}"]

    def replica(count: int) -> dict[str, Any]:
        return {"replicas": count, "restartPolicy": "Never", "template": {"spec": {
            # the training operator finds the container by this name (pytorch_types.go)
            "containers": [_gpu_container("pytorch", list(command), per_node, True)],
            "volumes": [{"name": "plan", "configMap": {"name": cm}}]}}}

    specs = {"Master": replica(1)}
    if nodes > 1:
        specs["Worker"] = replica(nodes - 1)
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "planner"}},
           # nprocPerNode (a string): the operator sets WORLD_SIZE = pods x nprocPerNode
           # and PET_NODE_RANK per pod (pkg/controller.v1/pytorch/envvar.go)
           "spec": {"nprocPerNode": str(per_node), "pytorchReplicaSpecs": specs}}
    return [_configmap(cm, config_file, export_text, header), job]


def yaml_documents(docs: list[dict[str, Any]], header: list[str]) -> str:
    """Manifests as one YAML stream, headed by comments."""
    import yaml

    head = "\n".join(comment_line(h) for h in header)
    body = yaml.safe_dump_all(docs, sort_keys=False, allow_unicode=False, width=1 << 16)
    return head + "\n" + body


def launch_files(launcher: str, fmt: str, plan: Plan, model: Any, cluster: Any
                 ) -> list[tuple[str, str]]:
    """(file name, text) of every file a training plan's launch needs with ``launcher``
    (``slurm``: the export file and an sbatch script; ``kubernetes``: one YAML stream with
    a ConfigMap of the export file and a PyTorchJob). Refusals as :func:`export_plan`."""
    _check_launcher(launcher)
    text = export_plan(fmt, plan, model, cluster)
    target = Target(model, cluster)
    config = export_name(fmt, target)
    nodes, per_node = launch_shape(plan, cluster, fmt)
    header = [f"planner export --format {fmt} --launcher {launcher}: {model.name} on "
              f"{cluster.name}: {nodes} nodes x {per_node} GPUs = world size "
              f"{plan.world_size}"]
    stem = k8s_name(model.name, max_chars=40)
    if launcher == "slurm":
        return [(config, text),
                (f"{stem}.{fmt}.sbatch", slurm_script(fmt, plan, target, config, header))]
    header.append(f"follows {PYTORCHJOB_VERSION}; ConfigMap and GPUs: Kubernetes core/v1")
    docs = pytorchjob(fmt, plan, target, config, text, header)
    return [(f"{stem}.{fmt}.k8s.yaml", yaml_documents(docs, header))]


# ---- serving ----------------------------------------------------------------------------

#: engines whose multi-node replica this module can start (vLLM: a Ray cluster, the
#: leader runs ``vllm serve``, vllm docs "multi-node serving" / examples
#: online_serving/multi-node-serving.sh; SGLang: ``--nnodes``, ``--node-rank``,
#: ``--dist-init-addr``, python/sglang/srt/server_args.py)
MULTINODE = ("vllm", "sglang")
#: the Ray head port vLLM's multi-node example uses (ray start --head --port 6379)
RAY_PORT = 6379
#: the torch.distributed init port given to SGLang's --dist-init-addr (any free port)
SGLANG_DIST_PORT = 20000


def serve_manifests(engine: str, model_ref: str, plan: Any, node_size: int | dict[str, int],
                    name: str | None = None) -> str:
    """Kubernetes manifests of a serving plan for ``engine`` (vllm, sglang or trtllm):
    per pool (one, or prefill and decode when disaggregated) a Deployment whose pods run
    one replica each when a replica fits on a node, else a LeaderWorkerSet of
    ``gpus_per_replica / node_size`` pods per replica. ``node_size``: GPUs per node (or per
    GPU name, for a plan over several GPU types). ``model_ref``: the engine's model path or
    Hugging Face id, passed as one quoted word; ``name`` (default: ``model_ref``) names the
    objects."""
    if engine not in ("vllm", "sglang", "trtllm"):
        raise InputError(f"engine {engine!r}: expected vllm, sglang or trtllm")
    pools = launch_commands(model_ref, plan)[engine]
    base = k8s_name(name or model_ref, max_chars=40)
    docs: list[dict[str, Any]] = []
    header = [f"planner serve --launch --launcher kubernetes: {engine}, model {model_ref}",
              f"follows apps/v1 Deployment and {LWS_VERSION}; GPUs: nvidia.com/gpu"]
    for pool in pools:
        per_node = _node_size(node_size, pool["gpu"])
        gpus = pool["gpus_per_replica"]
        label = k8s_name(base, engine, pool["pool"])
        meta = {"name": label, "labels": {"app.kubernetes.io/name": label,
                                          "planner/pool": pool["pool"]}}
        header.append(f"pool {pool['pool']}: {pool['replicas']} replica(s) x {gpus} GPUs"
                      + "".join(f"; note: {n}" for n in pool["notes"]))
        if gpus <= per_node:
            pod = {"metadata": {"labels": {"app.kubernetes.io/name": label}},
                   "spec": {"containers": [_gpu_container(
                       engine, ["bash", "-c", "exec " + pool["command"]], gpus, False)]}}
            docs.append({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
                         "spec": {"replicas": pool["replicas"],
                                  "selector": {"matchLabels": {"app.kubernetes.io/name": label}},
                                  "template": pod}})
            continue
        if gpus % per_node:
            raise InputError(f"pool {pool['pool']}: gpus_per_replica={gpus} does not fill whole "
                             f"{per_node}-GPU nodes")
        if engine not in MULTINODE:
            raise InputError(f"pool {pool['pool']}: a {gpus}-GPU replica spans "
                             f"{gpus // per_node} nodes; the planner writes multi-node "
                             f"replicas for {', '.join(MULTINODE)} only ({engine} starts them "
                             "with MPI)")
        size = gpus // per_node
        leader, worker = _multinode(engine, pool["command"], size)
        docs.append({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                     "metadata": meta,
                     "spec": {"replicas": pool["replicas"], "leaderWorkerTemplate": {
                         "size": size,
                         "leaderTemplate": {"spec": {"containers": [_gpu_container(
                             engine, ["bash", "-c", leader], per_node, False)]}},
                         "workerTemplate": {"spec": {"containers": [_gpu_container(
                             engine, ["bash", "-c", worker], per_node, False)]}}}}})
    return yaml_documents(docs, header)


def _node_size(node_size: int | dict[str, int], gpu: str | None) -> int:
    """GPUs per node of a pool's GPU type (the smallest node when the type is not listed)."""
    if isinstance(node_size, dict):
        return node_size.get(gpu or "", min(node_size.values()))
    return node_size


def _multinode(engine: str, command: str, size: int) -> tuple[str, str]:
    """(leader, worker) shell commands of a replica over ``size`` pods."""
    if engine == "vllm":
        # Ray: the leader is the head and runs the server; workers join and block
        return (f"ray start --head --port={RAY_PORT} && exec {command} "
                "--distributed-executor-backend ray",
                f'exec ray start --address="$LWS_LEADER_ADDRESS:{RAY_PORT}" --block')
    rank = (f'--nnodes {size} --node-rank "$LWS_WORKER_INDEX" '
            f'--dist-init-addr "$LWS_LEADER_ADDRESS:{SGLANG_DIST_PORT}"')
    return f"exec {command} {rank}", f"exec {command} {rank}"


def serve_slurm_scripts(engine: str, model_ref: str, plan: Any,
                        node_size: int | dict[str, int], name: str | None = None
                        ) -> list[tuple[str, str]]:
    """One ``sbatch`` script per pool: a node per replica (``--gpus-per-node`` = the
    replica's GPUs), ``srun`` starting the engine once on each. A replica larger than a
    node is refused here (its ranks need a rendezvous per replica: use the Kubernetes
    LeaderWorkerSet)."""
    if engine not in ("vllm", "sglang", "trtllm"):
        raise InputError(f"engine {engine!r}: expected vllm, sglang or trtllm")
    base = k8s_name(name or model_ref, max_chars=40)
    out = []
    for pool in launch_commands(model_ref, plan)[engine]:
        gpus, replicas = pool["gpus_per_replica"], pool["replicas"]
        per_node = _node_size(node_size, pool["gpu"])
        if gpus > per_node:
            raise InputError(f"pool {pool['pool']}: a {gpus}-GPU replica spans nodes of "
                             f"{per_node}; the Slurm launcher starts one replica per node "
                             "(use --launcher kubernetes: a LeaderWorkerSet per pool)")
        job = k8s_name(base, engine, pool["pool"])
        lines = ["#!/bin/bash", f"#SBATCH --job-name={job}", f"#SBATCH --nodes={replicas}",
                 "#SBATCH --ntasks-per-node=1", f"#SBATCH --gpus-per-node={gpus}",
                 comment_line(f"planner serve --launch --launcher slurm: {engine}, model "
                              f"{model_ref}, pool {pool['pool']}: {replicas} replica(s) x "
                              f"{gpus} GPUs, one per node"),
                 f"# Slurm options: {SLURM_SOURCE}"]
        lines += [comment_line("note: " + n) for n in pool["notes"]]
        lines += ["set -euo pipefail",
                  f"srun --nodes={replicas} --ntasks-per-node=1 --kill-on-bad-exit=1 "
                  f"{pool['command']}"]
        out.append((f"{job}.sbatch", "\n".join(lines) + "\n"))
    return out


def serve_launch_files(launcher: str, engine: str, model_ref: str, plan: Any,
                       node_size: int | dict[str, int], name: str | None = None
                       ) -> list[tuple[str, str]]:
    """(file name, text) of a serving plan's launch with ``launcher``: Slurm, a script per
    pool (:func:`serve_slurm_scripts`); Kubernetes, one YAML stream (:func:`serve_manifests`).
    For ``planner serve --launch --launcher``."""
    _check_launcher(launcher)
    if launcher == "slurm":
        return serve_slurm_scripts(engine, model_ref, plan, node_size, name)
    base = k8s_name(name or model_ref, max_chars=40)
    return [(f"{base}.{engine}.k8s.yaml",
             serve_manifests(engine, model_ref, plan, node_size, name))]
