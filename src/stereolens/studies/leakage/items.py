"""Templated association items (one sentence with a trait slot per template, group and trait word) and
their aggregation into group-trait scores: the items SeT and ILPS score."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from stereolens.errors import ConfigError, DataError
from stereolens.studies.leakage.lexicon import Lexicon

GENERIC = "__generic__"  # the group id of prior ("people") items

TemplateAggregation = Literal["median", "mean"]


@dataclass(frozen=True)
class AssociationItem:
    """One templated sentence with a trait slot: ``prefix + trait + suffix``."""

    language: str
    template_id: str
    group: str  # a group id, or GENERIC for the prior sentence
    trait: str
    trait_word: str
    prefix: str
    suffix: str

    @property
    def sentence(self) -> str:
        return self.prefix + self.trait_word + self.suffix

    @property
    def key(self) -> tuple[str, str, str]:
        """What the prior of a group item is matched on: (template, trait, trait word)."""
        return (self.template_id, self.trait, self.trait_word)



def select_words(df: pd.DataFrame, **where: str) -> pd.DataFrame:
    mask = np.ones(len(df), dtype=bool)
    for col, value in where.items():
        mask &= (df[col] == value).to_numpy()
    return df[mask]


def trait_forms(lex: Lexicon, language: str, trait: str, gender: str, number: str) -> list[str]:
    """Trait words agreeing with (gender, number): exact form, number-only form, then the base form."""
    rows = select_words(lex.trait_words, language=language, trait=trait)
    if rows.empty:
        raise DataError(f"trait_words.csv has no {language!r} word for trait {trait!r}")
    for form in (f"{gender}_{number}" if gender else None, number, "base"):
        if form is None:
            continue
        found = rows[rows["form"] == form]
        if not found.empty:
            return list(dict.fromkeys(found["word"]))  # several rows = synonyms
    return list(dict.fromkeys(rows["word"]))


def _capitalise(text: str) -> str:
    return text[:1].upper() + text[1:] if text[:1].isalpha() else text


def template_rows(lex: Lexicon, language: str, template_ids: Sequence[str] | None) -> pd.DataFrame:
    rows = lex.templates[lex.templates["language"] == language]
    if rows.empty:
        raise ConfigError(f"templates.csv has no templates for language {language!r}")
    if template_ids is not None:
        unknown = sorted(set(template_ids) - set(rows["template_id"]))
        if unknown:
            raise ConfigError(f"template id(s) {unknown} not in templates.csv for {language!r} (have {sorted(set(rows['template_id']))})")
        rows = rows[rows["template_id"].isin(template_ids)]
    return rows


def _render(template: str, group_word: str) -> tuple[str, str]:
    if template.count("{trait}") != 1 or template.count("{group}") != 1:
        raise DataError(f"template {template!r} needs exactly one {{group}} and one {{trait}}")
    prefix, suffix = template.split("{trait}")
    if "{group}" in prefix:
        prefix = prefix.replace("{group}", group_word)
        prefix = _capitalise(prefix)
    else:
        suffix = suffix.replace("{group}", group_word)
        prefix = _capitalise(prefix)
    return prefix, suffix


def build_items(
    lex: Lexicon,
    language: str,
    *,
    template_ids: Sequence[str] | None = None,
    groups: Sequence[str] | None = None,
    traits: Sequence[str] | None = None,
    include_prior: bool = True,
) -> list[AssociationItem]:
    """Group items for every (template, group, trait, synonym) plus the generic-word prior items.

    A template row with ``gender`` m/f is used for groups of that grammatical
    gender and ``any`` for the rest; trait words agree with the group (or with
    the generic word in prior items).
    """
    rows = template_rows(lex, language, template_ids)
    groups = list(groups) if groups is not None else lex.group_order
    traits = list(traits) if traits is not None else lex.trait_order
    items: list[AssociationItem] = []
    # a trait's agreeing forms depend on (trait, gender, number) only: looked up once each, not once per
    # template and group word (a lookup filters the whole trait-word table; the paper's design made
    # tens of thousands of them, and `stereolens plan --study leakage study/leakage=paper` ran past 600 s)
    forms: dict[tuple[str, str, str], list[str]] = {}
    subjects: list[tuple[str, pd.DataFrame]] = [(g, select_words(lex.group_words, language=language, group=g)) for g in groups]
    if include_prior:
        subjects.append((GENERIC, select_words(lex.generic_words, language=language)))
    for template_id, variants in rows.groupby("template_id", sort=False):
        number = variants["number"].iloc[0]
        for group, words in subjects:
            words = words[words["form"] == number]
            if words.empty:
                what = "generic_words.csv" if group == GENERIC else f"group_words.csv group {group!r}"
                raise DataError(f"{what} has no {language!r} word of form {number!r} (template {template_id})")
            for _, w in words.iterrows():
                gender = w["gender"] or ""
                chosen = variants[variants["gender"] == gender] if gender else variants.iloc[0:0]
                if chosen.empty:
                    chosen = variants[variants["gender"] == "any"]
                if chosen.empty:
                    raise DataError(f"templates.csv {language}/{template_id}: no variant for gender {gender or 'none'!r} or 'any'")
                prefix, suffix = _render(chosen["template"].iloc[0], w["word"])
                for trait in traits:
                    key = (trait, gender, number)
                    if key not in forms:
                        forms[key] = trait_forms(lex, language, trait, gender, number)
                    for trait_word in forms[key]:
                        items.append(AssociationItem(language, str(template_id), group, trait, trait_word, prefix, suffix))
    return items


def aggregate_scores(
    items: Sequence[AssociationItem],
    raw: Sequence[float],
    *,
    template_aggregation: TemplateAggregation = "median",
    subtract_prior: bool = True,
) -> pd.DataFrame:
    """Long table (group, trait, score, target, prior, n_items) from per-item raw scores.

    score = aggregate over templates/synonyms of (raw(group item) - raw(prior item with the same template,
    trait and trait word)); when the prior item used another trait form (gender agreement), the prior of
    the same template and trait is averaged over its forms.
    """
    if len(items) != len(raw):
        raise ValueError(f"{len(items)} items but {len(raw)} scores")
    df = pd.DataFrame(
        {
            "group": [it.group for it in items],
            "trait": [it.trait for it in items],
            "template_id": [it.template_id for it in items],
            "trait_word": [it.trait_word for it in items],
            "raw": np.asarray(raw, dtype=float),
        }
    )
    prior = df[df["group"] == GENERIC]
    target = df[df["group"] != GENERIC].copy()
    if subtract_prior:
        if prior.empty:
            raise ValueError("subtract_prior needs the generic prior items (build_items(include_prior=True))")
        exact = prior.groupby(["template_id", "trait", "trait_word"])["raw"].mean()
        loose = prior.groupby(["template_id", "trait"])["raw"].mean()
        keys = list(zip(target["template_id"], target["trait"], target["trait_word"]))
        target["prior"] = [
            exact.get(k, loose.get((k[0], k[1]), np.nan)) for k in keys
        ]
        target["diff"] = target["raw"] - target["prior"]
    else:
        target["prior"] = np.nan
        target["diff"] = target["raw"]
    if template_aggregation not in ("median", "mean"):
        raise ConfigError(f"template aggregation must be median or mean, got {template_aggregation!r}")
    grouped = target.groupby(["group", "trait"], sort=False)
    out = grouped.agg(
        score=("diff", template_aggregation),
        target=("raw", template_aggregation),
        prior=("prior", template_aggregation),
        n_items=("diff", "count"),
    ).reset_index()
    return out


def to_matrix(long: pd.DataFrame, traits: Sequence[str], groups: Sequence[str], value: str = "score") -> pd.DataFrame:
    """traits x groups matrix (index ``Traits``) in the H_<LANG>.csv layout's order."""
    m = long.pivot(index="trait", columns="group", values=value).reindex(index=list(traits), columns=list(groups))
    m.index.name = "Traits"
    m.columns.name = None
    return m
