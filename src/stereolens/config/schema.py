"""Typed config schemas: one JSON Schema per config group, checked when ``params.yaml`` is composed and
again when a stage loads its params, before DVC or a model touches anything.

Each study keeps its group's schema in its own ``studies/<study>/config.py`` as ``SCHEMA`` (built with the
helpers below) and, for names that must exist elsewhere (countries in the prompt templates, groups in the
group list, layers in the model), a ``check(study_cfg, config)`` function; the model, executor and the other
top-level groups are described here.  Keys a schema does not name are left to the type check of
:mod:`stereolens.config.compose` (the type of their default).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterable, Mapping
from typing import Any

from stereolens.errors import ConfigError
# the enumerated model fields: typed here so a wrong value is refused at compose time, not recorded in dvc.lock
from stereolens.models.base import DTYPES, REDUCED_PRECISION_POLICIES, VERIFY_PRECISIONS

STUDIES = ("crows", "heads", "leakage", "pairs", "pcs", "seegull", "stereo")


# --- building blocks (JSON Schema fragments) -------------------------------------------------------------------
def _typed(types: list[str], null: bool, **extra: Any) -> dict[str, Any]:
    return {"type": types + (["null"] if null else []), **{k: v for k, v in extra.items() if v is not None}}


def integer(minimum: int | None = None, maximum: int | None = None, *, null: bool = False) -> dict[str, Any]:
    return _typed(["integer"], null, minimum=minimum, maximum=maximum)


def number(minimum: float | None = None, maximum: float | None = None, *, above: float | None = None,
           below: float | None = None, null: bool = False) -> dict[str, Any]:
    """A real number in a range; ``above``/``below`` are exclusive bounds."""
    return _typed(["number"], null, minimum=minimum, maximum=maximum, exclusiveMinimum=above, exclusiveMaximum=below)


def fraction(*, null: bool = False) -> dict[str, Any]:
    """A share or probability: 0..1 inclusive."""
    return number(0, 1, null=null)


def boolean(*, null: bool = False) -> dict[str, Any]:
    return _typed(["boolean"], null)


def text(*, null: bool = False) -> dict[str, Any]:
    return _typed(["string"], null, minLength=1)


def one_of(values: Iterable[Any], *, null: bool = False) -> dict[str, Any]:
    allowed = list(values) + ([None] if null else [])
    return {"enum": allowed}


def either(*alternatives: Mapping[str, Any]) -> dict[str, Any]:
    """A value any one of ``alternatives`` allows (a number, or a word such as ``calibrated``)."""
    return {"anyOf": [dict(a) for a in alternatives]}


def list_of(item: Mapping[str, Any], *, min_items: int = 0, null: bool = False, unique: bool = False
            ) -> dict[str, Any]:
    return _typed(["array"], null, items=dict(item), minItems=min_items or None, uniqueItems=unique or None)


def section(null: bool = False, **properties: Mapping[str, Any]) -> dict[str, Any]:
    """A mapping whose named keys follow their schemas; other keys are allowed (their defaults type them)."""
    return _typed(["object"], null, properties={k: dict(v) for k, v in properties.items()})


# --- the top-level groups --------------------------------------------------------------------------------------
MODEL_KINDS = ("masked", "causal", "seq2seq", "chat", "completion")
MODEL = section(
    id=text(null=True), name=text(), kind=one_of(MODEL_KINDS), backend=text(null=True), dtype=one_of(DTYPES, null=True),
    reduced_precision=one_of(REDUCED_PRECISION_POLICIES, null=True), verify=one_of(VERIFY_PRECISIONS, null=True),
    device=text(null=True), batch_size=integer(1, null=True),
    revision=text(null=True), max_retries=integer(0, null=True), retry_base_s=number(0, null=True),
    timeout_s=number(above=0, null=True), max_concurrency=integer(1, null=True), base_url=text(null=True),
)
EXECUTOR = section(
    kind=one_of(("local", "ray")), address=text(null=True), actors=integer(1), num_cpus_per_actor=number(above=0),
    num_gpus_per_actor=number(0), shard_size=integer(1), local_num_cpus=integer(1, null=True),
    object_store_memory_mb=integer(1, null=True), runtime_env=section(null=True),
)
METRIC = section(name=text(), batch_tokens=integer(1), truncate=boolean())
LANGUAGE = section(include=list_of(text(), min_items=1, null=True))
TRACKING = section(enabled=boolean(), tracking_uri=text(null=True), artifact_location=text(null=True),
                   experiment=text(null=True))
ANNOTATION = section(
    source=one_of(("simulated", "human", "llm_panel")), quorum=integer(1), discard_median_at_or_below=number(),
    simulator=section(n_annotators=integer(1), reliability=fraction(), bias=number(), seed=integer(0)),
    thresholds=section(min_fleiss_kappa=number(-1, 1, null=True), min_krippendorff_alpha=number(-1, 1, null=True),
                       min_cohen_kappa=number(-1, 1, null=True), min_raw_agreement=fraction(null=True),
                       min_annotations_per_item=integer(1, null=True),
                       min_annotations_per_group=integer(1, null=True),
                       # null turns a check off (quality.suites.AnnotationThresholds)
                       max_failing_annotator_share=fraction(null=True), max_top_label_share=fraction(null=True)),
    bootstrap=section(n_boot=integer(1), confidence=number(above=0, below=1),
                      ci_method=text()),
)
GENERATOR = {**MODEL, "type": ["object", "null"]}  # a study's own generator: a model config, or null for ``model``
MODELS_TABLE = {"type": "object", "additionalProperties": MODEL}  # ``models``: id -> model config


def mapping_of(value: Mapping[str, Any]) -> dict[str, Any]:
    """A mapping from free names (groups, phrases, datasheet questions) to values of one schema."""
    return {"type": "object", "additionalProperties": dict(value)}


# ``release.<study>`` (conf/study/<study>/release/, read by lineage/release.py's ReleaseSpec)
RELEASE = section(
    title=text(), dataset=list_of(text(), min_items=1), gates=list_of(text()), agreement=list_of(text()),
    items=list_of(section(path=text(), id=list_of(text()))), datasheet=mapping_of(text()),
)

TOP_LEVEL = {"model": MODEL, "executor": EXECUTOR, "metric": METRIC, "language": LANGUAGE, "tracking": TRACKING,
             "annotation": ANNOTATION, "seed": integer(0), "models": MODELS_TABLE,
             "compare_with": list_of(text(), null=True), "release": mapping_of(RELEASE)}


def _study_module(study: str):
    return importlib.import_module(f"stereolens.studies.{study}.config")


@functools.cache
def full_schema() -> dict[str, Any]:
    """The schema of a whole composed config: the top-level groups here, each study's from its config.py."""
    studies = {study: getattr(_study_module(study), "SCHEMA", section()) for study in STUDIES}
    return section(**TOP_LEVEL, study=section(**studies))


