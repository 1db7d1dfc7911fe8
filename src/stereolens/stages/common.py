"""What every stage needs: its declared params, and the shared model cache."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from stereolens.errors import ConfigError


def load_params(*keys: str, path: str | os.PathLike = "params.yaml") -> dict[str, Any]:
    """Return ``{key: value}`` for dotted ``keys`` of the composed params file.

    Stages ask only for the keys they declare in ``dvc.yaml``, so a change to
    any other key never invalidates them; those keys are checked against their
    groups' typed schemas (:mod:`stereolens.config.schema`) before the stage
    does anything with them.
    """
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"params file not found: {path} (run `stereolens config compose`)")
    params = read_params_file(path)
    out: dict[str, Any] = {}
    for key in keys:
        node: Any = params
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                raise ConfigError(f"params key {key!r} not found in {path}")
            node = node[part]
        out[key] = node
    from stereolens.config.schema import check_config

    check_config(params, keys=keys, where=f" in {path}")
    if os.environ.get("DVC_STAGE") and os.environ.get("DVC_ROOT"):
        block = stage_block(Path(os.environ["DVC_ROOT"]) / "dvc.yaml", os.environ["DVC_STAGE"]) or {}
        if ANNOTATIONS_DIR in (block.get("deps") or []):  # a stage that reads human inputs
            warn_unseen_human_inputs(params, keys)
    return out


def stage_block(dvc_yaml: Path, stage_address: str) -> dict | None:
    """The stage's definition as ``dvc.yaml`` writes it (a foreach member's ``do`` block, by its base name),
    uninterpolated; None when the file or the stage cannot be read."""
    try:
        stages = (yaml.safe_load(dvc_yaml.read_text(encoding="utf-8")) or {}).get("stages") or {}
    except (OSError, yaml.YAMLError):
        return None
    block = stages.get(stage_address.split("@", 1)[0])
    return block.get("do", block) if isinstance(block, dict) else None


# Files people hand the pipeline (judgements, reviews, adjudications, annotator lists) are named by params, and
# DVC cannot see a file a param only names: replacing an export under the same name would not rerun the stage.
# dvc.yaml declares ANNOTATIONS_DIR a dependency of every stage that reads one of these keys, so a file kept
# there reruns what it feeds; such a stage, run by DVC, names in one line a file its params keep elsewhere.
ANNOTATIONS_DIR = "data/annotations"
HUMAN_INPUT_KEYS = (
    "annotation.annotator_map",
    "study.leakage.judgements.path",
    "study.pairs.validation.judgements", "study.pairs.sentences.review", "study.pairs.translation.reviewed",
    "study.pcs.human_validation.judgements",
    "study.stereo.validation.judgements", "study.stereo.validation.annotators", "study.stereo.instantiation.human",
    "study.stereo.instantiation.annotators", "study.stereo.overlap.adjudication",
)
_warned: set[str] = set()


def warn_unseen_human_inputs(params: Mapping[str, Any], keys: tuple[str, ...] | list[str]) -> list[str]:
    """Print, once per key, a one-line warning for each human input among ``keys`` kept outside
    ``data/annotations/`` (DVC would not rerun the stage when that file changes); return the keys warned of."""
    import sys

    warned = []
    for human_key in HUMAN_INPUT_KEYS:
        if human_key in _warned or not any(human_key == k or human_key.startswith(k + ".") for k in keys):
            continue
        node: Any = params
        for part in human_key.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if not isinstance(node, str) or not node:
            continue
        inside = Path(node).resolve().is_relative_to(Path(ANNOTATIONS_DIR).resolve())
        if not inside:
            _warned.add(human_key)
            warned.append(human_key)
            print(f"stereolens: warning: {human_key}={node} is outside {ANNOTATIONS_DIR}/, so `dvc repro` will not "
                  f"rerun this stage when that file changes; keep it under {ANNOTATIONS_DIR}/", file=sys.stderr)
    return warned


def read_params_file(path: str | os.PathLike) -> dict[str, Any]:
    """The parsed params file; a YAML syntax error is one line naming its line and column."""
    try:
        with open(path, encoding="utf-8") as fh:
            params = yaml.safe_load(fh)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        place = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}{place}: not valid YAML ({problem})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 (byte {exc.start})") from None
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise ConfigError(f"{path}: not a mapping of params (got a {type(params).__name__})")
    return params


def executor_config(path: str | os.PathLike = "params.yaml") -> dict[str, Any] | None:
    """The ``executor`` section (``conf/executor/``) for stages that run model work.

    None (run locally) when the params file predates the section, so params files
    written by hand for one stage keep working; stages that read it declare
    ``executor`` in dvc.yaml like any other key.
    """
    try:
        return load_params("executor", path=path)["executor"]
    except ConfigError as exc:
        if "not found in" in str(exc) and Path(path).exists():
            return None
        raise


def languages_to_run(study_languages: list[str], language_cfg: dict[str, Any]) -> list[str]:
    """A study's languages, restricted by the ``language`` config group's ``include``."""
    include = language_cfg.get("include")
    if include is None:
        return list(study_languages)
    return [lang for lang in study_languages if lang in set(include)]


def model_cache_dir() -> Path:
    """Where the content-addressed model cache lives (outside DVC: it survives every rerun)."""
    from stereolens.models.cache import CACHE_ENV, DEFAULT_CACHE_DIR

    from stereolens.io import project_path

    return project_path(os.environ.get(CACHE_ENV, DEFAULT_CACHE_DIR))


def stage_model(args: Any) -> dict[str, Any]:
    """The config of the model a per-model stage measures: ``models[args.model]``, or the primary
    ``model`` when the stage runs without ``--model``."""
    params_path = getattr(args, "params", "params.yaml")
    model_id = getattr(args, "model", None)
    if model_id is None:
        return dict(load_params("model", path=params_path)["model"])
    models = load_params("models", path=params_path)["models"] or {}
    if model_id not in models:
        raise ConfigError(f"--model {model_id}: not a model of this run (models in {params_path}: "
                          f"{', '.join(models) or 'none'}; add one with compare_with=[...])")
    return dict(models[model_id])


def run_model_ids(path: str | os.PathLike = "params.yaml") -> list[str]:
    """The ids of the run's models (``model_ids``, composed from ``models``: the primary, then compare_with),
    for a stage whose logged keys name every model of the run; a params file without it gives its ``models``
    keys, else the primary's id."""
    params = read_params_file(path) if Path(path).exists() else {}
    ids = params.get("model_ids") or list(params.get("models") or {})
    return [str(i) for i in ids] or [str((params.get("model") or {}).get("id"))]


def stage_params(args: Any, *keys: str) -> dict[str, Any]:
    """``load_params`` for a per-model stage: ``model`` and ``model.<key>`` come from :func:`stage_model`,
    every other key from the params file."""
    model_keys = [k for k in keys if k == "model" or k.startswith("model.")]
    out = load_params(*[k for k in keys if k not in model_keys], path=getattr(args, "params", "params.yaml"))
    if model_keys:
        model_cfg = stage_model(args)
        for key in model_keys:
            node: Any = model_cfg
            for part in key.split(".")[1:]:
                if not isinstance(node, Mapping) or part not in node:
                    raise ConfigError(f"params key {key!r} not found for model {model_cfg.get('id')!r}")
                node = node[part]
            out[key] = node
    return out
