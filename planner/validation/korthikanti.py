"""Predicted against published: the calibration set of Korthikanti et al. 2022.

Source data: ``hardware_catalog/calibration/korthikanti2022.yaml`` (copied from the
project's shared calibration set; V. Korthikanti et al., "Reducing Activation
Recomputation in Large Transformer Models", MLSys 2023, arXiv 2205.05198, Tables 3 and 5,
Figures 1 and 7). Runs on Selene (DGX A100 80GB), fp16, unfused softmax attention, with
the 2022 Megatron-LM schedule (pipeline sends not overlapped).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from importlib import resources

import yaml

from planner.costmodel.constants import GiB
from planner.costmodel.train.evaluator import evaluate, prepare
from planner.costmodel.layer import dense_layer_params
from planner.costmodel.train.stage import state_bytes
from planner.costmodel.runtime import apply_profile
from planner.specs.framework import load_framework
from planner.specs.loaders import load_cluster, load_model
from planner.specs.plan import Plan

MODES = {
    # Table 5 "full": full recomputation, TP all-reduce, no sequence parallelism.
    "full": dict(sequence_parallel=False, tp_comm="allreduce", recompute="full"),
    # Table 5 "seq_sel": sequence parallelism + selective recomputation.
    "seq_sel": dict(sequence_parallel=True, tp_comm="rs_ag", recompute="selective"),
}


@dataclass
class TimeRow:
    model: str
    mode: str
    predicted_s: float
    published_s: float

    @property
    def error(self) -> float:
        return (self.predicted_s - self.published_s) / self.published_s


@dataclass
class MemoryRow:
    model: str
    quantity: str
    predicted_gib: float
    published_gib: float

    @property
    def error(self) -> float:
        return (self.predicted_gib - self.published_gib) / self.published_gib


@dataclass
class ValidationReport:
    source: str
    time_rows: list[TimeRow]
    memory_rows: list[MemoryRow]

    @property
    def mape(self) -> float:
        return statistics.mean(abs(r.error) for r in self.time_rows)

    @property
    def max_error(self) -> float:
        return max(abs(r.error) for r in self.time_rows)

    @property
    def memory_max_error(self) -> float:
        return max(abs(r.error) for r in self.memory_rows)

    def to_json(self) -> dict:
        return {
            "source": self.source,
            "iteration_time": [dict(asdict(r), error=r.error) for r in self.time_rows],
            "mape": self.mape,
            "max_abs_error": self.max_error,
            "memory": [dict(asdict(r), error=r.error) for r in self.memory_rows],
            "memory_max_abs_error": self.memory_max_error,
        }


def calibration_data() -> dict:
    path = resources.files("hardware_catalog") / "calibration" / "korthikanti2022.yaml"
    return yaml.safe_load(path.read_text())


def calibration_plan(run: dict, seq_len: int, mode: str | None) -> Plan:
    extra = MODES[mode] if mode else {}
    return Plan(
        tp=run["tp"], pp=run["pp"], dp=run["dp"], microbatch_size=run["microbatch"],
        global_batch_size=run["global_batch"], seq_len=seq_len,
        virtual_stages=run["virtual_stages"], attention="standard", dtype="fp16",
        zero_stage=0, overlap_p2p_comm=False, overlap_tp_comm=False, **extra,
    )


#: The runs are Megatron-LM's own: costed with its profile (its kernels and its fit on the A100).
FRAMEWORK = "megatron-core"


def run_validation(cluster_name: str = "dgx-a100-superpod") -> ValidationReport:
    data = calibration_data()
    base = apply_profile(load_cluster(cluster_name), load_framework(FRAMEWORK))
    time_rows: list[TimeRow] = []
    memory_rows: list[MemoryRow] = []
    for name, run in data["runs"].items():
        model = load_model(name)
        cluster = base.resized(run["gpus"])
        seq = data["models"][name]["seq_len"]
        for mode in MODES:
            est = evaluate(model, cluster, calibration_plan(run, seq, mode))
            assert est.iteration_time_s is not None
            time_rows.append(TimeRow(name, mode, est.iteration_time_s,
                                     data["iteration_time_s"][name][mode]))
        pub = data["memory_gib"][name]
        # Figure 1 counts the transformer layers of the first stage (no embedding).
        layers = model.num_layers // run["pp"]
        states = state_bytes(layers * dense_layer_params(model, run["tp"]), 0, run["dp"], "fp16")
        memory_rows.append(MemoryRow(name, "params_and_optimizer",
                                     (states.weights + states.gradients + states.optimizer) / GiB,
                                     pub["params_and_optimizer"]))
        for quantity, mode in (("activations_none", None), ("activations_seq_sel", "seq_sel")):
            prep = prepare(model, cluster, calibration_plan(run, seq, mode))
            first = next(r for r in prep.results if r.stage.rank == 0)
            memory_rows.append(MemoryRow(name, quantity, first.memory["activations"] / GiB,
                                         pub[quantity]))
    return ValidationReport(data["source"], time_rows, memory_rows)