# --- checking ---------------------------------------------------------------------------------------------------
def _subschema(schema: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    node: Mapping[str, Any] | None = schema
    for part in key.split("."):
        props = (node or {}).get("properties")
        if props and part in props:
            node = props[part]
        elif (node or {}).get("additionalProperties"):
            node = node["additionalProperties"]  # type: ignore[index]
        else:
            return None
    return node


def describe(schema: Mapping[str, Any]) -> str:
    """``schema`` in words, for the refusal."""
    if "anyOf" in schema:
        return " or ".join(describe(alternative) for alternative in schema["anyOf"])
    if "enum" in schema:
        allowed = [v for v in schema["enum"] if v is not None]
        return f"one of {allowed}" + (" (or null)" if None in schema["enum"] else "")
    declared = schema.get("type", [])
    declared = [declared] if isinstance(declared, str) else declared
    types = [t for t in declared if t != "null"]
    words = {"integer": "an integer", "number": "a number", "boolean": "true or false", "string": "a non-empty text",
             "array": "a list", "object": "a mapping"}
    out = " or ".join(words.get(t, t) for t in types)
    low = ("[", schema["minimum"]) if "minimum" in schema else ("(", schema.get("exclusiveMinimum"))
    high = ("]", schema["maximum"]) if "maximum" in schema else (")", schema.get("exclusiveMaximum"))
    if low[1] is not None and high[1] is not None:
        out += f" in {low[0]}{low[1]}, {high[1]}{high[0]}"
    elif low[1] is not None:
        out += f" {'>=' if low[0] == '[' else '>'} {low[1]}"
    elif high[1] is not None:
        out += f" {'<=' if high[0] == ']' else '<'} {high[1]}"
    if schema.get("minItems") and schema.get("minItems") == schema.get("maxItems"):
        out += f" of {schema['minItems']} item(s)"
    elif schema.get("minItems"):
        out += f" of at least {schema['minItems']} item(s)"
    if "items" in schema and "array" in types:
        out += f" of {describe(schema['items'])}"
    if schema.get("uniqueItems"):
        out += " without repeats"
    return out + (" (or null)" if "null" in declared else "")


def first_violation(schema: Mapping[str, Any], value: Any) -> tuple[list[str | int], str] | None:
    """The first place in ``value`` that ``schema`` refuses, as (path of keys and list positions, what is wrong in
    words: ``missing`` for a required key, else ``must be ..., got ...``); None when ``value`` conforms."""
    from jsonschema import Draft202012Validator

    errors = sorted(Draft202012Validator(schema).iter_errors(value), key=lambda e: [str(p) for p in e.absolute_path])
    if not errors:
        return None
    error = errors[0]
    path = list(error.absolute_path)
    if error.validator == "required":
        missing = next(name for name in error.validator_value if name not in error.instance)
        return [*path, missing], "missing"
    leaf = error.schema if error.validator != "items" else error.schema.get("items", error.schema)
    return path, f"must be {describe(leaf)}, got {error.instance!r}"


def _refusal(key: str, error: Any, where: str) -> ConfigError:
    path = ".".join([key, *(str(p) for p in error.absolute_path)])
    leaf = error.schema if error.validator != "items" else error.schema.get("items", error.schema)
    value = error.instance
    return ConfigError(f"{path} must be {describe(leaf)}, got {value!r}{where}")


def check_value(key: str, value: Any, *, where: str = "", schema: Mapping[str, Any] | None = None) -> None:
    """Refuse, in one line naming the dotted key, a value of ``key`` its group's schema does not allow."""
    from jsonschema import Draft202012Validator

    sub = _subschema(schema if schema is not None else full_schema(), key)
    if sub is None:
        return
    errors = sorted(Draft202012Validator(sub).iter_errors(value), key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        raise _refusal(key, errors[0], where)


def check_config(config: Mapping[str, Any], *, where: str = "", keys: Iterable[str] | None = None) -> None:
    """Check ``keys`` (default: every top-level key) of a composed config against the schema, then each study's
    own ``check`` (names that must exist: countries, groups, layers)."""
    schema = full_schema()
    keys = list(keys) if keys is not None else list(config)
    for key in keys:
        node: Any = config
        for part in key.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if node is not None:
            check_value(key, node, where=where, schema=schema)
    for study in STUDIES:
        prefix = f"study.{study}"
        if not any(prefix.startswith(k) or k.startswith(prefix) for k in keys):
            continue
        study_cfg = (config.get("study") or {}).get(study)
        check = getattr(_study_module(study), "check", None)
        if check is not None and isinstance(study_cfg, Mapping):
            check(study_cfg, config, where=where)
