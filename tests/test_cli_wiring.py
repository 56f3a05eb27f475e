"""The options that reach the newer mechanisms from the command line: a launcher for the
solved plan and the served fleet, a mixed-GPU cluster file, a site's limits and the
fleet it owns (each built and tested in its own module; here, that the flag gets there)."""

from __future__ import annotations

import json

import pytest

from test_cli import run


def test_solve_writes_the_job_that_launches_the_plan(capsys, tmp_path):
    job = tmp_path / "job"
    code, _, err = run(capsys, "solve", "-m", "llama3-8b", "-c", "dgx-h100-superpod",
                       "--gpus", "16", "--export", "megatron", "--export-out", str(job),
                       "--launcher", "slurm")
    assert code == 0, err
    names = sorted(p.name for p in job.iterdir())
    assert names == ["llama3-8b.megatron.sbatch", "llama3-8b.megatron.sh"]
    assert "#SBATCH --nodes=2" in (job / "llama3-8b.megatron.sbatch").read_text()


def test_a_launcher_needs_the_export_and_its_folder(capsys):
    code, _, err = run(capsys, "solve", "-m", "llama3-8b", "-c", "dgx-h100-superpod",
                       "--gpus", "16", "--launcher", "kubernetes")
    assert code != 0 and "--launcher kubernetes: needs --export FORMAT and --export-out" in err
    code, _, err = run(capsys, "serve", "-m", "llama3-8b", "-c", "dgx-h100-superpod",
                       "--isl", "1024", "--osl", "128", "--rate", "1", "--launcher", "slurm")
    assert code != 0 and "--launcher and --launch-out go together, with --launch" in err


def test_serve_writes_the_pools_jobs(capsys, tmp_path):
    code, _, err = run(capsys, "serve", "-m", "llama3-8b", "-c", "dgx-h100-superpod",
                       "--isl", "1024", "--osl", "128", "--ttft-ms", "500", "--tpot-ms", "50",
                       "--rate", "5", "--launch", "--launcher", "kubernetes", "--launch-out",
                       str(tmp_path))
    assert code == 0, err
    (manifest,) = tmp_path.iterdir()
    assert manifest.name == "llama3-8b.trtllm.k8s.yaml" and "kind: Deployment" in manifest.read_text()


MIXED = """name: small-mixed
pools:
  - {name: h100, cluster: dgx-h100-superpod, num_gpus: 16}
  - {name: a100, cluster: dgx-a100-superpod, num_gpus: 16}
join: {name: inter-pool, bandwidth_GBps: 25, latency_us: 10, efficiency: 0.9}
"""


@pytest.mark.slow(reason="two single-pool solves and the search across pools")
def test_solve_on_a_mixed_cluster_file(capsys, tmp_path):
    path = tmp_path / "mixed.yaml"
    path.write_text(MIXED)
    code, out, err = run(capsys, "solve", "-m", "llama3-8b", "-c", str(path),
                         "--global-batch", "64", "--json")
    assert code == 0, err
    data = json.loads(out)
    alone = [p["iteration_time_s"] for p in data["single_pool"].values() if p]
    assert data["status"] == "optimal" and data["iteration_time_s"] <= min(alone)
    code, _, err = run(capsys, "solve", "-m", "llama3-8b", "-c", str(path), "--top", "2")
    assert code != 0 and "--top: not taken on a mixed cluster" in err


@pytest.mark.slow(reason="a procurement over two GPU types")
def test_procure_takes_the_owned_fleet_and_the_site(capsys, tmp_path):
    inv = tmp_path / "owned.yaml"
    inv.write_text("dgx-a100-superpod: 1024\n")
    code, out, err = run(capsys, "procure", "-m", "llama3-8b", "--tokens", "15e12", "--days",
                         "90", "--gpus", "a100,h100", "--owned", str(inv), "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["choice"]["owned"] and data["owned"]["chosen"] and data["owned"]["saving"] > 0
    code, _, err = run(capsys, "procure", "-m", "llama3-8b", "--tokens", "15e12", "--days",
                       "90", "--gpus", "a100,h100", "--max-power-mw", "0.01")
    assert code != 0 and "the site has 0.01 MW" in err


def test_serve_costs_a_vllm_command(capsys):
    """--from-vllm costs the command's one replica under the workload, with vLLM's profile,
    and lists what it did not read; a command without its batch limits is refused."""
    args = ("serve", "-m", "llama3-8b", "-c", "dgx-h100-superpod", "--isl", "1024", "--osl",
            "128", "--ttft-ms", "500", "--tpot-ms", "50", "--rate", "5")
    code, out, err = run(capsys, *args, "--json", "--from-vllm",
                         "--tensor-parallel-size 2 --max-num-seqs 64 "
                         "--max-num-batched-tokens 8192 --gpu-memory-utilization 0.9")
    assert code == 0, err
    data = json.loads(out)
    assert data["plan"]["tp"] == 2 and data["plan"]["concurrency"] == 64
    assert data["engine"]["name"] == "vllm"
    assert data["ignored_arguments"] == ["--gpu-memory-utilization", "0.9"]
    assert data["estimate"]["feasible"] and data["estimate"]["ttft_ms"] < 500
    code, _, err = run(capsys, *args, "--from-vllm", "--tensor-parallel-size 2")
    assert code != 0 and "--max-num-seqs" in err


@pytest.mark.slow(reason="a procurement, then a serving search per fleet")
def test_procure_trains_then_serves(capsys):
    """--serve-rate and --serve-days reach the joint procurement: the training choice, the
    serving fleet (the training one here: a short period) and the break-even."""
    code, out, err = run(capsys, "procure", "-m", "llama3-8b", "--tokens", "1e12", "--days",
                         "30", "--gpus", "h100", "--counts", "64", "--serve-rate", "10",
                         "--serve-days", "30", "--isl", "1024", "--osl", "256", "--ttft-ms",
                         "1000", "--tpot-ms", "50", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["choice"] == "reuse" and data["serve_days"] == 30
    assert data["total_usd"] == pytest.approx(data["training_cost_usd"]
                                              + data["reuse"]["cost_usd"])
    code, _, err = run(capsys, "procure", "-m", "llama3-8b", "--tokens", "1e12",
                       "--serve-rate", "10", "--isl", "1024", "--osl", "256")
    assert code != 0 and "--serve-rate and --serve-days go together" in err
