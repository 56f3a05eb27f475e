"""Load specs from catalog names, YAML files and Hugging Face ``config.json``.

Every failure becomes an :class:`InputError` whose message names the file, the field,
the value and what was expected (or the closest catalog names).
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path
from typing import Any, Callable, TypeVar

import yaml

import planner.catalog as catalog
from planner.errors import InputError
from planner.fileio import MAX_SPEC_BYTES, read_user_file
from planner.specs.cluster import ClusterSpec
from planner.specs.dlrm import DLRMSpec, is_dlrm
from planner.specs.gpu import GPUSpec
from planner.specs.model import ModelSpec
from planner.specs.names import check_name
from planner.specs.plan import Plan
from planner.specs.validate import _short, validate
from planner.specs.hf import is_hf_config, model_from_hf

#: Limits on spec files: no model, cluster, plan or pricing file comes near them.
MAX_FILE_BYTES = MAX_SPEC_BYTES
MAX_DEPTH = 64
MAX_ALIASES = 64
#: libyaml's parser where PyYAML was built with it: reading a 0.75 MB spec took 8.8 s with
#: the pure-Python one, 1.2 s with libyaml; the constructor, and so the checks below, are
#: the same.
_SafeLoader: type[yaml.SafeLoader] = (yaml.CSafeLoader  # type: ignore[assignment]
                                      if getattr(yaml, "__with_libyaml__", False)
                                      else yaml.SafeLoader)


def _check_yaml_shape(path: Path, text: str) -> None:
    """Reject, before building anything, YAML nested deeper than ``MAX_DEPTH`` or with
    more than ``MAX_ALIASES`` aliases (a "billion laughs" document expands exponentially)."""
    try:
        _walk_events(path, text)
    except yaml.YAMLError as err:  # libyaml refuses 1,000 levels itself, before our count
        if "nesting depth" in str(getattr(err, "problem", "")):
            raise InputError(f"{path}: nested more than {MAX_DEPTH} levels deep") from None
        raise


def _walk_events(path: Path, text: str) -> None:
    depth = aliases = 0
    for event in yaml.parse(text, Loader=_SafeLoader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise InputError(f"{path}: nested more than {MAX_DEPTH} levels deep")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
        elif isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_ALIASES:
                raise InputError(f"{path}: more than {MAX_ALIASES} YAML aliases; spec files "
                                 "need none")


class _UniqueKeyLoader(_SafeLoader):  # type: ignore[misc, valid-type]
    """PyYAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the
    last silently: a spec's second ``tp:`` would override the first unseen)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            # merge keys (<<) are expanded by the base class; explicit keys override them
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {seen[key]})",
                    key_node.start_mark)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


class _DuplicateKey(ValueError):
    pass


def _unique_json_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(f"duplicate key {key!r} in one object")
        out[key] = value
    return out


