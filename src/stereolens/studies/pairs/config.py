"""The pairs study's config: the typed schema of ``study.pairs`` and the names it must find in its own group
list (construct groups, contrast map), checked at compose time and when a stage loads its params."""

from __future__ import annotations

from typing import Any

from stereolens.config.schema import GENERATOR, boolean, fraction, integer, list_of, mapping_of, number, section, text
from stereolens.errors import ConfigError

GROUP_CLASSES = ("hyperlocal", "pan_regional")  # group_classes.csv `class` (Figure 2's two kinds of group)
OVERALL = "all"  # the name of the overall row of the evaluation tables: no dimension may take it

SCHEMA = section(
    region=section(name=text(), adjective=text()), languages=list_of(text(), min_items=1, unique=True),
    generator=GENERATOR, construct_groups=list_of(text(), unique=True, null=True),
    attributes=section(n=integer(1), max_tokens=integer(1)),
    validation=section(annotators=integer(1), min_yes=integer(1), kappa_gate=number(-1, 1), enforce_gate=boolean(),
                       simulated_valid_share=fraction(), simulator=section(reliability=fraction())),
    sentences=section(per_tuple=integer(1), max_words=integer(1), min_words=integer(1),
                      near_duplicate_ratio=fraction(), max_tokens=integer(1)),
    groups={"type": "object", "additionalProperties": list_of(section(name=text()), min_items=1)},
    contrast={"type": "object", "additionalProperties": {"type": "object", "additionalProperties": text()}},
    translation=section(max_tokens=integer(1)),
    evaluation=section(bootstrap_resamples=integer(1), alpha=number(above=0, below=1),
                       starter_per_dimension=integer(1, null=True), crows=boolean(),
                       alternative_metric_pass=boolean()),
    # how an attribute is made to fit another group (minimal_pairs): phrases replaced, kept, or dropping the pair
    coupling=section(replace=mapping_of(text()), keep=list_of(text()), drop=list_of(text())),
)


def check(cfg: dict[str, Any], config: dict[str, Any], *, where: str = "") -> None:
    """Group names are unique, no dimension is called ``all``, construct groups exist, each contrast maps a
    group of a dimension to another group of the same dimension, and min_yes fits the annotators."""
    groups = cfg.get("groups")
    if isinstance(groups, dict):
        _check_groups(groups, cfg, where)
    validation = cfg.get("validation")
    if isinstance(validation, dict) and isinstance(validation.get("min_yes"), int) \
            and isinstance(validation.get("annotators"), int) and validation["min_yes"] > validation["annotators"]:
        raise ConfigError(f"study.pairs.validation.min_yes ({validation['min_yes']}) exceeds "
                          f"study.pairs.validation.annotators ({validation['annotators']}){where}")
    sentences = cfg.get("sentences")
    if isinstance(sentences, dict) and isinstance(sentences.get("min_words"), int) \
            and isinstance(sentences.get("max_words"), int) and sentences["min_words"] > sentences["max_words"]:
        raise ConfigError(f"study.pairs.sentences.min_words ({sentences['min_words']}) exceeds "
                          f"study.pairs.sentences.max_words ({sentences['max_words']}){where}")


def _check_groups(groups: dict[str, Any], cfg: dict[str, Any], where: str) -> None:
    members: dict[str, list[str]] = {}
    for dimension, rows in groups.items():
        if str(dimension).strip().lower() == OVERALL:
            raise ConfigError(f"study.pairs.groups.{dimension}: a dimension may not be called {OVERALL!r}, "
                              f"the name of the overall row{where}")
        names = [row.get("name") for row in rows or [] if isinstance(row, dict)]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ConfigError(f"study.pairs.groups.{dimension}: group(s) {repeated} listed twice{where}")
        members[str(dimension)] = names
    known = {name for names in members.values() for name in names}
    unknown = [g for g in cfg.get("construct_groups") or [] if g not in known]
    if unknown:
        raise ConfigError(f"study.pairs.construct_groups: {unknown} not in study.pairs.groups{where}")
    for dimension, mapping in (cfg.get("contrast") or {}).items():
        if dimension not in members:
            raise ConfigError(f"study.pairs.contrast.{dimension}: no such dimension in study.pairs.groups{where}")
        for group, partner in (mapping or {}).items():
            for role, name in (("group", group), ("contrast", partner)):
                if name not in members[dimension]:
                    raise ConfigError(f"study.pairs.contrast.{dimension}.{group}: {role} {name!r} is not a "
                                      f"{dimension} group in study.pairs.groups.{dimension}{where}")
            if group == partner:
                raise ConfigError(f"study.pairs.contrast.{dimension}.{group}: a group cannot contrast with "
                                  f"itself{where}")
