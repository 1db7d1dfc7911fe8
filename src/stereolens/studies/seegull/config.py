"""The seegull study's config: the typed schema of ``study.seegull``, the types of its null-default keys, and
the names it must find elsewhere (the locales of SeeGULL Multilingual), checked at compose time and when a stage
loads its params.  Kept free of the study's heavier modules so that the schema imports cheaply."""

from __future__ import annotations

from typing import Any

from stereolens.config.schema import integer, list_of, mapping_of, number, one_of, section, text
from stereolens.errors import ConfigError

AGGREGATIONS = ("median", "mean")  # over templates, as the leakage study aggregates ILPS
REDUCTIONS = ("sum", "mean")       # of an attribute's token log-probabilities (null: the model kind's default)

# keys relative to study.seegull whose default is null
PARAM_TYPES = {"sample.per_verdict": int, "association.reduction": str, "analysis.cross_locale": list}

SCHEMA = section(
    data=text(), seed_dir=text(), locales=list_of(text(), min_items=1, unique=True),
    sample=section(per_verdict=integer(1, null=True), seed=integer(0)),
    association=section(templates=mapping_of(list_of(text(), min_items=1, unique=True)) | {"type": ["object", "null"]},
                        reduction=one_of(REDUCTIONS, null=True), aggregation=one_of(AGGREGATIONS),
                        batch_tokens=integer(1)),
    analysis=section(resamples=integer(0), confidence=number(above=0, below=1), seed=integer(0),
                     offensive_cut=number(-1, 4), min_aligned=integer(3),
                     cross_locale=list_of(list_of(text(), min_items=2) | {"maxItems": 2}, null=True)),
)


def check(cfg: dict[str, Any], config: dict[str, Any], *, where: str = "") -> None:
    """Every locale (and every locale of a cross-locale pair) must be a SeeGULL locale code (``es-MX``), and a
    pair's locales must be among ``locales``."""
    from stereolens.datasets.seegull import COUNTRIES, LANGUAGES

    known = {f"{lang}-{country}" for lang in LANGUAGES.values() for country in COUNTRIES.values()}
    locales = cfg.get("locales")
    if isinstance(locales, list):
        odd = [code for code in locales if code not in known]
        if odd:
            raise ConfigError(f"study.seegull.locales: {odd} are not SeeGULL locale codes such as es-MX "
                              f"(language code, '-', country code){where}")
    pairs = (cfg.get("analysis") or {}).get("cross_locale")
    if isinstance(pairs, list) and isinstance(locales, list):
        for pair in pairs:
            outside = [code for code in pair if code not in locales]
            if outside:
                raise ConfigError(f"study.seegull.analysis.cross_locale: {pair} names {outside}, not among "
                                  f"study.seegull.locales {locales}{where}")