def read_structured(path: Path) -> dict[str, Any]:
    """Read a YAML or JSON file into a mapping, with clear errors."""
    text = read_user_file(path, "", MAX_FILE_BYTES)
    try:
        if path.suffix != ".json":
            _check_yaml_shape(path, text)
        data = (json.loads(text, object_pairs_hook=_unique_json_keys) if path.suffix == ".json"
                else yaml.load(text, Loader=_UniqueKeyLoader))  # noqa: S506 (a SafeLoader)
    except RecursionError:
        raise InputError(f"{path}: nested too deeply (at most {MAX_DEPTH} levels)") from None
    except ValueError as err:  # e.g. an integer of more than 4,300 digits
        if isinstance(err, _DuplicateKey):
            raise InputError(f"{path}: malformed JSON: {err}") from None
        if isinstance(err, json.JSONDecodeError):
            raise InputError(f"{path}: malformed JSON at line {err.lineno}: {err.msg}") from None
        raise InputError(f"{path}: unreadable value: {str(err)[:200]}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err)
        raise InputError(f"{path}: malformed YAML{where}: {problem}") from None
    except json.JSONDecodeError as err:
        raise InputError(f"{path}: malformed JSON at line {err.lineno}: {err.msg}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping of fields at the top level")
    return data


T = TypeVar("T")
#: Catalog entries already built in this process, by kind, file and the file's state:
#: a solve looked up the same GPU, cluster and model files about 170 times (the validation
#: corpus and the calibration each load them), parsing and validating each anew.
_CATALOG_SPECS: dict[tuple[str, str, int, int], Any] = {}


def _from_catalog(kind: str, path: Path, label: str,
                  build: Callable[[dict[str, Any], str], T]) -> T:
    """The spec ``build`` makes of catalog file ``path``, parsed and validated once per
    process (again only when the file changes); specs are frozen, so one object serves every
    caller. ``label`` names the entry in errors."""
    st = path.stat()
    key = (kind, str(path), st.st_mtime_ns, st.st_size)
    spec = _CATALOG_SPECS.get(key)
    if spec is None:
        spec = _CATALOG_SPECS[key] = build(read_structured(path), label)
    return spec


def load_catalog_profile(cls: type, folder: str, ref: str, option: str, noun: str,
                         a_file: str) -> Any:
    """A profile of class ``cls`` (a framework, a serving engine): a YAML/JSON file when
    ``ref`` looks like a path, else the catalog entry ``folder/<ref>`` by name or alias;
    an unknown name is an InputError naming ``option``, the closest names and the choices
    (``noun``: what it is, e.g. "serving engine"; ``a_file``: e.g. "an engine YAML file")."""
    if ref.endswith((".yaml", ".yml", ".json")) or "/" in ref:
        return validate(cls, read_structured(Path(ref)), ref)
    path = catalog.find(folder, ref)
    if path is None:
        near = catalog.closest(folder, ref)
        hint = f"; closest: {', '.join(near)}" if near else ""
        raise InputError(f"{option} '{ref}': unknown {noun}{hint}; expected one of "
                         f"{', '.join(catalog.names(folder))} or {a_file}")
    return _from_catalog(f"{folder}:{cls.__name__}", path, f"catalog {noun.split()[-1]} '{ref}'",
                         lambda data, label: validate(cls, data, label))


def reference(ref: Any, what: str) -> str:
    """``ref`` as a catalog name or path string; an :class:`InputError` naming ``what``
    when it is neither a string nor a path (a number, None, a list ...)."""
    if isinstance(ref, os.PathLike):
        ref = os.fspath(ref)
    if not isinstance(ref, str):
        raise InputError(f"{what} {_short(ref)}: expected a catalog name or a file path")
    if not ref.strip():
        raise InputError(f"{what} {_short(ref)}: empty; expected a catalog name or a file path")
    return check_name(ref, what, max_chars=None)  # printed in commands (serve --launch)


def _looks_like_path(ref: str) -> bool:
    return ref.endswith((".yaml", ".yml", ".json")) or "/" in ref or Path(ref).exists()


def _unknown(kind: catalog.Kind, what: str, ref: str) -> InputError:
    near = catalog.closest(kind, ref)
    hint = f"; closest: {', '.join(near)}" if near else ""
    return InputError(
        f"unknown {what} '{ref}'{hint}. `planner catalog {kind}` lists them, or pass a file path"
    )


# ---- GPUs ------------------------------------------------------------------------
def load_gpu(ref: str | dict[str, Any]) -> GPUSpec:
    if isinstance(ref, dict):
        return validate(GPUSpec, ref, "inline gpu")
    ref = reference(ref, "gpu")
    if _looks_like_path(ref):
        return validate(GPUSpec, read_structured(Path(ref)), ref)
    path = catalog.find("gpus", ref)
    if path is None:
        raise _unknown("gpus", "GPU", ref)
    return _from_catalog("gpus", path, f"catalog gpu '{ref}'",
                         lambda data, label: validate(GPUSpec, data, label))


# ---- models ----------------------------------------------------------------------
def load_model(ref: str) -> ModelSpec | DLRMSpec:
    """A catalog name, a model YAML file, or a Hugging Face ``config.json``; a file with
    ``kind: dlrm`` is a recommendation model (:class:`DLRMSpec`)."""
    ref = reference(ref, "model")
    if _looks_like_path(ref):
        path = Path(ref)
        data = read_structured(path)

        if is_hf_config(data):
            return model_from_hf(data, source=str(path))
        return validate(DLRMSpec if is_dlrm(data) else ModelSpec, data, ref)
    path = catalog.find("models", ref)
    if path is None:
        raise _unknown("models", "model", ref)
    return _from_catalog("models", path, f"catalog model '{ref}'", _model_from_data)


def _model_from_data(data: dict[str, Any], label: str) -> ModelSpec | DLRMSpec:
    return validate(DLRMSpec if is_dlrm(data) else ModelSpec, data, label)


# ---- clusters --------------------------------------------------------------------
def cluster_from_dict(data: dict[str, Any], source: str) -> ClusterSpec:
    if isinstance(data, dict) and "pools" in data:  # planner/specs/mixed.py is_mixed
        raise InputError(f"{source}: a mixed cluster (pools joined by a network level); "
                         "this command takes a single-type cluster: plan training on it with "
                         "planner.api.solve_mixed (docs/mixed.md)")
    data = dict(data)
    gpu = data.get("gpu")
    if gpu is None:
        raise InputError(f"{source}: gpu: field required (a catalog GPU name or an inline mapping)")
    if isinstance(gpu, str):
        data["gpu"] = load_gpu(gpu)
    elif isinstance(gpu, dict):
        data["gpu"] = load_gpu(gpu)
    else:
        raise InputError(f"{source}: gpu: expected a catalog name or a mapping, got "
                         f"{_short(gpu)}")
    return validate(ClusterSpec, data, source)


def load_cluster(ref: str, gpus: int | None = None) -> ClusterSpec:
    """A catalog name or a cluster YAML file; ``gpus`` resizes the outermost level."""
    ref = reference(ref, "cluster")
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1):
        raise InputError(f"gpus {_short(gpus)}: expected a positive integer")
    if _looks_like_path(ref):
        cluster = cluster_from_dict(read_structured(Path(ref)), ref)
    else:
        path = catalog.find("clusters", ref)
        if path is None:
            raise _unknown("clusters", "cluster", ref)
        cluster = _from_catalog("clusters", path, f"catalog cluster '{ref}'", cluster_from_dict)
    if gpus is not None and gpus != cluster.num_gpus:
        try:
            cluster = cluster.resized(gpus)
        except ValueError as err:
            raise InputError(str(err)) from None
    return cluster


