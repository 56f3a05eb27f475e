"""What each command is asked, declared once: the requests of ``solve``, ``serve`` and
``procure`` and the output options of their commands.

Each field carries its type, default, range, description and, when the command line
exposes it, its flag (``json_schema_extra``: ``flag``, ``short``, ``metavar``; see
:func:`option`). ``planner.cli`` builds the commands' options from these fields and
``planner.api`` takes the requests (or keywords, from which it builds one), so a value is
checked once, here, and an error names the field, its flag, the value and what was
expected (:meth:`Request.of`).

The CLI spells a choice's underscore as a dash (``gpu-hours``); both spellings are
accepted. Names of objectives and goodput modes are listed here because specs sit below
the cost model that reads them; tests/test_requests.py checks they match its lists.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Union

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from typing_extensions import Self

from planner.errors import InputError
from planner.specs.base import Spec
from planner.specs.cluster import ClusterSpec
from planner.specs.dlrm import DLRMSpec
from planner.specs.framework import FrameworkProfile, load_framework
from planner.specs.model import ModelSpec
from planner.specs.serve import ServeEngine, ServeWorkload, load_engine
from planner.specs.site import InventorySpec
from planner.specs.validate import _short, unknown_key_message, validate

#: ``solve --objective`` (planner.costmodel.objective.NAMES, in its order)
SOLVE_OBJECTIVES = ("time", "tokens", "gpu_hours", "energy", "cost")
#: ``--goodput`` (planner.costmodel.train.goodput.GOODPUT_MODES)
GoodputMode = Literal["on", "async", "off"]
Backend = Literal["cpsat", "milp", "exhaustive"]

MODEL_HELP = "Catalog name (`planner catalog models`), model YAML, or Hugging Face config.json."
CLUSTER_HELP = "Catalog name (`planner catalog clusters`) or cluster YAML."
GPUS_HELP = "Resize the cluster's outermost level."
SEQ_LEN_HELP = "Sequence length; default from the model."
DTYPE_HELP = "bf16, fp16 or fp8; default from the model."
GLOBAL_BATCH_HELP = "Global batch (sequences); default from the model."
HEADROOM_HELP = ("GiB per GPU kept free for the CUDA context and NCCL/cuBLAS workspaces "
                 "(default: the cluster's memory_reserve_gib, 2 GiB); allocator "
                 "fragmentation, 3% of HBM, comes on top.")
FORCE_HELP = "Replace output files that exist (never an input, a link or a device)."
GOODPUT_HELP = ("With --tokens: count failures, checkpoints and restarts (the cluster's "
                "failures_per_gpu_hour, checkpoint_write_GBps_per_gpu, restart_s) in days, "
                "GPU-hours, energy and cost, with the ideal figures beside them: on "
                "(synchronous checkpoints), async (asynchronous checkpoints: Megatron-Core "
                "--async-save, torchtitan checkpoint.async_mode), off (the ideal figures only).")
FRAMEWORK_HELP = ("The training framework the plan is for (planner catalog frameworks): "
                  "only plans it can run are searched. Default: the framework of --export "
                  "FORMAT, else none: every plan the cost model accepts, and the output "
                  "names the frameworks that run the best one.")

#: The runtime profile each workload runs when its request names none, declared once,
#: here; the layers below take the resolved profile explicitly (issue 37 item 2).
#: Training: no framework, i.e. the cost model's own kernels and every plan it accepts.
DEFAULT_FRAMEWORK: str | None = None
#: Serving: TensorRT-LLM, the engine planner serve's fit was made on
#: (hardware_catalog/calibration/trtllm_serving_h100.yaml; docs/serving.md, Calibration).
DEFAULT_ENGINE = "trtllm"


def framework_profile(ref: str | FrameworkProfile | None) -> FrameworkProfile | None:
    """The training framework a request's ``framework`` names, or the workload's default
    (:data:`DEFAULT_FRAMEWORK`) when it names none."""
    ref = DEFAULT_FRAMEWORK if ref is None else ref
    return None if ref is None else load_framework(ref)


def engine_profile(ref: str | ServeEngine | None) -> ServeEngine:
    """The serving engine a request's ``engine`` names, or the workload's default
    (:data:`DEFAULT_ENGINE`) when it names none."""
    return load_engine(DEFAULT_ENGINE if ref is None else ref)


_UNSET: Any = object()


def option(default: Any, description: str, flag: str | None = None, short: str | None = None,
           *, metavar: str | None = None, multiple: bool = False, inverted: bool = False,
           cli_default: Any = _UNSET, cli_scale: float | None = None,
           choices: tuple[str, ...] | None = None, **constraints: Any) -> Any:
    """A request field: ``default``, ``description`` and pydantic ``constraints``, and
    how the command line exposes it: ``flag`` (and ``short``), ``metavar``; ``multiple``:
    a repeatable option; ``inverted``: the flag sets the field to the opposite of its
    default (``--no-presolve``); ``cli_default``: the flag's default where the command
    line's differs from the API's; ``cli_scale``: the flag's value is the field times this
    (``--percentile 99`` for 0.99); ``choices``: the names an untyped field takes."""
    extra = {k: v for k, v in (("flag", flag), ("short", short), ("metavar", metavar),
                               ("multiple", multiple or None), ("inverted", inverted or None),
                               ("cli_scale", cli_scale), ("choices", choices)) if v is not None}
    if cli_default is not _UNSET:
        extra["cli_default"] = cli_default
    return Field(default, description=description, json_schema_extra=extra or None,
                 **constraints)


def reuse(spec: type[Spec], name: str, default: Any = _UNSET, **extra: Any) -> Any:
    """``spec``'s field ``name`` (its range), with a request's ``description`` and flag
    (:func:`option`'s keywords) and, if given, another ``default``."""
    info = option(spec.model_fields[name].default if default is _UNSET else default, **extra)
    merged = FieldInfo.merge_field_infos(spec.model_fields[name], info)
    return merged


def cli(field: FieldInfo) -> dict[str, Any]:
    """The command-line side of a field (:func:`option`'s keywords); empty when none."""
    extra = field.json_schema_extra
    return dict(extra) if isinstance(extra, dict) else {}


def _dashless(value: Any) -> Any:
    """The CLI's ``gpu-hours`` as the field's ``gpu_hours``."""
    return value.replace("-", "_") if isinstance(value, str) else value


def _names(value: Any) -> Any:
    """``"h100,b200"`` as ``["h100", "b200"]``; a tuple as a list."""
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return list(value) if isinstance(value, tuple) else value


class Request(Spec):
    """A command's request: frozen, strict (no ``"8"`` for 8, no ``True`` for 1), every key
    declared."""

    model_config = ConfigDict(strict=True, arbitrary_types_allowed=True)

    def __init__(self, /, **fields: Any) -> None:
        """The request from keywords, or one :class:`InputError` line naming each bad field
        (and its flag), the value and what was expected."""
        try:
            super().__init__(**fields)
        except ValidationError as err:
            raise InputError(request_error(err, type(self), fields)) from None

    @classmethod
    def of(cls, /, **fields: Any) -> Self:
        """``cls(**fields)``."""
        return cls(**fields)


def request_error(err: ValidationError, cls: type[Request], data: dict[str, Any]) -> str:
    """One line: ``SolveRequest: top_k (--top) '2': Input should be a valid integer``;
    a union's alternatives are joined (``... a valid integer or None``); an unknown key
    names the closest declared ones."""
    by_field: dict[str, tuple[Any, list[str]]] = {}
    for e in err.errors():
        loc = e["loc"]
        name = str(loc[0]) if loc else ""
        if e["type"] == "bool_as_number":  # raised by Spec before the fields: key in ctx
            name = e["ctx"]["key"].split("[")[0].split(".")[0]
        if e["type"] == "extra_forbidden":
            by_field[name] = (_UNSET, [unknown_key_message(name, cls)])
            continue
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "missing":  # no value to quote
            by_field[name] = (_UNSET, ["required"])
            continue
        got, msgs = by_field.setdefault(name, (data.get(name, e.get("input")), []))
        if msg not in msgs:
            msgs.append(msg if not msgs else msg.removeprefix("Input should be "))
    parts = []
    for name, (got, msgs) in by_field.items():
        field = cls.model_fields.get(name)
        flag = cli(field).get("flag") if field is not None else None
        if not name:  # a check across fields: its message names them
            parts.append(" or ".join(msgs))
            continue
        label = name + (f" ({flag})" if flag else "")
        shown = "" if got is _UNSET else f" {_short(got)}"
        parts.append(f"{label}{shown}: {' or '.join(msgs)}")
    return f"{cls.__name__}: " + "; ".join(parts)


# ---- training: planner solve ---------------------------------------------------------
#: ``fix``: a mapping of plan fields, FIELD=VALUE strings or (field, value) pairs
Fix = Union[Mapping[str, Any], str, list[Union[str, tuple[str, Any]]], None]


def _check_fix(value: Any) -> Any:
    """``fix``'s shape, named as the API documents it (its values are the plan's)."""
    if value is None or isinstance(value, (Mapping, str)):
        return value
    if not isinstance(value, (list, tuple)):
        raise ValueError("expected a mapping of plan fields, FIELD=VALUE strings or "
                         "(field, value) pairs")
    for item in value:
        if not (isinstance(item, str) or isinstance(item, (tuple, list)) and len(item) == 2
                and isinstance(item[0], str)):
            raise ValueError(f"fix item {_short(item)}: expected a FIELD=VALUE string or a "
                             "(field, value) pair")
    return [i if isinstance(i, str) else tuple(i) for i in value]


class SolveRequest(Request):
    """``planner solve`` / :func:`planner.api.solve`: the best plan(s) for a model on a
    cluster. The four search bounds (``max_microbatch`` ... ``even_pipeline``) are
    declared here and read by :class:`formulations.train.options.SpaceOptions`; ``None``
    (or leaving one out) keeps the ``options`` object's value."""

    model: Union[ModelSpec, DLRMSpec, str] = option(
        ..., MODEL_HELP, "--model", "-m")
    cluster: Union[ClusterSpec, str] = option(..., CLUSTER_HELP, "--cluster", "-c")
    gpus: int | None = option(None, GPUS_HELP, "--gpus", gt=0)
    objective: Any = option("time", "What to minimize.", "--objective",
                            choices=SOLVE_OBJECTIVES)
    backend: Backend = option("cpsat", "cpsat (default), milp, or exhaustive (brute force).",
                              "--backend")
    time_limit_s: float = option(
        60.0, "Seconds for the whole solve, set-up included; when they run out, the best "
        "plan found so far (not proven optimal).", "--time-limit", gt=0)
    top_k: int = option(1, "Return the K best distinct plans.", "--top", gt=0)
    fix: Fix = option(
        None, "Fix a plan field: FIELD=VALUE (repeatable), e.g. --fix tp=8 --fix "
        "recompute=full --fix placement.domain.tp=8.", "--fix", metavar="FIELD=VALUE",
        multiple=True)
    plan: Union[str, Path, Mapping[str, Any], None] = option(
        None, "Partial plan YAML: its fields are fixed.", "--plan", "-p")
    global_batch_size: int | None = option(None, GLOBAL_BATCH_HELP, "--global-batch", gt=0)
    seq_len: int | None = option(None, SEQ_LEN_HELP, "--seq-len", gt=0)
    dtype: str | None = option(None, DTYPE_HELP, "--dtype")
    tokens: float | None = option(
        None, "Token budget: report totals (days, GPU-hours, MWh, USD).", "--tokens", gt=0)
    presolve: bool = option(True, "Skip the bound presolve (slower).", "--no-presolve",
                            inverted=True)
    max_microbatch: int | None = option(16, "Largest microbatch to consider.",
                                        "--max-microbatch", gt=0)
    max_virtual_stages: int | None = option(8, "Most interleaved chunks per GPU.",
                                            "--max-virtual-stages", gt=0)
    allow_idle_gpus: bool | None = option(False, "Plans may leave GPUs idle.",
                                          "--allow-idle-gpus")
    even_pipeline: bool | None = option(False, "Layers must divide pp x virtual stages.",
                                        "--even-pipeline")
    max_iteration_time_s: float | None = option(
        None, "Keep only plans iterating within this many seconds (a deadline).", gt=0)
    memory_headroom_gib: float | None = option(None, HEADROOM_HELP, "--memory-headroom", ge=0)
    framework: Union[str, FrameworkProfile, None] = option(None, FRAMEWORK_HELP, "--framework")
    goodput: GoodputMode = option("on", GOODPUT_HELP, "--goodput")

    @field_validator("objective", mode="before")
    @classmethod
    def check_objective(cls, value: Any) -> Any:
        return _objective(value)

    @field_validator("fix", mode="before")
    @classmethod
    def check_fix(cls, value: Any) -> Any:
        return _check_fix(value)


def _objective(value: Any) -> Any:
    """A named objective (either spelling), or an objective object as is
    (:class:`planner.costmodel.objective.Objective`: its weights)."""
    if hasattr(value, "time_weight_per_s"):
        return value
    name = _dashless(value)
    if not isinstance(name, str) or name not in SOLVE_OBJECTIVES:
        raise ValueError(f"expected one of {', '.join(SOLVE_OBJECTIVES)}")
    return name


#: The search bounds that SpaceOptions reads from SolveRequest (its field: the request's)
SEARCH_BOUNDS = {"max_microbatch": "max_microbatch", "max_virtual_stages": "max_virtual_stages",
                 "allow_idle_gpus": "allow_idle_gpus", "allow_uneven": "even_pipeline"}
#: The options of the transformer search a DLRM solve refuses when given
TRANSFORMER_ONLY = ("plan", "fix", "seq_len", "dtype", "top_k", "objective")


# ---- the output options of the commands ------------------------------------------------
class OutputOptions(Request):
    """What every planning command's output takes."""

    as_json: bool = option(False, "Print one JSON object (also when there is no plan).",
                           "--json")
    force: bool = option(False, FORCE_HELP, "--force")


class SolveOutput(OutputOptions):
    out_path: str | None = option(None, "Write the best plan as a plan YAML.", "--out")
    export_format: str | None = option(
        None, "Also write the best plan as a launch file: megatron, megatron-bridge, "
        "torchtitan or deepspeed (planner export), or 'framework': the --framework's format.",
        "--export", metavar="FORMAT")
    export_path: str | None = option(
        None, "Where --export writes (default: standard output after the tables).",
        "--export-out", metavar="FILE")
    verbose: bool = option(False, "Show the solver log.", "--verbose")
    launcher: Literal["slurm", "kubernetes"] | None = option(
        None, "With --export FORMAT: write the job that launches it instead, into the folder "
        "--export-out names: an sbatch script (slurm) or a ConfigMap and PyTorchJob "
        "(kubernetes) with the file (docs/export.md).", "--launcher")


class PlotOutput(OutputOptions):
    plot_path: str | None = option(None, "Draw the Pareto front(s) to this PNG.", "--plot")


# ---- serving: planner serve ------------------------------------------------------------
ServeObjective = Literal["throughput", "cost", "gpus", "energy"]
SERVE_ENGINE_HELP = ("The serving engine (planner catalog engines): its decode attention, "
                     "host overheads and kernel speed; --launch then prints its command only. "
                     f"Default {DEFAULT_ENGINE} (and --launch prints every engine's).")


def _one_or_many(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else \
        value if isinstance(value, list) else [value]


class ServeRequest(Request):
    """``planner serve`` / :func:`planner.api.serve`: the cheapest (or fastest) serving
    plan for a workload within its SLOs. The workload's fields are
    :class:`planner.specs.serve.ServeWorkload`'s (their ranges)."""

    model: Union[ModelSpec, str] = option(..., MODEL_HELP, "--model", "-m")
    cluster: list[Union[ClusterSpec, str]] = option(
        ..., CLUSTER_HELP + " Repeat for mixed GPU types.", "--cluster", "-c",
        metavar="NAME|PATH", multiple=True, min_length=1)
    isl: int = reuse(ServeWorkload, "isl", description="Input (prompt) tokens per request.",
                     flag="--isl")
    osl: int = reuse(ServeWorkload, "osl", description="Output tokens per request.",
                     flag="--osl")
    ttft_ms: float | None = reuse(ServeWorkload, "ttft_ms", description="Time-to-first-token "
                                  "SLO.", flag="--ttft-ms")
    tpot_ms: float | None = reuse(ServeWorkload, "tpot_ms", description="Time-per-output-token "
                                  "SLO.", flag="--tpot-ms")
    percentile: float = reuse(ServeWorkload, "percentile", description="The SLOs hold at this "
                              "quantile (the flag: in percent).", flag="--percentile",
                              cli_scale=100.0)
    rate_rps: float | None = reuse(ServeWorkload, "rate_rps", description="Offered load, "
                                   "requests/s (Poisson).", flag="--rate")
    gpus: int | None = option(None, "GPU budget of the fleet.", "--gpus", gt=0)
    fix: dict[str, Any] = option(
        {}, "Pin a knob: tp, pp, ep, concurrency, weight_dtype, kv_dtype, prefill_chunk, gpu, "
        "mode.", "--fix", metavar="FIELD=VALUE", multiple=True)
    objective: ServeObjective | None = option(
        None, "throughput (default without --rate), gpus (default with --rate), cost or "
        "energy.", "--objective")
    backend: Backend = option("cpsat", "Integer solver.", "--backend")
    pareto: bool = option(False, "Tokens/s/GPU against tokens/s/user.", "--pareto")
    engine: Union[str, ServeEngine, None] = option(None, SERVE_ENGINE_HELP, "--engine",
                                                   metavar="NAME|PATH")
    time_limit_s: float = option(
        60.0, "Seconds for the whole search, the tables included; when they run out, the "
        "best plan found so far (not proven optimal).", "--time-limit", gt=0, lt=1e7)
    from_vllm: str | None = option(
        None, "Cost the serving plan these vLLM arguments run (one replica of 'vllm serve "
        "MODEL ARGS'; --max-num-seqs and --max-num-batched-tokens required) under the "
        "workload, instead of searching; the arguments the planner does not read are "
        "listed.", "--from-vllm", metavar="ARGS")
    weight_dtypes: str = option(
        "bf16,fp8", "Weight formats to search (comma-separated: bf16, fp8, int4, fp4); fp8 "
        "only where the GPU has it. int4 and fp4 change accuracy more: only when listed.",
        "--weight-dtypes", metavar="LIST", min_length=1)

    @field_validator("cluster", mode="before")
    @classmethod
    def one_or_many(cls, value: Any) -> Any:
        return _one_or_many(value)

    @property
    def workload(self) -> ServeWorkload:
        return ServeWorkload(isl=self.isl, osl=self.osl, rate_rps=self.rate_rps,
                             ttft_ms=self.ttft_ms, tpot_ms=self.tpot_ms,
                             percentile=self.percentile)


class ServeOutput(PlotOutput):
    simulate_requests: int = option(
        0, "Check P50/P99 by simulating N Poisson requests (needs --rate; N <= 1e6, N x --osl "
        "<= 5e7).", "--simulate", metavar="N", ge=0)
    launch: bool = option(False, "Print vLLM, SGLang and TensorRT-LLM launch commands for the "
                          "plan's pools (--engine's only if given).", "--launch")
    model_path: str | None = option(
        None, "The weights the --launch commands load: a Hugging Face id or a checkpoint path "
        "(default: the folder of a config.json given as -m, else the model file's hf_id).",
        "--model-path")
    launcher: Literal["slurm", "kubernetes"] | None = option(
        None, "With --launch: also write the jobs that start the pools, into --launch-out: "
        "an sbatch script per pool (slurm), or a Deployment (a replica within a node) or "
        "LeaderWorkerSet per pool (kubernetes) (docs/export.md).", "--launcher")
    launch_out: str | None = option(None, "The folder --launcher writes into.", "--launch-out",
                                    metavar="FOLDER")


# ---- procurement: planner procure -------------------------------------------------------
ProcureObjective = Literal["cost", "energy", "gpu_hours", "time"]


class ProcureRequest(Request):
    """``planner procure`` / :func:`planner.api.procure`: what to buy or rent to train a
    model on a token budget (or, ``serve``, the cheapest fleet for a serving load)."""

    model: Union[ModelSpec, DLRMSpec, str] = option(
        ..., MODEL_HELP, "--model", "-m")
    tokens: float | None = option(None, "Tokens to train on, e.g. 15e12 (required unless "
                                  "--serve).", "--tokens", gt=0)
    days: float | None = option(None, "Deadline: train within this many days.", "--days",
                                gt=0)
    budget_usd: float | None = option(None, "Budget in USD: the fastest option within it "
                                      "(objective time unless --objective).", "--budget", gt=0)
    objective: ProcureObjective | None = option(
        None, "What to minimize: cost (default), energy, gpu-hours, or time (default with "
        "--budget).", "--objective")
    gpus: list[str] | None = option(None, "Only these GPU types, comma-separated (e.g. "
                                    "h100,b200).", "--gpus")
    clusters: list[Union[str, ClusterSpec]] | None = option(
        None, "Cluster templates to consider instead of the catalog's: catalog names or "
        "cluster YAML files, comma-separated or repeated (e.g. "
        "ramp-a100,examples/ramp-baseline-fat-tree.yaml).", "--cluster", "-c",
        metavar="NAME|PATH", multiple=True)
    max_gpus: int | None = option(None, "Largest cluster to consider (default: the "
                                  "procurement grid's largest).", "--max-gpus", gt=0)
    counts: list[int] | None = option(None, "GPU counts to consider, comma-separated, "
                                      "instead of the powers-of-two grid.", "--counts")
    pricing: Literal["rent", "own"] | None = option(
        None, "rent (USD per GPU-hour) or own (capital over the depreciation period plus "
        "electricity); default from --prices, else rent.", "--pricing")
    prices: Union[str, dict[str, Any], None] = option(
        None, "Pricing YAML overriding the catalog's prices (docs/formats.md).", "--prices")
    pareto: bool = option(False, "Print the Pareto fronts of days against cost and against "
                          "energy.", "--pareto")
    global_batch_size: int | None = option(None, GLOBAL_BATCH_HELP, "--global-batch", gt=0)
    seq_len: int | None = option(None, SEQ_LEN_HELP, "--seq-len", gt=0)
    dtype: str | None = option(None, DTYPE_HELP, "--dtype")
    time_limit_s: float = option(
        60.0, "Seconds per inner solve (one per option answered), not for the whole "
        "command: the total is reported (stats.wall_s).", "--time-limit", gt=0)
    workers: int | None = option(1, "Inner solves at once, in worker processes (default: "
                                 "the CPUs on the command line, 1 in the API; None: the CPUs).",
                                 "--workers",
                                 cli_default=None, gt=0)
    framework: Union[str, FrameworkProfile, None] = option(
        None, "The training framework (planner catalog frameworks): each option's plan is "
        "one it can run (default: any plan the cost model accepts).", "--framework")
    goodput: GoodputMode = option("on", GOODPUT_HELP + " --days limits the effective days.",
                                  "--goodput")
    max_power_mw: float | None = option(
        None, "Site power limit, MW: an option's peak facility draw (PUE x (GPUs at TDP + "
        "nodes + network)) may not exceed it (docs/procure.md).", "--max-power-mw", gt=0,
        le=1e5)
    max_racks: int | None = option(None, "Site rack limit: GPUs / the cluster's "
                                   "gpus_per_rack, rounded up.", "--max-racks", gt=0)
    max_ports: int | None = option(None, "Compute-fabric switch ports available: GPUs x the "
                                   "cluster's scale_out_ports_per_gpu.", "--max-ports", gt=0)
    owned: Union[str, Mapping[str, int], InventorySpec, None] = option(
        None, "GPUs already owned: an inventory YAML mapping catalog cluster names (or "
        "cluster files) to counts, e.g. 'dgx-a100-superpod: 1024'; their capital is sunk, "
        "only power and operating cost are charged (docs/procure.md).", "--owned",
        metavar="FILE")
    serve: bool = option(False, "Serving: cheapest fleet (docs/serving.md).", "--serve")
    rate_rps: float | None = option(None, "--serve: requests/s to serve.", "--rate")
    serve_rate_rps: float | None = option(
        None, "Train, then serve the trained model at this many requests/s (with --isl, "
        "--osl and the SLOs) for --serve-days: the cheapest campaign, on the training fleet "
        "or a separate one, and the serving period where the answer flips "
        "(docs/procure.md).", "--serve-rate", gt=0, le=1e7)
    serve_days: float | None = option(None, "With --serve-rate: days of serving after "
                                      "training.", "--serve-days", gt=0, le=36500)
    isl: int | None = option(None, "--serve, --serve-rate: input tokens per request.",
                             "--isl")
    osl: int | None = option(None, "--serve, --serve-rate: output tokens per request.",
                             "--osl")
    ttft_ms: float | None = option(None, "--serve, --serve-rate: P99 TTFT SLO.", "--ttft-ms")
    tpot_ms: float | None = option(None, "--serve, --serve-rate: P99 TPOT SLO.", "--tpot-ms")
    engine: Union[str, ServeEngine, None] = option(
        None, "--serve, --serve-rate: the serving engine (planner catalog engines; default "
        f"{DEFAULT_ENGINE}).", "--engine", metavar="NAME|PATH")

    @field_validator("objective", mode="before")
    @classmethod
    def dashless(cls, value: Any) -> Any:
        return _dashless(value)

    @field_validator("gpus", mode="before")
    @classmethod
    def gpu_names(cls, value: Any) -> Any:
        return _names(value)

    @field_validator("clusters", mode="before")
    @classmethod
    def cluster_refs(cls, value: Any) -> Any:
        return [value] if isinstance(value, (str, ClusterSpec)) else _names(value)

    @field_validator("counts", mode="before")
    @classmethod
    def gpu_counts(cls, value: Any) -> Any:
        return _counts(value)

    @model_validator(mode="after")
    def _serve_or_train(self) -> "ProcureRequest":
        if (self.serve_rate_rps is None) != (self.serve_days is None):
            raise ValueError("--serve-rate and --serve-days go together (train, then serve)")
        if self.serve_rate_rps is not None:
            if self.serve or self.rate_rps is not None:
                raise ValueError("--serve-rate (train, then serve) or --serve --rate (serve "
                                 "only), not both")
            if self.isl is None or self.osl is None:
                raise ValueError("--serve-rate needs --isl and --osl")
            if self.tokens is None:
                raise ValueError("--tokens: required (the tokens to train on), unless --serve")
        elif self.serve:
            if self.rate_rps is None or self.isl is None or self.osl is None:
                raise ValueError("procure --serve needs --rate, --isl and --osl")
        else:
            if self.engine is not None:
                raise ValueError(f"--engine {_short(self.engine)}: a serving engine, for "
                                 "--serve only (training takes --framework)")
            if self.tokens is None:
                raise ValueError("--tokens: required (the tokens to train on), unless --serve")
        return self

    @property
    def workload(self) -> ServeWorkload:
        """The serving load of ``serve`` or ``serve_rate_rps`` (P99 SLOs), checked as a
        ServeWorkload."""
        rate = self.rate_rps if self.serve_rate_rps is None else self.serve_rate_rps
        return validate(ServeWorkload, dict(isl=self.isl, osl=self.osl, rate_rps=rate,
                                            ttft_ms=self.ttft_ms, tpot_ms=self.tpot_ms,
                                            percentile=0.99), "serve")


def _counts(value: Any) -> Any:
    """``--counts 8,16,1e3`` as GPU counts (a list as is)."""
    if not isinstance(value, str):
        return list(value) if isinstance(value, tuple) else value
    try:
        vals = [int(float(v)) for v in value.split(",") if v.strip()]
    except ValueError:
        raise ValueError("expected comma-separated GPU counts") from None
    if not vals or min(vals) < 1:
        raise ValueError("expected positive GPU counts")
    return vals


class ProcureOutput(PlotOutput):
    as_csv: bool = option(False, "Print CSV, one row per option solved.", "--csv")
    quiet: bool = option(False, "No progress line on stderr (none with --json or --csv "
                         "either).", "--quiet", "-q")

    @model_validator(mode="after")
    def _one_format(self) -> "ProcureOutput":
        if self.as_json and self.as_csv:
            raise ValueError("--json and --csv: choose one")
        return self