# ---- plans -----------------------------------------------------------------------
def plan_from_dict(data: dict[str, Any], source: str) -> Plan:
    return validate(Plan, data, source)


def unknown_plan_keys(data: dict[str, Any]) -> list[str]:
    """Keys of a plan mapping that are not plan fields, with suggestions."""
    out = []
    for key in Plan.unknown_keys(data):
        near = field_suggestion(key, list(Plan.model_fields))
        out.append(f"{key} (did you mean {near[0]}?)" if near else key)
    return out


def load_plan_dict(ref: str) -> dict[str, Any]:
    return read_structured(Path(reference(ref, "plan")))


def parse_override(text: str) -> tuple[str, Any]:
    """Parse ``field=value`` (value in YAML syntax) for --set/--fix options."""
    if "=" not in text:
        raise InputError(f"expected FIELD=VALUE, got '{text}'")
    key, raw = text.split("=", 1)
    key = plan_field(key.strip())
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    return key, value


#: The frameworks' spellings of plan fields, pointed at in errors (never accepted: a plan
#: has one name per field). Megatron-LM arguments.py (core_v0.15.3: --tensor-model-parallel-
#: size, --micro-batch-size, ...); NeMo / Megatron-Bridge configs (tensor_model_parallel_size,
#: virtual_pipeline_model_parallel_size, ...); torchtitan JobConfig (parallelism.
#: tensor_parallel_degree, data_parallel_shard_degree, training.local_batch_size, ...);
#: DeepSpeed config (train_micro_batch_size_per_gpu, train_batch_size, zero_optimization.
#: stage); vLLM engine arguments (tensor_parallel_size, pipeline_parallel_size); and the
#: words people write (tensor_parallel, micro_batch_size).
FRAMEWORK_SPELLINGS: dict[str, str] = {
    **dict.fromkeys(("tensor_parallel", "tensor_model_parallel_size", "tensor_parallel_size",
                     "tensor_parallel_degree", "tp_size", "tp_degree"), "tp"),
    **dict.fromkeys(("pipeline_parallel", "pipeline_model_parallel_size",
                     "pipeline_parallel_size", "pipeline_parallel_degree", "pp_size",
                     "pp_degree"), "pp"),
    **dict.fromkeys(("data_parallel", "data_parallel_size", "data_parallel_degree",
                     "data_parallel_shard_degree", "dp_size", "dp_degree"), "dp"),
    **dict.fromkeys(("context_parallel", "context_parallel_size", "context_parallel_degree",
                     "cp_size", "cp_degree"), "cp"),
    **dict.fromkeys(("expert_parallel", "expert_model_parallel_size", "expert_parallel_size",
                     "expert_parallel_degree", "ep_size"), "ep"),
    **dict.fromkeys(("expert_tensor_parallel_size", "expert_tensor_parallel_degree"),
                    "expert_tp"),
    **dict.fromkeys(("micro_batch_size", "micro_batch", "mbs", "microbatch",
                     "train_micro_batch_size_per_gpu", "local_batch_size"), "microbatch_size"),
    **dict.fromkeys(("global_batch", "gbs", "train_batch_size", "global_batch_size_tokens"),
                    "global_batch_size"),
    **dict.fromkeys(("virtual_pipeline_model_parallel_size", "virtual_pipeline_stages",
                     "vpp", "vp_size", "interleave"), "virtual_stages"),
    **dict.fromkeys(("seq_length", "sequence_length", "max_seq_len", "encoder_seq_length"),
                    "seq_len"),
    **dict.fromkeys(("recompute_granularity", "activation_checkpointing",
                     "activation_checkpoint", "recompute_activations"), "recompute"),
    **dict.fromkeys(("zero", "zero_optimization", "zero_optimization_stage",
                     "use_distributed_optimizer"), "zero_stage"),
    **dict.fromkeys(("sp", "sequence_parallelism"), "sequence_parallel"),
    **dict.fromkeys(("precision", "params_dtype", "mixed_precision_param"), "dtype"),
}


def framework_spelling(key: str) -> str | None:
    """The plan field a framework's spelling ``key`` names (``--tensor-model-parallel-size``,
    ``parallelism.tensor_parallel_degree``), or None."""
    norm = key.strip().lstrip("-").lower().replace("-", "_")
    return FRAMEWORK_SPELLINGS.get(norm) or FRAMEWORK_SPELLINGS.get(norm.rsplit(".", 1)[-1])


def field_suggestion(key: str, fields: list[str]) -> list[str]:
    """The ``fields`` to suggest for an unknown ``key``: the field a framework spelling
    names, else the closest by spelling."""
    field = framework_spelling(key)
    if field is not None and field in fields:
        return [field]
    return difflib.get_close_matches(key, fields, n=3)


def plan_field(key: str) -> str:
    """``key`` if it names a plan field (or ``placement.*``), else an :class:`InputError`
    with the field a framework's spelling means, or the closest field names."""
    if key not in Plan.model_fields and not key.startswith("placement."):
        field = framework_spelling(key)
        if field is not None:
            raise InputError(f"'{_short(key)[1:-1]}' is not a plan field; the plan calls it "
                             f"{field}")
        near = difflib.get_close_matches(key, list(Plan.model_fields), n=3)
        hint = f"; closest: {', '.join(near)}" if near else ""
        raise InputError(f"'{_short(key)[1:-1]}' is not a plan field{hint}")
    return key


def _mapping(value: Any, name: str, key: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InputError(f"--fix {key}: {name} is {_short(value)}, not a mapping; give "
                         f"{name}.FIELD=VALUE only")
    return dict(value)


def apply_overrides(data: dict[str, Any], overrides: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(data)
    for key, value in overrides:
        if key.startswith("placement."):
            sub = key.split(".", 1)[1]
            place = _mapping(out.get("placement") or {}, "placement", key)
            if sub.startswith("domain."):
                dom = _mapping(place.get("domain") or {}, "placement.domain", key)
                dom[sub.split(".", 1)[1]] = value
                place["domain"] = dom
            else:
                place[sub] = value
            out["placement"] = place
        else:
            out[key] = value
    return out
